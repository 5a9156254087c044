"""A preemption decision and its rationale: what the planner chose and why, as plain data.

The JSON form is the planner contract of `preemptctl plan` and the payload the ledger keeps
for a decision, so its field names are part of the product's interface.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from preemptctl.preemption.objects import Pod

PLANNER_VERSION = "1"


class Verdict(StrEnum):
    """What the planner concluded for one preemptor: the one vocabulary the plan output, the
    workflow, the ledger and the CLI share."""

    PREEMPT = "Preempt"
    FITS_WITHOUT_PREEMPTION = "FitsWithoutPreemption"
    INELIGIBLE = "Ineligible"
    UNSCHEDULABLE = "Unschedulable"
    # The preemptor needs a filter the planner does not model soundly: it refuses rather than
    # guesses, and never names a victim.
    UNSUPPORTED = "Unsupported"


class Strategy(StrEnum):
    DEFAULT = "default"
    CRITICAL_ADMISSION = "critical-admission"


@dataclass(frozen=True, slots=True)
class PodRef:
    """A pod named the way every write to it must name it: namespace, name and UID (the UID
    pins the exact pod, not whatever pod has that name now: StatefulSets recreate pods under
    the same name). One type from the planner's decision to the gateway and the ledger."""

    namespace: str
    name: str
    uid: str
    priority: int = 0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def of(cls, pod: Pod) -> PodRef:
        return cls(pod.namespace, pod.name, pod.uid, pod.priority)

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "priority": self.priority,
        }


@dataclass(frozen=True, slots=True)
class NodeEvaluation:
    """What the dry run found on one node: a candidate (with victims) or why not."""

    node: str
    candidate: bool
    reasons: tuple[str, ...] = ()
    victims: tuple[str, ...] = ()
    num_pdb_violations: int = 0
    filter: str = ""  # the filter (plugin) that rejected the node

    def to_json(self) -> dict[str, Any]:
        shown: dict[str, Any] = {
            "node": self.node,
            "result": "candidate" if self.candidate else "rejected",
        }
        if self.candidate:
            shown["victims"] = list(self.victims)
            shown["numPDBViolations"] = self.num_pdb_violations
        else:
            shown["reasons"] = list(self.reasons)
            if self.filter:
                shown["filter"] = self.filter
        return shown


@dataclass(frozen=True, slots=True)
class SelectionStep:
    """One `pickOneNodeForPreemption` criterion and the candidates still tied after it."""

    criterion: str
    kept: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"criterion": self.criterion, "kept": list(self.kept)}


@dataclass(slots=True)
class Rationale:
    """Why the planner decided as it did, node by node and criterion by criterion."""

    strategy: Strategy
    nodes_total: int = 0
    filtered: dict[str, int] = field(default_factory=dict)
    unresolvable: dict[str, list[str]] = field(default_factory=dict)
    # Which filter (plugin) gave each reason of `filtered` and `unresolvable`.
    filters: dict[str, str] = field(default_factory=dict)
    fits: list[str] = field(default_factory=list)
    potential_nodes: int = 0
    offset: int = 0
    candidates_wanted: int = 0
    evaluated: list[NodeEvaluation] = field(default_factory=list)
    stopped_early: bool = False
    selection: list[SelectionStep] = field(default_factory=list)
    deciding_criterion: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        shown: dict[str, Any] = {
            "strategy": str(self.strategy),
            "plannerVersion": PLANNER_VERSION,
            "nodesTotal": self.nodes_total,
            "filtered": self.filtered,
            "unresolvable": self.unresolvable,
            "filters": self.filters,
        }
        if self.fits:
            shown["fits"] = self.fits
        if self.strategy is Strategy.DEFAULT:
            shown["dryRun"] = {
                "potentialNodes": self.potential_nodes,
                "offset": self.offset,
                "candidatesWanted": self.candidates_wanted,
                "evaluated": len(self.evaluated),
                "stoppedEarly": self.stopped_early,
            }
        shown["evaluated"] = [verdict.to_json() for verdict in self.evaluated]
        shown["selection"] = [step.to_json() for step in self.selection]
        shown["decidingCriterion"] = self.deciding_criterion
        shown.update(self.details)
        return shown


@dataclass(slots=True)
class Decision:
    """The planner's answer for one preemptor (see DESIGN.md, the planner contract)."""

    preemptor: PodRef
    verdict: Verdict
    message: str
    rationale: Rationale
    nominated_node: str | None = None
    victims: tuple[PodRef, ...] = ()
    num_pdb_violations: int = 0
    nominated_pods_to_clear: tuple[PodRef, ...] = ()
    # FitsWithoutPreemption while the pod's PodScheduled condition says the scheduler found
    # no node: one of the two is out of date. Nothing is evicted; the pod is retried later.
    scheduler_disagrees: bool = False

    def to_json(self) -> dict[str, Any]:
        """The planner contract's JSON, under its names: the verdict is its `status`."""
        return {
            "preemptor": self.preemptor.key,
            "status": str(self.verdict),
            "schedulerDisagrees": self.scheduler_disagrees,
            "nominatedNode": self.nominated_node,
            "victims": [victim.to_json() for victim in self.victims],
            "numPDBViolations": self.num_pdb_violations,
            "nominatedPodsToClear": [pod.key for pod in self.nominated_pods_to_clear],
            "message": self.message,
            "rationale": self.rationale.to_json(),
        }

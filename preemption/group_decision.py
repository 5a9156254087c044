"""A pod group's preemption decision: what the planner chose for a pending group, and why.

Its JSON is the contract of `preemptctl plan --pod-group` (DESIGN.md, "Workloads"): the
group, the verdict (under the key `status`), a nominated node per placed pod, the victims
in upstream order, how many of them violate a PodDisruptionBudget, a message, and the
rationale. The worker keeps the rest to act on it: which victims go together and why
(`units`), and the pods placed with their nodes (`nominations`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from preemptctl.preemption.decision import PodRef, Verdict

# The namespace of label-named groups' synthetic UIDs (uuid5): fixed forever, since a group's
# workflow ID and ledger rows are derived from its UID.
LABEL_GROUP_NAMESPACE = uuid.UUID("0f4b6d0e-6a0c-5d55-9b57-7b9e8f1a2c31")


def label_group_uid(namespace: str, value: str) -> str:
    """The stable UID of the group a pod label names (no object of its own carries one): the
    same for every trigger, worker and run, so its workflow ID is stable too."""
    return str(uuid.uuid5(LABEL_GROUP_NAMESPACE, f"{namespace}/{value}"))


@dataclass(frozen=True, slots=True)
class GroupRef:
    """A pod group named the way a preemption names it: namespace, name, UID and priority.

    For a PodGroup the UID is the object's; for a group a pod label names (a setting), a
    synthetic one (`label_group_uid`). JSON-friendly (plain fields) for workflow inputs."""

    namespace: str
    name: str
    uid: str
    priority: int = 0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def label_named(self) -> bool:
        """A group a pod label names rather than a PodGroup object."""
        return self.uid == label_group_uid(self.namespace, self.name)

    def as_preemptor(self) -> PodRef:
        """The group in the ledger's preemptor columns (namespace, name, UID, priority): a
        group preemption's preemptor is its group."""
        return PodRef(self.namespace, self.name, self.uid, self.priority)

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "priority": self.priority,
        }


@dataclass(frozen=True, slots=True)
class UnitChoice:
    """One victim unit taken: its pods (on any node) and why it could not be reprieved."""

    unit: str  # e.g. "podGroup ml/train-b", "pod default/web-1"
    whole: bool  # a group taken whole (disruptionMode all, or a label-named group)
    priority: int
    pods: tuple[PodRef, ...]
    nodes: tuple[str, ...]  # where its pods are
    pdb_violations: int  # how many of its pods a budget does not allow
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "whole": self.whole,
            "priority": self.priority,
            "pods": [pod.key for pod in self.pods],
            "nodes": list(self.nodes),
            "pdbViolations": self.pdb_violations,
            "reason": self.reason,
        }


@dataclass(slots=True)
class GroupDecision:
    """The planner's answer for one pending pod group (see the module docstring)."""

    pod_group: str  # "namespace/name"
    uid: str
    verdict: Verdict
    message: str
    nominations: dict[str, str] = field(default_factory=dict)  # "ns/pod" -> node
    victims: tuple[PodRef, ...] = ()
    units: tuple[UnitChoice, ...] = ()
    num_pdb_violations: int = 0
    rationale: dict[str, Any] = field(default_factory=dict)

    @property
    def nodes(self) -> tuple[str, ...]:
        """Every node the decision touches: where pods are placed and victims removed."""
        touched = set(self.nominations.values())
        for unit in self.units:
            touched.update(unit.nodes)
        return tuple(sorted(touched))

    def unit_of(self, victim: PodRef) -> UnitChoice | None:
        """The unit a victim goes with."""
        for unit in self.units:
            if any(pod.uid == victim.uid for pod in unit.pods):
                return unit
        return None

    def to_json(self) -> dict[str, Any]:
        """The `plan --pod-group` contract's JSON, plus the rationale."""
        return {
            "podGroup": self.pod_group,
            "status": str(self.verdict),
            "nominations": dict(sorted(self.nominations.items())),
            "victims": [victim.to_json() for victim in self.victims],
            "numPDBViolations": self.num_pdb_violations,
            "message": self.message,
            "rationale": {**self.rationale, "units": [unit.to_json() for unit in self.units]},
        }

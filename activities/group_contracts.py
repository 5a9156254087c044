"""The data that crosses between the group preemption workflow and its activities.

As `activities.contracts` (plain dataclasses that stay readable JSON in the history; add
fields with defaults, never rename one). A group preemption's victims are marked and
unmarked by the pod preemption's own activities (`mark_victim`, `unmark_victim`, with a
`VictimInput` whose preemptor is the group, `GroupRef.as_preemptor`, and whose node is the
victim's); what differs has its contract here: the decision for a group, the nominations
of its members, the delete that re-checks the group, the group's standing, its end.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from preemptctl.activities.contracts import (
    DecisionStory,
    Nomination,
    RunRef,
    VictimFate,
    VictimInput,
    VictimPodGroup,
    VictimRound,
    Written,
)
from preemptctl.ledger.vocabulary import WORKFLOW_OUTCOMES, Outcome
from preemptctl.preemption.decision import PodRef, Verdict
from preemptctl.preemption.group_decision import GroupRef


@dataclass
class SelectGroupInput:
    run: RunRef
    group: GroupRef
    dry_run: bool = False
    throttled: int = 0  # how many times the eviction budget held this run back already
    started_by: str = "trigger"  # the workflow's GroupPreemptionRequest.started_by
    retry_reason: str = ""


@dataclass
class VictimPlacement:
    """A victim, the node it is on, and the unit it goes with ("podGroup ml/train-b",
    "pod default/web-1": a group taken whole goes whole)."""

    pod: PodRef
    node: str
    unit: str = ""


@dataclass
class GroupSelection:
    """What the select activity decided for the group and wrote ahead.

    As `Selection`: `verdict` None when the run stopped before planning (the group is gone,
    replaced, or has no pending member: `message` says which); `retry_after_seconds` > 0
    when the eviction budget held the decision back; `dry_run` when it was decided and
    recorded as a dry run (asked for, or the worker runs dry). `story` is the decision in
    words, for the workflow's details and result in the UI."""

    group: GroupRef
    message: str
    verdict: Verdict | None = None
    placements: list[Nomination] = field(default_factory=list)
    victims: list[VictimPlacement] = field(default_factory=list)
    victim_groups: list[str] = field(default_factory=list)  # "ns/name" of pod groups hit
    nominations_to_clear: list[Nomination] = field(default_factory=list)
    min_count: int = 1
    num_pdb_violations: int = 0
    scheduler_name: str = "default-scheduler"
    retry_after_seconds: float = 0.0
    dry_run: bool = False
    story: DecisionStory | None = None
    terminating: list[str] = field(default_factory=list)  # as `Selection.terminating`
    victim_pod_groups: list[VictimPodGroup] = field(default_factory=list)  # as `Selection`'s
    ended_as: Outcome | None = None  # as `Selection.ended_as`


@dataclass
class MembersNomination:
    """Nominate every placed member to its node, and clear the lower-priority nominations
    to those nodes (`clear`)."""

    run: RunRef
    group: GroupRef
    placements: list[Nomination]
    clear: list[Nomination] = field(default_factory=list)
    record: bool = True  # as `NominationInput.record`


@dataclass
class MembersNominated:
    """How many nominations the API server settled, and each one that could not be made
    (the preemption goes on without it, as upstream's does); `writes` as
    `NominationResult.writes`."""

    nominated: int = 0
    errors: list[str] = field(default_factory=list)
    writes: list[Written] = field(default_factory=list)


@dataclass
class GroupVictimInput:
    """A victim's delete for a group: the victim step, and what the group still needing the
    room means (`placements`: each placed member and the node it was placed on)."""

    step: VictimInput
    group: GroupRef
    placements: list[Nomination] = field(default_factory=list)


@dataclass
class GroupVictimRound:
    """A round of a group's victims deleted in one step (as `GroupVictimInput` for one)."""

    round: VictimRound
    group: GroupRef
    placements: list[Nomination] = field(default_factory=list)


@dataclass
class GroupCheck:
    """Where the group stands: its object, and its `members` (the placed ones), which are
    read one by one from the API server when the worker has no cluster view."""

    group: GroupRef
    members: list[PodRef] = field(default_factory=list)


@dataclass
class GroupEndInput:
    """How a group run ends, for the ledger append the workflow makes itself (completed,
    failed, aborted): `bound` members of `min_count` when it ended; `placements`, each
    member the decision placed and its node (a failed run warns each of them)."""

    run: RunRef
    group: GroupRef
    outcome: Outcome
    message: str = ""
    bound: int = 0
    min_count: int = 1
    seconds_to_schedule: float | None = None
    failed_victim: PodRef | None = None
    failed_victim_node: str | None = None
    retryable: bool = True
    victims: list[VictimFate] = field(default_factory=list)  # as `EndInput.victims`
    writes: list[Written] = field(default_factory=list)
    runbook: int = 1  # as `EndInput.runbook`
    placements: list[Nomination] = field(default_factory=list)
    victim_pod_groups: list[VictimPodGroup] = field(default_factory=list)  # as `EndInput`'s

    def __post_init__(self) -> None:
        if self.outcome not in WORKFLOW_OUTCOMES:
            raise ValueError(
                f"the workflow records only {sorted(WORKFLOW_OUTCOMES)}, not {self.outcome!r}: "
                "the decision's write-ahead records the others"
            )

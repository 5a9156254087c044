"""The data that crosses between the preemption workflow and its activities.

Plain dataclasses of strings, numbers, enums and lists: Temporal stores each in the
workflow's history, where the UI shows it and a replay reads it back, so they must stay
readable JSON and stay compatible (add fields with defaults; never rename one).

Every activity that changes the cluster also appends its own ledger event, in the same
attempt and under the same idempotency key whichever attempt it is; so each input names the
run (`preemption_id`, `run_id`) and carries the workflow's clock (`occurred_at`, ISO 8601).

The workflow's own input, result and query answer are its contract, beside it
(`workflows.contract`); `check_preemptor` answers with the domain's `PreemptorStanding`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from preemptctl.ledger.vocabulary import WORKFLOW_OUTCOMES, Fate, Outcome
from preemptctl.preemption.decision import PodRef, Strategy, Verdict
from preemptctl.preemption.group_decision import GroupRef


@dataclass
class RunRef:
    """Which run an activity works for, and when (the workflow's clock, ISO 8601)."""

    preemption_id: str
    run_id: str
    occurred_at: str


@dataclass
class DecisionStory:
    """A decision in words, for people reading a preemption in the Temporal UI: what it does
    (`headline`), to whom (`victims`, each named with its UID), why (`why`: the planner's
    own words, the criterion that decided included) and where to read more (`explain`, a
    command). The select activity tells it; the workflow shows it (its details, its
    result)."""

    headline: str
    victims: list[str] = field(default_factory=list)
    why: str = ""
    explain: str = ""

    def markdown(self) -> str:
        """For the workflow's details (the UI renders Markdown)."""
        parts = [f"**{self.headline}**"]
        if self.victims:
            parts.append("\n".join(f"- {victim}" for victim in self.victims))
        if self.why:
            parts.append(f"Why: {self.why}")
        if self.explain:
            parts.append(f"More: `{self.explain}`")
        return "\n\n".join(parts)

    def line(self) -> str:
        """In one line, for the workflow's result."""
        told = self.headline
        if self.victims:
            told += ": " + ", ".join(self.victims)
        if self.why:
            told += f". Why: {self.why}"
        if self.explain:
            told += f". More: {self.explain}"
        return told


@dataclass
class VictimPodGroup:
    """A PodGroup some of a run's victims belong to (a gang taken whole, or members of a
    group taken one by one), as the select step found it: the object, for the `Preempted`
    Event the run's end posts on it, and the UIDs of its victims in this run, whose fates
    say how many of its pods were preempted (`activities.victim_groups`)."""

    group: GroupRef
    victims: list[str] = field(default_factory=list)


@dataclass
class SelectInput:
    run: RunRef
    preemptor: PodRef
    strategy: Strategy = Strategy.DEFAULT
    dry_run: bool = False
    throttled: int = 0  # how many times the eviction budget held this run back already
    started_by: str = "trigger"  # the workflow's PreemptionRequest.started_by
    retry_reason: str = ""  # the workflow's PreemptionRequest.retry_reason


@dataclass
class Selection:
    """What the select activity decided and wrote ahead.

    `verdict` is the planner's; None when the run stopped before planning (the preemptor is
    gone, replaced, or already bound: `message` says which, and the ledger has the
    `preemption_aborted` event). `retry_after_seconds` > 0: the eviction budget held the
    decision back (recorded as `throttled`); decide again after that long. `dry_run`: the
    decision was made and recorded as a dry run, because the request asked for one or
    because the worker runs dry whatever the request says (then nothing is touched).
    `story`: the decision in words (`DecisionStory`)."""

    preemptor: PodRef
    message: str
    verdict: Verdict | None = None
    node: str | None = None
    victims: list[PodRef] = field(default_factory=list)
    nominations_to_clear: list[PodRef] = field(default_factory=list)
    num_pdb_violations: int = 0
    scheduler_name: str = "default-scheduler"
    retry_after_seconds: float = 0.0
    dry_run: bool = False
    story: DecisionStory | None = None  # the decision in words (none before it was told)
    # The UIDs of the victims the view showed terminating when the decision was made: their
    # deletion has begun, so no call is sent for them (upstream's prepareCandidate skips
    # them too), and the step that finds a victim terminating knows it was not so before.
    terminating: list[str] = field(default_factory=list)
    # The preemptor's nomination as the decision saw it: what nominating it overwrites.
    nominated_node_seen: str | None = None
    # Each victim's own node, by UID (a gang taken whole for one pod has members on other
    # nodes than `node`); a victim missing here is on `node`.
    victim_nodes: dict[str, str] = field(default_factory=dict)
    # The PodGroups its victims belong to, for their `Preempted` Events at the run's end.
    victim_pod_groups: list[VictimPodGroup] = field(default_factory=list)
    # The unit of several pods each victim is taken with, by UID ("podGroup ml/train-b"; a
    # victim taken alone is not in it): a run that stops never leaves such a unit in part.
    victim_units: dict[str, str] = field(default_factory=dict)
    # A resumed run that had recorded its own end already (`activities.resumed.ended_as`):
    # the workflow ends so, without its steps and without recording the end again.
    ended_as: Outcome | None = None


@dataclass
class Nomination:
    """A pod's nomination to a node: a placed member's, to set (the node the decision placed
    it on; `seen`: its nomination as the decision saw it), or a lower-priority pod's, to
    clear (the node it is nominated to)."""

    pod: PodRef
    node: str
    seen: str | None = None


@dataclass
class Written:
    """A nomination write as the API server settled it (`effect`, a `WriteEffect` value; or
    `error` when it could not be made), kept for the ledger: `kind` is the event it is
    recorded as (`nominated`, `member_nominated`, `nomination_cleared`). A run of the one
    runbook (`workflows.runbook`) appends them with its end, in one statement."""

    kind: str
    pod: PodRef
    node: str
    effect: str = ""
    message: str = ""
    previous: str | None = None
    error: str | None = None


@dataclass
class NominationInput:
    run: RunRef
    preemptor: PodRef
    node: str
    clear: list[PodRef] = field(default_factory=list)  # lower-priority nominations to `node`
    # False (the one runbook): the writes are returned (`NominationResult.writes`) for the
    # run's end to record, not appended here.
    record: bool = True
    seen: str | None = None  # the preemptor's nomination as the decision saw it


@dataclass
class NominationResult:
    """The nomination as the API server settled it (`effect`, a `WriteEffect` value);
    `error` when it could not be made (the preemption goes on, as upstream's does). Histories
    recorded before the rename carry the effect as `verdict`, which the workflow never read.
    `writes`: every write of the step, for the ledger, when the step did not record them."""

    effect: str = ""
    message: str = ""
    previous: str | None = None
    error: str | None = None
    writes: list[Written] = field(default_factory=list)


@dataclass
class VictimInput:
    run: RunRef
    victim: PodRef
    preemptor: PodRef
    node: str
    use_eviction: bool = False
    grace_period_seconds: int | None = None
    scheduler_name: str = "default-scheduler"


@dataclass
class VictimTarget:
    """A victim of a round and the node it is on."""

    pod: PodRef
    node: str


@dataclass
class VictimRound:
    """Victims one step acts on together (every victim's mark; every delete but the last;
    the last): the victim inputs of one run, preemptor and options shared."""

    run: RunRef
    preemptor: PodRef
    victims: list[VictimTarget]
    use_eviction: bool = False
    grace_period_seconds: int | None = None
    scheduler_name: str = "default-scheduler"

    def steps(self) -> list[VictimInput]:
        """Each victim's own step input, as the one-victim activities take it."""
        return [
            VictimInput(
                self.run,
                victim.pod,
                self.preemptor,
                victim.node,
                use_eviction=self.use_eviction,
                grace_period_seconds=self.grace_period_seconds,
                scheduler_name=self.scheduler_name,
            )
            for victim in self.victims
        ]


@dataclass
class VictimResult:
    """What became of a victim in one step. `stopped` (delete only) is why the victim was
    left alone because the preemptor no longer needs room; the run is then aborted."""

    fate: Fate
    message: str = ""
    replaced_by_uid: str | None = None
    stopped: str = ""
    answer_lost: bool = False  # deleted by an earlier attempt whose answer never arrived
    terminating: bool = False  # already gone: it was on its way out when marked
    marked: bool = False  # its DisruptionTarget condition was set (to remove, if spared)


@dataclass
class PreemptVictimInput:
    """One victim's own step (`preempt_victim`: mark, then delete with the UID precondition)
    and what the room is for: a pod (`step.preemptor`), or a pod group (`group`, with each
    placed member and the node it was placed on)."""

    step: VictimInput
    group: GroupRef | None = None
    placements: list[Nomination] = field(default_factory=list)
    # A pod's room: its nominated node (a victim of a gang taken whole is on another; ""
    # in a step from before: the victim's node, which was the nominated one).
    room_node: str = ""
    # The unit of several pods this step finishes ("podGroup ml/train-b"): the run stopped
    # (the room is no longer needed) after it had deleted other pods of the unit, and a unit
    # taken whole is never left in part, so the step deletes without asking about the room.
    finishing: str = ""


@dataclass
class VictimFate:
    """A victim, the node it is on, and what became of it: what a run's end records."""

    pod: PodRef
    node: str
    result: VictimResult


@dataclass
class PreemptorCheck:
    preemptor: PodRef


@dataclass
class EndInput:
    """How a run ends, for the one ledger append the workflow makes itself: an outcome the
    workflow records (completed, failed, aborted; never one the write-ahead records)."""

    run: RunRef
    preemptor: PodRef
    outcome: Outcome  # one of the outcomes the workflow records (`WORKFLOW_OUTCOMES`)
    node: str | None = None
    message: str = ""
    scheduled_node: str | None = None  # the preemptor was bound there
    seconds_to_schedule: float | None = None
    failed_victim: PodRef | None = None  # a victim whose write failed for good
    retryable: bool = True  # a failure retrying cannot cure (RBAC): the preemptor's event says
    # A run of the one runbook records its victims' fates and its nomination's writes with
    # its end, in one statement (earlier runs had each step append its own).
    victims: list[VictimFate] = field(default_factory=list)
    writes: list[Written] = field(default_factory=list)
    # The runbook the run follows: from 2 on, a completed run ends at its last victim's
    # delete, before its preemptor is bound, so its end says nothing of the bind.
    runbook: int = 1
    # The PodGroups its victims belong to (`Selection.victim_pod_groups`): each one that lost
    # pods in this run is told so (`Preempted`) by the end.
    victim_pod_groups: list[VictimPodGroup] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.outcome not in WORKFLOW_OUTCOMES:
            raise ValueError(
                f"the workflow records only {sorted(WORKFLOW_OUTCOMES)}, not {self.outcome!r}: "
                "the decision's write-ahead records the others"
            )

"""The ledger's words for how things end, shared by the workflow, the activities and the CLI.

One definition each: a preemption's `End`, a victim's `Fate`, and the one mapping from the
planner's `Verdict` (and from each terminal event kind) to the `End` it gives. The values
are what `history --json`, `history --outcome`, the `PreemptionOutcome` search attribute
and the workflow's result say, so renaming one is a breaking change.
"""

from __future__ import annotations

from enum import StrEnum

from preemptctl.ledger.kinds import TERMINAL_KINDS, VICTIM_KINDS, EventKind
from preemptctl.preemption.decision import Verdict


class End(StrEnum):
    """How a preemption ended; what `history --outcome` filters on."""

    COMPLETED = "completed"  # victims out of the way (or none needed); see the events for
    # whether the preemptor was then scheduled
    FAILED = "failed"  # a write failed for good (an RBAC denial, a rejected request)
    ABORTED = "aborted"  # the preemptor vanished, was replaced or bound elsewhere
    DRY_RUN = "dry-run"  # decided and recorded, nothing touched
    NO_CANDIDATE = "no-candidate"  # verdict Unschedulable: no node where preemption helps
    INELIGIBLE = "ineligible"  # verdict Ineligible: e.g. preemptionPolicy Never
    UNSUPPORTED = "unsupported"  # verdict Unsupported: the planner refuses to guess


class Fate(StrEnum):
    """What happened to one victim (in the ledger, and in the workflow's state query)."""

    CHOSEN = "chosen"  # in the decision, nothing done yet
    MARKED = "marked"  # DisruptionTarget set, not deleted yet
    DELETED = "deleted"
    ALREADY_GONE = "already-gone"  # NotFound, or already terminating: nothing left to do
    REPLACED = "replaced"  # a new pod with the same name: left alone
    FAILED = "failed"
    SPARED = "spared"  # the preemption ended before touching it

    @property
    def settled(self) -> bool:
        return self not in (Fate.CHOSEN, Fate.MARKED)


END_OF_KIND: dict[EventKind, End] = {
    EventKind.COMPLETED: End.COMPLETED,
    EventKind.FAILED: End.FAILED,
    EventKind.PREEMPTION_ABORTED: End.ABORTED,
    EventKind.DRY_RUN: End.DRY_RUN,
    EventKind.NO_CANDIDATE: End.NO_CANDIDATE,
    EventKind.INELIGIBLE: End.INELIGIBLE,
    EventKind.UNSUPPORTED: End.UNSUPPORTED,
}
assert set(END_OF_KIND) == TERMINAL_KINDS

FATE_OF_KIND: dict[EventKind, Fate] = {
    EventKind.VICTIM_CHOSEN: Fate.CHOSEN,
    EventKind.VICTIM_MARKED: Fate.MARKED,
    EventKind.VICTIM_DELETED: Fate.DELETED,
    EventKind.VICTIM_ALREADY_GONE: Fate.ALREADY_GONE,
    EventKind.VICTIM_REPLACED: Fate.REPLACED,
    EventKind.VICTIM_FAILED: Fate.FAILED,
}
assert set(FATE_OF_KIND) == VICTIM_KINDS

KIND_OF_VERDICT: dict[Verdict, EventKind] = {
    Verdict.PREEMPT: EventKind.DECISION_MADE,
    Verdict.FITS_WITHOUT_PREEMPTION: EventKind.DECISION_MADE,
    Verdict.INELIGIBLE: EventKind.INELIGIBLE,
    Verdict.UNSCHEDULABLE: EventKind.NO_CANDIDATE,
    Verdict.UNSUPPORTED: EventKind.UNSUPPORTED,
}
assert set(KIND_OF_VERDICT) == set(Verdict)


def end_of_verdict(verdict: Verdict) -> End | None:
    """The end a verdict gives a preemption at once; None for `Preempt`, which goes on.

    `FitsWithoutPreemption` completes (nothing needed doing); the refusals end as their
    decision event says."""
    if verdict is Verdict.PREEMPT:
        return None
    if verdict is Verdict.FITS_WITHOUT_PREEMPTION:
        return End.COMPLETED
    return END_OF_KIND[KIND_OF_VERDICT[verdict]]


def kinds_ending_in(end: End) -> frozenset[EventKind]:
    """The event kinds that give a preemption this end."""
    return frozenset(kind for kind, result in END_OF_KIND.items() if result is end)

"""The ledger's words for how things end, shared by the workflow, the activities and the CLI.

One definition each: a run's `Outcome`, a victim's `Fate`; the one function that says which
decision ends a run at once and how (`outcome_of_decision`: the write-ahead and the workflow
both ask it), and the one table from each terminal event kind to the outcome it records
(`OUTCOME_OF_KIND`: the readers fold with it). The values are what `history --json`,
`history --outcome`, the `PreemptionOutcome` search attribute, the metrics' `outcome` label
and the workflow's result say, so renaming one is a breaking change.
"""

from __future__ import annotations

from enum import StrEnum

from preemptctl.ledger.kinds import TERMINAL_KINDS, VICTIM_KINDS, EventKind
from preemptctl.preemption.decision import Verdict


class Outcome(StrEnum):
    """How a run (and so its preemption) ended; what `history --outcome` filters on."""

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
        """Final: the victim is neither still to be marked nor still to be deleted (the
        moment it became so is its `settledAt`)."""
        return self not in (Fate.CHOSEN, Fate.MARKED)


OUTCOME_OF_KIND: dict[EventKind, Outcome] = {
    EventKind.COMPLETED: Outcome.COMPLETED,
    EventKind.FAILED: Outcome.FAILED,
    EventKind.PREEMPTION_ABORTED: Outcome.ABORTED,
    EventKind.DRY_RUN: Outcome.DRY_RUN,
    EventKind.NO_CANDIDATE: Outcome.NO_CANDIDATE,
    EventKind.INELIGIBLE: Outcome.INELIGIBLE,
    EventKind.UNSUPPORTED: Outcome.UNSUPPORTED,
}
"""The outcome each terminal event records: the one table the readers fold with."""
assert set(OUTCOME_OF_KIND) == TERMINAL_KINDS
KIND_OF_OUTCOME: dict[Outcome, EventKind] = {o: k for k, o in OUTCOME_OF_KIND.items()}
"""The terminal event that records each outcome."""

WORKFLOW_OUTCOMES = frozenset({Outcome.COMPLETED, Outcome.FAILED, Outcome.ABORTED})
"""The outcomes the workflow records itself (`record_end`); the decision's write-ahead
records the others (`outcome_of_decision`)."""

FATE_OF_KIND: dict[EventKind, Fate] = {
    EventKind.VICTIM_CHOSEN: Fate.CHOSEN,
    EventKind.VICTIM_MARKED: Fate.MARKED,
    EventKind.VICTIM_DELETED: Fate.DELETED,
    EventKind.VICTIM_ALREADY_GONE: Fate.ALREADY_GONE,
    EventKind.VICTIM_REPLACED: Fate.REPLACED,
    EventKind.VICTIM_FAILED: Fate.FAILED,
}
assert set(FATE_OF_KIND) == VICTIM_KINDS
KIND_OF_FATE: dict[Fate, EventKind] = {
    fate: kind for kind, fate in FATE_OF_KIND.items() if kind is not EventKind.VICTIM_CHOSEN
}
"""The event a victim step appends for the fate it ended in (`spared` has none: the views
derive it from the run's end)."""

KIND_OF_VERDICT: dict[Verdict, EventKind] = {
    Verdict.PREEMPT: EventKind.DECISION_MADE,
    Verdict.FITS_WITHOUT_PREEMPTION: EventKind.DECISION_MADE,
    Verdict.INELIGIBLE: EventKind.INELIGIBLE,
    Verdict.UNSCHEDULABLE: EventKind.NO_CANDIDATE,
    Verdict.UNSUPPORTED: EventKind.UNSUPPORTED,
}
"""The kind of the event that records a decision with this verdict."""
assert set(KIND_OF_VERDICT) == set(Verdict)


def outcome_of_decision(verdict: Verdict, dry_run: bool = False) -> Outcome | None:
    """The outcome a decision gives its run at once; None when the run goes on to preempt.

    `Preempt` goes on, unless the run is dry (decided and recorded, nothing touched);
    `FitsWithoutPreemption` completes (nothing needed doing); the refusals end as their
    decision event says (`KIND_OF_VERDICT`, then `OUTCOME_OF_KIND`)."""
    if verdict is Verdict.PREEMPT:
        return Outcome.DRY_RUN if dry_run else None
    if verdict is Verdict.FITS_WITHOUT_PREEMPTION:
        return Outcome.COMPLETED
    return OUTCOME_OF_KIND[KIND_OF_VERDICT[verdict]]


def kinds_of_outcome(outcome: Outcome) -> frozenset[EventKind]:
    """The event kinds that record this outcome."""
    return frozenset(kind for kind, recorded in OUTCOME_OF_KIND.items() if recorded is outcome)

"""How runs end: one function says which decision ends a run, one table which event says so.

Scenarios:
- a decision to preempt goes on (no outcome yet), unless the run is dry: `dry-run`;
- fits without preemption completes at once, dry or not;
- the refusals end as their decision event says: Unschedulable is `no-candidate`,
  Ineligible `ineligible`, Unsupported `unsupported`, dry or not;
- every outcome is recorded by exactly one terminal event kind, and back;
- the workflow records completed, failed and aborted itself, and every outcome a decision
  gives is recorded by the decision's write-ahead instead (completed excepted: both);
- `record_end`'s input refuses an outcome the workflow does not record.
"""

from __future__ import annotations

import pytest

from preemptctl.activities.contracts import EndInput, RunRef
from preemptctl.ledger.kinds import TERMINAL_KINDS
from preemptctl.ledger.vocabulary import (
    KIND_OF_OUTCOME,
    OUTCOME_OF_KIND,
    WORKFLOW_OUTCOMES,
    Outcome,
    outcome_of_decision,
)
from preemptctl.preemption.decision import PodRef, Verdict


@pytest.mark.parametrize(
    ("verdict", "wet", "dry"),
    [
        (Verdict.PREEMPT, None, Outcome.DRY_RUN),
        (Verdict.FITS_WITHOUT_PREEMPTION, Outcome.COMPLETED, Outcome.COMPLETED),
        (Verdict.UNSCHEDULABLE, Outcome.NO_CANDIDATE, Outcome.NO_CANDIDATE),
        (Verdict.INELIGIBLE, Outcome.INELIGIBLE, Outcome.INELIGIBLE),
        (Verdict.UNSUPPORTED, Outcome.UNSUPPORTED, Outcome.UNSUPPORTED),
    ],
)
def test_which_decision_ends_its_run_and_how(
    verdict: Verdict, wet: Outcome | None, dry: Outcome
) -> None:
    assert outcome_of_decision(verdict) is wet
    assert outcome_of_decision(verdict, dry_run=True) is dry


def test_every_outcome_is_recorded_by_one_terminal_event_kind() -> None:
    assert set(OUTCOME_OF_KIND) == TERMINAL_KINDS
    assert set(KIND_OF_OUTCOME) == set(Outcome)
    assert all(OUTCOME_OF_KIND[KIND_OF_OUTCOME[o]] is o for o in Outcome)


def test_the_workflow_records_the_outcomes_no_decision_gives() -> None:
    decided = {outcome_of_decision(v, dry) for v in Verdict for dry in (False, True)} - {None}
    assert {Outcome.COMPLETED, Outcome.FAILED, Outcome.ABORTED} == WORKFLOW_OUTCOMES
    assert decided | WORKFLOW_OUTCOMES == set(Outcome)
    assert decided & WORKFLOW_OUTCOMES == {Outcome.COMPLETED}


def test_record_end_refuses_an_outcome_the_write_ahead_records() -> None:
    run = RunRef("p-1", "run-1", "2026-11-24T12:00:00+00:00")
    with pytest.raises(ValueError, match="the workflow records only"):
        EndInput(run, PodRef("default", "web", "u1"), Outcome.NO_CANDIDATE)

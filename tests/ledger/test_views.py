"""The per-preemption and per-victim views, folded from events alone (no database).

Scenarios:
- a completed preemption: node, victims deleted, scheduling delay, duration, outcome
- each victim's fate follows its latest event
- a delete's intent (`victim_delete_sent`) is not a fate; a deletion whose answer was lost
  is a deletion, shown as such in the JSON
- a preemption without a terminal event is in progress, its status read from the events
- victims settled but preemptor not scheduled yet: waiting
- a throttled preemption is held
- a failed run followed by a retry is in progress again, and lists both runs
- a retried preemption that completes is completed, not failed
- an aborted preemption spares the victims it never touched
- an aborted preemption spares a victim it marked but did not delete, and says when its
  DisruptionTarget condition was removed
- a dry run spares every victim
- no candidate: finished with that outcome and no node
- a pod only an earlier run chose, and nobody touched, is not a victim
- events arrive in any order; the ledger order decides
- one view cannot fold several preemptions
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from preemptctl.ledger.events import LedgerEvent, decision_events
from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.views import Status, fold_preemption
from preemptctl.ledger.vocabulary import End, Fate
from tests.ledger.builders import (
    API,
    BATCH_7,
    BATCH_8,
    T0,
    completed_preemption,
    event,
    four_candidate_decision,
    recorded,
    unschedulable_decision,
)

P = "preempt-uid-api-0"


def _decided(decision: dict[str, Any] | None = None) -> list[LedgerEvent]:
    return decision_events(P, "run-1", API, decision or four_candidate_decision(), T0)


def test_a_completed_preemption() -> None:
    view = fold_preemption(recorded(completed_preemption(P)))
    assert (view.status, view.outcome, view.node) == (Status.FINISHED, End.COMPLETED, "node-3")
    assert [(v.victim, v.fate) for v in view.victims] == [
        (BATCH_7, Fate.DELETED),
        (BATCH_8, Fate.DELETED),
    ]
    assert view.seconds_to_schedule == 8.0
    assert view.duration_seconds == 8.0
    assert view.victim_count == 2


def test_a_victims_fate_follows_its_latest_event() -> None:
    story = [
        *_decided(),
        event(P, EventKind.VICTIM_MARKED, T0, victim=BATCH_7),
        event(P, EventKind.VICTIM_ALREADY_GONE, T0 + timedelta(seconds=2), victim=BATCH_7),
        event(P, EventKind.VICTIM_REPLACED, T0, victim=BATCH_8, payload={"replacedByUid": "new"}),
    ]
    gone, replaced = fold_preemption(recorded(story)).victims
    assert (gone.fate, gone.settled_at) == (Fate.ALREADY_GONE, T0 + timedelta(seconds=2))
    assert (replaced.fate, replaced.replaced_by_uid) == (Fate.REPLACED, "new")


def test_a_delete_intent_is_not_a_fate_and_a_lost_answer_is_still_a_deletion() -> None:
    story = [
        *_decided(),
        event(P, EventKind.VICTIM_DELETE_SENT, T0, victim=BATCH_7, payload={"eviction": False}),
        event(P, EventKind.VICTIM_DELETE_SENT, T0, victim=BATCH_8, payload={"eviction": False}),
        event(P, EventKind.VICTIM_DELETED, T0, victim=BATCH_8, payload={"answerLost": True}),
    ]
    sent, deleted = fold_preemption(recorded(story)).victims
    assert sent.fate is Fate.CHOSEN
    assert (deleted.fate, deleted.answer_lost) == (Fate.DELETED, True)
    assert deleted.to_json()["answerLost"] is True


def test_victims_not_all_settled_means_preempting() -> None:
    story = [*_decided(), event(P, EventKind.VICTIM_DELETED, T0, victim=BATCH_7)]
    view = fold_preemption(recorded(story))
    assert (view.status, view.outcome, view.finished) == (Status.PREEMPTING, None, None)
    assert [v.fate for v in view.victims] == [Fate.DELETED, Fate.CHOSEN]


def test_victims_settled_and_preemptor_unscheduled_means_waiting() -> None:
    story = [
        *_decided(),
        *(event(P, EventKind.VICTIM_DELETED, T0, victim=v) for v in (BATCH_7, BATCH_8)),
    ]
    assert fold_preemption(recorded(story)).status is Status.WAITING


def test_a_throttled_preemption_is_held() -> None:
    story = [*_decided(), event(P, EventKind.THROTTLED, T0, payload={"budget": "10/min"})]
    assert fold_preemption(recorded(story)).status is Status.HELD


def test_a_retry_after_a_failure_reopens_the_preemption() -> None:
    story = [
        *_decided(),
        event(P, EventKind.FAILED, T0, payload={"error": "boom"}),
        event(P, EventKind.RETRIED, T0, payload={"newRunId": "run-2"}),
    ]
    view = fold_preemption(recorded(story))
    assert (view.status, view.outcome, view.runs, view.run_id) == (
        Status.PREEMPTING,
        None,
        ("run-1", "run-2"),
        "run-2",
    )


def test_a_retried_preemption_that_completes_is_completed() -> None:
    story = [
        *_decided(),
        event(P, EventKind.FAILED, T0),
        event(P, EventKind.RETRIED, T0, payload={"newRunId": "run-2"}),
        event(P, EventKind.COMPLETED, T0 + timedelta(seconds=30), run_id="run-2"),
    ]
    view = fold_preemption(recorded(story))
    assert (view.outcome, view.duration_seconds) == (End.COMPLETED, 30.0)


def test_an_aborted_preemption_spares_untouched_victims() -> None:
    story = [
        *_decided(),
        event(P, EventKind.VICTIM_DELETED, T0, victim=BATCH_7),
        event(P, EventKind.PREEMPTION_ABORTED, T0, payload={"reason": "preemptor gone"}),
    ]
    view = fold_preemption(recorded(story))
    assert (view.outcome, view.abort_reason) == (End.ABORTED, "preemptor gone")
    assert [v.fate for v in view.victims] == [Fate.DELETED, Fate.SPARED]


def test_a_marked_victim_of_an_aborted_preemption_is_spared_and_unmarked() -> None:
    story = [
        *_decided(),
        event(P, EventKind.VICTIM_MARKED, T0, victim=BATCH_7),
        event(P, EventKind.VICTIM_MARKED, T0, victim=BATCH_8),
        event(P, EventKind.VICTIM_UNMARKED, T0, victim=BATCH_7, payload={"message": "removed"}),
        event(P, EventKind.PREEMPTION_ABORTED, T0, payload={"reason": "the preemptor is gone"}),
    ]
    first, second = fold_preemption(recorded(story)).victims
    assert (first.fate, first.unmarked) == (Fate.SPARED, True)
    assert (second.fate, second.unmarked) == (Fate.SPARED, False)
    assert first.to_json()["unmarked"] is True


def test_a_dry_run_spares_every_victim() -> None:
    view = fold_preemption(recorded([*_decided(), event(P, EventKind.DRY_RUN, T0)]))
    assert view.outcome is End.DRY_RUN
    assert [v.fate for v in view.victims] == [Fate.SPARED, Fate.SPARED]


def test_no_candidate_finishes_without_a_node() -> None:
    view = fold_preemption(recorded(_decided(unschedulable_decision())))
    assert (view.outcome, view.node, view.victims) == (End.NO_CANDIDATE, None, ())


def test_a_pod_only_an_earlier_run_chose_is_not_a_victim() -> None:
    second = decision_events(P, "run-2", API, four_candidate_decision(victims=[BATCH_8]), T0)
    story = [*_decided(), event(P, EventKind.RETRIED, T0, payload={"newRunId": "run-2"}), *second]
    assert [v.victim for v in fold_preemption(recorded(story)).victims] == [BATCH_8]


def test_the_ledger_order_decides_not_the_argument_order() -> None:
    events = recorded(completed_preemption(P))
    assert fold_preemption(reversed(events)) == fold_preemption(events)


def test_one_view_cannot_fold_several_preemptions() -> None:
    mixed = recorded([event("a", EventKind.NOMINATED, T0), event("b", EventKind.NOMINATED, T0)])
    with pytest.raises(ValueError, match="several preemptions"):
        fold_preemption(mixed)

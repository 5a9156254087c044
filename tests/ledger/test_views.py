"""The per-attempt, per-preemption and per-victim views, folded from events alone (no database).

Scenarios:
- each run is one attempt, numbered in ledger order; the preemption's status and outcome
  are its latest attempt's
- two runs, failed then completed: two attempts, each with its own start, end and
  duration; the second retried by a person, with the reason and the run it followed
- a later aborted run does not rewrite an earlier completed attempt
- a `retried` event belongs to the run it opens, even when written under the old run's ID
- a later run without its `retried` event still says which run it followed
- `history --json` is one record per attempt, with the preemption's ID and the attempt's
  number, total, runId, cause, retryable and how it was started (and a UI link when given)
- parked: a latest attempt that failed non-retryably, or ended unsupported; not a
  retryable failure, not one whose writer recorded nothing, not once a new attempt opened
- each attempt's victims are its own
- a completed preemption: node, victims deleted, scheduling delay, duration, outcome
- each victim's fate follows its latest event
- a delete's intent (`victim_delete_sent`) is not a fate; a deletion whose answer was lost
  is a deletion, shown as such in the JSON
- a preemption without a terminal event is in progress, its status read from the events
- victims settled but preemptor not scheduled yet: waiting
- a throttled preemption is held
- a failed run followed by a retry is in progress again, and lists both runs
- an aborted preemption spares the victims it never touched
- an aborted preemption spares a victim it marked but did not delete, and says when its
  DisruptionTarget condition was removed
- a dry run spares every victim
- no candidate: finished with that outcome and no node
- a pod only an earlier run chose, and nobody touched, is not a victim
- events arrive in any order; the ledger order decides
- one view cannot fold several preemptions
- a group preemption: its preemptor is its group, it has no one node but every node its
  decision touches, its members with their nodes and nominations (a refused one with its
  error, one not written yet as such), each victim with its unit and node, minCount members
  bound as its scheduling; `history --json` says all of it
- a group preemption still preempting is `preempting`, its members not nominated yet
- a preemption that ended non-retryably is not parked once its preemptor was bound after it
  ended: the attempt says where and when, the JSON says `boundAfterEnd`
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from preemptctl.ledger.events import LedgerEvent, decision_events
from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.payloads import Scheduled, Write
from preemptctl.ledger.views import Status, fold_preemption
from preemptctl.ledger.vocabulary import Fate, Outcome
from preemptctl.preemption.decision import Decision
from tests.ledger.builders import (
    API,
    BATCH_7,
    BATCH_8,
    T0,
    TRAIN_A,
    completed_preemption,
    event,
    failed_attempt,
    four_candidate,
    group_preemption,
    recorded,
    retried,
    unschedulable,
)

P = "preempt-uid-api-0"


def _decided(decision: Decision | None = None) -> list[LedgerEvent]:
    return decision_events(P, "run-1", API, decision or four_candidate(), T0)


def test_a_completed_preemption() -> None:
    view = fold_preemption(recorded(completed_preemption(P)))
    (attempt,) = view.attempts
    assert (view.status, view.outcome, attempt.node) == (
        Status.FINISHED,
        Outcome.COMPLETED,
        "node-3",
    )
    assert [(v.victim, v.fate) for v in attempt.victims] == [
        (BATCH_7, Fate.DELETED),
        (BATCH_8, Fate.DELETED),
    ]
    assert attempt.seconds_to_schedule == 8.0
    assert attempt.duration_seconds == 8.0
    assert attempt.victim_count == 2
    assert (attempt.attempt, attempt.started_by, attempt.previous_run_id) == (1, "trigger", None)
    assert attempt.retryable is None


def test_a_victims_fate_follows_its_latest_event() -> None:
    story = [
        *_decided(),
        event(P, EventKind.VICTIM_MARKED, T0, victim=BATCH_7),
        event(P, EventKind.VICTIM_ALREADY_GONE, T0 + timedelta(seconds=2), victim=BATCH_7),
        event(P, EventKind.VICTIM_REPLACED, T0, victim=BATCH_8, payload={"replacedByUid": "new"}),
    ]
    gone, replaced = fold_preemption(recorded(story)).latest.victims
    assert (gone.fate, gone.settled_at) == (Fate.ALREADY_GONE, T0 + timedelta(seconds=2))
    assert (replaced.fate, replaced.replaced_by_uid) == (Fate.REPLACED, "new")


def test_a_delete_intent_is_not_a_fate_and_a_lost_answer_is_still_a_deletion() -> None:
    story = [
        *_decided(),
        event(P, EventKind.VICTIM_DELETE_SENT, T0, victim=BATCH_7, payload={"eviction": False}),
        event(P, EventKind.VICTIM_DELETE_SENT, T0, victim=BATCH_8, payload={"eviction": False}),
        event(P, EventKind.VICTIM_DELETED, T0, victim=BATCH_8, payload={"answerLost": True}),
    ]
    sent, deleted = fold_preemption(recorded(story)).latest.victims
    assert sent.fate is Fate.CHOSEN
    assert (deleted.fate, deleted.answer_lost) == (Fate.DELETED, True)
    assert deleted.to_json()["answerLost"] is True


def test_victims_not_all_settled_means_preempting() -> None:
    story = [*_decided(), event(P, EventKind.VICTIM_DELETED, T0, victim=BATCH_7)]
    view = fold_preemption(recorded(story))
    assert (view.status, view.outcome, view.latest.finished) == (Status.PREEMPTING, None, None)
    assert [v.fate for v in view.latest.victims] == [Fate.DELETED, Fate.CHOSEN]


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
        Status.DECIDING,
        None,
        ("run-1", "run-2"),
        "run-2",
    )


def test_an_aborted_preemption_spares_untouched_victims() -> None:
    story = [
        *_decided(),
        event(P, EventKind.VICTIM_DELETED, T0, victim=BATCH_7),
        event(P, EventKind.PREEMPTION_ABORTED, T0, payload={"reason": "preemptor gone"}),
    ]
    attempt = fold_preemption(recorded(story)).latest
    assert (attempt.outcome, attempt.abort_reason) == (Outcome.ABORTED, "preemptor gone")
    assert [v.fate for v in attempt.victims] == [Fate.DELETED, Fate.SPARED]


def test_a_marked_victim_of_an_aborted_preemption_is_spared_and_unmarked() -> None:
    story = [
        *_decided(),
        event(P, EventKind.VICTIM_MARKED, T0, victim=BATCH_7),
        event(P, EventKind.VICTIM_MARKED, T0, victim=BATCH_8),
        event(P, EventKind.VICTIM_UNMARKED, T0, victim=BATCH_7, payload={"message": "removed"}),
        event(P, EventKind.PREEMPTION_ABORTED, T0, payload={"reason": "the preemptor is gone"}),
    ]
    first, second = fold_preemption(recorded(story)).latest.victims
    assert (first.fate, first.unmarked) == (Fate.SPARED, True)
    assert (second.fate, second.unmarked) == (Fate.SPARED, False)
    assert first.to_json()["unmarked"] is True


def test_a_dry_run_spares_every_victim() -> None:
    view = fold_preemption(recorded([*_decided(), event(P, EventKind.DRY_RUN, T0)]))
    assert view.outcome is Outcome.DRY_RUN
    assert [v.fate for v in view.latest.victims] == [Fate.SPARED, Fate.SPARED]


def test_no_candidate_finishes_without_a_node() -> None:
    view = fold_preemption(recorded(_decided(unschedulable())))
    assert (view.outcome, view.latest.node, view.latest.victims) == (Outcome.NO_CANDIDATE, None, ())


def test_each_attempts_victims_are_its_own() -> None:
    second = decision_events(P, "run-2", API, four_candidate(victims=[BATCH_8]), T0)
    story = [*_decided(), event(P, EventKind.RETRIED, T0, payload={"newRunId": "run-2"}), *second]
    first, latest = fold_preemption(recorded(story)).attempts
    assert [v.victim for v in first.victims] == [BATCH_7, BATCH_8]
    assert [(v.victim, v.attempt, v.run_id) for v in latest.victims] == [(BATCH_8, 2, "run-2")]


def test_the_ledger_order_decides_not_the_argument_order() -> None:
    events = recorded(completed_preemption(P))
    assert fold_preemption(reversed(events)) == fold_preemption(events)


def test_one_view_cannot_fold_several_preemptions() -> None:
    mixed = recorded([event("a", EventKind.NOMINATED, T0), event("b", EventKind.NOMINATED, T0)])
    with pytest.raises(ValueError, match="several preemptions"):
        fold_preemption(mixed)


# -- attempts ------------------------------------------------------------------------------

FIXED = "RBAC granted"


def _failed_then_completed() -> list[LedgerEvent]:
    """Run 1 fails on a refused delete (2 s); a person retries a minute later; run 2
    completes (8 s after its decision)."""
    later = T0 + timedelta(minutes=1)
    return [
        *failed_attempt(P),
        retried(P, later, new_run="run-2", previous_run="run-1", by="person", reason=FIXED),
        *completed_preemption(P, start=later, run_id="run-2"),
    ]


def test_each_run_is_one_attempt_and_the_latest_decides_the_status() -> None:
    view = fold_preemption(recorded(_failed_then_completed()))
    assert [(a.attempt, a.run_id, a.outcome) for a in view.attempts] == [
        (1, "run-1", Outcome.FAILED),
        (2, "run-2", Outcome.COMPLETED),
    ]
    assert (view.status, view.outcome, view.run_id, view.started) == (
        Status.FINISHED,
        Outcome.COMPLETED,
        "run-2",
        T0,
    )


def test_failed_then_completed_attempts_keep_their_own_times() -> None:
    first, second = fold_preemption(recorded(_failed_then_completed())).attempts
    assert (first.started, first.finished, first.duration_seconds) == (
        T0,
        T0 + timedelta(seconds=2),
        2.0,
    )
    assert (second.started, second.duration_seconds) == (T0 + timedelta(minutes=1), 8.0)
    assert (first.error, first.retryable) == (
        'pods "batch-7" is forbidden: cannot delete (403 Forbidden)',
        False,
    )
    assert [(v.fate, v.unmarked) for v in first.victims] == [
        (Fate.FAILED, True),
        (Fate.SPARED, False),
    ]
    assert [v.fate for v in second.victims] == [Fate.DELETED, Fate.DELETED]


def test_a_retried_attempt_says_who_why_and_after_which_run() -> None:
    first, second = fold_preemption(recorded(_failed_then_completed())).attempts
    assert (first.started_by, first.retry_reason, first.previous_run_id) == (
        "trigger",
        None,
        None,
    )
    assert (
        second.started_by,
        second.retry_reason,
        second.previous_run_id,
        second.previous_outcome,
    ) == ("person", FIXED, "run-1", "failed")
    assert (second.error, second.retryable) == (None, None)


def test_a_later_aborted_run_does_not_rewrite_an_earlier_completed_attempt() -> None:
    later = T0 + timedelta(minutes=10)
    story = [
        *completed_preemption(P),
        retried(P, later, new_run="run-2", previous_run="run-1", previous_outcome="completed"),
        event(P, EventKind.PREEMPTION_ABORTED, later + timedelta(seconds=4), run_id="run-2"),
    ]
    view = fold_preemption(recorded(story))
    first, second = view.attempts
    assert (first.outcome, first.started, first.duration_seconds) == (Outcome.COMPLETED, T0, 8.0)
    assert [v.fate for v in first.victims] == [Fate.DELETED, Fate.DELETED]
    assert (second.outcome, second.started, second.duration_seconds) == (
        Outcome.ABORTED,
        later,
        4.0,
    )
    assert view.outcome is Outcome.ABORTED


def test_a_retried_event_belongs_to_the_run_it_opens() -> None:
    story = [
        *_decided(),
        event(P, EventKind.FAILED, T0),
        event(P, EventKind.RETRIED, T0, payload={"newRunId": "run-2", "by": "trigger"}),
    ]
    first, second = fold_preemption(recorded(story)).attempts
    assert (first.run_id, first.outcome) == ("run-1", Outcome.FAILED)
    assert (second.run_id, second.started_by, second.status) == ("run-2", "trigger", "deciding")


def test_a_later_run_without_its_retried_event_still_names_the_run_it_followed() -> None:
    story = [*failed_attempt(P), *completed_preemption(P, run_id="run-2")]
    second = fold_preemption(recorded(story)).attempts[1]
    assert (second.attempt, second.started_by, second.previous_run_id) == (2, None, "run-1")


def test_history_json_is_one_record_per_attempt() -> None:
    records = fold_preemption(recorded(_failed_then_completed())).to_json()
    assert [(r["preemptionId"], r["attempt"], r["attempts"], r["runId"]) for r in records] == [
        (P, 1, 2, "run-1"),
        (P, 2, 2, "run-2"),
    ]
    first, second = records
    assert {k: first[k] for k in ("outcome", "durationSeconds", "retryable", "startedBy")} == {
        "outcome": "failed",
        "durationSeconds": 2.0,
        "retryable": False,
        "startedBy": "trigger",
    }
    assert first["preemptor"] == {
        "namespace": "prod",
        "name": "api-0",
        "uid": "uid-api-0",
        "priority": 1000,
    }
    assert [(v["name"], v["fate"], v.get("unmarked")) for v in first["victims"]] == [
        ("batch-7", "failed", True),
        ("batch-8", "spared", None),
    ]
    assert {k: second[k] for k in ("startedBy", "retryReason", "previousRunId", "error")} == {
        "startedBy": "person",
        "retryReason": FIXED,
        "previousRunId": "run-1",
        "error": None,
    }
    assert "uiUrl" not in second


def test_history_json_links_each_attempt_when_given_a_link() -> None:
    records = fold_preemption(recorded(_failed_then_completed())).to_json(
        lambda workflow, run: f"ui/{workflow}/{run}"
    )
    assert [r["uiUrl"] for r in records] == [f"ui/{P}/run-1", f"ui/{P}/run-2"]


@pytest.mark.parametrize(
    ("story", "parked"),
    [
        (failed_attempt(P, retryable=False), True),
        (failed_attempt(P, retryable=True), False),
        (failed_attempt(P, retryable=None), False),
        (_decided(unschedulable()), False),
        (
            decision_events(P, "run-1", API, four_candidate(), T0, kind=EventKind.UNSUPPORTED),
            True,
        ),
        (
            [
                *failed_attempt(P),
                retried(P, T0 + timedelta(minutes=1), new_run="run-2", previous_run="run-1"),
            ],
            False,
        ),
        (
            [
                *completed_preemption(P),
                *failed_attempt(P, run_id="run-2", start=T0 + timedelta(minutes=1)),
            ],
            True,
        ),
    ],
    ids=[
        "failed-not-retryable",
        "failed-retryable",
        "failed-unrecorded",
        "no-candidate",
        "unsupported",
        "retried-since",
        "latest-failed",
    ],
)
def test_parked_is_a_latest_attempt_that_retrying_cannot_cure(
    story: list[LedgerEvent], parked: bool
) -> None:
    assert fold_preemption(recorded(story)).parked is parked


# -- group preemptions --------------------------------------------------------------------------

G = "group-preemption-ml-train-a-uid-train-a"


def test_a_group_preemption_tells_its_group_nodes_members_and_units() -> None:
    story = group_preemption(G)
    story[9] = event(  # the first member's nomination refused
        G,
        EventKind.MEMBER_NOMINATED,
        T0 + timedelta(seconds=1),
        preemptor=TRAIN_A.as_preemptor(),
        node="node-1",
        payload=Write(error="forbidden", pod="ml/train-a-0", uid="uid-train-a-0").to_json(),
        step="uid-train-a-0",
    )
    story.insert(
        -1,
        event(
            G,
            EventKind.PREEMPTOR_SCHEDULED,
            T0 + timedelta(seconds=9),
            preemptor=TRAIN_A.as_preemptor(),
            node=None,
            payload=Scheduled(9.0, members_bound=4).to_json(),
        ),
    )
    attempt = fold_preemption(recorded(story)).latest
    assert (attempt.pod_group, attempt.preemptor.key, attempt.node) == (
        "ml/train-a",
        "ml/train-a",
        None,
    )
    assert attempt.nodes == ("node-1", "node-2", "node-3")
    assert [(m.pod, m.node, m.effect, m.error, m.nominated) for m in attempt.members] == [
        ("ml/train-a-0", "node-1", None, "forbidden", False),
        ("ml/train-a-1", "node-1", "Done", None, True),
        ("ml/train-a-2", "node-2", "Done", None, True),
        ("ml/train-a-3", "node-2", "Done", None, True),
    ]
    assert [(v.victim.name, v.node, v.unit, v.fate) for v in attempt.victims] == [
        ("train-b-0", "node-1", "podGroup ml/train-b", Fate.DELETED),
        ("train-b-1", "node-2", "podGroup ml/train-b", Fate.DELETED),
        ("train-b-2", "node-3", "podGroup ml/train-b", Fate.DELETED),
        ("batch-1", "node-2", "pod default/batch-1", Fate.DELETED),
    ]
    assert (attempt.members_bound, attempt.seconds_to_schedule) == (4, 9.0)
    shown = attempt.to_json(1)
    assert (shown["podGroup"], shown["node"], shown["nodes"], shown["membersBound"]) == (
        "ml/train-a",
        None,
        ["node-1", "node-2", "node-3"],
        4,
    )
    assert shown["members"][0] == {
        "pod": "ml/train-a-0",
        "uid": "uid-train-a-0",
        "node": "node-1",
        "nomination": None,
        "error": "forbidden",
    }
    assert shown["victims"][3]["unit"] == "pod default/batch-1"


def test_a_group_preemption_still_preempting() -> None:
    attempt = fold_preemption(recorded(group_preemption(G, end=None)[:9])).latest
    assert attempt.status is Status.PREEMPTING
    assert [m.effect for m in attempt.members] == [None] * 4
    assert fold_preemption(recorded(group_preemption(G, end=None)[:9])).pod_group == "ml/train-a"


def test_a_preemptor_bound_after_its_failed_run_is_not_parked() -> None:
    story = failed_attempt(P)
    parked = fold_preemption(recorded(story))
    assert parked.parked
    story.append(
        event(
            P,
            EventKind.PREEMPTOR_SCHEDULED,
            T0 + timedelta(minutes=5),
            node="node-2",
            payload=Scheduled(after_end=True).to_json(),
            step="after-end",
        )
    )
    view = fold_preemption(recorded(story))
    attempt = view.latest
    assert not view.parked and not attempt.parks
    assert (attempt.outcome, attempt.retryable, attempt.status) == (
        Outcome.FAILED,
        False,
        Status.FINISHED,
    )
    assert (attempt.bound_after_end, attempt.scheduled_node, attempt.scheduled_at) == (
        True,
        "node-2",
        T0 + timedelta(minutes=5),
    )
    assert attempt.to_json(1)["boundAfterEnd"] is True

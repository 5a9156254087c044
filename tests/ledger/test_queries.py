"""`history` and `explain` read the ledger through its indexes, newest first.

Scenarios:
- history lists preemptions most recently active first
- history --pod finds the pod as preemptor and as victim
- history --node keeps preemptions on that node
- history --since keeps preemptions active since then
- history --outcome keeps preemptions whose final outcome it is (a failure later retried
  and completed is completed)
- history --parked keeps preemptions whose latest attempt ended non-retryably (failed with
  retryable false, or unsupported), not one retried since, not a retryable failure
- history --node and --pod match any attempt; each preemption comes with all its attempts
- history --limit caps the answer
- history pages through more events than one read returns
- filters combine
- explain finds a pod as victim, with the preemption that took it
- explain finds a pod as preemptor, with each of its preemptions
- explain finds a victim once per attempt that chose it, newest attempt first
- explain finds a victim the dry run only chose
- explain finds a pod group taken whole as a victim unit (Postgres and SQLite), not the
  same name in another namespace, a shorter name, or a pod that was a unit of its own
- explain of a pod the ledger never saw knows nothing
- history works on SQLite too
- a ledger without the schema is reported as not migrated
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import Engine

from preemptctl.ledger import queries as ledger_queries
from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.ledger.errors import LedgerNotMigratedError
from preemptctl.ledger.events import decision_events
from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.queries import HistoryQuery, explain, history
from preemptctl.ledger.vocabulary import Fate, Outcome
from preemptctl.ledger.writer import append_batch
from preemptctl.preemption.decision import PodRef
from tests.ledger.builders import (
    API,
    BATCH_7,
    BATCH_8,
    T0,
    TRAIN_B,
    completed_preemption,
    event,
    failed_attempt,
    four_candidate,
    group_preemption,
    retried,
)

WEB = PodRef("prod", "web-1", "uid-web-1", 900)
LOW = PodRef("default", "low-1", "uid-low-1", 10)


@pytest.fixture
def three_preemptions(pg_engine: Engine) -> Engine:
    """api-0 on node-3 (completed, oldest), web-1 on node-1 (failed), api-0 again (newest)."""
    append_batch(pg_engine, completed_preemption("p-api-first", start=T0))
    append_batch(
        pg_engine,
        completed_preemption(
            "p-web",
            preemptor=WEB,
            victims=[LOW],
            node="node-1",
            start=T0 + timedelta(hours=1),
            outcome=EventKind.FAILED,
        ),
    )
    append_batch(
        pg_engine,
        completed_preemption("p-api-second", victims=[BATCH_8], start=T0 + timedelta(hours=2)),
    )
    return pg_engine


def _ids(engine: Engine, query: HistoryQuery) -> list[str]:
    return [view.preemption_id for view in history(engine, query)]


def test_history_lists_the_most_recently_active_first(three_preemptions: Engine) -> None:
    assert _ids(three_preemptions, HistoryQuery()) == ["p-api-second", "p-web", "p-api-first"]


def test_history_by_pod_finds_preemptor_and_victim(three_preemptions: Engine) -> None:
    assert _ids(three_preemptions, HistoryQuery(pod=("prod", "api-0"))) == [
        "p-api-second",
        "p-api-first",
    ]
    assert _ids(three_preemptions, HistoryQuery(pod=("default", "batch-7"))) == ["p-api-first"]


def test_history_by_node(three_preemptions: Engine) -> None:
    assert _ids(three_preemptions, HistoryQuery(node="node-1")) == ["p-web"]


def test_history_since(three_preemptions: Engine) -> None:
    since = T0 + timedelta(hours=1)
    assert _ids(three_preemptions, HistoryQuery(since=since)) == ["p-api-second", "p-web"]


def test_history_by_outcome(three_preemptions: Engine) -> None:
    assert _ids(three_preemptions, HistoryQuery(outcome=Outcome.FAILED)) == ["p-web"]
    assert _ids(three_preemptions, HistoryQuery(outcome=Outcome.ABORTED)) == []


def test_history_by_outcome_judges_the_final_outcome(pg_engine: Engine) -> None:
    story = [
        *decision_events("p-1", "run-1", API, four_candidate(), T0),
        event("p-1", EventKind.FAILED, T0 + timedelta(seconds=1)),
        event("p-1", EventKind.RETRIED, T0 + timedelta(seconds=2), payload={"newRunId": "r2"}),
        event("p-1", EventKind.COMPLETED, T0 + timedelta(seconds=3), run_id="r2"),
    ]
    append_batch(pg_engine, story)
    assert _ids(pg_engine, HistoryQuery(outcome=Outcome.FAILED)) == []
    assert _ids(pg_engine, HistoryQuery(outcome=Outcome.COMPLETED)) == ["p-1"]


def test_history_parked(pg_engine: Engine) -> None:
    later = T0 + timedelta(minutes=5)
    append_batch(pg_engine, failed_attempt("p-denied", start=T0))
    append_batch(pg_engine, failed_attempt("p-flaky", start=T0, preemptor=WEB, retryable=True))
    append_batch(
        pg_engine,
        [
            *failed_attempt("p-fixed", preemptor=LOW, start=T0),
            retried("p-fixed", later, new_run="run-2", previous_run="run-1", preemptor=LOW),
        ],
    )
    unsupported = decision_events(
        "p-dra", "run-1", WEB, four_candidate(WEB), later, kind=EventKind.UNSUPPORTED
    )
    append_batch(pg_engine, unsupported)
    assert _ids(pg_engine, HistoryQuery(parked=True)) == ["p-dra", "p-denied"]
    assert _ids(pg_engine, HistoryQuery(parked=True, pod=("prod", "api-0"))) == ["p-denied"]


def test_history_matches_any_attempt_and_brings_them_all(pg_engine: Engine) -> None:
    later = T0 + timedelta(minutes=5)
    append_batch(
        pg_engine,
        [
            *failed_attempt("p-1", node="node-1", victims=[LOW]),
            retried("p-1", later, new_run="run-2", previous_run="run-1"),
            *completed_preemption("p-1", start=later, run_id="run-2"),
        ],
    )
    (view,) = history(pg_engine, HistoryQuery(node="node-1"))
    assert [(a.attempt, a.node, a.outcome) for a in view.attempts] == [
        (1, "node-1", Outcome.FAILED),
        (2, "node-3", Outcome.COMPLETED),
    ]
    assert _ids(pg_engine, HistoryQuery(pod=("default", "low-1"))) == ["p-1"]


def test_history_limit(three_preemptions: Engine) -> None:
    assert _ids(three_preemptions, HistoryQuery(limit=2)) == ["p-api-second", "p-web"]


def test_history_pages_through_many_events(
    three_preemptions: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ledger_queries, "SEED_PAGE", 3)
    assert _ids(three_preemptions, HistoryQuery()) == ["p-api-second", "p-web", "p-api-first"]
    assert _ids(three_preemptions, HistoryQuery(outcome=Outcome.COMPLETED)) == [
        "p-api-second",
        "p-api-first",
    ]


def test_history_filters_combine(three_preemptions: Engine) -> None:
    query = HistoryQuery(pod=("prod", "api-0"), since=T0 + timedelta(minutes=30), node="node-3")
    assert _ids(three_preemptions, query) == ["p-api-second"]


def test_explain_a_victim(three_preemptions: Engine) -> None:
    story = explain(three_preemptions, "default", "batch-7")
    ((view, victim),) = story.as_victim
    assert (view.preemption_id, view.preemptor, victim.fate) == ("p-api-first", API, Fate.DELETED)
    assert story.as_preemptor == ()


def test_explain_a_preemptor(three_preemptions: Engine) -> None:
    story = explain(three_preemptions, "prod", "api-0")
    assert [v.preemption_id for v in story.as_preemptor] == ["p-api-second", "p-api-first"]
    assert story.as_victim == ()


def test_explain_finds_a_victim_once_per_attempt(pg_engine: Engine) -> None:
    later = T0 + timedelta(minutes=5)
    append_batch(
        pg_engine,
        [
            *failed_attempt("p-1"),
            retried("p-1", later, new_run="run-2", previous_run="run-1"),
            *completed_preemption("p-1", start=later, run_id="run-2"),
        ],
    )
    stories = explain(pg_engine, "default", "batch-7").as_victim
    assert [(v.attempt, v.run_id, v.fate) for _, v in stories] == [
        (2, "run-2", Fate.DELETED),  # newest first: what became of it
        (1, "run-1", Fate.FAILED),
    ]


def test_explain_finds_a_victim_only_chosen_by_a_dry_run(pg_engine: Engine) -> None:
    decided = decision_events("p-dry", "run-1", API, four_candidate(), T0)
    append_batch(pg_engine, [*decided, event("p-dry", EventKind.DRY_RUN, T0)])
    ((view, victim),) = explain(pg_engine, "default", "batch-8").as_victim
    assert (view.outcome, victim.victim, victim.fate) == (Outcome.DRY_RUN, BATCH_8, Fate.SPARED)


@pytest.mark.parametrize("engine_name", ["pg_engine", "sqlite_engine"])
def test_explain_finds_a_pod_group_taken_whole_as_a_victim_unit(
    engine_name: str, request: pytest.FixtureRequest
) -> None:
    engine: Engine = request.getfixturevalue(engine_name)
    append_batch(engine, group_preemption("g-1"))
    story = explain(engine, "ml", "train-b")
    ((told),) = story.as_victim_unit
    assert (told.view.preemption_id, told.attempt.attempt, told.unit) == (
        "g-1",
        1,
        "podGroup ml/train-b",
    )
    assert [v.victim for v in told.victims] == list(TRAIN_B)
    assert story.known and not story.as_victim and not story.as_preemptor
    assert not explain(engine, "other", "train-b").known  # the same name elsewhere
    assert not explain(engine, "ml", "train").known  # a shorter one
    assert not explain(engine, "default", "batch-1").as_victim_unit  # a unit of one pod


def test_explain_an_unknown_pod(three_preemptions: Engine) -> None:
    assert not explain(three_preemptions, "default", "nobody").known


def test_history_on_sqlite(sqlite_engine: Engine) -> None:
    append_batch(sqlite_engine, completed_preemption("p-1", start=T0))
    append_batch(sqlite_engine, completed_preemption("p-2", start=T0 + timedelta(hours=1)))
    assert _ids(sqlite_engine, HistoryQuery()) == ["p-2", "p-1"]
    assert _ids(sqlite_engine, HistoryQuery(since=T0 + timedelta(minutes=1))) == ["p-2"]
    assert [v.victim for _, v in explain(sqlite_engine, "default", "batch-7").as_victim] == [
        BATCH_7,
        BATCH_7,
    ]


def test_a_ledger_without_the_schema_is_not_migrated(postgres_url: str) -> None:
    engine = create_ledger_engine(postgres_url)
    try:
        with pytest.raises(LedgerNotMigratedError, match="preemptctl migrate"):
            history(engine, HistoryQuery())
    finally:
        engine.dispose()

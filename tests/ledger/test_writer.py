"""Appending events: idempotent by key, in batches, from threads and from coroutines.

Scenarios:
- appending an event stores it and reports it as new
- appending the same event again (a retry) adds no row and reports it as a duplicate
- a batch reports how many events were new, skipping keys already in the ledger
- a batch that repeats a key stores it once
- a batch is all or nothing (a bad row keeps the good ones out too)
- a batch too big for one statement is still all or nothing
- many threads appending the same key at once store exactly one row
- async appends from many coroutines store every distinct event once
- events read back keep their time zone, payload and pods
- a NUL character (which Postgres refuses) is stripped, not retried forever
- the decision batch stores the decision and one victim_chosen per victim
- the idempotency key depends only on what identifies the event, not on when it ran
- an event refuses a naive timestamp
- SQLite appends are idempotent too
- a preemptor bound after its preemption's latest run ended unscheduled is recorded on that
  run, once (`after-end`); not for a run still going, not again when the run recorded its
  scheduling, not for a preemption the ledger does not know
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.exc import DBAPIError

from preemptctl.ledger import writer as ledger_writer
from preemptctl.ledger.errors import LedgerError
from preemptctl.ledger.events import LedgerEvent, decision_events, idempotency_key
from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.models import events
from preemptctl.ledger.queries import events_of
from preemptctl.ledger.writer import (
    append,
    append_async,
    append_batch,
    append_batch_async,
    record_bound_after_end,
)
from tests.ledger.builders import (
    API,
    BATCH_7,
    BATCH_8,
    T0,
    completed_preemption,
    event,
    failed_attempt,
    four_candidate,
)


def _count(engine: Engine) -> int:
    with engine.connect() as connection:
        return connection.execute(select(func.count()).select_from(events)).scalar_one()


def test_append_stores_the_event_and_reports_it_new(pg_engine: Engine) -> None:
    assert append(pg_engine, event("p-1", EventKind.NOMINATED, T0)) is True
    assert _count(pg_engine) == 1


def test_appending_the_same_event_again_adds_nothing(pg_engine: Engine) -> None:
    first = event("p-1", EventKind.VICTIM_DELETED, T0, victim=BATCH_7)
    retry = event("p-1", EventKind.VICTIM_DELETED, T0 + timedelta(minutes=5), victim=BATCH_7)
    append(pg_engine, first)
    assert append(pg_engine, retry) is False
    with pg_engine.connect() as connection:
        (stored,) = events_of(connection, ["p-1"])
    assert stored.occurred_at == T0


def test_a_batch_counts_only_new_events(pg_engine: Engine) -> None:
    old = event("p-1", EventKind.NOMINATED, T0)
    append(pg_engine, old)
    new = [event("p-1", EventKind.VICTIM_MARKED, T0, victim=v) for v in (BATCH_7, BATCH_8)]
    assert append_batch(pg_engine, [old, *new]) == 2
    assert _count(pg_engine) == 3


def test_a_batch_that_repeats_a_key_stores_it_once(pg_engine: Engine) -> None:
    twice = event("p-1", EventKind.NOMINATED, T0)
    assert append_batch(pg_engine, [twice, twice]) == 1
    assert _count(pg_engine) == 1


def test_a_batch_is_all_or_nothing(pg_engine: Engine) -> None:
    good = event("p-1", EventKind.NOMINATED, T0)
    too_long = event("p-1", EventKind.VICTIM_MARKED, T0, node="n" * 300, victim=BATCH_7)
    with pytest.raises((DBAPIError, LedgerError)):  # refused for good, either way
        append_batch(pg_engine, [good, too_long])
    assert _count(pg_engine) == 0


def test_a_batch_too_big_for_one_statement_is_still_all_or_nothing(
    pg_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ledger_writer, "ROWS_PER_STATEMENT", 2)
    good = [event("p-1", EventKind.NOMINATED, T0, step=i) for i in range(3)]
    too_long = event("p-1", EventKind.VICTIM_MARKED, T0, node="n" * 300, victim=BATCH_7)
    with pytest.raises((DBAPIError, LedgerError)):  # refused for good, either way
        append_batch(pg_engine, [*good, too_long])
    assert _count(pg_engine) == 0
    assert append_batch(pg_engine, good) == 3


def test_threads_racing_on_one_key_store_one_row(pg_engine: Engine) -> None:
    same = event("p-1", EventKind.VICTIM_DELETED, T0, victim=BATCH_7)
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda _: append(pg_engine, same), range(32)))
    assert results.count(True) == 1
    assert _count(pg_engine) == 1


async def test_async_appends_store_each_distinct_event_once(pg_engine: Engine) -> None:
    distinct = [event(f"p-{i}", EventKind.NOMINATED, T0) for i in range(20)]
    results = await asyncio.gather(
        *(append_async(pg_engine, e) for e in distinct),
        *(append_async(pg_engine, e) for e in distinct),
        append_batch_async(pg_engine, distinct),
    )
    assert sum(results[:40]) + results[40] == 20
    assert _count(pg_engine) == 20


def test_events_read_back_as_written(pg_engine: Engine) -> None:
    written = event(
        "p-1",
        EventKind.VICTIM_FAILED,
        T0.astimezone(timezone(timedelta(hours=2))),
        victim=BATCH_7,
        payload={"error": "Forbidden", "nested": {"n": [1, 2]}},
    )
    append(pg_engine, written)
    with pg_engine.connect() as connection:
        (read,) = events_of(connection, ["p-1"])
    assert (read.occurred_at, read.occurred_at.utcoffset()) == (T0, timedelta(0))
    assert (read.preemptor, read.victim, read.payload) == (API, BATCH_7, written.payload)
    assert (read.kind, read.idempotency_key) == (EventKind.VICTIM_FAILED, written.key)


def test_a_nul_character_is_stripped_at_the_writer(pg_engine: Engine) -> None:
    written = event(
        "p-1",
        EventKind.VICTIM_FAILED,
        T0,
        victim=BATCH_7,
        payload={"error": "bad\x00name", "k\x00": ["a\x00b"]},
    )
    assert append(pg_engine, written) is True
    with pg_engine.connect() as connection:
        (read,) = events_of(connection, ["p-1"])
    assert read.payload == {"error": "badname", "k": ["ab"]}


def test_the_decision_batch_names_every_victim(pg_engine: Engine) -> None:
    decision = four_candidate()
    assert append_batch(pg_engine, decision_events("p-1", "run-1", API, decision, T0)) == 3
    with pg_engine.connect() as connection:
        stored = events_of(connection, ["p-1"])
    assert [(e.kind, e.victim) for e in stored] == [
        (EventKind.DECISION_MADE, None),
        (EventKind.VICTIM_CHOSEN, BATCH_7),
        (EventKind.VICTIM_CHOSEN, BATCH_8),
    ]
    assert stored[0].payload == decision.to_json()


def test_the_key_identifies_the_event_not_the_attempt() -> None:
    first = event("p-1", EventKind.VICTIM_DELETED, T0, victim=BATCH_7)
    later = event("p-1", EventKind.VICTIM_DELETED, T0 + timedelta(hours=1), victim=BATCH_7)
    assert (
        first.key
        == later.key
        == idempotency_key("p-1", "run-1", EventKind.VICTIM_DELETED, BATCH_7.uid)
    )
    assert first.key != event("p-1", EventKind.VICTIM_DELETED, T0, victim=BATCH_8).key


def test_an_event_refuses_a_naive_time() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        LedgerEvent("p-1", "run-1", EventKind.COMPLETED, API, occurred_at=datetime(2026, 1, 1))


def test_sqlite_appends_are_idempotent(sqlite_engine: Engine) -> None:
    same = event("p-1", EventKind.VICTIM_DELETED, T0, victim=BATCH_7)
    assert [append(sqlite_engine, same), append(sqlite_engine, same)] == [True, False]
    assert append_batch(sqlite_engine, [same, event("p-1", EventKind.COMPLETED, T0)]) == 1
    assert _count(sqlite_engine) == 2


def _kinds_of(engine: Engine, preemption_id: str) -> list[tuple[str, str, str | None]]:
    with engine.connect() as connection:
        return [(e.run_id, e.kind.value, e.node) for e in events_of(connection, [preemption_id])]


def test_a_preemptor_bound_after_its_run_ended_is_recorded_once(sqlite_engine: Engine) -> None:
    append_batch(sqlite_engine, failed_attempt("p-1"))
    later = T0 + timedelta(minutes=5)
    assert record_bound_after_end(sqlite_engine, "p-1", API, "node-2", later) is True
    assert record_bound_after_end(sqlite_engine, "p-1", API, "node-2", later) is True
    scheduled = [k for k in _kinds_of(sqlite_engine, "p-1") if k[1] == "preemptor_scheduled"]
    assert scheduled == [("run-1", "preemptor_scheduled", "node-2")]
    with sqlite_engine.connect() as connection:
        [row] = [e for e in events_of(connection, ["p-1"]) if e.kind.value == "preemptor_scheduled"]
    assert (row.payload, row.idempotency_key) == (
        {"secondsSinceDecision": None, "afterEnd": True},
        "p-1/run-1/preemptor_scheduled//after-end",
    )


def test_no_bound_after_end_for_a_running_a_scheduled_or_an_unknown_preemption(
    sqlite_engine: Engine,
) -> None:
    append_batch(sqlite_engine, decision_events("p-running", "run-1", API, four_candidate(), T0))
    append_batch(sqlite_engine, completed_preemption("p-done"))
    later = T0 + timedelta(minutes=5)
    assert record_bound_after_end(sqlite_engine, "p-running", API, "node-2", later) is False
    assert record_bound_after_end(sqlite_engine, "p-done", API, "node-3", later) is True
    assert record_bound_after_end(sqlite_engine, "p-unknown", API, "node-2", later) is False
    assert [k for k in _kinds_of(sqlite_engine, "p-running") if k[1] == "preemptor_scheduled"] == []
    assert (
        len([k for k in _kinds_of(sqlite_engine, "p-done") if k[1] == "preemptor_scheduled"]) == 1
    )

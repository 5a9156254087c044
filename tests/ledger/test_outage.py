"""Losing the database for a while loses nothing: the caller retries and the key dedupes.

Scenarios:
- an append to a database that cannot be reached raises LedgerUnavailableError, one line
- the same event appended again once the database is back is stored once
- writers retrying through an outage (connections cut mid-transaction) store every event
  exactly once
- after Postgres terminates the pool's connections, the next append just works
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import Engine, func, select, text

from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.ledger.errors import LedgerUnavailableError
from preemptctl.ledger.events import LedgerEvent
from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.models import events
from preemptctl.ledger.writer import append
from tests.ledger.builders import BATCH_7, T0, event
from tests.support.postgres import OutageProxy


def _count(engine: Engine) -> tuple[int, int]:
    """(rows, distinct keys): equal means no duplicates, the expected total means no loss."""
    with engine.connect() as connection:
        rows, keys = connection.execute(
            select(func.count(), func.count(events.c.idempotency_key.distinct()))
        ).one()
    return int(rows), int(keys)


def _append_until_stored(engine: Engine, ledger_event: LedgerEvent, failures: list[str]) -> None:
    """What an activity's retry policy does, compressed."""
    for _ in range(400):
        try:
            append(engine, ledger_event)
            return
        except LedgerUnavailableError as error:
            failures.append(str(error))
            time.sleep(0.02)
    raise AssertionError(f"never stored {ledger_event.key}")


def test_an_unreachable_database_is_reported_as_unavailable(migrated_postgres_url: str) -> None:
    with OutageProxy(migrated_postgres_url) as proxy:
        engine = create_ledger_engine(proxy.url)
        proxy.cut()
        with pytest.raises(LedgerUnavailableError, match="cannot reach the ledger database") as e:
            append(engine, event("p-1", EventKind.NOMINATED, T0))
        engine.dispose()
    assert "\n" not in str(e.value)


def test_a_retry_after_the_database_returns_stores_the_event_once(
    migrated_postgres_url: str,
) -> None:
    deleted = event("p-1", EventKind.VICTIM_DELETED, T0, victim=BATCH_7)
    with OutageProxy(migrated_postgres_url) as proxy:
        engine = create_ledger_engine(proxy.url)
        append(engine, deleted)
        proxy.cut()
        with pytest.raises(LedgerUnavailableError):
            append(engine, deleted)
        proxy.restore()
        assert append(engine, deleted) is False
        assert _count(engine) == (1, 1)
        engine.dispose()


def test_writers_retrying_through_an_outage_lose_nothing(migrated_postgres_url: str) -> None:
    failures: list[str] = []
    with OutageProxy(migrated_postgres_url) as proxy:
        engine = create_ledger_engine(proxy.url, pool_size=4)
        batches = [
            [event(f"p-{w}", EventKind.NOMINATED, T0, step=i) for i in range(60)] for w in range(4)
        ]

        def write(batch: list[LedgerEvent]) -> None:
            for ledger_event in batch:
                _append_until_stored(engine, ledger_event, failures)
                time.sleep(0.005)

        def outage() -> None:
            time.sleep(0.15)
            proxy.cut()
            time.sleep(0.5)
            proxy.restore()

        saboteur = threading.Thread(target=outage)
        saboteur.start()
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(write, batches))
        saboteur.join()
        assert _count(engine) == (240, 240)
        engine.dispose()
    assert failures, "the outage never hit a writer, so this test proved nothing"


def test_terminated_connections_are_replaced_without_an_error(pg_engine: Engine) -> None:
    append(pg_engine, event("p-1", EventKind.NOMINATED, T0))
    with pg_engine.connect() as connection:
        database = connection.execute(text("SELECT current_database()")).scalar_one()
    admin = create_ledger_engine(pg_engine.url.set(database="postgres"))
    with admin.connect() as connection:
        killed = connection.execute(
            text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = :db AND pid <> pg_backend_pid()"
            ),
            {"db": database},
        ).scalar_one()
    admin.dispose()
    assert killed >= 1
    assert append(pg_engine, event("p-1", EventKind.COMPLETED, T0)) is True
    assert _count(pg_engine) == (2, 2)

"""Appending events: idempotent, one at a time or in a batch, sync or async.

Idempotency lives in the database, not in the caller: the insert is
`INSERT ... ON CONFLICT (idempotency_key) DO NOTHING`, so an activity retried after a crash
(or after the database came back) appends again and the second row simply never appears,
even when two attempts race.

Why `asyncio.to_thread` over the sync engine rather than SQLAlchemy's asyncio extension:
the embedded SQLite default has no async driver among our dependencies (aiosqlite is not
one), and one sync engine serves the worker, the CLI and Alembic alike, with one
connection pool and one error translation. An append is one short transaction, so a
thread per in-flight append costs nothing next to the Kubernetes calls around it, and the
worker's event loop never blocks on the database.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import Connection, Engine, Insert, Table, select
from sqlalchemy.dialects import postgresql, sqlite

from preemptctl.ledger.engine import translated_errors
from preemptctl.ledger.events import LedgerEvent
from preemptctl.ledger.kinds import TERMINAL_KINDS, EventKind
from preemptctl.ledger.models import events
from preemptctl.ledger.payloads import Scheduled
from preemptctl.preemption.decision import PodRef

ROWS_PER_STATEMENT = 500
"""Batches up to this size are one multi-row INSERT: atomic on its own, so no BEGIN/COMMIT."""


@functools.cache
def insert_ignoring_duplicates(
    dialect_name: str, table: Table = events, key: str = "idempotency_key"
) -> Insert:
    """The dialect's `INSERT INTO table ... ON CONFLICT (key) DO NOTHING RETURNING id`: an
    append that a retry (or a second replica) cannot make twice, for every ledger table."""
    if dialect_name == "postgresql":
        pg_insert = postgresql.insert(table).on_conflict_do_nothing(index_elements=[table.c[key]])
        return pg_insert.returning(table.c.id)
    lite_insert = sqlite.insert(table).on_conflict_do_nothing(index_elements=[table.c[key]])
    return lite_insert.returning(table.c.id)


def without_nul(value: Any) -> Any:
    """`value` with every NUL character removed from its strings (keys included).

    Postgres refuses NUL in text and jsonb, and a pod's name, a message or an API error can
    carry one; refused, the append would be retried for as long as the activity lives. The
    writer strips it instead: the event is kept, minus a character nobody can read."""
    if isinstance(value, str):
        return value.replace("\x00", "") if "\x00" in value else value
    if isinstance(value, dict):
        return {without_nul(key): without_nul(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [without_nul(item) for item in value]
    return value


def _storable(row: dict[str, Any]) -> dict[str, Any]:
    """`row` without NULs; the common case (none anywhere) costs one orjson pass, not a walk."""
    texts = [value for value in row.values() if isinstance(value, str)]
    if any("\x00" in text for text in texts) or b"\\u0000" in orjson.dumps(row["payload"]):
        return dict(without_nul(row))
    return row


def _unique_rows(batch: Iterable[LedgerEvent]) -> list[dict[str, Any]]:
    """The rows to insert, first occurrence of each key only, in the caller's order."""
    seen: set[str] = set()
    rows = []
    for ledger_event in batch:
        if ledger_event.key not in seen:
            seen.add(ledger_event.key)
            rows.append(_storable(ledger_event.to_row()))
    return rows


def append_batch_on(connection: Connection, batch: Sequence[LedgerEvent]) -> int:
    """Append within the caller's transaction; the number of rows that were new."""
    rows = _unique_rows(batch)
    statement = insert_ignoring_duplicates(connection.dialect.name)
    inserted = 0
    for start in range(0, len(rows), ROWS_PER_STATEMENT):
        chunk = rows[start : start + ROWS_PER_STATEMENT]
        # One row: a plain execute. Several: SQLAlchemy's "insertmanyvalues" renders them
        # as one multi-row INSERT (the compiled form stays cached, unlike `.values(rows)`).
        # Postgres and SQLite both return ids only for the rows actually inserted.
        result = connection.execute(statement, chunk[0] if len(chunk) == 1 else chunk)
        inserted += len(result.all())
    return inserted


def append_batch(engine: Engine, batch: Sequence[LedgerEvent]) -> int:
    """Append several events atomically; the number that were new (not duplicates).

    All or nothing: if the database goes away midway, nothing of the batch is kept and the
    caller's retry appends the whole batch again. A batch that fits one statement runs in
    autocommit mode, since a single INSERT is atomic anyway: that saves the BEGIN and
    COMMIT round trips, which are most of an append's cost.
    """
    if len({e.key for e in batch}) <= ROWS_PER_STATEMENT:
        with (
            translated_errors(engine),
            engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection,
        ):
            return append_batch_on(connection, batch)
    with translated_errors(engine), engine.begin() as connection:
        return append_batch_on(connection, batch)


def append(engine: Engine, ledger_event: LedgerEvent) -> bool:
    """Append one event; False when its key was already in the ledger (a retry)."""
    return append_batch(engine, [ledger_event]) == 1


async def append_async(engine: Engine, ledger_event: LedgerEvent) -> bool:
    """`append` off the event loop, for async activities."""
    return await asyncio.to_thread(append, engine, ledger_event)


async def append_batch_async(engine: Engine, batch: Sequence[LedgerEvent]) -> int:
    """`append_batch` off the event loop, for async activities."""
    return await asyncio.to_thread(append_batch, engine, list(batch))


def record_scheduled(
    engine: Engine,
    preemption_id: str,
    run_id: str,
    preemptor: PodRef,
    node: str | None,
    occurred_at: datetime,
    *,
    members_bound: int | None = None,
) -> bool:
    """Append that the preemptor of the run `run_id` was bound (to `node`; a pod group: its
    `members_bound` members, minCount at least) after the run preempted its victims: a run
    of the one runbook ends at its last victim's delete, as upstream's does, and the bind
    is the scheduler's, recorded by whoever sees it (the trigger loop, from the watch). One
    statement; once per run (its key). True when it was new."""
    event = LedgerEvent(
        preemption_id,
        run_id,
        EventKind.PREEMPTOR_SCHEDULED,
        preemptor,
        node=node,
        payload=Scheduled(members_bound=members_bound).to_json(),
        occurred_at=occurred_at,
    )
    return append_batch(engine, [event]) == 1


def record_bound_after_end(
    engine: Engine,
    preemption_id: str,
    preemptor: PodRef,
    node: str,
    occurred_at: datetime,
) -> bool:
    """Append that `preemptor` was bound to `node` after its preemption's latest run ended
    without it (failed, aborted, or parked): so `history` and `explain` stop offering a
    retry that would only refuse ("already bound"). Whoever sees the bind calls it (the
    trigger loop, for a pod whose preemption ended unscheduled); the ledger holds the fact
    from then on, for every reader, with no need to ask the cluster. Nothing is appended
    for a run still going (it records its own scheduling), nor for one whose preemptor was
    already recorded scheduled; once per run (its key). True when the run now says so."""
    with translated_errors(engine), engine.begin() as connection:
        latest = connection.execute(
            select(events.c.run_id)
            .where(events.c.preemption_id == preemption_id)
            .order_by(events.c.id.desc())
            .limit(1)
        ).scalar_one_or_none()
        if latest is None:
            return False
        kinds = set(
            connection.execute(
                select(events.c.kind).where(
                    events.c.preemption_id == preemption_id, events.c.run_id == latest
                )
            ).scalars()
        )
        if not kinds & {kind.value for kind in TERMINAL_KINDS}:
            return False  # still running: the run records its own scheduling
        if EventKind.PREEMPTOR_SCHEDULED.value in kinds:
            return True
        event = LedgerEvent(
            preemption_id,
            str(latest),
            EventKind.PREEMPTOR_SCHEDULED,
            preemptor,
            node=node,
            payload=Scheduled(after_end=True).to_json(),
            occurred_at=occurred_at,
            step="after-end",
        )
        append_batch_on(connection, [event])
    return True

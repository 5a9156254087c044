"""Claims: the preemptions in flight, read from the ledger, that every decision must respect.

The claims read are the domain's (`preemption.claims.Claim`), each naming the run that holds
it: the one type from this reader to the planner's overlay.

A preemption claims its victims (and the capacity they free) from the moment its decision is
written ahead until its run ends. The ledger already holds exactly that: `victim_chosen`
events of runs with no terminal event yet, and for a group preemption, its `member_placed`
events (each member it placed, on its node). Reading claims from it, and writing each new
decision, under one ledger-wide lock serializes decisions across every worker replica, so no
two preemptions ever claim the same victim or the same freed capacity, whichever worker
makes them. The claims an auditor sees are the claims the planner respected.

A claim has no expiry: it ends with its run's terminal event (a run that waits an hour for
its preemptor to be bound still holds its victims and capacity), and a run whose preemptor
the API server reports gone ends itself (aborted), which ends its claim.

The lock is the one row of `decision_lock`, locked (`FOR UPDATE`) for the deciding
transaction. Locking a row needs the UPDATE privilege, which only the ledger's writers hold,
so a reader (or anyone with a login but no write rights) cannot hold decisions up, as it could
an advisory lock. It is taken with a lock timeout, and the deciding transaction runs under a
statement timeout: a decision never waits forever, whoever holds the lock. On the embedded
SQLite ledger (one machine by nature) it is an advisory file lock beside the database file.
"""

from __future__ import annotations

import fcntl
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import ColumnElement, Connection, Engine, and_, exists, func, select, text

from preemptctl.ledger.engine import sqlite_path, translated_errors
from preemptctl.ledger.errors import LedgerNotMigratedError
from preemptctl.ledger.kinds import TERMINAL_KINDS, EventKind
from preemptctl.ledger.models import events
from preemptctl.ledger.payloads import MemberPlaced
from preemptctl.preemption.claims import Claim

_thread_lock = threading.Lock()


_SET_TIMEOUTS = text(
    "SELECT set_config('lock_timeout', :lock_wait, true),"
    " set_config('statement_timeout', :statement, true)"
)
_TAKE_THE_LOCK = text("SELECT id FROM decision_lock WHERE id = 1 FOR UPDATE")
LOCK_WAIT_SECONDS = 10.0
"""How long a decision waits for the lock before its activity gives up (and is retried)."""
DECISION_SECONDS = 10.0
"""How long any one statement of the deciding transaction may run."""


@contextmanager
def decision_lock(
    engine: Engine,
    *,
    lock_wait_seconds: float = LOCK_WAIT_SECONDS,
    statement_seconds: float = DECISION_SECONDS,
) -> Iterator[Connection]:
    """A connection in a transaction holding the ledger-wide decision lock; the transaction
    commits when the block ends (so a decision written in it is visible to the next).

    Waiting longer than `lock_wait_seconds` for the lock, or a statement running longer than
    `statement_seconds`, raises `LedgerUnavailableError` (retry later)."""
    with translated_errors(engine):
        database = sqlite_path(engine.url)
        if database is None:
            with engine.begin() as connection:
                # The timeouts first (for this transaction only), so the lock honours them.
                connection.execute(
                    _SET_TIMEOUTS,
                    {
                        "lock_wait": f"{int(lock_wait_seconds * 1000)}ms",
                        "statement": f"{int(statement_seconds * 1000)}ms",
                    },
                )
                if connection.execute(_TAKE_THE_LOCK).first() is None:
                    raise LedgerNotMigratedError(
                        "the ledger has no decision_lock row: run `preemptctl migrate`"
                    )
                yield connection
            return
        lock_path = Path(f"{database}.decisions.lock")
        with _thread_lock, open(lock_path, "a") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            try:
                with engine.begin() as connection:
                    yield connection
            finally:
                fcntl.flock(lock_file, fcntl.LOCK_UN)


def _claims_of(rows: Iterable[Any]) -> dict[tuple[str, str], Claim]:
    """Rows of `victim_chosen` and `member_placed` events (in ledger order) grouped into one
    claim per run: a run with placed members claims them on their nodes (a group), else
    its preemptor on its first victim's node."""
    grouped: dict[tuple[str, str], list[str]] = {}
    members: dict[tuple[str, str], list[tuple[str, str]]] = {}
    first: dict[tuple[str, str], tuple[str, str, str]] = {}
    for row in rows:
        preemption_id, run_id, preemptor_uid, namespace, name, node, kind, victim_uid = row[:8]
        key = (preemption_id, run_id)
        first.setdefault(key, (preemptor_uid, node or "", f"{namespace}/{name}"))
        if kind == EventKind.MEMBER_PLACED.value:
            member = MemberPlaced.from_json(row.payload or {})
            members.setdefault(key, []).append((member.uid, node or ""))
        else:
            grouped.setdefault(key, []).append(victim_uid)
    claims = {}
    for key, (uid, node, holder) in first.items():
        placed = tuple(members.get(key, ()))
        claims[key] = Claim(
            uid,
            "" if placed else node,
            frozenset(grouped.get(key, ())),
            *key,
            members=placed,
            holder=holder,
        )
    return claims


_CLAIM_KINDS = (EventKind.VICTIM_CHOSEN.value, EventKind.MEMBER_PLACED.value)
_CHOSEN_COLUMNS = (
    events.c.preemption_id,
    events.c.run_id,
    events.c.preemptor_uid,
    events.c.preemptor_namespace,
    events.c.preemptor_name,
    events.c.node,
    events.c.kind,
    events.c.victim_uid,
    events.c.payload,
)


def _run_has_no(kinds: Iterable[EventKind], alias: str) -> ColumnElement[bool]:
    """No event of these kinds in the run of the `events` row selected."""
    other = events.alias(alias)
    return ~exists(
        select(other.c.id).where(
            and_(
                other.c.preemption_id == events.c.preemption_id,
                other.c.run_id == events.c.run_id,
                other.c.kind.in_([kind.value for kind in kinds]),
            )
        )
    )


def open_claims(connection: Connection) -> list[Claim]:
    """The claims of every run that has a decision with victims and no terminal event yet."""
    still_running = _run_has_no(TERMINAL_KINDS, "ended")
    rows = connection.execute(
        select(*_CHOSEN_COLUMNS)
        .where(events.c.kind.in_(_CLAIM_KINDS))
        .where(still_running)
        .order_by(events.c.id)
    ).all()
    return list(_claims_of(rows).values())


class ClaimReader:
    """The open claims, read incrementally: after a first full read, each read fetches only
    the decisions appended since the last one, and which of the still-open runs have ended.

    Use it only under the decision lock: every `victim_chosen` event is written under that
    lock, so when a reader holds it no decision with a lower id can still commit, and reading
    "ids after the last one seen" misses none. Terminal events are written without the lock
    (by the activity that ends the run), so they are looked up by run, never by id. One
    reader per worker process; its reads must not overlap (the lock sees to that within a
    process, as within the cluster)."""

    def __init__(self) -> None:
        self._open: dict[tuple[str, str], Claim] = {}
        self._after: int | None = None

    def read(self, connection: Connection) -> list[Claim]:
        if self._after is None:
            self._open = {(c.preemption_id, c.run_id): c for c in open_claims(connection)}
            last = connection.execute(select(func.max(events.c.id))).scalar()
            self._after = int(last or 0)
        else:
            rows = connection.execute(
                select(*_CHOSEN_COLUMNS, events.c.id)
                .where(events.c.kind.in_(_CLAIM_KINDS))
                .where(events.c.id > self._after)
                .order_by(events.c.id)
            ).all()
            if rows:
                self._after = max(self._after, int(rows[-1].id))
                self._open.update(_claims_of(rows))
            self._forget_ended(connection)
        return list(self._open.values())

    def _forget_ended(self, connection: Connection) -> None:
        if not self._open:
            return
        ids = sorted({preemption_id for preemption_id, _ in self._open})
        for start in range(0, len(ids), 500):
            ended = connection.execute(
                select(events.c.preemption_id, events.c.run_id)
                .where(events.c.preemption_id.in_(ids[start : start + 500]))
                .where(events.c.kind.in_([kind.value for kind in TERMINAL_KINDS]))
            ).all()
            for preemption_id, run_id in ended:
                self._open.pop((preemption_id, run_id), None)


def victims_chosen_since(connection: Connection, since: datetime) -> list[datetime]:
    """When each victim chosen since `since` was chosen, oldest first; dry runs, which evict
    nothing, are left out. The eviction budget counts these, across every worker."""
    not_dry_run = _run_has_no([EventKind.DRY_RUN], "dry")
    rows = connection.execute(
        select(events.c.occurred_at)
        .where(events.c.kind == EventKind.VICTIM_CHOSEN.value)
        .where(events.c.occurred_at >= since)
        .where(not_dry_run)
        .order_by(events.c.occurred_at)
    ).all()
    return [row.occurred_at for row in rows]

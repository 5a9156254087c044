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
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    and_,
    case,
    exists,
    func,
    null,
    or_,
    select,
    text,
    union_all,
)

from preemptctl.ledger.engine import create_ledger_engine, sqlite_path, translated_errors
from preemptctl.ledger.errors import LedgerNotMigratedError
from preemptctl.ledger.kinds import DECISION_KINDS, TERMINAL_KINDS, EventKind
from preemptctl.ledger.models import events
from preemptctl.ledger.payloads import MemberPlaced
from preemptctl.ledger.vocabulary import OUTCOME_OF_KIND, Outcome
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


def decision_engine(
    ledger: Engine,
    *,
    lock_wait_seconds: float = LOCK_WAIT_SECONDS,
    statement_seconds: float = DECISION_SECONDS,
) -> Engine:
    """The engine the deciding transactions run on: on Postgres, a small pool of its own
    whose connections carry the lock timeout and the statement timeout from the moment they
    open, so a decision spends no statement on them; on SQLite, the ledger's own."""
    if sqlite_path(ledger.url) is not None or ledger.dialect.name != "postgresql":
        return ledger
    return create_ledger_engine(
        ledger.url,
        pool_size=2,
        session_settings={
            "lock_timeout": f"{int(lock_wait_seconds * 1000)}ms",
            "statement_timeout": f"{int(statement_seconds * 1000)}ms",
        },
    )


@contextmanager
def decision_lock(
    engine: Engine,
    *,
    lock_wait_seconds: float = LOCK_WAIT_SECONDS,
    statement_seconds: float = DECISION_SECONDS,
    timeouts_set: bool = False,
) -> Iterator[Connection]:
    """A connection in a transaction holding the ledger-wide decision lock; the transaction
    commits when the block ends (so a decision written in it is visible to the next).

    Waiting longer than `lock_wait_seconds` for the lock, or a statement running longer than
    `statement_seconds`, raises `LedgerUnavailableError` (retry later). `timeouts_set`: the
    engine's connections carry both already (`decision_engine`), so none is set here."""
    with translated_errors(engine):
        database = sqlite_path(engine.url)
        if database is None:
            with engine.begin() as connection:
                if not timeouts_set:
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
    """Rows of `decision_made`, `victim_chosen` and `member_placed` events (in ledger order)
    grouped into one claim per run that chose victims or placed members: a run with placed
    members claims them on their nodes (a group), else its preemptor on its decision's node
    (each victim's row names the victim's own node, another for a gang taken whole)."""
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
        elif kind == EventKind.VICTIM_CHOSEN.value:
            grouped.setdefault(key, []).append(victim_uid)
    claims = {}
    for key, (uid, node, holder) in first.items():
        placed = tuple(members.get(key, ()))
        if not placed and key not in grouped:
            continue  # decided, but claims nothing (fits, or chose no victim)
        claims[key] = Claim(
            uid,
            "" if placed else node,
            frozenset(grouped.get(key, ())),
            *key,
            members=placed,
            holder=holder,
        )
    return claims


# A claim is read from its run's decision (the preemptor's node: written first, in the same
# insert as the rest), its victims and its placed members.
_CLAIM_KINDS = (
    EventKind.DECISION_MADE.value,
    EventKind.VICTIM_CHOSEN.value,
    EventKind.MEMBER_PLACED.value,
)
_CHOSEN_COLUMNS = (
    events.c.preemption_id,
    events.c.run_id,
    events.c.preemptor_uid,
    events.c.preemptor_namespace,
    events.c.preemptor_name,
    events.c.node,
    events.c.kind,
    events.c.victim_uid,
    # A placed member's payload names it; any other's (a decision's, with its rationale,
    # tens of KiB on a big cluster) stays in the database.
    case((events.c.kind == EventKind.MEMBER_PLACED.value, events.c.payload), else_=null()).label(
        "payload"
    ),
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


@dataclass(frozen=True)
class EarlierRun:
    """The latest run of a preemption before a given one, and how it ended (None: it
    recorded no end, e.g. it was terminated from outside)."""

    run_id: str
    outcome: Outcome | None


@dataclass(frozen=True)
class RunsOf:
    """What the ledger holds of the runs of some preemptions (by workflow ID): each run's
    decision, throttling, retry and end events, in ledger order, as `(id, run_id, kind)`.
    Enough to tell whether a run decided already (a run decides once: asked again, it is
    answered from the ledger), and which run came before it and how that one ended (the
    `retried` event a later run appends)."""

    rows: dict[str, list[tuple[int, str, str]]] = field(default_factory=dict)

    def decided(self, preemption_id: str, run_id: str) -> bool:
        """Whether `run_id` has a decision on record already."""
        decided = {kind.value for kind in DECISION_KINDS}
        return any(
            run == run_id and kind in decided for _, run, kind in self.rows.get(preemption_id, [])
        )

    def retried(self, preemption_id: str, run_id: str) -> bool:
        """Whether `run_id` appended its `retried` event already."""
        return any(
            run == run_id and kind == EventKind.RETRIED.value
            for _, run, kind in self.rows.get(preemption_id, [])
        )

    def earlier(self, preemption_id: str, run_id: str) -> EarlierRun | None:
        """The run of `preemption_id` that recorded events last, other than `run_id`, and
        how it ended; None when `run_id` is its first."""
        others = [row for row in self.rows.get(preemption_id, []) if row[1] != run_id]
        if not others:
            return None
        latest = max(others)[1]
        ends = [kind for _, run, kind in sorted(others) if run == latest and kind in _ENDS]
        return EarlierRun(latest, OUTCOME_OF_KIND[EventKind(ends[-1])] if ends else None)


_ENDS = frozenset(kind.value for kind in TERMINAL_KINDS)
_RUN_KINDS = sorted(
    {kind.value for kind in (*DECISION_KINDS, *TERMINAL_KINDS)}
    | {EventKind.THROTTLED.value, EventKind.RETRIED.value}
)
_RUN_KINDS_SET = frozenset(_RUN_KINDS)


class ClaimReader:
    """The open claims, read incrementally: after a first full read, each read fetches, in
    one statement, the decisions appended since the last one, which of the still-open runs
    have ended, and the runs of the preemptions about to be decided (`RunsOf`).

    Read it only under the decision lock: every `victim_chosen` event is written under that
    lock, so when a reader holds it no decision with a lower id can still commit, and reading
    "ids after the last one seen" misses none. Terminal events are written without the lock
    (by the activity that ends the run), so they are looked up by run, never by id. One
    reader per worker process; its reads must not overlap (the lock sees to that within a
    process, as within the cluster)."""

    def __init__(self) -> None:
        self._open: dict[tuple[str, str], Claim] = {}
        self._after: int | None = None

    def known(self) -> list[Claim] | None:
        """The open claims as of the last read, with this process's own decisions noted
        since (`note`); None before the first read. Read without the lock (the decision
        path plans against them ahead), so only as a guess that a read under the lock
        confirms: any claim a read brings that this did not hold was decided by another
        replica meanwhile."""
        return None if self._after is None else list(self._open.values())

    def note(self, claims: Iterable[Claim]) -> None:
        """Claims this process has just committed: known before the next read brings
        them back (as the same runs, so they are no news to it)."""
        for claim in claims:
            self._open[(claim.preemption_id, claim.run_id)] = claim

    def read(
        self, connection: Connection, preemptions: Sequence[str] = ()
    ) -> tuple[list[Claim], RunsOf]:
        """The open claims, and the runs of `preemptions` (`RunsOf`)."""
        if self._after is None:  # the first read: every open claim, then incrementally
            self._open = {(c.preemption_id, c.run_id): c for c in open_claims(connection)}
            self._after = int(connection.execute(select(func.max(events.c.id))).scalar() or 0)
        looked_up = sorted({preemption_id for preemption_id, _ in self._open} | set(preemptions))
        new_claims: list[Any] = []
        runs: dict[str, list[tuple[int, str, str]]] = {}
        seen: set[tuple[int, bool]] = set()
        for row in self._delta(connection, self._after, looked_up):
            # A decision is both a claim row (new ones) and a run row: the union names it
            # once for each, and each bucket keeps it once.
            as_claim = row.kind in _CLAIM_KINDS and row.id > self._after
            if (row.id, as_claim) in seen:
                continue
            seen.add((row.id, as_claim))
            if as_claim:
                new_claims.append(row)
            if row.kind in _RUN_KINDS_SET:
                runs.setdefault(row.preemption_id, []).append((row.id, row.run_id, row.kind))
        if new_claims:
            self._after = max(self._after, int(new_claims[-1].id))
            self._open.update(_claims_of(new_claims))
        for preemption_id, rows in runs.items():
            for _, run_id, kind in rows:
                if kind in _ENDS:
                    self._open.pop((preemption_id, run_id), None)
        asked = set(preemptions)
        return list(self._open.values()), RunsOf({p: r for p, r in runs.items() if p in asked})

    @staticmethod
    def _delta(connection: Connection, after: int, preemptions: list[str]) -> list[Any]:
        """One statement: the claim rows appended after `after`, and the decision, end,
        throttle and retry rows of `preemptions` (the open claims' and the batch's) and of
        the runs those new claims belong to, in ledger order."""
        claims = select(*_CHOSEN_COLUMNS, events.c.id).where(
            events.c.kind.in_(_CLAIM_KINDS), events.c.id > after
        )
        new = events.alias("new")
        claimed_since = select(new.c.preemption_id).where(
            new.c.kind.in_(_CLAIM_KINDS), new.c.id > after
        )
        runs = select(*_CHOSEN_COLUMNS, events.c.id).where(
            or_(
                events.c.preemption_id.in_(preemptions),
                events.c.preemption_id.in_(claimed_since),
            ),
            events.c.kind.in_(_RUN_KINDS),
        )
        statement = union_all(claims, runs)
        return sorted(connection.execute(statement).all(), key=lambda row: row.id)


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

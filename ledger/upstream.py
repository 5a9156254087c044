"""What kube-scheduler preempted, as shadow mode recorded it: the `upstream_preemptions` table.

One row per `Preempted` Event (one victim), appended once: `event_uid` is unique and the
insert is `ON CONFLICT (event_uid) DO NOTHING`, so a relisting watch, a restarted worker or
a second replica append the same Event without a second row. Rows are never updated.
`preemptctl compare` reads them back (`upstream_since`) and groups them by preemptor, beside
this controller's own decisions (`decisions_since`, from `preemption_events`).

Rows are `preemption.upstream.UpstreamPreemption`, the one value the recorder parses
(`kube.upstream_events`), this table stores and `compare` reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, select

from preemptctl.ledger.engine import translated_errors
from preemptctl.ledger.kinds import DECISION_KINDS, EventKind
from preemptctl.ledger.models import events, upstream_preemptions
from preemptctl.ledger.writer import insert_ignoring_duplicates, without_nul
from preemptctl.preemption.upstream import UpstreamPreemption

table = upstream_preemptions


@dataclass(frozen=True, slots=True)
class RecordedUpstream(UpstreamPreemption):
    """A row of `upstream_preemptions`: the preemption, with its row ID and when the worker
    saw it."""

    id: int
    observed_at: datetime


def _row(fact: UpstreamPreemption, observed_at: datetime) -> dict[str, Any]:
    row = {
        "observed_at": observed_at,
        "occurred_at": fact.occurred_at,
        "event_uid": fact.event_uid,
        "victim_namespace": fact.victim_namespace,
        "victim_name": fact.victim_name,
        "victim_uid": fact.victim_uid,
        "preemptor_uid": fact.preemptor_uid,
        "preemptor_namespace": fact.preemptor_namespace,
        "preemptor_name": fact.preemptor_name,
        "node": fact.node,
        "message": fact.message,
    }
    cleaned: dict[str, Any] = without_nul(row)
    return cleaned


def append_upstream(
    engine: Engine, facts: Sequence[UpstreamPreemption], *, observed_at: datetime | None = None
) -> int:
    """Append these preemptions in one statement; how many were new (an Event already
    recorded is left as it is)."""
    moment = observed_at or datetime.now(UTC)
    rows: dict[str, dict[str, Any]] = {}
    for fact in facts:
        rows.setdefault(fact.event_uid, _row(fact, moment))
    if not rows:
        return 0
    with (
        translated_errors(engine),
        engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection,
    ):
        statement = insert_ignoring_duplicates(connection.dialect.name, table, "event_uid")
        values = list(rows.values())
        result = connection.execute(statement, values[0] if len(values) == 1 else values)
        return len(result.all())


def upstream_since(engine: Engine, since: datetime | None = None) -> list[RecordedUpstream]:
    """Every recorded upstream preemption whose Event occurred at or after `since` (all when
    None), oldest first."""
    statement = select(table).order_by(table.c.occurred_at, table.c.id)
    if since is not None:
        statement = statement.where(table.c.occurred_at >= since)
    with translated_errors(engine), engine.connect() as connection:
        return [
            RecordedUpstream(
                id=row.id,
                observed_at=row.observed_at,
                occurred_at=row.occurred_at,
                event_uid=row.event_uid,
                victim_namespace=row.victim_namespace,
                victim_name=row.victim_name,
                victim_uid=row.victim_uid,
                preemptor_uid=row.preemptor_uid,
                preemptor_namespace=row.preemptor_namespace,
                preemptor_name=row.preemptor_name,
                node=row.node,
                message=row.message,
            )
            for row in connection.execute(statement)
        ]


# -- our side, for the comparison --------------------------------------------------------------

COMPARED_KINDS = (*sorted(k.value for k in DECISION_KINDS), EventKind.PREEMPTION_ABORTED.value)


@dataclass(frozen=True, slots=True)
class OurDecision:
    """One decision this controller recorded (or a run that stopped before deciding:
    `verdict` "Aborted"), as `preemptctl compare` reads it."""

    preemption_id: str
    occurred_at: datetime
    preemptor_namespace: str
    preemptor_name: str
    preemptor_uid: str
    verdict: str
    node: str | None
    victims: tuple[str, ...]  # "ns/name", in the decision's order
    message: str
    dry_run: bool

    @property
    def preemptor_key(self) -> str:
        return f"{self.preemptor_namespace}/{self.preemptor_name}"


def decisions_since(engine: Engine, since: datetime | None = None) -> list[OurDecision]:
    """Every decision (and every run that stopped before one) recorded at or after `since`,
    oldest first; `dry_run` when its run ended in shadow mode."""
    payload = events.c.payload
    statement = (
        select(
            events.c.preemption_id,
            events.c.run_id,
            events.c.kind,
            events.c.occurred_at,
            events.c.preemptor_namespace,
            events.c.preemptor_name,
            events.c.preemptor_uid,
            events.c.node,
            # Only the fields compared: a decision's rationale can be many times their size.
            payload["status"].label("status"),
            payload["victims"].label("victims"),
            payload["message"].label("message"),
            payload["reason"].label("reason"),
        )
        .where(events.c.kind.in_([*COMPARED_KINDS, EventKind.DRY_RUN.value]))
        .order_by(events.c.id)
    )
    if since is not None:
        statement = statement.where(events.c.occurred_at >= since)
    with translated_errors(engine), engine.connect() as connection:
        rows = list(connection.execute(statement))
    dry_runs = {row.run_id for row in rows if row.kind == EventKind.DRY_RUN.value}
    found = []
    for row in rows:
        if row.kind == EventKind.DRY_RUN.value:
            continue
        victims: tuple[str, ...] = ()
        if row.kind == EventKind.PREEMPTION_ABORTED.value:
            verdict, message = "Aborted", str(row.reason or "")
        else:
            verdict = str(row.status or row.kind)
            listed = row.victims if isinstance(row.victims, list) else []
            victims = tuple(
                f"{v.get('namespace')}/{v.get('name')}" for v in listed if isinstance(v, dict)
            )
            message = str(row.message or "")
        found.append(
            OurDecision(
                preemption_id=row.preemption_id,
                occurred_at=row.occurred_at,
                preemptor_namespace=row.preemptor_namespace,
                preemptor_name=row.preemptor_name,
                preemptor_uid=row.preemptor_uid,
                verdict=verdict,
                node=row.node,
                victims=victims,
                message=message,
                dry_run=row.run_id in dry_runs,
            )
        )
    return found

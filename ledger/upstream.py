"""What kube-scheduler preempted, as shadow mode recorded it: the `upstream_preemptions` table.

One row per `Preempted` Event (one victim), appended once: `event_uid` is unique and the
insert is `ON CONFLICT (event_uid) DO NOTHING`, so a relisting watch, a restarted worker or
a second replica append the same Event without a second row. Rows are never updated.
`preemptctl compare` reads them back (`upstream_since`) and groups them by preemptor, beside
this controller's own decisions (`decisions_since`, from `preemption_events`).

A row is a victim of a pod's preemption (`Preempted by pod <uid> on node <node>`: the node
recorded) or of a pod group's (`Preempted by podgroup <uid> on node cluster`: the group in
the preemptor columns, no node, since a group is placed over the whole cluster and its
victims are on any node). The message, kept whole, says which (`kube.upstream_events.
preempted_by_group`). On our side a group preemption's decision has the group in the
preemptor columns too, a preemption ID `group-preemption-...` and `GroupDecision.to_json()`
as its payload, whose `rationale.units` say which victims go together (`DecidedUnit`).

The recorder believes an Event only when the cluster bears it out (`kube.upstream_events`),
and the write bounds what it can still add, since rows are kept for good:

- one row per victim: upstream reports a victim once, so a second Event (another Event UID)
  naming a victim already recorded is left out (`victim_known`);
- at most `ROWS_PER_NAMESPACE_PER_HOUR` rows per victim namespace in any hour of
  `observed_at` (the worker's clock, not the Event's); what is over it is left out
  (`over_cap`). Two replicas checking at once may each add up to the cap's last row.

Both checks read the table before the insert; the caller counts what they left out.

Rows are `preemption.upstream.UpstreamPreemption`, the one value the recorder parses
(`kube.upstream_events`), this table stores and `compare` reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, func, select

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


ROWS_PER_NAMESPACE_PER_HOUR = 1_000
"""The most rows one victim namespace gets in an hour. Well above a busy namespace's real
preemptions; what a flood of Events past it would add is left out and counted instead."""

CAP_WINDOW = timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class Appended:
    """What `append_upstream` did: how many rows were new, and the Events (by UID) it left
    out, and why. An Event already recorded is neither new nor left out."""

    recorded: int = 0
    over_cap: frozenset[str] = frozenset()
    victim_known: frozenset[str] = frozenset()


def _recorded_victims(connection: Connection, victim_uids: Sequence[str]) -> set[str]:
    """Which of these victims already have a row."""
    if not victim_uids:
        return set()
    statement = select(table.c.victim_uid).where(table.c.victim_uid.in_(victim_uids))
    return set(connection.scalars(statement))


def _rows_in_window(
    connection: Connection, namespaces: Sequence[str], since: datetime
) -> dict[str, int]:
    """victim namespace -> rows observed since `since`."""
    statement = (
        select(table.c.victim_namespace, func.count())
        .where(table.c.victim_namespace.in_(namespaces), table.c.observed_at >= since)
        .group_by(table.c.victim_namespace)
    )
    return {namespace: int(count) for namespace, count in connection.execute(statement)}


def append_upstream(
    engine: Engine,
    facts: Sequence[UpstreamPreemption],
    *,
    observed_at: datetime | None = None,
    rows_per_namespace_per_hour: int = ROWS_PER_NAMESPACE_PER_HOUR,
) -> Appended:
    """Append these preemptions, but no second row for a victim and no more than the
    namespace's rows for the hour; what was new and what was left out."""
    moment = observed_at or datetime.now(UTC)
    rows: dict[str, UpstreamPreemption] = {}
    for fact in facts:
        rows.setdefault(fact.event_uid, fact)
    if not rows:
        return Appended()
    with translated_errors(engine), engine.begin() as connection:
        already = set(
            connection.scalars(select(table.c.event_uid).where(table.c.event_uid.in_(list(rows))))
        )
        fresh = [fact for uid, fact in rows.items() if uid not in already]  # replays aside
        victims = _recorded_victims(connection, [f.victim_uid for f in fresh if f.victim_uid])
        namespaces = sorted({fact.victim_namespace for fact in fresh})
        in_window = _rows_in_window(connection, namespaces, moment - CAP_WINDOW) if fresh else {}
        kept: list[dict[str, Any]] = []
        over_cap: set[str] = set()
        victim_known: set[str] = set()
        for fact in fresh:
            if fact.victim_uid in victims:
                victim_known.add(fact.event_uid)
            elif in_window.get(fact.victim_namespace, 0) >= rows_per_namespace_per_hour:
                over_cap.add(fact.event_uid)
            else:
                if fact.victim_uid is not None:
                    victims.add(fact.victim_uid)
                in_window[fact.victim_namespace] = in_window.get(fact.victim_namespace, 0) + 1
                kept.append(_row(fact, moment))
        recorded = 0
        if kept:
            statement = insert_ignoring_duplicates(connection.dialect.name, table, "event_uid")
            result = connection.execute(statement, kept[0] if len(kept) == 1 else kept)
            recorded = len(result.all())
    return Appended(recorded, frozenset(over_cap), frozenset(victim_known))


def _recorded(row: Any) -> RecordedUpstream:
    return RecordedUpstream(
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


def upstream_since(engine: Engine, since: datetime | None = None) -> list[RecordedUpstream]:
    """Every recorded upstream preemption whose Event occurred at or after `since` (all when
    None), oldest first."""
    statement = select(table).order_by(table.c.occurred_at, table.c.id)
    if since is not None:
        statement = statement.where(table.c.occurred_at >= since)
    with translated_errors(engine), engine.connect() as connection:
        return [_recorded(row) for row in connection.execute(statement)]


def upstream_of_victims(
    connection: Connection, victim_uids: Sequence[str]
) -> dict[str, RecordedUpstream]:
    """kube-scheduler's recorded preemption of each of these victims, by victim UID (one row
    per victim: the recorder keeps the first Event); one read on the victim UID index."""
    if not victim_uids:
        return {}
    statement = select(table).where(table.c.victim_uid.in_(sorted(set(victim_uids))))
    found: dict[str, RecordedUpstream] = {}
    for row in connection.execute(statement.order_by(table.c.id)):
        found.setdefault(str(row.victim_uid), _recorded(row))
    return found


# -- our side, for the comparison --------------------------------------------------------------

COMPARED_KINDS = (*sorted(k.value for k in DECISION_KINDS), EventKind.PREEMPTION_ABORTED.value)

GROUP_PREEMPTION_PREFIX = "group-preemption-"
"""How a group preemption's ID begins (`workflows.contract.group_workflow_id_for`); a pod
preemption's begins `preemption-`."""


@dataclass(frozen=True, slots=True)
class DecidedUnit:
    """One victim unit a group decision took (`UnitChoice`): its name (`podGroup ml/train-b`,
    `pod ml/notebook`) and its pods, "ns/name"."""

    unit: str
    pods: tuple[str, ...]


def _units(listed: Any) -> tuple[DecidedUnit, ...]:
    """A decision payload's `rationale.units`, as far as they are readable."""
    if not isinstance(listed, list):
        return ()
    return tuple(
        DecidedUnit(str(unit.get("unit") or "?"), tuple(str(p) for p in unit.get("pods") or ()))
        for unit in listed
        if isinstance(unit, dict) and isinstance(unit.get("pods") or [], list)
    )


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
    units: tuple[DecidedUnit, ...] = ()  # a group decision's victim units

    @property
    def preemptor_key(self) -> str:
        return f"{self.preemptor_namespace}/{self.preemptor_name}"

    @property
    def by_group(self) -> bool:
        """A pod group's preemption: the preemptor columns name the group."""
        return self.preemption_id.startswith(GROUP_PREEMPTION_PREFIX)


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
            payload["rationale"]["units"].label("units"),  # a group decision's
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
        units: tuple[DecidedUnit, ...] = ()
        if row.kind == EventKind.PREEMPTION_ABORTED.value:
            verdict, message = "Aborted", str(row.reason or "")
        else:
            verdict = str(row.status or row.kind)
            listed = row.victims if isinstance(row.victims, list) else []
            victims = tuple(
                f"{v.get('namespace')}/{v.get('name')}" for v in listed if isinstance(v, dict)
            )
            message = str(row.message or "")
            units = _units(row.units)
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
                units=units,
            )
        )
    return found

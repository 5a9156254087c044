"""The `upstream_preemptions` table: what kube-scheduler preempted, as shadow mode saw it.

Scenarios (Postgres, and the embedded SQLite where the behaviour is the same):
- appended rows read back exactly, oldest Event first;
- the same Event appended again (a relist, a restart, a second replica) adds no row, also
  within one batch, and the count says how many were new (a replay is not "left out");
- a second Event (another UID) naming a victim already recorded adds no row and is reported
  `victim_known`, also within one batch;
- a victim namespace gets at most its cap of rows per hour of observation; what is over it
  is reported `over_cap`, other namespaces are not affected, and the next hour has room;
- `since` leaves out Events that occurred before it;
- a NUL character in a message is dropped rather than refused;
- an update or delete is refused by the database (append-only), for the ledger's roles.

Pod groups (issue 19, item 4):
- a victim of kube-scheduler's group preemption reads back with the group in the preemptor
  columns, no node and its `Preempted by podgroup` message;
- our group preemption's decision reads back (`decisions_since`) as the group's, by its
  `group-preemption-` ID, with its victims and its units (each unit's name and pods), a dry
  run when its run ended so; a pod's decision has no units and is not a group's.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from preemptctl.ledger.events import LedgerEvent, decision_events, group_decision_events
from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.payloads import Terminal
from preemptctl.ledger.upstream import (
    Appended,
    DecidedUnit,
    RecordedUpstream,
    append_upstream,
    decisions_since,
    upstream_since,
)
from preemptctl.ledger.writer import append_batch
from preemptctl.preemption.decision import Decision, PodRef, Rationale, Strategy, Verdict
from preemptctl.preemption.group_decision import GroupDecision, GroupRef, UnitChoice

T0 = datetime(2026, 11, 24, 7, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Fact:
    event_uid: str
    occurred_at: datetime = T0
    victim_namespace: str = "default"
    victim_name: str = "low-a"
    victim_uid: str | None = "uid-low-a"
    preemptor_uid: str = "uid-urgent"
    preemptor_namespace: str | None = "prod"
    preemptor_name: str | None = "urgent"
    node: str | None = "n1"
    message: str = "Preempted by pod uid-urgent on node n1"


@pytest.fixture(params=["postgres", "sqlite"])
def engine(request: pytest.FixtureRequest) -> Engine:
    fixture = "pg_engine" if request.param == "postgres" else "sqlite_engine"
    found: Engine = request.getfixturevalue(fixture)
    return found


def test_rows_read_back_oldest_first(engine: Engine) -> None:
    later = Fact("e2", T0 + timedelta(seconds=1), victim_name="low-b", victim_uid=None)
    appended = append_upstream(engine, [later, Fact("e1")], observed_at=T0 + timedelta(seconds=5))
    assert appended == Appended(recorded=2)
    rows = upstream_since(engine)
    assert [(r.event_uid, r.victim_key, r.victim_uid, r.preemptor_key) for r in rows] == [
        ("e1", "default/low-a", "uid-low-a", "prod/urgent"),
        ("e2", "default/low-b", None, "prod/urgent"),
    ]
    first = rows[0]
    assert isinstance(first, RecordedUpstream)
    assert (first.occurred_at, first.observed_at, first.node, first.message) == (
        T0,
        T0 + timedelta(seconds=5),
        "n1",
        "Preempted by pod uid-urgent on node n1",
    )


def test_the_same_event_twice_is_one_row(engine: Engine) -> None:
    assert append_upstream(engine, [Fact("e1"), Fact("e1")]) == Appended(recorded=1)
    other_victim = Fact("e2", victim_name="low-b", victim_uid="uid-low-b")
    assert append_upstream(engine, [Fact("e1"), other_victim]) == Appended(recorded=1)
    assert append_upstream(engine, []) == Appended()
    assert [r.event_uid for r in upstream_since(engine)] == ["e1", "e2"]


def test_a_second_event_on_a_recorded_victim_is_left_out(engine: Engine) -> None:
    append_upstream(engine, [Fact("e1")])
    forged = Fact("forged", preemptor_uid="uid-other", preemptor_name="other")
    assert append_upstream(engine, [forged]) == Appended(victim_known=frozenset({"forged"}))
    batch = [Fact("e2", victim_uid="uid-b"), Fact("e3", victim_uid="uid-b")]
    assert append_upstream(engine, batch) == Appended(1, victim_known=frozenset({"e3"}))
    assert [(r.event_uid, r.preemptor_key) for r in upstream_since(engine)] == [
        ("e1", "prod/urgent"),
        ("e2", "prod/urgent"),
    ]


def _flood(namespace: str, count: int, first: int = 0) -> list[Fact]:
    return [
        Fact(f"{namespace}-{n}", victim_namespace=namespace, victim_uid=f"uid-{namespace}-{n}")
        for n in range(first, first + count)
    ]


def test_a_namespace_gets_at_most_its_cap_of_rows_per_hour(engine: Engine) -> None:
    def append(facts: list[Fact], at: datetime) -> Appended:
        return append_upstream(engine, facts, observed_at=at, rows_per_namespace_per_hour=2)

    assert append(_flood("tenant", 1), T0) == Appended(recorded=1)
    assert append(_flood("tenant", 3, first=1) + _flood("prod", 2), T0 + timedelta(minutes=1)) == (
        Appended(recorded=3, over_cap=frozenset({"tenant-2", "tenant-3"}))
    )
    assert append(_flood("tenant", 1, first=4), T0 + timedelta(minutes=59)) == Appended(
        over_cap=frozenset({"tenant-4"})
    )
    assert append(_flood("tenant", 1, first=5), T0 + timedelta(minutes=61)) == Appended(1)
    recorded = [r.event_uid for r in upstream_since(engine) if r.victim_namespace == "tenant"]
    assert sorted(recorded) == ["tenant-0", "tenant-1", "tenant-5"]


def test_since_leaves_out_older_events(engine: Engine) -> None:
    append_upstream(
        engine, [Fact("old", T0 - timedelta(hours=2)), Fact("new", victim_uid="uid-low-b")]
    )
    assert [r.event_uid for r in upstream_since(engine, T0 - timedelta(hours=1))] == ["new"]


def test_a_nul_in_a_message_is_dropped(engine: Engine) -> None:
    append_upstream(engine, [Fact("e1", message="Preempted\x00 by pod x on node n1")])
    assert upstream_since(engine)[0].message == "Preempted by pod x on node n1"


def test_rows_cannot_be_changed_or_deleted(pg_engine: Engine) -> None:
    append_upstream(pg_engine, [Fact("e1")])
    for statement in (
        "UPDATE upstream_preemptions SET node = 'n2'",
        "DELETE FROM upstream_preemptions",
    ):
        with (
            pytest.raises(DBAPIError, match=r"append-only|permission|not allowed"),
            pg_engine.begin() as connection,
        ):
            connection.execute(text(statement))


# -- pod groups ---------------------------------------------------------------------------------


def test_a_group_preemptions_victim_reads_back_with_the_group_and_no_node(engine: Engine) -> None:
    fact = Fact(
        "e1",
        victim_namespace="ml",
        victim_name="train-b-0",
        victim_uid="uid-train-b-0",
        preemptor_uid="uid-train-a",
        preemptor_namespace="ml",
        preemptor_name="train-a",
        node=None,
        message="Preempted by podgroup uid-train-a on node cluster",
    )
    append_upstream(engine, [fact], observed_at=T0)
    [row] = upstream_since(engine)
    assert (row.victim_key, row.preemptor_uid, row.preemptor_key, row.node, row.message) == (
        "ml/train-b-0",
        "uid-train-a",
        "ml/train-a",
        None,
        "Preempted by podgroup uid-train-a on node cluster",
    )


def _ml(name: str) -> PodRef:
    return PodRef("ml", name, f"uid-{name}", 10)


def test_our_group_decision_reads_back_with_its_victims_and_units(engine: Engine) -> None:
    group = GroupRef("ml", "train-a", "uid-train-a", 1000)
    train_b = tuple(_ml(f"train-b-{i}") for i in range(3))
    units = (
        UnitChoice("podGroup ml/train-b", True, 10, train_b, ("n1", "n2"), 0, "did not fit"),
        UnitChoice("pod ml/notebook", False, 10, (_ml("notebook"),), ("n3",), 0, "did not fit"),
    )
    decision = GroupDecision(
        group.key,
        group.uid,
        Verdict.PREEMPT,
        "preempt 4 pod(s) in 2 unit(s)",
        nominations={"ml/train-a-0": "n1"},
        victims=(*train_b, _ml("notebook")),
        units=units,
    )
    preemption_id = f"group-preemption-ml-train-a-{group.uid}"
    batch = group_decision_events(preemption_id, "run-1", group, decision, T0)
    dry = Terminal(reason="dry run").to_json()
    batch.append(
        LedgerEvent(preemption_id, "run-1", EventKind.DRY_RUN, group.as_preemptor(), payload=dry)
    )
    pod = PodRef("prod", "urgent", "uid-urgent", 1000)
    decided = Decision(pod, Verdict.UNSCHEDULABLE, "no node", Rationale(Strategy.DEFAULT))
    batch += decision_events("preemption-prod-urgent-uid-urgent", "run-2", pod, decided, T0)
    append_batch(engine, batch)
    ours, theirs = decisions_since(engine)
    assert (ours.preemption_id, ours.by_group, ours.preemptor_key, ours.preemptor_uid) == (
        preemption_id,
        True,
        "ml/train-a",
        "uid-train-a",
    )
    assert (ours.verdict, ours.node, ours.dry_run) == ("Preempt", None, True)
    assert ours.victims == ("ml/train-b-0", "ml/train-b-1", "ml/train-b-2", "ml/notebook")
    assert ours.units == (
        DecidedUnit("podGroup ml/train-b", ("ml/train-b-0", "ml/train-b-1", "ml/train-b-2")),
        DecidedUnit("pod ml/notebook", ("ml/notebook",)),
    )
    assert (theirs.by_group, theirs.units, theirs.verdict) == (False, (), "Unschedulable")

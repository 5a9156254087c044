"""The `upstream_preemptions` table: what kube-scheduler preempted, as shadow mode saw it.

Scenarios (Postgres, and the embedded SQLite where the behaviour is the same):
- appended rows read back exactly, oldest Event first;
- the same Event appended again (a relist, a restart, a second replica) adds no row, also
  within one batch, and the count says how many were new;
- `since` leaves out Events that occurred before it;
- a NUL character in a message is dropped rather than refused;
- an update or delete is refused by the database (append-only), for the ledger's roles.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from preemptctl.ledger.upstream import RecordedUpstream, append_upstream, upstream_since

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
    assert append_upstream(engine, [later, Fact("e1")], observed_at=T0 + timedelta(seconds=5)) == 2
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
    assert append_upstream(engine, [Fact("e1"), Fact("e1")]) == 1
    assert append_upstream(engine, [Fact("e1"), Fact("e2")]) == 1
    assert append_upstream(engine, []) == 0
    assert [r.event_uid for r in upstream_since(engine)] == ["e1", "e2"]


def test_since_leaves_out_older_events(engine: Engine) -> None:
    append_upstream(engine, [Fact("old", T0 - timedelta(hours=2)), Fact("new")])
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

"""The database itself refuses to change or remove a ledger event.

Scenarios:
- Postgres refuses UPDATE of an event
- Postgres refuses DELETE of an event
- Postgres refuses TRUNCATE of the events table
- SQLite refuses UPDATE of an event
- SQLite refuses DELETE of an event
- after a refused change the event is still there, unchanged
"""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, func, select, text
from sqlalchemy.exc import DBAPIError

from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.models import events
from preemptctl.ledger.writer import append
from tests.ledger.builders import T0, event

CHANGES = {
    "update": "UPDATE preemption_events SET node = 'elsewhere'",
    "delete": "DELETE FROM preemption_events",
}


def _one_event(engine: Engine) -> None:
    append(engine, event("p-1", EventKind.NOMINATED, T0))


@pytest.mark.parametrize("statement", ["update", "delete", "truncate"])
def test_postgres_refuses_changing_events(pg_engine: Engine, statement: str) -> None:
    _one_event(pg_engine)
    sql = CHANGES.get(statement, "TRUNCATE preemption_events")
    with pytest.raises(DBAPIError, match="append-only"), pg_engine.begin() as connection:
        connection.execute(text(sql))


@pytest.mark.parametrize("statement", ["update", "delete"])
def test_sqlite_refuses_changing_events(sqlite_engine: Engine, statement: str) -> None:
    _one_event(sqlite_engine)
    with pytest.raises(DBAPIError, match="append-only"), sqlite_engine.begin() as connection:
        connection.execute(text(CHANGES[statement]))


def test_a_refused_change_leaves_the_event_as_it_was(pg_engine: Engine) -> None:
    _one_event(pg_engine)
    with pytest.raises(DBAPIError), pg_engine.begin() as connection:
        connection.execute(text(CHANGES["update"]))
    with pg_engine.connect() as connection:
        nodes = connection.execute(
            select(events.c.node, func.count()).group_by(events.c.node)
        ).all()
    assert [tuple(row) for row in nodes] == [("node-3", 1)]

"""The least-privilege roles in docs/ledger.md work as documented (the SQL is run verbatim).

Scenarios:
- the migration role can migrate the ledger
- the worker role can append and read, and is refused UPDATE, DELETE and TRUNCATE
- the reader role can read and is refused appends
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import Engine
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError

from preemptctl import migrations
from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.queries import HistoryQuery, history
from preemptctl.ledger.writer import append
from tests.ledger.builders import T0, event
from tests.support.postgres import admin_url, fresh_database

DOC = Path(__file__).resolve().parents[2] / "docs" / "ledger.md"
ROLES = ("preemptctl_migrator", "preemptctl_worker", "preemptctl_reader")


def documented_sql() -> str:
    text = DOC.read_text()
    match = re.search(r"<!-- roles-sql -->\n```sql\n(.*?)```", text, re.DOTALL)
    assert match, "docs/ledger.md lost its roles-sql block"
    return match.group(1)


@pytest.fixture
def role_urls() -> Iterator[dict[str, URL]]:
    """A fresh database set up by the documented SQL, with this test's own role names."""
    suffix = secrets.token_hex(4)
    renamed = {role: f"{role}_{suffix}" for role in ROLES}
    sql = documented_sql()
    for role, unique in renamed.items():
        sql = sql.replace(role, unique)
    admin = admin_url()
    try:
        with fresh_database() as url:
            database = make_url(url)
            with psycopg.connect(
                host=database.host,
                port=database.port,
                user=database.username,
                dbname=database.database,
                autocommit=True,
            ) as connection:
                connection.execute(sql.encode())
            yield {
                role.removeprefix("preemptctl_"): database.set(
                    username=unique, password=f"change-me-{role.removeprefix('preemptctl_')}"
                )
                for role, unique in renamed.items()
            }
    finally:
        with psycopg.connect(
            host=admin.host, port=admin.port, user=admin.username, dbname=admin.database,
            autocommit=True,
        ) as connection:  # fmt: skip
            for unique in renamed.values():
                connection.execute(f'DROP ROLE IF EXISTS "{unique}"'.encode())


@pytest.fixture
def migrated(role_urls: dict[str, URL]) -> Iterator[dict[str, Engine]]:
    migrations.upgrade(role_urls["migrator"].render_as_string(hide_password=False))
    engines = {name: create_ledger_engine(url) for name, url in role_urls.items()}
    yield engines
    for engine in engines.values():
        engine.dispose()


def test_the_migration_role_migrates(migrated: dict[str, Engine]) -> None:
    assert migrations.current_revision(migrated["migrator"]) == migrations.head_revision()


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE preemption_events SET node = 'x'",
        "DELETE FROM preemption_events",
        "TRUNCATE preemption_events",
    ],
)
def test_the_worker_appends_and_reads_but_never_changes(
    migrated: dict[str, Engine], statement: str
) -> None:
    worker = migrated["worker"]
    assert append(worker, event("p-1", EventKind.NOMINATED, T0)) is True
    assert append(worker, event("p-1", EventKind.NOMINATED, T0)) is False
    assert [v.preemption_id for v in history(worker, HistoryQuery())] == ["p-1"]
    with pytest.raises(DBAPIError, match="permission denied"), worker.begin() as connection:
        connection.exec_driver_sql(statement)


def test_the_reader_reads_and_cannot_append(migrated: dict[str, Engine]) -> None:
    append(migrated["worker"], event("p-1", EventKind.NOMINATED, T0))
    assert len(history(migrated["reader"], HistoryQuery())) == 1
    with pytest.raises(DBAPIError, match="permission denied"):
        append(migrated["reader"], event("p-1", EventKind.COMPLETED, T0))

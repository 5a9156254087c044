"""Migrations are the only way the schema changes, and they agree with the models.

Scenarios:
- upgrading an empty Postgres database to head creates the table, its indexes and triggers
- downgrading to base removes the table and the trigger function
- upgrading again after a downgrade works (the round trip is repeatable)
- the models and the migrations agree on Postgres (autogenerate diff is empty)
- the models and the migrations agree on SQLite (autogenerate diff is empty)
- the migration's config works without an alembic.ini in the working directory
"""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from preemptctl import migrations
from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.ledger.models import EVENTS_TABLE, Base

EXPECTED_INDEXES = {
    "ix_preemption_events_preemptor",
    "ix_preemption_events_victim",
    "ix_preemption_events_node",
    "ix_preemption_events_occurred_at",
    "ix_preemption_events_kind",
    "ix_preemption_events_preemption",
}


def _tables_and_function(url: str) -> tuple[set[str], bool]:
    engine = create_ledger_engine(url)
    try:
        with engine.connect() as connection:
            tables = set(inspect(connection).get_table_names())
            function = connection.execute(
                text(
                    "SELECT count(*) FROM pg_proc WHERE proname = 'preemption_events_refuse_change'"
                )
            ).scalar_one()
        return tables, bool(function)
    finally:
        engine.dispose()


def test_upgrade_from_empty_creates_table_indexes_and_triggers(postgres_url: str) -> None:
    migrations.upgrade(postgres_url)
    engine = create_ledger_engine(postgres_url)
    try:
        with engine.connect() as connection:
            indexes = {ix["name"] for ix in inspect(connection).get_indexes(EVENTS_TABLE)}
            triggers = set(
                connection.execute(
                    text(
                        "SELECT tgname FROM pg_trigger "
                        "WHERE tgrelid = 'preemption_events'::regclass AND NOT tgisinternal"
                    )
                ).scalars()
            )
        assert migrations.current_revision(engine) == migrations.head_revision()
    finally:
        engine.dispose()
    assert indexes >= EXPECTED_INDEXES
    assert triggers == {"preemption_events_append_only", "preemption_events_no_truncate"}


def test_downgrade_to_base_removes_table_and_function(postgres_url: str) -> None:
    migrations.upgrade(postgres_url)
    migrations.downgrade(postgres_url, "base")
    tables, function = _tables_and_function(postgres_url)
    assert EVENTS_TABLE not in tables
    assert not function


def test_upgrade_after_downgrade_recreates_everything(postgres_url: str) -> None:
    migrations.upgrade(postgres_url)
    migrations.downgrade(postgres_url, "base")
    migrations.upgrade(postgres_url)
    tables, function = _tables_and_function(postgres_url)
    assert EVENTS_TABLE in tables
    assert function


def _diff(url: str) -> list[object]:
    engine = create_ledger_engine(url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            return list(compare_metadata(context, Base.metadata))
    finally:
        engine.dispose()


def test_models_and_migrations_agree_on_postgres(migrated_postgres_url: str) -> None:
    assert _diff(migrated_postgres_url) == []


def test_models_and_migrations_agree_on_sqlite(sqlite_url: str) -> None:
    migrations.upgrade(sqlite_url)
    assert _diff(sqlite_url) == []


def test_migrations_need_no_alembic_ini_in_the_working_directory(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    migrations.upgrade(sqlite_url)
    engine = create_ledger_engine(sqlite_url)
    try:
        assert migrations.current_revision(engine) == migrations.head_revision()
    finally:
        engine.dispose()

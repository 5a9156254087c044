"""Migrations are the only way the schema changes, and they agree with the models.

Scenarios:
- upgrading an empty Postgres database to head creates the table, its indexes and triggers
- downgrading to base removes the table and the trigger function
- upgrading again after a downgrade works (the round trip is repeatable)
- the models and the migrations agree on Postgres (autogenerate diff is empty)
- the models and the migrations agree on SQLite (autogenerate diff is empty)
- the migration's config works without an alembic.ini in the working directory
- the support window: revisions are numbered in sequence; this code runs against its head
  and the next revision (a rollback after a migration), refuses an unmigrated, older, or two
  migrations newer schema, each in one line that says what to do
- `preemptctl history` of a release runs against a ledger one migration ahead of it
"""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

from preemptctl import migrations
from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.ledger.models import EVENTS_TABLE, Base
from preemptctl.worker.cli import main

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


def test_revisions_are_numbered_in_sequence() -> None:
    """The support window recognises "the next revision" by its number alone."""
    script = ScriptDirectory.from_config(migrations.alembic_config())
    for revision in script.walk_revisions():
        if revision.down_revision is None:
            assert revision.revision == "0001"
        else:
            assert migrations.next_revision(str(revision.down_revision)) == revision.revision


def test_the_support_window_is_head_and_the_next_revision() -> None:
    assert migrations.supported_revisions("0007") == ("0007", "0008")


@pytest.mark.parametrize(
    ("current", "problem"),
    [
        ("0007", None),
        ("0008", None),
        (None, "has no ledger schema; run `preemptctl migrate` first"),
        (
            "0006",
            "is at schema revision 0006, this preemptctl needs 0007; run `preemptctl migrate`",
        ),
        (
            "0009",
            "is at schema revision 0009, more than one migration ahead of this preemptctl "
            "(0007, which runs on 0007 and the next); upgrade preemptctl",
        ),
    ],
)
def test_schema_problems_say_what_to_do(current: str | None, problem: str | None) -> None:
    assert migrations.schema_problem(current, head="0007") == problem


def _stamp(url: str, revision: str) -> None:
    """Pretend a newer release migrated the ledger (an expand-only migration adds nothing
    this release reads)."""
    engine = create_ledger_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": revision})
    finally:
        engine.dispose()


def test_a_release_runs_against_a_ledger_one_migration_ahead(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    migrations.upgrade(url)
    ahead = migrations.next_revision(migrations.head_revision())
    assert ahead is not None
    _stamp(url, ahead)
    assert main(["history", "--database-url", url]) == 0
    assert capsys.readouterr().out == "no preemptions in the ledger match\n"


def test_a_release_refuses_a_ledger_two_migrations_ahead(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    migrations.upgrade(url)
    ahead = migrations.next_revision(migrations.head_revision())
    assert ahead is not None
    two_ahead = migrations.next_revision(ahead)
    assert two_ahead is not None
    _stamp(url, two_ahead)
    assert main(["history", "--database-url", url]) == 2
    assert capsys.readouterr().err.endswith("; upgrade preemptctl\n")

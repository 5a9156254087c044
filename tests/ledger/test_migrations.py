"""Migrations are the only way the schema changes, and they agree with the models.

Scenarios:
- upgrading an empty Postgres database to head creates the table, its indexes and triggers
- downgrading to base removes the table and the trigger function
- upgrading again after a downgrade works (the round trip is repeatable)
- the models and the migrations agree on Postgres (autogenerate diff is empty)
- the models and the migrations agree on SQLite (autogenerate diff is empty)
- the migration's config works without an alembic.ini in the working directory
- a released migration (0001 to 0003) is never edited: its file is byte for byte as released
- the support window: revisions are numbered in sequence; this code runs against its head
  and the next revision (a rollback after a migration), refuses an unmigrated, older, or two
  migrations newer schema, each in one line that says what to do
- `preemptctl history` of a release runs against a ledger one migration ahead of it
- upstream_preemptions (0003) is append-only on Postgres (UPDATE, DELETE, TRUNCATE refused)
  and SQLite (UPDATE, DELETE refused); a second row for the same Event UID is refused
- decision_inputs (0003) and decision_input_packs (0004) refuse UPDATE, TRUNCATE and an
  ad-hoc DELETE on Postgres, even to their owner, and even with the session setting 0003's
  guard honoured (`preemptctl.pruning_decision_inputs`: any session could set it);
  `prune_decision_inputs(days)` deletes exactly the rows older than that, refuses fewer
  than one day, keeps at least the ledger's minimum retention (30 days as migrated), and a
  DELETE after it in the same transaction is refused again
- on SQLite decision_inputs and decision_input_packs refuse UPDATE and allow the pruning
  DELETE
- 0003 and 0004 grant what 0002 does: a role that appends to preemption_events appends to
  and reads the new tables and may prune; a role that reads it reads them; both read the
  minimum retention and neither may change it; nobody else may prune
- upstream_preemptions is indexed for the shadow recorder (0004): by victim UID, and by
  victim namespace and observation time
- a ledger at the last release's head (0003, as released) upgrades to 0004 with its rows
  kept, and prunes under the new guard; downgrading to 0003 brings back the released guard
  and pruning function, which prune as they did
- downgrading 0004 and 0003 removes their tables and functions, and upgrading again works
- the last release (head 0003) still starts against this release's schema (one migration ahead)
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, insert, inspect, select, text
from sqlalchemy.exc import DBAPIError

from preemptctl import migrations
from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.ledger.models import (
    EVENTS_TABLE,
    Base,
    decision_input_packs,
    decision_inputs,
    upstream_preemptions,
)
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


RELEASED = {
    "0001_preemption_events.py": "c8083dbc247e6d5f3313637bb9e56516abccb2fa30e379b23f44fd27e78a0690",
    "0002_decision_lock.py": "22dc379e0a04594fa124dfff5c8eda8cf4a3c4b3dd4e90e1fdf63b74b5464ace",
    "0003_audit_tables.py": "336602d45f463f1d8a9b69a52de9388d0eda46f099f8431a5b21e5f2890ec4de",
}
"""Each released migration's SHA-256: ledgers already at its revision never run it again, so
a change to it would reach new ledgers only. A change goes in a new migration."""


@pytest.mark.parametrize("name", sorted(RELEASED))
def test_a_released_migration_is_never_edited(name: str) -> None:
    script = Path(migrations.SCRIPT_LOCATION) / "versions" / name
    assert hashlib.sha256(script.read_bytes()).hexdigest() == RELEASED[name]


def test_the_support_window_is_head_and_the_next_revision() -> None:
    assert migrations.supported_revisions("0007") == ("0007", "0008")


def test_the_last_release_still_starts_against_this_releases_schema() -> None:
    """0003 was the last release's head: this release adds one migration, not more, so a
    `kubectl rollout undo` after `migrate` keeps working."""
    assert migrations.head_revision() == "0004"
    assert migrations.schema_problem(migrations.head_revision(), head="0003") is None


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


NOW = datetime.now(UTC)


def _upstream_row(event_uid: str = "ev-1") -> dict[str, object]:
    return {
        "observed_at": NOW,
        "occurred_at": NOW - timedelta(seconds=2),
        "event_uid": event_uid,
        "victim_namespace": "batch",
        "victim_name": "job-1",
        "victim_uid": "v-1",
        "preemptor_uid": "p-1",
        "preemptor_namespace": "web",
        "preemptor_name": "api-1",
        "node": "node-1",
        "message": "Preempted by pod p-1 on node node-1",
    }


def _inputs_row(key: str, recorded_at: datetime = NOW) -> dict[str, object]:
    return {
        "preemption_id": "preemption-1",
        "run_id": f"run-{key}",
        "recorded_at": recorded_at,
        "preemptor_namespace": "web",
        "preemptor_name": "api-1",
        "preemptor_uid": "p-1",
        "planner_version": "test",
        "encoding": "json+zlib",
        "raw_bytes": 3,
        "stored_bytes": 11,
        "inputs": b"x" * 11,
        "omitted": None,
        "idempotency_key": key,
    }


DAY = timedelta(days=1)


def _pack_row(pack_id: int, referenced_until: datetime = NOW) -> dict[str, object]:
    return {
        "id": pack_id,
        "referenced_until": referenced_until,
        "objects": 0,
        "encoding": "json+zlib",
        "raw_bytes": 2,
        "stored_bytes": 10,
        "body": b"x" * 10,
    }


def _count(engine: Engine, table: str) -> int:
    with engine.connect() as connection:
        return int(connection.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE upstream_preemptions SET message = 'changed'",
        "DELETE FROM upstream_preemptions",
        "TRUNCATE upstream_preemptions",
    ],
)
def test_postgres_upstream_preemptions_is_append_only(pg_engine: Engine, statement: str) -> None:
    with pg_engine.begin() as connection:
        connection.execute(insert(upstream_preemptions), _upstream_row())
    with pytest.raises(DBAPIError, match="append-only"), pg_engine.begin() as connection:
        connection.execute(text(statement))
    assert _count(pg_engine, "upstream_preemptions") == 1


@pytest.mark.parametrize(
    "statement",
    ["UPDATE upstream_preemptions SET message = 'changed'", "DELETE FROM upstream_preemptions"],
)
def test_sqlite_upstream_preemptions_is_append_only(sqlite_engine: Engine, statement: str) -> None:
    with sqlite_engine.begin() as connection:
        connection.execute(insert(upstream_preemptions), _upstream_row())
    with pytest.raises(DBAPIError, match="append-only"), sqlite_engine.begin() as connection:
        connection.execute(text(statement))
    assert _count(sqlite_engine, "upstream_preemptions") == 1


def test_an_event_is_recorded_once_whoever_observes_it(pg_engine: Engine) -> None:
    with pg_engine.begin() as connection:
        connection.execute(insert(upstream_preemptions), _upstream_row("ev-1"))
    with (
        pytest.raises(DBAPIError, match="uq_upstream_preemptions_event_uid"),
        pg_engine.begin() as connection,
    ):
        connection.execute(insert(upstream_preemptions), _upstream_row("ev-1"))


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE decision_inputs SET omitted = 'changed'",
        "DELETE FROM decision_inputs",
        "TRUNCATE decision_inputs",
        "UPDATE decision_input_packs SET objects = 0",
        "DELETE FROM decision_input_packs",
        "TRUNCATE decision_input_packs",
    ],
)
@pytest.mark.parametrize("old_guard", [False, True], ids=["", "with the old guard's setting"])
def test_postgres_decision_inputs_refuses_changes_even_to_the_owner(
    pg_engine: Engine, statement: str, old_guard: bool
) -> None:
    with pg_engine.begin() as connection:
        connection.execute(insert(decision_inputs), _inputs_row("k-1"))
        connection.execute(insert(decision_input_packs), _pack_row(1))
    with pytest.raises(DBAPIError, match="append-only"), pg_engine.begin() as connection:
        if old_guard:
            connection.execute(text("SET LOCAL preemptctl.pruning_decision_inputs = 'on'"))
        connection.execute(text(statement))
    assert (_count(pg_engine, "decision_inputs"), _count(pg_engine, "decision_input_packs")) == (
        1,
        1,
    )


def test_pruning_deletes_exactly_the_rows_older_than_the_retention(pg_engine: Engine) -> None:
    with pg_engine.begin() as connection:
        connection.execute(
            insert(decision_inputs),
            [
                _inputs_row("old", NOW - timedelta(days=31)),
                _inputs_row("recent", NOW - timedelta(days=29)),
                _inputs_row("new"),
            ],
        )
    with pg_engine.begin() as connection:
        pruned = connection.execute(text("SELECT prune_decision_inputs(30)")).scalar_one()
    with pg_engine.connect() as connection:
        kept = set(connection.execute(select(decision_inputs.c.idempotency_key)).scalars())
    assert pruned == 1
    assert kept == {"recent", "new"}


def test_pruning_keeps_at_least_the_ledgers_minimum_retention(pg_engine: Engine) -> None:
    with pg_engine.begin() as connection:
        connection.execute(
            insert(decision_inputs),
            [_inputs_row("old", NOW - timedelta(days=31)), _inputs_row("two-days", NOW - DAY * 2)],
        )
    with pg_engine.begin() as connection:
        pruned = connection.execute(text("SELECT prune_decision_inputs(1)")).scalar_one()
    assert (pruned, _count(pg_engine, "decision_inputs")) == (1, 1)
    with pg_engine.begin() as connection:  # the owner lowers the minimum
        connection.execute(text("UPDATE decision_inputs_retention SET minimum_days = 1"))
        pruned = connection.execute(text("SELECT prune_decision_inputs(1)")).scalar_one()
    assert (pruned, _count(pg_engine, "decision_inputs")) == (1, 0)


def test_pruning_removes_the_packs_past_their_last_reference(pg_engine: Engine) -> None:
    with pg_engine.begin() as connection:
        connection.execute(
            insert(decision_input_packs),
            [
                _pack_row(1, NOW - timedelta(days=31)),
                _pack_row(2, NOW - timedelta(days=30, minutes=30)),
                _pack_row(3, NOW - timedelta(days=29)),
            ],
        )
    with pg_engine.begin() as connection:
        connection.execute(text("SELECT prune_decision_inputs(30)"))
    with pg_engine.connect() as connection:
        kept = sorted(connection.execute(select(decision_input_packs.c.id)).scalars())
    assert kept == [2, 3]  # the one an hour's margin still covers, and the younger


def test_pruning_refuses_less_than_a_day(pg_engine: Engine) -> None:
    with (
        pytest.raises(DBAPIError, match="retention_days must be at least 1, not 0"),
        pg_engine.begin() as connection,
    ):
        connection.execute(text("SELECT prune_decision_inputs(0)"))


def test_a_delete_after_pruning_in_the_same_transaction_is_refused(pg_engine: Engine) -> None:
    with pg_engine.begin() as connection:
        connection.execute(insert(decision_inputs), _inputs_row("k-1"))
    with pytest.raises(DBAPIError, match="append-only"), pg_engine.begin() as connection:
        connection.execute(text("SELECT prune_decision_inputs(1)"))
        connection.execute(text("DELETE FROM decision_inputs"))
    assert _count(pg_engine, "decision_inputs") == 1


@pytest.mark.parametrize(
    ("table", "update"),
    [("decision_inputs", "omitted = 'changed'"), ("decision_input_packs", "objects = 0")],
)
def test_sqlite_decision_inputs_refuse_update_and_allow_pruning(
    sqlite_engine: Engine, table: str, update: str
) -> None:
    with sqlite_engine.begin() as connection:
        connection.execute(insert(decision_inputs), _inputs_row("k-1"))
        connection.execute(insert(decision_input_packs), _pack_row(1))
    with pytest.raises(DBAPIError, match="append-only"), sqlite_engine.begin() as connection:
        connection.execute(text(f"UPDATE {table} SET {update}"))
    with sqlite_engine.begin() as connection:
        connection.execute(text(f"DELETE FROM {table}"))
    assert _count(sqlite_engine, table) == 0


def test_a_ledger_at_the_last_releases_head_upgrades_with_its_rows(postgres_url: str) -> None:
    migrations.upgrade(postgres_url, "0003")
    engine = create_ledger_engine(postgres_url)
    try:
        with engine.begin() as connection:  # written whole, as the last release writes
            connection.execute(
                insert(decision_inputs),
                [_inputs_row("kept"), _inputs_row("old", NOW - timedelta(days=31))],
            )
        migrations.upgrade(postgres_url)
        with engine.begin() as connection:
            pruned = connection.execute(text("SELECT prune_decision_inputs(1)")).scalar_one()
        with engine.connect() as connection:
            kept = list(connection.execute(select(decision_inputs.c.idempotency_key)).scalars())
            packs = _count(engine, "decision_input_packs")
        with pytest.raises(DBAPIError, match="append-only"), engine.begin() as connection:
            connection.execute(text("SET LOCAL preemptctl.pruning_decision_inputs = 'on'"))
            connection.execute(text("DELETE FROM decision_inputs"))
    finally:
        engine.dispose()
    assert (pruned, kept, packs) == (1, ["kept"], 0)  # the minimum retention holds the rest


def test_downgrading_to_the_last_releases_head_restores_its_pruning(postgres_url: str) -> None:
    migrations.upgrade(postgres_url)
    migrations.downgrade(postgres_url, "0003")
    engine = create_ledger_engine(postgres_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                insert(decision_inputs),
                [_inputs_row("new"), _inputs_row("two-days", NOW - DAY * 2)],
            )
        with engine.begin() as connection:  # 0003's function: one day is enough
            pruned = connection.execute(text("SELECT prune_decision_inputs(1)")).scalar_one()
        with pytest.raises(DBAPIError, match="append-only"), engine.begin() as connection:
            connection.execute(text("DELETE FROM decision_inputs"))
        with engine.connect() as connection:
            tables = set(inspect(connection).get_table_names())
            indexes = {index["name"] for index in inspect(connection).get_indexes(UPSTREAM)}
    finally:
        engine.dispose()
    assert (pruned, _count_at(postgres_url, "decision_inputs")) == (1, 1)
    assert not tables & {"decision_input_packs", "decision_inputs_retention"}
    assert not indexes & {"ix_upstream_preemptions_victim_uid", "ix_upstream_preemptions_victim"}


UPSTREAM = "upstream_preemptions"


def _count_at(url: str, table: str) -> int:
    engine = create_ledger_engine(url)
    try:
        return _count(engine, table)
    finally:
        engine.dispose()


@pytest.fixture
def roles(postgres_url: str) -> Iterator[tuple[str, str, str]]:
    """A writer and a reader of preemption_events (granted at 0002), and a bystander."""
    suffix = secrets.token_hex(4)
    names = (f"h_writer_{suffix}", f"h_reader_{suffix}", f"h_other_{suffix}")
    migrations.upgrade(postgres_url, "0002")
    engine = create_ledger_engine(postgres_url)
    try:
        with engine.begin() as connection:
            for name in names:
                connection.execute(text(f"CREATE ROLE {name} NOLOGIN"))
            connection.execute(text(f"GRANT SELECT, INSERT ON preemption_events TO {names[0]}"))
            connection.execute(text(f"GRANT SELECT ON preemption_events TO {names[1]}"))
        migrations.upgrade(postgres_url)
        yield names
    finally:
        migrations.downgrade(postgres_url, "base")
        with engine.begin() as connection:
            for name in names:
                connection.execute(text(f"DROP ROLE IF EXISTS {name}"))
        engine.dispose()


def _may(url: str, check: str) -> bool:
    engine = create_ledger_engine(url)
    try:
        with engine.connect() as connection:
            return bool(connection.execute(text(f"SELECT {check}")).scalar_one())
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    "table", ["upstream_preemptions", "decision_inputs", "decision_input_packs"]
)
def test_the_new_tables_grant_what_preemption_events_grants(
    postgres_url: str, roles: tuple[str, str, str], table: str
) -> None:
    writer, reader, _ = roles
    granted = {
        (role, privilege)
        for role in roles
        for privilege in ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE")
        if _may(postgres_url, f"has_table_privilege('{role}', '{table}', '{privilege}')")
    }
    assert granted == {(writer, "SELECT"), (writer, "INSERT"), (reader, "SELECT")}


def test_writers_and_readers_read_the_minimum_retention_and_cannot_change_it(
    postgres_url: str, roles: tuple[str, str, str]
) -> None:
    writer, reader, _ = roles
    granted = {
        (role, privilege)
        for role in roles
        for privilege in ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE")
        if _may(
            postgres_url,
            f"has_table_privilege('{role}', 'decision_inputs_retention', '{privilege}')",
        )
    }
    assert granted == {(writer, "SELECT"), (reader, "SELECT")}


def test_upstream_preemptions_is_indexed_for_the_shadow_recorder(
    migrated_postgres_url: str,
) -> None:
    engine = create_ledger_engine(migrated_postgres_url)
    try:
        with engine.connect() as connection:
            indexes = {
                index["name"]: index["column_names"]
                for index in inspect(connection).get_indexes("upstream_preemptions")
            }
    finally:
        engine.dispose()
    assert (
        indexes["ix_upstream_preemptions_victim_uid"],
        indexes["ix_upstream_preemptions_victim"],
    ) == (["victim_uid"], ["victim_namespace", "observed_at"])


def test_only_the_writers_may_prune(postgres_url: str, roles: tuple[str, str, str]) -> None:
    may_prune = {
        role
        for role in roles
        if _may(
            postgres_url,
            f"has_function_privilege('{role}', 'prune_decision_inputs(integer)', 'EXECUTE')",
        )
    }
    assert may_prune == {roles[0]}


def test_downgrading_the_new_revisions_removes_their_tables_and_functions(
    postgres_url: str,
) -> None:
    migrations.upgrade(postgres_url)
    migrations.downgrade(postgres_url, "0002")
    engine = create_ledger_engine(postgres_url)
    try:
        with engine.connect() as connection:
            tables = set(inspect(connection).get_table_names())
            functions = set(
                connection.execute(
                    text(
                        "SELECT proname FROM pg_proc WHERE proname IN ("
                        "'prune_decision_inputs', 'decision_inputs_refuse_change', "
                        "'upstream_preemptions_refuse_change')"
                    )
                ).scalars()
            )
        assert migrations.current_revision(engine) == "0002"
    finally:
        engine.dispose()
    assert not tables & {
        "upstream_preemptions",
        "decision_inputs",
        "decision_input_packs",
        "decision_inputs_retention",
    }
    assert functions == set()
    migrations.upgrade(postgres_url)

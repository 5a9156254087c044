"""The least-privilege roles in docs/ledger.md work as documented (the SQL is run verbatim).

Scenarios:
- the migration role can migrate the ledger, and the tables then belong to the NOLOGIN owner
- the owner role cannot log in
- the worker role can append and read, and is refused UPDATE, DELETE and TRUNCATE
- the worker role reads alembic_version but cannot write it
- the reader role can read and is refused appends
- the migrator, once its membership is revoked, cannot DISABLE TRIGGER nor become the owner
- a migrator that is not a member of the owner cannot migrate
- only the worker may take the decision lock: the reader and the migrator are refused, so
  no read-only login can hold decisions up
- decision inputs (issue 20, finding 11): the worker records a decision's inputs with their
  packs and reads them back; it is refused UPDATE and DELETE on both tables and any change
  to the minimum retention; `prune_decision_inputs(1)` from the worker keeps what is younger
  than the ledger's minimum (30 days), `prune_decision_inputs(30)` removes what is older
  and the packs no kept decision references; the owner itself, with the session setting
  the old guard honoured, is refused an ad-hoc DELETE; the reader may not prune
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import psycopg
import pytest
from sqlalchemy import Engine
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError

from preemptctl import migrations
from preemptctl.ledger.claims import decision_lock
from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.ledger.errors import LedgerError
from preemptctl.ledger.inputs import InputsRow, latest, record
from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.queries import HistoryQuery, history
from preemptctl.ledger.writer import append
from preemptctl.preemption.decision import PodRef
from preemptctl.preemption.shared_inputs import Pack
from tests.ledger.builders import T0, event
from tests.support.postgres import admin_url, fresh_database

DOC = Path(__file__).resolve().parents[2] / "docs" / "ledger.md"
ROLES = ("preemptctl_owner", "preemptctl_migrator", "preemptctl_worker", "preemptctl_reader")
LOGINS = ("migrator", "worker", "reader")


def documented_sql(block: str = "roles-sql") -> str:
    text = DOC.read_text()
    match = re.search(rf"<!-- {block} -->\n```sql\n(.*?)```", text, re.DOTALL)
    assert match, f"docs/ledger.md lost its {block} block"
    return match.group(1)


def migrate_statements() -> tuple[str, str]:
    """The documented GRANT (before migrating) and REVOKE (after)."""
    lines = [line for line in documented_sql("migrate-sql").splitlines() if line.strip()]
    grant = next(line for line in lines if line.startswith("GRANT"))
    revoke = next(line for line in lines if line.startswith("REVOKE"))
    return grant, revoke


def _renamed(sql: str, renamed: dict[str, str]) -> str:
    for role, unique in renamed.items():
        sql = sql.replace(role, unique)
    return sql


@dataclass
class Setup:
    """The database, as its administrator, and each login role's URL."""

    admin: URL
    urls: dict[str, URL]
    renamed: dict[str, str]

    def run(self, sql: str) -> None:
        with psycopg.connect(
            host=self.admin.host,
            port=self.admin.port,
            user=self.admin.username,
            dbname=self.admin.database,
            autocommit=True,
        ) as connection:
            connection.execute(_renamed(sql, self.renamed).encode())


@pytest.fixture
def setup() -> Iterator[Setup]:
    """A fresh database set up by the documented SQL, with this test's own role names."""
    suffix = secrets.token_hex(4)
    renamed = {role: f"{role}_{suffix}" for role in ROLES}
    admin = admin_url()
    try:
        with fresh_database() as url:
            database = make_url(url)
            done = Setup(
                database,
                {
                    name: database.set(
                        username=renamed[f"preemptctl_{name}"], password=f"change-me-{name}"
                    )
                    for name in LOGINS
                },
                renamed,
            )
            done.run(documented_sql())
            yield done
    finally:
        with psycopg.connect(
            host=admin.host, port=admin.port, user=admin.username, dbname=admin.database,
            autocommit=True,
        ) as connection:  # fmt: skip
            for unique in renamed.values():
                connection.execute(f'DROP ROLE IF EXISTS "{unique}"'.encode())


@pytest.fixture
def migrated(setup: Setup) -> Iterator[dict[str, Engine]]:
    """Migrated as documented: membership granted, `migrate`, membership revoked."""
    grant, revoke = migrate_statements()
    setup.run(grant)
    migrations.upgrade(setup.urls["migrator"].render_as_string(hide_password=False))
    setup.run(revoke)
    engines = {name: create_ledger_engine(url) for name, url in setup.urls.items()}
    yield engines
    for engine in engines.values():
        engine.dispose()


def _owner_of(engine: Engine, table: str) -> str:
    with engine.connect() as connection:
        return str(
            connection.exec_driver_sql(
                f"SELECT tableowner FROM pg_tables WHERE tablename = '{table}'"
            ).scalar()
        )


def test_the_migration_role_migrates_as_the_nologin_owner(
    setup: Setup, migrated: dict[str, Engine]
) -> None:
    assert migrations.current_revision(migrated["reader"]) == migrations.head_revision()
    owner = setup.renamed["preemptctl_owner"]
    assert _owner_of(migrated["reader"], "preemption_events") == owner
    assert _owner_of(migrated["reader"], "alembic_version") == owner


def test_the_owner_cannot_log_in(setup: Setup) -> None:
    owner = setup.admin.set(username=setup.renamed["preemptctl_owner"])
    with pytest.raises(psycopg.OperationalError, match="not permitted to log in"):
        psycopg.connect(
            host=owner.host, port=owner.port, user=owner.username, dbname=owner.database
        )


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO alembic_version VALUES ('9999')",
        "UPDATE alembic_version SET version_num = '9999'",
        "DELETE FROM alembic_version",
    ],
)
def test_the_worker_reads_the_schema_revision_and_cannot_write_it(
    migrated: dict[str, Engine], statement: str
) -> None:
    worker = migrated["worker"]
    assert migrations.current_revision(worker) == migrations.head_revision()
    with pytest.raises(DBAPIError, match="permission denied"), worker.begin() as connection:
        connection.exec_driver_sql(statement)


def test_the_migrator_outside_a_migration_cannot_disable_the_append_only_trigger(
    setup: Setup, migrated: dict[str, Engine]
) -> None:
    migrator = migrated["migrator"]
    with pytest.raises(DBAPIError, match="must be owner"), migrator.begin() as connection:
        connection.exec_driver_sql("ALTER TABLE preemption_events DISABLE TRIGGER ALL")
    owner = setup.renamed["preemptctl_owner"]
    with pytest.raises(DBAPIError, match="permission denied"), migrator.begin() as connection:
        connection.exec_driver_sql(f'SET ROLE "{owner}"')


def test_a_migrator_without_the_owners_membership_cannot_migrate(setup: Setup) -> None:
    url = setup.urls["migrator"].render_as_string(hide_password=False)
    with pytest.raises(DBAPIError, match="permission denied"):
        migrations.upgrade(url)


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
    with pytest.raises(LedgerError, match="permission denied"):
        append(migrated["reader"], event("p-1", EventKind.COMPLETED, T0))


def test_only_the_worker_can_take_the_decision_lock(migrated: dict[str, Engine]) -> None:
    with decision_lock(migrated["worker"]) as connection:
        assert connection.exec_driver_sql("SELECT 1").scalar() == 1
    for role in ("reader", "migrator"):
        with pytest.raises(LedgerError, match="permission denied"), decision_lock(migrated[role]):
            pass


# -- decision inputs ---------------------------------------------------------------------------

NOW = datetime.now(UTC)
OLD_GUARD_SETTING = "preemptctl.pruning_decision_inputs"


def _record(engine: Engine, run: str, age: timedelta, pack_id: int | None = None) -> None:
    """A decision's inputs recorded `age` ago, with one pack referenced until then."""
    when = NOW - age
    objects = {"pdbs": [[pack_id, 0]]} if pack_id is not None else {}
    packs = [Pack(pack_id, leaf=False, blobs=[b"[]"], referenced_until=when.timestamp())]
    row = InputsRow(
        "p-1", run, PodRef("web", "api-1", "uid-api-1"), when, orjson.dumps({"objects": objects})
    )
    assert record(engine, row, max_bytes=0, packs=packs if pack_id is not None else [])


def _packs(engine: Engine) -> list[int]:
    with engine.connect() as connection:
        return sorted(connection.exec_driver_sql("SELECT id FROM decision_input_packs").scalars())


def test_the_worker_records_inputs_with_packs_and_reads_them(
    migrated: dict[str, Engine],
) -> None:
    _record(migrated["worker"], "run-1", timedelta(0), 7)
    found = latest(migrated["reader"], "run-1")
    assert found is not None and found.root()["objects"] == {"pdbs": [[7, 0]]}
    assert _packs(migrated["reader"]) == [7]


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE decision_inputs SET omitted = 'x'",
        "DELETE FROM decision_inputs",
        "UPDATE decision_input_packs SET objects = 0",
        "DELETE FROM decision_input_packs",
        "TRUNCATE decision_input_packs",
        "UPDATE decision_inputs_retention SET minimum_days = 1",
        "INSERT INTO decision_inputs_retention (id, minimum_days) VALUES (2, 1)",
        "DELETE FROM decision_inputs_retention",
    ],
)
def test_the_worker_cannot_change_inputs_packs_or_the_minimum_retention(
    migrated: dict[str, Engine], statement: str
) -> None:
    _record(migrated["worker"], "run-1", timedelta(0), 7)
    with pytest.raises(DBAPIError, match="permission denied"), migrated["worker"].begin() as db:
        db.exec_driver_sql(f"SET {OLD_GUARD_SETTING} = 'on'")
        db.exec_driver_sql(statement)


def _runs(engine: Engine) -> list[str]:
    with engine.connect() as connection:
        return sorted(connection.exec_driver_sql("SELECT run_id FROM decision_inputs").scalars())


def test_the_worker_cannot_prune_below_the_ledgers_minimum_retention(
    migrated: dict[str, Engine],
) -> None:
    worker = migrated["worker"]
    _record(worker, "two-days", timedelta(days=2))
    _record(worker, "forty-days", timedelta(days=40))
    with worker.begin() as connection:
        pruned = connection.exec_driver_sql("SELECT prune_decision_inputs(1)").scalar()
    assert (pruned, _runs(worker)) == (1, ["two-days"])


def test_pruning_removes_the_packs_no_kept_decision_references(
    migrated: dict[str, Engine],
) -> None:
    worker = migrated["worker"]
    _record(worker, "two-days", timedelta(days=2), 2)
    _record(worker, "forty-days", timedelta(days=40), 40)
    with worker.begin() as connection:
        connection.exec_driver_sql("SELECT prune_decision_inputs(30)")
    assert (_runs(worker), _packs(worker)) == (["two-days"], [2])


def test_the_owner_is_refused_an_ad_hoc_delete_whatever_its_session_says(
    setup: Setup, migrated: dict[str, Engine]
) -> None:
    _record(migrated["worker"], "forty-days", timedelta(days=40))
    with pytest.raises(psycopg.errors.IntegrityConstraintViolation, match="append-only"):
        setup.run(  # the documented role names, renamed by `run`
            f"BEGIN; SET LOCAL ROLE preemptctl_owner; SET LOCAL {OLD_GUARD_SETTING} = 'on'; "
            "DELETE FROM ledger.decision_inputs; COMMIT"
        )
    assert _runs(migrated["worker"]) == ["forty-days"]


def test_the_reader_may_not_prune(migrated: dict[str, Engine]) -> None:
    with (
        pytest.raises(DBAPIError, match="permission denied"),
        migrated["reader"].begin() as connection,
    ):
        connection.exec_driver_sql("SELECT prune_decision_inputs(30)")

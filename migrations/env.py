"""Alembic's environment: run the ledger's migrations online, or print them as SQL.

The URL comes from, in order: a connection handed over in `config.attributes`
(tests), `attributes["url"]` (`migrations.upgrade`), the ini's `sqlalchemy.url`
(`alembic -c alembic.ini`), then the same resolution the worker uses
(`PREEMPT_DATABASE_URL`, else the embedded SQLite file).

On Postgres with the least-privilege roles of docs/ledger.md, the login role that migrates
is a temporary member of a NOLOGIN owner role: migrations run as that owner (`SET ROLE`), so
every table belongs to a role nobody can log in as, and the migrator, once its membership is
revoked, cannot `DISABLE TRIGGER` on the events. After migrating, no role but the owner
keeps a write privilege on `alembic_version` (the worker's default grants would give it one).
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, text

from preemptctl.ledger.engine import (
    configured_url,
    create_ledger_engine,
    normalise_url,
)
from preemptctl.ledger.models import Base

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    explicit = config.attributes.get("url") or config.get_main_option("sqlalchemy.url")
    return configured_url(explicit)


# The schema's owner, when it is a NOLOGIN role this (non-superuser) login role is a member of.
OWNER_TO_BECOME = """
SELECT quote_ident(r.rolname)
FROM pg_namespace n JOIN pg_roles r ON r.oid = n.nspowner
WHERE n.nspname = current_schema()
  AND r.rolname <> current_user
  AND r.rolname <> 'pg_database_owner'
  AND NOT r.rolcanlogin
  AND pg_has_role(current_user, r.oid, 'MEMBER')
  AND NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
"""

# Every role but the owner that may change alembic_version (the revision the worker checks).
VERSION_TABLE_WRITERS = """
SELECT DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(g.rolname) END
FROM pg_class c
CROSS JOIN LATERAL aclexplode(c.relacl) a
LEFT JOIN pg_roles g ON g.oid = a.grantee
WHERE c.oid = to_regclass('alembic_version')
  AND a.grantee <> c.relowner
  AND a.privilege_type <> 'SELECT'
"""


def _become_owner(connection: Connection) -> None:
    owner = connection.execute(text(OWNER_TO_BECOME)).scalar()
    if owner is not None:
        connection.execute(text(f"SET ROLE {owner}"))


def _keep_version_table_to_its_owner(connection: Connection) -> None:
    for grantee in connection.execute(text(VERSION_TABLE_WRITERS)).scalars().all():
        connection.execute(
            text(f"REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON alembic_version FROM {grantee}")
        )


def _migrate(connection: Connection) -> None:
    postgres = connection.dialect.name == "postgresql"
    if postgres:
        _become_owner(connection)
    _configure(connection)
    with context.begin_transaction():
        context.run_migrations()
        if postgres:
            _keep_version_table_to_its_owner(connection)


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        # SQLite cannot ALTER most things; batch mode rebuilds the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
    )


def run_offline() -> None:
    context.configure(
        url=normalise_url(_url()),
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    handed_over: Connection | None = config.attributes.get("connection")
    if handed_over is not None:
        _migrate(handed_over)
        return
    url = normalise_url(_url())
    engine = create_ledger_engine(url)  # creates a SQLite file 0600 in a 0700 directory
    try:
        with engine.connect() as connection:
            _migrate(connection)
            connection.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()

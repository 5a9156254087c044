"""A ledger set up with docs/ledger.md's least-privilege roles, verbatim, for tests that act
as one of those roles (the worker's, the reader's) against a migrated ledger.

The documented SQL is read from docs/ledger.md (its `roles-sql` and `migrate-sql` blocks)
and run as written, with each role renamed to a name of this setup's own: roles are global
to the Postgres server, and tests on the same server must not share them. Dropped on exit.

    with documented_roles() as ledger:
        ledger.urls["worker"]     # postgresql+psycopg://preemptctl_worker_1a2b:...@.../db
        ledger.roles["owner"]     # the NOLOGIN owner's name here
        ledger.admin(sql)         # as the database's administrator
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
from sqlalchemy.engine import URL, make_url

from preemptctl import migrations
from tests.support.postgres import admin_url, fresh_database

DOC = Path(__file__).resolve().parents[2] / "docs" / "ledger.md"
ROLES = ("owner", "migrator", "worker", "reader")
LOGINS = ("migrator", "worker", "reader")


def documented_sql(block: str) -> str:
    """The SQL of one of docs/ledger.md's marked blocks (`roles-sql`, `migrate-sql`)."""
    match = re.search(rf"<!-- {block} -->\n```sql\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert match, f"docs/ledger.md lost its {block} block"
    return match.group(1)


def _run(url: URL, sql: str) -> None:
    with psycopg.connect(
        host=url.host, port=url.port, user=url.username, dbname=url.database, autocommit=True
    ) as connection:
        connection.execute(sql.encode())


@dataclass
class DocumentedLedger:
    """A migrated ledger, its administrator, and a URL per login role."""

    database: URL  # as the administrator
    roles: dict[str, str]  # documented role ("worker") -> this setup's name for it
    urls: dict[str, str]  # login role -> its URL, password included

    def admin(self, sql: str) -> None:
        """Run `sql` as the database's administrator, the roles renamed."""
        _run(self.database, self.renamed(sql))

    def renamed(self, sql: str) -> str:
        for role, unique in self.roles.items():
            sql = sql.replace(f"preemptctl_{role}", unique)
        return sql


@contextmanager
def documented_roles() -> Iterator[DocumentedLedger]:
    """A fresh database with the documented roles, migrated as documented (membership
    granted, `migrate` as the migrator, membership revoked)."""
    suffix = secrets.token_hex(4)
    roles = {role: f"preemptctl_{role}_{suffix}" for role in ROLES}
    try:
        with fresh_database("preemptctl_hostile") as url:
            database = make_url(url)
            ledger = DocumentedLedger(
                database,
                roles,
                {
                    login: database.set(
                        username=roles[login], password=f"change-me-{login}"
                    ).render_as_string(hide_password=False)
                    for login in LOGINS
                },
            )
            ledger.admin(documented_sql("roles-sql"))
            lines = [line for line in documented_sql("migrate-sql").splitlines() if line.strip()]
            ledger.admin(next(line for line in lines if line.startswith("GRANT")))
            migrations.upgrade(ledger.urls["migrator"])
            ledger.admin(next(line for line in lines if line.startswith("REVOKE")))
            yield ledger
    finally:
        admin = admin_url()
        for unique in roles.values():
            _run(admin, f'DROP ROLE IF EXISTS "{unique}"')

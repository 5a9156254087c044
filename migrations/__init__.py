"""Alembic, driven from code: the only way the ledger's schema changes.

The `Config` is built here rather than read from an `alembic.ini` in the working
directory, so `preemptctl migrate` works from an installed wheel, in any directory. The
top-level `alembic.ini` is a convenience for developers running `alembic` by hand.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

SCRIPT_LOCATION = Path(__file__).resolve().parent


def alembic_config(url: str | None = None) -> Config:
    """An Alembic config for this package's scripts; `url` wins over `PREEMPT_DATABASE_URL`.

    The URL travels in `attributes`, not in the ini options, because ini interpolation
    would mangle a password containing `%`.
    """
    config = Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    if url is not None:
        config.attributes["url"] = url
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at `url` up to `revision` (by default the newest)."""
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    """Take the database at `url` down to `revision` (by default: no ledger at all)."""
    command.downgrade(alembic_config(url), revision)


def head_revision() -> str:
    """The revision the code expects the database to be at."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "the migrations package has no revisions"
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at, or None when it has never been migrated."""
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()

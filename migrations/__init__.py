"""Alembic, driven from code: the only way the ledger's schema changes.

The `Config` is built here rather than read from an `alembic.ini` in the working
directory, so `preemptctl migrate` works from an installed wheel, in any directory. The
top-level `alembic.ini` is a convenience for developers running `alembic` by hand.

The support window (expand/contract): a worker runs against the schema it was released with
(its head) and against the next one (head + 1), so `kubectl rollout undo` after a
`preemptctl migrate` keeps the old pods running. What that asks of a migration:

- revisions are numbered in sequence (`0001`, `0002`, ...), so a worker can recognise the
  revision after its own without having its script (a test checks the numbering);
- a migration only expands (new tables, new nullable columns, new indexes): what the previous
  release reads and writes keeps working;
- a contraction (dropping or renaming what an older release uses) ships in a migration at
  least one release after the code stopped using it.

A worker never runs against an older schema than its own: migrate first, then roll out.
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


def next_revision(revision: str) -> str | None:
    """The revision numbered after `revision` (`0001` → `0002`), None if not numbered."""
    if not (revision.isascii() and revision.isdigit()):
        return None
    return f"{int(revision) + 1:0{len(revision)}d}"


def supported_revisions(head: str | None = None) -> tuple[str, ...]:
    """The schema revisions this code runs against: its head, and the one after it."""
    head = head or head_revision()
    following = next_revision(head)
    return (head,) if following is None else (head, following)


def schema_problem(current: str | None, head: str | None = None) -> str | None:
    """Why this code cannot run against a database at `current`, or None when it can."""
    head = head or head_revision()
    if current is None:
        return "has no ledger schema; run `preemptctl migrate` first"
    if current in supported_revisions(head):
        return None
    ahead = current.isascii() and current.isdigit() and head.isdigit() and current > head
    if ahead:
        return (
            f"is at schema revision {current}, more than one migration ahead of this "
            f"preemptctl ({head}, which runs on {head} and the next); upgrade preemptctl"
        )
    return (
        f"is at schema revision {current}, this preemptctl needs {head}; run `preemptctl migrate`"
    )


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at, or None when it has never been migrated."""
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()

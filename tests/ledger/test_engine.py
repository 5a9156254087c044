"""One engine from one URL: URLs checked before any connection, errors classified for retries.

Scenarios:
- a URL with a port that is not a number, out of range, or a `connect_timeout` that is not
  whole seconds is refused in one line, and never shows its password;
- a URL that cannot be parsed at all is shown with its password masked;
- a statement Postgres refuses for its data (a NUL byte, a number out of range) is
  `LedgerRejectedError`, which no retry can fix, while an unreachable server stays
  `LedgerUnavailableError`;
- the embedded SQLite ledger is created in a 0700 directory as a 0600 file, WAL files too;
- an existing SQLite file keeps the mode its owner gave it.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from sqlalchemy import Engine

from preemptctl.ledger.engine import (
    LedgerRejectedError,
    create_ledger_engine,
    display_url,
    normalise_url,
    translated_errors,
)
from preemptctl.ledger.errors import LedgerError, LedgerUnavailableError
from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.writer import append
from tests.ledger.builders import T0, event


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgresql://u:hunter2@db:abc/ledger", "not a database URL: postgresql://***@db:abc/"),
        ("postgresql://u:hunter2@db:99999/ledger", "the port must be from 1 to 65535"),
        ("postgresql://u:hunter2@db/ledger?connect_timeout=abc", "connect_timeout must be"),
        ("postgresql://u:hunter2@db/ledger?connect_timeout=1e9", "connect_timeout must be"),
    ],
)
def test_a_url_that_cannot_work_is_refused_without_its_password(url: str, message: str) -> None:
    with pytest.raises(LedgerError) as raised:
        normalise_url(url)
    assert message in str(raised.value)
    assert "hunter2" not in str(raised.value)
    assert "\n" not in str(raised.value)


def test_a_malformed_url_is_displayed_with_its_password_masked() -> None:
    assert display_url("postgresql://u:hunter2@db:abc/ledger") == "postgresql://***@db:abc/ledger"


@pytest.mark.parametrize(
    "statement",
    [
        'SELECT \'{"m": "a\\u0000b"}\'::jsonb',  # a NUL in a payload
        "SELECT 'a' || chr(0)",  # a NUL in text: Postgres calls it a program limit
        "SELECT 2147483647::integer + 1",  # a priority out of range
    ],
)
def test_data_the_database_refuses_is_refused_for_good_not_retried(
    pg_engine: Engine, statement: str
) -> None:
    with (
        pytest.raises(LedgerRejectedError, match="refused the data"),
        translated_errors(pg_engine),
        pg_engine.connect() as connection,
    ):
        connection.exec_driver_sql(statement)


def test_an_unreachable_server_stays_retryable() -> None:
    engine = create_ledger_engine("postgresql://nobody@127.0.0.1:1/none?connect_timeout=2")
    try:
        with pytest.raises(LedgerUnavailableError):
            append(engine, event("p-1", EventKind.NOMINATED, T0))
    finally:
        engine.dispose()


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_sqlite_ledger_is_private_to_its_owner(tmp_path: Path) -> None:
    path = tmp_path / "state" / "preemptctl" / "ledger.sqlite"
    engine = create_ledger_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as connection:
            connection.exec_driver_sql("CREATE TABLE t (x INTEGER)")
            connection.commit()
        assert _mode(path.parent) == 0o700
        assert _mode(path) == 0o600
        wal = path.with_name(path.name + "-wal")
        assert not wal.exists() or _mode(wal) == 0o600
    finally:
        engine.dispose()


def test_an_existing_sqlite_file_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    path.touch(mode=0o640)
    path.chmod(0o640)
    create_ledger_engine(f"sqlite:///{path}").dispose()
    assert _mode(path) == 0o640

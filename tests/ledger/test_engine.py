"""One engine from one URL: URLs checked before any connection, errors classified for retries.

Scenarios:
- a URL with a port that is not a number, out of range, or a `connect_timeout` that is not
  whole seconds is refused in one line, and never shows its password;
- a URL that cannot be parsed at all is shown with its password masked;
- every secret a URL can carry is masked where it is shown: the user info's password, and
  the query parameters libpq honours as secrets (password, sslpassword,
  oauth_client_secret, a %-escaped key too) or that name one (token, api_key, ...), the
  rest of the URL as written; in free text, every URL; the secret keys cover every one the
  installed libpq marks as secret;
- an unreachable server's error (the worker logs it on every retry) masks the query's
  passwords too;
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
    LIBPQ_SECRET_KEYS,
    LedgerRejectedError,
    create_ledger_engine,
    display_url,
    masked_url,
    masked_urls,
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
        ("postgresql://u:hunter2@db:abc/ledger", "not a database URL: postgresql://u:***@db:abc/"),
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
    assert display_url("postgresql://u:hunter2@db:abc/ledger") == "postgresql://u:***@db:abc/ledger"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql://u:hunter2@db:5432/ledger?password=h3&sslpassword=h4&sslmode=require",
            "postgresql://u:***@db:5432/ledger?password=***&sslpassword=***&sslmode=require",
        ),
        (
            "postgresql://db/ledger?oauth_client_secret=h5&application_name=worker",
            "postgresql://db/ledger?oauth_client_secret=***&application_name=worker",
        ),
        (
            "postgresql://db/ledger?pass%77ord=h6&PASSWORD=h7",
            "postgresql://db/ledger?pass%77ord=***&PASSWORD=***",
        ),
        (
            "https://admin:s3cret@ui.example:8080/?token=h8&api_key=h9&x=1#top",
            "https://admin:***@ui.example:8080/?token=***&api_key=***&x=1#top",
        ),
        ("postgresql://u:p@ss@db/ledger", "postgresql://u:***@db/ledger"),  # an @ in it
        (
            "postgresql://u@db:abc/ledger?sslmode=require",
            "postgresql://u@db:abc/ledger?sslmode=require",
        ),
        ("https://ui.example/namespaces/default", "https://ui.example/namespaces/default"),
        ("sqlite:////var/lib/ledger.sqlite", "sqlite:////var/lib/ledger.sqlite"),
    ],
)
def test_a_urls_secrets_are_masked_and_the_rest_kept_as_written(url: str, shown: str) -> None:
    assert masked_url(url) == shown


def test_a_displayed_ledger_url_masks_its_query_passwords() -> None:
    assert display_url("postgresql://u:h1@db/ledger?sslpassword=h2&password=h3") == (
        "postgresql+psycopg://u:***@db/ledger?password=***&sslpassword=***"
    )
    assert display_url("postgresql://u@db:abc/ledger?password=h4") == (
        "postgresql://u@db:abc/ledger?password=***"
    )


def test_every_url_in_a_text_is_masked() -> None:
    text = "ledger 'postgresql://u:h1@db/l?password=h2' and https://a:h3@ui/x, then done"
    assert masked_urls(text) == (
        "ledger 'postgresql://u:***@db/l?password=***' and https://a:***@ui/x, then done"
    )


def test_the_secret_keys_cover_every_one_libpq_marks_secret() -> None:
    from psycopg import pq

    starred = {o.keyword.decode() for o in pq.Conninfo.get_defaults() if o.dispchar == b"*"}
    assert starred <= LIBPQ_SECRET_KEYS, f"libpq has new secret keywords: {starred}"


def test_an_unreachable_servers_error_masks_the_query_passwords() -> None:
    url = (
        "postgresql://nobody:hunter1@127.0.0.1:1/none"
        "?connect_timeout=2&password=hunter2&sslpassword=hunter3"
    )
    engine = create_ledger_engine(url)
    try:
        with pytest.raises(LedgerUnavailableError) as raised:
            append(engine, event("p-1", EventKind.NOMINATED, T0))
    finally:
        engine.dispose()
    message = str(raised.value)
    assert message.startswith(
        "cannot reach the ledger database postgresql+psycopg://nobody:***@127.0.0.1:1/none?"
        "connect_timeout=2&password=***&sslpassword=***: "
    )
    assert "hunter" not in message


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

"""A fresh Postgres database for a test, created on entry and dropped on exit.

Tests never share a database and never touch one they did not create: each gets
`preemptctl_test_<random hex>` on the server at `PREEMPT_TEST_POSTGRES_URL` (default: the
local server, trust auth, as `postgres`, else as the current OS user). When no server
answers, the error says so and how to start one; a test that needs Postgres fails rather
than skips, because a skipped ledger test proves nothing.

    with fresh_database() as url:   # "postgresql+psycopg://postgres@127.0.0.1:5432/preemptctl_test_1a2b..."
        ...
"""

from __future__ import annotations

import getpass
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import sql
from sqlalchemy.engine import URL, make_url

from tests.support.tcp_proxy import TcpProxy

ADMIN_URL_ENV = "PREEMPT_TEST_POSTGRES_URL"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 5432


def _candidates() -> list[URL]:
    given = os.environ.get(ADMIN_URL_ENV)
    if given:
        return [make_url(given).set(drivername="postgresql+psycopg")]
    return [
        URL.create("postgresql+psycopg", user, None, DEFAULT_HOST, DEFAULT_PORT, "postgres")
        for user in ("postgres", getpass.getuser())
    ]


def _connect(url: URL) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(
        host=url.host,
        port=url.port,
        user=url.username,
        password=url.password,
        dbname=url.database,
        autocommit=True,
        connect_timeout=5,
    )


def admin_url() -> URL:
    """The first server/user that accepts a connection, or an error that says what to do."""
    errors = []
    for url in _candidates():
        try:
            with _connect(url):
                return url
        except psycopg.OperationalError as error:
            errors.append(f"{url.render_as_string(hide_password=True)}: {error}".strip())
    raise RuntimeError(
        "no Postgres for the tests; start one "
        "(pg_ctlcluster --skip-systemctl-redirect <version> main start) or set "
        f"{ADMIN_URL_ENV}. Tried: " + " | ".join(errors)
    )


@contextmanager
def fresh_database(prefix: str = "preemptctl_test") -> Iterator[str]:
    """Create an empty database, yield its SQLAlchemy URL, then drop it (even on failure).

    The drop uses `WITH (FORCE)` so a test that leaked a connection (or a worker thread
    still holding one) cannot leave the database behind.
    """
    admin = admin_url()
    name = f"{prefix}_{secrets.token_hex(6)}"
    with _connect(admin) as connection:
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield admin.set(database=name).render_as_string(hide_password=False)
    finally:
        with _connect(admin) as connection:
            connection.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


class OutageProxy(TcpProxy):
    """A TCP proxy in front of Postgres that a test can cut and restore: a database outage.

    Cutting closes the listener and resets every open connection, as a crashed server or a
    network partition would; clients see refused connections and broken sockets, not a polite
    shutdown. Restoring listens again on the same port.

        with OutageProxy(url) as proxy:
            engine = create_ledger_engine(proxy.url)
            proxy.cut(); ...; proxy.restore()
    """

    def __init__(self, url: str) -> None:
        target = make_url(url)
        super().__init__(target.host or DEFAULT_HOST, target.port or DEFAULT_PORT)
        self.url = self.rewrite(url)

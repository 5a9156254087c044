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

import contextlib
import getpass
import os
import secrets
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import sql
from sqlalchemy.engine import URL, make_url

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


class OutageProxy:
    """A TCP proxy in front of Postgres that a test can cut and restore: a database outage.

    Cutting closes the listener and every open connection, as a crashed server or a network
    partition would; clients see refused connections and broken sockets, not a polite
    shutdown. Restoring listens again on the same port.

        with OutageProxy(url) as proxy:
            engine = create_ledger_engine(proxy.url)
            proxy.cut(); ...; proxy.restore()
    """

    def __init__(self, url: str) -> None:
        self._target = make_url(url)
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        probe = socket.create_server(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self.url = self._target.set(host="127.0.0.1", port=self.port).render_as_string(
            hide_password=False
        )

    def __enter__(self) -> OutageProxy:
        self.restore()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.cut()

    def restore(self) -> None:
        listener = socket.create_server(("127.0.0.1", self.port), reuse_port=False)
        with self._lock:
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            doomed, self._open = self._open, set()
        if listener is not None:
            listener.close()
        for sock in doomed:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(
                    (self._target.host or DEFAULT_HOST, self._target.port or DEFAULT_PORT)
                )
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    upstream.close()
                    return
                self._open.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

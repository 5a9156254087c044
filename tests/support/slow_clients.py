"""Slow-loris clients and a kubelet-like prober, for the probe server's tests and benchmark.

`SlowClients` opens connections that drip a request one byte at a time and never finish it
(issue 20: sixteen of them, one byte every 5 s, held every slot of the old probe server).
Like a real attacker they open a connection again as soon as the server closes one. One
thread drives them all with a selector, so hundreds cost a thread, not hundreds.

`probe` is one request as the kubelet makes it: a fresh connection, `GET`, read to the end,
within a timeout; it says what happened instead of raising, so a test can compare it.
"""

from __future__ import annotations

import itertools
import selectors
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

# Never ends: a request line, then headers forever, one byte at a time.
_DRIP = b"GET /metrics HTTP/1.1\r\nHost: worker\r\n" + b"X-Slow: y\r\n" * 100_000


@dataclass
class _Connection:
    sock: socket.socket
    source: str
    sent: int = 0
    next_byte: float = 0.0


class SlowClients:
    """`count` connections to 127.0.0.1:`port`, from the loopback addresses in `sources` in
    turn, each sending one byte every `interval` seconds; a connection the server closes is
    opened again after `reconnect` seconds. `opened` and `closed_by_server` count them."""

    def __init__(
        self,
        port: int,
        count: int,
        *,
        interval: float = 5.0,
        sources: Sequence[str] = ("127.0.0.1",),
        reconnect: float = 0.05,
    ) -> None:
        self._port = port
        self._count = count
        self._interval = interval
        self._sources = itertools.cycle(sources)
        self._reconnect = reconnect
        self._selector = selectors.DefaultSelector()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="slow-clients", daemon=True)
        self.opened = 0
        self.closed_by_server = 0

    def __enter__(self) -> SlowClients:
        for _ in range(self._count):
            self._open(next(self._sources))
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(10)
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()

    def _open(self, source: str) -> None:
        try:
            sock = socket.create_connection(
                ("127.0.0.1", self._port), timeout=2, source_address=(source, 0)
            )
        except OSError:
            return  # refused or timed out: tried again on the next reconnect
        sock.setblocking(False)
        connection = _Connection(sock, source)
        self._send_byte(connection)
        self._selector.register(sock, selectors.EVENT_READ, connection)
        self.opened += 1

    def _send_byte(self, connection: _Connection) -> bool:
        try:
            connection.sock.send(_DRIP[connection.sent : connection.sent + 1])
        except OSError:
            return False
        connection.sent += 1
        connection.next_byte = time.monotonic() + self._interval
        return True

    def _run(self) -> None:
        reopen: list[tuple[float, str]] = []
        while not self._stop.is_set():
            gone: list[_Connection] = []
            for key, _ in self._selector.select(timeout=0.02):
                connection: _Connection = key.data
                try:
                    if connection.sock.recv(4096):
                        continue  # an answer (an error status): keep dripping
                except BlockingIOError:
                    continue
                except OSError:
                    pass
                gone.append(connection)
            now = time.monotonic()
            for key in list(self._selector.get_map().values()):
                connection = key.data
                drip = connection not in gone and now >= connection.next_byte
                if drip and not self._send_byte(connection):
                    gone.append(connection)
            for connection in gone:
                self._selector.unregister(connection.sock)
                connection.sock.close()
                self.closed_by_server += 1
                reopen.append((now + self._reconnect, connection.source))
            again = [source for when, source in reopen if when <= now]
            reopen = [(when, source) for when, source in reopen if when > now]
            for source in again:
                self._open(source)


@dataclass(frozen=True)
class Answer:
    """What one probe got: the HTTP status (0 for none), the body or what went wrong, and
    how long it took."""

    status: int
    body: str
    seconds: float


def probe(port: int, path: str, *, timeout: float = 2.0, source: str = "127.0.0.1") -> Answer:
    """One `GET path` on a fresh connection to 127.0.0.1:`port`, as the kubelet sends it,
    read to the end within `timeout` seconds in all."""
    began = time.monotonic()
    deadline = began + timeout
    try:
        with socket.create_connection(
            ("127.0.0.1", port), timeout=timeout, source_address=(source, 0)
        ) as sock:
            sock.sendall(
                f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: kube-probe/1.33\r\n"
                "Accept: */*\r\nConnection: close\r\n\r\n".encode()
            )
            data = b""
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                sock.settimeout(remaining)
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
    except TimeoutError:
        return Answer(0, "timed out", time.monotonic() - began)
    except OSError as error:
        return Answer(0, f"connection failed: {error.strerror or error}", time.monotonic() - began)
    seconds = time.monotonic() - began
    head, _, body = data.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].split()
    if len(status_line) < 2 or not status_line[1].isdigit():
        return Answer(0, "closed without an answer", seconds)
    return Answer(int(status_line[1]), body.decode(errors="replace"), seconds)

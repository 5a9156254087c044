"""The worker's HTTP endpoints, on two listeners: the kubelet's probes (/healthz, /readyz) on
`probe_port`, and /metrics and /parked on `metrics_port` (which answers the probes too, for
anything that still looks for them there).

Why two listeners and no thread per connection (issue 20, finding 3): any pod can reach the
metrics port (the Service publishes the pod IPs), and the server this replaces gave each
connection one of sixteen threads for as long as the client sent a byte within each recv's
timeout. Sixteen clients dripping a byte every 5 s held every thread, the probes went
unanswered, and the kubelet restarted the worker, again and again. Now:

- one event loop reads every request (in a thread of its own, not the controller's loop,
  which /healthz must be able to report as stuck): an open connection costs a socket, not a
  thread, and a scraper or an attacker on the metrics port shares nothing with the probes
  but that thread;
- a request must arrive whole within `Limits.request_seconds` of its connection's accept
  (a deadline for the request, not per recv), and a connection silent for
  `Limits.idle_seconds` is dropped, however slowly it dribbles;
- a listener holds at most `Limits.connections` connections, a client address at most
  `Limits.per_client`; when either is full, the held connection that has waited longest for
  its request is dropped to make room (a real request arrives in one packet, so that one is
  the slow one), and a newcomer is refused only when every held connection is being answered;
- the checks run in threads, one evaluation of an endpoint at a time, whose answer every
  request that arrived meanwhile shares: requests cannot pile up work;
- every connection closes after its answer: there is no keep-alive connection to hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from preemptctl.worker.config import Settings
from preemptctl.worker.connections import StartupError
from preemptctl.worker.metrics import Metrics
from preemptctl.worker.supervisor import run_in_thread

log = logging.getLogger("preemptctl")

Check = Callable[[], tuple[bool, str]]
PROBE_PATHS = frozenset({"/healthz", "/readyz"})
METRICS_PATHS = PROBE_PATHS | {"/metrics", "/parked"}


def loop_answers(loop: asyncio.AbstractEventLoop, timeout: float) -> bool:
    """From another thread: does `loop` run a callback within `timeout` seconds? A loop
    stuck in a blocking call, or closed, does not."""
    answered = threading.Event()
    try:
        loop.call_soon_threadsafe(answered.set)
    except RuntimeError:
        return False
    return answered.wait(timeout)


@dataclass(frozen=True)
class Limits:
    """What one client may hold. The kubelet and Prometheus send a request of a few hundred
    bytes in one packet and wait at most seconds for the answer (the probes' timeoutSeconds
    is 3), so each bound is far above what they need."""

    request_seconds: float = 2.0  # from accept to the request's last header line
    idle_seconds: float = 1.0  # between two bytes of a request
    write_seconds: float = 5.0  # to hand the answer over and close
    connections: int = 64  # per listener
    per_client: int = 4  # per listener and client address
    request_bytes: int = 8192  # the request line and headers


class _Dropped(Exception):
    """A connection closed without an answer; the message is the reason `dropped` counts."""


class _Refused(Exception):
    """A request answered with an error status instead of an endpoint."""

    def __init__(self, status: HTTPStatus) -> None:
        super().__init__(status.phrase)
        self.status = status


@dataclass(eq=False)
class _Connection:
    client: str
    transport: asyncio.WriteTransport
    answering: bool = False  # its request is read: it is not dropped to make room


class _Listener:
    """One listening socket, the paths it serves, and the connections it holds (oldest
    first)."""

    def __init__(self, name: str, sock: socket.socket, paths: frozenset[str]) -> None:
        self.name = name
        self.socket = sock
        self.paths = paths
        self.held: dict[_Connection, None] = {}
        self.dropped: Counter[str] = Counter()  # connections closed unanswered, by reason

    def admit(self, connection: _Connection, limits: Limits) -> bool:
        """Hold `connection`, dropping the oldest connection still waiting for its request
        when the client's or the listener's limit is reached; False when no room is left."""
        mine = [held for held in self.held if held.client == connection.client]
        if len(mine) >= limits.per_client and not self._drop_oldest_waiting(mine):
            self.dropped["per_client"] += 1
            return False
        full = len(self.held) >= limits.connections
        if full and not self._drop_oldest_waiting(self.held):
            self.dropped["full"] += 1
            return False
        self.held[connection] = None
        return True

    def _drop_oldest_waiting(self, candidates: Iterable[_Connection]) -> bool:
        for held in candidates:
            if not held.answering:
                self.release(held)
                held.transport.abort()
                self.dropped["evicted"] += 1
                return True
        return False

    def release(self, connection: _Connection) -> None:
        self.held.pop(connection, None)


class ProbeServer:
    """/healthz and /readyz on the probe listener; /metrics, /parked (the pods parked after a
    non-retryable end, as JSON, for a CLI or a person), /healthz and /readyz on the metrics
    listener; both on `address`, within `limits` (see the module docstring). Port 0 picks a
    free port (tests); a port that cannot be listened on is a `StartupError`. `health`,
    `readiness` and `parked` are replaced as the controller starts; `dropped` counts the
    connections dropped without an answer, by reason (idle, deadline, write, evicted to
    make room, refused at once: per_client, full), `dropped_by` by listener too, as
    `metrics` exports it (`preemptctl_probe_connections_dropped_total`)."""

    def __init__(
        self,
        address: str,
        metrics_port: int,
        probe_port: int,
        metrics: Metrics,
        limits: Limits = Limits(),
    ) -> None:
        self.metrics = metrics
        self.limits = limits
        self.health: Check = lambda: (True, "ok")
        self.readiness: Check = lambda: (False, "starting")
        self.parked: Callable[[], list[dict[str, Any]]] = list
        metrics_socket = _listen(address, metrics_port, "metrics")
        try:
            probe_socket = _listen(address, probe_port, "probes")
        except StartupError:
            metrics_socket.close()
            raise
        self._listeners = (
            _Listener("metrics", metrics_socket, METRICS_PATHS),
            _Listener("probes", probe_socket, PROBE_PATHS),
        )
        self._answers: dict[str, asyncio.Future[tuple[int, str, bytes]]] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._serving: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None
        self._not_serving = threading.Event()
        self._not_serving.set()
        metrics.watch_probes(self.dropped_by)

    @property
    def server_address(self) -> tuple[str, int]:
        """The metrics listener's (host, port)."""
        return _address(self._listeners[0].socket)

    @property
    def probe_address(self) -> tuple[str, int]:
        """The probe listener's (host, port): where the kubelet probes."""
        return _address(self._listeners[1].socket)

    @property
    def dropped(self) -> Counter[str]:
        """Connections dropped without an answer on either listener, by reason."""
        total: Counter[str] = Counter()
        for listener in self._listeners:
            total.update(dict(listener.dropped))  # a copy at once: the probe thread counts on
        return total

    def dropped_by(self) -> dict[tuple[str, str], int]:
        """The same by (listener, reason), as `preemptctl_probe_connections_dropped_total`
        exports it."""
        return {
            (listener.name, reason): count
            for listener in self._listeners
            for reason, count in dict(listener.dropped).items()
        }

    def connections(self) -> dict[str, int]:
        """The connections each listener holds now (`metrics`, `probes`)."""
        return {listener.name: len(listener.held) for listener in self._listeners}

    def answering(self) -> dict[str, int]:
        """Of those, the ones whose request is read and whose answer is on its way."""
        return {
            listener.name: sum(held.answering for held in list(listener.held))
            for listener in self._listeners
        }

    def serve_forever(self) -> None:
        """Serve both listeners in the calling thread until `close()`. It may be called
        again after it raised (the supervisor restarts it)."""
        loop = asyncio.new_event_loop()
        stop = asyncio.Event()
        with self._lock:
            if self._closed:
                loop.close()
                return
            self._serving = (loop, stop)
            self._not_serving.clear()
        try:
            loop.run_until_complete(self._serve(stop))
        finally:
            with self._lock:
                self._serving = None
            loop.close()
            self._not_serving.set()

    def start(self) -> None:
        threading.Thread(target=self.serve_forever, name="probes", daemon=True).start()

    def close(self) -> None:
        """Stop serving (waiting for `serve_forever` to return) and close both listeners."""
        with self._lock:
            self._closed = True
            serving = self._serving
        if serving is not None:
            loop, stop = serving
            with contextlib.suppress(RuntimeError):  # its loop has just closed
                loop.call_soon_threadsafe(stop.set)
            self._not_serving.wait(10)
        for listener in self._listeners:
            listener.socket.close()

    async def _serve(self, stop: asyncio.Event) -> None:
        handlers: set[asyncio.Task[Any]] = set()

        def serving(listener: _Listener) -> Callable[..., Any]:
            async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                task = asyncio.current_task()
                if task is not None:
                    handlers.add(task)
                try:
                    await self._connection(listener, reader, writer)
                except asyncio.CancelledError:
                    # The server stops (it cancels its handlers last). Ended, not cancelled:
                    # asyncio 3.11 logs a cancelled stream handler as an error.
                    pass
                finally:
                    if task is not None:
                        handlers.discard(task)

            return handle

        # Each server gets a copy of the listening socket (it closes what it is given), so
        # the listeners outlive a restart of this loop.
        servers = [
            await asyncio.start_server(
                serving(listener), sock=listener.socket.dup(), limit=self.limits.request_bytes
            )
            for listener in self._listeners
        ]
        try:
            await stop.wait()
        finally:
            for server in servers:
                server.close()
            for listener in self._listeners:
                for connection in list(listener.held):
                    connection.transport.abort()
                listener.held.clear()
            waiting = [*handlers, *self._answers.values()]
            for task in waiting:
                task.cancel()
            await asyncio.gather(*waiting, return_exceptions=True)
            self._answers.clear()

    async def _connection(
        self, listener: _Listener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        peer = writer.get_extra_info("peername")
        connection = _Connection(str(peer[0]) if peer else "", writer.transport)
        if not listener.admit(connection, self.limits):
            writer.transport.abort()
            return
        try:
            try:
                path = await self._request(reader)
                connection.answering = True
                status, kind, body = await self._answer(listener, path)
            except _Refused as refused:
                connection.answering = True
                status, kind, body = refused.status, "text/plain", f"{refused}\n".encode()
            try:
                await self._write(writer, status, kind, body)
            except TimeoutError:
                raise _Dropped("write") from None
        except _Dropped as dropped:
            listener.dropped[str(dropped)] += 1
            log.debug("%s: dropped a connection from %s (%s)", listener.name, peer, dropped)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away, or was dropped to make room
        finally:
            listener.release(connection)
            writer.transport.abort()

    async def _request(self, reader: asyncio.StreamReader) -> str:
        """The path of a GET request read whole within the deadline (see `Limits`)."""
        limits = self.limits
        head = bytearray()
        try:
            async with asyncio.timeout(limits.request_seconds):
                while b"\r\n\r\n" not in head and b"\n\n" not in head:
                    try:
                        async with asyncio.timeout(limits.idle_seconds):
                            chunk = await reader.read(limits.request_bytes)
                    except TimeoutError:
                        raise _Dropped("idle") from None
                    if not chunk:
                        raise ConnectionError("closed before the request ended")
                    head += chunk
                    if len(head) > limits.request_bytes:
                        raise _Refused(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE)
        except TimeoutError:
            raise _Dropped("deadline") from None
        words = bytes(head).split(b"\n", 1)[0].split()
        if len(words) != 3 or not words[2].startswith(b"HTTP/"):
            raise _Refused(HTTPStatus.BAD_REQUEST)
        if words[0] != b"GET":
            raise _Refused(HTTPStatus.METHOD_NOT_ALLOWED)
        return words[1].decode("latin-1").split("?", 1)[0]

    async def _answer(self, listener: _Listener, path: str) -> tuple[int, str, bytes]:
        """The endpoint's answer: one evaluation at a time per path, shared by every
        request that arrives while it runs."""
        if path not in listener.paths:
            return HTTPStatus.NOT_FOUND, "text/plain", b"not found\n"
        pending = self._answers.get(path)
        if pending is None:
            pending = asyncio.ensure_future(run_in_thread(f"probe {path}", lambda: self._at(path)))
            self._answers[path] = pending
            pending.add_done_callback(lambda _: self._answers.pop(path, None))
        return await asyncio.shield(pending)

    def _at(self, path: str) -> tuple[int, str, bytes]:
        """Evaluate one endpoint (in a thread: a check may block for seconds)."""
        if path == "/metrics":
            return HTTPStatus.OK, CONTENT_TYPE_LATEST, generate_latest(self.metrics.exposition())
        if path == "/parked":
            return (
                HTTPStatus.OK,
                "application/json",
                json.dumps(self.parked(), indent=2).encode() + b"\n",
            )
        check = self.health if path == "/healthz" else self.readiness
        try:
            ok, why = check()
        except Exception as error:
            ok, why = False, f"the check failed: {error}"
        code = HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE
        return code, "text/plain", (why + "\n").encode()

    async def _write(
        self, writer: asyncio.StreamWriter, status: int, kind: str, body: bytes
    ) -> None:
        head = (
            f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
            f"Content-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
            + ("Allow: GET\r\n" if status == HTTPStatus.METHOD_NOT_ALLOWED else "")
            + "Connection: close\r\n\r\n"
        )
        async with asyncio.timeout(self.limits.write_seconds):
            writer.write(head.encode("latin-1") + body)
            await writer.drain()
            writer.close()
            await writer.wait_closed()


def _listen(address: str, port: int, what: str) -> socket.socket:
    """A listening TCP socket (`::` also accepts IPv4 where the system allows it), or a
    `StartupError` naming what would have been served there."""
    try:
        if ":" in address:
            dual = address == "::" and socket.has_dualstack_ipv6()
            return socket.create_server(
                (address, port), family=socket.AF_INET6, dualstack_ipv6=dual, backlog=128
            )
        return socket.create_server((address, port), backlog=128)
    except OSError as error:
        why = os.strerror(error.errno) if error.errno else str(error)
        raise StartupError(f"cannot serve {what} on {address or '*'}:{port}: {why}") from None


def _address(sock: socket.socket) -> tuple[str, int]:
    host, port = sock.getsockname()[:2]
    return str(host), int(port)


def open_probe_server(settings: Settings, metrics: Metrics) -> ProbeServer:
    return ProbeServer(
        settings.http_bind_address, settings.metrics_port, settings.probe_port, metrics
    )

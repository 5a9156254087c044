"""Every HTTP request line a client sent, as it went on the wire, routable or not.

The emulator's request log records the requests it can route to a resource; a request whose
path names none (what `DELETE .../pods/..` becomes once the client's URL library has removed
the dot segments) is answered 404 and logged nowhere. `WireLog` is a TCP proxy in front of
the emulator that reads the client's side of each connection and records the method and
path of every request it carries (HTTP/1.1, keep-alive, bodies skipped by their
Content-Length), so a test can say what a client asked for, whatever the server made of it.

    with WireLog("127.0.0.1", emulator_port) as wire:
        write_kubeconfig(path, wire.base_url)     # the client talks through the log
        [(line.method, line.path) for line in wire.lines()]
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from dataclasses import dataclass, field
from types import TracebackType
from urllib.parse import urlsplit


@dataclass(frozen=True, slots=True)
class RequestLine:
    method: str
    path: str  # without the query string
    query: str
    at: float = field(default_factory=time.time)


class _Reader:
    """Splits one connection's client bytes into requests: request line and headers, then
    a body of Content-Length bytes (chunked bodies are read to their last chunk)."""

    def __init__(self, found: list[RequestLine], lock: threading.Lock) -> None:
        self._buffer = b""
        self._skip = 0
        self._chunked = False
        self._found = found
        self._lock = lock

    def feed(self, data: bytes) -> None:
        self._buffer += data
        while True:
            if self._skip:
                taken = min(self._skip, len(self._buffer))
                self._buffer = self._buffer[taken:]
                self._skip -= taken
                if self._skip:
                    return
            if self._chunked:
                end = self._buffer.find(b"0\r\n\r\n")
                if end < 0:
                    return
                self._buffer = self._buffer[end + 5 :]
                self._chunked = False
            head, separator, rest = self._buffer.partition(b"\r\n\r\n")
            if not separator:
                return
            self._buffer = rest
            lines = head.decode("latin-1").split("\r\n")
            parts = lines[0].split(" ")
            if len(parts) >= 2:
                split = urlsplit(parts[1])
                with self._lock:
                    self._found.append(RequestLine(parts[0], split.path, split.query))
            headers = {
                name.strip().lower(): value.strip()
                for name, _, value in (line.partition(":") for line in lines[1:])
            }
            self._skip = int(headers.get("content-length") or 0)
            self._chunked = headers.get("transfer-encoding", "").lower() == "chunked"


class WireLog:
    """A proxy on 127.0.0.1 (`base_url`) to `host`:`port` recording each request line."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._lines: list[RequestLine] = []
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._closed = False

    def lines(self) -> list[RequestLine]:
        with self._lock:
            return list(self._lines)

    def __enter__(self) -> WireLog:
        threading.Thread(target=self._accept, name="wire-log-accept", daemon=True).start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            doomed, self._open = self._open, set()
        for sock in doomed:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open.update((client, upstream))
            reader = _Reader(self._lines, self._lock)
            for source, sink, tap in ((client, upstream, reader), (upstream, client, None)):
                threading.Thread(
                    target=self._pump, args=(source, sink, tap), name="wire-log", daemon=True
                ).start()

    def _pump(self, source: socket.socket, sink: socket.socket, tap: _Reader | None) -> None:
        try:
            while data := source.recv(65536):
                if tap is not None:
                    tap.feed(data)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            with self._lock:
                self._open.discard(source)
            source.close()

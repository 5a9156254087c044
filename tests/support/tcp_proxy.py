"""A TCP proxy a test puts between a client and a server, to cut the line between them.

`cut()` is an outage: the listener closes and every open connection is reset, so clients see
refused connections and broken sockets, as after a crashed server or a partition, never a
polite shutdown. `restore()` listens again on the same port. `drop_connections()` resets
the open connections but keeps listening: a load balancer or NAT that forgot them, after
which a client must notice its dead sockets and reconnect.

    with TcpProxy("127.0.0.1", 5432) as proxy:
        url = proxy.rewrite(database_url)   # the same URL, through the proxy
        proxy.cut(); ...; proxy.restore()
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from types import TracebackType

from sqlalchemy.engine import make_url


class TcpProxy:
    """Forwards 127.0.0.1:`port` to `target_host`:`target_port`, one thread per direction."""

    def __init__(self, target_host: str, target_port: int, port: int = 0) -> None:
        self.target = (target_host, target_port)
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        if port == 0:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = int(probe.getsockname()[1])
        self.port = port
        self.cuts = 0

    @classmethod
    def for_url(cls, url: str) -> TcpProxy:
        """A proxy in front of the server a database URL names."""
        parsed = make_url(url)
        return cls(parsed.host or "127.0.0.1", parsed.port or 5432)

    def rewrite(self, url: str) -> str:
        """`url` with its host and port replaced by this proxy's."""
        return (
            make_url(url)
            .set(host="127.0.0.1", port=self.port)
            .render_as_string(hide_password=False)
        )

    def __enter__(self) -> TcpProxy:
        self.restore()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.cut()

    @property
    def up(self) -> bool:
        with self._lock:
            return self._listener is not None

    def restore(self) -> None:
        """Listen again (a no-op when already listening)."""
        with self._lock:
            if self._listener is not None:
                return
            listener = socket.create_server(("127.0.0.1", self.port))
            self._listener = listener
        threading.Thread(
            target=self._accept, args=(listener,), name="tcp-proxy-accept", daemon=True
        ).start()

    def cut(self) -> None:
        """Stop listening and reset every open connection."""
        with self._lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            self.cuts += 1
            listener.close()
        self.drop_connections()

    def drop_connections(self) -> None:
        """Reset every open connection; new ones are still accepted while listening."""
        with self._lock:
            doomed, self._open = self._open, set()
        for sock in doomed:
            with contextlib.suppress(OSError):
                # RST rather than FIN: what a client sees when the far end is really gone.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
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
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
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
                threading.Thread(
                    target=self._pump, args=(source, sink), name="tcp-proxy-pump", daemon=True
                ).start()

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
            with self._lock:
                self._open.discard(source)
            source.close()

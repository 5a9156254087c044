"""A TCP proxy whose line to the server is slow: every chunk a client sends reaches the
server `delay` seconds later (latency, not bandwidth: chunks sent together arrive together,
so concurrent calls on one HTTP/2 connection are each `delay` late, not queued behind each
other). Put in front of Temporal it makes every RPC, a workflow's describe among them, take
`delay` longer, as a distant or overloaded frontend does. `delay` may change at any time;
0 is a plain proxy.

    with SlowLine("127.0.0.1", temporal_port) as line:
        address = f"127.0.0.1:{line.port}"
        line.delay = 0.5
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections import deque

from tests.support.tcp_proxy import TcpProxy


class SlowLine(TcpProxy):
    """`TcpProxy` with `delay` seconds added on the client-to-server direction."""

    def __init__(self, target_host: str, target_port: int, port: int = 0) -> None:
        super().__init__(target_host, target_port, port)
        self.delay = 0.0

    def __enter__(self) -> SlowLine:
        self.restore()
        return self

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
            threading.Thread(
                target=self._late_pump, args=(client, upstream), name="slow-line", daemon=True
            ).start()
            threading.Thread(
                target=self._pump, args=(upstream, client), name="slow-line-back", daemon=True
            ).start()

    def _late_pump(self, source: socket.socket, sink: socket.socket) -> None:
        """Read as fast as the client sends; hand each chunk on `delay` seconds after it came."""
        queue: deque[tuple[float, bytes]] = deque()
        ready = threading.Condition()
        done = threading.Event()

        def forward() -> None:
            try:
                while True:
                    with ready:
                        while not queue and not done.is_set():
                            ready.wait()
                        if not queue:
                            return
                        due, data = queue.popleft()
                    pause = due - time.monotonic()
                    if pause > 0:
                        time.sleep(pause)
                    sink.sendall(data)
            except OSError:
                pass
            finally:
                for sock in (source, sink):
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)

        sender = threading.Thread(target=forward, name="slow-line-send", daemon=True)
        sender.start()
        try:
            while data := source.recv(65536):
                with ready:
                    queue.append((time.monotonic() + self.delay, data))
                    ready.notify()
        except OSError:
            pass
        finally:
            done.set()
            with ready:
                ready.notify()
            sender.join(timeout=30)
            with self._lock:
                self._open.discard(source)
            source.close()

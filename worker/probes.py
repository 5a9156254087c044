"""The worker's HTTP endpoints: /metrics, /healthz, /readyz and /parked, and the check the
liveness probe makes of the event loop from the server's thread.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from preemptctl.worker.config import Settings
from preemptctl.worker.connections import StartupError
from preemptctl.worker.metrics import Metrics

log = logging.getLogger("preemptctl")


def loop_answers(loop: asyncio.AbstractEventLoop, timeout: float) -> bool:
    """From another thread: does `loop` run a callback within `timeout` seconds? A loop
    stuck in a blocking call, or closed, does not."""
    answered = threading.Event()
    try:
        loop.call_soon_threadsafe(answered.set)
    except RuntimeError:
        return False
    return answered.wait(timeout)


REQUEST_TIMEOUT = 10.0  # seconds a probe or scrape connection may take to send its request
MAX_REQUEST_THREADS = 16
Check = Callable[[], tuple[bool, str]]


class _Endpoints(BaseHTTPRequestHandler):
    server: ProbeServer
    timeout = REQUEST_TIMEOUT  # socket timeout: a client that sends nothing is dropped

    def do_GET(self) -> None:
        if self.path == "/metrics":
            body, kind, code = (
                generate_latest(self.server.metrics.registry),
                CONTENT_TYPE_LATEST,
                200,
            )
        elif self.path == "/parked":
            body, kind, code = (
                json.dumps(self.server.parked(), indent=2).encode() + b"\n",
                "application/json",
                200,
            )
        elif self.path in ("/healthz", "/readyz"):
            check = self.server.health if self.path == "/healthz" else self.server.readiness
            try:
                ok, why = check()
            except Exception as error:
                ok, why = False, f"the check failed: {error}"
            body, kind, code = (why + "\n").encode(), "text/plain", 200 if ok else 503
        else:
            body, kind, code = b"not found\n", "text/plain", 404
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


class ProbeServer(ThreadingHTTPServer):
    """/metrics, /healthz, /readyz and /parked (the pods parked after a non-retryable end,
    as JSON, for a CLI or a person) on `settings.http_bind_address`, one thread per
    request up to `MAX_REQUEST_THREADS` (a connection beyond that is closed at once), each
    request bounded by `REQUEST_TIMEOUT`. `health` and `readiness` are replaced as the
    controller starts."""

    daemon_threads = True

    def __init__(self, address: str, port: int, metrics: Metrics) -> None:
        super().__init__((address, port), _Endpoints)
        self.metrics = metrics
        self.health: Check = lambda: (True, "ok")
        self.readiness: Check = lambda: (False, "starting")
        self.parked: Callable[[], list[dict[str, Any]]] = list
        self._slots = threading.BoundedSemaphore(MAX_REQUEST_THREADS)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except Exception:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up or timed out: one debug line, not a traceback on stderr."""
        log.debug("probe request from %s failed", client_address, exc_info=True)

    def start(self) -> None:
        threading.Thread(target=self.serve_forever, name="probes", daemon=True).start()

    def close(self) -> None:
        self.shutdown()
        self.server_close()


def open_probe_server(settings: Settings, metrics: Metrics) -> ProbeServer:
    address = settings.http_bind_address
    try:
        return ProbeServer(address, settings.metrics_port, metrics)
    except OSError as error:
        raise StartupError(
            f"cannot serve metrics on {address or '*'}:{settings.metrics_port}: "
            f"{error.strerror or error}"
        ) from None

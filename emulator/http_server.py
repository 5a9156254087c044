"""The wire: a threaded HTTP/1.1 server that parses requests, applies injected faults, calls
the REST handlers and writes JSON (or a chunked watch stream) back.

Standard library only (`http.server`): the official client is synchronous, tests drive the
emulator from plain threads, and one thread per connection is plenty for a test cluster.
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import orjson
import yaml

from preemptctl.emulator import status
from preemptctl.emulator.discovery import discovery
from preemptctl.emulator.faults import Action, Faults
from preemptctl.emulator.handlers import handle, predicate
from preemptctl.emulator.requestlog import Request, RequestLog
from preemptctl.emulator.resources import ALL, Resource
from preemptctl.emulator.routing import Route, route
from preemptctl.emulator.status import ApiError
from preemptctl.emulator.store import Store
from preemptctl.emulator.tables import as_table, table_events, wants_table
from preemptctl.emulator.watch import WatchRequest, serve_watch

_VERSION = {
    "major": "1",
    "minor": "34",
    "gitVersion": "v1.34.0-preemptctl-emulator",
    "platform": "linux/amd64",
}


class EmulatorServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        store: Store,
        faults: Faults,
        requests: RequestLog,
        bookmark_interval: float,
        served: frozenset[Resource] = frozenset(ALL),
    ) -> None:
        super().__init__(address, _Handler)
        self.served = served
        self.store = store
        self.faults = faults
        self.requests = requests
        self.bookmark_interval = bookmark_interval
        self.stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up before its answer was written (a test's timeout, a killed
        worker, a closed watch) is what an API server sees every day: nothing to report.
        Anything else is the emulator's own error, printed as the standard library does."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """Cut every open connection (idle keep-alives and watches), as a dying server does."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY, as a real API server sets it: the handler writes headers and body in two
    # sends, and with Nagle on the second waited for the client's delayed ACK, ~40 ms per call.
    disable_nagle_algorithm = True
    server: EmulatorServer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the request log is the record tests read."""

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _serve(self, method: str) -> None:
        split = urlsplit(self.path)
        query = dict(parse_qsl(split.query))
        content_type = self.headers.get("Content-Type", "")
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if len(raw) < length:
            # The client went away mid-request (a worker SIGKILLed while sending): a real API
            # server never serves a request whose body was cut short, so neither do we (a
            # DELETE would otherwise be served without the preconditions it was sending).
            self.close_connection = True
            return
        watch = query.get("watch") in ("true", "1")
        target = route(method, split.path, watch, self.server.served)
        if target is None:
            self._serve_other(method, split.path)
            return
        try:
            body = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            body = _yaml_body(raw) if "yaml" in content_type else None
        record = Request(
            target.verb,
            target.rbac_resource,
            target.namespace,
            target.name,
            method,
            split.path,
            query,
            content_type,
            body,
            0,
        )
        self._respond(target, query, body, content_type, record)

    def _log(self, record: Request, code: int) -> None:
        """Logged before the answer is written, so a caller that has its answer can already
        find its request in the log."""
        self.server.requests.append(dataclasses.replace(record, code=code))

    def _respond(
        self, target: Route, query: dict[str, str], body: Any, content_type: str, record: Request
    ) -> None:
        decision = self.server.faults.decide(
            target.verb, target.rbac_resource, target.namespace, target.name
        )
        if decision.delay:
            time.sleep(decision.delay)
        try:
            fault = decision.fault
            if fault is not None and fault.action is Action.DROP:
                self._log(record, 0)
                self._drop()
                return
            if fault is not None and fault.action is Action.DENY:
                raise status.forbidden(
                    target.resource,
                    target.subresource,
                    target.name,
                    target.namespace,
                    target.verb,
                    fault.user,
                )
            if fault is not None and fault.action is not Action.LOSE:
                raise status.for_code(fault.code, fault.message, fault.retry_after)
            if target.verb == "watch":
                self._watch(target, query, record)
                return
            response = handle(self.server.store, target, query, body, content_type)
            self._log(record, response.code)
            if fault is not None and fault.action is Action.LOSE:
                self._drop()  # served: the answer never leaves
                return
            answer = response.body
            if target.verb in ("get", "list") and wants_table(self.headers.get("Accept", "")):
                answer = as_table(target.resource, answer)
            self._send_json(response.code, answer)
        except ApiError as error:
            self._log(record, error.code)
            headers = {"Retry-After": str(error.retry_after)} if error.retry_after else {}
            self._send_json(error.code, error.body, headers)

    def _drop(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _send_json(self, code: int, body: Any, headers: dict[str, str] | None = None) -> None:
        payload = orjson.dumps(body)
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def _watch(self, target: Route, query: dict[str, str], record: Request) -> None:
        text = query.get("resourceVersion") or ""
        try:
            since = int(text) if text not in ("", "0") else None
        except ValueError:
            raise status.bad_request(f"resourceVersion: invalid value {text!r}") from None
        timeout_text = query.get("timeoutSeconds")
        request = WatchRequest(
            resource=target.resource,
            namespace=target.namespace,
            predicate=predicate(target, query),
            since=since,
            bookmarks=query.get("allowWatchBookmarks") in ("true", "1"),
            bookmark_interval=self.server.bookmark_interval,
            timeout=float(timeout_text) if timeout_text else None,
        )
        self._log(record, 200)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            write: Callable[[bytes], None] = self._write_chunk
            if wants_table(self.headers.get("Accept", "")):
                write = table_events(target.resource, write)
            serve_watch(self.server.store, request, write, self.server.stopping)
            self._write_chunk(b"")
        except OSError:
            self.close_connection = True

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _serve_other(self, method: str, path: str) -> None:
        """Version, health and discovery: what `kubectl` reads before any resource."""
        if method == "GET" and path == "/version":
            self._send_json(200, _VERSION)
        elif method == "GET" and path in ("/healthz", "/readyz", "/livez"):
            self._send_json(200, "ok")
        elif method == "GET" and (document := discovery(path, self.server.served)) is not None:
            self._send_json(200, document)
        else:
            body = status.status_body(
                404, "NotFound", "the server could not find the requested resource"
            )
            self._send_json(404, body)


def _yaml_body(raw: bytes) -> Any:
    """An apply body sent as YAML (kubectl apply --server-side sends YAML or JSON)."""
    try:
        return yaml.safe_load(raw.decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError):
        return None

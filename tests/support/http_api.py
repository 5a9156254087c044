"""A plain HTTP client for a Kubernetes API server, real or emulated, for tests that must see
the answer as it came: the status code, the JSON body (a `Status` on failure), the watch
stream line by line. The product's gateway hides all of that behind its results; the real
control plane's tests and the differential suite need it bare.

    api = HttpApi("https://127.0.0.1:PORT", token="...", ca_file=Path("ca.crt"))
    answer = api.call("GET", "/api/v1/namespaces/default/pods/web-0")
    answer.code, answer.body                       # 404, {"kind": "Status", ...}
    events = api.watch("/api/v1/pods", {"resourceVersion": rv}, count=2, timeout=10)

One connection per call by default (simple to reason about in a test); `keep_alive=True`
keeps one per thread, for scripts that make thousands of calls (the oracle). Nothing here
retries, except a request sent on a kept connection the server had closed while idle (it
never reached the server), which is sent again on a new one.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


@dataclass(frozen=True)
class Answer:
    """One HTTP answer: its code, its parsed JSON body (None when empty or not JSON), its
    headers."""

    code: int
    body: Any
    headers: Mapping[str, str] = field(default_factory=dict)

    def ok(self) -> Any:
        """The body of a 2xx answer; an AssertionError naming the failure otherwise."""
        assert 200 <= self.code < 300, f"HTTP {self.code}: {self.body}"
        return self.body


class HttpApi:
    """`base_url` is `http://host:port` (the emulator) or `https://host:port` (a real server,
    its certificate checked against `ca_file`); `token` is sent as a bearer token."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        ca_file: Path | None = None,
        keep_alive: bool = False,
    ) -> None:
        split = urlsplit(base_url)
        self.keep_alive = keep_alive
        self._kept = threading.local()
        self.base_url = base_url
        self.host = split.hostname or "127.0.0.1"
        self.port = split.port or (443 if split.scheme == "https" else 80)
        self.token = token
        self._tls: ssl.SSLContext | None = None
        if split.scheme == "https":
            self._tls = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._tls is not None:
            return http.client.HTTPSConnection(
                self.host, self.port, timeout=timeout, context=self._tls
            )
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": JSON}
        if content_type:
            headers["Content-Type"] = content_type
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    @staticmethod
    def _target(path: str, query: Mapping[str, str] | None) -> str:
        if not query:
            return path
        return path + "?" + "&".join(f"{k}={quote(str(v), safe='')}" for k, v in query.items())

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: Mapping[str, str] | None = None,
        content_type: str = JSON,
        timeout: float = 30.0,
    ) -> Answer:
        """One request; the answer whatever its code."""
        payload = None if body is None else json.dumps(body).encode()
        target = self._target(path, query)
        headers = self._headers(content_type if payload is not None else None)
        kept: http.client.HTTPConnection | None = getattr(self._kept, "connection", None)
        connection = kept or self._connection(timeout)
        try:
            try:
                connection.request(method, target, body=payload, headers=headers)
                response = connection.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                if kept is None:
                    raise
                connection.close()  # closed by the server while idle: a new one
                connection = self._connection(timeout)
                connection.request(method, target, body=payload, headers=headers)
                response = connection.getresponse()
            raw = response.read()
            answer_headers = {name: value for name, value in response.getheaders()}
        except BaseException:
            connection.close()
            self._kept.connection = None
            raise
        if self.keep_alive and not response.will_close:
            self._kept.connection = connection
        else:
            connection.close()
            self._kept.connection = None
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw.decode(errors="replace")
        return Answer(response.status, parsed, answer_headers)

    # -- shorthands ---------------------------------------------------------------------------

    def get(self, path: str, **query: str) -> Answer:
        return self.call("GET", path, query=query or None)

    def create(self, path: str, body: Any) -> Any:
        """POST, and the created object (any failure is an AssertionError)."""
        return self.call("POST", path, body).ok()

    def patch(self, path: str, body: Any, content_type: str = MERGE_PATCH, **query: str) -> Answer:
        return self.call("PATCH", path, body, query=query or None, content_type=content_type)

    def delete(self, path: str, body: Any = None, **query: str) -> Answer:
        return self.call("DELETE", path, body, query=query or None)

    # -- watch --------------------------------------------------------------------------------

    def watch(
        self,
        path: str,
        query: Mapping[str, str],
        *,
        count: int | None = None,
        timeout: float = 10.0,
        until: Any = None,
    ) -> WatchResult:
        """Open a watch (`watch=true` is added) and read its events until `count` were read,
        `until(event)` says so, the server ends the stream, or `timeout` seconds pass (then
        the connection is closed). The HTTP code of the answer is kept: a server may refuse a
        watch with an HTTP error or answer 200 and send an ERROR event."""
        target = self._target(path, {**query, "watch": "true"})
        connection = self._connection(timeout)
        events: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        try:
            connection.request("GET", target, headers=self._headers(None))
            response = connection.getresponse()
            if response.status != 200:
                raw = response.read()
                return WatchResult(response.status, json.loads(raw) if raw else None, [])
            sock = connection.sock
            while count is None or len(events) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                if sock is not None:
                    sock.settimeout(left)
                try:
                    line = response.readline()
                except TimeoutError:
                    break
                if not line:
                    break  # the server ended the stream
                line = line.strip()
                if not line:
                    continue
                event = json.loads(line)
                events.append(event)
                if until is not None and until(event):
                    break
        finally:
            connection.close()
        return WatchResult(200, None, events)


@dataclass(frozen=True)
class WatchResult:
    """A watch's HTTP code, its body when refused (not 200), and the events read."""

    code: int
    body: Any
    events: list[dict[str, Any]]

    @property
    def types(self) -> list[str]:
        return [str(event.get("type")) for event in self.events]

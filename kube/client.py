"""The connection to the API server, and the one way the gateway sends a request.

Requests use the official client's configuration, auth, TLS and urllib3 pool, are built
here as its `ApiClient` would build them (`KubeClient.send`), and carry raw JSON both ways,
written and read with orjson: the gateway needs a handful
of fields, the generated models cost far more to build than that, and they re-serialize
some fields lossily (an Event's microsecond `eventTime` loses its fraction when it is zero,
which the API server then refuses).

urllib3's own retries are off: a retried call must be visible to the workflow's retry
policy and the ledger, not hidden in the transport.

Beyond the client's documented API the gateway uses a few parts of its generated plumbing
(`CLIENT_INTERNALS`: the pool manager, `auth_settings`, `param_serialize`, ...). `connect`
checks each on the installed client and refuses, in one line, a client that moved one, and
pyproject.toml bounds the client to the releases the tests have checked.

The bearer token is looked up at most once a second (`BearerToken`), not per request: the
client's lookup runs the kubeconfig loader's refresh hook, which sets the configuration's
host again, which reads every environment variable for a proxy: about a fifth of a
gateway call's CPU.
"""

from __future__ import annotations

import inspect
import os
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import quote

import kubernetes
import orjson
import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.client.rest import RESTResponse

from preemptctl.kube.classify import Call, classify

DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_READ_TIMEOUT = 30.0

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"  # server-side apply (a JSON body is valid YAML)


TOKEN_LOOKUP_SECONDS = 1.0
"""How long a bearer token looked up is used before it is looked up again. The lookup runs
the loader's refresh hook, which re-reads a token that expired (in-cluster: every minute,
ahead of the token's own expiry), so a second adds at most a second to that."""


class BearerToken:
    """The `authorization` header the client's configuration gives, looked up at most once
    every `TOKEN_LOOKUP_SECONDS`; thread-safe (the activities share one client)."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._header: tuple[str, str] | None = None
        self._looked_up = float("-inf")

    def header(self, configuration: Any) -> tuple[str, str] | None:
        """(name, value), or None when the configuration has no bearer token."""
        now = self._clock()
        with self._lock:
            if now - self._looked_up >= TOKEN_LOOKUP_SECONDS:
                setting = configuration.auth_settings().get("BearerToken")
                if setting and setting.get("in") == "header" and setting.get("value"):
                    self._header = (str(setting["key"]), str(setting["value"]))
                else:
                    self._header = None
                self._looked_up = now
            return self._header


@dataclass(frozen=True)
class Internal:
    """One part of the official client the gateway relies on beyond its documented API (the
    generated `ApiClient`'s plumbing): a dotted path from `api` (the `ApiClient` instance) or
    from `kubernetes` (the package), and the keyword parameters a callable must accept."""

    path: str
    parameters: tuple[str, ...] = ()
    used_by: str = ""


CLIENT_INTERNALS: tuple[Internal, ...] = (
    Internal("api.configuration.host", used_by="KubeClient.send"),
    Internal("api.configuration.auth_settings", used_by="BearerToken.header"),
    Internal("api.configuration.retries", used_by="load_configuration"),
    Internal("api.configuration.connection_pool_maxsize", used_by="connect"),
    Internal("api.default_headers", used_by="KubeClient.send"),
    Internal("api.cookie", used_by="KubeClient.send"),
    Internal(
        "api.rest_client.pool_manager.request",
        ("method", "url", "body", "headers", "timeout", "preload_content"),
        "KubeClient.send",
    ),
    Internal(
        "api.param_serialize",
        ("method", "resource_path", "query_params", "header_params"),
        "KubeClient.stream",
    ),
    Internal(
        "api.call_api", ("method", "url", "header_params", "_request_timeout"), "KubeClient.stream"
    ),
    Internal("kubernetes.client.rest.RESTResponse", ("resp",), "KubeClient.send"),
    Internal(
        "kubernetes.client.exceptions.ApiException.from_response",
        ("http_resp", "body", "data"),
        "KubeClient.send",
    ),
    Internal("kubernetes.client.exceptions.ApiException", ("status", "reason"), "KubeClient.send"),
    Internal(
        "kubernetes.config.load_kube_config",
        ("config_file", "context", "client_configuration", "persist_config"),
        "load_configuration",
    ),
    Internal(
        "kubernetes.config.load_incluster_config",
        ("client_configuration",),
        "load_configuration",
    ),
)
"""What `client_internals_problems` checks, so that a client release that moves any of it
fails loudly (at `connect`, and in tests/kube/test_client.py) instead of at the first
preemption. pyproject.toml bounds the client to the releases checked."""


def internal_problem(internal: Internal, api: Any) -> str | None:
    """What is wrong with `internal` on the installed client (`api` an `ApiClient`), or None."""
    root, _, rest = internal.path.partition(".")
    found: Any = api if root == "api" else kubernetes
    for name in rest.split("."):
        if not hasattr(found, name):
            return f"{internal.path} is gone"
        found = getattr(found, name)
    if not internal.parameters:
        return None
    if not callable(found):
        return f"{internal.path} is not callable"
    try:
        parameters = inspect.signature(found).parameters.values()
    except (TypeError, ValueError):
        return None  # a builtin without a signature: called as before
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    missing = [name for name in internal.parameters if name not in {p.name for p in parameters}]
    return f"{internal.path} takes no {', '.join(missing)}" if missing else None


def client_internals_problems(api: Any) -> list[str]:
    """Every internal of `CLIENT_INTERNALS` the installed client lacks, as `path: problem`."""
    problems = (internal_problem(internal, api) for internal in CLIENT_INTERNALS)
    return [problem for problem in problems if problem]


class UnsupportedClientError(RuntimeError):
    """The installed kubernetes client lacks what the gateway uses."""


def _supported_clients() -> str:
    """The kubernetes requirement this distribution declares (`kubernetes>=37,<38`)."""
    try:
        requires = metadata.requires("preemptctl") or []
    except metadata.PackageNotFoundError:  # pragma: no cover (a bare checkout)
        return "the kubernetes version pyproject.toml names"
    declared = [r.split(";")[0].strip() for r in requires if re.match(r"kubernetes\b(?!-)", r)]
    return declared[0] if declared else "the kubernetes version pyproject.toml names"


LIST_READ_CHUNK = 1 << 20
"""Bytes read at a time from a list page whose length is not declared (chunked)."""


@dataclass(frozen=True, slots=True)
class ListPage:
    """One page of a list, parsed (`body`), and the length of the JSON it was parsed from
    (`size`, in bytes): what the reflector sizes its next page by."""

    body: Any
    size: int


class PageTooLarge(Exception):
    """A list page's body is longer than the reader allows (`max_bytes`): it was dropped
    after reading `read` bytes of it at most (0 when its Content-Length, `declared`, said
    so before any was read)."""

    def __init__(self, max_bytes: int, read: int, declared: int | None) -> None:
        self.max_bytes = max_bytes
        self.read = read
        self.declared = declared
        told = f"{declared} bytes declared" if declared is not None else f"over {read} bytes"
        super().__init__(f"a list page of {told}, more than the {max_bytes} allowed")


def _content_length(raw: Any) -> int | None:
    """The body's declared length, or None (chunked, compressed: the length declared is not
    what reading gives, or a header that is not a number)."""
    if raw.headers.get("Content-Encoding", "identity") != "identity":
        return None
    value = raw.headers.get("Content-Length")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _drop(raw: Any) -> None:
    """Give up on a response whose body is not read to its end: close its connection (the
    rest of the body must not be read as the next answer on it), then hand the closed
    connection back to the pool, which opens a fresh one in its place when asked."""
    raw.close()
    raw.release_conn()


@dataclass(frozen=True)
class KubeClient:
    """An `ApiClient` plus the per-request timeouts every gateway call uses."""

    api: Any  # kubernetes.client.ApiClient (untyped library)
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    read_timeout: float = DEFAULT_READ_TIMEOUT
    token: BearerToken = field(default_factory=BearerToken, compare=False, repr=False)
    # What `kube.discovery.served` found this API server serves, asked once per client.
    served: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    def _headers(self, body: bool = False, content_type: str = JSON) -> dict[str, str]:
        headers = {"Accept": JSON}
        if body:
            headers["Content-Type"] = content_type
        bearer = self.token.header(self.api.configuration)
        if bearer is not None:
            headers[bearer[0]] = bearer[1]
        return headers

    @property
    def timeout(self) -> tuple[float, float]:
        return (self.connect_timeout, self.read_timeout)

    def request(
        self,
        method: str,
        path: str,
        call: Call,
        *,
        body: Any = None,
        query: Mapping[str, str] | None = None,
        content_type: str = JSON,
    ) -> Any:
        """Send one request; the parsed JSON answer, or a classified `KubeCallError`.

        A failure answer is raised as the client's `ApiException` first and classified
        here, so callers that treat some codes as success (404 on a victim) catch
        `ApiException` around `send` instead."""
        try:
            return self.send(method, path, body=body, query=query, content_type=content_type)
        except ApiException:
            raise
        except Exception as error:  # transport failures: classified, never a raw traceback
            raise classify(error, call) from error

    def send(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Mapping[str, str] | None = None,
        content_type: str = JSON,
        timeout: tuple[float, float] | None = None,
    ) -> Any:
        """One request straight through the client's urllib3 pool: the URL, headers and
        body the client's `param_serialize` and `RESTClientObject.request` would build for
        it (plain JSON bodies, string query values), without their generic per-request
        work (a deep copy of the body, stdlib JSON, header sanitising): about a third of a
        gateway call's CPU. A TLS failure is the client's `ApiException` with status 0,
        as the client raises it."""
        raw = self._open(method, path, body, query, content_type, timeout)
        data = raw.read()  # the whole body: the connection goes back to the pool
        return orjson.loads(data) if data else None

    def read_list(
        self, path: str, query: Mapping[str, str], *, max_bytes: int | None = None
    ) -> ListPage:
        """One page of a list (a GET with `limit`, and `continue` after the first), read at
        most `max_bytes` of its body: the API server's `limit` counts objects, never bytes,
        and a tenant decides how large each object is.

        A page whose body is longer (its Content-Length, or the bytes read so far) raises
        `PageTooLarge` once `max_bytes` have been read at most: the rest is never read, and
        the connection is closed rather than handed back to the pool with the rest of the
        body still on it. `max_bytes=None` reads the whole body (a page of one object:
        the API server caps each object itself).

        The body is read into one buffer, parsed, and released before the page is returned:
        the caller holds the parsed objects alone, never those and the bytes they came from."""
        raw = self._open("GET", path, None, query, JSON, None)
        declared = _content_length(raw)
        if max_bytes is not None and declared is not None and declared > max_bytes:
            _drop(raw)
            raise PageTooLarge(max_bytes, 0, declared)
        if max_bytes is None or declared is not None:
            data: bytes | bytearray = raw.read()  # one read: as `send`, nothing to watch
        else:
            data = bytearray()
            while chunk := raw.read(LIST_READ_CHUNK):
                data += chunk
                if len(data) > max_bytes:
                    read = len(data)
                    del data
                    _drop(raw)
                    raise PageTooLarge(max_bytes, read, None)
        size = len(data)
        parsed = orjson.loads(data) if data else None
        del data
        return ListPage(parsed, size)

    def _open(
        self,
        method: str,
        path: str,
        body: Any,
        query: Mapping[str, str] | None,
        content_type: str,
        timeout: tuple[float, float] | None,
    ) -> Any:
        """Send the request; the urllib3 response of a 2xx answer, its body unread.
        Any other answer is raised as the client's `ApiException`."""
        api = self.api
        url = api.configuration.host + path
        if query:
            url += "?" + "&".join(f"{key}={quote(str(value))}" for key, value in query.items())
        headers = self._headers(body is not None, content_type)
        headers.update(api.default_headers)
        if api.cookie:
            headers["Cookie"] = api.cookie
        connect, read = timeout or self.timeout
        try:
            raw = api.rest_client.pool_manager.request(
                method,
                url,
                body=None if body is None else orjson.dumps(body),
                headers=headers,
                timeout=urllib3.Timeout(connect=connect, read=read),
                preload_content=False,
            )
        except urllib3.exceptions.SSLError as error:
            raise ApiException(status=0, reason=f"{type(error).__name__}\n{error}") from None
        if not 200 <= raw.status <= 299:
            data = raw.read()
            response = RESTResponse(raw)
            response.data = data
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return raw

    def stream(
        self,
        path: str,
        query: Mapping[str, str],
        read_timeout: float,
    ) -> Any:
        """Open a streaming GET (a watch); the urllib3 response, or raise `ApiException`."""
        serialized = self.api.param_serialize(
            method="GET",
            resource_path=path,
            query_params=list(query.items()),
            header_params=self._headers(),
        )
        response = self.api.call_api(
            *serialized, _request_timeout=(self.connect_timeout, read_timeout)
        )
        if not 200 <= response.status <= 299:
            response.read()
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return response.response


def load_configuration(kubeconfig: str | Path | None = None, context: str | None = None) -> Any:
    """The client configuration: an explicit kubeconfig, else $KUBECONFIG, else the in-cluster
    service account, else ~/.kube/config (the order kubectl and client-go follow)."""
    configuration = k8s.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path:
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(path),
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=configuration
        )
    else:
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            context=context, client_configuration=configuration, persist_config=False
        )
    configuration.retries = False
    return configuration


def connect(
    kubeconfig: str | Path | None = None,
    *,
    context: str | None = None,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    read_timeout: float = DEFAULT_READ_TIMEOUT,
    pool_size: int = 16,
) -> KubeClient:
    """A `KubeClient` for the cluster the configuration names. The pool holds one connection
    per watched kind (nine) plus the gateway's calls."""
    configuration = load_configuration(kubeconfig, context)
    configuration.connection_pool_maxsize = pool_size
    api = k8s.ApiClient(configuration)
    problems = client_internals_problems(api)
    if problems:
        raise UnsupportedClientError(
            f"the installed kubernetes client {metadata.version('kubernetes')} lacks what the "
            f"gateway uses ({'; '.join(problems)}): install {_supported_clients()}"
        )
    return KubeClient(api, connect_timeout, read_timeout)

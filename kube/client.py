"""The connection to the API server, and the one way the gateway sends a request.

Requests use the official client's configuration, auth, TLS and urllib3 pool, are built
here as its `ApiClient` would build them (`KubeClient.send`), and carry raw JSON both ways,
written and read with orjson: the gateway needs a handful
of fields, the generated models cost far more to build than that, and they re-serialize
some fields lossily (an Event's microsecond `eventTime` loses its fraction when it is zero,
which the API server then refuses).

urllib3's own retries are off: a retried call must be visible to the workflow's retry
policy and the ledger, not hidden in the transport.

The bearer token is looked up at most once a second (`BearerToken`), not per request: the
client's lookup runs the kubeconfig loader's refresh hook, which sets the configuration's
host again, which reads every environment variable for a proxy: about a fifth of a
gateway call's CPU.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

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
class KubeClient:
    """An `ApiClient` plus the per-request timeouts every gateway call uses."""

    api: Any  # kubernetes.client.ApiClient (untyped library)
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    read_timeout: float = DEFAULT_READ_TIMEOUT
    token: BearerToken = field(default_factory=BearerToken, compare=False, repr=False)

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
        data = raw.data  # the whole body: the connection goes back to the pool
        if not 200 <= raw.status <= 299:
            response = RESTResponse(raw)
            response.data = data
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return orjson.loads(data) if data else None

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
    return KubeClient(k8s.ApiClient(configuration), connect_timeout, read_timeout)

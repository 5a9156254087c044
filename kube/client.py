"""The connection to the API server, and the one way the gateway sends a request.

Requests go through the official client's `ApiClient` (its configuration, auth, TLS and
urllib3 pool) but carry raw JSON both ways, read with orjson: the gateway needs a handful
of fields, the generated models cost far more to build than that, and they re-serialize
some fields lossily (an Event's microsecond `eventTime` loses its fraction when it is zero,
which the API server then refuses).

urllib3's own retries are off: a retried call must be visible to the workflow's retry
policy and the ledger, not hidden in the transport.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from preemptctl.kube.classify import Call, classify

DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_READ_TIMEOUT = 30.0

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"  # server-side apply (a JSON body is valid YAML)


@dataclass(frozen=True)
class KubeClient:
    """An `ApiClient` plus the per-request timeouts every gateway call uses."""

    api: Any  # kubernetes.client.ApiClient (untyped library)
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    read_timeout: float = DEFAULT_READ_TIMEOUT

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
        headers = {"Accept": JSON}
        if body is not None:
            headers["Content-Type"] = content_type
        serialized = self.api.param_serialize(
            method=method,
            resource_path=path,
            query_params=list((query or {}).items()) or None,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.api.call_api(*serialized, _request_timeout=timeout or self.timeout)
        response.read()
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return orjson.loads(response.data) if response.data else None

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
            header_params={"Accept": JSON},
            auth_settings=["BearerToken"],
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

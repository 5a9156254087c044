"""Connecting to the API server.

Scenarios:
- an explicit kubeconfig path is used;
- without one, $KUBECONFIG is used;
- the transport never retries on its own: a dropped delete reaches the server once and
  surfaces as a retryable error, leaving retries to the workflow;
- a request reaches the API server as the official client would send it: its method, path,
  query (values that need escaping included), content type and JSON body; an error answer
  is the client's `ApiException` with the server's status and body;
- each request carries the kubeconfig's bearer token, as the official client would send it;
- the token is looked up at most once a second (the lookup is costly), so a token the
  configuration renews is sent from the next lookup on, and none is sent when there is none;
- every internal of the official client the gateway relies on (`CLIENT_INTERNALS`: the pool
  manager, `auth_settings`, `param_serialize`, ...) is on the installed client with the
  shape the gateway uses: each one a test that names what moved; the bearer token setting
  and `param_serialize`'s answer keep the shape the gateway reads;
- `connect` refuses a client that moved one, in one line naming it and the supported range;
- the kubernetes requirement has an upper bound, and the installed client is within it.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

import orjson
import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from packaging.requirements import Requirement

from preemptctl.emulator import Emulator
from preemptctl.kube.classify import Call
from preemptctl.kube.client import (
    CLIENT_INTERNALS,
    STRATEGIC_MERGE_PATCH,
    TOKEN_LOOKUP_SECONDS,
    BearerToken,
    Internal,
    UnsupportedClientError,
    connect,
    internal_problem,
)
from preemptctl.kube.deletion import delete_victim
from preemptctl.kube.results import Retryable
from preemptctl.preemption.decision import PodRef
from tests.support.emulator import pod


def test_explicit_kubeconfig_is_used(emulator: Emulator) -> None:
    kube = connect(emulator.kubeconfig_path)
    assert kube.api.configuration.host == emulator.base_url


def test_kubeconfig_env_is_used(emulator: Emulator, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(emulator.kubeconfig_path))
    assert connect().api.configuration.host == emulator.base_url


def test_transport_does_not_retry_on_its_own(emulator: Emulator) -> None:
    emulator.faults.drop("delete", "pods")
    kube = connect(emulator.kubeconfig_path, read_timeout=1)
    with pytest.raises(Retryable):
        delete_victim(kube, PodRef("default", "web-1", "u1"))
    assert len(emulator.requests.matching("delete", "pods")) == 1


def test_requests_carry_the_bearer_token_the_official_client_would(emulator: Emulator) -> None:
    kube = connect(emulator.kubeconfig_path)
    official = kube.api.param_serialize(
        method="GET", resource_path="/api", header_params={}, auth_settings=["BearerToken"]
    )[2]
    assert kube._headers()["authorization"] == official["authorization"] == "Bearer emulator-token"


class _Configuration:
    """Stands in for the client's configuration: counts lookups, token set by the test."""

    def __init__(self) -> None:
        self.token: str | None = "Bearer one"
        self.lookups = 0

    def auth_settings(self) -> dict[str, Any]:
        self.lookups += 1
        if self.token is None:
            return {}
        value = {"type": "api_key", "in": "header", "key": "authorization", "value": self.token}
        return {"BearerToken": value}


def test_token_is_looked_up_at_most_once_a_second() -> None:
    now = [100.0]
    token = BearerToken(clock=lambda: now[0])
    configuration = _Configuration()
    assert token.header(configuration) == ("authorization", "Bearer one")
    configuration.token = "Bearer two"
    now[0] += TOKEN_LOOKUP_SECONDS / 2
    assert token.header(configuration) == ("authorization", "Bearer one")
    assert configuration.lookups == 1
    now[0] += TOKEN_LOOKUP_SECONDS
    assert token.header(configuration) == ("authorization", "Bearer two")
    configuration.token = None
    now[0] += TOKEN_LOOKUP_SECONDS
    assert token.header(configuration) is None
    assert configuration.lookups == 3


def test_a_request_reaches_the_server_as_sent(emulator: Emulator) -> None:
    emulator.load(pod("web-1"))
    kube = connect(emulator.kubeconfig_path)
    path = "/api/v1/namespaces/default/pods/web-1"
    body = {"metadata": {"labels": {"tier": "caf\u00e9 & more"}}}
    query = {"fieldManager": "a b/c=d&e", "dryRun": "All"}
    kube.request(
        "PATCH",
        path,
        Call("patch", "pods", "default/web-1"),
        body=body,
        query=query,
        content_type=STRATEGIC_MERGE_PATCH,
    )
    (sent,) = emulator.requests.matching("patch", "pods")
    assert (sent.method, sent.path, sent.query) == ("PATCH", path, query)
    assert (sent.content_type, sent.body) == (STRATEGIC_MERGE_PATCH, body)


def test_an_error_answer_is_the_clients_api_exception(emulator: Emulator) -> None:
    kube = connect(emulator.kubeconfig_path)
    with pytest.raises(ApiException) as raised:
        kube.send("GET", "/api/v1/namespaces/default/pods/no-such-pod")
    assert raised.value.status == 404
    assert orjson.loads(raised.value.body)["reason"] == "NotFound"


# -- the client's internals --------------------------------------------------------------------

CLIENT = metadata.version("kubernetes")


@pytest.mark.parametrize("internal", CLIENT_INTERNALS, ids=lambda internal: internal.path)
def test_each_client_internal_the_gateway_uses_is_on_the_installed_client(
    internal: Internal,
) -> None:
    problem = internal_problem(internal, k8s.ApiClient(k8s.Configuration()))
    assert problem is None, (
        f"kubernetes {CLIENT}: {problem}, which kube/client.py ({internal.used_by}) relies on: "
        "adapt the gateway to this client, or keep pyproject.toml's bound below it"
    )


def test_the_bearer_token_setting_keeps_the_shape_the_gateway_reads() -> None:
    configuration = k8s.Configuration(
        api_key={"authorization": "t0ken"}, api_key_prefix={"authorization": "Bearer"}
    )
    setting = configuration.auth_settings().get("BearerToken")
    assert setting == {
        "type": "api_key",
        "in": "header",
        "key": "authorization",
        "value": "Bearer t0ken",
    }, f"kubernetes {CLIENT}: Configuration.auth_settings() changed shape: {setting}"


def test_param_serialize_answers_what_call_api_takes() -> None:
    api = k8s.ApiClient(k8s.Configuration(host="https://api.example:6443"))
    serialized = api.param_serialize(
        method="GET",
        resource_path="/api/v1/pods",
        query_params=[("watch", "true")],
        header_params={"Accept": "application/json"},
    )
    method, url, headers, body, post_params = serialized
    assert (method, url, body, post_params) == (
        "GET",
        "https://api.example:6443/api/v1/pods?watch=true",
        None,
        None,
    ), f"kubernetes {CLIENT}: ApiClient.param_serialize changed its answer: {serialized}"
    assert headers["Accept"] == "application/json"


def test_connect_refuses_a_client_that_moved_an_internal(
    emulator: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(k8s.ApiClient, "param_serialize")
    with pytest.raises(UnsupportedClientError) as raised:
        connect(emulator.kubeconfig_path)
    assert str(raised.value) == (
        f"the installed kubernetes client {CLIENT} lacks what the gateway uses "
        "(api.param_serialize is gone): install kubernetes<38,>=37"
    )


def test_a_moved_parameter_is_named() -> None:
    internal = Internal("api.call_api", ("_request_timeout", "_timeout"))
    problem = internal_problem(internal, k8s.ApiClient(k8s.Configuration()))
    assert problem == "api.call_api takes no _timeout"


def test_the_kubernetes_requirement_is_bounded_and_the_installed_client_within_it() -> None:
    (declared,) = [
        Requirement(line)
        for line in metadata.requires("preemptctl") or []
        if Requirement(line).name == "kubernetes"
    ]
    assert any(spec.operator in ("<", "<=", "~=", "==") for spec in declared.specifier), (
        f"{declared} has no upper bound: a client release could move the internals unseen"
    )
    assert declared.specifier.contains(CLIENT), f"kubernetes {CLIENT} is outside {declared}"

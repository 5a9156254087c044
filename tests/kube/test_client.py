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
  configuration renews is sent from the next lookup on, and none is sent when there is none.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from kubernetes.client.exceptions import ApiException

from preemptctl.emulator import Emulator
from preemptctl.kube.classify import Call
from preemptctl.kube.client import STRATEGIC_MERGE_PATCH, TOKEN_LOOKUP_SECONDS, BearerToken, connect
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

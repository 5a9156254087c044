"""Connecting to the API server.

Scenarios:
- an explicit kubeconfig path is used;
- without one, $KUBECONFIG is used;
- the transport never retries on its own: a dropped delete reaches the server once and
  surfaces as a retryable error, leaving retries to the workflow;
- each request carries the kubeconfig's bearer token, as the official client would send it;
- the token is looked up at most once a second (the lookup is costly), so a token the
  configuration renews is sent from the next lookup on, and none is sent when there is none.
"""

from __future__ import annotations

from typing import Any

import pytest

from preemptctl.emulator import Emulator
from preemptctl.kube.client import TOKEN_LOOKUP_SECONDS, BearerToken, connect
from preemptctl.kube.deletion import delete_victim
from preemptctl.kube.outcomes import PodRef, Retryable


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

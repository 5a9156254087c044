"""Connecting to the API server.

Scenarios:
- an explicit kubeconfig path is used;
- without one, $KUBECONFIG is used;
- the transport never retries on its own: a dropped delete reaches the server once and
  surfaces as a retryable error, leaving retries to the workflow.
"""

from __future__ import annotations

import pytest

from preemptctl.emulator import Emulator
from preemptctl.kube.client import connect
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

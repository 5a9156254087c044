"""Every gateway call under every fault class, and how each is classified.

Scenarios (each call × each fault):
- 500 and 503 are retryable server errors;
- 429 is retryable and exposes the server's Retry-After delay;
- a 409 resourceVersion conflict is retryable;
- a dropped connection and a reply slower than the read timeout are retryable;
- 422 is not retryable and carries the API's reason;
- 401 and 403 are not retryable permission errors naming the verb and resource;
and, beyond the matrix:
- an RBAC denial reads as one sentence naming what to grant;
- an API server that is down is a retryable connection error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from preemptctl.emulator import Emulator
from preemptctl.kube.client import KubeClient
from preemptctl.kube.conditions import add_disruption_target
from preemptctl.kube.deletion import delete_victim
from preemptctl.kube.events import record_preempted
from preemptctl.kube.nomination import clear_nomination, nominate
from preemptctl.kube.pods import get_pod
from preemptctl.kube.results import (
    ErrorKind,
    KubeCallError,
    NotRetryable,
    PermissionDenied,
    Rejected,
    Retryable,
)
from preemptctl.preemption.decision import PodRef
from tests.kube.conftest import READ_TIMEOUT, ref_of
from tests.support.emulator import pod


@dataclass(frozen=True)
class GatewayCall:
    """A gateway call and the request of it the fault is aimed at."""

    verb: str
    resource: str
    run: Callable[[KubeClient, PodRef, PodRef], Any]


CALLS = {
    "get_pod": GatewayCall("get", "pods", lambda kube, victim, _: get_pod(kube, victim)),
    "add_disruption_target": GatewayCall(
        "patch", "pods/status", lambda kube, victim, _: add_disruption_target(kube, victim, "s")
    ),
    "delete_victim": GatewayCall(
        "delete", "pods", lambda kube, victim, _: delete_victim(kube, victim)
    ),
    "evict_victim": GatewayCall(
        "create",
        "pods/eviction",
        lambda kube, victim, _: delete_victim(kube, victim, use_eviction=True),
    ),
    "nominate": GatewayCall(
        "patch",
        "pods/status",
        lambda kube, _, preemptor: nominate(kube, preemptor, "n1", overwrite=False),
    ),
    "clear_nomination": GatewayCall(
        "patch", "pods/status", lambda kube, victim, _: clear_nomination(kube, victim, "n2")
    ),
    "record_preempted": GatewayCall(
        "create",
        "events",
        lambda kube, victim, preemptor: record_preempted(kube, victim, preemptor, "n1", "w"),
    ),
}


@dataclass(frozen=True)
class FaultClass:
    inject: Callable[[Emulator, str, str], Any]
    error: type[KubeCallError]
    kind: ErrorKind


FAULTS = {
    "500": FaultClass(lambda e, v, r: e.faults.fail(v, r, 500), Retryable, ErrorKind.SERVER_ERROR),
    "503": FaultClass(lambda e, v, r: e.faults.fail(v, r, 503), Retryable, ErrorKind.SERVER_ERROR),
    "429": FaultClass(
        lambda e, v, r: e.faults.fail(v, r, 429, retry_after=7), Retryable, ErrorKind.THROTTLED
    ),
    "409-conflict": FaultClass(
        lambda e, v, r: e.faults.fail(v, r, 409), Retryable, ErrorKind.CONFLICT
    ),
    "dropped": FaultClass(lambda e, v, r: e.faults.drop(v, r), Retryable, ErrorKind.CONNECTION),
    "timeout": FaultClass(
        lambda e, v, r: e.faults.delay(v, r, READ_TIMEOUT * 3, times=1),
        Retryable,
        ErrorKind.TIMEOUT,
    ),
    "422": FaultClass(
        lambda e, v, r: e.faults.fail(v, r, 422, message='Pod "web-1" is invalid'),
        Rejected,
        ErrorKind.INVALID,
    ),
    "401": FaultClass(
        lambda e, v, r: e.faults.fail(v, r, 401), PermissionDenied, ErrorKind.UNAUTHORIZED
    ),
    "403": FaultClass(lambda e, v, r: e.faults.deny(v, r), PermissionDenied, ErrorKind.FORBIDDEN),
}


@pytest.fixture
def pods(emulator: Emulator) -> tuple[PodRef, PodRef]:
    emulator.load(pod("web-1", node_name="n1", nominated_node="n2", grace_period=600))
    emulator.load(pod("urgent", "batch", priority=1000))
    return ref_of(emulator, "default/web-1"), ref_of(emulator, "batch/urgent")


@pytest.mark.parametrize("fault_name", FAULTS)
@pytest.mark.parametrize("call_name", CALLS)
def test_fault_is_classified(
    kube: KubeClient,
    emulator: Emulator,
    pods: tuple[PodRef, PodRef],
    call_name: str,
    fault_name: str,
) -> None:
    call, fault = CALLS[call_name], FAULTS[fault_name]
    fault.inject(emulator, call.verb, call.resource)
    with pytest.raises(KubeCallError) as raised:
        call.run(kube, *pods)
    assert type(raised.value) is fault.error
    assert raised.value.kind is fault.kind
    assert raised.value.retryable is issubclass(fault.error, Retryable)
    if fault_name == "429":
        assert raised.value.retry_after == 7
    if fault_name == "422":
        assert raised.value.reason == "Invalid"
    if isinstance(raised.value, PermissionDenied):
        assert (raised.value.verb, raised.value.resource) == (call.verb, call.resource)


def test_rbac_denial_reads_as_what_to_grant(
    kube: KubeClient, emulator: Emulator, pods: tuple[PodRef, PodRef]
) -> None:
    emulator.faults.deny("delete", "pods")
    with pytest.raises(NotRetryable) as raised:
        delete_victim(kube, pods[0])
    assert raised.value.message == (
        "delete pods default/web-1: the controller is not allowed to delete pods: "
        'pods "web-1" is forbidden: User "system:serviceaccount:preemptctl:preemptctl" cannot '
        'delete resource "pods" in API group "" in the namespace "default" — grant verb '
        '"delete" on resource "pods" in API group "" to the controller\'s ClusterRole '
        "(see deploy/ RBAC)"
    )


def test_api_server_down_is_retryable(
    kube: KubeClient, emulator: Emulator, pods: tuple[PodRef, PodRef]
) -> None:
    emulator.stop()
    with pytest.raises(Retryable) as raised:
        delete_victim(kube, pods[0])
    assert raised.value.kind is ErrorKind.CONNECTION

"""Reading a pod by namespace/name and UID.

Scenarios:
- the pod with that name and UID is found;
- no pod by that name is gone;
- a pod by that name with another UID is reported as replaced, with the new pod;
- the lookup reads the pod for its callers: UID, node, scheduler, nomination, whether it is
  terminating, and where it stands as a preemptor (pending, bound to its node, gone,
  replaced).

Names (issue 20, finding 12): a name the API server would refuse never becomes a path. For
a pod named `..`, `.`, `a/b` or `%2e%2e` (and a namespace so named), a delete, an eviction,
a status patch (DisruptionTarget, nomination), a look-up, a PodGroup look-up and an Event
are refused as NotRetryable before any request, the message naming the object and upstream's
rule; the emulator's request log shows no request at all, so never a DELETE whose path is
not a pod's. (Before: `..` sent `DELETE /api/v1/namespaces/default/`, answered 404 and
taken for a victim already gone; `.` sent a deletecollection.)
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from typing import Any

import pytest

from preemptctl.emulator import Emulator
from preemptctl.emulator.resources import PODS
from preemptctl.kube.client import KubeClient
from preemptctl.kube.conditions import add_disruption_target, remove_disruption_target
from preemptctl.kube.deletion import delete_victim
from preemptctl.kube.events import record_preempted
from preemptctl.kube.nomination import clear_nomination, nominate
from preemptctl.kube.pods import Presence, get_pod, get_pod_group
from preemptctl.kube.results import ErrorKind, NotRetryable
from preemptctl.preemption.decision import PodRef
from preemptctl.preemption.group_decision import GroupRef
from preemptctl.preemption.standing import PreemptorStanding, Standing
from tests.support.emulator import as_list, pod


def test_pod_with_same_uid_is_found(kube: KubeClient, emulator: Emulator) -> None:
    emulator.load(pod("web", uid="u1"))
    lookup = get_pod(kube, PodRef("default", "web", "u1"))
    assert lookup.presence is Presence.FOUND
    assert lookup.resource_version


def test_missing_pod_is_gone(kube: KubeClient) -> None:
    assert get_pod(kube, PodRef("default", "web", "u1")).presence is Presence.GONE


def test_same_name_with_another_uid_is_replaced(kube: KubeClient, emulator: Emulator) -> None:
    emulator.load(pod("web", uid="u2"))
    lookup = get_pod(kube, PodRef("default", "web", "u1"))
    assert lookup.presence is Presence.REPLACED
    assert lookup.pod is not None and lookup.pod["metadata"]["uid"] == "u2"


def test_the_lookup_reads_the_pod_for_its_callers(kube: KubeClient, emulator: Emulator) -> None:
    loaded = pod("web", uid="u1", node_name="n1", grace_period=60)
    loaded["spec"]["schedulerName"] = "batch-scheduler"
    loaded["status"]["nominatedNodeName"] = "n2"
    emulator.load(loaded)
    emulator.store.delete(PODS, "default", "web", grace_period=60)
    lookup = get_pod(kube, PodRef("default", "web", "u1"))
    assert (lookup.uid, lookup.node_name, lookup.scheduler_name) == ("u1", "n1", "batch-scheduler")
    assert (lookup.nominated_node_name, lookup.terminating) == ("n2", True)
    assert lookup.standing() == PreemptorStanding(Standing.BOUND, "n1")


def test_a_pending_pod_stands_pending_with_the_default_scheduler(
    kube: KubeClient, emulator: Emulator
) -> None:
    emulator.load(pod("web", uid="u1"))
    lookup = get_pod(kube, PodRef("default", "web", "u1"))
    assert (lookup.node_name, lookup.terminating, lookup.scheduler_name) == (
        None,
        False,
        "default-scheduler",
    )
    assert lookup.standing() == PreemptorStanding(Standing.PENDING)


def test_a_gone_or_replaced_pod_stands_so(kube: KubeClient, emulator: Emulator) -> None:
    assert get_pod(kube, PodRef("default", "web", "u1")).standing() == PreemptorStanding(
        Standing.GONE
    )
    emulator.load(pod("web", uid="u2", node_name="n1"))
    replaced = get_pod(kube, PodRef("default", "web", "u1"))
    assert replaced.standing() == PreemptorStanding(Standing.REPLACED)
    assert replaced.uid == "u2"


# -- names ------------------------------------------------------------------------------------

HOSTILE_NAMES = ["..", ".", "a/b", "%2e%2e"]
POD_PATH = re.compile(r"/api/v1/namespaces/[a-z0-9-]+/pods/[a-z0-9.-]+(/[a-z]+)?")

CALLS: dict[str, Callable[[KubeClient, PodRef], Any]] = {
    "delete": lambda kube, ref: delete_victim(kube, ref),
    "evict": lambda kube, ref: delete_victim(kube, ref, use_eviction=True),
    "mark": lambda kube, ref: add_disruption_target(kube, ref, "default-scheduler"),
    "unmark": lambda kube, ref: remove_disruption_target(kube, ref),
    "nominate": lambda kube, ref: nominate(kube, ref, "n1", overwrite=True),
    "clear nomination": lambda kube, ref: clear_nomination(kube, ref, "n1"),
    "look up": lambda kube, ref: get_pod(kube, ref),
}


def _record_preempted(kube: KubeClient, victim: PodRef) -> Any:
    return record_preempted(kube, victim, PodRef("default", "urgent", "u9"), "n1", "test")


@pytest.mark.parametrize("name", HOSTILE_NAMES)
@pytest.mark.parametrize("call", list(CALLS))
def test_a_pod_name_the_api_server_refuses_is_never_sent(
    kube: KubeClient, emulator: Emulator, call: str, name: str
) -> None:
    emulator.load(pod("web", uid="u1", node_name="n1"))
    with pytest.raises(NotRetryable) as refused:
        CALLS[call](kube, PodRef("default", name, "u1"))
    assert refused.value.kind is ErrorKind.INVALID
    assert refused.value.message.startswith(
        f"refused to build a request for pod {f'default/{name}'!r}: pod name {name!r} is not "
        "valid: a lowercase RFC 1123 subdomain must consist of"
    )
    assert list(emulator.requests) == []
    assert emulator.pod("default/web") is not None


@pytest.mark.parametrize("namespace", HOSTILE_NAMES)
def test_a_namespace_the_api_server_refuses_is_never_sent(
    kube: KubeClient, emulator: Emulator, namespace: str
) -> None:
    for call in [*CALLS.values(), _record_preempted]:
        with pytest.raises(NotRetryable, match=f"namespace {re.escape(repr(namespace))} is not"):
            call(kube, PodRef(namespace, "web", "u1"))
    assert list(emulator.requests) == []


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_pod_group_name_the_api_server_refuses_is_never_sent(
    kube: KubeClient, emulator: Emulator, name: str
) -> None:
    with pytest.raises(NotRetryable, match=f"pod group 'ml/{re.escape(name)}': pod group name"):
        get_pod_group(kube, GroupRef("ml", name, "g1"))
    assert list(emulator.requests) == []


def test_every_delete_sent_is_a_pods_own_path(kube: KubeClient, emulator: Emulator) -> None:
    emulator.load(as_list(pod("web", uid="u1", node_name="n1"), pod("web.v2", uid="u2")))
    for name in [*HOSTILE_NAMES, "web", "web.v2"]:
        with contextlib.suppress(NotRetryable):
            delete_victim(kube, PodRef("default", name, "u1" if name == "web" else "u2"))
    deletes = [entry.path for entry in emulator.requests if entry.method == "DELETE"]
    assert deletes == [
        "/api/v1/namespaces/default/pods/web",
        "/api/v1/namespaces/default/pods/web.v2",
    ]
    assert all(POD_PATH.fullmatch(path) for path in deletes)

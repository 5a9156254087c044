"""Reading a pod by namespace/name and UID.

Scenarios:
- the pod with that name and UID is found;
- no pod by that name is gone;
- a pod by that name with another UID is reported as replaced, with the new pod;
- the lookup reads the pod for its callers: UID, node, scheduler, nomination, whether it is
  terminating, and where it stands as a preemptor (pending, bound to its node, gone,
  replaced).
"""

from __future__ import annotations

from preemptctl.emulator import Emulator
from preemptctl.emulator.resources import PODS
from preemptctl.kube.client import KubeClient
from preemptctl.kube.pods import Presence, get_pod
from preemptctl.preemption.decision import PodRef
from preemptctl.preemption.standing import PreemptorStanding, Standing
from tests.support.emulator import pod


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

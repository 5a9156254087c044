"""Reading a PodGroup by namespace/name and UID: a group preemption's step 1 and checks.

Scenarios:
- the PodGroup with that name and UID is found, decoded in the planner's model, and stands
  pending (its members say more);
- no PodGroup by that name is gone, and so is every PodGroup on a cluster without the API
  (or with only 1.35's first alpha, which has no PodGroups);
- on a 1.36 cluster the group is read at `v1alpha2`, where it is served (discovery asked
  once per client: a second read sends no discovery request);
- a PodGroup by that name with another UID is reported as replaced, with the new group;
- a refused read (RBAC) is one classified error naming the verb, resource and group.
"""

from __future__ import annotations

from typing import Any

import pytest

from preemptctl.emulator import Emulator
from preemptctl.emulator.resources import POD_GROUPS
from preemptctl.kube.client import KubeClient, connect
from preemptctl.kube.pods import Presence, get_pod_group
from preemptctl.kube.results import KubeCallError
from preemptctl.preemption.group_decision import GroupRef
from preemptctl.preemption.standing import Standing
from tests.support.emulator import running_emulator


def pod_group(name: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ml", "uid": uid},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 4}}, "priority": 1000},
    }


def stored_uid(emulator: Emulator, name: str) -> str:
    [found] = [g for g in emulator.store.objects(POD_GROUPS) if g["metadata"]["name"] == name]
    return str(found["metadata"]["uid"])


def test_the_group_with_that_uid_is_found(kube: KubeClient, emulator: Emulator) -> None:
    emulator.load(pod_group("train-a", "u-1"))
    uid = stored_uid(emulator, "train-a")
    lookup = get_pod_group(kube, GroupRef("ml", "train-a", uid, 1000))
    assert lookup.presence is Presence.FOUND and lookup.standing is Standing.PENDING
    assert lookup.group is not None
    assert (lookup.group.key, lookup.group.min_count, lookup.group.priority) == (
        "ml/train-a",
        4,
        1000,
    )


def test_a_missing_group_is_gone(kube: KubeClient) -> None:
    lookup = get_pod_group(kube, GroupRef("ml", "train-a", "u-1"))
    assert (lookup.presence, lookup.group, lookup.standing) == (Presence.GONE, None, Standing.GONE)


def test_every_group_is_gone_on_a_cluster_without_the_api() -> None:
    with running_emulator(pod_groups=False) as emulator:
        kube = connect(emulator.kubeconfig_path, connect_timeout=1, read_timeout=0.5)
        try:
            lookup = get_pod_group(kube, GroupRef("ml", "train-a", "u-1"))
        finally:
            kube.api.close()
    assert lookup.presence is Presence.GONE


def test_a_1_35_cluster_has_no_pod_group_to_read() -> None:
    with running_emulator(pod_group_version="v1alpha1") as emulator:
        kube = connect(emulator.kubeconfig_path, connect_timeout=1, read_timeout=0.5)
        try:
            lookup = get_pod_group(kube, GroupRef("ml", "train-a", "u-1"))
        finally:
            kube.api.close()
    assert lookup.presence is Presence.GONE


def test_a_1_36_cluster_serves_the_group_at_v1alpha2() -> None:
    with running_emulator(pod_group_version="v1alpha2") as emulator:
        made = pod_group("train-a", "u-1")
        made["apiVersion"] = "scheduling.k8s.io/v1alpha2"
        made["spec"]["disruptionMode"] = "PodGroup"
        emulator.load(made)
        uid = stored_uid(emulator, "train-a")
        client = connect(emulator.kubeconfig_path, connect_timeout=1, read_timeout=0.5)
        kube = _Counting(client)
        try:
            first = get_pod_group(kube, GroupRef("ml", "train-a", uid))  # type: ignore[arg-type]
            again = get_pod_group(kube, GroupRef("ml", "train-a", uid))  # type: ignore[arg-type]
        finally:
            client.api.close()
        reads = [r.path for r in emulator.requests if r.resource == "podgroups"]
    assert first.presence is Presence.FOUND and again.presence is Presence.FOUND
    assert first.group is not None and first.group.disruption_all
    assert kube.discovery == ["/apis/scheduling.k8s.io", "/apis/scheduling.k8s.io/v1alpha2"]
    assert reads == ["/apis/scheduling.k8s.io/v1alpha2/namespaces/ml/podgroups/train-a"] * 2


class _Counting:
    """A client whose direct sends (discovery's) are noted; its other calls go through."""

    def __init__(self, kube: KubeClient) -> None:
        self._kube = kube
        self.discovery: list[str] = []

    def send(self, method: str, path: str, **options: Any) -> Any:
        self.discovery.append(path)
        return self._kube.send(method, path, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kube, name)


def test_a_group_with_another_uid_is_replaced(kube: KubeClient, emulator: Emulator) -> None:
    emulator.load(pod_group("train-a", "u-2"))
    lookup = get_pod_group(kube, GroupRef("ml", "train-a", "u-1"))
    assert (lookup.presence, lookup.standing) == (Presence.REPLACED, Standing.REPLACED)
    assert lookup.group is not None and lookup.group.uid == stored_uid(emulator, "train-a")


def test_a_refused_read_is_one_classified_error(kube: KubeClient, emulator: Emulator) -> None:
    emulator.faults.deny("get", "podgroups")
    with pytest.raises(KubeCallError) as raised:
        get_pod_group(kube, GroupRef("ml", "train-a", "u-1"))
    assert "get podgroups ml/train-a" in str(raised.value)

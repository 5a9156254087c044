"""Reading a pod by namespace/name and UID.

Scenarios:
- the pod with that name and UID is found;
- no pod by that name is gone;
- a pod by that name with another UID is reported as replaced, with the new pod.
"""

from __future__ import annotations

from preemptctl.emulator import Emulator
from preemptctl.kube.client import KubeClient
from preemptctl.kube.outcomes import PodRef
from preemptctl.kube.pods import Presence, get_pod
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

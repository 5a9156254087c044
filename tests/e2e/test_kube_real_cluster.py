"""The gateway and the cluster view against a real cluster (kind, or any kubeconfig).

Runs only when KUBECONFIG is set; it works in a namespace of its own, made and removed here.
Pods are created unbound with a scheduler name no scheduler serves, so they stay Pending and
nothing runs: deletes are immediate and the cluster is left as it was found.

Scenarios:
- a pod is read by name and UID; a missing one is gone;
- the DisruptionTarget condition is added once, and a second call sends nothing;
- a victim replaced by a same-named pod (new UID) is not deleted;
- a victim is deleted with a UID precondition; a second delete finds it already gone;
- nomination is set, kept when another node's, and cleared;
- the Preempted event is recorded once, however often the call is retried;
- the view becomes ready and sees a pod created after its sync, and its deletion.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from preemptctl.kube.client import KubeClient, connect
from preemptctl.kube.conditions import add_disruption_target
from preemptctl.kube.deletion import delete_victim
from preemptctl.kube.events import record_preempted
from preemptctl.kube.nomination import clear_nomination, nominate
from preemptctl.kube.pods import Presence, get_pod
from preemptctl.kube.results import WriteEffect
from preemptctl.kube.view import ClusterView
from preemptctl.preemption.decision import PodRef

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not os.environ.get("KUBECONFIG"), reason="needs a real cluster: set KUBECONFIG"
    ),
]

UNSERVED_SCHEDULER = "preemptctl-e2e-unserved"


@pytest.fixture(scope="module")
def kube() -> Iterator[KubeClient]:
    client = connect(read_timeout=30)
    yield client
    client.api.close()


@pytest.fixture(scope="module")
def namespace(kube: KubeClient) -> Iterator[str]:
    name = f"preemptctl-e2e-{uuid.uuid4().hex[:8]}"
    kube.send("POST", "/api/v1/namespaces", body={"metadata": {"name": name}})
    yield name
    kube.send("DELETE", f"/api/v1/namespaces/{name}")


def make_pod(kube: KubeClient, namespace: str, name: str) -> PodRef:
    body: dict[str, Any] = {
        "metadata": {"name": name},
        "spec": {
            "schedulerName": UNSERVED_SCHEDULER,
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
        },
    }
    created = kube.send("POST", f"/api/v1/namespaces/{namespace}/pods", body=body)
    return PodRef(namespace, name, created["metadata"]["uid"])


def remove_pod(kube: KubeClient, ref: PodRef) -> None:
    delete_victim(kube, ref, grace_period_seconds=0)
    deadline = time.monotonic() + 30
    while get_pod(kube, PodRef(ref.namespace, ref.name, "")).presence is not Presence.GONE:
        assert time.monotonic() < deadline, f"{ref.key} was not deleted"
        time.sleep(0.2)


def test_pod_is_read_by_name_and_uid(kube: KubeClient, namespace: str) -> None:
    ref = make_pod(kube, namespace, "read-me")
    assert get_pod(kube, ref).presence is Presence.FOUND
    assert get_pod(kube, PodRef(namespace, "missing", "u")).presence is Presence.GONE


def test_disruption_target_is_added_once(kube: KubeClient, namespace: str) -> None:
    ref = make_pod(kube, namespace, "condition")
    assert add_disruption_target(kube, ref, "default-scheduler").effect is WriteEffect.DONE
    assert add_disruption_target(kube, ref, "default-scheduler").effect is WriteEffect.UNCHANGED


def test_replaced_victim_is_not_deleted(kube: KubeClient, namespace: str) -> None:
    original = make_pod(kube, namespace, "web-0")
    remove_pod(kube, original)
    replacement = make_pod(kube, namespace, "web-0")
    assert delete_victim(kube, original).effect is WriteEffect.REPLACED
    assert get_pod(kube, replacement).presence is Presence.FOUND


def test_victim_is_deleted_with_uid_precondition(kube: KubeClient, namespace: str) -> None:
    ref = make_pod(kube, namespace, "victim")
    assert delete_victim(kube, ref, grace_period_seconds=0).effect is WriteEffect.DONE
    remove_pod(kube, ref)
    assert delete_victim(kube, ref).effect is WriteEffect.ALREADY_GONE


def test_nomination_is_set_kept_and_cleared(kube: KubeClient, namespace: str) -> None:
    ref = make_pod(kube, namespace, "urgent")
    assert nominate(kube, ref, "node-a", overwrite=False).effect is WriteEffect.DONE
    kept = nominate(kube, ref, "node-b", overwrite=False)
    assert (kept.effect, kept.previous) == (WriteEffect.KEPT_OTHER_NOMINATION, "node-a")
    assert clear_nomination(kube, ref, "node-a").effect is WriteEffect.DONE


def test_preempted_event_is_recorded_once(kube: KubeClient, namespace: str) -> None:
    victim = make_pod(kube, namespace, "evented")
    preemptor = make_pod(kube, namespace, "preemptor")
    first = record_preempted(kube, victim, preemptor, "node-a", "e2e")
    again = record_preempted(kube, victim, preemptor, "node-a", "e2e")
    assert (first.effect, again.effect) == (WriteEffect.DONE, WriteEffect.UNCHANGED)


def test_view_follows_the_cluster(kube: KubeClient, namespace: str) -> None:
    view = ClusterView(kube, watch_timeout=60)
    view.start()
    try:
        assert view.wait_ready(120)
        ref = make_pod(kube, namespace, "watched")
        assert _eventually(lambda: _in_view(view, ref.key))
        remove_pod(kube, ref)
        assert _eventually(lambda: not _in_view(view, ref.key))
    finally:
        view.stop()


def _in_view(view: ClusterView, key: str) -> bool:
    with view.read() as snapshot:
        return snapshot.pod_by_key(key) is not None


def _eventually(condition: Any, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False

"""The cluster view against hostile or broken objects in a watch stream, and the new kinds.

Scenarios:
- a pod without a uid, with a list for nodeName, or with a priority the planner rejects is
  skipped, counted per kind through `on_rejected`, and the stream goes on: a good pod sent
  after it arrives, on the same watch (the emulator's request log shows no re-watch);
- a bound pod the view cannot read keeps its node out of the candidates
  (`unreadable_pods`) instead of silently freeing its capacity; readable again, it is back;
- the view lists and watches Namespaces, PersistentVolumeClaims, PersistentVolumes,
  StorageClasses, CSINodes and VolumeAttachments, and feeds them to the snapshot
  (applied, then removed when deleted);
- sync progress per kind: objects listed, seconds, synced; a kind not synced names its
  last error (a list RBAC forbids).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from preemptctl.emulator import Emulator
from preemptctl.emulator.resources import NAMESPACES, PODS, PVCS, STORAGE_CLASSES
from preemptctl.kube.client import KubeClient
from preemptctl.kube.reflector import Backoff
from preemptctl.kube.view import KINDS, ClusterView
from tests.support.emulator import as_list, node, pod

# The kinds the view watches on the emulator, which serves no CompositePodGroups by default
# (their gate is alpha): that kind is absent there, never watched.
WATCHED = len(KINDS) - 1


@pytest.fixture
def rejected() -> list[str]:
    return []


@pytest.fixture
def view(emulator: Emulator, kube: KubeClient, rejected: list[str]) -> Iterator[ClusterView]:
    emulator.load(as_list(node("n1"), pod("a", node_name="n1")))
    started = ClusterView(
        kube,
        watch_timeout=30,
        backoff=lambda: Backoff(initial=0.02, maximum=0.2),
        on_rejected=rejected.append,
    )
    started.start()
    assert started.wait_ready(5)
    assert emulator.wait_for_watches(WATCHED)
    yield started
    started.stop()


def eventually(check: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return check()


def has_pod(view: ClusterView, key: str) -> bool:
    with view.read() as snapshot:
        return snapshot.pod_by_key(key) is not None


def hostile(name: str, **spec: Any) -> dict[str, Any]:
    body = pod(name, node_name="n1")
    body["spec"].update(spec)
    return body


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: _without_uid(pod("no-uid", node_name="n1")), id="missing uid"),
        pytest.param(lambda: hostile("list-node", nodeName=["n1"]), id="unhashable nodeName"),
        pytest.param(lambda: hostile("big-priority", priority=2**40), id="priority beyond int32"),
        pytest.param(lambda: hostile("text-priority", priority="high"), id="priority not a number"),
    ],
)
def test_bad_pod_is_skipped_counted_and_the_stream_goes_on(
    emulator: Emulator,
    view: ClusterView,
    rejected: list[str],
    make: Callable[[], dict[str, Any]],
) -> None:
    emulator.store.inject(PODS, make(), "bad")
    emulator.store.load(PODS, pod("after", node_name="n1"))
    assert eventually(lambda: has_pod(view, "default/after"))
    assert rejected == ["Pod"]
    assert view.reflector_stats()["Pod"].rejected + view.stats.rejected >= 1
    assert len(emulator.requests.matching("watch", "pods")) == 1


def _without_uid(body: dict[str, Any]) -> dict[str, Any]:
    body["metadata"].pop("uid", None)
    return body


def test_unreadable_bound_pod_keeps_its_node_out_until_readable(
    emulator: Emulator, view: ClusterView, rejected: list[str]
) -> None:
    uid = emulator.store.load(PODS, pod("web", node_name="n1"))["metadata"]["uid"]
    assert eventually(lambda: has_pod(view, "default/web"))
    broken = pod("web", node_name="n1", cpu="5x", uid=uid)
    emulator.store.load(PODS, broken)

    def unreadable() -> list[str]:
        with view.read() as snapshot:
            return snapshot.unreadable_pods("n1")

    assert eventually(lambda: unreadable() == [uid])
    assert not has_pod(view, "default/web")
    emulator.store.load(PODS, pod("web", node_name="n1", uid=uid))
    assert eventually(lambda: has_pod(view, "default/web") and unreadable() == [])
    assert rejected == ["Pod"]


def test_storage_and_namespace_kinds_are_listed_and_watched(
    emulator: Emulator, view: ClusterView
) -> None:
    for plural in (
        "namespaces",
        "persistentvolumeclaims",
        "persistentvolumes",
        "storageclasses",
        "csinodes",
        "volumeattachments",
    ):
        assert len(emulator.requests.matching("list", plural)) == 1, plural
        assert len(emulator.requests.matching("watch", plural)) == 1, plural
    emulator.store.load(NAMESPACES, {"metadata": {"name": "team", "labels": {"tier": "batch"}}})

    def team_labels() -> Any:
        with view.read() as snapshot:
            return snapshot.namespace_labels("team")

    assert eventually(lambda: team_labels() == {"tier": "batch"})
    emulator.store.delete(NAMESPACES, "", "team")
    assert eventually(lambda: team_labels() is None)


def test_sync_progress_per_kind(view: ClusterView) -> None:
    progress = view.sync_progress()
    assert set(progress) == {kind.name for kind in KINDS}
    assert progress["Pod"]["listed"] == 1
    assert progress["Node"]["listed"] == 1
    assert all(entry["synced"] for entry in progress.values())
    assert all(entry["seconds"] >= 0 for entry in progress.values())


def test_sync_progress_names_the_error_of_a_kind_not_synced(
    emulator: Emulator, kube: KubeClient
) -> None:
    emulator.faults.deny("list", "csinodes")
    view = ClusterView(kube, watch_timeout=30, backoff=lambda: Backoff(initial=0.02, maximum=0.2))
    view.start()
    try:
        assert eventually(lambda: bool(view.sync_progress()["CSINode"]["error"]))
        progress = view.sync_progress()
        assert not progress["CSINode"]["synced"]
        assert "forbidden" in progress["CSINode"]["error"].lower()
        assert not view.ready.is_set()
    finally:
        view.stop()


def test_storage_objects_reach_the_snapshot_and_leave_it(
    emulator: Emulator, view: ClusterView
) -> None:
    emulator.store.load(
        PVCS,
        {
            "metadata": {"name": "data", "namespace": "default"},
            "spec": {"accessModes": ["ReadWriteOncePod"], "storageClassName": "fast"},
        },
    )
    emulator.store.load(
        STORAGE_CLASSES,
        {"metadata": {"name": "fast"}, "provisioner": "csi.example.com"},
    )

    def held() -> tuple[bool, bool]:
        with view.read() as snapshot:
            return "default/data" in snapshot.claims, "fast" in snapshot.storage_classes

    assert eventually(lambda: held() == (True, True))
    emulator.store.delete(PVCS, "default", "data")
    emulator.store.delete(STORAGE_CLASSES, "", "fast")
    assert eventually(lambda: held() == (False, False))

"""The reflector (list in pages, watch, bookmarks, 410 and the relist) against a real
kube-apiserver.

The control plane serves PersistentVolumeClaims straight from etcd (their watch cache is
off): a resourceVersion older than etcd's compaction is then a 410 at once, as on a server
whose watch cache has moved on. Pods are served from the watch cache, which sends bookmarks.

Scenarios:
- a list is read in pages of `page_size` objects (limit/continue), every pod once;
- after the list, the watch hands on each pod created, changed and deleted, in order;
- a bookmark moves the resourceVersion to resume from past changes the watch did not see
  (pods of another namespace, for a reflector of one namespace's pods);
- a watch resumed from a resourceVersion compacted away gets 410 (an ERROR event on a real
  server): the reflector relists, sees what was created meanwhile, and forgets what went;
- a list whose continue token was compacted away mid-list (410 Expired) is started again,
  and the view ends complete.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from preemptctl.kube.client import KubeClient
from preemptctl.kube.reflector import POD, PVC, Backoff, Kind, Obj, Reflector, Sink
from tests.support.control_plane import ControlPlane, create_pod, pod_manifest, wait_for
from tests.support.http_api import MERGE_PATCH, HttpApi

CONTROL_PLANE = {"scheduler": False, "watch_cache_off": ("persistentvolumeclaims",)}
BOUND = 30.0  # seconds any wait here may take at most


class RecordingSink(Sink):
    """What a reflector hands on, kept in order: the list's pages, the watch's events, the
    objects known (by key) as a view would know them. `on_page` runs after each page."""

    def __init__(self, on_page: Callable[[int], None] = lambda page: None) -> None:
        self.pages: list[list[str]] = []
        self.events: list[tuple[str, str]] = []
        self.known: dict[str, Obj] = {}
        self.rejected: list[str] = []
        self.on_page = on_page
        self._lock = threading.Lock()

    def replace_page(self, kind: Kind, objects: list[Obj]) -> None:
        with self._lock:
            self.pages.append([o["metadata"]["name"] for o in objects])
            for obj in objects:
                self.known[kind.key(obj)] = obj
        self.on_page(len(self.pages))

    def finish_relist(self, kind: Kind, seen: set[str]) -> None:
        with self._lock:
            for key in [k for k in self.known if k not in seen]:
                del self.known[key]

    def apply_event(self, kind: Kind, event_type: str, obj: Obj) -> None:
        with self._lock:
            self.events.append((event_type, obj["metadata"]["name"]))
            if event_type == "DELETED":
                self.known.pop(kind.key(obj), None)
            else:
                self.known[kind.key(obj)] = obj

    def known_version(self, kind: Kind, key: str) -> str | None:
        with self._lock:
            obj = self.known.get(key)
        return None if obj is None else str(obj["metadata"].get("resourceVersion"))

    def reject(self, kind: Kind, obj: Any, error: Exception) -> None:
        self.rejected.append(f"{obj}: {error}")

    def names(self) -> set[str]:
        with self._lock:
            return {obj["metadata"]["name"] for obj in self.known.values()}


@contextmanager
def reflecting(reflector: Reflector) -> Iterator[Reflector]:
    thread = threading.Thread(target=reflector.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: reflector.stats.synced, BOUND, f"the {reflector.kind.name} list")
        yield reflector
    finally:
        reflector.stop()
        thread.join(10)


def quick_backoff() -> Backoff:
    return Backoff(initial=0.05, maximum=0.5)


@pytest.fixture(scope="module")
def admin(control_plane: ControlPlane) -> HttpApi:
    return control_plane.api("admin")


def fresh_namespace(control_plane: ControlPlane, prefix: str) -> str:
    return control_plane.namespace(f"{prefix}-{uuid.uuid4().hex[:6]}")


def pvc(admin: HttpApi, namespace: str, name: str) -> dict[str, Any]:
    created: dict[str, Any] = admin.create(
        f"/api/v1/namespaces/{namespace}/persistentvolumeclaims",
        {
            "metadata": {"name": name},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    return created


def remove_pvc(admin: HttpApi, namespace: str, name: str) -> None:
    """Delete a claim for good: no controller-manager removes its protection finalizer."""
    path = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}"
    admin.patch(path, {"metadata": {"finalizers": None}}, MERGE_PATCH).ok()
    admin.delete(path).ok()


def test_a_list_is_read_in_pages(
    kube: KubeClient, admin: HttpApi, control_plane: ControlPlane
) -> None:
    namespace = fresh_namespace(control_plane, "paged")
    for index in range(7):
        create_pod(admin, namespace, pod_manifest(f"pod-{index}"))
    total = len(admin.get("/api/v1/pods").ok()["items"])
    sink = RecordingSink()
    with reflecting(Reflector(kube, POD, sink, page_size=2, backoff=quick_backoff())) as reflector:
        assert [len(page) for page in sink.pages] == [2] * (total // 2) + [1] * (total % 2)
        assert {f"pod-{index}" for index in range(7)} <= sink.names()
        assert (reflector.stats.listed, reflector.stats.lists) == (total, 1)


def test_the_watch_hands_on_each_change_in_order(
    kube: KubeClient, admin: HttpApi, control_plane: ControlPlane
) -> None:
    namespace = fresh_namespace(control_plane, "watched")
    sink = RecordingSink()
    with reflecting(Reflector(kube, POD, sink, backoff=quick_backoff())):
        create_pod(admin, namespace, pod_manifest("web", node="node-a", grace_period=30))
        path = f"/api/v1/namespaces/{namespace}/pods/web"
        admin.patch(path, {"metadata": {"labels": {"tier": "front"}}}, MERGE_PATCH).ok()
        admin.delete(path, {"gracePeriodSeconds": 30}).ok()  # bound: marked, not gone
        admin.delete(path, {"gracePeriodSeconds": 0}).ok()  # the kubelet's part
        seen = wait_for(
            lambda: (
                [e for e in sink.events if e[1] == "web"]
                if ("DELETED", "web") in sink.events
                else None
            ),
            BOUND,
            "the pod's deletion on the watch",
        )
    # Labelled; marked for deletion; its grace period cut to 0 (the last MODIFIED); gone.
    assert seen == [("ADDED", "web")] + [("MODIFIED", "web")] * 3 + [("DELETED", "web")]


def test_a_bookmark_moves_the_resume_point_past_changes_not_seen(
    kube: KubeClient, admin: HttpApi, control_plane: ControlPlane
) -> None:
    """A reflector of one namespace's pods sees nothing of another's; the watch cache's
    bookmark (sent before the watch's timeout, once the cache has moved past the last event
    sent) carries the later resourceVersion."""
    quiet = fresh_namespace(control_plane, "quiet")
    busy = fresh_namespace(control_plane, "busy")
    one_namespace = Kind("Pod", f"/api/v1/namespaces/{quiet}/pods", "pods")
    sink = RecordingSink()
    reflector = Reflector(kube, one_namespace, sink, watch_timeout=4, backoff=quick_backoff())
    with reflecting(reflector):
        listed_at = int(reflector.resource_version or 0)
        unseen = create_pod(admin, busy, pod_manifest("elsewhere"))
        unseen_at = int(unseen["metadata"]["resourceVersion"])
        wait_for(lambda: reflector.stats.bookmarks > 0, BOUND, "a bookmark")
        assert int(reflector.resource_version or 0) >= unseen_at > listed_at
        assert sink.events == []


def test_a_watch_from_a_compacted_version_relists(
    kube: KubeClient, admin: HttpApi, control_plane: ControlPlane
) -> None:
    """The watch ends every second and resumes from the last claim it saw (etcd sends no
    bookmarks); changes to another kind move etcd on, and a compaction takes everything up
    to them: the next watch is refused with 410, and the reflector relists."""
    namespace = fresh_namespace(control_plane, "claims")
    pvc(admin, namespace, "kept")
    sink = RecordingSink()
    reflector = Reflector(kube, PVC, sink, watch_timeout=1, backoff=quick_backoff())
    with reflecting(reflector):
        pvc(admin, namespace, "added")
        wait_for(lambda: "added" in sink.names(), BOUND, "the watch to see the new claim")
        # A watch from version V starts at V + 1: etcd must be compacted past that.
        create_pod(admin, namespace, pod_manifest("moves-etcd-on"))
        create_pod(admin, namespace, pod_manifest("moves-etcd-further"))
        control_plane.compact_etcd()
        wait_for(lambda: reflector.stats.relists_after_gone > 0, BOUND, "a relist after 410")
        wait_for(lambda: reflector.stats.lists >= 2, BOUND, "the relist to end")
        assert {"kept", "added"} <= sink.names()
        assert sink.rejected == []


def test_a_list_whose_continue_token_expired_is_started_again(
    kube: KubeClient, admin: HttpApi, control_plane: ControlPlane
) -> None:
    """Claims are listed one per page; after the first page etcd is compacted, so the next
    page's continue token is too old: the list starts over, and ends complete."""
    namespace = fresh_namespace(control_plane, "paged-claims")
    for index in range(3):
        pvc(admin, namespace, f"claim-{index}")

    def compact_after_the_first_page(page: int) -> None:
        if page == 1:
            create_pod(admin, namespace, pod_manifest(f"moves-etcd-on-{page}"))
            control_plane.compact_etcd()

    sink = RecordingSink(on_page=compact_after_the_first_page)
    reflector = Reflector(kube, PVC, sink, page_size=1, backoff=quick_backoff())
    with reflecting(reflector):
        assert reflector.stats.relists_after_gone == 1
        assert {f"claim-{index}" for index in range(3)} <= sink.names()

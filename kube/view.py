"""The cluster view: every kind the planner reads (Nodes, Pods, PodDisruptionBudgets,
Namespaces, PersistentVolumeClaims, PersistentVolumes, StorageClasses, CSINodes,
VolumeAttachments and, where the cluster serves them, PodGroups and CompositePodGroups) kept
current by
list+watch, in the planner's model (`preemption.snapshot.ClusterSnapshot`, fed through
`apply(kind, obj)` and `remove(kind, key)`).

Guarantees:

- Ready once each kind has been listed completely (`wait_ready`); before that the snapshot is
  partial and selection must not use it.
- Atomic updates: one lock guards the snapshot. A writer applies one whole watch event, or one
  whole list page, under it; a reader holds it for as long as it reads
  (`with view.read() as snapshot:`), so a planner run sees no change mid-decision and never a
  half-applied one. Readers should therefore be brief: the watches wait for them.
- Eventually equal to the API server: missed history (410 Gone) triggers a relist that applies
  what changed and removes what vanished; a dropped watch resumes from the last
  resourceVersion seen, with exponential backoff while the server is unreachable.
- Objects the planner cannot read (a malformed quantity, a missing uid, a field of the wrong
  type) are left out, logged with their key, counted in `rejected` and reported to
  `on_rejected(kind)`, rather than stopping the view. A pod left out is not taken to have
  freed its node: the snapshot's `reject_pod` keeps that node from being a candidate until
  the pod is readable again or deleted.
- Sync progress per kind (objects listed, seconds) is in `sync_progress()`.
- PodGroups (kube-scheduler's workload API: `scheduling.k8s.io/v1beta1` in Kubernetes 1.37,
  `v1alpha2` in 1.36) and CompositePodGroups (`v1alpha3`, their own gate) are discovered when
  the view starts (`kube.discovery`), each at the newest version the planner reads, named in
  `sync_progress()` and one log line. A cluster that serves neither such version is watched
  exactly as before, the kind counted as synced and `absent` in `sync_progress()` (and the
  `preemptctl_view_kind_absent` metric), said in one log line that names an older alpha
  shape it serves instead (1.35's `v1alpha1`), never retried.
- Pods keep the annotations and labels the settings read (`kept_annotations`: a label-named
  group's size; `kept_labels`: the label naming it), set before the first list.
- Once synced, the snapshot is warmed (`ClusterSnapshot.warm`: what decisions would compute
  on first use is computed then and kept current), and the first time, the process's heap
  as it stands is frozen (`gc.freeze`) so the cyclic collector's full passes skip the view.
  Until then, each page of the initial list is frozen once applied, for the same reason.

One thread per kind: the official client is synchronous, and per-kind threads keep a slow
pod stream from delaying node updates. `start(spawn)` lets a supervisor run them.
"""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from preemptctl.kube.client import KubeClient
from preemptctl.kube.reflector import (
    COMPOSITE_POD_GROUP,
    CSI_NODE,
    NAMESPACE,
    NODE,
    PDB,
    POD,
    POD_GROUP,
    PV,
    PVC,
    STORAGE_CLASS,
    VOLUME_ATTACHMENT,
    Backoff,
    Kind,
    Reflector,
    ReflectorStats,
    Sink,
    describe,
)
from preemptctl.preemption.objects import Pod
from preemptctl.preemption.snapshot import ClusterSnapshot

log = logging.getLogger(__name__)

Obj = dict[str, Any]
PodListener = Callable[[str, str, Pod | None], None]
"""`listener(event_type, uid, pod)`: a Pod watch event, applied; `pod` as the view decoded
it for its snapshot (None once deleted, or left out as unreadable)."""
# How the view runs a reflector: `spawn(name, target)` runs `target` in a thread of its own.
ThreadSpawner = Callable[[str, Callable[[], None]], object]
KINDS = (
    NODE,
    POD,
    PDB,
    NAMESPACE,
    PVC,
    PV,
    STORAGE_CLASS,
    CSI_NODE,
    VOLUME_ATTACHMENT,
    POD_GROUP,
    COMPOSITE_POD_GROUP,
)


YOUNG_COLLECTION_THRESHOLD = 10_000
"""Allocations between two young collections of the cyclic collector once the view is frozen
(CPython's default is 700)."""


def settle_the_heap() -> None:
    """Freeze the heap as it stands, the view in it, after one full collection, and space
    the young collections out.

    The view is most of the process's heap and lives as long as it: frozen (`gc.freeze`),
    the collector's full passes skip it. But a frozen heap leaves the collector's long-lived
    count near zero, so every third-generation trigger becomes a full pass over whatever is
    not frozen; at the default 700 allocations per young collection a decision at 5,000
    nodes (tens of thousands of short-lived objects) paid 2.6 ms of its ~23 ms CPU to the
    collector. Ten thousand cuts that to a fraction (benchmarks/decision_path.py prints the
    share) and holds at most a few MB of unreachable cycles a little longer."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    young, middle, old = gc.get_threshold()
    gc.set_threshold(max(YOUNG_COLLECTION_THRESHOLD, young), middle, old)


@dataclass
class ViewStats:
    applied: int = 0
    rejected: int = 0


class ClusterView(Sink):
    def __init__(
        self,
        kube: KubeClient,
        *,
        page_size: int = 500,
        watch_timeout: int = 300,
        backoff: Callable[[], Backoff] = Backoff,
        kinds: tuple[Kind, ...] = KINDS,
        on_rejected: Callable[[str], None] = lambda kind: None,
        kept_annotations: Iterable[str] = (),
        kept_labels: Iterable[str] = (),
    ) -> None:
        self._snapshot = ClusterSnapshot()
        self._snapshot.kept_annotations = frozenset(kept_annotations)
        self._snapshot.kept_labels = frozenset(kept_labels)
        self._lock = threading.Lock()
        self._kinds = kinds
        self._versions: dict[str, dict[str, str]] = {kind.name: {} for kind in kinds}
        self._synced: set[str] = set()
        self._listeners: list[PodListener] = []
        self.ready = threading.Event()
        self.stats = ViewStats()
        self._on_rejected = on_rejected
        self.reflectors = {
            kind.name: Reflector(
                kube,
                kind,
                self,
                page_size=page_size,
                watch_timeout=watch_timeout,
                backoff=backoff(),
                on_synced=self._on_synced,
            )
            for kind in kinds
        }
        self._threads: list[threading.Thread] = []

    # -- lifecycle --------------------------------------------------------------------------

    def start(self, spawn: ThreadSpawner | None = None) -> None:
        """Run one reflector per kind: in threads of the view's own, or each through `spawn`
        (a supervisor that restarts a reflector whose thread dies)."""
        for name, reflector in self.reflectors.items():
            if spawn is not None:
                spawn(f"view-{name}", reflector.run)
                continue
            thread = threading.Thread(target=reflector.run, name=f"view-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 5.0) -> None:
        for reflector in self.reflectors.values():
            reflector.stop()
        for thread in self._threads:
            thread.join(timeout)
        self._threads.clear()

    def wait_ready(self, timeout: float | None = None) -> bool:
        return self.ready.wait(timeout)

    def _on_synced(self, kind: Kind) -> None:
        with self._lock:
            self._synced.add(kind.name)
            if len(self._synced) < len(self._kinds):
                return
            # Build the label index, each node's pods by importance and their budget
            # matches now, not under the decision lock of the first decision to need
            # them (about 1 s at 150,000 pods); the snapshot keeps them current after.
            self._snapshot.warm()
            first = not self.ready.is_set()
            self.ready.set()
        if first:
            # The view is most of the process's heap and lives as long as it: once it is
            # complete, the cyclic collector's full passes skip it (gc.freeze), or one would
            # land every so often in some decision and cost it a few hundred milliseconds
            # at 150,000 pods. Objects the view drops later are still freed (by their
            # reference counts); what is created later is collected as usual. What the
            # initial list froze page by page is unfrozen first, so that this one full
            # collection sees all of it.
            settle_the_heap()

    # -- reading ----------------------------------------------------------------------------

    @contextmanager
    def read(self) -> Iterator[ClusterSnapshot]:
        """The snapshot, held still for the duration of the `with` block."""
        with self._lock:
            yield self._snapshot

    def subscribe(self, listener: PodListener) -> None:
        """Call `listener(event_type, uid, pod)` after each applied Pod watch event, with the
        pod as the view decoded it (outside the lock; from the watch thread, so keep it
        quick). For the trigger loop, which so never decodes a pod again."""
        self._listeners.append(listener)

    def reflector_stats(self) -> dict[str, ReflectorStats]:
        return {name: reflector.stats for name, reflector in self.reflectors.items()}

    def sync_progress(self) -> dict[str, dict[str, Any]]:
        """Per kind: objects listed, seconds the complete list took, whether it synced, and
        (until it has) the last error, e.g. a list RBAC forbids; for a kind not every cluster
        serves, the `version` watched, or `absent` when the cluster serves it at no version
        the planner reads (PodGroups without kube-scheduler's workload API)."""
        return {
            name: {
                "listed": r.stats.listed,
                "seconds": round(r.stats.list_seconds, 3),
                "synced": r.stats.synced,
                "error": "" if r.stats.synced else r.stats.last_error,
                **({"absent": True} if r.stats.absent else {}),
                **({"version": r.stats.version} if r.stats.version else {}),
            }
            for name, r in self.reflectors.items()
        }

    # -- writing (Sink) ---------------------------------------------------------------------

    def known_version(self, kind: Kind, key: str) -> str | None:
        return self._versions[kind.name].get(key)

    def replace_page(self, kind: Kind, objects: list[Obj]) -> None:
        with self._lock:
            for obj in objects:
                self._upsert(kind, obj)
        if not self.ready.is_set():
            # Until the first sync the view only grows, and the cyclic collector's full
            # passes would rescan all of it between pages: at 60,000 pods that made the
            # initial list about 1.5 times as costly. Freezing what exists after each page
            # leaves the collector only what is new; the first sync unfreezes it all for
            # one full collection (see `_on_synced`), so no garbage frozen meanwhile stays.
            gc.freeze()

    def finish_relist(self, kind: Kind, seen: set[str]) -> None:
        versions = self._versions[kind.name]
        with self._lock:
            for key in [key for key in versions if key not in seen]:
                self._remove(kind, key)

    def apply_event(self, kind: Kind, event_type: str, obj: Obj) -> None:
        key = kind.key(obj)
        with self._lock:
            if event_type == "DELETED":
                self._remove(kind, key)
            else:
                self._upsert(kind, obj)
            # The pod as the snapshot now keeps it: decoded once, here (the view replaces a
            # changed pod, never mutates it, so it may be handed on outside the lock).
            pod = self._snapshot.pods.get(key) if kind is POD else None
        if kind is not POD:
            return
        for listener in self._listeners:
            try:
                listener(event_type, key, pod)
            except Exception:
                log.exception("cluster view listener failed on %s %s", event_type, kind.name)

    def reject(self, kind: Kind, obj: Any, error: Exception) -> None:
        with self._lock:
            self._reject(kind, obj, error)

    def _upsert(self, kind: Kind, obj: Obj) -> None:
        key = kind.key(obj)
        try:
            self._snapshot.apply(kind.name, obj)
        except Exception as error:  # any object the planner cannot read: leave it out
            self._reject(kind, obj, error)
            return
        self._versions[kind.name][key] = str(obj["metadata"].get("resourceVersion", ""))
        self.stats.applied += 1

    def _reject(self, kind: Kind, obj: Any, error: Exception) -> None:
        """Under the lock: leave `obj` out; a pod's node stops being a candidate."""
        self.stats.rejected += 1
        log.warning("cluster view left out %s %s: %s", kind.name, describe(obj), str(error)[:300])
        key = kind.key_or_none(obj)
        if kind is POD:
            spec = obj.get("spec") if isinstance(obj, dict) else None
            node = spec.get("nodeName") if isinstance(spec, dict) else None
            uid = key or describe(obj)
            if key is not None:
                self._versions[kind.name].pop(key, None)
            self._snapshot.reject_pod(uid, node if isinstance(node, str) and node else None)
        elif key is not None:
            self._remove(kind, key)
        try:
            self._on_rejected(kind.name)
        except Exception:
            log.exception("cluster view: on_rejected failed")

    def _remove(self, kind: Kind, key: str) -> None:
        self._versions[kind.name].pop(key, None)
        self._snapshot.remove(kind.name, key)

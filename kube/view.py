"""The cluster view: Nodes, Pods and PodDisruptionBudgets kept current by list+watch, in the
planner's model (`preemption.snapshot.ClusterSnapshot`).

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
- Objects the planner cannot read (a malformed quantity) are left out and counted in
  `rejected`, rather than stopping the view.

Three threads, one per kind: the official client is synchronous, and per-kind threads keep a
slow pod stream from delaying node updates.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from preemptctl.kube.client import KubeClient
from preemptctl.kube.reflector import NODE, PDB, POD, Backoff, Kind, Reflector, ReflectorStats, Sink
from preemptctl.preemption.errors import PlannerInputError
from preemptctl.preemption.snapshot import ClusterSnapshot

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Listener = Callable[[str, str, Obj], None]
KINDS = (NODE, POD, PDB)


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
    ) -> None:
        self._snapshot = ClusterSnapshot()
        self._lock = threading.Lock()
        self._versions: dict[str, dict[str, str]] = {kind.name: {} for kind in KINDS}
        self._synced: set[str] = set()
        self._listeners: list[Listener] = []
        self.ready = threading.Event()
        self.stats = ViewStats()
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
            for kind in KINDS
        }
        self._threads: list[threading.Thread] = []

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        for name, reflector in self.reflectors.items():
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
            if len(self._synced) == len(KINDS):
                self.ready.set()

    # -- reading ----------------------------------------------------------------------------

    @contextmanager
    def read(self) -> Iterator[ClusterSnapshot]:
        """The snapshot, held still for the duration of the `with` block."""
        with self._lock:
            yield self._snapshot

    def subscribe(self, listener: Listener) -> None:
        """Call `listener(event_type, kind, obj)` after each applied watch event (outside the
        lock; from the watch thread, so keep it quick). For the trigger loop."""
        self._listeners.append(listener)

    def reflector_stats(self) -> dict[str, ReflectorStats]:
        return {name: reflector.stats for name, reflector in self.reflectors.items()}

    # -- writing (Sink) ---------------------------------------------------------------------

    def known_version(self, kind: Kind, key: str) -> str | None:
        return self._versions[kind.name].get(key)

    def replace_page(self, kind: Kind, objects: list[Obj]) -> None:
        with self._lock:
            for obj in objects:
                self._upsert(kind, obj)

    def finish_relist(self, kind: Kind, seen: set[str]) -> None:
        versions = self._versions[kind.name]
        with self._lock:
            for key in [key for key in versions if key not in seen]:
                self._remove(kind, key)

    def apply_event(self, kind: Kind, event_type: str, obj: Obj) -> None:
        with self._lock:
            if event_type == "DELETED":
                self._remove(kind, kind.key(obj))
            else:
                self._upsert(kind, obj)
        for listener in self._listeners:
            try:
                listener(event_type, kind.name, obj)
            except Exception:
                log.exception("cluster view listener failed on %s %s", event_type, kind.name)

    def _upsert(self, kind: Kind, obj: Obj) -> None:
        key = kind.key(obj)
        try:
            self._snapshot.apply(kind.name, obj)
        except (PlannerInputError, ValueError, KeyError, TypeError) as error:
            self.stats.rejected += 1
            log.warning("cluster view left out %s %s: %s", kind.name, key, error)
            self._remove(kind, key)
            return
        self._versions[kind.name][key] = str(obj["metadata"].get("resourceVersion", ""))
        self.stats.applied += 1

    def _remove(self, kind: Kind, key: str) -> None:
        self._versions[kind.name].pop(key, None)
        if kind is POD:
            self._snapshot.remove_pod(key)
        elif kind is NODE:
            self._snapshot.remove_node(key)
        else:
            self._snapshot.remove_pdb(key)

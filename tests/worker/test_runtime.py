"""How the running controller wires shadow mode's recorder of kube-scheduler's preemptions.

Scenarios:
- the recorder believes the configured scheduler names (`scheduler_names`), not only
  default-scheduler;
- the view's pod watch feeds the recorder's witness: a pod the scheduler marked as its
  victim (DisruptionTarget, PreemptionByScheduler) is remembered with its node, so an Event
  read after the victim is gone is confirmed; an unmarked pod, and a pod the view could
  not read, are not remembered;
- a victim already marked in the list the view synced from (which reaches no listener) is
  remembered too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from preemptctl.kube.upstream_events import VictimSeen
from preemptctl.preemption.decode import decode_pod
from preemptctl.preemption.objects import Pod
from preemptctl.preemption.snapshot import ClusterSnapshot
from preemptctl.worker.runtime import upstream_recorder


class FakeView:
    """The view's subscribe() and its snapshot as the view keeps it (what `ClusterView.read`
    reads): the test hands the listeners each pod, decoded."""

    def __init__(self, *listed: Pod) -> None:
        self.listeners: list[Callable[[str, str, Pod | None], None]] = []
        self._lock = threading.Lock()
        self._snapshot = ClusterSnapshot()
        for pod in listed:
            self._snapshot.pods[pod.uid] = pod

    def subscribe(self, listener: Callable[[str, str, Pod | None], None]) -> None:
        self.listeners.append(listener)

    def event(self, event_type: str, uid: str, pod: Pod | None) -> None:
        for listener in self.listeners:
            listener(event_type, uid, pod)


def victim(name: str, *, marked: bool, reason: str = "PreemptionByScheduler") -> Pod:
    conditions = (
        [{"type": "DisruptionTarget", "status": "True", "reason": reason}] if marked else []
    )
    obj: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}"},
        "spec": {"nodeName": "node-1", "containers": [{"name": "c"}]},
        "status": {"phase": "Running", "conditions": conditions},
    }
    return decode_pod(obj)


def test_the_recorder_believes_the_configured_scheduler_names() -> None:
    recorder = upstream_recorder(
        None,  # type: ignore[arg-type]
        FakeView(),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        reporters=("default-scheduler", "gpu-scheduler"),
    )
    assert recorder.reporters == ("default-scheduler", "gpu-scheduler")


def test_the_views_pod_watch_feeds_the_recorders_witness() -> None:
    view = FakeView()
    recorder = upstream_recorder(None, view, None)  # type: ignore[arg-type]
    assert recorder.witness is not None
    view.event("MODIFIED", "uid-low-a", victim("low-a", marked=True))
    view.event("DELETED", "uid-low-b", victim("low-b", marked=True))
    view.event("MODIFIED", "uid-low-c", victim("low-c", marked=False))
    view.event("MODIFIED", "uid-low-d", victim("low-d", marked=True, reason="Evicted"))
    view.event("MODIFIED", "uid-junk", None)
    seen = {uid: recorder.witness.get(uid) for uid in ("uid-low-a", "uid-low-b")}
    assert seen == {
        "uid-low-a": VictimSeen("team-a", "low-a", "uid-low-a", "node-1", True),
        "uid-low-b": VictimSeen("team-a", "low-b", "uid-low-b", "node-1", True),
    }
    assert recorder.witness.get("uid-low-c") is None
    assert recorder.witness.get("uid-low-d") is None
    assert recorder.witness.get("uid-junk") is None


def test_a_victim_marked_before_the_view_synced_is_witnessed() -> None:
    view = FakeView(victim("low-a", marked=True), victim("low-c", marked=False))
    recorder = upstream_recorder(None, view, None)  # type: ignore[arg-type]
    assert recorder.witness is not None
    assert recorder.witness.get("uid-low-a") == VictimSeen(
        "team-a", "low-a", "uid-low-a", "node-1", True
    )
    assert recorder.witness.get("uid-low-c") is None

"""The watch-fed cluster view.

Scenarios:
- the view is ready once Nodes, Pods and PDBs are all listed, and holds them, warmed (the
  label index built, each bound pod's PDB matches known), and keeps them warm as pods change;
- while the initial list runs, each applied page is frozen out of the cyclic collector's
  passes, and the first sync still collects the cyclic garbage frozen meanwhile;
- the initial list is paginated with limit/continue, and the watch starts from its
  resourceVersion;
- after a randomized burst of creates, updates and deletes, the view equals the emulator;
- after a forced 410 (watches cut, changes made, history compacted) the view relists and
  equals the emulator again;
- a dropped watch resumes from the last resourceVersion, without a relist;
- failing lists are retried with backoff until the view is ready;
- bookmarks advance the resourceVersion a quiet kind resumes from;
- while a reader holds the snapshot, no update is applied to it;
- a pod the planner cannot read is left out and counted, and the rest of the view is intact;
- listeners hear each applied event;
- a listener is handed the pod the snapshot keeps (decoded once, by the view), None for a
  pod left out as unreadable and for a deleted one; other kinds are not handed on;
- stop ends the watch threads promptly.
"""

from __future__ import annotations

import gc
import random
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from preemptctl.emulator import Emulator
from preemptctl.emulator.resources import NODES, PDBS, PODS
from preemptctl.kube.client import KubeClient
from preemptctl.kube.reflector import NODE, POD, Backoff
from preemptctl.kube.view import KINDS, ClusterView
from tests.support.emulator import as_list, node, pdb, pod

# The kinds the view watches on the emulator, which serves no CompositePodGroups by default
# (their gate is alpha): that kind is absent there, never watched.
WATCHED = len(KINDS) - 1

State = dict[str, dict[str, str]]


def fast_backoff() -> Backoff:
    return Backoff(initial=0.02, maximum=0.2)


@pytest.fixture
def make_view(kube: KubeClient) -> Iterator[Callable[..., ClusterView]]:
    views: list[ClusterView] = []

    def make(**options: Any) -> ClusterView:
        options.setdefault("backoff", fast_backoff)
        options.setdefault("watch_timeout", 30)
        view = ClusterView(kube, **options)
        views.append(view)
        view.start()
        return view

    yield make
    for view in views:
        view.stop()


def emulator_state(emulator: Emulator) -> State:
    def versions(
        objects: list[dict[str, Any]], key: Callable[[dict[str, Any]], str]
    ) -> dict[str, str]:
        return {key(obj): obj["metadata"]["resourceVersion"] for obj in objects}

    return {
        "pods": versions(emulator.store.objects(PODS), lambda o: o["metadata"]["uid"]),
        "nodes": versions(emulator.store.objects(NODES), lambda o: o["metadata"]["name"]),
        "pdbs": versions(
            emulator.store.objects(PDBS),
            lambda o: f"{o['metadata']['namespace']}/{o['metadata']['name']}",
        ),
    }


def view_state(view: ClusterView) -> State:
    with view.read() as snapshot:
        return {
            "pods": {uid: p.resource_version for uid, p in snapshot.pods.items()},
            "nodes": {
                info.name: info.node.resource_version
                for info in snapshot.nodes()
                if info.node is not None
            },
            "pdbs": {key: budget.resource_version for key, budget in snapshot.pdbs.items()},
        }


def converged(view: ClusterView, emulator: Emulator, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if view_state(view) == emulator_state(emulator):
            return True
        time.sleep(0.02)
    return view_state(view) == emulator_state(emulator)


def seed_cluster(emulator: Emulator) -> None:
    emulator.load(
        as_list(
            node("n1"),
            node("n2"),
            pod("a", node_name="n1", labels={"app": "web"}),
            pod("b", node_name="n2"),
            pod("c", nominated_node="n1", priority=100),
            pdb("budget", match_labels={"app": "web"}, disruptions_allowed=1),
        )
    )


def random_burst(emulator: Emulator, rng: random.Random, operations: int) -> None:
    """Creates, updates and deletes of every kind, straight into the emulator's store."""
    store = emulator.store
    for step in range(operations):
        pods = store.objects(PODS)
        nodes = [n["metadata"]["name"] for n in store.objects(NODES)]
        choice = rng.random()
        if choice < 0.35 or not pods:
            bound = rng.choice(nodes) if nodes and rng.random() < 0.7 else None
            store.load(PODS, pod(f"p{step}", rng.choice(["default", "team"]), node_name=bound))
        elif choice < 0.65:
            target = rng.choice(pods)["metadata"]
            patch = {"status": {"phase": rng.choice(["Running", "Succeeded", "Pending"])}}
            store.patch(
                PODS,
                target["namespace"],
                target["name"],
                "application/merge-patch+json",
                patch,
                "status",
            )
        elif choice < 0.85:
            target = rng.choice(pods)["metadata"]
            store.delete(
                PODS, target["namespace"], target["name"], grace_period=rng.choice([0, None])
            )
        elif choice < 0.93:
            store.load(NODES, node(f"n-extra-{step}"))
        elif choice < 0.97 and len(nodes) > 1:
            store.delete(NODES, "", rng.choice(nodes))
        else:
            store.load(
                PDBS,
                pdb("budget", match_labels={"app": "web"}, disruptions_allowed=rng.randint(0, 3)),
            )


def test_ready_once_all_kinds_are_listed(
    emulator: Emulator, make_view: Callable[..., ClusterView]
) -> None:
    seed_cluster(emulator)
    view = make_view()
    assert view.wait_ready(5)
    with view.read() as snapshot:
        assert [info.name for info in snapshot.nodes()] == ["n1", "n2"]
        assert snapshot.pod_by_key("default/a") is not None
        assert snapshot.nominated_pods("n1")[0].name == "c"
        assert list(snapshot.pdbs) == ["default/budget"]


def test_ready_view_is_warmed_and_stays_warm(
    emulator: Emulator, make_view: Callable[..., ClusterView]
) -> None:
    seed_cluster(emulator)
    view = make_view()
    assert view.wait_ready(5)
    with view.read() as snapshot:
        assert snapshot.warmed and snapshot.bound.labels_ready
        web = snapshot.pod_by_key("default/a")
        assert web is not None and snapshot.matching_pdbs(web) == (0,)
    emulator.store.load(PODS, pod("d", node_name="n2", labels={"app": "web"}))
    assert converged(view, emulator)
    with view.read() as snapshot:
        assert ("default", "app", "web") in snapshot.bound.by_label
        assert len(snapshot.bound.by_label[("default", "app", "web")]) == 2


def test_initial_list_pages_are_frozen_and_the_first_sync_collects_their_garbage(
    kube: KubeClient,
) -> None:
    """Driven as the reflectors drive it (the Sink calls), without threads."""

    class Cycle:
        def __init__(self) -> None:
            self.me = self

    view = ClusterView(kube, kinds=(NODE, POD))
    garbage = Cycle()
    collected = weakref.ref(garbage)
    try:
        view.replace_page(NODE, [node("n1")])
        assert gc.get_freeze_count() > 0  # the page, and the cycle, are out of the passes
        del garbage
        view.replace_page(POD, [pod("a", node_name="n1")])
        view.finish_relist(NODE, {"n1"})
        view._on_synced(NODE)
        assert collected() is not None and not view.ready.is_set()
        view._on_synced(POD)
        assert view.ready.is_set()
        assert collected() is None
        assert gc.get_freeze_count() > 0  # the complete view stays out of the passes
        with view.read() as snapshot:
            assert snapshot.warmed and snapshot.pod_by_key("default/a") is not None
    finally:
        gc.unfreeze()


def test_initial_list_is_paginated_and_watch_starts_from_its_rv(
    emulator: Emulator, make_view: Callable[..., ClusterView]
) -> None:
    seed_cluster(emulator)
    revision = emulator.store.revision
    view = make_view(page_size=2)
    assert view.wait_ready(5)
    assert emulator.wait_for_watches(WATCHED)
    pod_lists = [r for r in emulator.requests.matching("list", "pods")]
    assert [r.query.get("limit") for r in pod_lists] == ["2", "2"]
    assert "continue" in pod_lists[1].query
    [watch] = emulator.requests.matching("watch", "pods")
    assert watch.query["resourceVersion"] == str(revision)
    assert watch.query["allowWatchBookmarks"] == "true"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_view_equals_emulator_after_random_burst(
    emulator: Emulator, make_view: Callable[..., ClusterView], seed: int
) -> None:
    seed_cluster(emulator)
    view = make_view()
    assert view.wait_ready(5)
    random_burst(emulator, random.Random(seed), 300)
    assert converged(view, emulator)


def test_view_relists_after_410_and_equals_emulator(
    emulator: Emulator, make_view: Callable[..., ClusterView]
) -> None:
    seed_cluster(emulator)
    view = make_view()
    assert view.wait_ready(5)
    assert emulator.wait_for_watches(WATCHED)
    emulator.faults.fail("watch", None, 503, times=None)  # keep the watches from coming back
    emulator.end_watches()
    random_burst(emulator, random.Random(7), 200)
    emulator.store.compact()
    emulator.faults.clear()
    assert converged(view, emulator)
    assert view.reflector_stats()["Pod"].relists_after_gone >= 1


def test_dropped_watch_resumes_without_relist(
    emulator: Emulator, make_view: Callable[..., ClusterView]
) -> None:
    seed_cluster(emulator)
    view = make_view()
    assert view.wait_ready(5)
    assert emulator.wait_for_watches(WATCHED)
    emulator.end_watches()
    emulator.store.load(PODS, pod("after-drop"))
    assert converged(view, emulator)
    stats = view.reflector_stats()["Pod"]
    assert (stats.lists, stats.relists_after_gone) == (1, 0)
    assert stats.reconnects >= 1


def test_failing_lists_are_retried_until_ready(
    emulator: Emulator, make_view: Callable[..., ClusterView]
) -> None:
    seed_cluster(emulator)
    emulator.faults.fail("list", "pods", 500, times=3)
    view = make_view()
    assert view.wait_ready(5)
    assert view.reflector_stats()["Pod"].errors == 3
    assert "API server error 500" in view.reflector_stats()["Pod"].last_error


def test_bookmarks_advance_a_quiet_kinds_resource_version(
    emulator: Emulator, make_view: Callable[..., ClusterView]
) -> None:
    seed_cluster(emulator)
    view = make_view()
    assert view.wait_ready(5)
    listed = view.reflectors["PodDisruptionBudget"].resource_version
    emulator.store.load(PODS, pod("busy"))
    deadline = time.monotonic() + 3
    while view.reflectors["PodDisruptionBudget"].resource_version == listed:
        assert time.monotonic() < deadline, "no bookmark advanced the PDB watch"
        time.sleep(0.02)
    assert view.reflector_stats()["PodDisruptionBudget"].bookmarks >= 1


def test_reader_sees_no_update_while_holding_the_snapshot(
    emulator: Emulator, make_view: Callable[..., ClusterView]
) -> None:
    seed_cluster(emulator)
    view = make_view()
    assert view.wait_ready(5)
    with view.read() as snapshot:
        emulator.store.load(PODS, pod("during-read"))
        time.sleep(0.3)
        assert snapshot.pod_by_key("default/during-read") is None
    assert converged(view, emulator)


def test_unreadable_pod_is_left_out_and_counted(
    emulator: Emulator, make_view: Callable[..., ClusterView]
) -> None:
    seed_cluster(emulator)
    emulator.load(pod("broken", node_name="n1", cpu="5x"))
    view = make_view()
    assert view.wait_ready(5)
    with view.read() as snapshot:
        assert snapshot.pod_by_key("default/broken") is None
        assert snapshot.pod_by_key("default/a") is not None
    assert view.stats.rejected == 1


def test_listeners_hear_applied_events(
    emulator: Emulator, make_view: Callable[..., ClusterView]
) -> None:
    heard: list[tuple[str, str, str]] = []
    view = make_view()
    view.subscribe(
        lambda kind_of_event, uid, decoded: heard.append(
            (kind_of_event, "Pod", decoded.name if decoded is not None else uid)
        )
    )
    assert view.wait_ready(5)
    emulator.store.load(PODS, pod("new"))
    deadline = time.monotonic() + 3
    while not heard and time.monotonic() < deadline:
        time.sleep(0.02)
    assert heard == [("ADDED", "Pod", "new")]


def test_listeners_get_the_snapshots_own_pod_decoded_once(
    emulator: Emulator, make_view: Callable[..., ClusterView]
) -> None:
    heard: list[tuple[str, str, Any]] = []
    kept: list[bool] = []  # each decoded pod handed on is the one the snapshot holds
    view = make_view()

    def listen(event_type: str, uid: str, decoded: Any) -> None:
        with view.read() as snapshot:
            kept.append(decoded is snapshot.pods.get(uid))
        heard.append((event_type, uid, decoded))

    view.subscribe(listen)
    assert view.wait_ready(5)
    readable = emulator.store.load(PODS, pod("new"))
    emulator.store.load(PODS, pod("broken", cpu="5x"))
    emulator.store.load(NODES, node("n9"))
    emulator.store.delete(PODS, "default", "new", grace_period=0)
    deadline = time.monotonic() + 3
    while len(heard) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    uid = readable["metadata"]["uid"]
    assert [(event_type, decoded is None) for event_type, _, decoded in heard] == [
        ("ADDED", False),
        ("ADDED", True),
        ("DELETED", True),
    ]
    added = heard[0][2]
    assert (heard[0][1], added.uid, added.name) == (uid, uid, "new")
    assert kept == [True, True, True]


def test_stop_ends_watch_threads_promptly(emulator: Emulator, kube: KubeClient) -> None:
    view = ClusterView(kube, watch_timeout=30)
    view.start()
    assert view.wait_ready(5)
    assert emulator.wait_for_watches(WATCHED)
    threads = [t for t in threading.enumerate() if t.name.startswith("view-")]
    started = time.monotonic()
    view.stop(timeout=3)
    assert time.monotonic() - started < 2
    assert len(threads) == len(KINDS)
    assert not any(thread.is_alive() for thread in threads)

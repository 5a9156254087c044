"""The cluster view and kube-scheduler's workload API (PodGroups, `scheduling.k8s.io`).

Scenarios:
- on a cluster that serves PodGroups the view lists and watches them: a group there before
  the view started, one created after, one changed and one deleted are all as the API
  server has them, and a member's priority follows its group's; the sync progress names
  the version watched (`v1beta1`, Kubernetes 1.37's);
- on a 1.36 cluster, which serves them at `v1alpha2` only (with a string `disruptionMode`),
  the view watches them there: one log line names the version, a `PodGroup` mode group is
  one victim unit, the members' priority follows;
- on a cluster without the API the view is ready as before: PodGroup counts as synced and
  absent in the sync progress and the `preemptctl_view_kind_absent` metric, nothing is
  listed or watched, no error is counted, one log line says so, and discovery is not asked
  again (no retry storm); on a 1.35 cluster (only the first alpha, `v1alpha1` Workloads) the
  line names that older shape, which the planner does not read;
- on a cluster serving CompositePodGroups (`v1alpha3`) the view watches them too: a
  member's priority follows its hierarchy's root;
- discovery that fails is retried with backoff until it answers; the view is not ready
  meanwhile;
- pods keep the annotations and labels the settings read (a label-named group's size and
  its label), set before the first list.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from preemptctl.emulator import Emulator
from preemptctl.emulator.resources import (
    COMPOSITE_POD_GROUPS,
    POD_GROUPS,
    POD_GROUPS_V1ALPHA2,
    PODS,
)
from preemptctl.kube.client import KubeClient, connect
from preemptctl.kube.reflector import Backoff
from preemptctl.kube.view import ClusterView
from preemptctl.preemption.snapshot import ClusterSnapshot
from preemptctl.preemption.victim_units import UnitIndex
from preemptctl.worker.metrics import ReflectorCollector
from tests.support.emulator import as_list, node, pod, running_emulator

KUEUE = "kueue.x-k8s.io/pod-group-name"
SIZE = "kueue.x-k8s.io/pod-group-total-count"


def pod_group(name: str, *, priority: int = 1000, min_count: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": min_count}},
            "disruptionMode": {"all": {}},
            "priority": priority,
        },
    }


def member(name: str, group: str, **options: Any) -> dict[str, Any]:
    made = pod(name, "ml", priority=5, **options)
    made["spec"]["schedulingGroup"] = {"podGroupName": group}
    return made


@pytest.fixture
def make_view() -> Iterator[Callable[..., tuple[Emulator, ClusterView]]]:
    started: list[tuple[Emulator, ClusterView, KubeClient, Any]] = []

    def make(emulator_options: dict[str, Any], **options: Any) -> tuple[Emulator, ClusterView]:
        context = running_emulator(bookmark_interval=0.1, **emulator_options)
        emulator = context.__enter__()
        # A loopback connect only waits when the emulator's accept is busy (a loaded CI
        # machine): five seconds, so that a slow accept is not counted as the view's error.
        kube = connect(emulator.kubeconfig_path, connect_timeout=5, read_timeout=0.5)
        options.setdefault("backoff", lambda: Backoff(initial=0.02, maximum=0.2))
        view = ClusterView(kube, watch_timeout=30, **options)
        started.append((emulator, view, kube, context))
        return emulator, view

    yield make
    for _, view, kube, context in started:
        view.stop()
        kube.api.close()
        context.__exit__(None, None, None)


def eventually(check: Callable[[ClusterSnapshot], bool], view: ClusterView) -> bool:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        with view.read() as snapshot:
            if check(snapshot):
                return True
        time.sleep(0.02)
    return False


def test_podgroups_are_listed_and_watched(
    make_view: Callable[..., tuple[Emulator, ClusterView]],
) -> None:
    emulator, view = make_view({})
    emulator.load(
        as_list(node("n1"), pod_group("train-a"), pod_group("train-b"), member("a-0", "train-a"))
    )
    view.start()
    assert view.wait_ready(5)
    with view.read() as snapshot:
        assert sorted(snapshot.pod_groups) == ["ml/train-a", "ml/train-b"]
        found = snapshot.pod_by_key("ml/a-0")
        assert found is not None and found.priority == 1000
    emulator.store.load(POD_GROUPS, pod_group("train-c", priority=10))
    emulator.store.load(POD_GROUPS, pod_group("train-a", priority=300))
    emulator.store.delete(POD_GROUPS, "ml", "train-b")
    assert eventually(
        lambda s: (
            sorted(s.pod_groups) == ["ml/train-a", "ml/train-c"]
            and s.pod_groups["ml/train-a"].priority == 300
        ),
        view,
    )
    with view.read() as snapshot:
        found = snapshot.pod_by_key("ml/a-0")
        assert found is not None and found.priority == 300
    progress = view.sync_progress()["PodGroup"]
    assert progress == {
        "listed": 2,
        "seconds": progress["seconds"],
        "synced": True,
        "error": "",
        "version": "scheduling.k8s.io/v1beta1",
    }


def v1alpha2_group(name: str, *, priority: int = 1000, mode: str = "PodGroup") -> dict[str, Any]:
    """A PodGroup as Kubernetes 1.36 serves it (`disruptionMode` a string)."""
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": 2}},
            "disruptionMode": mode,
            "priority": priority,
        },
    }


def test_a_1_36_cluster_serves_them_at_v1alpha2_and_the_view_reads_them_there(
    make_view: Callable[..., tuple[Emulator, ClusterView]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="preemptctl.kube.reflector")
    emulator, view = make_view({"pod_group_version": "v1alpha2"})
    emulator.load(
        as_list(
            node("n1"),
            node("n2"),
            v1alpha2_group("train-a"),
            member("a-0", "train-a", node_name="n1"),
            member("a-1", "train-a", node_name="n2"),
        )
    )
    view.start()
    assert view.wait_ready(5)
    emulator.store.load(POD_GROUPS_V1ALPHA2, v1alpha2_group("train-b", mode="Pod"))
    assert eventually(lambda s: sorted(s.pod_groups) == ["ml/train-a", "ml/train-b"], view)
    with view.read() as snapshot:
        a0 = snapshot.pod_by_key("ml/a-0")
        assert a0 is not None and a0.priority == 1000
        unit = UnitIndex(snapshot).unit_of(a0)
        assert (unit.describe(), sorted(p.name for p in unit.pods)) == (
            "podGroup ml/train-a",
            ["a-0", "a-1"],
        )
        assert snapshot.pod_groups["ml/train-b"].disruption_all is False
    assert view.sync_progress()["PodGroup"]["version"] == "scheduling.k8s.io/v1alpha2"
    assert [r.getMessage() for r in caplog.records if "watching podgroups" in r.getMessage()] == [
        "cluster view: watching podgroups at scheduling.k8s.io/v1alpha2"
    ]
    assert emulator.requests.matching(resource="podgroups")  # listed and watched there


def test_a_cluster_without_the_api_is_watched_as_before(
    make_view: Callable[..., tuple[Emulator, ClusterView]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="preemptctl.kube.reflector")
    emulator, view = make_view({"pod_groups": False})
    emulator.load(as_list(node("n1"), pod("web", node_name="n1")))
    view.start()
    assert view.wait_ready(5)
    assert view.sync_progress()["PodGroup"] == {
        "listed": 0,
        "seconds": 0.0,
        "synced": True,
        "error": "",
        "absent": True,
    }
    stats = view.reflector_stats()["PodGroup"]
    assert (stats.errors, stats.lists) == (0, 0)
    assert absent_metric(view) == {"PodGroup": 1.0, "CompositePodGroup": 1.0}
    time.sleep(0.5)  # a retry storm would show by now
    assert emulator.requests.matching(resource="podgroups") == []
    assert pod_group_lines(caplog) == [
        "cluster view: this cluster does not serve podgroups at a version preemptctl reads "
        "(scheduling.k8s.io/v1beta1, scheduling.k8s.io/v1alpha2); they are not watched"
    ]
    with view.read() as snapshot:
        assert snapshot.pod_by_key("default/web") is not None and snapshot.pod_groups == {}


def pod_group_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "serve podgroups" in r.getMessage()]


def absent_metric(view: ClusterView) -> dict[str, float]:
    """`preemptctl_view_kind_absent` as the worker exports it, per optional kind."""
    [family] = [
        f
        for f in ReflectorCollector(view.reflector_stats).collect()
        if f.name == "preemptctl_view_kind_absent"
    ]
    return {
        s.labels["kind"]: s.value
        for s in family.samples
        if s.labels["kind"] in ("PodGroup", "CompositePodGroup")
    }


def test_a_1_35_cluster_serves_an_older_alpha_the_view_names_and_does_not_read(
    make_view: Callable[..., tuple[Emulator, ClusterView]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="preemptctl.kube.reflector")
    emulator, view = make_view({"pod_group_version": "v1alpha1"})
    emulator.load(as_list(node("n1"), pod("web", node_name="n1")))
    view.start()
    assert view.wait_ready(5)
    assert view.sync_progress()["PodGroup"]["absent"] is True
    assert absent_metric(view) == {"PodGroup": 1.0, "CompositePodGroup": 1.0}
    assert pod_group_lines(caplog) == [
        "cluster view: this cluster does not serve podgroups at a version preemptctl reads "
        "(scheduling.k8s.io/v1beta1, scheduling.k8s.io/v1alpha2); it serves "
        "scheduling.k8s.io/v1alpha1, an older alpha shape preemptctl does not read; they are "
        "not watched"
    ]


def test_composite_pod_groups_are_watched_where_served(
    make_view: Callable[..., tuple[Emulator, ClusterView]],
) -> None:
    emulator, view = make_view({"composite_pod_groups": True})
    child = pod_group("train-a", priority=10)
    child["spec"]["parentCompositePodGroupName"] = "job"
    emulator.load(as_list(node("n1"), child, member("a-0", "train-a", node_name="n1")))
    view.start()
    assert view.wait_ready(5)
    assert view.sync_progress()["CompositePodGroup"]["version"] == "scheduling.k8s.io/v1alpha3"
    assert absent_metric(view) == {"PodGroup": 0.0, "CompositePodGroup": 0.0}
    emulator.store.load(COMPOSITE_POD_GROUPS, composite("job", priority=700))
    assert eventually(lambda s: s.pod_by_key("ml/a-0").priority == 700, view)  # type: ignore[union-attr]
    emulator.store.delete(COMPOSITE_POD_GROUPS, "ml", "job")
    assert eventually(lambda s: s.pod_by_key("ml/a-0").priority == 10, view)  # type: ignore[union-attr]


def composite(name: str, *, priority: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha3",
        "kind": "CompositePodGroup",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "schedulingPolicy": {"basic": {}},
            "disruptionMode": {"all": {}},
            "priority": priority,
        },
    }


def test_discovery_that_fails_is_retried_until_it_answers(
    make_view: Callable[..., tuple[Emulator, ClusterView]],
) -> None:
    emulator, view = make_view({})
    emulator.load(as_list(node("n1"), pod_group("train-a")))
    real_send = view.reflectors["PodGroup"].kube.send
    failures = [3]

    def flaky(method: str, path: str, **options: Any) -> Any:
        if path == "/apis/scheduling.k8s.io/v1beta1" and failures[0]:
            failures[0] -= 1
            raise ConnectionError("connection refused")
        return real_send(method, path, **options)

    view.reflectors["PodGroup"].kube = _Sending(view.reflectors["PodGroup"].kube, flaky)
    view.start()
    assert view.wait_ready(5)
    assert failures == [0]
    assert view.reflector_stats()["PodGroup"].errors == 3
    with view.read() as snapshot:
        assert list(snapshot.pod_groups) == ["ml/train-a"]


class _Sending:
    """A client whose `send` is replaced (the reflector's discovery and lists go through it)."""

    def __init__(self, kube: KubeClient, send: Callable[..., Any]) -> None:
        self._kube = kube
        self.send = send

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kube, name)


def test_pods_keep_the_annotations_and_labels_the_settings_read(
    make_view: Callable[..., tuple[Emulator, ClusterView]],
) -> None:
    emulator, view = make_view({}, kept_annotations=(SIZE,), kept_labels=(KUEUE,))
    crowded = {f"l{i}": "x" for i in range(100)}  # beyond the label cap
    emulator.load(
        as_list(
            node("n1"),
            pod(
                "job-0",
                "ml",
                node_name="n1",
                labels={**crowded, KUEUE: "job"},
            ),
        )
    )
    emulator.store.patch(
        PODS,
        "ml",
        "job-0",
        "application/merge-patch+json",
        {"metadata": {"annotations": {SIZE: "4", "other": "y"}}},
        "",
    )
    view.start()
    assert view.wait_ready(5)
    assert eventually(
        lambda s: (
            (found := s.pod_by_key("ml/job-0")) is not None
            and dict(found.annotations) == {SIZE: "4"}
            and found.labels.get(KUEUE) == "job"
        ),
        view,
    )

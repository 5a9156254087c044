"""The simulated cluster: scheduler, kubelet, and the two on the product's default scenario.

Scenarios, the scheduler (one pass at a time, no server needed):
- a pending pod that fits is bound to the first node it fits, by name;
- a pod that fits nowhere is marked PodScheduled=False, Unschedulable, with the FitError
  message upstream writes ("0/N nodes are available: ..."), and only once;
- a pod whose nominated node fits is bound there, even when an earlier node fits too;
- a pod whose nominated node no longer fits goes to the first node that does;
- a nominated pod of higher priority holds its node against a lower-priority pod;
- a terminating pod occupies its node until it is gone;
- a higher-priority pod is bound first when only one of two fits;
- pods of other schedulers are left alone;
- the planner's filters judge fit: required anti-affinity keeps a pod off a node with a
  pod it rejects (by the namespaceSelector of a Namespace object too), a DoNotSchedule
  spread constraint sends it to the less loaded zone, and the FitError names them;
- a fault injected for the controller is not consumed by the scheduler.
The kubelet:
- a terminating pod is finished after its grace period, capped at max_grace_seconds;
- without a cap, the pod's own grace period holds;
- a pod a scenario loads already terminating is finished the same way;
- a bound pending pod becomes Running, with a startTime, after the start delay;
- a pod whose nodeName is not a string (a hostile object) is started nowhere;
- a started pod reports each container running, started and ready, never restarted, with
  an image digest and a container id (kubectl shows it READY 1/1, Running; the official
  client reads it); init containers have completed, sidecars run;
- a started pod deleted with a grace period shows Terminating until the kubelet ends it.
The cluster (emulator, scheduler and kubelet running):
- on the online-offline scenario with no controller, nginx-a ends Unschedulable (so a
  controller would act) and report-x stays pending, nominated to node-1;
- when the test plays the controller (nominates nginx-a to node-1, deletes the planner's
  victims batch-1a and batch-1b), nginx-a is bound to node-1 only after both are gone.
The cluster (not started):
- a scenario it loads gets new uids on every load, as objects a real API server creates,
  its references renamed with them; `keep_uids` keeps the file's;
- started without the PodGroup API, it refuses a scenario with a PodGroup.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import pytest
from kubernetes.client import V1Pod

from preemptctl.emulator import Emulator, ScenarioError
from preemptctl.emulator.patch import MERGE_PATCH
from preemptctl.emulator.resources import NODES, PODS
from preemptctl.emulator.simulation import (
    SimulatedCluster,
    SimulatedKubelet,
    SimulatedScheduler,
    awaiting_start,
)
from preemptctl.emulator.store import Store
from preemptctl.emulator.tables import pod_cells
from preemptctl.worker.scenarios import ONLINE_OFFLINE
from tests.support.emulator import as_list, node, pod


def _pod(name: str, created: str = "2026-11-01T08:00:00Z", **options: Any) -> dict[str, Any]:
    built = pod(name, **options)
    built["metadata"]["creationTimestamp"] = created
    return built


def _cordoned(name: str, cpu: str = "4") -> dict[str, Any]:
    built = node(name, cpu=cpu)
    built["spec"] = {"unschedulable": True}
    return built


def _scheduler(*objects: dict[str, Any]) -> tuple[Emulator, SimulatedScheduler]:
    """An emulator that is never started (the scheduler works on its store) and a scheduler."""
    emulator = Emulator()
    emulator.load(as_list(*objects))
    return emulator, SimulatedScheduler(emulator.store)


def _stored(emulator: Emulator, key: str) -> dict[str, Any]:
    found = emulator.pod(key)
    assert found is not None, key
    return found


def _scheduled(pod_obj: dict[str, Any]) -> dict[str, Any] | None:
    for condition in pod_obj["status"].get("conditions") or ():
        if condition["type"] == "PodScheduled":
            found: dict[str, Any] = condition
            return found
    return None


# -- the scheduler ------------------------------------------------------------------------------


def _labelled_node(name: str, zone: str, cpu: str = "4") -> dict[str, Any]:
    built = node(name, cpu=cpu)
    built["metadata"]["labels"] = {"kubernetes.io/hostname": name, "zone": zone}
    return built


def _anti_affinity(match: dict[str, str], namespace_selector: Any = None) -> dict[str, Any]:
    term: dict[str, Any] = {
        "labelSelector": {"matchLabels": match},
        "topologyKey": "kubernetes.io/hostname",
    }
    if namespace_selector is not None:
        term["namespaceSelector"] = namespace_selector
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def test_required_anti_affinity_keeps_a_pod_off_the_node_of_the_pod_it_rejects() -> None:
    web = _pod("web-2", labels={"app": "web"})
    web["spec"]["affinity"] = _anti_affinity({"app": "web"})
    emulator, scheduler = _scheduler(
        _labelled_node("n1", "a"),
        _labelled_node("n2", "a"),
        _pod("web-1", node_name="n1", labels={"app": "web"}),
        web,
    )
    scheduler.schedule_pass()
    assert _stored(emulator, "default/web-2")["spec"]["nodeName"] == "n2"


def test_anti_affinity_by_namespace_selector_reads_the_namespace_objects() -> None:
    guard = _pod("guard")
    guard["spec"]["affinity"] = _anti_affinity({"app": "db"}, {"matchLabels": {"tier": "data"}})
    emulator, scheduler = _scheduler(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}},
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "data", "labels": {"tier": "data"}},
        },
        _labelled_node("n1", "a"),
        _pod("db", namespace="data", node_name="n1", labels={"app": "db"}),
        guard,
    )
    scheduler.schedule_pass()
    guard_now = _stored(emulator, "default/guard")
    assert "nodeName" not in guard_now["spec"]
    condition = _scheduled(guard_now)
    assert condition is not None
    assert condition["message"] == (
        "0/1 nodes are available: 1 node(s) didn't match pod anti-affinity rules."
    )


def test_a_spread_constraint_sends_the_pod_to_the_less_loaded_zone() -> None:
    spreading = _pod("web-3", labels={"app": "web"})
    spreading["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": "zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
    ]
    emulator, scheduler = _scheduler(
        _labelled_node("a1", "a"),
        _labelled_node("b1", "b"),
        _pod("web-1", node_name="a1", labels={"app": "web"}),
        spreading,
    )
    scheduler.schedule_pass()
    assert _stored(emulator, "default/web-3")["spec"]["nodeName"] == "b1"


def test_pod_that_fits_is_bound_to_the_first_fitting_node() -> None:
    emulator, scheduler = _scheduler(
        node("n1", cpu="1"),
        node("n2", cpu="4"),
        node("n3", cpu="4"),
        _pod("busy", node_name="n1", cpu="1"),
        _pod("web", cpu="2"),
    )
    assert scheduler.schedule_pass() == 1
    web = _stored(emulator, "default/web")
    assert web["spec"]["nodeName"] == "n2"
    condition = _scheduled(web)
    assert condition is not None and condition["status"] == "True"


def test_pod_that_fits_nowhere_is_marked_unschedulable_with_the_fit_error() -> None:
    emulator, scheduler = _scheduler(
        node("n1", cpu="1"),
        _cordoned("n2"),
        _pod("busy", node_name="n1", cpu="1"),
        _pod("web", cpu="2"),
    )
    scheduler.schedule_pass()
    web = _stored(emulator, "default/web")
    assert "nodeName" not in web["spec"]
    condition = _scheduled(web)
    assert condition is not None
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "False",
        "Unschedulable",
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) were unschedulable.",
    )


def test_unschedulable_condition_is_written_once() -> None:
    emulator, scheduler = _scheduler(node("n1", cpu="1"), _pod("web", cpu="2"))
    assert scheduler.schedule_pass() == 1
    revision = emulator.store.revision
    assert scheduler.schedule_pass() == 0
    assert emulator.store.revision == revision
    assert scheduler.settled_revision == revision


def test_nominated_node_is_preferred_when_it_fits() -> None:
    emulator, scheduler = _scheduler(
        node("n1"), node("n2"), _pod("web", cpu="1", nominated_node="n2")
    )
    scheduler.schedule_pass()
    assert _stored(emulator, "default/web")["spec"]["nodeName"] == "n2"


def test_pod_whose_nominated_node_is_full_goes_to_the_first_that_fits() -> None:
    emulator, scheduler = _scheduler(
        node("n1"),
        node("n2", cpu="1"),
        _pod("busy", node_name="n2", cpu="1"),
        _pod("web", cpu="1", nominated_node="n2"),
    )
    scheduler.schedule_pass()
    assert _stored(emulator, "default/web")["spec"]["nodeName"] == "n1"


def test_higher_priority_nomination_holds_its_node() -> None:
    emulator, scheduler = _scheduler(
        node("n1", cpu="2"),
        _cordoned("n2"),
        _pod("busy", node_name="n1", cpu="1"),
        _pod("preemptor", cpu="2", priority=1000, nominated_node="n1"),
        _pod("small", cpu="1", priority=10),
    )
    scheduler.schedule_pass()
    small = _stored(emulator, "default/small")
    assert "nodeName" not in small["spec"]
    condition = _scheduled(small)
    assert condition is not None and condition["reason"] == "Unschedulable"


def test_terminating_pod_occupies_its_node_until_it_is_gone() -> None:
    emulator, scheduler = _scheduler(
        node("n1", cpu="1"), _pod("victim", node_name="n1", cpu="1", grace_period=30)
    )
    emulator.store.delete(PODS, "default", "victim")
    emulator.load(_pod("web", cpu="1"))
    scheduler.schedule_pass()
    assert "nodeName" not in _stored(emulator, "default/web")["spec"]
    emulator.finalize("default/victim")
    scheduler.schedule_pass()
    assert _stored(emulator, "default/web")["spec"]["nodeName"] == "n1"


def test_higher_priority_pod_is_bound_first() -> None:
    emulator, scheduler = _scheduler(
        node("n1", cpu="1"),
        _pod("early-low", cpu="1", priority=10, created="2026-11-01T08:00:00Z"),
        _pod("late-high", cpu="1", priority=1000, created="2026-11-01T09:00:00Z"),
    )
    scheduler.schedule_pass()
    assert _stored(emulator, "default/late-high")["spec"]["nodeName"] == "n1"
    assert "nodeName" not in _stored(emulator, "default/early-low")["spec"]


def test_pods_of_other_schedulers_are_left_alone() -> None:
    other = _pod("batch", cpu="1")
    other["spec"]["schedulerName"] = "volcano"
    emulator, scheduler = _scheduler(node("n1"), other)
    before = _stored(emulator, "default/batch")
    assert scheduler.schedule_pass() == 0
    assert _stored(emulator, "default/batch") is before


def test_faults_for_the_controller_are_not_consumed_by_the_scheduler() -> None:
    emulator, scheduler = _scheduler(node("n1", cpu="1"), _pod("web", cpu="2"))
    fault = emulator.faults.fail("patch", "pods/status", 503, times=1)
    scheduler.schedule_pass()
    assert _scheduled(_stored(emulator, "default/web")) is not None
    assert (fault.hits, fault.times) == (0, 1)


# -- the kubelet --------------------------------------------------------------------------------


def _tick_until(kubelet: SimulatedKubelet, condition: Any, timeout: float = 3.0) -> bool:
    """Play the kubelet's loop here (it is not started) until `condition` holds."""
    deadline = time.monotonic() + timeout
    while True:
        kubelet.tick()
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def test_terminating_pod_is_finished_after_the_capped_grace_period() -> None:
    emulator = Emulator()
    emulator.load(as_list(node("n1"), _pod("victim", node_name="n1", grace_period=30)))
    kubelet = SimulatedKubelet(emulator.store, max_grace_seconds=0.3)
    started = time.monotonic()
    emulator.store.delete(PODS, "default", "victim")
    kubelet.tick()
    assert emulator.pod("default/victim") is not None
    assert _tick_until(kubelet, lambda: emulator.pod("default/victim") is None)
    assert 0.3 <= time.monotonic() - started < 3.0


def test_without_a_cap_the_pods_own_grace_period_holds() -> None:
    emulator = Emulator()
    emulator.load(as_list(node("n1"), _pod("victim", node_name="n1", grace_period=1)))
    kubelet = SimulatedKubelet(emulator.store, max_grace_seconds=None)
    started = time.monotonic()
    emulator.store.delete(PODS, "default", "victim")
    assert _tick_until(kubelet, lambda: emulator.pod("default/victim") is None)
    assert time.monotonic() - started >= 1.0


def test_pod_loaded_terminating_is_finished_too() -> None:
    terminating = _pod("victim", node_name="n1")
    terminating["metadata"]["deletionTimestamp"] = "2026-11-01T08:00:30Z"
    terminating["metadata"]["deletionGracePeriodSeconds"] = 30
    emulator = Emulator()
    emulator.load(as_list(node("n1"), terminating))
    kubelet = SimulatedKubelet(emulator.store, max_grace_seconds=0.2)
    assert _tick_until(kubelet, lambda: emulator.pod("default/victim") is None)


def test_bound_pending_pod_is_started_after_the_start_delay() -> None:
    emulator = Emulator()
    emulator.load(as_list(node("n1"), _pod("web", node_name="n1", phase="Pending")))
    kubelet = SimulatedKubelet(emulator.store, start_delay=0.2)
    started = time.monotonic()
    kubelet.tick()
    assert _stored(emulator, "default/web")["status"]["phase"] == "Pending"
    assert _tick_until(
        kubelet, lambda: _stored(emulator, "default/web")["status"]["phase"] == "Running"
    )
    assert time.monotonic() - started >= 0.2
    web = _stored(emulator, "default/web")
    assert web["status"]["startTime"]
    assert {c["type"] for c in web["status"]["conditions"] if c["status"] == "True"} >= {
        "Ready",
        "ContainersReady",
        "Initialized",
    }


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _started(obj: dict[str, Any]) -> dict[str, Any]:
    """The pod as the kubelet reports it once it has started it."""
    emulator = Emulator()
    emulator.load(as_list(node("n1"), obj))
    kubelet = SimulatedKubelet(emulator.store, start_delay=0.0)
    kubelet.tick()
    return _stored(emulator, f"default/{obj['metadata']['name']}")


def test_a_started_pod_reports_each_container_running_and_ready() -> None:
    web = _pod("web", node_name="n1", phase="Pending")
    web["spec"]["containers"] = [
        {"name": "main", "image": "nginx:1.27"},
        {"name": "logs", "image": "fluent-bit:3.1"},
    ]
    started = _started(web)
    started_at = started["status"]["startTime"]
    statuses = started["status"]["containerStatuses"]
    assert [(s.pop("imageID"), s.pop("containerID")[:13]) for s in statuses] == [
        ("docker.io/library/nginx@sha256:" + _sha256("nginx:1.27"), "containerd://"),
        ("docker.io/library/fluent-bit@sha256:" + _sha256("fluent-bit:3.1"), "containerd://"),
    ]
    assert statuses == [
        {
            "name": name,
            "image": image,
            "ready": True,
            "started": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": started_at}},
        }
        for name, image in (("main", "nginx:1.27"), ("logs", "fluent-bit:3.1"))
    ]
    assert "initContainerStatuses" not in started["status"]
    assert pod_cells(started)[1:3] == ["2/2", "Running"]


def test_the_official_client_reads_a_started_pod() -> None:
    started = _started(_pod("web", node_name="n1", phase="Pending"))
    read = V1Pod.from_dict(started)
    assert read is not None and read.status is not None and read.status.container_statuses
    assert [(c.name, c.ready) for c in read.status.container_statuses] == [("main", True)]


def test_init_containers_have_completed_and_sidecars_run() -> None:
    web = _pod("web", node_name="n1", phase="Pending")
    web["spec"]["initContainers"] = [
        {"name": "migrate", "image": "migrate:1"},
        {"name": "proxy", "image": "envoy:1.31", "restartPolicy": "Always"},
    ]
    started = _started(web)
    init = {c["name"]: c for c in started["status"]["initContainerStatuses"]}
    assert init["migrate"]["state"]["terminated"]["reason"] == "Completed"
    assert init["migrate"]["state"]["terminated"]["exitCode"] == 0
    assert (init["proxy"]["ready"], list(init["proxy"]["state"])) == (True, ["running"])
    assert pod_cells(started)[1:3] == ["2/2", "Running"]


def test_a_started_pod_deleted_with_a_grace_period_is_terminating_until_it_ends() -> None:
    emulator = Emulator()
    emulator.load(as_list(node("n1"), _pod("web", node_name="n1", phase="Pending")))
    kubelet = SimulatedKubelet(emulator.store, start_delay=0.0, max_grace_seconds=0.3)
    kubelet.tick()
    assert pod_cells(_stored(emulator, "default/web"))[1:3] == ["1/1", "Running"]
    emulator.store.delete(PODS, "default", "web")
    kubelet.tick()
    assert pod_cells(_stored(emulator, "default/web"))[1:3] == ["1/1", "Terminating"]
    assert _tick_until(kubelet, lambda: emulator.pod("default/web") is None)


# -- the cluster on the default scenario --------------------------------------------------------


NGINX_A_FIT_ERROR = (
    "0/5 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, "
    "1 node(s) were unschedulable, 3 Insufficient cpu."
)


def _cluster() -> SimulatedCluster:
    return SimulatedCluster(max_grace_seconds=0.5, start_delay=0.05, interval=0.02)


def test_default_scenario_without_a_controller_leaves_nginx_a_unschedulable() -> None:
    with _cluster() as cluster:
        cluster.load(ONLINE_OFFLINE)
        assert cluster.wait_until_quiet(timeout=10)
        nginx = _stored(cluster.emulator, "default/nginx-a")
        report = _stored(cluster.emulator, "default/report-x")
    assert "nodeName" not in nginx["spec"]
    condition = _scheduled(nginx)
    assert condition is not None
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "False",
        "Unschedulable",
        NGINX_A_FIT_ERROR,
    )
    assert "nodeName" not in report["spec"]
    assert report["status"]["nominatedNodeName"] == "node-1"
    assert report["status"]["phase"] == "Pending"


def test_nginx_a_is_bound_to_node_1_once_the_victims_are_gone() -> None:
    with _cluster() as cluster:
        cluster.load(ONLINE_OFFLINE)
        assert cluster.wait_until_quiet(timeout=10)
        store = cluster.store
        since = store.revision
        # the controller's part: nominate, clear the lower nomination, delete the victims
        for name, nominated in (("nginx-a", "node-1"), ("report-x", None)):
            store.patch(
                PODS,
                "default",
                name,
                MERGE_PATCH,
                {"status": {"nominatedNodeName": nominated}},
                subresource="status",
            )
        for victim in ("batch-1a", "batch-1b"):
            store.delete(PODS, "default", victim)
        assert cluster.wait_until_quiet(timeout=10)
        watcher, history = store.watch(PODS, since)
        store.unwatch(watcher)
        nginx = _stored(cluster.emulator, "default/nginx-a")
    assert nginx["spec"]["nodeName"] == "node-1"
    assert nginx["status"]["phase"] == "Running"
    gone = {e.obj["metadata"]["name"]: e.rv for e in history if e.type == "DELETED"}
    bound = next(
        e.rv
        for e in history
        if e.obj["metadata"]["name"] == "nginx-a" and e.obj["spec"].get("nodeName")
    )
    assert set(gone) == {"batch-1a", "batch-1b"}
    assert bound > max(gone.values())


def test_a_pod_whose_node_name_is_not_a_string_is_started_nowhere() -> None:
    store = Store()
    store.create(NODES, "", node("node-1", cpu="4"))
    store.create(PODS, "default", pod("good", cpu="1", node_name="node-1", phase="Pending"))
    store.inject(
        PODS,
        {"metadata": {"name": "hostile", "uid": "u-hostile"}, "spec": {"nodeName": ["node-1"]}},
        "hostile",
    )
    waiting = awaiting_start(store)
    assert [p["metadata"]["name"] for p in waiting.values()] == ["good"]


# -- the cluster, not started -------------------------------------------------------------------


def _uids(cluster: SimulatedCluster) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in cluster.store.objects(PODS)}


def test_a_loaded_scenario_gets_new_uids_on_every_load_with_its_references() -> None:
    owner = _pod("owner", uid="uid-owner")
    owned = _pod("owned", uid="uid-owned")
    owned["metadata"]["ownerReferences"] = [{"kind": "Pod", "name": "owner", "uid": "uid-owner"}]
    scenario = as_list(owner, owned)
    first, second = SimulatedCluster(), SimulatedCluster()
    first.load(scenario)
    second.load(scenario)
    uids = [_uids(first), _uids(second)]
    assert len({*uids[0].values(), *uids[1].values(), "uid-owner", "uid-owned"}) == 6
    stored = first.emulator.pod("default/owned")
    assert stored is not None
    assert stored["metadata"]["ownerReferences"][0]["uid"] == uids[0]["owner"]


def test_keep_uids_keeps_the_scenarios_own() -> None:
    cluster = SimulatedCluster()
    cluster.load(as_list(_pod("web", uid="uid-web")), keep_uids=True)
    assert _uids(cluster) == {"web": "uid-web"}


def test_started_without_the_pod_group_api_it_refuses_a_pod_group() -> None:
    group = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "default"},
        "spec": {"schedulingPolicy": {"basic": {}}},
    }
    with pytest.raises(ScenarioError, match="a PodGroup"):
        SimulatedCluster(pod_groups=False).load(as_list(group))
    assert SimulatedCluster().load(as_list(group)) == 1

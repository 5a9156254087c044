"""The cluster view's decoding of what a real kube-apiserver (1.36) returns.

A real server fills in what the emulator never does: admission sets a pod's priority from
its PriorityClass and adds the not-ready/unreachable NoExecute tolerations, defaulting adds
`preemptionPolicy`, `enableServiceLinks`, a QoS class; a namespace gets its
`kubernetes.io/metadata.name` label; a claim gets its protection finalizer. The view must read
all of it as the planner needs it.

Scenarios:
- the view syncs every kind the planner reads; PodGroups are watched at the version the
  server serves (`scheduling.k8s.io/v1alpha2` in 1.36; `v1beta1` is 1.37's), discovered, and
  a v1alpha2 PodGroup (its `disruptionMode` a string, `Pod` by default) is read in its own
  shape;
- a node: allocatable resources, allowed pods, labels, taints, unschedulable;
- a bound, running pod: priority from its class, requests, node, phase and start time, QoS,
  the tolerations admission added, preemption policy;
- a pending pod nominated to a node; a pod with `preemptionPolicy: Never`;
- a terminating pod is terminating, and its DisruptionTarget condition marks it disrupted;
- a PodDisruptionBudget: its selector matches the pods it should, its disruptions allowed
  and the pods it counts as disrupted (after an eviction);
- a namespace's labels, as namespaceSelectors read them;
- a claim bound to nothing yet, with its storage class.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from preemptctl.kube.client import KubeClient
from preemptctl.kube.conditions import add_disruption_target
from preemptctl.kube.deletion import delete_victim
from preemptctl.kube.view import ClusterView
from preemptctl.preemption.decision import PodRef
from preemptctl.preemption.decode import decode_pod_group
from preemptctl.preemption.objects import Pod
from preemptctl.preemption.selectors import label_selector_matches
from tests.support.control_plane import (
    ControlPlane,
    create_pdb,
    create_pod,
    mark_running,
    pod_manifest,
    wait_for,
)
from tests.support.http_api import MERGE_PATCH, HttpApi

CONTROL_PLANE = {"scheduler": False}
NS = "decoded"


@pytest.fixture(scope="module")
def admin(control_plane: ControlPlane) -> HttpApi:
    return control_plane.api("admin")


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane, admin: HttpApi) -> dict[str, str]:
    """The objects every test here reads; their UIDs by name."""
    control_plane.namespace(NS)
    admin.patch(f"/api/v1/namespaces/{NS}", {"metadata": {"labels": {"team": "ml"}}}).ok()
    control_plane.ready_node(
        "big",
        cpu="8",
        memory="16Gi",
        pods="50",
        labels={"zone": "a"},
        taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}],
    )
    control_plane.ready_node("cordoned", unschedulable=True)
    low = control_plane.priority_class(100)
    high = control_plane.priority_class(1000)
    never = control_plane.priority_class(1000, never=True)
    uids = {}
    for name, options in {
        "running": {"node": "big", "priority_class": low, "cpu": "500m", "memory": "1Gi"},
        "nominated": {"priority_class": high, "cpu": "2"},
        "never": {"priority_class": never},
        "doomed": {"node": "big", "priority_class": low, "grace_period": 600},
        "guarded": {"node": "big", "labels": {"app": "db"}},
    }.items():
        manifest = pod_manifest(name, **options)  # type: ignore[arg-type]
        uids[name] = create_pod(admin, NS, manifest)["metadata"]["uid"]
    mark_running(admin, NS, "running", start_time="2026-01-02T03:04:05Z")
    for name in ("doomed", "guarded"):
        mark_running(admin, NS, name)
    admin.patch(
        f"/api/v1/namespaces/{NS}/pods/nominated/status",
        {"status": {"nominatedNodeName": "big"}},
        MERGE_PATCH,
    ).ok()
    create_pdb(admin, NS, "db", {"app": "db"}, disruptions_allowed=1)
    admin.create(
        f"/api/v1/namespaces/{NS}/persistentvolumeclaims",
        {
            "metadata": {"name": "data"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "fast",
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    return uids


@pytest.fixture(scope="module")
def view(kube: KubeClient, cluster: dict[str, str], admin: HttpApi) -> Iterator[ClusterView]:
    """The view, once it has seen the cluster's last changes (a victim marked and deleted
    through the gateway, a guarded pod evicted) on its watches."""
    view = ClusterView(kube, watch_timeout=30)
    view.start()
    try:
        assert view.wait_ready(60), view.sync_progress()
        doomed = PodRef(NS, "doomed", cluster["doomed"])
        add_disruption_target(kube, doomed, "default-scheduler")
        delete_victim(kube, doomed)
        delete_victim(kube, PodRef(NS, "guarded", cluster["guarded"]), use_eviction=True)

        def caught_up() -> bool:
            with view.read() as snapshot:
                pod = snapshot.pods.get(cluster["doomed"])
                budget = snapshot.pdbs.get(f"{NS}/db")
                return bool(pod and pod.terminating and budget and budget.disrupted_pods)

        wait_for(caught_up, 30, "the view to see the deletion and the eviction")
        yield view
    finally:
        view.stop()


def pod_of(view: ClusterView, uid: str) -> Pod:
    with view.read() as snapshot:
        return snapshot.pods[uid]


def test_every_kind_syncs_and_pod_groups_are_watched_at_the_served_version(
    view: ClusterView,
) -> None:
    progress = view.sync_progress()
    assert all(kind["synced"] for kind in progress.values()), progress
    assert "absent" not in progress["PodGroup"]
    assert progress["PodGroup"]["version"] == "scheduling.k8s.io/v1alpha2"  # no v1beta1 in 1.36


def test_a_pod_group_of_the_served_version_is_read_in_its_own_shape(
    control_plane: ControlPlane, admin: HttpApi, cluster: dict[str, str]
) -> None:
    served = admin.create(
        f"/apis/scheduling.k8s.io/v1alpha2/namespaces/{NS}/podgroups",
        {
            "apiVersion": "scheduling.k8s.io/v1alpha2",
            "kind": "PodGroup",
            "metadata": {"name": "train"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
        },
    )
    assert served["spec"]["disruptionMode"] == "Pod"  # v1alpha2: a string, defaulted
    group = decode_pod_group(served)
    assert (group.gang, group.min_count, group.disruption_all) == (True, 2, False)


def test_a_node_is_read_with_its_resources_labels_and_taints(view: ClusterView) -> None:
    with view.read() as snapshot:
        big = snapshot.node_infos["big"].node
        cordoned = snapshot.node_infos["cordoned"].node
    assert big is not None and cordoned is not None
    assert (big.allocatable.milli_cpu, big.allocatable.memory, big.allowed_pods) == (
        8000,
        16 * 2**30,
        50,
    )
    assert (big.labels["zone"], big.labels["kubernetes.io/hostname"]) == ("a", "big")
    assert [(t.key, t.value, t.effect) for t in big.taints] == [("dedicated", "gpu", "NoSchedule")]
    assert (big.unschedulable, cordoned.unschedulable) == (False, True)


def test_a_running_pod_is_read_as_admission_and_its_kubelet_left_it(
    view: ClusterView, cluster: dict[str, str]
) -> None:
    pod = pod_of(view, cluster["running"])
    assert (pod.priority, pod.priority_class_name) == (100, "p-100")
    assert (pod.requests.milli_cpu, pod.requests.memory) == (500, 2**30)
    assert (pod.node_name, pod.phase, pod.qos_class) == ("big", "Running", "Burstable")
    assert pod.start_time == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp()
    assert pod.preemption_policy == "PreemptLowerPriority"
    assert sorted((t.key, t.operator, t.effect) for t in pod.tolerations) == [
        ("node.kubernetes.io/not-ready", "Exists", "NoExecute"),
        ("node.kubernetes.io/unreachable", "Exists", "NoExecute"),
    ]
    assert not pod.terminating


def test_pending_pods_keep_their_nomination_and_policy(
    view: ClusterView, cluster: dict[str, str]
) -> None:
    nominated, never = pod_of(view, cluster["nominated"]), pod_of(view, cluster["never"])
    assert (nominated.priority, nominated.node_name, nominated.nominated_node_name) == (
        1000,
        "",
        "big",
    )
    assert (never.priority, never.preemption_policy) == (1000, "Never")


def test_a_pod_being_deleted_is_terminating_and_disrupted(
    view: ClusterView, cluster: dict[str, str]
) -> None:
    pod = pod_of(view, cluster["doomed"])
    assert (pod.terminating, pod.disrupted_by_scheduler) == (True, True)


def test_a_budget_is_read_with_its_selector_and_disruptions(
    view: ClusterView, cluster: dict[str, str]
) -> None:
    with view.read() as snapshot:
        budget = snapshot.pdbs[f"{NS}/db"]
        guarded = snapshot.pods[cluster["guarded"]]
        running = snapshot.pods[cluster["running"]]
    assert budget.selector is not None
    assert label_selector_matches(budget.selector, guarded.labels)
    assert not label_selector_matches(budget.selector, running.labels)
    assert (budget.disruptions_allowed, budget.disrupted_pods) == (0, frozenset({"guarded"}))


def test_a_namespace_is_read_with_its_labels(view: ClusterView) -> None:
    with view.read() as snapshot:
        labels = dict(snapshot.namespaces[NS].labels)
    assert labels == {"team": "ml", "kubernetes.io/metadata.name": NS}


def test_a_claim_is_read_unbound_with_its_class(view: ClusterView) -> None:
    with view.read() as snapshot:
        claim = snapshot.claims[f"{NS}/data"]
    assert (claim.volume_name, claim.storage_class_name, claim.access_modes) == (
        "",
        "fast",
        ("ReadWriteOnce",),
    )
    assert not claim.terminating

"""The snapshot as the cluster view feeds it: every kind it watches, removal, unreadable pods.

Scenarios:
- `apply` takes Namespaces (kept, for namespaceSelector) and the storage kinds (accepted,
  not kept: the planner refuses preemptors whose volumes a volume filter would judge);
- `remove` forgets a Pod by UID, a Node or Namespace by name, a PDB by namespace/name, and
  is a no-op for storage kinds and for objects it never had;
- `from_list` skips kinds the planner does not read and refuses two pods with one UID;
- `reject_pod` drops what was known of the pod and makes its node UnschedulableAndUnresolvable,
  naming the pod, until that UID is upserted readably or removed; a rejected pod without a
  node blocks nothing;
- the bound-pod index follows pods that are bound, moved, finished and removed, and counts
  each anti-affinity group's pods per node;
- once warmed (as the cluster view warms it when synced), a snapshot decides with the
  budgets as they are now: a pod relabelled into a budget counts against it, a budget's new
  status is what the victims spend, a budget reselected or removed stops selecting;
- a pod's budgets are those of its namespace whose selector selects it: a missing, empty or
  invalid selector, and another namespace's budget, never do;
- pods whose toleration lists are written alike share one decoded list; a toleration
  holding a value of the wrong type is an input error naming the pod.
"""

from __future__ import annotations

import pytest

from preemptctl.preemption.decision import Verdict
from preemptctl.preemption.errors import PlannerInputError
from preemptctl.preemption.filters import Code
from preemptctl.preemption.find_nodes_that_fit import filter_nodes
from preemptctl.preemption.planner import plan
from preemptctl.preemption.snapshot import ClusterSnapshot
from tests.preemption.builders import listing, namespace, node, pdb, pod, snapshot, term

STORAGE = {
    "PersistentVolumeClaim": {"metadata": {"name": "data", "namespace": "default"}},
    "PersistentVolume": {"metadata": {"name": "pv-1"}},
    "StorageClass": {"metadata": {"name": "fast"}},
    "CSINode": {"metadata": {"name": "n1"}},
    "VolumeAttachment": {"metadata": {"name": "csi-123"}},
}


def test_apply_keeps_namespaces_with_their_labels() -> None:
    cluster = ClusterSnapshot()
    cluster.apply("Namespace", namespace("data", {"team": "data"}))
    assert cluster.namespace_labels("data") == {"team": "data"}
    assert cluster.namespace_labels("elsewhere") is None


@pytest.mark.parametrize("kind", sorted(STORAGE))
def test_apply_accepts_storage_kinds_and_keeps_nothing(kind: str) -> None:
    cluster = ClusterSnapshot()
    cluster.apply(kind, STORAGE[kind])
    cluster.remove(kind, "default/data" if kind == "PersistentVolumeClaim" else "pv-1")
    assert not cluster.pods and not cluster.node_infos and not cluster.namespaces


def test_apply_refuses_a_kind_nobody_feeds() -> None:
    with pytest.raises(ValueError, match="unsupported kind Service"):
        ClusterSnapshot().apply("Service", {"metadata": {"name": "web"}})


def test_remove_forgets_each_kind_by_its_key() -> None:
    cluster = snapshot(
        node("n1"), pod("a", node="n1"), pdb("budget", match_labels={"app": "a"}), namespace("ns")
    )
    cluster.remove("Pod", "uid-default-a")
    cluster.remove("Node", "n1")
    cluster.remove("PodDisruptionBudget", "default/budget")
    cluster.remove("Namespace", "ns")
    assert (cluster.pods, cluster.nodes(), cluster.pdbs, cluster.namespaces) == ({}, [], {}, {})


def test_removing_what_was_never_there_is_a_no_op() -> None:
    cluster = snapshot(node("n1"))
    for kind in ("Pod", "Node", "PodDisruptionBudget", "Namespace", "StorageClass"):
        cluster.remove(kind, "missing")
    assert [info.name for info in cluster.nodes()] == ["n1"]


def test_from_list_skips_kinds_it_does_not_read() -> None:
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}}
    cluster = ClusterSnapshot.from_list(listing(node("n1"), service, pod("a")))
    assert list(cluster.pods) == ["uid-default-a"]


def test_from_list_refuses_two_pods_with_one_uid() -> None:
    with pytest.raises(PlannerInputError, match="pods default/a and default/b share the uid u"):
        ClusterSnapshot.from_list(listing(pod("a", uid="u"), pod("b", uid="u")))


def test_an_unreadable_pod_keeps_its_node_out_of_the_candidates() -> None:
    cluster = snapshot(
        node("n1", cpu="1"), pod("a", node="n1", cpu="1"), pod("p", cpu="1", priority=9)
    )
    cluster.reject_pod("uid-default-a", "n1")
    incoming = cluster.pod_by_key("default/p")
    assert incoming is not None
    status = filter_nodes(cluster, incoming)["n1"]
    assert status.code is Code.UNRESOLVABLE
    assert "uid-default-a" in status.reasons[0]
    assert plan(cluster, "default/p").verdict is Verdict.UNSCHEDULABLE


def test_the_node_is_judged_again_once_the_pod_is_readable() -> None:
    cluster = snapshot(node("n1", cpu="1"), pod("p", cpu="1", priority=9))
    cluster.reject_pod("uid-default-a", "n1")
    cluster.apply("Pod", pod("a", node="n1", cpu="1"))
    decision = plan(cluster, "default/p")
    assert (decision.verdict, [v.name for v in decision.victims]) == (Verdict.PREEMPT, ["a"])


def test_the_node_is_judged_again_once_the_pod_is_removed() -> None:
    cluster = snapshot(node("n1", cpu="1"), pod("p", cpu="1", priority=9))
    cluster.reject_pod("uid-default-a", "n1")
    cluster.remove("Pod", "uid-default-a")
    assert plan(cluster, "default/p").verdict is Verdict.FITS_WITHOUT_PREEMPTION


def test_a_rejected_pod_without_a_node_blocks_nothing() -> None:
    cluster = snapshot(node("n1", cpu="1"), pod("p", cpu="1"))
    cluster.reject_pod("uid-x", None)
    assert plan(cluster, "default/p").verdict is Verdict.FITS_WITHOUT_PREEMPTION


def test_the_bound_index_follows_binding_moving_finishing_and_removal() -> None:
    cluster = snapshot(node("n1"), node("n2"), pod("a", labels={"app": "x"}))
    index = cluster.pod_index()
    assert index.by_namespace == {}
    cluster.apply("Pod", pod("a", node="n1", labels={"app": "x"}))
    assert list(index.by_label[("default", "app", "x")]) == ["uid-default-a"]
    cluster.apply("Pod", pod("a", node="n2", labels={"app": "y"}))
    assert ("default", "app", "x") not in index.by_label
    cluster.apply("Pod", pod("a", node="n2", labels={"app": "y"}, phase="Succeeded"))
    assert index.by_label == {} and index.by_namespace == {}
    cluster.apply("Pod", pod("a", node="n2", labels={"app": "y"}))
    cluster.remove("Pod", "uid-default-a")
    assert index.by_label == {} and index.by_namespace == {}


def test_anti_affinity_groups_count_their_pods_per_node() -> None:
    rule = [term(match_labels={"app": "web"})]
    cluster = snapshot(
        node("n1"),
        node("n2"),
        pod("a", node="n1", pod_anti_affinity=rule),
        pod("b", node="n1", pod_anti_affinity=rule),
    )
    [(_terms, per_node)] = cluster.bound.anti_affinity_groups_for({"app": "web"})
    assert per_node == {"n1": 2}
    cluster.apply("Pod", pod("b", node="n2", pod_anti_affinity=rule))
    assert per_node == {"n1": 1, "n2": 1}
    cluster.remove("Pod", "uid-default-a")
    cluster.remove("Pod", "uid-default-b")
    assert cluster.bound.anti_affinity_groups_for({"app": "web"}) == []


def _one_victim_cluster(
    victim_labels: dict[str, str], budget: dict[str, object]
) -> ClusterSnapshot:
    """A full node whose one pod must go for the preemptor, and one budget; warmed."""
    cluster = snapshot(
        node("n1", cpu="1"),
        pod("victim", node="n1", cpu="1", labels=victim_labels),
        budget,
        pod("preemptor", priority=10, cpu="1"),
    )
    cluster.warm()
    return cluster


def _violations(cluster: ClusterSnapshot) -> int:
    decision = plan(cluster, "default/preemptor")
    assert decision.verdict is Verdict.PREEMPT
    return decision.num_pdb_violations


def test_a_warmed_snapshot_counts_a_pod_relabelled_into_a_budget() -> None:
    cluster = _one_victim_cluster({"app": "b"}, pdb("budget", match_labels={"app": "a"}))
    assert _violations(cluster) == 0
    cluster.apply("Pod", pod("victim", node="n1", cpu="1", labels={"app": "a"}))
    assert _violations(cluster) == 1


def test_a_warmed_snapshot_spends_a_budget_as_its_status_now_allows() -> None:
    cluster = _one_victim_cluster({"app": "a"}, pdb("budget", match_labels={"app": "a"}))
    assert _violations(cluster) == 1
    cluster.apply("PodDisruptionBudget", pdb("budget", match_labels={"app": "a"}, allowed=1))
    assert _violations(cluster) == 0
    cluster.apply(
        "PodDisruptionBudget", pdb("budget", match_labels={"app": "a"}, disrupted=["victim"])
    )
    assert _violations(cluster) == 0
    cluster.apply("PodDisruptionBudget", pdb("budget", match_labels={"app": "a"}))
    assert _violations(cluster) == 1


def test_a_warmed_snapshot_follows_a_budget_reselected_or_removed() -> None:
    cluster = _one_victim_cluster({"app": "a"}, pdb("budget", match_labels={"app": "a"}))
    cluster.apply("PodDisruptionBudget", pdb("budget", match_labels={"app": "b"}))
    assert _violations(cluster) == 0
    cluster.apply("PodDisruptionBudget", pdb("budget", match_labels={"app": "a"}))
    assert _violations(cluster) == 1
    cluster.remove("PodDisruptionBudget", "default/budget")
    assert _violations(cluster) == 0


def test_a_pods_budgets_are_its_namespaces_budgets_that_select_it() -> None:
    cluster = snapshot(
        node("n1"),
        pod("web", node="n1", labels={"app": "web"}),
        pdb("a-missing", no_selector=True),
        pdb("b-empty", selector={}),
        pdb("c-invalid", selector={"matchExpressions": [{"key": "app", "operator": "In"}]}),
        pdb("d-other-namespace", namespace="other", match_labels={"app": "web"}),
        pdb("e-web", match_labels={"app": "web"}),
        pdb("f-db", match_labels={"app": "db"}),
    )
    web = cluster.pod_by_key("default/web")
    assert web is not None
    assert [cluster.sorted_pdbs()[i].name for i in cluster.matching_pdbs(web)] == ["e-web"]


def test_toleration_lists_written_alike_share_one_decoded_list() -> None:
    toleration = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
    cluster = ClusterSnapshot.from_list(
        listing(pod("a", tolerations=[dict(toleration)]), pod("b", tolerations=[dict(toleration)]))
    )
    a, b = cluster.pod_by_key("default/a"), cluster.pod_by_key("default/b")
    assert a is not None and b is not None
    assert a.tolerations is b.tolerations
    assert [(t.key, t.operator, t.value, t.effect) for t in a.tolerations] == [
        ("gpu", "Exists", "", "NoSchedule")
    ]


def test_a_toleration_value_of_the_wrong_type_is_an_input_error_naming_the_pod() -> None:
    odd = {"key": "gpu", "operator": "Equal", "value": ["x"], "effect": "NoSchedule"}
    with pytest.raises(PlannerInputError, match="pod default/c: a field has the wrong type"):
        ClusterSnapshot.from_list(listing(pod("c", tolerations=[odd])))

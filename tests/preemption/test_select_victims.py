"""SelectVictimsOnNode: the fewest, least important pods whose removal lets the preemptor fit.

Every lower-priority pod is removed; if the preemptor then fits, pods are reprieved back one
at a time — first those whose eviction would violate a PDB, then the rest, each group most
important first — and every pod that cannot be reprieved is a victim.

Scenarios:
- a node without lower-priority pods: unresolvable, "No preemption victims found for
  incoming pod";
- a node where the preemptor does not fit even with every lower-priority pod gone:
  Unschedulable with the filter's reason;
- pods of equal or higher priority are never victims;
- reprieve order: higher priority first; at equal priority the earlier start first; a pod
  without a start time counts as the newest; remaining ties by namespace/name;
- PDB-violating pods are reprieved before non-violating ones, even less important ones;
- the number of PDB violations counts violating pods that could not be reprieved;
- victims are returned most important first, also when both groups contribute;
- host ports, extended resources and the pod count are freed by the victims too;
- a node's answer kept for the next preemptor of the same priority and request is not
  reused once the node's pods, the Node itself or any budget changed, nor by a preemptor of
  another priority or request.
"""

from __future__ import annotations

from typing import Any

from preemptctl.preemption.decision import Verdict
from preemptctl.preemption.default_preemption import (
    ERR_NO_VICTIMS,
    PreemptionArgs,
    select_victims_on_node,
)
from preemptctl.preemption.filters import Code, Status
from preemptctl.preemption.planner import plan
from tests.preemption.builders import container, node, pdb, pod, snapshot, victim_names

Json = dict[str, Any]


def victims_on(on: Json, *items: Json, preemptor: Json) -> tuple[list[str], int, Status]:
    cluster = snapshot(on, preemptor, *items)
    incoming = cluster.pod_by_key(f"default/{preemptor['metadata']['name']}")
    info = cluster.node(on["metadata"]["name"])
    assert incoming is not None and info is not None
    victims, violations, status = select_victims_on_node(cluster, incoming, info)
    return [victim.name for victim in victims], violations, status


P = pod("p", cpu="2", priority=10)


def test_a_node_without_lower_priority_pods_has_no_victims() -> None:
    got = victims_on(node("n", cpu="2"), pod("peer", cpu="2", node="n", priority=10), preemptor=P)
    assert got == ([], 0, Status(Code.UNRESOLVABLE, (ERR_NO_VICTIMS,)))


def test_a_node_still_too_small_without_its_lower_priority_pods_is_unschedulable() -> None:
    got = victims_on(
        node("n", cpu="3"),
        pod("high", cpu="2", node="n", priority=50),
        pod("low", cpu="1", node="n", priority=1),
        preemptor=P,
    )
    assert got == ([], 0, Status(Code.UNSCHEDULABLE, ("Insufficient cpu",)))


def test_pods_of_equal_priority_are_never_victims() -> None:
    victims, _, status = victims_on(
        node("n", cpu="3"),
        pod("peer", cpu="1", node="n", priority=10),
        pod("low", cpu="2", node="n", priority=9),
        preemptor=P,
    )
    assert status.ok
    assert victims == ["low"]


def test_more_important_pods_are_reprieved_first() -> None:
    victims, _, _ = victims_on(
        node("n", cpu="3"),
        pod("mid", cpu="1", node="n", priority=5),
        pod("lower", cpu="1", node="n", priority=3),
        pod("lowest", cpu="1", node="n", priority=1),
        preemptor=P,
    )
    assert victims == ["lower", "lowest"]


def test_at_equal_priority_the_earlier_started_pod_is_reprieved() -> None:
    victims, _, _ = victims_on(
        node("n", cpu="3"),
        pod("young", cpu="1", node="n", priority=1, start=20),
        pod("old", cpu="1", node="n", priority=1, start=5),
        pod("middle", cpu="1", node="n", priority=1, start=10),
        preemptor=P,
    )
    assert victims == ["middle", "young"]


def test_a_pod_without_a_start_time_counts_as_the_newest() -> None:
    victims, _, _ = victims_on(
        node("n", cpu="2"),
        pod("unstarted", cpu="1", node="n", priority=1),
        pod("started", cpu="1", node="n", priority=1, start=500),
        preemptor=pod("p", cpu="1", priority=10),
    )
    assert victims == ["unstarted"]


def test_remaining_ties_are_broken_by_name() -> None:
    victims, _, _ = victims_on(
        node("n", cpu="2"),
        pod("b", cpu="1", node="n", priority=1, start=5),
        pod("a", cpu="1", node="n", priority=1, start=5),
        preemptor=pod("p", cpu="1", priority=10),
    )
    assert victims == ["b"]


def test_pdb_violating_pods_are_reprieved_before_more_important_ones() -> None:
    victims, violations, _ = victims_on(
        node("n", cpu="3"),
        pdb("db", match_labels={"app": "db"}, allowed=0),
        pod("guarded", cpu="1", node="n", priority=1, labels={"app": "db"}),
        pod("important", cpu="1", node="n", priority=5),
        pod("also", cpu="1", node="n", priority=5),
        preemptor=P,
    )
    assert victims == ["also", "important"]
    assert violations == 0


def test_violations_count_violating_pods_that_could_not_be_reprieved() -> None:
    victims, violations, _ = victims_on(
        node("n", cpu="2"),
        pdb("db", match_labels={"app": "db"}, allowed=0),
        pod("db-0", cpu="1", node="n", priority=1, labels={"app": "db"}, start=1),
        pod("db-1", cpu="1", node="n", priority=1, labels={"app": "db"}, start=2),
        preemptor=P,
    )
    assert victims == ["db-0", "db-1"]
    assert violations == 2


def test_victims_are_most_important_first_when_both_groups_give_victims() -> None:
    victims, violations, _ = victims_on(
        node("n", cpu="3"),
        pdb("db", match_labels={"app": "db"}, allowed=0),
        pod("db-0", cpu="2", node="n", priority=1, labels={"app": "db"}),
        pod("web", cpu="1", node="n", priority=5),
        preemptor=pod("p", cpu="3", priority=10),
    )
    assert victims == ["web", "db-0"]
    assert violations == 1


def test_the_holder_of_a_wanted_host_port_is_a_victim() -> None:
    victims, _, _ = victims_on(
        node("n", cpu="4"),
        pod("holder", cpu="100m", node="n", priority=5, host_ports=[80]),
        pod("bulk", cpu="1", node="n", priority=1),
        preemptor=pod("p", cpu="1", priority=10, host_ports=[80]),
    )
    assert victims == ["holder"]


def test_a_host_port_held_by_a_more_important_pod_cannot_be_freed() -> None:
    _, _, status = victims_on(
        node("n", cpu="4"),
        pod("holder", node="n", priority=50, host_ports=[80]),
        pod("low", cpu="4", node="n", priority=1),
        preemptor=pod("p", cpu="1", priority=10, host_ports=[80]),
    )
    assert status == Status(
        Code.UNSCHEDULABLE, ("node(s) didn't have free ports for the requested pod ports",)
    )


def test_extended_resources_are_freed_by_victims() -> None:
    gpu = {"nvidia.com/gpu": "1"}
    victims, _, _ = victims_on(
        node("n", cpu="8", extra={"nvidia.com/gpu": "2"}),
        pod("gpu-a", node="n", priority=5, containers=[container("1", extra=gpu)]),
        pod("gpu-b", node="n", priority=1, containers=[container("1", extra=gpu)]),
        pod("cpu-only", cpu="1", node="n", priority=0),
        preemptor=pod("p", priority=10, containers=[container("1", extra=gpu)]),
    )
    assert victims == ["gpu-b"]


def test_a_full_pod_count_is_freed_by_the_least_important_pod() -> None:
    victims, _, _ = victims_on(
        node("n", pods=2),
        pod("keep", node="n", priority=5),
        pod("go", node="n", priority=1),
        preemptor=pod("p", priority=10),
    )
    assert victims == ["go"]


def test_a_pod_is_reprieved_when_it_fits_beside_the_preemptor() -> None:
    # the larger, more important pod cannot come back; the small one can
    victims, _, _ = victims_on(
        node("n", cpu="4"),
        pod("large", cpu="3", node="n", priority=5),
        pod("small", cpu="1", node="n", priority=1),
        preemptor=pod("p", cpu="3", priority=10),
    )
    assert victims == ["large"]


def test_pods_in_protected_namespaces_are_never_victims() -> None:
    cluster = snapshot(
        node("n1", cpu="2"),
        pod("system", namespace="kube-system", priority=0, cpu="1", node="n1"),
        pod("batch", priority=0, cpu="1", node="n1"),
        pod("urgent", priority=100, cpu="1"),
    )
    args = PreemptionArgs(protected_namespaces=frozenset({"kube-system"}))
    decision = plan(cluster, "default/urgent", args=args)
    assert victim_names(decision) == ["batch"]


def test_a_node_protected_pods_fill_is_no_candidate() -> None:
    cluster = snapshot(
        node("n1", cpu="1"),
        pod("system", namespace="kube-system", priority=0, cpu="1", node="n1"),
        pod("urgent", priority=100, cpu="1"),
    )
    args = PreemptionArgs(protected_namespaces=frozenset({"kube-system"}))
    decision = plan(cluster, "default/urgent", args=args)
    assert decision.verdict is Verdict.UNSCHEDULABLE
    assert ERR_NO_VICTIMS in decision.message


def test_victim_cap_prefers_a_node_within_it_and_refuses_the_rest() -> None:
    small = [pod(f"small-{i}", priority=0, cpu="500m", node="n1") for i in range(4)]
    cluster = snapshot(
        node("n1", cpu="2"),
        node("n2", cpu="2"),
        *small,
        pod("big", priority=50, cpu="2", node="n2"),
        pod("urgent", priority=100, cpu="2"),
    )
    only_n1 = snapshot(node("n1", cpu="2"), *small, pod("urgent", priority=100, cpu="2"))

    uncapped = plan(cluster, "default/urgent")
    capped = plan(cluster, "default/urgent", args=PreemptionArgs(max_victims=1))
    refused = plan(only_n1, "default/urgent", args=PreemptionArgs(max_victims=3))

    assert uncapped.nominated_node == "n1"  # minHighestPriority: priority 0 beats 50
    assert capped.nominated_node == "n2"
    assert victim_names(capped) == ["big"]
    assert refused.verdict is Verdict.UNSCHEDULABLE
    assert "needs 4 victims, more than the cap of 3" in refused.message


def _kept_answer_cluster() -> Any:
    """A 3-cpu node full of three 1-cpu pods; x has a budget with none to spare."""
    cluster = snapshot(
        node("n", cpu="3"),
        pod("x", cpu="1", node="n", labels={"app": "x"}, start=1),
        pod("y", cpu="1", node="n", start=2),
        pod("w", cpu="1", node="n", start=3),
        pdb("budget", match_labels={"app": "x"}),
        pod("p", cpu="2", priority=10),
        pod("q", cpu="1", priority=10),
    )
    cluster.warm()
    return cluster


def _decided(cluster: Any, name: str = "p") -> tuple[list[str], int]:
    decision = plan(cluster, f"default/{name}")
    assert decision.verdict is Verdict.PREEMPT
    return victim_names(decision), decision.num_pdb_violations


def test_a_kept_answer_is_not_reused_once_the_nodes_pods_change() -> None:
    cluster = _kept_answer_cluster()
    assert _decided(cluster) == (["y", "w"], 0)
    cluster.apply("Pod", pod("w", cpu="1", node="n", start=3, priority=20))
    assert _decided(cluster) == (["x", "y"], 1)


def test_a_kept_answer_is_not_reused_once_the_node_changes() -> None:
    cluster = _kept_answer_cluster()
    assert _decided(cluster) == (["y", "w"], 0)
    cluster.apply("Node", node("n", cpu="4"))
    assert _decided(cluster) == (["w"], 0)


def test_a_kept_answer_is_not_reused_once_a_budget_changes() -> None:
    cluster = _kept_answer_cluster()
    cluster.apply("Pod", pod("w", cpu="1", node="n", start=3, priority=20))
    assert _decided(cluster) == (["x", "y"], 1)
    cluster.apply("PodDisruptionBudget", pdb("budget", match_labels={"app": "x"}, allowed=1))
    assert _decided(cluster) == (["x", "y"], 0)


def test_a_kept_answer_serves_only_the_same_priority_and_request() -> None:
    cluster = _kept_answer_cluster()
    assert _decided(cluster) == (["y", "w"], 0)
    assert _decided(cluster, "q") == (["w"], 0)
    assert _decided(cluster) == (["y", "w"], 0)

"""Workload-aware preemption: pod groups in the snapshot, as victims and as preemptors.

Scenarios:
- the snapshot keeps PodGroups current (apply, replace, remove): a member's priority is its
  group's while the group exists, its own again once it is gone;
- a pod that joins a group is decided only as its group: `plan --pod` on it is Ineligible,
  naming the group (a PodGroup, or a label-named group when that setting is on);
- a single pod preempting takes a `disruptionMode: all` group whole, its pods on other nodes
  included, or not at all (a member in a protected namespace keeps the whole group);
- a group preemptor: Unsupported (never a victim) for topology constraints or a member's
  DRA claims, naming the feature; Ineligible when its own preemptionPolicy is Never, or, when
  unset, when a member says Never (its own policy wins over its members'); Unschedulable,
  with no victim, when fewer than minCount members (or none for basic) can be placed;
  FitsWithoutPreemption when every pending member fits as the cluster stands;
- numPDBViolations counts the violating pods of the units preempted, not the units;
- every potential victim of the cluster spends budgets, most important first, wherever it
  runs (upstream's FilterVictimsWithPDBViolation over all of them): a victim on a placement
  node whose budget a more important pod elsewhere spent violates it;
- a label-named group (a setting) is one unit as a victim, and a preemptor whose minCount is
  its members' size annotation;
- the decision is the same whatever the order of the snapshot's objects;
- an unknown group, and a malformed PodGroup, are input errors naming it.
"""

from __future__ import annotations

from typing import Any

import pytest

from preemptctl.preemption.decision import Verdict
from preemptctl.preemption.default_preemption import PreemptionArgs
from preemptctl.preemption.errors import PlannerInputError, UnknownPodGroupError
from preemptctl.preemption.planner import plan
from preemptctl.preemption.pod_group_preemption import plan_pod_group
from preemptctl.preemption.snapshot import ClusterSnapshot
from tests.preemption.builders import (
    container,
    listing,
    node,
    pdb,
    pod,
    pod_group,
    snapshot,
    victim_names,
)

Json = dict[str, Any]
KUEUE = "kueue.x-k8s.io/pod-group-name"
SIZE = "kueue.x-k8s.io/pod-group-total-count"


def members(decision: Any) -> set[str]:
    return {victim.name for victim in decision.victims}


# -- the snapshot --------------------------------------------------------------------------------


def test_a_members_priority_is_its_groups_while_the_group_exists() -> None:
    built = snapshot(
        node("n"), pod_group("g", priority=50), pod("m", node="n", priority=3, group="g")
    )
    member = built.pod_by_key("default/m")
    assert member is not None
    assert (member.priority, member.spec_priority) == (50, 3)


def test_a_group_priority_change_reprioritises_its_members() -> None:
    built = snapshot(
        node("n"), pod_group("g", priority=50), pod("m", node="n", priority=3, group="g")
    )
    built.apply("PodGroup", pod_group("g", priority=7))
    info = built.node("n")
    assert info is not None
    assert [p.priority for p in info.pods_by_importance()] == [7]


def test_a_removed_group_gives_its_members_their_own_priority_back() -> None:
    built = snapshot(
        node("n"), pod_group("g", priority=50), pod("m", node="n", priority=3, group="g")
    )
    built.remove("PodGroup", "default/g")
    member = built.pod_by_key("default/m")
    assert member is not None
    assert (member.priority, member.spec_priority, built.pod_groups) == (3, None, {})


def test_a_malformed_pod_group_is_an_input_error_naming_it() -> None:
    bad = pod_group("g", min_count=1)
    bad["spec"]["schedulingPolicy"] = {"gang": {"minCount": 0}}
    with pytest.raises(
        PlannerInputError, match=r"podgroup default/g: .*minCount must be at least 1"
    ):
        ClusterSnapshot.from_list(listing(node("n"), bad))


# -- a member asked about alone --------------------------------------------------------------------


def test_a_group_member_is_ineligible_alone_naming_its_group() -> None:
    built = snapshot(
        node("n", cpu="1"), pod_group("train", priority=100), pod("t", cpu="1", group="train")
    )
    decision = plan(built, "default/t")
    assert decision.verdict is Verdict.INELIGIBLE
    assert "pod group default/train" in decision.message


def test_a_label_group_member_is_ineligible_alone_when_the_setting_is_on() -> None:
    built = snapshot(node("n", cpu="1"), pod("t", cpu="1", priority=9, labels={KUEUE: "job"}))
    decision = plan(built, "default/t", args=PreemptionArgs(pod_group_label=KUEUE))
    assert (decision.verdict, "pod group default/job" in decision.message) == (
        Verdict.INELIGIBLE,
        True,
    )


# -- a single pod preempting whole groups --------------------------------------------------


def whole_group_cluster(*extra: Json) -> list[Json]:
    """node-1 holds one member of the `all` group gang (its other member is on node-2) and
    node-2 one plain pod; the preemptor needs a whole node."""
    return [
        node("node-1", cpu="2"),
        node("node-2", cpu="2"),
        node("node-3", cpu="2"),
        pod_group("gang", priority=1, disruption="all"),
        pod("g-1", cpu="2", node="node-1", group="gang", start=0),
        pod("g-2", cpu="1", node="node-3", group="gang", start=0),
        pod("plain", cpu="2", node="node-2", priority=5, start=0),
        pod("keeper", cpu="1", node="node-3", priority=100),
        *extra,
        pod("p", cpu="2", priority=10),
    ]


def test_a_single_pod_takes_a_whole_group_with_its_pods_on_other_nodes() -> None:
    decision = plan(snapshot(*whole_group_cluster()), "default/p")
    assert (decision.verdict, decision.nominated_node, victim_names(decision)) == (
        Verdict.PREEMPT,
        "node-1",
        ["g-1", "g-2"],
    )


def test_a_protected_member_keeps_its_whole_group_from_being_a_victim() -> None:
    protected = snapshot(
        node("node-1", cpu="2"),
        node("node-2", cpu="2"),
        node("node-3", cpu="2"),
        pod_group("gang", namespace="kube-system", priority=1, disruption="all"),
        pod("g-1", namespace="kube-system", cpu="2", node="node-1", group="gang"),
        pod("g-2", namespace="kube-system", cpu="2", node="node-3", group="gang"),
        pod("plain", cpu="2", node="node-2", priority=5),
        pod("p", cpu="2", priority=10),
    )
    decision = plan(
        protected, "default/p", args=PreemptionArgs(protected_namespaces=frozenset({"kube-system"}))
    )
    assert (decision.nominated_node, victim_names(decision)) == ("node-2", ["plain"])


# -- a group preempting ---------------------------------------------------------------------


def two_slot_cluster(*group: Json) -> list[Json]:
    return [
        node("node-1", cpu="1"),
        node("node-2", cpu="1"),
        pod("low-1", cpu="1", node="node-1", priority=1, start=0),
        pod("low-2", cpu="1", node="node-2", priority=2, start=0),
        *group,
    ]


def gang(*names: str, min_count: int | None = 2, **options: Any) -> list[Json]:
    policy = options.pop("member_policy", None)
    made = [pod_group("train", priority=100, min_count=min_count, **options)]
    made += [pod(n, cpu="1", group="train", preemption_policy=policy) for n in names]
    return made


def decide(*items: Json, args: PreemptionArgs | None = None) -> Any:
    return plan_pod_group(snapshot(*items), "default/train", args)


def test_a_gang_takes_what_it_needs_on_every_node() -> None:
    decision = decide(*two_slot_cluster(*gang("t-1", "t-2")))
    assert (decision.verdict, decision.nominations, members(decision)) == (
        Verdict.PREEMPT,
        {"default/t-1": "node-1", "default/t-2": "node-2"},
        {"low-1", "low-2"},
    )


def test_topology_constraints_are_unsupported_and_name_the_feature() -> None:
    decision = decide(*two_slot_cluster(*gang("t-1", topology=True)))
    assert (decision.verdict, decision.victims) == (Verdict.UNSUPPORTED, ())
    assert "topology constraints" in decision.message


def test_a_members_resource_claims_are_unsupported_and_name_the_feature() -> None:
    claimed = pod("t-1", cpu="1", group="train")
    claimed["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "gpu"}]
    decision = decide(*two_slot_cluster(pod_group("train", priority=100, min_count=1), claimed))
    assert (decision.verdict, "DRA resource claims" in decision.message) == (
        Verdict.UNSUPPORTED,
        True,
    )


def test_a_group_whose_own_policy_is_never_is_ineligible() -> None:
    decision = decide(*two_slot_cluster(*gang("t-1", "t-2", preemption_policy="Never")))
    assert (decision.verdict, decision.victims) == (Verdict.INELIGIBLE, ())


def test_without_its_own_policy_a_member_saying_never_makes_the_group_ineligible() -> None:
    decision = decide(*two_slot_cluster(*gang("t-1", "t-2", member_policy="Never")))
    assert decision.verdict is Verdict.INELIGIBLE


def test_the_groups_own_policy_wins_over_its_members() -> None:
    items = gang("t-1", "t-2", member_policy="Never", preemption_policy="PreemptLowerPriority")
    assert decide(*two_slot_cluster(*items)).verdict is Verdict.PREEMPT


def test_fewer_than_min_count_placeable_is_unschedulable_with_no_victim() -> None:
    decision = decide(*two_slot_cluster(*gang("t-1", "t-2", "t-3", min_count=3)))
    assert (decision.verdict, decision.victims, decision.nominations) == (
        Verdict.UNSCHEDULABLE,
        (),
        {},
    )


def test_a_basic_group_none_of_which_fits_is_unschedulable() -> None:
    items = [node("node-1", cpu="1"), pod("big", cpu="1", node="node-1", priority=500)]
    decision = decide(*items, *gang("t-1", min_count=None))
    assert (decision.verdict, decision.victims) == (Verdict.UNSCHEDULABLE, ())


def test_a_group_that_fits_as_the_cluster_stands_evicts_nobody() -> None:
    items = [node("node-1", cpu="2"), node("node-2", cpu="2")]
    decision = decide(*items, *gang("t-1", "t-2"))
    assert (decision.verdict, decision.victims, decision.rationale["fits"]) == (
        Verdict.FITS_WITHOUT_PREEMPTION,
        (),
        {"default/t-1": "node-1", "default/t-2": "node-2"},
    )


def test_pdb_violations_count_the_violating_pods_of_preempted_units() -> None:
    items = [
        node("node-1", cpu="2"),
        node("node-2", cpu="2"),
        pod_group("victims", priority=1, disruption="all"),
        pdb("budget", match_labels={"app": "v"}, allowed=0),
        pod("v-1", cpu="2", node="node-1", group="victims", labels={"app": "v"}),
        pod("v-2", cpu="2", node="node-2", group="victims", labels={"app": "v"}),
    ]
    decision = decide(*items, *gang("t-1", min_count=1))
    assert (members(decision), decision.num_pdb_violations, len(decision.units)) == (
        {"v-1", "v-2"},
        2,
        1,
    )


def budget_spent_elsewhere() -> list[Json]:
    """node-a holds `x` (the most important potential victim, started first), node-b (where the
    one-pod gang is placed: it has the most room left) holds `y-kept` (started second) and
    `y-budget` (started last); `x` and `y-budget` share a budget that allows one eviction."""
    return [
        node("node-a", cpu="1"),
        node("node-b", cpu="2"),
        pdb("budget", match_labels={"app": "v"}, allowed=1),
        pod("x", cpu="1", node="node-a", priority=1, start=0, labels={"app": "v"}),
        pod("y-kept", cpu="1", node="node-b", priority=1, start=1),
        pod("y-budget", cpu="1", node="node-b", priority=1, start=2, labels={"app": "v"}),
        *gang("t-1", min_count=1),
    ]


def test_every_potential_victim_spends_budgets_in_importance_order_wherever_it_runs() -> None:
    """Upstream sorts every potential victim of the cluster and runs
    FilterVictimsWithPDBViolation over them all: `x`, on a node no member is placed on, spends
    the budget first, so `y-budget` violates, is reprieved first and stays; `y-kept` goes."""
    decision = decide(*budget_spent_elsewhere())
    assert (decision.nominations, members(decision), decision.num_pdb_violations) == (
        {"default/t-1": "node-b"},
        {"y-kept"},
        0,
    )


def test_a_pod_elsewhere_that_stops_another_from_spending_a_shared_budget_counts() -> None:
    """`z` spends budget `a` (allows one); `w`, matching `a` and `b`, then exceeds `a` and so
    stops (upstream's podIsViolating) without spending `b`; `y-budget` spends `b` within it
    and is reprieved after the more important `y-kept`. Without `z` in the walk, `w` would
    have spent `b` and made `y-budget` violate, and stay."""
    items = [
        node("node-a", cpu="1"),
        node("node-b", cpu="2"),
        node("node-c", cpu="1"),
        pdb("a", match_labels={"a": "1"}, allowed=1),
        pdb("b", match_labels={"app": "v"}, allowed=1),
        pod("z", cpu="1", node="node-c", priority=1, start=0, labels={"a": "1"}),
        pod("w", cpu="1", node="node-a", priority=1, start=1, labels={"a": "1", "app": "v"}),
        pod("y-kept", cpu="1", node="node-b", priority=1, start=2),
        pod("y-budget", cpu="1", node="node-b", priority=1, start=3, labels={"app": "v"}),
        *gang("t-1", min_count=1),
    ]
    decision = decide(*items)
    assert (decision.nominations, members(decision), decision.num_pdb_violations) == (
        {"default/t-1": "node-b"},
        {"y-budget"},
        0,
    )


def test_a_victim_whose_budget_another_node_spent_counts_as_a_violation() -> None:
    items = [
        node("node-a", cpu="1"),
        node("node-b", cpu="2"),
        pdb("budget", match_labels={"app": "v"}, allowed=1),
        pod("x", cpu="1", node="node-a", priority=1, start=0, labels={"app": "v"}),
        pod("y", cpu="2", node="node-b", priority=1, start=1, labels={"app": "v"}),
        *gang("t-1", min_count=1),
    ]
    decision = decide(*items)
    assert (decision.nominations, members(decision), decision.num_pdb_violations) == (
        {"default/t-1": "node-b"},
        {"y"},
        1,
    )


def test_a_label_named_group_is_one_victim_unit() -> None:
    items = [
        node("node-1", cpu="1"),
        node("node-2", cpu="1"),
        pod("k-1", cpu="1", node="node-1", priority=1, labels={KUEUE: "job"}),
        pod("k-2", cpu="1", node="node-2", priority=1, labels={KUEUE: "job"}),
    ]
    decision = decide(*items, *gang("t-1", min_count=1), args=PreemptionArgs(pod_group_label=KUEUE))
    assert (members(decision), [u.unit for u in decision.units]) == (
        {"k-1", "k-2"},
        ["labelGroup default/job"],
    )


def test_a_label_named_group_preempts_with_its_size_annotation_as_min_count() -> None:
    job = [
        pod("j-1", cpu="1", priority=100, labels={KUEUE: "train"}, annotations={SIZE: "2"}),
        pod("j-2", cpu="1", priority=100, labels={KUEUE: "train"}, annotations={SIZE: "2"}),
    ]
    built = ClusterSnapshot.from_list(listing(*two_slot_cluster(*job)), kept_annotations=(SIZE,))
    args = PreemptionArgs(pod_group_label=KUEUE, pod_group_size_annotation=SIZE)
    decision = plan_pod_group(built, "default/train", args)
    assert (decision.verdict, decision.rationale["group"]["minCount"], members(decision)) == (
        Verdict.PREEMPT,
        2,
        {"low-1", "low-2"},
    )


def test_the_decision_does_not_depend_on_object_order() -> None:
    items = [
        *two_slot_cluster(*gang("t-1", "t-2", min_count=1)),
        node("node-3", cpu="1"),
        pod("low-3", cpu="1", node="node-3", priority=2, start=0),
    ]
    first = plan_pod_group(snapshot(*items), "default/train").to_json()
    for seed in range(5):
        again = plan_pod_group(snapshot(*items, shuffle_seed=seed), "default/train").to_json()
        assert again == first


def test_an_unknown_group_is_an_input_error() -> None:
    with pytest.raises(UnknownPodGroupError, match="pod group default/nope is not in the snapshot"):
        plan_pod_group(snapshot(node("n")), "default/nope")


def test_the_contract_json_has_exactly_its_fields() -> None:
    decided = decide(*two_slot_cluster(*gang("t-1", "t-2"))).to_json()
    assert set(decided) == {
        "podGroup",
        "status",
        "nominations",
        "victims",
        "numPDBViolations",
        "message",
        "rationale",
    }
    assert decided["victims"][0] == {
        "namespace": "default",
        "name": "low-2",
        "uid": "uid-default-low-2",
        "priority": 2,
    }


def test_a_member_with_host_ports_is_placed_where_its_port_is_free() -> None:
    items = [
        node("node-1", cpu="2"),
        node("node-2", cpu="2"),
        pod(
            "web",
            cpu="1",
            node="node-1",
            priority=500,
            containers=[container("1", host_ports=[80])],
        ),
        pod("low", cpu="2", node="node-2", priority=1),
        pod_group("train", priority=100, min_count=1),
        pod("t-1", group="train", containers=[container("1", host_ports=[80])]),
    ]
    decision = decide(*items)
    assert (decision.nominations, members(decision)) == ({"default/t-1": "node-2"}, {"low"})

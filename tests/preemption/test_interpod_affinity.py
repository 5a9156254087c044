"""InterPodAffinity: the filter as kube-scheduler judges it, and what preemption does with it.

Scenarios (in our words, after upstream's interpodaffinity/filtering_test.go and
defaultpreemption/default_preemption_test.go):
- required affinity is met by a matching pod in the node's domain (hostname or zone); a node
  without one is UnschedulableAndUnresolvable, so is a node lacking the topology label;
- the first pod of a series (no pod anywhere matches, the pod matches its own terms) may go
  anywhere that has the topology label; a pod not matching its own terms may not;
- required anti-affinity against a pod in the node's domain is Unschedulable;
- an existing pod's required anti-affinity against the incoming pod is Unschedulable there
  (symmetry), in the existing pod's namespace rules, not the incoming pod's;
- namespaces: by default the term's own namespace; `namespaces` names others; a
  namespaceSelector selects by the Namespace objects' labels, and an empty one selects all;
- matchLabelKeys and mismatchLabelKeys take the incoming pod's own label values;
- preemption: a low-priority pod whose anti-affinity rejects the preemptor is its only victim
  (upstream "pod with anti-affinity is preempted"); anti-affinity against a higher-priority
  pod leaves no candidate; an affinity mismatch is never preempted for; affinity met only by
  lower-priority pods on the node is lost when the dry run removes them (as upstream);
- the counts kept between decisions follow pods that move or go and nodes relabelled;
- nominated pods of higher priority count (their anti-affinity rejects the preemptor), and
  a node passes only if it passes both with and without them.
"""

from __future__ import annotations

from typing import Any

from preemptctl.preemption.decision import Verdict
from preemptctl.preemption.filters import Code, Status
from preemptctl.preemption.find_nodes_that_fit import filter_node, filter_nodes
from preemptctl.preemption.pod_constraints import (
    ERR_AFFINITY_RULES,
    ERR_ANTI_AFFINITY_RULES,
    ERR_EXISTING_ANTI_AFFINITY,
    INTER_POD_AFFINITY,
)
from tests.preemption.builders import decide, namespace, node, pod, snapshot, term, victim_names

Json = dict[str, Any]
ZONE = "topology.kubernetes.io/zone"


def zoned(name: str, zone: str, **kwargs: Any) -> Json:
    return node(name, labels={"kubernetes.io/hostname": name, ZONE: zone}, **kwargs)


def status_on(node_name: str, *items: Json, preemptor: str = "p") -> Status:
    cluster = snapshot(*items)
    incoming = cluster.pod_by_key(f"default/{preemptor}")
    info = cluster.node(node_name)
    assert incoming is not None and info is not None
    return filter_node(cluster, incoming, info)


AFFINITY_FAILS = Status(Code.UNRESOLVABLE, (ERR_AFFINITY_RULES,))
ANTI_FAILS = Status(Code.UNSCHEDULABLE, (ERR_ANTI_AFFINITY_RULES,))
EXISTING_FAILS = Status(Code.UNSCHEDULABLE, (ERR_EXISTING_ANTI_AFFINITY,))
FITS = Status(Code.SUCCESS)

WANTS_DB = term(match_labels={"app": "db"})
WANTS_DB_ZONE = term(ZONE, match_labels={"app": "db"})


# -- required affinity ------------------------------------------------------------------------


def test_affinity_is_met_by_a_matching_pod_on_the_node() -> None:
    items = (
        node("n1"),
        pod("db", node="n1", labels={"app": "db"}),
        pod("p", pod_affinity=[WANTS_DB]),
    )
    assert status_on("n1", *items) == FITS


def test_affinity_fails_unresolvably_where_no_matching_pod_is() -> None:
    items = (
        node("n1"),
        node("n2"),
        pod("db", node="n1", labels={"app": "db"}),
        pod("p", pod_affinity=[WANTS_DB]),
    )
    got = status_on("n2", *items)
    assert got == AFFINITY_FAILS
    assert got.plugin == INTER_POD_AFFINITY


def test_affinity_by_zone_is_met_by_a_pod_on_another_node_of_the_zone() -> None:
    items = (
        zoned("n1", "a"),
        zoned("n2", "a"),
        zoned("n3", "b"),
        pod("db", node="n1", labels={"app": "db"}),
        pod("p", pod_affinity=[WANTS_DB_ZONE]),
    )
    assert status_on("n2", *items) == FITS
    assert status_on("n3", *items) == AFFINITY_FAILS


def test_a_node_without_the_topology_label_fails_affinity() -> None:
    items = (
        node("n1", labels={"kubernetes.io/hostname": "n1"}),
        pod("db", node="n1", labels={"app": "db"}),
        pod("p", pod_affinity=[WANTS_DB_ZONE]),
    )
    assert status_on("n1", *items) == AFFINITY_FAILS


def test_the_first_pod_of_a_series_matching_its_own_terms_may_go_anywhere() -> None:
    items = (node("n1"), pod("p", labels={"app": "db"}, pod_affinity=[WANTS_DB]))
    assert status_on("n1", *items) == FITS


def test_a_pod_not_matching_its_own_terms_needs_a_matching_pod() -> None:
    items = (node("n1"), pod("p", labels={"app": "web"}, pod_affinity=[WANTS_DB]))
    assert status_on("n1", *items) == AFFINITY_FAILS


def test_a_pod_matching_only_one_of_two_terms_does_not_count() -> None:
    both = [WANTS_DB, term(match_labels={"tier": "cache"})]
    items = (
        node("n1"),
        pod("db", node="n1", labels={"app": "db"}),
        pod("cache", node="n1", labels={"tier": "cache"}),
        pod("p", pod_affinity=both),
    )
    assert status_on("n1", *items) == AFFINITY_FAILS


# -- required anti-affinity ---------------------------------------------------------------------


def test_anti_affinity_against_a_pod_on_the_node_is_unschedulable() -> None:
    items = (
        node("n1"),
        pod("db", node="n1", labels={"app": "db"}),
        pod("p", pod_anti_affinity=[WANTS_DB]),
    )
    assert status_on("n1", *items) == ANTI_FAILS


def test_anti_affinity_by_zone_rejects_every_node_of_that_zone() -> None:
    items = (
        zoned("n1", "a"),
        zoned("n2", "a"),
        zoned("n3", "b"),
        pod("db", node="n1", labels={"app": "db"}),
        pod("p", pod_anti_affinity=[WANTS_DB_ZONE]),
    )
    assert status_on("n2", *items) == ANTI_FAILS
    assert status_on("n3", *items) == FITS


def test_anti_affinity_ignores_a_node_without_the_topology_label() -> None:
    items = (
        node("n1", labels={}),
        pod("db", node="n1", labels={"app": "db"}),
        pod("p", pod_anti_affinity=[WANTS_DB_ZONE]),
    )
    assert status_on("n1", *items) == FITS


def test_an_existing_pods_anti_affinity_rejects_the_incoming_pod() -> None:
    items = (
        node("n1"),
        node("n2"),
        pod("guard", node="n1", pod_anti_affinity=[term(match_labels={"app": "web"})]),
        pod("p", labels={"app": "web"}),
    )
    assert status_on("n1", *items) == EXISTING_FAILS
    assert status_on("n2", *items) == FITS


def test_an_existing_pods_anti_affinity_looks_in_its_own_namespace() -> None:
    items = (
        node("n1"),
        pod(
            "guard",
            namespace="other",
            node="n1",
            pod_anti_affinity=[term(match_labels={"app": "web"})],
        ),
        pod("p", labels={"app": "web"}),
    )
    assert status_on("n1", *items) == FITS


# -- namespaces and label keys ------------------------------------------------------------------


def test_affinity_looks_in_the_pods_own_namespace_by_default() -> None:
    items = (
        node("n1"),
        pod("db", namespace="data", node="n1", labels={"app": "db"}),
        pod("p", pod_affinity=[WANTS_DB]),
    )
    assert status_on("n1", *items) == AFFINITY_FAILS


def test_affinity_looks_in_the_namespaces_it_names() -> None:
    named = term(match_labels={"app": "db"}, namespaces=["data"])
    items = (
        node("n1"),
        pod("db", namespace="data", node="n1", labels={"app": "db"}),
        pod("p", pod_affinity=[named]),
    )
    assert status_on("n1", *items) == FITS


def test_a_namespace_selector_selects_by_the_namespaces_labels() -> None:
    chosen = term(match_labels={"app": "db"}, namespace_selector={"matchLabels": {"team": "data"}})
    items = (
        namespace("default"),
        namespace("data", {"team": "data"}),
        namespace("misc", {"team": "misc"}),
        node("n1"),
        node("n2"),
        pod("db", namespace="data", node="n1", labels={"app": "db"}),
        pod("db2", namespace="misc", node="n2", labels={"app": "db"}),
        pod("p", pod_anti_affinity=[chosen]),
    )
    assert status_on("n1", *items) == ANTI_FAILS
    assert status_on("n2", *items) == FITS


def test_an_empty_namespace_selector_selects_every_namespace() -> None:
    everywhere = term(match_labels={"app": "db"}, namespace_selector={})
    items = (
        namespace("default"),
        namespace("misc"),
        node("n1"),
        pod("db", namespace="misc", node="n1", labels={"app": "db"}),
        pod("p", pod_anti_affinity=[everywhere]),
    )
    assert status_on("n1", *items) == ANTI_FAILS


def test_match_label_keys_take_the_incoming_pods_value() -> None:
    same_release = term(match_labels={"app": "web"}, match_label_keys=["release"])
    items = (
        node("n1"),
        node("n2"),
        pod("old", node="n1", labels={"app": "web", "release": "v1"}),
        pod("new", node="n2", labels={"app": "web", "release": "v2"}),
        pod("p", labels={"app": "web", "release": "v2"}, pod_anti_affinity=[same_release]),
    )
    assert status_on("n1", *items) == FITS
    assert status_on("n2", *items) == ANTI_FAILS


def test_mismatch_label_keys_take_the_other_values() -> None:
    other_tenant = term(match_labels={}, mismatch_label_keys=["tenant"])
    items = (
        node("n1"),
        node("n2"),
        pod("a", node="n1", labels={"tenant": "a"}),
        pod("b", node="n2", labels={"tenant": "b"}),
        pod("p", labels={"tenant": "a"}, pod_anti_affinity=[other_tenant]),
    )
    assert status_on("n1", *items) == FITS
    assert status_on("n2", *items) == ANTI_FAILS


# -- preemption ------------------------------------------------------------------------------


def test_the_pod_whose_anti_affinity_rejects_the_preemptor_is_the_only_victim() -> None:
    decision = decide(
        node("node1", cpu="4"),
        node("node2", cpu="4"),
        pod(
            "p1.1",
            node="node1",
            priority=1,
            cpu="1",
            labels={"foo": ""},
            pod_anti_affinity=[term(expressions=[{"key": "foo", "operator": "Exists"}])],
        ),
        pod("p1.2", node="node1", priority=50, cpu="1"),
        pod("p1.3", node="node1", priority=100, cpu="1"),
        pod("p2", node="node2", priority=100, cpu="4"),
        pod("p", priority=100, cpu="1", labels={"foo": ""}),
        preemptor="p",
    )
    assert decision.verdict is Verdict.PREEMPT
    assert decision.nominated_node == "node1"
    assert victim_names(decision) == ["p1.1"]


def test_anti_affinity_against_a_higher_priority_pod_leaves_no_candidate() -> None:
    decision = decide(
        node("n1", cpu="2"),
        pod("boss", node="n1", priority=200, cpu="1", labels={"app": "db"}),
        pod("low", node="n1", priority=1, cpu="1"),
        pod("p", priority=100, cpu="1", pod_anti_affinity=[WANTS_DB]),
        preemptor="p",
    )
    assert decision.verdict is Verdict.UNSCHEDULABLE
    assert ERR_ANTI_AFFINITY_RULES in decision.message


def test_an_affinity_mismatch_is_never_preempted_for() -> None:
    decision = decide(
        node("n1", cpu="2"),
        pod("low", node="n1", priority=1, cpu="1"),
        pod("p", priority=100, cpu="1", pod_affinity=[WANTS_DB]),
        preemptor="p",
    )
    assert decision.verdict is Verdict.UNSCHEDULABLE
    assert decision.rationale.unresolvable == {ERR_AFFINITY_RULES: ["n1"]}


def test_affinity_met_only_by_lower_priority_pods_is_lost_in_the_dry_run() -> None:
    decision = decide(
        node("n1", cpu="2"),
        pod("db", node="n1", priority=1, cpu="1", labels={"app": "db"}),
        pod("filler", node="n1", priority=1, cpu="1"),
        pod("p", priority=100, cpu="1", pod_affinity=[WANTS_DB]),
        preemptor="p",
    )
    assert decision.verdict is Verdict.UNSCHEDULABLE
    assert ERR_AFFINITY_RULES in decision.message


def test_the_dry_run_restores_the_state_between_nodes() -> None:
    # Removing the db pod on n1 must not make n2 look free of it.
    decision = decide(
        zoned("n1", "a", cpu="1"),
        zoned("n2", "a", cpu="1"),
        pod("db", node="n1", priority=1, cpu="1", labels={"app": "db"}),
        pod("keeper", node="n2", priority=1, cpu="1"),
        pod("p", priority=100, cpu="1", pod_anti_affinity=[WANTS_DB_ZONE]),
        preemptor="p",
    )
    assert decision.verdict is Verdict.PREEMPT
    assert (decision.nominated_node, victim_names(decision)) == ("n1", ["db"])


def test_a_nominated_higher_priority_pods_anti_affinity_rejects_the_preemptor() -> None:
    decision = decide(
        node("n1", cpu="4"),
        node("n2", cpu="1"),
        pod("low", node="n2", priority=1, cpu="1"),
        pod(
            "coming",
            priority=200,
            nominated="n1",
            pod_anti_affinity=[term(match_labels={"app": "web"})],
        ),
        pod("p", priority=100, cpu="1", labels={"app": "web"}),
        preemptor="p",
    )
    assert decision.verdict is Verdict.PREEMPT
    assert (decision.nominated_node, victim_names(decision)) == ("n2", ["low"])
    assert decision.rationale.filtered[ERR_EXISTING_ANTI_AFFINITY] == 1


def test_a_node_must_pass_also_without_the_nominated_pods() -> None:
    # The only db pod is nominated to n1: with it the preemptor's affinity holds, without it
    # not (and the preemptor is no db itself), so n1 does not pass.
    items = (
        node("n1"),
        pod("db", priority=200, nominated="n1", labels={"app": "db"}),
        pod("p", priority=100, pod_affinity=[WANTS_DB]),
    )
    assert status_on("n1", *items) == AFFINITY_FAILS


def test_decisions_follow_pods_and_labels_that_change_between_them() -> None:
    # The index keeps counts between decisions; each change must show in the next one.
    guard = [term(ZONE, match_labels={"app": "web"})]
    cluster = snapshot(
        zoned("n1", "a"),
        zoned("n2", "b"),
        pod("guard", node="n1", pod_anti_affinity=guard),
        pod("p", labels={"app": "web"}),
    )
    incoming = cluster.pod_by_key("default/p")
    assert incoming is not None

    def fits() -> dict[str, bool]:
        return {name: status.ok for name, status in filter_nodes(cluster, incoming).items()}

    assert fits() == {"n1": False, "n2": True}
    cluster.apply("Pod", pod("guard", node="n2", pod_anti_affinity=guard))
    assert fits() == {"n1": True, "n2": False}
    cluster.apply("Node", zoned("n1", "b"))
    assert fits() == {"n1": False, "n2": False}
    cluster.remove("Pod", "uid-default-guard")
    assert fits() == {"n1": True, "n2": True}

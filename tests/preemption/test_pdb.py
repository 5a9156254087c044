"""FilterVictimsWithPDBViolation for pods: which evictions would exceed a PodDisruptionBudget.

Pods are taken in the order given (most important first); each matching budget is spent
once per pod, in the budgets' order, and a pod whose eviction takes any budget below zero is
violating and spends no further budget (upstream's `podIsViolating`, which its newest
SelectVictimsOnNode uses for every victim; the older `filterPodsWithPDBViolation` went on
spending the rest).

Scenarios:
- a budget of one lets the first matching pod go and makes the second violating;
- only budgets in the pod's namespace count;
- an empty selector and a missing selector match nothing; an invalid selector matches
  nothing; a pod without labels matches nothing;
- matchExpressions select as label selectors do;
- a pod already in a budget's `disruptedPods` spends nothing;
- a pod matched by two budgets spends both, and violates if either runs out;
- a pod stops spending at the first budget it exceeds: a later budget it matches is left for
  the next pod;
- budgets are counted afresh for each node.
"""

from __future__ import annotations

from typing import Any

from preemptctl.preemption.default_preemption import (
    filter_pods_with_pdb_violation,
    select_victims_on_node,
)
from tests.preemption.builders import node, pdb, pod, requirement, snapshot

Json = dict[str, Any]
DB = {"app": "db"}


def split(*items: Json) -> tuple[list[str], list[str]]:
    """Violating and non-violating pod names, the pods taken in the order given."""
    cluster = snapshot(*items)
    pods = [
        cluster.pod_by_key(f"{i['metadata']['namespace']}/{i['metadata']['name']}")
        for i in items
        if i["kind"] == "Pod"
    ]
    assert all(p is not None for p in pods)
    violating, non_violating = filter_pods_with_pdb_violation(pods, cluster)  # type: ignore[arg-type]
    return [p.name for p in violating], [p.name for p in non_violating]


def test_a_budget_of_one_lets_one_pod_go() -> None:
    got = split(pdb("db", match_labels=DB, allowed=1), pod("a", labels=DB), pod("b", labels=DB))
    assert got == (["b"], ["a"])


def test_a_budget_of_zero_makes_every_matching_pod_violating() -> None:
    got = split(pdb("db", match_labels=DB, allowed=0), pod("a", labels=DB), pod("x"))
    assert got == (["a"], ["x"])


def test_only_budgets_in_the_pods_namespace_count() -> None:
    got = split(pdb("db", namespace="other", match_labels=DB, allowed=0), pod("a", labels=DB))
    assert got == ([], ["a"])


def test_an_empty_selector_matches_nothing() -> None:
    got = split(pdb("all", selector={}, allowed=0), pod("a", labels=DB))
    assert got == ([], ["a"])


def test_a_missing_selector_matches_nothing() -> None:
    got = split(pdb("none", no_selector=True, allowed=0), pod("a", labels=DB))
    assert got == ([], ["a"])


def test_an_invalid_selector_matches_nothing() -> None:
    bad = {"matchExpressions": [requirement("app", "Like", "db")]}
    got = split(pdb("bad", selector=bad, allowed=0), pod("a", labels=DB))
    assert got == ([], ["a"])


def test_a_pod_without_labels_matches_nothing() -> None:
    absent = {"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}
    got = split(pdb("absent", selector=absent, allowed=0), pod("bare"))
    assert got == ([], ["bare"])


def test_match_expressions_select_pods() -> None:
    selector = {"matchExpressions": [requirement("app", "In", "db", "cache")]}
    got = split(
        pdb("stateful", selector=selector, allowed=0),
        pod("cache", labels={"app": "cache"}),
        pod("web", labels={"app": "web"}),
    )
    assert got == (["cache"], ["web"])


def test_a_pod_already_disrupted_spends_no_budget() -> None:
    got = split(
        pdb("db", match_labels=DB, allowed=1, disrupted=["a"]),
        pod("a", labels=DB),
        pod("b", labels=DB),
        pod("c", labels=DB),
    )
    assert got == (["c"], ["a", "b"])


def test_a_pod_matched_by_two_budgets_violates_if_either_runs_out() -> None:
    got = split(
        pdb("generous", match_labels=DB, allowed=5),
        pdb("strict", match_labels={"tier": "gold"}, allowed=0),
        pod("a", labels={**DB, "tier": "gold"}),
    )
    assert got == (["a"], [])


def test_a_pod_matched_by_two_budgets_spends_both() -> None:
    got = split(
        pdb("db", match_labels=DB, allowed=1),
        pdb("gold", match_labels={"tier": "gold"}, allowed=1),
        pod("both", labels={**DB, "tier": "gold"}),
        pod("gold-only", labels={"tier": "gold"}),
    )
    assert got == (["gold-only"], ["both"])


def test_a_pod_stops_spending_at_the_first_budget_it_exceeds() -> None:
    got = split(
        pdb("a-strict", match_labels={"tier": "gold"}, allowed=0),
        pdb("b-shared", match_labels=DB, allowed=1),
        pod("both", labels={**DB, "tier": "gold"}),
        pod("later", labels=DB),
    )
    assert got == (["both"], ["later"])


def test_budgets_are_counted_afresh_for_each_node() -> None:
    cluster = snapshot(
        pdb("db", match_labels=DB, allowed=1),
        node("n1", cpu="1"),
        node("n2", cpu="1"),
        pod("db-1", cpu="1", node="n1", labels=DB),
        pod("db-2", cpu="1", node="n2", labels=DB),
        pod("p", cpu="1", priority=10),
    )
    preemptor = cluster.pod_by_key("default/p")
    assert preemptor is not None
    for name in ("n1", "n2"):
        info = cluster.node(name)
        assert info is not None
        victims, violations, status = select_victims_on_node(cluster, preemptor, info)
        assert status.ok and len(victims) == 1
        assert violations == 0

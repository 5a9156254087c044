"""PodTopologySpread (DoNotSchedule): the filter as kube-scheduler judges it, and preemption.

Scenarios (in our words, after upstream's podtopologyspread/filtering_test.go and
defaultpreemption/default_preemption_test.go):
- a node passes while its domain's matching pods plus the pod itself, minus the least loaded
  domain's, stay within maxSkew; beyond it is Unschedulable;
- a node without the topology label is UnschedulableAndUnresolvable ("missing required label");
- a pod its own selector does not select does not count itself;
- fewer eligible domains than minDomains make the global minimum zero;
- nodeAffinityPolicy Honor (default) leaves nodes the pod's node selector rejects out of the
  domains, Ignore counts them; nodeTaintsPolicy Honor leaves untolerated tainted nodes out,
  Ignore (default) counts them;
- only pods of the pod's namespace count, terminating pods do not, and matchLabelKeys take
  the pod's own label values; yet removing a terminating victim lowers its domain's count
  (upstream's RemovePod does not look at deletion);
- whenUnsatisfiable ScheduleAnyway only scores: it never rejects a node;
- preemption: upstream's "preemption to resolve pod topology spread filter failure" — the
  dry run removes pods (RemovePod), reprieves those the spread still allows, and finds one
  victim on each zone-1 node.
"""

from __future__ import annotations

from typing import Any

from preemptctl.preemption.decision import Verdict
from preemptctl.preemption.default_preemption import dry_run_preemption
from preemptctl.preemption.filters import Code, Status
from preemptctl.preemption.find_nodes_that_fit import filter_node, filter_nodes
from preemptctl.preemption.pod_constraints import ERR_SPREAD, ERR_SPREAD_LABEL, SPREAD
from tests.preemption.builders import decide, node, pod, snapshot, spread, taint

Json = dict[str, Any]
FOO = {"foo": ""}
SKEWED = Status(Code.UNSCHEDULABLE, (ERR_SPREAD,))
FITS = Status(Code.SUCCESS)


def zoned(name: str, zone: str, **kwargs: Any) -> Json:
    return node(name, labels={"hostname": name, "zone": zone}, **kwargs)


def status_on(node_name: str, *items: Json, preemptor: str = "p") -> Status:
    cluster = snapshot(*items)
    incoming = cluster.pod_by_key(f"default/{preemptor}")
    info = cluster.node(node_name)
    assert incoming is not None and info is not None
    return filter_node(cluster, incoming, info)


TWO_ZONES = (
    zoned("a1", "a"),
    zoned("a2", "a"),
    zoned("b1", "b"),
    pod("x", node="a1", labels=FOO),
    pod("y", node="a2", labels=FOO),
)


def test_a_node_within_max_skew_passes() -> None:
    items = (*TWO_ZONES, pod("p", labels=FOO, spread=[spread(match_labels=FOO)]))
    assert status_on("b1", *items) == FITS


def test_a_node_beyond_max_skew_is_unschedulable() -> None:
    items = (*TWO_ZONES, pod("p", labels=FOO, spread=[spread(match_labels=FOO)]))
    got = status_on("a1", *items)
    assert got == SKEWED
    assert got.plugin == SPREAD


def test_a_larger_max_skew_allows_more() -> None:
    items = (*TWO_ZONES, pod("p", labels=FOO, spread=[spread(max_skew=3, match_labels=FOO)]))
    assert status_on("a1", *items) == FITS


def test_a_node_without_the_topology_label_is_unresolvable() -> None:
    items = (*TWO_ZONES, node("bare"), pod("p", labels=FOO, spread=[spread(match_labels=FOO)]))
    assert status_on("bare", *items) == Status(Code.UNRESOLVABLE, (ERR_SPREAD_LABEL,))


def test_a_pod_its_selector_does_not_select_does_not_count_itself() -> None:
    items = (*TWO_ZONES, pod("p", spread=[spread(max_skew=2, match_labels=FOO)]))
    assert status_on("a1", *items) == FITS


def test_fewer_domains_than_min_domains_make_the_minimum_zero() -> None:
    items = (
        zoned("a1", "a"),
        zoned("b1", "b"),
        pod("x", node="a1", labels=FOO),
        pod("y", node="b1", labels=FOO),
        pod("p", labels=FOO, spread=[spread(match_labels=FOO, min_domains=3)]),
    )
    assert status_on("a1", *items) == SKEWED
    enough = (*items[:4], pod("p", labels=FOO, spread=[spread(match_labels=FOO, min_domains=2)]))
    assert status_on("a1", *enough) == FITS


def test_node_affinity_policy_honor_leaves_rejected_nodes_out_of_the_domains() -> None:
    # Zone c has no matching pod, but the pod's node selector rejects it: with Honor the
    # least loaded counted domain is b (1 pod), with Ignore it is c (0 pods).
    base = (
        node("a1", labels={"zone": "a", "pool": "x"}),
        node("b1", labels={"zone": "b", "pool": "x"}),
        node("c1", labels={"zone": "c", "pool": "y"}),
        pod("x1", node="a1", labels=FOO),
        pod("x2", node="a1", labels=FOO),
        pod("y1", node="b1", labels=FOO),
    )
    honor = pod("p", labels=FOO, node_selector={"pool": "x"}, spread=[spread(match_labels=FOO)])
    ignore = pod(
        "p",
        labels=FOO,
        node_selector={"pool": "x"},
        spread=[spread(match_labels=FOO, node_affinity_policy="Ignore")],
    )
    assert status_on("b1", *base, honor) == FITS
    assert status_on("b1", *base, ignore) == SKEWED


def test_node_taints_policy_honor_leaves_untolerated_nodes_out_of_the_domains() -> None:
    base = (
        zoned("a1", "a"),
        zoned("b1", "b"),
        zoned("c1", "c", taints=[taint("dedicated")]),
        pod("x1", node="a1", labels=FOO),
        pod("y1", node="b1", labels=FOO),
    )
    ignore = pod("p", labels=FOO, spread=[spread(match_labels=FOO)])
    honor = pod("p", labels=FOO, spread=[spread(match_labels=FOO, node_taints_policy="Honor")])
    assert status_on("b1", *base, ignore) == SKEWED
    assert status_on("b1", *base, honor) == FITS


def test_only_pods_of_the_same_namespace_count() -> None:
    items = (
        zoned("a1", "a"),
        zoned("b1", "b"),
        pod("x", namespace="other", node="a1", labels=FOO),
        pod("p", labels=FOO, spread=[spread(match_labels=FOO)]),
    )
    assert status_on("a1", *items) == FITS


def test_terminating_pods_do_not_count() -> None:
    items = (
        zoned("a1", "a"),
        zoned("b1", "b"),
        pod("x", node="a1", labels=FOO, terminating=True),
        pod("p", labels=FOO, spread=[spread(match_labels=FOO)]),
    )
    assert status_on("a1", *items) == FITS


def test_match_label_keys_spread_only_the_pods_own_revision() -> None:
    items = (
        zoned("a1", "a"),
        zoned("b1", "b"),
        pod("old", node="a1", labels={"app": "web", "rev": "1"}),
        pod(
            "p",
            labels={"app": "web", "rev": "2"},
            spread=[spread(match_labels={"app": "web"}, match_label_keys=["rev"])],
        ),
    )
    assert status_on("a1", *items) == FITS


def test_schedule_anyway_never_rejects_a_node() -> None:
    items = (
        *TWO_ZONES,
        pod("p", labels=FOO, spread=[spread(match_labels=FOO, when="ScheduleAnyway")]),
    )
    cluster = snapshot(*items)
    incoming = cluster.pod_by_key("default/p")
    assert incoming is not None
    assert all(status.ok for status in filter_nodes(cluster, incoming).values())


# -- preemption ------------------------------------------------------------------------------

SPREAD_BY_ZONE_AND_HOST = (
    zoned("node-a", "zone1"),
    zoned("node-b", "zone1"),
    zoned("node-x", "zone2"),
    pod("pod-a1", node="node-a", labels=FOO, priority=50),
    pod("pod-a2", node="node-a", labels=FOO, priority=1),
    pod("pod-b1", node="node-b", labels=FOO, priority=1),
    pod("pod-x1", node="node-x", labels=FOO, priority=100),
    pod("pod-x2", node="node-x", labels=FOO, priority=100),
    pod(
        "p",
        labels=FOO,
        priority=100,
        spread=[
            spread("zone", match_labels=FOO),
            spread("hostname", match_labels=FOO),
        ],
    ),
)


def test_preemption_resolves_a_spread_failure_with_one_victim_per_zone1_node() -> None:
    cluster = snapshot(*SPREAD_BY_ZONE_AND_HOST)
    incoming = cluster.pod_by_key("default/p")
    assert incoming is not None
    statuses = filter_nodes(cluster, incoming)
    assert {name: status.code for name, status in statuses.items()} == {
        "node-a": Code.UNSCHEDULABLE,
        "node-b": Code.UNSCHEDULABLE,
        "node-x": Code.UNSCHEDULABLE,
    }
    potential = [info for info in cluster.nodes() if info.name != "node-x"]
    found = dry_run_preemption(cluster, incoming, potential, 0, 2)
    assert {c.node: [v.name for v in c.victims] for c in found.candidates} == {
        "node-a": ["pod-a2"],
        "node-b": ["pod-b1"],
    }


def test_the_spread_decision_preempts_one_pod() -> None:
    decision = decide(*SPREAD_BY_ZONE_AND_HOST, preemptor="p")
    assert decision.verdict is Verdict.PREEMPT
    assert decision.nominated_node in ("node-a", "node-b")
    assert len(decision.victims) == 1
    assert decision.rationale.filtered[ERR_SPREAD] == 3


def test_removing_a_terminating_victim_lowers_its_domains_count_as_upstream_remove_pod() -> None:
    """Upstream's PreFilter skips a terminating pod but its RemovePod does not: the dry run
    that removes the terminating `t` takes zone a's count from 1 (`r`) to 0, so the spread
    allows the node, and reprieving `t` puts it back to 1, which it does not: `t` is the
    victim (without RemovePod's decrement the node would never be a candidate)."""
    items = (
        zoned("a1", "a", cpu="1"),
        zoned("b1", "b", cpu="1"),
        pod("r", node="a1", labels=FOO, priority=100),
        pod("t", node="a1", cpu="1", labels=FOO, priority=1, terminating=True),
        pod("busy", node="b1", cpu="1", priority=100),
        pod("p", cpu="1", labels=FOO, priority=10, spread=[spread(match_labels=FOO)]),
    )
    decision = decide(*items, preemptor="p")
    assert (decision.verdict, decision.nominated_node, [v.name for v in decision.victims]) == (
        Verdict.PREEMPT,
        "a1",
        ["t"],
    )

"""Upstream's CompositePodGroup rules for victims (KEP-6012, the `CompositePodGroup` gate),
transcribed (kubernetes/kubernetes, pkg/scheduler/framework/preemption: types_test.go's
TestGetHighestAllAncestor and TestNewDomainForWorkloadPreemption, util_test.go's
TestTraverseHierarchyUp, TestGetPodPriority and TestMoreImportantVictim), then the planner's
decisions over such units.

Each upstream case keeps its name. Upstream's "CPG disabled" cases (no CompositePodGroup
lister) are snapshots without the CompositePodGroup items: the parent a PodGroup names is then
missing, and the walk up stops there as it does without the lister, so they agree.

Scenarios beyond upstream's tables:
- a pending pod whose node holds one pod of a CompositePodGroup unit takes the whole unit:
  every scheduled pod of every PodGroup beneath the `all` root, on any node, never a part;
- the unit has its root's priority: a PodGroup below a higher-priority root is no victim of a
  pod between the two priorities;
- a pending pod group takes a CompositePodGroup unit whole too;
- a pending PodGroup with a parent is refused (`Unsupported`), naming the root of its
  hierarchy, or the parent the snapshot lacks: upstream's preemptor is then the whole
  hierarchy, which the planner does not place; nothing is evicted;
- fed one object at a time as the cluster view feeds it (CompositePodGroup last, then
  removed, then its priority raised), the snapshot gives the decisions a snapshot file gives;
- recorded inputs keep the CompositePodGroups: a replay rebuilds the same units.
"""

from __future__ import annotations

from typing import Any

import pytest

from preemptctl.preemption.decision import Strategy, Verdict
from preemptctl.preemption.inputs_replay import rebuild
from preemptctl.preemption.objects import CompositePodGroup, PodGroup
from preemptctl.preemption.planner import plan, plan_group
from preemptctl.preemption.recorded_inputs import capture, to_json
from preemptctl.preemption.snapshot import ClusterSnapshot
from preemptctl.preemption.victim_units import (
    UnitIndex,
    UnitKind,
    get_highest_all_ancestor,
    importance,
    new_victim,
)
from tests.preemption.builders import (
    composite_pod_group,
    node,
    pod,
    pod_group,
    snapshot,
    victim_names,
)

Json = dict[str, Any]


def member(name: str, group: str, where: str = "node1", priority: int = 10, **rest: Any) -> Json:
    """A running pod of `group`, uid `name` (upstream's `UID(name)`)."""
    return pod(name, node=where, priority=priority, group=group, uid=name, **rest)


def pg(name: str, mode: str = "all", **rest: Any) -> Json:
    return pod_group(name, disruption=mode, uid=name, **rest)


def cpg(name: str, mode: str = "all", **rest: Any) -> Json:
    return composite_pod_group(name, disruption=mode, uid=name, **rest)


# -- TestGetHighestAllAncestor ----------------------------------------------------------------

HIGHEST_ALL: list[tuple[str, list[Json], tuple[UnitKind, str] | None]] = [
    ("pod without group", [pod("p1", node="node1")], None),
    ("pod group missing from the lister", [member("p1", "pg1")], None),
    ("pod group disruption mode single", [member("p1", "pg1"), pg("pg1", "single")], None),
    (
        "pod group disruption mode All",
        [member("p1", "pg1"), pg("pg1")],
        (UnitKind.POD_GROUP, "default/pg1"),
    ),
    (
        "parent CPG disruption mode All, child PG disruption mode single",
        [member("p1", "pg1"), pg("pg1", "single", parent="cpg1"), cpg("cpg1")],
        (UnitKind.COMPOSITE_POD_GROUP, "default/cpg1"),
    ),
    (
        "grandparent CPG disruption mode All, parent CPG disruption mode single, "
        "child PG disruption mode single",
        [
            member("p1", "pg1"),
            pg("pg1", "single", parent="cpg1"),
            cpg("cpg1", "single", parent="cpg2"),
            cpg("cpg2"),
        ],
        (UnitKind.COMPOSITE_POD_GROUP, "default/cpg2"),
    ),
    (
        "highest All parent wins (both have disruption mode All)",
        [member("p1", "pg1"), pg("pg1", parent="cpg1"), cpg("cpg1")],
        (UnitKind.COMPOSITE_POD_GROUP, "default/cpg1"),
    ),
    (
        "parent CPG missing from cache lister, child PG All returned",
        [member("p1", "pg1"), pg("pg1", parent="cpg1")],
        (UnitKind.POD_GROUP, "default/pg1"),
    ),
]


@pytest.mark.parametrize(
    ("items", "want"), [pytest.param(i, w, id=name) for name, i, w in HIGHEST_ALL]
)
def test_get_highest_all_ancestor(items: list[Json], want: tuple[UnitKind, str] | None) -> None:
    built = snapshot(node("node1"), *items)
    p1 = built.pod_by_key("default/p1")
    assert p1 is not None
    assert get_highest_all_ancestor(built, p1) == want


# -- TestTraverseHierarchyUp ------------------------------------------------------------------

TRAVERSE: list[tuple[str, list[Json], list[str]]] = [
    ("single PG without parent CPG", [pg("pg1")], ["pg1"]),
    (
        "PG -> parent CPG -> grandparent CPG",
        [pg("pg1", parent="cpg1"), cpg("cpg1", parent="cpg2"), cpg("cpg2")],
        ["pg1", "cpg1", "cpg2"],
    ),
    (
        "cycle detection between CPGs",
        [pg("pg1", parent="cpg1"), cpg("cpg1", parent="cpg2"), cpg("cpg2", parent="cpg1")],
        ["pg1", "cpg1", "cpg2"],
    ),
    ("missing PG in lister", [], []),
    ("missing parent CPG in lister stops gracefully", [pg("pg1", parent="missing-cpg")], ["pg1"]),
]


@pytest.mark.parametrize(("items", "want"), [pytest.param(i, w, id=n) for n, i, w in TRAVERSE])
def test_traverse_hierarchy_up(items: list[Json], want: list[str]) -> None:
    built = snapshot(*items)
    assert [group.name for group in built.traverse_hierarchy_up("default/pg1")] == want


def test_traverse_hierarchy_up_stops_at_the_maximum_depth() -> None:
    built = snapshot(
        pg("pg1", parent="c1"),
        cpg("c1", parent="c2"),
        cpg("c2", parent="c3"),
        cpg("c3", parent="c4"),
        cpg("c4"),
    )
    assert [g.name for g in built.traverse_hierarchy_up("default/pg1")] == ["pg1", "c1", "c2", "c3"]


# -- TestGetPodPriority -----------------------------------------------------------------------

POD_PRIORITY: list[tuple[str, int | None, list[Json], int]] = [
    ("pod without PodGroup returns pod priority", 10, [], 10),
    (
        "pod with PodGroup returns PodGroup priority instead of pod priority",
        10,
        [pg("pg1", priority=50)],
        50,
    ),
    (
        "pod with PodGroup but PodGroup not found in lister falls back to pod priority",
        30,
        [],
        30,
    ),
    (
        "pod with PodGroup and parent CPG, returns CPG priority",
        10,
        [pg("pg1", parent="cpg1"), cpg("cpg1", priority=150)],
        150,
    ),
    (
        "pod with PodGroup and grandparent CPG, returns grandparent CPG priority",
        10,
        [pg("pg1", parent="cpg1"), cpg("cpg1", parent="cpg2"), cpg("cpg2", priority=250)],
        250,
    ),
    (
        "pod with PodGroup and parent CPG, but nil compositePodGroupLister, falls back to "
        "PodGroup priority",
        10,
        [pg("pg1", priority=50, parent="cpg1")],
        50,
    ),
    (
        "pod with PodGroup, parent CPG and grandparent CPG, but grandparent CPG not found in "
        "lister, falls back to parent CPG priority",
        10,
        [pg("pg1", priority=50, parent="cpg1"), cpg("cpg1", priority=150, parent="missing-cpg2")],
        150,
    ),
]


@pytest.mark.parametrize(
    ("own", "groups", "want"), [pytest.param(o, g, w, id=n) for n, o, g, w in POD_PRIORITY]
)
def test_get_pod_priority(own: int, groups: list[Json], want: int) -> None:
    built = snapshot(node("node1"), member("p1", "pg1", priority=own), *groups)
    p1 = built.pod_by_key("default/p1")
    assert p1 is not None
    assert (p1.priority, p1.spec_priority if p1.priority != own else own) == (want, own)


def test_a_pod_without_a_group_and_without_a_priority_has_priority_zero() -> None:
    made = pod("p6", node="node1")
    del made["spec"]["priority"]
    p6 = snapshot(node("node1"), made).pod_by_key("default/p6")
    assert p6 is not None and p6.priority == 0


# -- TestNewDomainForWorkloadPreemption ----------------------------------------------------------


def cross_nodes_victims(built: ClusterSnapshot) -> list[tuple[set[str], set[str], int]]:
    """`getCrossNodesVictims`: each unit once, as (its pods, their nodes, its priority)."""
    index = UnitIndex(built)
    seen: dict[tuple[UnitKind, str], Any] = {}
    for info in built.nodes():
        for p in info.pods.values():
            unit = index.unit_of(p)
            seen.setdefault((unit.kind, unit.key), unit)
    found = [
        ({p.name for p in unit.pods}, {p.node_name for p in unit.pods}, unit.priority)
        for unit in seen.values()
    ]
    return sorted(found, key=lambda item: sorted(item[0]))


def two_per_group(*groups: str) -> list[Json]:
    """Pods p1-<g> on node1 and p2-<g> on node2 of each group, priority 10 (upstream's
    p1_<g>, p2_<g>: an underscore is no valid pod name)."""
    return [member(f"p{i}-{g}", g, where=f"node{i}", priority=10) for g in groups for i in (1, 2)]


NODES = [node("node1"), node("node2")]
BOTH = {"node1", "node2"}


def both(*groups: str) -> set[str]:
    return {f"p{i}-{g}" for g in groups for i in (1, 2)}


def singles(*groups: str) -> list[tuple[set[str], set[str], int]]:
    return [({f"p{i}-{g}"}, {f"node{i}"}, 10) for g in groups for i in (1, 2)]


DOMAIN: list[tuple[str, list[Json], list[tuple[set[str], set[str], int]]]] = [
    (
        "CPG enabled: root CompositePodGroup with DisruptionModeAll groups descendant pods of "
        "all child PodGroups",
        [
            *two_per_group("pg1", "pg2"),
            pg("pg1", parent="cpg1", priority=10),
            pg("pg2", parent="cpg1", priority=10),
            cpg("cpg1", priority=10),
        ],
        [(both("pg1", "pg2"), BOTH, 10)],
    ),
    (
        "CPG disabled: root CompositePodGroup with DisruptionModeAll does not group descendant "
        "pods",
        [
            *two_per_group("pg1", "pg2"),
            pg("pg1", parent="cpg1", priority=10),
            pg("pg2", parent="cpg1", priority=10),
        ],
        [(both("pg1"), BOTH, 10), (both("pg2"), BOTH, 10)],
    ),
    (
        "CPG enabled: root CompositePodGroup with DisruptionModeSingle does not group "
        "descendants of child PodGroups but respects individual PodGroup DisruptionModes",
        [
            *two_per_group("pg1", "pg2"),
            pg("pg1", "single", parent="cpg1", priority=10),
            pg("pg2", parent="cpg1", priority=10),
            cpg("cpg1", "single", priority=10),
        ],
        [*singles("pg1"), (both("pg2"), BOTH, 10)],
    ),
    (
        "CPG enabled: root CompositePodGroup with DisruptionModeAll groups all descendant pods "
        "under nested CompositePodGroups with DisruptionModeAll",
        [
            *two_per_group("pg1", "pg2", "pg3", "pg4"),
            pg("pg1", parent="cpg2", priority=10),
            pg("pg2", parent="cpg2", priority=10),
            pg("pg3", parent="cpg3", priority=10),
            pg("pg4", parent="cpg3", priority=10),
            cpg("cpg1", priority=10),
            cpg("cpg2", parent="cpg1", priority=10),
            cpg("cpg3", parent="cpg1", priority=10),
        ],
        [(both("pg1", "pg2", "pg3", "pg4"), BOTH, 10)],
    ),
    (
        "CPG disabled: root CompositePodGroup with DisruptionModeAll with nested CPGs does not "
        "group descendant pods",
        [
            *two_per_group("pg1", "pg2", "pg3", "pg4"),
            pg("pg1", parent="cpg2", priority=10),
            pg("pg2", parent="cpg2", priority=10),
            pg("pg3", parent="cpg3", priority=10),
            pg("pg4", parent="cpg3", priority=10),
        ],
        [(both(g), BOTH, 10) for g in ("pg1", "pg2", "pg3", "pg4")],
    ),
    (
        "CPG enabled: root CompositePodGroup with DisruptionModeSingle groups descendant pods "
        "only under nested CompositePodGroup with DisruptionModeAll",
        [
            *two_per_group("pg1", "pg2", "pg3", "pg4"),
            pg("pg1", parent="cpg2", priority=10),
            pg("pg2", parent="cpg2", priority=10),
            pg("pg3", "single", parent="cpg3", priority=10),
            pg("pg4", "single", parent="cpg3", priority=10),
            cpg("cpg1", "single", priority=10),
            cpg("cpg2", parent="cpg1", priority=10),
            cpg("cpg3", "single", parent="cpg1", priority=10),
        ],
        [(both("pg1", "pg2"), BOTH, 10), *singles("pg3", "pg4")],
    ),
    (
        "CPG enabled: gang CompositePodGroup with DisruptionModeAll groups pods from different "
        "child PodGroups",
        [
            *two_per_group("pg1", "pg2"),
            pg("pg1", parent="cpg1", priority=10),
            pg("pg2", parent="cpg1", priority=10),
            cpg("cpg1", min_group_count=2, priority=10),
        ],
        [(both("pg1", "pg2"), BOTH, 10)],
    ),
    (
        "CPG enabled: gang CompositePodGroup with DisruptionModeSingle does not group pods from "
        "different child PodGroups",
        [
            *two_per_group("pg1", "pg2"),
            pg("pg1", "single", parent="cpg1", priority=10),
            pg("pg2", "single", parent="cpg1", priority=10),
            cpg("cpg1", "single", min_group_count=2, priority=10),
        ],
        singles("pg1", "pg2"),
    ),
    (
        "CPG enabled: root CompositePodGroup with DisruptionModeAll groups all descendants as a "
        "single victim even if descendants have DisruptionModeSingle",
        [
            *two_per_group("pg1", "pg2"),
            pg("pg1", "single", parent="cpg1", priority=10),
            pg("pg2", parent="cpg1", priority=10),
            cpg("cpg1", priority=10),
        ],
        [(both("pg1", "pg2"), BOTH, 10)],
    ),
    (
        "CPG enabled: missing parent CompositePodGroup falls back to available ancestor "
        "disruption mode",
        [
            *two_per_group("pg1", "pg2", "pg3", "pg4"),
            pg("pg1", parent="cpg-mid1", priority=10),
            pg("pg2", parent="cpg-mid1", priority=10),
            pg("pg3", parent="cpg-mid2", priority=10),
            pg("pg4", parent="cpg-mid2", priority=10),
            cpg("cpg-root", priority=10),
            cpg("cpg-mid2", parent="cpg-root", priority=10),
        ],
        [(both("pg1"), BOTH, 10), (both("pg2"), BOTH, 10), (both("pg3", "pg4"), BOTH, 10)],
    ),
    (
        "a unit has its root's priority, its PodGroups' own notwithstanding",
        [
            *two_per_group("pg1", "pg2"),
            pg("pg1", "single", parent="cpg1", priority=10),
            pg("pg2", "single", parent="cpg1", priority=20),
            cpg("cpg1", priority=70),
        ],
        [(both("pg1", "pg2"), BOTH, 70)],
    ),
]


@pytest.mark.parametrize(("items", "want"), [pytest.param(i, w, id=n) for n, i, w in DOMAIN])
def test_new_domain_for_workload_preemption(
    items: list[Json], want: list[tuple[set[str], set[str], int]]
) -> None:
    built = snapshot(*NODES, *items)
    assert cross_nodes_victims(built) == sorted(want, key=lambda item: sorted(item[0]))


# -- TestMoreImportantVictim (the CompositePodGroup cases) ---------------------------------------

NOW, BEFORE = 1000.0, 500.0


def unit(priority: int, kind: UnitKind, *, size: int = 1, start: float = NOW) -> Any:
    pods = [
        pod(f"u{len(kind)}-{priority}-{size}-{start:.0f}-{i}", node="n", priority=priority)
        for i in range(size)
    ]
    built = snapshot(node("n"), *pods)
    made = new_victim(kind, "default/u", [built.pods[p["metadata"]["uid"]] for p in pods], priority)
    return made.__class__(
        made.kind, made.key, made.pods, made.priority, made.rank, start, made.first_uid
    )


CPG, PG, POD = UnitKind.COMPOSITE_POD_GROUP, UnitKind.POD_GROUP, UnitKind.POD
MORE_IMPORTANT: list[tuple[str, Any, Any, bool]] = [
    ("CPG vs Pod, same priority (CPG wins)", unit(10, CPG), unit(10, POD), True),
    ("CPG vs PG, same priority (CPG wins)", unit(10, CPG), unit(10, PG), True),
    ("PG vs CPG, same priority (CPG wins)", unit(10, PG), unit(10, CPG), False),
    ("CPG vs PG, PG higher priority (higher priority wins)", unit(10, CPG), unit(20, PG), False),
    ("PG vs CPG, PG higher priority (higher priority wins)", unit(20, PG), unit(10, CPG), True),
    (
        "CPG vs PG, CPG smaller size, same priority (CPG rank wins over size)",
        unit(10, CPG),
        unit(10, PG, size=2),
        True,
    ),
    (
        "CPG vs PG, CPG newer start time, same priority (CPG rank wins over start time)",
        unit(10, CPG, start=NOW),
        unit(10, PG, start=BEFORE),
        True,
    ),
    ("both CPGs, vi1 larger (larger size wins)", unit(10, CPG, size=2), unit(10, CPG), True),
    ("both CPGs, vi2 larger (larger size wins)", unit(10, CPG), unit(10, CPG, size=2), False),
    (
        "both CPGs, same size, vi1 older (earlier start time wins)",
        unit(10, CPG, start=BEFORE),
        unit(10, CPG, start=NOW),
        True,
    ),
    (
        "both CPGs, same size, vi2 older (earlier start time wins)",
        unit(10, CPG, start=NOW),
        unit(10, CPG, start=BEFORE),
        False,
    ),
]


@pytest.mark.parametrize(
    ("first", "second", "want"),
    [pytest.param(a, b, w, id=name) for name, a, b, w in MORE_IMPORTANT],
)
def test_more_important_victim(first: Any, second: Any, want: bool) -> None:
    assert (importance(first) < importance(second)) is want


# -- decisions over CompositePodGroup units ---------------------------------------------------

# node1 and node2 hold 1 cpu each, full with a CompositePodGroup's pods (one PodGroup per
# node); node3 holds a lone pod of priority 20 that fills it. Only node1 is labelled n=1.
HIERARCHY = [
    node("node1", cpu="1", labels={"kubernetes.io/hostname": "node1", "n": "1"}),
    node("node2", cpu="1"),
    node("node3", cpu="1"),
    member("a-0", "pg-a", "node1", cpu="1"),
    member("b-0", "pg-b", "node2", cpu="1"),
    pg("pg-a", "single", parent="train", priority=10),
    pg("pg-b", "single", parent="train", priority=10),
    cpg("train", priority=10),
    pod("lone", node="node3", cpu="1", priority=20),
]


def test_a_pod_takes_a_composite_unit_whole_never_a_part() -> None:
    built = snapshot(*HIERARCHY, pod("p", cpu="1", priority=100, node_selector={"n": "1"}))
    decision = plan(built, "default/p")
    assert (decision.verdict, decision.nominated_node, sorted(victim_names(decision))) == (
        Verdict.PREEMPT,
        "node1",
        ["a-0", "b-0"],
    )


def test_without_the_composite_group_each_pod_goes_alone() -> None:
    items = [i for i in HIERARCHY if i["kind"] != "CompositePodGroup"]
    built = snapshot(*items, pod("p", cpu="1", priority=100, node_selector={"n": "1"}))
    decision = plan(built, "default/p")
    assert (decision.nominated_node, victim_names(decision)) == ("node1", ["a-0"])


def test_on_any_node_the_unit_goes_whole_or_not_at_all() -> None:
    decision = plan(snapshot(*HIERARCHY, pod("p", cpu="1", priority=100)), "default/p")
    assert decision.verdict is Verdict.PREEMPT
    assert set(victim_names(decision)) in ({"a-0", "b-0"}, {"lone"})


def test_a_unit_keeps_its_roots_priority() -> None:
    items = [i for i in HIERARCHY if i["kind"] != "CompositePodGroup"]
    built = snapshot(*items, cpg("train", priority=50), pod("p", cpu="1", priority=30))
    decision = plan(built, "default/p")
    assert (decision.nominated_node, victim_names(decision)) == ("node3", ["lone"])


def test_a_pending_pod_group_takes_a_composite_unit_whole() -> None:
    built = snapshot(
        *HIERARCHY,
        pod_group("gang", priority=100, min_count=1),
        pod("m-0", cpu="1", priority=100, group="gang", node_selector={"n": "1"}),
    )
    decision = plan_group(built, "default/gang")
    assert (decision.verdict, sorted(v.name for v in decision.victims)) == (
        Verdict.PREEMPT,
        ["a-0", "b-0"],
    )
    assert [(u.unit, u.whole, sorted(u.nodes)) for u in decision.units] == [
        ("compositePodGroup default/train", True, ["node1", "node2"])
    ]


@pytest.mark.parametrize(
    ("groups", "named"),
    [
        pytest.param(
            [cpg("mid", parent="root", priority=100), cpg("root", priority=100)],
            "the CompositePodGroup default/root the group belongs to",
            id="root-present",
        ),
        pytest.param(
            [cpg("mid", parent="root", priority=100)],
            "the CompositePodGroup default/root above default/mid (not in the snapshot",
            id="root-missing",
        ),
    ],
)
def test_a_pending_pod_group_with_a_parent_is_refused_naming_the_hierarchy(
    groups: list[Json], named: str
) -> None:
    built = snapshot(
        *HIERARCHY,
        pod_group("gang", priority=100, min_count=1, parent="mid"),
        pod("m-0", cpu="1", priority=100, group="gang"),
        *groups,
    )
    decision = plan_group(built, "default/gang")
    assert (decision.verdict, decision.victims) == (Verdict.UNSUPPORTED, ())
    assert named in decision.message


# -- the snapshot fed one object at a time -----------------------------------------------------


def decide_on_node1(built: ClusterSnapshot) -> list[str]:
    return sorted(victim_names(plan(built, "default/p")))


def fed() -> ClusterSnapshot:
    """HIERARCHY without its CompositePodGroup, a preemptor needing node1 (its only fit),
    warmed as the view warms its snapshot."""
    items = [i for i in HIERARCHY if i["kind"] != "CompositePodGroup"]
    built = snapshot(*items, pod("p", cpu="1", priority=100, node_selector={"n": "1"}))
    built.warm()  # as the view does once synced: what decisions keep per node is built now
    return built


def test_fed_as_the_view_feeds_it_the_units_follow_each_change() -> None:
    built = fed()
    assert decide_on_node1(built) == ["a-0"]  # each PodGroup is single: a pod alone
    built.apply("CompositePodGroup", cpg("train", priority=10))
    assert decide_on_node1(built) == ["a-0", "b-0"]
    built.remove("CompositePodGroup", "default/train")
    assert decide_on_node1(built) == ["a-0"]
    built.apply("CompositePodGroup", cpg("train", priority=200))
    assert plan(built, "default/p").verdict is Verdict.UNSCHEDULABLE  # the unit outranks p
    assert built.pod_by_key("default/b-0").priority == 200  # type: ignore[union-attr]
    built.remove("CompositePodGroup", "default/train")
    assert built.pod_by_key("default/b-0").priority == 10  # type: ignore[union-attr]
    assert decide_on_node1(built) == ["a-0"]


def test_a_new_member_of_a_leaf_group_joins_the_unit() -> None:
    built = fed()
    built.apply("CompositePodGroup", cpg("train", priority=10))
    assert decide_on_node1(built) == ["a-0", "b-0"]
    built.apply("Node", node("node4", cpu="1"))
    built.apply("Pod", member("b-1", "pg-b", "node4", cpu="1"))
    assert decide_on_node1(built) == ["a-0", "b-0", "b-1"]


def test_recorded_inputs_keep_the_composite_groups() -> None:
    built = fed()
    built.apply("CompositePodGroup", cpg("train", priority=10))
    preemptor = built.pod_by_key("default/p")
    assert preemptor is not None
    decision = plan(built, "default/p")
    document = to_json(capture(built, preemptor, Strategy.DEFAULT, None, decision))
    assert [g["name"] for g in document["compositePodGroups"]] == ["train"]
    replayed = rebuild(document)
    assert decide_on_node1(replayed.snapshot) == ["a-0", "b-0"]


def test_the_decoded_objects_keep_parent_priority_and_mode() -> None:
    built = snapshot(*HIERARCHY)
    assert built.pod_group("default/pg-a") == built.pod_groups["default/pg-a"]
    group = built.pod_groups["default/pg-a"]
    composite = built.composite_pod_groups["default/train"]
    assert isinstance(group, PodGroup) and isinstance(composite, CompositePodGroup)
    assert (group.parent, composite.priority, composite.disruption_all, composite.parent) == (
        "train",
        10,
        True,
        "",
    )

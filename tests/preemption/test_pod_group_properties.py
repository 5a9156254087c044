"""Properties of workload-aware preemption on generated clusters (hypothesis).

Clusters of 1-5 nodes (cpu 1-4) with pods of cpu 1 at priorities 1, 5 or 50, some of them in
pod groups (disruption mode single or all) spread over nodes, a PDB now and then, and a
pending group of 1-4 pods at priority 20 (gang with a minCount, or basic). For every group
decision:

- with the victims gone, every placed pod passes every filter: on each node, the pods left
  plus the members placed there fit its cpu and pod count;
- putting back any one victim unit breaks a placement (the reprieve kept all it could);
- a group with disruptionMode all is never split: all of its scheduled pods are victims, or
  none;
- every victim is below the group's priority, and a Preempt places at least minCount members
  (with those already bound), one at least;
- the result does not depend on the order of the snapshot's objects.

And for a single pod preempting in the same clusters: an `all` group is never split either;
the dry run from a node's kept units answers as units built afresh do, also after a whole
group changed on another node.

With some of the victim groups beneath a CompositePodGroup (`all` or `single`, at one of the
priorities), neither a group nor a single pod ever splits a unit: the composite group's
scheduled pods when it is `all`, else each `all` PodGroup's.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from preemptctl.preemption.decision import Verdict
from preemptctl.preemption.default_preemption import (
    PreemptionArgs,
    _select_whole_units_on_node,
    select_victim_units_on_node,
)
from preemptctl.preemption.planner import plan
from preemptctl.preemption.pod_group_preemption import plan_pod_group
from preemptctl.preemption.victim_units import UnitIndex, node_units
from tests.preemption.builders import composite_pod_group, node, pdb, pod, pod_group, snapshot

Json = dict[str, Any]
GROUP_PRIORITY = 20


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[Json], dict[str, int], dict[str, bool]]:
    """Items, each node's cpu, and each victim group's mode (True: all)."""
    node_count = draw(st.integers(1, 5))
    cpus = {f"n{i}": draw(st.integers(1, 4)) for i in range(node_count)}
    items: list[Json] = [node(name, cpu=str(cpu)) for name, cpu in cpus.items()]
    modes: dict[str, bool] = {}
    for g in range(draw(st.integers(0, 3))):
        whole = draw(st.booleans())
        modes[f"vg{g}"] = whole
        items.append(
            pod_group(
                f"vg{g}",
                priority=draw(st.sampled_from([1, 5, 50])),
                disruption="all" if whole else "single",
            )
        )
    used = dict.fromkeys(cpus, 0)
    for i in range(draw(st.integers(0, 12))):
        name = draw(st.sampled_from(sorted(cpus)))
        if used[name] >= cpus[name]:
            continue
        used[name] += 1
        group = draw(st.sampled_from([None, *sorted(modes)]))
        labels = {"app": "guarded"} if draw(st.integers(0, 4)) == 0 else {}
        items.append(
            pod(
                f"v{i}",
                cpu="1",
                node=name,
                priority=draw(st.sampled_from([1, 5, 50])),
                start=draw(st.integers(0, 3)),
                group=group,
                labels=labels,
            )
        )
    if draw(st.booleans()):
        items.append(pdb("guard", match_labels={"app": "guarded"}, allowed=draw(st.integers(0, 1))))
    size = draw(st.integers(1, 4))
    min_count = draw(st.one_of(st.none(), st.integers(1, size)))
    items.append(pod_group("train", priority=GROUP_PRIORITY, min_count=min_count))
    items += [pod(f"t{i}", cpu="1", group="train") for i in range(size)]
    items.append(pod("solo", cpu="1", priority=GROUP_PRIORITY))
    return items, cpus, modes


def load(items: list[Json], placed: dict[str, str], removed: set[str]) -> dict[str, list[str]]:
    """Each node's pods (bound ones not removed, plus the placed members)."""
    on: dict[str, list[str]] = defaultdict(list)
    for item in items:
        spec, name = item["spec"], item["metadata"]["name"]
        if item["kind"] == "Pod" and spec.get("nodeName") and name not in removed:
            on[spec["nodeName"]].append(name)
    for key, where in placed.items():
        on[where].append(key.split("/")[1])
    return on


def fits(on: dict[str, list[str]], cpus: dict[str, int], nodes: set[str]) -> bool:
    return all(len(on[name]) <= cpus[name] for name in nodes)


def group_members(items: list[Json], group: str) -> set[str]:
    return {
        item["metadata"]["name"]
        for item in items
        if item["kind"] == "Pod"
        and item["spec"].get("schedulingGroup", {}).get("podGroupName") == group
        and item["spec"].get("nodeName")
    }


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_group_decisions_keep_their_placement_and_reprieve_all_they_can(
    generated: tuple[list[Json], dict[str, int], dict[str, bool]],
) -> None:
    items, cpus, modes = generated
    decision = plan_pod_group(snapshot(*items), "default/train")
    if decision.verdict is not Verdict.PREEMPT:
        assert decision.victims == ()
        return
    victims = {victim.name for victim in decision.victims}
    nodes = set(decision.nominations.values())
    # With the victims gone, every placed pod passes every filter.
    assert fits(load(items, decision.nominations, victims), cpus, nodes)
    # Putting back any one victim unit breaks a placement.
    for unit in decision.units:
        back = victims - {pod.name for pod in unit.pods}
        assert not fits(load(items, decision.nominations, back), cpus, nodes), unit.unit
    # An `all` group is never split.
    for group, whole in modes.items():
        if whole:
            taken = group_members(items, group) & victims
            assert taken in (set(), group_members(items, group))
    # Every victim is below the group; enough members are placed.
    assert all(victim.priority < GROUP_PRIORITY for victim in decision.victims)
    group = decision.rationale["group"]
    assert len(decision.nominations) >= (
        group["minCount"] if group["schedulingPolicy"] == "gang" else 1
    )


@settings(max_examples=60, deadline=None)
@given(clusters(), st.integers(0, 1000))
def test_a_group_decision_does_not_depend_on_object_order(
    generated: tuple[list[Json], dict[str, int], dict[str, bool]], seed: int
) -> None:
    items = generated[0]
    first = plan_pod_group(snapshot(*items), "default/train").to_json()
    assert plan_pod_group(snapshot(*items, shuffle_seed=seed), "default/train").to_json() == first


@settings(max_examples=100, deadline=None)
@given(clusters())
def test_a_single_pod_never_splits_an_all_group(
    generated: tuple[list[Json], dict[str, int], dict[str, bool]],
) -> None:
    items, _, modes = generated
    decision = plan(snapshot(*items), "default/solo")
    victims = {victim.name for victim in decision.victims}
    for group, whole in modes.items():
        if whole:
            taken = group_members(items, group) & victims
            assert taken in (set(), group_members(items, group))


@settings(max_examples=150, deadline=None)
@given(clusters(), st.booleans())
def test_the_kept_units_give_the_answer_units_built_afresh_give(
    generated: tuple[list[Json], dict[str, int], dict[str, bool]], protect: bool
) -> None:
    """On every node, the dry run from the node's kept units (`NodeUnits`) names the victims,
    the violations and the status that units built for the decision do, also once a whole
    group lost a member on another node since the units were kept."""
    items, _, _ = generated
    cluster = snapshot(*items)
    solo = cluster.pod_by_key("default/solo")
    assert solo is not None
    args = PreemptionArgs(protected_namespaces=frozenset({"default"}) if protect else frozenset())

    def both() -> list[tuple[Any, Any]]:
        found = []
        for info in cluster.nodes():
            kept = node_units(cluster, info, UnitIndex(cluster))
            fast = _select_whole_units_on_node(cluster, solo, info, args, kept)
            slow = select_victim_units_on_node(cluster, solo, info, args, None)
            found.append((fast, slow))
        return found

    for fast, slow in both():
        assert fast == slow
    members = [p for p in cluster.pods.values() if p.group and p.node_name]
    if members:
        cluster.remove_pod(members[0].uid)
        for fast, slow in both():
            assert fast == slow


@st.composite
def composite_clusters(draw: st.DrawFn) -> tuple[list[Json], list[set[str]]]:
    """A generated cluster whose victim groups may belong to the CompositePodGroup `root`,
    and the scheduled pods of each unit taken whole, as upstream forms them."""
    items, _, modes = draw(clusters())
    root_all = draw(st.booleans())
    children = {group for group in sorted(modes) if draw(st.booleans())}
    for item in items:
        if item["kind"] == "PodGroup" and item["metadata"]["name"] in children:
            item["spec"]["parentCompositePodGroupName"] = "root"
    priority = draw(st.sampled_from([1, 5, 50]))
    disruption = "all" if root_all else "single"
    items.append(composite_pod_group("root", priority=priority, disruption=disruption))
    whole: list[set[str]] = []
    if root_all and children:
        whole.append(set().union(*(group_members(items, group) for group in children)))
    whole += [
        group_members(items, group)
        for group, is_all in modes.items()
        if is_all and not (root_all and group in children)
    ]
    return items, whole


@settings(max_examples=150, deadline=None)
@given(composite_clusters())
def test_no_decision_splits_a_composite_unit(generated: tuple[list[Json], list[set[str]]]) -> None:
    items, whole = generated
    built = snapshot(*items)
    for decision in (plan_pod_group(built, "default/train"), plan(built, "default/solo")):
        victims = {victim.name for victim in decision.victims}
        for unit in whole:
            assert victims & unit in (set(), unit)

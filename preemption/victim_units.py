"""Victim units: the pods preemption takes together, or not at all (upstream's `Victim`).

A pod is a unit of one, unless it belongs to a group whose members are only worth anything
together: the highest group with `disruptionMode: {all: {}}` in its PodGroup's hierarchy
(`get_highest_all_ancestor`): that PodGroup alone (every scheduled member, on any node), or
a CompositePodGroup above it (every scheduled pod of every PodGroup beneath it, KEP-6012);
or a group named by a pod label (a setting, for gang sources such as Kueue's pod groups),
taken whole the same way. A unit's priority is that of the root of its hierarchy (the
snapshot gives each member that priority: `ClusterSnapshot.group_priority`). Units are
ordered by upstream's `MoreImportantVictim` and spend PodDisruptionBudgets as a whole
(`FilterVictimsWithPDBViolation`): a unit violates if any member does, and counts how many
of its pods do.

Deliberate differences: the unit of a label-named group has its most important member's
priority (upstream has no such groups; Kueue gives a workload's pods one priority anyway),
a group's "first pod" for the last tie-break is the one with the smallest UID (upstream:
the first of its scheduled pods, in an order it does not fix), and the walk down a
CompositePodGroup's hierarchy visits each group once (upstream's `GetPodGroupStates` would
list the groups of a cyclic hierarchy again until its depth limit, counting their pods more
than once; kube-scheduler refuses such a hierarchy anyway).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from preemptctl.preemption.objects import CompositePodGroup, Pod
from preemptctl.preemption.snapshot import ClusterSnapshot, NodeInfo, importance_key

_NEVER_STARTED = float("inf")


class UnitKind(StrEnum):
    """Why a unit's pods go together."""

    POD = "pod"  # a pod alone (a member of a `single` group included)
    POD_GROUP = "podGroup"  # every scheduled member of a PodGroup with disruptionMode all
    # every scheduled pod of every PodGroup beneath a CompositePodGroup with disruptionMode
    # all (the highest such ancestor of their PodGroups)
    COMPOSITE_POD_GROUP = "compositePodGroup"
    LABEL_GROUP = "labelGroup"  # every scheduled pod of a group named by a label (a setting)


@dataclass(frozen=True, slots=True)
class VictimUnit:
    """`Victim`: pods preempted together, with the unit's priority and what orders it."""

    kind: UnitKind
    key: str  # "namespace/name" of the pod, or of the group
    pods: tuple[Pod, ...]  # most important first
    priority: int
    # `victimRank`: 3 for a CompositePodGroup, 2 for a group or a pod naming one, 1 for a
    # plain pod; ranked higher first at one priority
    rank: int
    earliest_start: float
    first_uid: str

    @property
    def whole(self) -> bool:
        """Whether the unit spans a group (taken whole, possibly on several nodes)."""
        return self.kind is not UnitKind.POD

    def describe(self) -> str:
        """How people name the unit: `pod ns/name`, `podGroup ns/name`, `labelGroup ...`."""
        return f"{self.kind} {self.key}"


def importance(unit: VictimUnit) -> tuple[int, int, int, float, str]:
    """Sort key for upstream's `MoreImportantVictim`, most important first: higher priority;
    the higher `victimRank` (a CompositePodGroup, then a group or a pod naming one, then a
    plain pod); the larger unit; the earlier start; the smaller UID of its first pod."""
    return (
        -unit.priority,
        -unit.rank,
        -len(unit.pods),
        unit.earliest_start,
        unit.first_uid,
    )


_RANK_COMPOSITE, _RANK_GROUP, _RANK_POD = 3, 2, 1


def new_victim(kind: UnitKind, key: str, pods: Sequence[Pod], priority: int) -> VictimUnit:
    """`NewVictim`: the unit of `pods`, with their earliest start time."""
    ordered = tuple(sorted(pods, key=importance_key))
    starts = [p.start_time for p in ordered if p.start_time is not None]
    if kind is UnitKind.COMPOSITE_POD_GROUP:
        rank = _RANK_COMPOSITE
    elif kind is not UnitKind.POD or any(p.group for p in ordered):
        rank = _RANK_GROUP
    else:
        rank = _RANK_POD
    return VictimUnit(
        kind,
        key,
        ordered,
        priority,
        rank,
        min(starts) if starts else _NEVER_STARTED,
        min(p.uid for p in ordered),
    )


def new_pod_victim(pod: Pod) -> VictimUnit:
    """`NewPodVictim`: a pod alone, ranked as a group member when it names a group."""
    start = pod.start_time if pod.start_time is not None else _NEVER_STARTED
    rank = _RANK_GROUP if pod.group else _RANK_POD
    return VictimUnit(UnitKind.POD, pod.key, (pod,), pod.priority, rank, start, pod.uid)


def get_highest_all_ancestor(snapshot: ClusterSnapshot, pod: Pod) -> tuple[UnitKind, str] | None:
    """`getHighestAllAncestor`: the highest group with `disruptionMode: all` among the pod's
    PodGroup and the CompositePodGroups above it (`traverseHierarchyUp`: as far as they exist),
    or None when none is `all` (or the pod names no PodGroup the snapshot holds)."""
    if not pod.group:
        return None
    highest: tuple[UnitKind, str] | None = None
    for group in snapshot.traverse_hierarchy_up(f"{pod.namespace}/{pod.group}"):
        if group.disruption_all:
            kind = (
                UnitKind.COMPOSITE_POD_GROUP
                if isinstance(group, CompositePodGroup)
                else UnitKind.POD_GROUP
            )
            highest = (kind, group.key)
    return highest


class UnitIndex:
    """The unit of each bound pod, built once per decision as pods are met
    (`getCrossNodesVictims` / `searchCrossNodesVictimPods`, for the pods it is asked about).

    `group_label` names the pod label whose value names a group (a setting; "" for none).
    """

    __slots__ = ("_by_group", "group_label", "snapshot")

    def __init__(self, snapshot: ClusterSnapshot, group_label: str = "") -> None:
        self.snapshot = snapshot
        self.group_label = group_label
        self._by_group: dict[tuple[UnitKind, str], VictimUnit] = {}

    def whole_group_key(self, pod: Pod) -> tuple[UnitKind, str] | None:
        """The group the pod is taken with (`getHighestAllAncestor`), or None when alone."""
        if pod.group:
            return get_highest_all_ancestor(self.snapshot, pod)
        if self.group_label:
            value = pod.labels.get(self.group_label)
            if value is not None:
                return UnitKind.LABEL_GROUP, f"{pod.namespace}/{value}"
        return None

    def unit_of(self, pod: Pod) -> VictimUnit:
        """The unit a bound pod is preempted with."""
        whole = self.whole_group_key(pod)
        if whole is None:
            return new_pod_victim(pod)
        found = self._by_group.get(whole)
        if found is None:
            found = self._by_group[whole] = search_cross_nodes_victim_pods(self, whole, pod)
        return found

    def stamp_keys(self, whole: tuple[UnitKind, str]) -> tuple[str, ...]:
        """The keys of the group's stamps in the snapshot (`ClusterSnapshot.unit_stamp`): a
        PodGroup's own, each leaf PodGroup's beneath a CompositePodGroup (a change to the
        hierarchy itself bumps `group_modes_version`), a label-named group's."""
        kind, key = whole
        if kind is UnitKind.POD_GROUP:
            return (key,)
        if kind is UnitKind.COMPOSITE_POD_GROUP:
            return tuple(self.snapshot.leaf_pod_groups(key, composite=True))
        return (f"{self.group_label}\0{key}",)

    def units_of(self, pods: Iterable[Pod]) -> list[VictimUnit]:
        """The distinct units of `pods`, in the order first met."""
        seen: dict[tuple[UnitKind, str], VictimUnit] = {}
        for pod in pods:
            unit = self.unit_of(pod)
            seen.setdefault((unit.kind, unit.key), unit)
        return list(seen.values())


def search_cross_nodes_victim_pods(
    index: UnitIndex, whole: tuple[UnitKind, str], pod: Pod
) -> VictimUnit:
    """`searchCrossNodesVictimPods`: every scheduled pod of the group `whole` (of each leaf
    PodGroup beneath a CompositePodGroup: `GetPodGroupStates`), on any node, as one unit with
    the priority of its hierarchy's root (its members' effective priority); the pod alone,
    in that unit, when none is scheduled."""
    kind, key = whole
    snapshot = index.snapshot
    if kind is UnitKind.POD_GROUP:
        members = snapshot.group_members(key)
    elif kind is UnitKind.COMPOSITE_POD_GROUP:
        members = [
            member
            for leaf in snapshot.leaf_pod_groups(key, composite=True)
            for member in snapshot.group_members(leaf)
        ]
    else:
        members = snapshot.label_group_members(index.group_label, key)
    scheduled = [m for m in members if m.node_name] or [pod]
    priority = max(m.priority for m in scheduled)
    return new_victim(kind, key, scheduled, priority)


def filter_victims_with_pdb_violation(
    units: Sequence[VictimUnit], snapshot: ClusterSnapshot
) -> tuple[list[tuple[VictimUnit, int]], list[VictimUnit]]:
    """`FilterVictimsWithPDBViolation`: split units, in the order given, into those whose
    eviction would exceed a budget (with how many of their pods would) and the rest.

    Budgets are spent pod by pod in that order; a pod already listed in a budget's
    `disruptedPods` spends nothing; as upstream's `podIsViolating`, a pod stops spending at
    the first budget it exceeds.
    """
    pdbs = snapshot.sorted_pdbs()
    left: dict[int, int] = {}
    violating: list[tuple[VictimUnit, int]] = []
    non_violating: list[VictimUnit] = []
    for unit in units:
        count = 0
        for pod in unit.pods:
            for index in snapshot.matching_pdbs(pod):
                pdb = pdbs[index]
                if pod.name in pdb.disrupted_pods:
                    continue
                remaining = left.get(index, pdb.disruptions_allowed) - 1
                left[index] = remaining
                if remaining < 0:
                    count += 1
                    break
        if count:
            violating.append((unit, count))
        else:
            non_violating.append(unit)
    return violating, non_violating


@dataclass(frozen=True, slots=True, eq=False)
class NodeUnits:
    """The victim units with a pod on one node, most important first, and what each unit's
    pods on this node request: the dry run's remove-all-then-reprieve reads only these.

    Kept on the node (`node_units`) while its pods, the budgets' selectors, the disruption
    modes and each of its whole groups (their pods anywhere) stay the same.
    """

    units: tuple[VictimUnit, ...]
    descending_priorities: tuple[int, ...]  # -priority of each unit, for a bisect
    # Per unit: cpu, memory, ephemeral storage and count of its pods on this node.
    here: tuple[tuple[int, int, int, int], ...]
    # From each position on: the summed `here` of the units from there to the end.
    suffix: tuple[tuple[int, int, int, int], ...]
    # From each position on: whether some unit from there on has a pod a budget selects.
    budgeted_from: tuple[bool, ...]
    # Per unit: (name, the budgets selecting it) of each of its pods some budget selects.
    budgets: tuple[tuple[tuple[str, tuple[int, ...]], ...], ...]
    lowest_whole_priority: float  # the lowest priority of a unit taken whole (inf: none)
    stamp_keys: tuple[str, ...]  # each whole group with a pod here
    stamps: tuple[int, ...]  # and its stamp when this was built

    def lower_priority_start(self, priority: int) -> int:
        """Where the units below `priority` begin (they are a suffix)."""
        return bisect.bisect_right(self.descending_priorities, -priority)

    def current(self, snapshot: ClusterSnapshot) -> bool:
        """Whether each of its whole groups is as it was when these were built."""
        return snapshot.unit_stamps(self.stamp_keys) == self.stamps


def node_units(snapshot: ClusterSnapshot, info: NodeInfo, index: UnitIndex) -> NodeUnits:
    """The node's `NodeUnits`, kept on the node until something it was built from changes."""
    key = (index.group_label, snapshot.group_modes_version, snapshot.pdb_generation)
    kept: NodeUnits | None = info.cached_units(key)
    if kept is not None and kept.current(snapshot):
        return kept
    made = _build_node_units(snapshot, info, index)
    info.cache_units(key, made)
    return made


def _build_node_units(snapshot: ClusterSnapshot, info: NodeInfo, index: UnitIndex) -> NodeUnits:
    ordered = info.pods_by_importance()
    matches = info.pdb_matches(snapshot)
    units: list[VictimUnit] = []
    budgets: list[tuple[tuple[str, tuple[int, ...]], ...]] = []
    stamps: list[tuple[str, int]] = []
    seen: set[tuple[UnitKind, str]] = set()
    lowest: float = _NEVER_STARTED
    for pod, pod_matches in zip(ordered, matches, strict=True):
        whole = index.whole_group_key(pod)
        if whole is None:
            units.append(new_pod_victim(pod))
            budgets.append(((pod.name, pod_matches),) if pod_matches else ())
            continue
        if whole in seen:
            continue
        seen.add(whole)
        unit = index.unit_of(pod)
        units.append(unit)
        budgets.append(
            tuple(
                (member.name, found)
                for member in unit.pods
                if (found := snapshot.matching_pdbs(member))
            )
        )
        stamps.extend((key, snapshot.unit_stamp(key)) for key in index.stamp_keys(whole))
        lowest = min(lowest, unit.priority)
    order = sorted(range(len(units)), key=lambda i: importance(units[i]))
    name = info.name
    here: list[tuple[int, int, int, int]] = []
    for i in order:
        unit = units[i]
        cpu = memory = ephemeral = count = 0
        for pod in unit.pods:
            if pod.node_name == name:
                r = pod.requests
                cpu += r.milli_cpu
                memory += r.memory
                ephemeral += r.ephemeral_storage
                count += 1
        here.append((cpu, memory, ephemeral, count))
    suffix = [(0, 0, 0, 0)] * (len(order) + 1)
    budgeted_from = [False] * (len(order) + 1)
    for position in range(len(order) - 1, -1, -1):
        c, m, e, n = here[position]
        sc, sm, se, sn = suffix[position + 1]
        suffix[position] = (sc + c, sm + m, se + e, sn + n)
        budgeted_from[position] = budgeted_from[position + 1] or bool(budgets[order[position]])
    return NodeUnits(
        tuple(units[i] for i in order),
        tuple(-units[i].priority for i in order),
        tuple(here),
        tuple(suffix),
        tuple(budgeted_from),
        tuple(budgets[i] for i in order),
        lowest,
        tuple(key for key, _ in stamps),
        tuple(stamp for _, stamp in stamps),
    )

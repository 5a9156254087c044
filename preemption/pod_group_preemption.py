"""kube-scheduler's workload-aware preemption (KEP-5710) for a pending pod group, over a snapshot.

`plan_pod_group` runs upstream's `PodGroupPostFilter` → `PodGroupEvaluator.Preempt` →
`selectVictimsOnDomain`, with the whole cluster as the domain:

1. the preemptor: the group, its pending and bound members, minCount, priority, policy
   (`newPodGroupPreemptor`); what the planner does not judge is refused (`Unsupported`);
2. eligibility (`preemptorEligibleToPreemptOthers`);
3. remove every eligible victim unit from the cluster (`removePods` of each potential
   victim: units whose priority is below the group's);
4. place the group once (`podGroupSchedulingFunc`): as many pending members as fit, at
   least minCount with the bound ones (basic: at least one), else `Unschedulable`;
5. keep that placement and reprieve units back, PDB-violating ones first, then the rest,
   most important first, each whole (`reprieveVictim`); those that do not fit are victims.

Budgets are spent as upstream spends them: every potential victim of the cluster, most
important first, wherever it runs (`filter_affected_victims_with_pdb_violation`).

Deliberate differences from upstream, each forced by the planner having no scheduler to call
and deciding over a snapshot (docs/planner.md gives the whole list):
- placement (step 4) is the planner's own: members in name order, each on the feasible node
  with the most cpu and memory left after it (the default profile's NodeResourcesFit
  LeastAllocated score; other scores are not modelled), ties by node name; upstream runs its
  whole scheduling cycle and breaks ties at random;
- before preempting, the group is placed on the cluster as it stands: if every pending member
  fits, the answer is `FitsWithoutPreemption` (upstream runs PostFilter only after the group
  failed to schedule);
- members with pod (anti-)affinity, topology spread constraints or volumes are refused
  (`Unsupported`): the placement judges resources, host ports, node name, cordons, taints and
  node affinity only;
- an ongoing preemption on a member's nominated node is `Ineligible` (upstream's newest code:
  Success with the current nominations); nothing is preempted either way;
- a PodGroup with a parent CompositePodGroup is refused (`Unsupported`, naming the root of
  its hierarchy, or the parent the snapshot lacks): upstream's preemptor is then the root
  CompositePodGroup, placed with every group beneath it (KEP-6012), which the planner does
  not model. As victims, CompositePodGroups are taken as upstream takes them
  (`victim_units`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from preemptctl.preemption.decision import PLANNER_VERSION, PodRef, Verdict
from preemptctl.preemption.default_preemption import (
    PreemptionArgs,
    pod_terminating_by_preemption,
)
from preemptctl.preemption.errors import PlannerInputError, UnknownPodGroupError
from preemptctl.preemption.filters import ports_conflict, static_filters
from preemptctl.preemption.find_nodes_that_fit import ERR_NO_NODES
from preemptctl.preemption.group_decision import GroupDecision, UnitChoice
from preemptctl.preemption.objects import PREEMPT_NEVER, HostPort, Node, Pod, PodGroup, Resources
from preemptctl.preemption.snapshot import WORKLOAD_MAX_TREE_DEPTH, ClusterSnapshot
from preemptctl.preemption.victim_units import (
    UnitIndex,
    UnitKind,
    VictimUnit,
    filter_victims_with_pdb_violation,
    importance,
)

POD_GROUP_STRATEGY = "pod-group"
ERR_NO_VICTIMS = "No preemption victims found for incoming preemptor"
ERR_NEVER = "not eligible due to preemptionPolicy=Never."
ERR_TERMINATING = "not eligible due to a terminating pod on the nominated node."


@dataclass(frozen=True, slots=True)
class PodGroupPreemptor:
    """`podGroupPreemptor`: the pending group and what decides for it."""

    key: str  # "namespace/name"
    uid: str
    kind: UnitKind  # POD_GROUP (a PodGroup object) or LABEL_GROUP (a label names it)
    priority: int
    gang: bool
    min_count: int
    preemption_policy: str  # the group's own, else Never when any member says Never
    pending: tuple[Pod, ...]  # in the order they are placed (name order)
    bound: tuple[Pod, ...]
    unsupported: str

    def policy_json(self) -> dict[str, Any]:
        return {
            "kind": "PodGroup" if self.kind is UnitKind.POD_GROUP else "labelGroup",
            "schedulingPolicy": "gang" if self.gang else "basic",
            "minCount": self.min_count,
            "priority": self.priority,
            "pending": len(self.pending),
            "bound": len(self.bound),
        }


@dataclass(slots=True)
class Room:
    """What is free on one node for the group's members (cpu in millicores)."""

    name: str
    node: Node
    cpu: int
    memory: int
    ephemeral: int
    slots: int
    scalars: dict[str, int] = field(default_factory=dict)
    ports: list[HostPort] | None = None  # computed only when a member asks for host ports
    removed: int = 0  # potential victims removed from the node

    def take(self, pods: Iterable[Pod], sign: int = 1) -> None:
        """Account pods as placed here (sign 1) or gone (sign -1)."""
        for pod in pods:
            r = pod.requests
            self.cpu -= sign * r.milli_cpu
            self.memory -= sign * r.memory
            self.ephemeral -= sign * r.ephemeral_storage
            self.slots -= sign
            for name in self.scalars:
                self.scalars[name] -= sign * r.get(name)


# -- the sequence -----------------------------------------------------------------------------


def plan_pod_group(
    snapshot: ClusterSnapshot, group_key: str, args: PreemptionArgs | None = None
) -> GroupDecision:
    """`PodGroupPostFilter`: the whole decision for the pending pod group `namespace/name`."""
    args = args or PreemptionArgs()
    preemptor = new_pod_group_preemptor(snapshot, group_key, args)
    rationale: dict[str, Any] = {
        "strategy": POD_GROUP_STRATEGY,
        "plannerVersion": PLANNER_VERSION,
        "nodesTotal": len(snapshot.nodes()),
        "group": preemptor.policy_json(),
    }

    def decide(verdict: Verdict, message: str, **rest: Any) -> GroupDecision:
        return GroupDecision(
            preemptor.key, preemptor.uid, verdict, message, rationale=rationale, **rest
        )

    # 1) What the planner cannot judge, it refuses.
    if preemptor.unsupported:
        return decide(
            Verdict.UNSUPPORTED,
            f"the planner does not model {preemptor.unsupported}; it refuses rather than "
            "guesses which pods to preempt",
        )
    if not preemptor.pending:
        return decide(Verdict.INELIGIBLE, "no member of the group is pending")
    # 2) Ensure the preemptor is eligible to preempt other pods.
    eligible, why = preemptor_eligible_to_preempt_others(snapshot, preemptor)
    if not eligible:
        return decide(Verdict.INELIGIBLE, why)
    members = len(preemptor.pending) + len(preemptor.bound)
    if members < preemptor.min_count:
        return decide(
            Verdict.UNSCHEDULABLE,
            f"the group has {members} pod(s), fewer than its minCount {preemptor.min_count}",
        )
    if not snapshot.nodes():
        return decide(Verdict.UNSCHEDULABLE, ERR_NO_NODES)
    # The group on the cluster as it stands: if every pending member fits, nothing is evicted.
    now = schedule_pod_group(preemptor, domain_rooms(snapshot, preemptor, args, remove=False))
    if len(now.placement) == len(preemptor.pending):
        rationale["fits"] = dict(sorted(now.placement_keys().items()))
        return decide(
            Verdict.FITS_WITHOUT_PREEMPTION,
            f"all {len(preemptor.pending)} pending pod(s) fit without preemption on "
            f"{len(set(now.placement.values()))} node(s)",
        )
    return select_victims_on_domain(snapshot, preemptor, args, rationale, decide)


def select_victims_on_domain(
    snapshot: ClusterSnapshot,
    preemptor: PodGroupPreemptor,
    args: PreemptionArgs,
    rationale: dict[str, Any],
    decide: Callable[..., GroupDecision],
) -> GroupDecision:
    """`selectVictimsOnDomain`: remove every eligible unit, place the group once, keep that
    placement and reprieve the units that still let every placed member pass its filters."""
    # 3) Remove every potential victim from the domain (the whole cluster).
    rooms = domain_rooms(snapshot, preemptor, args, remove=True)
    removed = sum(room.removed for room in rooms.values())
    rationale["potentialVictimPods"] = removed
    if not removed:
        return decide(Verdict.UNSCHEDULABLE, ERR_NO_VICTIMS)
    # 4) Place the group once, on the cluster without them.
    scheduled = schedule_pod_group(preemptor, rooms)
    placed = len(scheduled.placement)
    rationale["placement"] = dict(sorted(scheduled.placement_keys().items()))
    if not enough_placed(preemptor, placed):
        return decide(
            Verdict.UNSCHEDULABLE,
            f"even with every lower-priority victim gone only {placed} of "
            f"{len(preemptor.pending)} pending pod(s) can be placed "
            f"({len(preemptor.bound)} bound, minCount {preemptor.min_count})"
            + (f"; {scheduled.first_reason}" if scheduled.first_reason else ""),
        )
    # 5) Reprieve, PDB-violating units first, then the rest, each most important first.
    units = UnitIndex(snapshot, args.pod_group_label)
    potential = affected_victims(snapshot, preemptor, args, scheduled, units)
    violating, non_violating = filter_affected_victims_with_pdb_violation(
        snapshot, preemptor, args, units, potential
    )
    reprieve = Reprieve(scheduled, rooms)
    taken: list[tuple[VictimUnit, int, str]] = []
    for unit, count in [*violating, *((unit, 0) for unit in non_violating)]:
        why = reprieve.victim(unit)
        if why is not None:
            taken.append((unit, count, why))
    taken.sort(key=lambda item: importance(item[0]))
    rationale["unitsConsidered"] = len(potential)
    rationale["unitsReprieved"] = len(potential) - len(taken)
    nominations = scheduled.placement_keys()
    if not taken:
        rationale["fits"] = dict(sorted(nominations.items()))
        return decide(
            Verdict.FITS_WITHOUT_PREEMPTION,
            f"{placed} pending pod(s) fit without evicting anyone",
        )
    choices = tuple(
        UnitChoice(
            unit.describe(),
            unit.whole,
            unit.priority,
            tuple(PodRef.of(pod) for pod in unit.pods),
            tuple(sorted({pod.node_name for pod in unit.pods})),
            count,
            why,
        )
        for unit, count, why in taken
    )
    victims = tuple(pod for choice in choices for pod in choice.pods)
    violations = sum(count for _, count, _ in taken)
    # Two counts, each saying what it counts: the nodes the victims run on, and the nodes
    # the members are placed on (their union counted neither).
    victim_nodes = {node for choice in choices for node in choice.nodes}
    placed_on = set(nominations.values())
    return decide(
        Verdict.PREEMPT,
        f"preempt {len(victims)} pod(s) in {len(choices)} unit(s) on {len(victim_nodes)} "
        f"node(s) to place {placed} of {len(preemptor.pending)} pending pod(s) on "
        f"{len(placed_on)} node(s) (minCount {preemptor.min_count}; {violations} PDB "
        "violation(s))",
        nominations=nominations,
        victims=victims,
        units=choices,
        num_pdb_violations=violations,
    )


# -- 1) the preemptor -------------------------------------------------------------------------


def new_pod_group_preemptor(
    snapshot: ClusterSnapshot, key: str, args: PreemptionArgs
) -> PodGroupPreemptor:
    """`newPodGroupPreemptor`: a PodGroup of the snapshot, else a group named by the
    configured label; `UnknownPodGroupError` when neither exists."""
    group = snapshot.pod_group(key)
    if group is not None:
        members = snapshot.group_members(key)
        policy = group.preemption_policy or _members_policy(members)
        return _preemptor(
            key,
            group.uid,
            UnitKind.POD_GROUP,
            group.priority,
            group.gang,
            group.min_count,
            policy,
            members,
            composite_preemptor(snapshot, group) or group.unsupported,
        )
    label = args.pod_group_label
    members = snapshot.label_group_members(label, key) if label else []
    if not members:
        known = f" nor a group named by the label {label}" if label else ""
        raise UnknownPodGroupError(f"pod group {key} is not in the snapshot (no PodGroup{known})")
    size = _label_group_size(members, args.pod_group_size_annotation)
    return _preemptor(
        key,
        min(pod.uid for pod in members),
        UnitKind.LABEL_GROUP,
        max(pod.priority for pod in members),
        True,
        size or len(members),
        _members_policy(members),
        members,
        "",
    )


def composite_preemptor(snapshot: ClusterSnapshot, group: PodGroup) -> str:
    """What refuses a PodGroup that has a parent: upstream's preemptor is then the root
    CompositePodGroup of its hierarchy (`newPodGroupPreemptor` with `GetCompositePodGroup`),
    placed with every group beneath it, or, while a parent is missing, nothing at all (the
    hierarchy waits in the queue); "" for a PodGroup at the root. Deliberate difference:
    the planner refuses (`Unsupported`) rather than place a composite group."""
    if not group.parent:
        return ""
    chain = snapshot.traverse_hierarchy_up(group.key)
    root = chain[-1]
    if root.parent:
        above = f"{group.namespace}/{root.parent}"
        if snapshot.composite_pod_group(above) is None:
            return (
                f"the CompositePodGroup {above} above {root.key} (not in the snapshot: "
                "kube-scheduler holds the hierarchy until it is whole)"
            )
        return (
            f"the CompositePodGroups above {group.key} (cyclic, or more than "
            f"{WORKLOAD_MAX_TREE_DEPTH} levels: kube-scheduler refuses such a hierarchy)"
        )
    return (
        f"the CompositePodGroup {root.key} the group belongs to (kube-scheduler places and "
        "preempts for the whole hierarchy as one, KEP-6012)"
    )


def _preemptor(
    key: str,
    uid: str,
    kind: UnitKind,
    priority: int,
    gang: bool,
    min_count: int,
    policy: str,
    members: Sequence[Pod],
    unsupported: str,
) -> PodGroupPreemptor:
    pending = tuple(sorted((p for p in members if not p.node_name), key=lambda p: p.name))
    bound = tuple(sorted((p for p in members if p.node_name), key=lambda p: p.name))
    return PodGroupPreemptor(
        key,
        uid,
        kind,
        priority,
        gang,
        min_count,
        policy,
        pending,
        bound,
        unsupported or _members_unsupported(pending),
    )


def _members_policy(members: Iterable[Pod]) -> str:
    """A group without its own preemptionPolicy is Never when any member says Never."""
    return PREEMPT_NEVER if any(p.preemption_policy == PREEMPT_NEVER for p in members) else ""


def _members_unsupported(pending: Sequence[Pod]) -> str:
    """What a pending member needs that the group placement does not judge ("" if none)."""
    for pod in pending:
        if pod.unsupported:
            return f"{pod.unsupported} of member {pod.key}"
        if pod.pod_affinity or pod.pod_anti_affinity:
            return f"pod (anti-)affinity of member {pod.key} in a group placement"
        if pod.spread_constraints:
            return f"topology spread constraints of member {pod.key} in a group placement"
        if pod.claims or pod.inline_csi:
            return f"volumes of member {pod.key} in a group placement"
    return ""


def _label_group_size(members: Sequence[Pod], annotation: str) -> int:
    """A label-named group's minCount from its members' size annotation (0: none given)."""
    if not annotation:
        return 0
    size = 0
    for pod in members:
        text = pod.annotations.get(annotation)
        if text is None:
            continue
        if not (text.isdigit() and len(text) <= 10) or not 0 < int(text) < 2**31:
            raise PlannerInputError(
                f"pod {pod.key}: annotation {annotation} must be a positive count, not {text!r}"
            )
        size = max(size, int(text))
    return size


# -- 2) eligibility ---------------------------------------------------------------------------


def preemptor_eligible_to_preempt_others(
    snapshot: ClusterSnapshot, preemptor: PodGroupPreemptor
) -> tuple[bool, str]:
    """`preemptorEligibleToPreemptOthers`: not with preemptionPolicy Never, nor while a
    lower-priority pod terminates by preemption on a node a member is nominated to."""
    if preemptor.preemption_policy == PREEMPT_NEVER:
        return False, ERR_NEVER
    for name in sorted({p.nominated_node_name for p in preemptor.pending if p.nominated_node_name}):
        info = snapshot.node(name)
        if info is None:
            continue
        for pod in info.pods.values():
            if pod.priority < preemptor.priority and pod_terminating_by_preemption(pod):
                return False, ERR_TERMINATING
    return True, ""


# -- 3) the domain without its potential victims ------------------------------------------------


def domain_rooms(
    snapshot: ClusterSnapshot,
    preemptor: PodGroupPreemptor,
    args: PreemptionArgs,
    *,
    remove: bool,
    ignoring: frozenset[str] = frozenset(),
) -> dict[str, Room]:
    """What each node offers the group: its allocatable less its pods (all of them, or with
    every potential victim removed: `removePods`) and less the pods nominated to it at the
    group's priority or above (`addGENominatedPods`), but those `ignoring` names (UIDs: not
    upstream; `claimed_room` asks what the group could do without the claims' pods). A node
    with a pod the view could not read offers nothing."""
    priority = preemptor.priority
    uncounted = {pod.uid for pod in preemptor.pending} | ignoring
    scalar_names = sorted({name for pod in preemptor.pending for name, _ in pod.requests.scalars})
    with_ports = any(pod.host_ports for pod in preemptor.pending)
    label = args.pod_group_label
    protected = args.protected_namespaces
    units = UnitIndex(snapshot, label)
    nominated = snapshot.nominated_node_names()
    rooms: dict[str, Room] = {}
    for info in snapshot.nodes():
        name = info.name
        if snapshot.rejected and snapshot.unreadable_pods(name):
            continue
        node = info.node
        assert node is not None
        allocatable = node.allocatable
        room = Room(
            name,
            node,
            allocatable.milli_cpu - info.milli_cpu,
            allocatable.memory - info.memory,
            allocatable.ephemeral_storage - info.ephemeral_storage,
            node.allowed_pods - len(info.pods),
            {s: allocatable.get(s) - info.scalars.get(s, 0) for s in scalar_names},
        )
        gone: list[Pod] = []
        if remove:
            start = info.lower_priority_start(priority)
            if start < len(info.pods):
                if protected or label or scalar_names or with_ports:
                    gone = [
                        pod
                        for pod in info.pods_by_importance()[start:]
                        if _removable(pod, priority, protected, units)
                    ]
                    room.take(gone, -1)
                    room.removed = len(gone)
                else:
                    freed_cpu, freed_memory, freed_ephemeral = info.suffix_requests(start)
                    room.cpu += freed_cpu
                    room.memory += freed_memory
                    room.ephemeral += freed_ephemeral
                    room.removed = len(info.pods) - start
                    room.slots += room.removed
        extra = []
        if name in nominated:
            extra = [
                p
                for p in snapshot.nominated_pods(name)
                if p.priority >= priority and p.uid not in uncounted
            ]
            room.take(extra)
        if with_ports:
            left = {pod.uid for pod in gone}
            room.ports = [
                port
                for pod in (*info.pods.values(), *extra)
                if pod.uid not in left
                for port in pod.host_ports
            ]
        rooms[name] = room
    return rooms


def _removable(pod: Pod, priority: int, protected: frozenset[str], units: UnitIndex) -> bool:
    """`isPreemptionAllowed` for the unit of a pod below the group's priority."""
    if pod.namespace in protected:
        return False
    if units.group_label and not pod.group and units.group_label in pod.labels:
        return units.unit_of(pod).priority < priority
    return True


# -- 4) placing the group once -------------------------------------------------------------------


@dataclass(slots=True)
class Scheduled:
    """`PodGroupAssignments`: where each placed member goes, in placement order."""

    members: dict[str, Pod]  # uid -> member
    placement: dict[str, str] = field(default_factory=dict)  # uid -> node
    on_node: dict[str, list[Pod]] = field(default_factory=dict)
    first_reason: str = ""

    def placement_keys(self) -> dict[str, str]:
        return {self.members[uid].key: node for uid, node in self.placement.items()}


def enough_placed(preemptor: PodGroupPreemptor, placed: int) -> bool:
    """A gang needs minCount members placed or bound; a basic group at least one placed."""
    if placed == 0:
        return False
    return not preemptor.gang or placed + len(preemptor.bound) >= preemptor.min_count


def schedule_pod_group(preemptor: PodGroupPreemptor, rooms: dict[str, Room]) -> Scheduled:
    """`podGroupSchedulingFunc`: each pending member, in name order, on the feasible node with
    the most cpu and memory left after it (ties: node name), as many as fit."""
    scheduled = Scheduled({pod.uid: pod for pod in preemptor.pending})
    heaps: dict[tuple[Any, ...], list[tuple[float, str]]] = {}
    for member in preemptor.pending:
        shape = (
            member.requests,
            member.host_ports,
            member.tolerations,
            member.node_selector,
            member.required_affinity,
            member.node_name,
        )
        heap = heaps.get(shape)
        if heap is None:
            heap = heaps[shape] = [
                (-_score(room, member.requests), name)
                for name, room in rooms.items()
                if _statically_fits(member, room.node) and _fits(member, room) is None
            ]
            heapq.heapify(heap)
            if not heap and not scheduled.first_reason:
                scheduled.first_reason = f"no node fits {member.key}"
        while heap:
            stored, name = heap[0]
            room = rooms[name]
            if _fits(member, room) is not None:
                heapq.heappop(heap)
                continue
            current = -_score(room, member.requests)
            if current != stored:
                heapq.heapreplace(heap, (current, name))
                continue
            room.take((member,))
            if room.ports is not None:
                room.ports.extend(member.host_ports)
            scheduled.placement[member.uid] = name
            scheduled.on_node.setdefault(name, []).append(member)
            heapq.heapreplace(heap, (-_score(room, member.requests), name))
            break
        else:
            if not scheduled.first_reason:
                scheduled.first_reason = f"no node has room left for {member.key}"
    return scheduled


def _statically_fits(pod: Pod, node: Node) -> bool:
    """NodeName, NodeUnschedulable, TaintToleration and NodeAffinity for a member."""
    if not (
        node.unschedulable
        or node.taints
        or pod.node_selector
        or pod.required_affinity is not None
        or pod.node_name
    ):
        return True
    return static_filters(pod, node).ok


def _fits(pod: Pod, room: Room) -> str | None:
    """NodeResourcesFit and NodePorts against the room; None when it fits, else why not."""
    r = pod.requests
    if room.slots < 1:
        return "Too many pods"
    if r.milli_cpu > 0 and r.milli_cpu > room.cpu:
        return "Insufficient cpu"
    if r.memory > 0 and r.memory > room.memory:
        return "Insufficient memory"
    if r.ephemeral_storage > 0 and r.ephemeral_storage > room.ephemeral:
        return "Insufficient ephemeral-storage"
    for name, amount in r.scalars:
        if amount > 0 and amount > room.scalars.get(name, 0):
            return f"Insufficient {name}"
    if (
        pod.host_ports
        and room.ports is not None
        and any(ports_conflict(w, used) for w in pod.host_ports for used in room.ports)
    ):
        return "host port conflict"
    return None


def _score(room: Room, want: Resources) -> float:
    """NodeResourcesFit's LeastAllocated score of the node with the pod on it (0..1)."""
    allocatable = room.node.allocatable
    total, counted = 0.0, 0
    if allocatable.milli_cpu > 0:
        total += (room.cpu - want.milli_cpu) / allocatable.milli_cpu
        counted += 1
    if allocatable.memory > 0:
        total += (room.memory - want.memory) / allocatable.memory
        counted += 1
    return total / counted if counted else 0.0


# -- 5) reprieving units ------------------------------------------------------------------------


def affected_victims(
    snapshot: ClusterSnapshot,
    preemptor: PodGroupPreemptor,
    args: PreemptionArgs,
    scheduled: Scheduled,
    units: UnitIndex,
) -> list[VictimUnit]:
    """The potential victims with a pod on a node where a member is placed (no other unit can
    keep a member from fitting), most important first (`MoreImportantVictim`)."""
    protected = args.protected_namespaces
    found: dict[tuple[UnitKind, str], VictimUnit] = {}
    for name in sorted(scheduled.on_node):
        info = snapshot.node_infos[name]
        for pod in info.lower_priority_pods(preemptor.priority):
            if not _removable(pod, preemptor.priority, protected, units):
                continue
            unit = units.unit_of(pod)
            if unit.priority < preemptor.priority:
                found.setdefault((unit.kind, unit.key), unit)
    return sorted(found.values(), key=importance)


def budgeted_potential_pods(
    snapshot: ClusterSnapshot, preemptor: PodGroupPreemptor, args: PreemptionArgs, units: UnitIndex
) -> list[tuple[Pod, tuple[int, ...]]]:
    """Every pod of the cluster that is a potential victim and some budget selects, with
    the budgets (`snapshot.sorted_pdbs` positions) that select it."""
    priority, protected = preemptor.priority, args.protected_namespaces
    found: list[tuple[Pod, tuple[int, ...]]] = []
    for info in snapshot.nodes():
        for pod in info.budgeted_below(snapshot, priority):
            if _removable(pod, priority, protected, units):
                found.append((pod, snapshot.matching_pdbs(pod)))
    return found


def filter_affected_victims_with_pdb_violation(
    snapshot: ClusterSnapshot,
    preemptor: PodGroupPreemptor,
    args: PreemptionArgs,
    units: UnitIndex,
    affected: Sequence[VictimUnit],
) -> tuple[list[tuple[VictimUnit, int]], list[VictimUnit]]:
    """`FilterVictimsWithPDBViolation` over every potential victim of the cluster, most
    important first, as upstream runs it, with the answer kept for the `affected` units (the
    others are always reprieved).

    Only the walk's part that can change that answer is walked: the units with a pod that a
    budget of an affected unit selects, or a budget such a pod also matches, and so on (a pod
    stops spending at the first budget it exceeds, so its other budgets count too). Every
    other unit spends only budgets no affected unit's pod can reach."""
    if not snapshot.pdbs:
        return [], list(affected)
    relevant = {
        index for unit in affected for pod in unit.pods for index in snapshot.matching_pdbs(pod)
    }
    if not relevant:
        return [], list(affected)
    candidates = budgeted_potential_pods(snapshot, preemptor, args, units)
    grew = True
    while grew:
        grew = False
        for _, matches in candidates:
            if not relevant.isdisjoint(matches) and not relevant.issuperset(matches):
                relevant.update(matches)
                grew = True
    walk = {(unit.kind, unit.key): unit for unit in affected}
    for pod, matches in candidates:
        if not relevant.isdisjoint(matches):
            unit = units.unit_of(pod)
            if unit.priority < preemptor.priority:
                walk.setdefault((unit.kind, unit.key), unit)
    keys = {(unit.kind, unit.key) for unit in affected}
    violating, non_violating = filter_victims_with_pdb_violation(
        sorted(walk.values(), key=importance), snapshot
    )
    return (
        [(unit, count) for unit, count in violating if (unit.kind, unit.key) in keys],
        [unit for unit in non_violating if (unit.kind, unit.key) in keys],
    )


class Reprieve:
    """`reprieveVictim` with the placement kept: a unit goes back when every member placed on
    a node it has pods on still passes its filters there, checked in placement order (each
    member beside the members placed before it)."""

    def __init__(self, scheduled: Scheduled, rooms: dict[str, Room]) -> None:
        self.scheduled = scheduled
        # Each placement node as it was before the members were placed on it.
        self.base: dict[str, Room] = {}
        for name, placed in scheduled.on_node.items():
            base = _copy(rooms[name])
            base.take(placed, -1)
            if base.ports is not None:
                for member in placed:
                    for port in member.host_ports:
                        base.ports.remove(port)
            self.base[name] = base

    def victim(self, unit: VictimUnit) -> str | None:
        """Put the unit back if it lets every member still fit; else why it cannot."""
        tried: dict[str, Room] = {}
        for pod in unit.pods:
            base = self.base.get(pod.node_name)
            if base is None:
                continue
            room = tried.get(pod.node_name)
            if room is None:
                room = tried[pod.node_name] = _copy(base)
            room.take((pod,))
            if room.ports is not None:
                room.ports.extend(pod.host_ports)
        for name in sorted(tried):
            check = _copy(tried[name])
            for member in self.scheduled.on_node[name]:
                why = _fits(member, check)
                if why is not None:
                    return f"{member.key} would not fit on {name} beside it ({why})"
                check.take((member,))
                if check.ports is not None:
                    check.ports.extend(member.host_ports)
        self.base.update(tried)
        return None


def _copy(room: Room) -> Room:
    return Room(
        room.name,
        room.node,
        room.cpu,
        room.memory,
        room.ephemeral,
        room.slots,
        dict(room.scalars),
        None if room.ports is None else list(room.ports),
        room.removed,
    )

"""kube-scheduler's DefaultPreemption, step by step, over a `ClusterSnapshot`.

`preempt` runs upstream's fixed sequence (`Evaluator.Preempt`) after the scheduling cycle
that failed (`find_nodes_that_fit`, step 0): check the preemptor is eligible, find the nodes
where preemption might help, dry-run preemption on a window of them, pick one, and list the
lower-priority nominations to clear. Each step is a function named for its upstream
counterpart; each returns what it found, and `preempt` alone assembles the rationale from
those results.

Deliberate differences, all for reproducibility: the dry-run window's offset is derived from
the preemptor's UID instead of drawn at random, the dry run walks the window in order (so its
early stop is exact), and every remaining tie (equal importance, equal node score) is broken
by name instead of by Go's map order or unstable sort.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from operator import attrgetter

from preemptctl.preemption.decision import (
    Decision,
    NodeEvaluation,
    PodRef,
    Rationale,
    SelectionStep,
    Strategy,
    Verdict,
)
from preemptctl.preemption.filters import (
    ERR_PORTS,
    SUCCESS,
    Code,
    Status,
    node_ports,
    node_resources_fit,
    ports_conflict,
    status_of,
)
from preemptctl.preemption.find_nodes_that_fit import (
    ERR_NO_NODES,
    NO_EXTRA,
    PREFILTER,
    NominatedExtra,
    Prefilter,
    filter_nodes,
    fit_error_message,
    nominated_extra,
    summarise_filters,
    unsupported_needs,
)
from preemptctl.preemption.objects import PREEMPT_NEVER, HostPort, Node, Pod, Resources
from preemptctl.preemption.pod_constraints import PodConstraints
from preemptctl.preemption.quantity import MAX_VALUE
from preemptctl.preemption.snapshot import ClusterSnapshot, NodeInfo, importance_key
from preemptctl.preemption.victim_units import (
    NodeUnits,
    UnitIndex,
    VictimUnit,
    filter_victims_with_pdb_violation,
    importance,
    node_units,
)

ERR_NO_VICTIMS = "No preemption victims found for incoming pod"
ERR_EXPECTED_VICTIM = "expected at least one victim pod on node"
ERR_LIST_FULL = "a candidate violating PDBs, not kept: that candidate list is full"
DEFAULT_PREEMPTION = "DefaultPreemption"

# What is free of a resource the preemptor does not request: upstream's `fitsRequest` never
# checks it, so no pod put back may exhaust it. Each pod's request is at most the largest
# int64 (a sum beyond it saturates there), and a node holds far fewer than 2**64 pods.
_UNLIMITED = MAX_VALUE << 64
_NEVER_STARTED = float("inf")  # upstream's GetPodStartTime falls back to "now": the newest
_INT32_OFFSET = 2**31  # upstream adds MaxInt32+1 so negative priorities sum sensibly


@dataclass(frozen=True, slots=True)
class PreemptionArgs:
    """`DefaultPreemptionArgs`: how many nodes the dry run looks at before it may stop."""

    min_candidate_nodes_percentage: int = 10
    min_candidate_nodes_absolute: int = 100
    # Guards an operator sets (not upstream arguments). Pods in these namespaces are never
    # victims: upstream's `IsEligiblePod` hook in `isPreemptionAllowed`, which its default
    # plugin leaves open.
    protected_namespaces: frozenset[str] = frozenset()
    # A node whose preemption would take more victims than this is not a candidate (0: no cap).
    max_victims: int = 0
    # Label-named groups (a setting, not upstream): pods whose `pod_group_label` has one value
    # in one namespace are a group, taken whole as victims (as `disruptionMode: all`) and
    # preempted for as one; its size (minCount) is the `pod_group_size_annotation` of a member.
    pod_group_label: str = ""
    pod_group_size_annotation: str = ""


@dataclass(slots=True)
class Candidate:
    """A node where preemption would make the preemptor fit, with the victims it takes."""

    node: str
    victims: list[Pod]
    num_pdb_violations: int


@dataclass(slots=True)
class DryRun:
    """What `dry_run_preemption` found: the candidates (non-violating first), the nodes it
    rejected and why, each node it judged in order, and whether it stopped early."""

    candidates: list[Candidate]
    rejected: dict[str, Status]
    evaluated: list[NodeEvaluation]
    stopped_early: bool


# -- the sequence ----------------------------------------------------------------------------


def preempt(
    snapshot: ClusterSnapshot, preemptor: Pod, args: PreemptionArgs | None = None
) -> Decision:
    """`Evaluator.Preempt`: the whole decision for one unschedulable pod."""
    args = args or PreemptionArgs()
    nodes = snapshot.nodes()
    rationale = Rationale(Strategy.DEFAULT, nodes_total=len(nodes))
    ref = PodRef.of(preemptor)

    def decide(
        status: Verdict,
        message: str,
        nominated_node: str | None = None,
        victims: tuple[PodRef, ...] = (),
        num_pdb_violations: int = 0,
        nominated_pods_to_clear: tuple[PodRef, ...] = (),
    ) -> Decision:
        return Decision(
            ref,
            status,
            message,
            rationale,
            nominated_node,
            victims,
            num_pdb_violations,
            nominated_pods_to_clear,
        )

    group = decided_as_group(preemptor, args)
    if group:
        return decide(
            Verdict.INELIGIBLE,
            f"not eligible: the pod belongs to pod group {group}, which preempts as one "
            f"(preemptctl plan --pod-group {group})",
        )
    if preemptor.node_name:
        return decide(
            Verdict.INELIGIBLE,
            f"pod is already bound to node {preemptor.node_name}; the kubelet's admission "
            "preemption (--strategy critical-admission) applies to bound pods",
        )
    if preemptor.terminating:
        return decide(Verdict.INELIGIBLE, "pod is terminating")
    refusal = unsupported_needs(snapshot, preemptor)
    if refusal:
        return decide(
            Verdict.UNSUPPORTED,
            f"the planner does not model {refusal}; it refuses rather than guesses which pods "
            "to preempt",
        )
    if not nodes:
        # schedulePod's ErrNoNodesAvailable: the cycle fails before any filter or PostFilter.
        return decide(Verdict.UNSCHEDULABLE, ERR_NO_NODES)

    # 0) The scheduling cycle that failed: PreFilter state, then every node's filter status.
    constraints = PodConstraints.prefilter(snapshot, preemptor)
    if constraints is not None and constraints.unsupported:
        return decide(
            Verdict.UNSUPPORTED,
            f"the planner does not model {constraints.unsupported}; it refuses rather than "
            "guesses which pods to preempt",
        )
    statuses = filter_nodes(snapshot, preemptor, constraints)
    summary = summarise_filters(statuses)
    rationale.filtered, rationale.filters = summary.filtered, summary.filters
    rationale.fits, rationale.unresolvable = summary.fits, summary.unresolvable
    if rationale.fits:
        message = (
            f"fits without preemption on {len(rationale.fits)} node(s), first {rationale.fits[0]}"
        )
        disagrees = preemptor.unschedulable
        if disagrees:
            message += (
                "; but the scheduler found no node for it (PodScheduled is Unschedulable"
                + (f": {preemptor.scheduler_message}" if preemptor.scheduler_message else "")
                + "), so nothing is evicted and the pod is retried after a backoff"
            )
        decision = decide(Verdict.FITS_WITHOUT_PREEMPTION, message)
        decision.scheduler_disagrees = disagrees
        return decision

    # 1) Ensure the preemptor is eligible to preempt other pods.
    eligible, why = pod_eligible_to_preempt_others(
        snapshot, preemptor, statuses.get(preemptor.nominated_node_name), args
    )
    if not eligible:
        return decide(Verdict.INELIGIBLE, why)

    # 2) Find all preemption candidates.
    potential = nodes_where_preemption_might_help(snapshot, statuses)
    rationale.potential_nodes = len(potential)
    if not potential:
        return decide(
            Verdict.UNSCHEDULABLE,
            fit_error_message(len(nodes), statuses, {}),
        )

    offset, wanted = offset_and_num_candidates(preemptor.uid, len(potential), args)
    rationale.offset, rationale.candidates_wanted = offset, wanted
    dry_run = dry_run_preemption(snapshot, preemptor, potential, offset, wanted, args, constraints)
    rationale.evaluated, rationale.stopped_early = dry_run.evaluated, dry_run.stopped_early
    candidates, rejected = dry_run.candidates, dry_run.rejected
    if not candidates:
        return decide(Verdict.UNSCHEDULABLE, fit_error_message(len(nodes), statuses, rejected))

    # 3) (upstream: call extenders; this planner has none) 4) Find the best candidate.
    best, rationale.selection, rationale.deciding_criterion = select_candidate(candidates)
    # 5) What the preemption touches beside its victims: lower-priority nominations to clear.
    victims = tuple(PodRef.of(pod) for pod in best.victims)
    to_clear = tuple(
        PodRef.of(pod) for pod in lower_priority_nominated_pods(snapshot, preemptor, best.node)
    )
    return decide(
        Verdict.PREEMPT,
        f"preempt {len(victims)} pod(s) on {best.node} ({best.num_pdb_violations} PDB "
        f"violation(s)); chosen by {rationale.deciding_criterion} among "
        f"{len(candidates)} candidate node(s)",
        nominated_node=best.node,
        victims=victims,
        num_pdb_violations=best.num_pdb_violations,
        nominated_pods_to_clear=to_clear,
    )


# -- step 1: eligibility --------------------------------------------------------------------------


def decided_as_group(preemptor: Pod, args: PreemptionArgs | None) -> str:
    """The group (`namespace/name`) whose preemption decides for this pod, "" if none.

    Upstream's `PostFilter` refuses a pod that names a pod group ("not eligible due to
    workload aware preemption enabled"): `PodGroupPostFilter` preempts for the whole group.
    A pod of a label-named group (a setting) is refused the same way.
    """
    if preemptor.group:
        return f"{preemptor.namespace}/{preemptor.group}"
    label = args.pod_group_label if args else ""
    if label:
        value = preemptor.labels.get(label)
        if value is not None:
            return f"{preemptor.namespace}/{value}"
    return ""


def pod_terminating_by_preemption(pod: Pod) -> bool:
    """`podTerminatingByPreemption`: deleting, with DisruptionTarget/PreemptionByScheduler."""
    return pod.terminating and pod.disrupted_by_scheduler


def is_preemption_allowed(victim: Pod, preemptor: Pod, args: PreemptionArgs | None) -> bool:
    """`isPreemptionAllowed`: a lower-priority pod that `IsEligiblePod` admits (here: not in
    a namespace the operator protects)."""
    if victim.priority >= preemptor.priority:
        return False
    return not (args and victim.namespace in args.protected_namespaces)


def pod_eligible_to_preempt_others(
    snapshot: ClusterSnapshot,
    preemptor: Pod,
    nominated_node_status: Status | None,
    args: PreemptionArgs | None = None,
) -> tuple[bool, str]:
    """`DefaultPreemption.PodEligibleToPreemptOthers`.

    Not eligible with `preemptionPolicy: Never`, nor while a lower-priority pod that an
    earlier preemption of this pod is evicting still terminates on its nominated node,
    unless that node has since become unresolvable for it.
    """
    if preemptor.preemption_policy == PREEMPT_NEVER:
        return False, "not eligible due to preemptionPolicy=Never."
    nominated = preemptor.nominated_node_name
    if nominated:
        if nominated_node_status is not None and nominated_node_status.code is Code.UNRESOLVABLE:
            return True, ""
        info = snapshot.node(nominated)
        if info is not None:
            for pod in info.pods.values():
                if is_preemption_allowed(pod, preemptor, args) and pod_terminating_by_preemption(
                    pod
                ):
                    return False, "not eligible due to a terminating pod on the nominated node."
    return True, ""


# -- step 2: candidates -------------------------------------------------------------------------


def nodes_where_preemption_might_help(
    snapshot: ClusterSnapshot, statuses: dict[str, Status]
) -> list[NodeInfo]:
    """`NodesForStatusCode(Unschedulable)`: nodes whose failure removing pods could cure."""
    unschedulable = Code.UNSCHEDULABLE
    return [info for info in snapshot.nodes() if statuses[info.name].code is unschedulable]


def calculate_num_candidates(num_nodes: int, args: PreemptionArgs) -> int:
    """`calculateNumCandidates`: a percentage of the nodes, at least an absolute floor."""
    wanted = num_nodes * args.min_candidate_nodes_percentage // 100
    wanted = max(wanted, args.min_candidate_nodes_absolute)
    return min(wanted, num_nodes)


def offset_and_num_candidates(uid: str, num_nodes: int, args: PreemptionArgs) -> tuple[int, int]:
    """`GetOffsetAndNumCandidates`, with the offset derived from the preemptor's UID (upstream:
    random) so the same pod in the same cluster always gets the same window."""
    digest = hashlib.sha256(uid.encode()).digest()
    offset = int.from_bytes(digest[:8], "big") % num_nodes
    return offset, calculate_num_candidates(num_nodes, args)


def dry_run_preemption(
    snapshot: ClusterSnapshot,
    preemptor: Pod,
    potential: list[NodeInfo],
    offset: int,
    wanted: int,
    args: PreemptionArgs | None = None,
    constraints: PodConstraints | Prefilter | None = PREFILTER,
) -> DryRun:
    """`Evaluator.DryRunPreemption`: select victims on each node from the offset on.

    Candidates that violate no PDB come first. Like upstream, the walk stops once it has a
    non-violating candidate and `wanted` candidates in all; walking in order (upstream walks
    in parallel) makes that stop exact. Each list holds at most `wanted` candidates, as
    upstream's `candidateList` does: a PDB-violating candidate found once `wanted` of them
    are kept is dropped (the walk goes on, looking for a non-violating one). A node needing
    more victims than `args.max_victims` allows is rejected, not a candidate.
    """
    if isinstance(constraints, Prefilter):
        constraints = PodConstraints.prefilter(snapshot, preemptor)
    max_victims = args.max_victims if args else 0
    units = UnitIndex(snapshot, args.pod_group_label if args else "")
    non_violating: list[Candidate] = []
    violating: list[Candidate] = []
    rejected: dict[str, Status] = {}
    evaluated: list[NodeEvaluation] = []
    stopped_early = False
    size = len(potential)
    for step in range(size):
        info = potential[(offset + step) % size]
        victims, num_violations, status = select_victims_on_node(
            snapshot, preemptor, info, args, constraints, units
        )
        if status.ok and max_victims and len(victims) > max_victims:
            status = status_of(
                Code.UNSCHEDULABLE,
                (f"needs {len(victims)} victims, more than the cap of {max_victims}",),
                DEFAULT_PREEMPTION,
            )
        if status.ok and victims:
            kept = violating if num_violations else non_violating
            if len(kept) >= wanted:
                evaluated.append(
                    NodeEvaluation(
                        info.name,
                        False,
                        reasons=(f"{ERR_LIST_FULL} ({wanted})",),
                        filter=DEFAULT_PREEMPTION,
                    )
                )
                continue
            kept.append(Candidate(info.name, victims, num_violations))
            evaluated.append(
                NodeEvaluation(
                    info.name,
                    True,
                    victims=tuple([f"{v.namespace}/{v.name}" for v in victims]),
                    num_pdb_violations=num_violations,
                )
            )
            if non_violating and len(non_violating) + len(violating) >= wanted:
                stopped_early = step + 1 < size
                break
            continue
        if status.ok:
            status = status_of(
                Code.UNSCHEDULABLE, (f"{ERR_EXPECTED_VICTIM} {info.name}",), DEFAULT_PREEMPTION
            )
        rejected[info.name] = status
        evaluated.append(
            NodeEvaluation(info.name, False, reasons=status.reasons, filter=status.plugin)
        )
    return DryRun(non_violating + violating, rejected, evaluated, stopped_early)


def select_victims_on_node(
    snapshot: ClusterSnapshot,
    preemptor: Pod,
    info: NodeInfo,
    args: PreemptionArgs | None = None,
    constraints: PodConstraints | Prefilter | None = PREFILTER,
    units: UnitIndex | None = None,
) -> tuple[list[Pod], int, Status]:
    """`DefaultPreemption.SelectVictimsOnNode`: the fewest, least important pods to remove.

    Remove every pod `isPreemptionAllowed` admits (RemovePod on the PreFilter state too); if
    the preemptor then fits, reprieve pods back one by one (PDB-violating ones first, each
    group most important first) as long as it still fits. Resources are checked
    incrementally (a reprieved pod fits when its request is within what is still free);
    spread and pod affinity by AddPod and the plugins' Filter, for the pods they count.

    For a preemptor without extended resources or host ports, on a node where the spread,
    affinity and volume state counts none of the pods it could remove (and, on a node some
    pod is nominated to, without any such state at all), the resource answer is kept on the
    node and reused by the next preemptor of the same priority and request while the node,
    its pods, what the nominations there add (`addGENominatedPods`) and every budget are
    unchanged. Claims in flight are nominations: the nodes they claimed are where the next
    decisions walk most often (their victims hidden, their preemptors nominated there).
    """
    if isinstance(constraints, Prefilter):
        constraints = PodConstraints.prefilter(snapshot, preemptor)
    want = preemptor.requests
    label = args.pod_group_label if args else ""
    if info.grouped or label:
        index = units or UnitIndex(snapshot, label)
        whole = node_units(snapshot, info, index)
        if whole.lowest_whole_priority < preemptor.priority:
            if (
                preemptor.host_ports
                or want.scalars
                or constraints is not None
                or snapshot.has_nominations(info.name)
            ):
                return select_victim_units_on_node(
                    snapshot, preemptor, info, args, constraints, index
                )
            # As below, kept per node; `whole` is rebuilt when a whole group with a pod here
            # changes anywhere, so it is part of the key.
            unit_key = (
                whole,
                snapshot.pdb_version,
                preemptor.priority,
                want.milli_cpu,
                want.memory,
                want.ephemeral_storage,
                args.protected_namespaces if args else frozenset(),
            )
            found = info.remembered(unit_key)
            if found is None:
                victims, violations, status = _select_whole_units_on_node(
                    snapshot, preemptor, info, args, whole
                )
                found = (tuple(victims), violations, status)
                info.remember(unit_key, found)
            return list(found[0]), found[1], found[2]
    nominations = snapshot.has_nominations(info.name)
    if (
        preemptor.host_ports
        or want.scalars
        or (nominations and constraints is not None)
        or (constraints is not None and _counted_on(constraints, info, preemptor.priority))
    ):
        return _select_victims_on_node(snapshot, preemptor, info, args, constraints)
    # What remains to read is the node, its pods and the budgets (the spread, affinity and
    # volume state counts none of the pods it could remove, so it stays as PreFilter left
    # it): a burst of one workload's replicas (one priority, one request) finds the node's
    # answer kept from the last decision that visited it, as long as none has changed since.
    key: tuple[Hashable, ...] = (
        snapshot.pdb_version,
        preemptor.priority,
        want.milli_cpu,
        want.memory,
        want.ephemeral_storage,
        args.protected_namespaces if args else frozenset(),
    )
    if nominations:  # without PreFilter state they add only their requests and their count
        extra = nominated_extra(snapshot, preemptor, info.name)
        key = (*key, extra.requests, extra.count)
    kept = info.remembered(key)
    if kept is None:
        kept = _select_victims_on_node(snapshot, preemptor, info, args, None)
        kept = (tuple(kept[0]), kept[1], kept[2])
        info.remember(key, kept)
    victims, violations, status = kept
    if constraints is not None and status.ok:
        # With every lower-priority pod gone the resources fit: then the plugins' Filter
        # on the unchanged state decides whether the node can be a candidate at all.
        assert info.node is not None
        judged = constraints.filter(info.node)
        if not judged.ok:
            return [], 0, judged
    return list(victims), violations, status


def _select_whole_units_on_node(
    snapshot: ClusterSnapshot,
    preemptor: Pod,
    info: NodeInfo,
    args: PreemptionArgs | None,
    whole: NodeUnits,
) -> tuple[list[Pod], int, Status]:
    """`select_victim_units_on_node` for a preemptor that only resources can stop (no host
    ports, extended resources, spread, affinity or volumes to judge, nobody nominated to
    the node), from the node's kept units: the same answer, without building any unit, and
    `FilterVictimsWithPDBViolation` read from the units' kept budget matches."""
    start = whole.lower_priority_start(preemptor.priority)
    units, here = whole.units, whole.here
    protected = args.protected_namespaces if args else frozenset()
    if protected:
        positions = [
            position
            for position in range(start, len(units))
            if not any(pod.namespace in protected for pod in units[position].pods)
        ]
        freed_cpu = sum(here[i][0] for i in positions)
        freed_memory = sum(here[i][1] for i in positions)
        freed_ephemeral = sum(here[i][2] for i in positions)
        removed = sum(here[i][3] for i in positions)
        budgeted = any(whole.budgets[i] for i in positions)
    else:
        positions = list(range(start, len(units)))
        freed_cpu, freed_memory, freed_ephemeral, removed = whole.suffix[start]
        budgeted = whole.budgeted_from[start]
    if not positions:
        return [], 0, status_of(Code.UNRESOLVABLE, (ERR_NO_VICTIMS,), DEFAULT_PREEMPTION)
    free = _free_after_removal(
        preemptor, info, NO_EXTRA, (), (freed_cpu, freed_memory, freed_ephemeral), removed
    )
    if not free.fits():
        name = info.name
        gone = [pod for i in positions for pod in units[i].pods if pod.node_name == name]
        return [], 0, _why_not(preemptor, info, NO_EXTRA, gone)
    violating: list[tuple[int, int]] = []  # (position, violating pods)
    non_violating = positions
    if budgeted:
        pdbs = snapshot.sorted_pdbs()
        left: dict[int, int] = {}
        non_violating = []
        for position in positions:
            count = 0
            for pod_name, matches in whole.budgets[position]:
                for index in matches:
                    pdb = pdbs[index]
                    if pod_name in pdb.disrupted_pods:
                        continue
                    remaining = left.get(index, pdb.disruptions_allowed) - 1
                    left[index] = remaining
                    if remaining < 0:
                        count += 1
                        break
            if count:
                violating.append((position, count))
            else:
                non_violating.append(position)
    taken: list[int] = []
    num_violating = 0
    slots, cpu, memory, ephemeral = free.slots, free.cpu, free.memory, free.ephemeral
    for position, count in [*violating, *((position, 0) for position in non_violating)]:
        c, m, e, n = here[position]
        if slots < n or c > cpu or m > memory or e > ephemeral:
            taken.append(position)
            num_violating += count
            continue
        slots -= n
        cpu -= c
        memory -= m
        ephemeral -= e
    if violating and non_violating:
        taken.sort()  # units are kept most important first
    return [pod for position in taken for pod in units[position].pods], num_violating, SUCCESS


def select_victim_units_on_node(
    snapshot: ClusterSnapshot,
    preemptor: Pod,
    info: NodeInfo,
    args: PreemptionArgs | None,
    constraints: PodConstraints | None,
    units: UnitIndex | None = None,
) -> tuple[list[Pod], int, Status]:
    """`SelectVictimsOnNode` when the node holds pods of groups taken whole: the same
    remove-all-then-reprieve, one victim unit at a time (upstream's `DomainVictim`).

    A unit is eligible when its priority is below the preemptor's and none of its pods is
    protected (`isPreemptionAllowedAcrossAllVictimNodes`). Its pods on this node free
    resources here; its pods on other nodes are removed from the spread, affinity and volume
    state only (upstream runs PreFilterExtension RemovePod/AddPod with the remote node and
    filters this node alone). Victims are every pod of every unit not reprieved, on any node;
    the PDB violations count the violating pods of those units.
    """
    node = info.node
    assert node is not None
    index = units or UnitIndex(snapshot, args.pod_group_label if args else "")
    protected = args.protected_namespaces if args else frozenset()
    potential = [
        unit
        for unit in index.units_of(info.lower_priority_pods(preemptor.priority))
        if unit.priority < preemptor.priority
        and not (protected and any(pod.namespace in protected for pod in unit.pods))
    ]
    if not potential:
        return [], 0, status_of(Code.UNRESOLVABLE, (ERR_NO_VICTIMS,), DEFAULT_PREEMPTION)
    potential.sort(key=importance)
    here = [pod for unit in potential for pod in unit.pods if pod.node_name == info.name]
    extra = nominated_extra(snapshot, preemptor, info.name)
    freed = (
        sum(pod.requests.milli_cpu for pod in here),
        sum(pod.requests.memory for pod in here),
        sum(pod.requests.ephemeral_storage for pod in here),
    )
    free = _free_after_removal(preemptor, info, extra, here, freed)
    wanted_ports = preemptor.host_ports
    if not free.fits() or (wanted_ports and _ports_blocked(preemptor, info, extra, here)):
        return [], 0, _why_not(preemptor, info, extra, here)
    if constraints is not None:
        constraints.begin()
    try:
        if constraints is not None:
            for unit in potential:
                _update_unit(snapshot, constraints, unit, -1)
            status = constraints.filter_with_nominated(node, extra.pods)
            if not status.ok:
                return [], 0, status
        violating, non_violating = filter_victims_with_pdb_violation(potential, snapshot)
        victims: list[VictimUnit] = []
        num_violating = 0
        tried = [*violating, *((unit, 0) for unit in non_violating)]
        for unit, count in tried:
            if not _reprieve_unit(snapshot, unit, info, free, wanted_ports, constraints, extra):
                victims.append(unit)
                num_violating += count
    finally:
        if constraints is not None:
            constraints.restore()
    if violating and non_violating:
        victims.sort(key=importance)
    return [pod for unit in victims for pod in unit.pods], num_violating, SUCCESS


def _update_unit(
    snapshot: ClusterSnapshot, constraints: PodConstraints, unit: VictimUnit, sign: int
) -> None:
    """RemovePod (-1) or AddPod (1) of each of the unit's pods, on the node it is on."""
    for pod in unit.pods:
        if constraints.affects(pod):
            where = snapshot.node_infos.get(pod.node_name)
            if where is not None and where.node is not None:
                constraints.update(pod, where.node, sign)


def _reprieve_unit(
    snapshot: ClusterSnapshot,
    unit: VictimUnit,
    info: NodeInfo,
    free: _Free,
    wanted_ports: tuple[HostPort, ...],
    constraints: PodConstraints | None,
    extra: NominatedExtra,
) -> bool:
    """`reprieveVictim`: put the whole unit back; it stays if the preemptor still passes
    every filter on this node (its pods elsewhere matter to spread and affinity only)."""
    if len(unit.pods) == 1:
        here = list(unit.pods)
        r = here[0].requests
        cpu, memory, ephemeral = r.milli_cpu, r.memory, r.ephemeral_storage
    else:
        here = [pod for pod in unit.pods if pod.node_name == info.name]
        cpu = sum(pod.requests.milli_cpu for pod in here)
        memory = sum(pod.requests.memory for pod in here)
        ephemeral = sum(pod.requests.ephemeral_storage for pod in here)
    scalars = (
        {name: sum(pod.requests.get(name) for pod in here) for name in free.scalars}
        if free.scalars
        else {}
    )
    if (
        free.slots < len(here)
        or cpu > free.cpu
        or memory > free.memory
        or ephemeral > free.ephemeral
        or any(amount > free.scalars[name] for name, amount in scalars.items())
    ):
        return False
    if wanted_ports and any(
        ports_conflict(w, used) for w in wanted_ports for pod in here for used in pod.host_ports
    ):
        return False
    if constraints is not None:
        _update_unit(snapshot, constraints, unit, 1)
        assert info.node is not None
        if not constraints.filter_with_nominated(info.node, extra.pods).ok:
            _update_unit(snapshot, constraints, unit, -1)
            return False
    free.slots -= len(here)
    free.cpu -= cpu
    free.memory -= memory
    free.ephemeral -= ephemeral
    for name, amount in scalars.items():
        free.scalars[name] -= amount
    return True


def _counted_on(constraints: PodConstraints, info: NodeInfo, priority: int) -> bool:
    """Whether removing or reprieving some pod below `priority` on the node changes the
    spread, affinity or volume state (the dry run's RemovePod / AddPod)."""
    effects, groups = constraints.effects, constraints.existing_groups
    for pod in info.lower_priority_pods(priority):
        terms = pod.pod_anti_affinity
        if pod.uid in effects or (groups and terms and terms in groups):
            return True
    return False


def _select_victims_on_node(
    snapshot: ClusterSnapshot,
    preemptor: Pod,
    info: NodeInfo,
    args: PreemptionArgs | None,
    constraints: PodConstraints | None,
) -> tuple[list[Pod], int, Status]:
    node = info.node
    assert node is not None
    # The pods below the preemptor's priority are a suffix of the importance order; the
    # rest of `is_preemption_allowed` is applied to that suffix only when it can matter.
    start = info.lower_priority_start(preemptor.priority)
    potential = info.pods_by_importance()[start:]
    protected = args.protected_namespaces if args else frozenset()
    if protected:
        potential = [pod for pod in potential if is_preemption_allowed(pod, preemptor, args)]
    if not potential:
        return [], 0, status_of(Code.UNRESOLVABLE, (ERR_NO_VICTIMS,), DEFAULT_PREEMPTION)

    extra = nominated_extra(snapshot, preemptor, info.name)
    if protected:
        freed = (
            sum(pod.requests.milli_cpu for pod in potential),
            sum(pod.requests.memory for pod in potential),
            sum(pod.requests.ephemeral_storage for pod in potential),
        )
        matches = [snapshot.matching_pdbs(pod) for pod in potential]
    else:
        freed = info.suffix_requests(start)
        matches = info.pdb_matches(snapshot)[start:]
    free = _free_after_removal(preemptor, info, extra, potential, freed)
    wanted_ports = preemptor.host_ports
    if not free.fits() or (wanted_ports and _ports_blocked(preemptor, info, extra, potential)):
        return [], 0, _why_not(preemptor, info, extra, potential)

    judged = None
    if constraints is not None:
        judged = constraints
        judged.begin()
        effects, groups = judged.effects, judged.existing_groups
        for pod in potential:
            terms = pod.pod_anti_affinity
            if pod.uid in effects or (groups and terms and terms in groups):
                judged.update(pod, node, -1)
        status = judged.filter_with_nominated(node, extra.pods)
        if not status.ok:
            judged.restore()
            return [], 0, status

    if any(matches):
        violating, non_violating = filter_pods_with_pdb_violation(potential, snapshot, matches)
    else:
        violating, non_violating = [], potential
    try:
        victims, num_violating = _reprieve_pods(
            ((violating, True), (non_violating, False)), free, wanted_ports, judged, node, extra
        )
    finally:
        if judged is not None:
            judged.restore()
    if violating and non_violating:
        victims.sort(key=importance_key)
    return victims, num_violating, SUCCESS


def _reprieve_pods(
    groups: tuple[tuple[list[Pod], bool], ...],
    free: _Free,
    wanted_ports: tuple[HostPort, ...],
    constraints: PodConstraints | None,
    node: Node,
    extra: NominatedExtra,
) -> tuple[list[Pod], int]:
    """`reprievePod`, the one routine: put each pod back if the preemptor still fits beside
    it; the pods that cannot be put back are the victims (and how many violate a PDB).

    Resources are compared inline (this loop runs for every pod on every node the dry run
    visits: the planner's hot path); scalars, host ports and the spread and affinity state are
    checked only when the preemptor has any.
    """
    victims: list[Pod] = []
    num_violating = 0
    slots, cpu, memory, ephemeral = free.slots, free.cpu, free.memory, free.ephemeral
    scalars = free.scalars
    check_every_pod = bool(scalars or wanted_ports)
    counted = constraints.effects if constraints is not None else {}
    anti_groups = constraints.existing_groups if constraints is not None else {}
    resources_only = not (check_every_pod or counted or anti_groups)
    for group, counts_as_violation in groups:
        for pod in group:
            r = pod.requests
            if (
                slots >= 1
                and r.milli_cpu <= cpu
                and r.memory <= memory
                and r.ephemeral_storage <= ephemeral
                and (
                    resources_only
                    or not (
                        check_every_pod
                        or pod.uid in counted
                        or (
                            anti_groups
                            and pod.pod_anti_affinity
                            and pod.pod_anti_affinity in anti_groups
                        )
                    )
                    or _also_fits_beside(pod, scalars, wanted_ports, constraints, node, extra)
                )
            ):
                slots -= 1
                cpu -= r.milli_cpu
                memory -= r.memory
                ephemeral -= r.ephemeral_storage
            else:
                victims.append(pod)
                num_violating += counts_as_violation
    free.slots, free.cpu, free.memory, free.ephemeral = slots, cpu, memory, ephemeral
    return victims, num_violating


def _also_fits_beside(
    pod: Pod,
    scalars: dict[str, int],
    wanted_ports: tuple[HostPort, ...],
    constraints: PodConstraints | None,
    node: Node,
    extra: NominatedExtra,
) -> bool:
    """The rest of the reprieve check once cpu, memory, storage and the pod slot fit: extended
    resources, host ports, and (AddPod, then Filter) spread and pod affinity. On success the
    pod is back in the state and its extended resources are taken from `scalars`."""
    r = pod.requests
    if scalars and any(r.get(name) > left for name, left in scalars.items()):
        return False
    if wanted_ports and any(
        ports_conflict(w, used) for w in wanted_ports for used in pod.host_ports
    ):
        return False
    if constraints is not None and constraints.affects(pod):
        constraints.update(pod, node, 1)
        if not constraints.filter_with_nominated(node, extra.pods).ok:
            constraints.update(pod, node, -1)
            return False
    for name in scalars:
        scalars[name] -= r.get(name)
    return True


class _Free:
    """Free capacity on a node for the preemptor's checked resources (others are unlimited)."""

    __slots__ = ("cpu", "ephemeral", "memory", "scalars", "slots")

    def __init__(
        self, cpu: int, memory: int, ephemeral: int, scalars: dict[str, int], slots: int
    ) -> None:
        self.cpu, self.memory, self.ephemeral = cpu, memory, ephemeral
        self.scalars = scalars
        self.slots = slots

    def fits(self) -> bool:
        if self.slots < 0 or self.cpu < 0 or self.memory < 0 or self.ephemeral < 0:
            return False
        return not self.scalars or all(amount >= 0 for amount in self.scalars.values())


def _free_after_removal(
    preemptor: Pod,
    info: NodeInfo,
    extra: NominatedExtra,
    removed: Sequence[Pod],
    freed: tuple[int, int, int],
    count: int = -1,
) -> _Free:
    """What is free for the preemptor once `removed` (requesting `freed` cpu, memory and
    ephemeral storage) are gone; resources the preemptor does not request are never checked
    (upstream skips them), so they are unlimited. `count` (when given) says how many pods
    go, for a caller that has no list of them (its preemptor asks no extended resource)."""
    node = info.node
    assert node is not None
    want = preemptor.requests
    gone = count if count >= 0 else len(removed)
    slots = node.allowed_pods - (len(info.pods) - gone) - extra.count - 1
    if want.is_zero():
        return _Free(_UNLIMITED, _UNLIMITED, _UNLIMITED, {}, slots)
    freed_cpu, freed_memory, freed_ephemeral = freed
    allocatable, nominated = node.allocatable, extra.requests
    cpu = memory = ephemeral = _UNLIMITED
    if want.milli_cpu > 0:
        cpu = (
            allocatable.milli_cpu
            - info.milli_cpu
            + freed_cpu
            - nominated.milli_cpu
            - want.milli_cpu
        )
    if want.memory > 0:
        memory = allocatable.memory - info.memory + freed_memory - nominated.memory - want.memory
    if want.ephemeral_storage > 0:
        ephemeral = (
            allocatable.ephemeral_storage
            - info.ephemeral_storage
            + freed_ephemeral
            - nominated.ephemeral_storage
            - want.ephemeral_storage
        )
    scalars: dict[str, int] = {}
    if want.scalars:
        for name, amount in want.scalars:
            if amount > 0:
                freed_scalar = sum(pod.requests.get(name) for pod in removed)
                scalars[name] = (
                    allocatable.get(name)
                    - info.scalars.get(name, 0)
                    + freed_scalar
                    - nominated.get(name)
                    - amount
                )
    return _Free(cpu, memory, ephemeral, scalars, slots)


def _ports_blocked(
    preemptor: Pod, info: NodeInfo, extra: NominatedExtra, removed: list[Pod]
) -> bool:
    removed_uids = {pod.uid for pod in removed}
    remaining = [
        port for pod in info.pods.values() if pod.uid not in removed_uids for port in pod.host_ports
    ]
    return not node_ports(preemptor.host_ports, [*remaining, *extra.ports]).ok


def _why_not(preemptor: Pod, info: NodeInfo, extra: NominatedExtra, removed: list[Pod]) -> Status:
    """The filter status with every potential victim gone (computed only on rejection)."""
    assert info.node is not None
    if preemptor.host_ports and _ports_blocked(preemptor, info, extra, removed):
        return status_of(Code.UNSCHEDULABLE, (ERR_PORTS,), "NodePorts")
    removed_uids = {pod.uid for pod in removed}
    remaining = Resources()
    kept = [pod for pod in info.pods.values() if pod.uid not in removed_uids]
    for pod in kept:
        remaining = remaining + pod.requests
    return node_resources_fit(
        preemptor.requests, info.node, remaining + extra.requests, len(kept) + extra.count
    )


def filter_pods_with_pdb_violation(
    pods: Sequence[Pod],
    snapshot: ClusterSnapshot,
    matches: Sequence[tuple[int, ...]] | None = None,
) -> tuple[list[Pod], list[Pod]]:
    """`FilterVictimsWithPDBViolation` for victims of one pod: split pods into those whose
    eviction would exceed a budget and the rest.

    Budgets are counted afresh for each node. `matches` (the budgets selecting each pod) may
    be passed in when the caller has them cached. A pod already listed in a PDB's
    `disruptedPods` has been counted by the API server and does not spend budget again; a pod
    stops spending at the first budget it exceeds (upstream's `podIsViolating`; the older
    `filterPodsWithPDBViolation` spent every matching budget).
    """
    pdbs = snapshot.sorted_pdbs()
    spent: dict[int, int] = {}
    violating: list[Pod] = []
    non_violating: list[Pod] = []
    if matches is None:
        matches = [snapshot.matching_pdbs(pod) for pod in pods]
    for pod, pod_matches in zip(pods, matches, strict=True):
        violated = False
        for index in pod_matches:
            pdb = pdbs[index]
            if pod.name in pdb.disrupted_pods:
                continue
            left = spent.get(index, pdb.disruptions_allowed) - 1
            spent[index] = left
            if left < 0:
                violated = True
                break
        (violating if violated else non_violating).append(pod)
    return violating, non_violating


# -- step 4: choosing the node ------------------------------------------------------------------


_priority = attrgetter("priority")


def _earliest_start_of_most_important(victims: list[Pod]) -> float:
    """`GetEarliestPodStartTime`: earliest start among the highest-priority victims."""
    top = max(pod.priority for pod in victims)
    return min(
        pod.start_time if pod.start_time is not None else _NEVER_STARTED
        for pod in victims
        if pod.priority == top
    )


SCORE_FUNCTIONS: tuple[tuple[str, Callable[[Candidate], float]], ...] = (
    # A node whose victims violate the fewest PDBs.
    ("minNumPDBViolations", lambda c: -c.num_pdb_violations),
    # A node whose most important victim is the least important.
    ("minHighestPriority", lambda c: -max(map(_priority, c.victims))),
    # A node with the smallest sum of victim priorities (each shifted to be non-negative).
    (
        "minSumPriorities",
        lambda c: -(sum(map(_priority, c.victims)) + _INT32_OFFSET * len(c.victims)),
    ),
    # A node with the fewest victims.
    ("minNumPods", lambda c: -len(c.victims)),
    # A node whose most important victims started the latest.
    ("latestStartTime", lambda c: _earliest_start_of_most_important(c.victims)),
)


def pick_one_node_for_preemption(
    candidates: Sequence[Candidate],
) -> tuple[Candidate, list[SelectionStep]]:
    """`pickOneNodeForPreemption`: apply the criteria in order until one node is left.

    Upstream's final tie-break is the first node in Go map order; ours is the node name.
    """
    remaining = sorted(candidates, key=lambda c: c.node)
    steps: list[SelectionStep] = []
    for criterion, score in SCORE_FUNCTIONS:
        scores = [score(c) for c in remaining]
        best = max(scores)
        remaining = [c for c, s in zip(remaining, scores, strict=True) if s == best]
        steps.append(SelectionStep(criterion, tuple(c.node for c in remaining)))
        if len(remaining) == 1:
            return remaining[0], steps
    steps.append(SelectionStep("nodeName", (remaining[0].node,)))
    return remaining[0], steps


def select_candidate(
    candidates: Sequence[Candidate],
) -> tuple[Candidate, list[SelectionStep], str]:
    """`Evaluator.SelectCandidate`: the only candidate, or the one the criteria pick; with
    the criteria's steps and the one that decided."""
    if len(candidates) == 1:
        return candidates[0], [], "onlyCandidate"
    best, steps = pick_one_node_for_preemption(candidates)
    return best, steps, steps[-1].criterion


# -- step 5: what else the decision touches ----------------------------------------------------


def lower_priority_nominated_pods(
    snapshot: ClusterSnapshot, preemptor: Pod, node: str
) -> list[Pod]:
    """`getLowerPriorityNominatedPods`: nominations to this node the preemptor outranks."""
    pods = [
        pod
        for pod in snapshot.nominated_pods(node)
        if pod.priority < preemptor.priority and pod.uid != preemptor.uid
    ]
    return sorted(pods, key=importance_key)

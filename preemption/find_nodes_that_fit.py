"""The scheduling cycle that failed, as kube-scheduler runs it before any PostFilter: "step 0".

`schedulePod` → `findNodesThatFitPod`: the PreFilter state, then every node's filter status
with the pods nominated there counted in (`RunFilterPluginsWithNominatedPods`,
`addGENominatedPods`), and the `FitError` the scheduler writes when no node fits. The
preemption planners start from what this pass found; the emulator's simulated scheduler
runs the same pass to bind pods, so the two can never judge a node differently.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from preemptctl.preemption.diagnosis import unmodeled_scheduler_reasons
from preemptctl.preemption.filters import (
    SUCCESS,
    Code,
    Status,
    fits_request,
    node_ports,
    static_filters,
    status_of,
)
from preemptctl.preemption.objects import HostPort, Pod, Resources
from preemptctl.preemption.pod_constraints import PodConstraints, term_covers_namespace
from preemptctl.preemption.snapshot import ClusterSnapshot, NodeInfo

ERR_NOT_HELPFUL = "Preemption is not helpful for scheduling"
UNREADABLE_POD = "ClusterView"
ERR_NO_NODES = "no nodes available to schedule pods"


@dataclass(slots=True)
class FilterSummary:
    """The filter pass for people: failures counted by reason, each reason's filter, the
    nodes that fit and those preemption cannot help (by their first reason)."""

    filtered: dict[str, int]
    filters: dict[str, str]
    fits: list[str]
    unresolvable: dict[str, list[str]]


@dataclass(slots=True)
class NominatedExtra:
    """What nominated pods of equal or higher priority add to a node (`addGENominatedPods`)."""

    requests: Resources
    count: int
    ports: tuple[HostPort, ...]
    pods: tuple[Pod, ...]

    @classmethod
    def of(cls, pods: Sequence[Pod]) -> NominatedExtra:
        total = Resources()
        for pod in pods:
            total = total + pod.requests
        return cls(total, len(pods), tuple(p for pod in pods for p in pod.host_ports), tuple(pods))


NO_EXTRA = NominatedExtra(Resources(), 0, (), ())


class Prefilter:
    """Marks "compute the PreFilter state here" where a caller has none to pass."""


PREFILTER = Prefilter()


def unsupported_needs(snapshot: ClusterSnapshot, preemptor: Pod) -> str:
    """What the preemptor needs judged that the planner does not model ("" if nothing): its
    own spec (DRA claims, volumes), a namespaceSelector with no Namespace objects to read,
    or a reason the scheduler gave from a filter the planner does not run."""
    if preemptor.unsupported:
        return preemptor.unsupported
    if not snapshot.namespaces and any(
        term.namespace_selector is not None
        for term in (*preemptor.pod_affinity, *preemptor.pod_anti_affinity)
    ):
        return (
            "a namespaceSelector without Namespace objects (add namespaces to the snapshot: "
            "kubectl get nodes,pods,pdb,namespaces -A -o json)"
        )
    unmodeled = unmodeled_scheduler_reasons(preemptor.scheduler_message)
    if unmodeled:
        return f"the scheduler's reason {unmodeled[0]!r} (from a filter the planner does not run)"
    return selectors_over_labels_beyond_caps(snapshot, preemptor)


def selectors_over_labels_beyond_caps(snapshot: ClusterSnapshot, preemptor: Pod) -> str:
    """The preemptor's spread constraints or anti-affinity terms reading a namespace where
    some pod's labels exceeded the caps and were not all kept ("" if none).

    Neither can be judged without those labels: counting such a pod in its spread domain,
    or not, can each let through a node the scheduler rejects, and taking it for no match
    of an anti-affinity term can too. (Required affinity can: a pod whose labels are not
    known counts as matching nothing, so at worst a node is missed.)"""
    hidden = snapshot.namespaces_with_labels_over_cap()
    if not hidden:
        return ""
    reason = "pod(s) whose labels exceed the planner's caps (only part of them was kept)"
    if preemptor.spread_constraints and preemptor.namespace in hidden:
        count = len(snapshot.labels_over_cap(preemptor.namespace))
        return (
            f"topology spread constraints over namespace {preemptor.namespace}, with "
            f"{count} {reason}"
        )
    for term in preemptor.pod_anti_affinity:
        for namespace in sorted(hidden):
            if term_covers_namespace(term, namespace, snapshot.namespace_labels(namespace)):
                count = len(snapshot.labels_over_cap(namespace))
                return f"pod anti-affinity over namespace {namespace}, with {count} {reason}"
    return ""


def nominated_extra(snapshot: ClusterSnapshot, preemptor: Pod, node: str) -> NominatedExtra:
    """`addGENominatedPods`: pods nominated here at >= the preemptor's priority count as placed."""
    if not snapshot.has_nominations(node):
        return NO_EXTRA
    nominated = [
        pod
        for pod in snapshot.nominated_pods(node)
        if pod.priority >= preemptor.priority and pod.uid != preemptor.uid
    ]
    return NominatedExtra.of(nominated) if nominated else NO_EXTRA


def filter_node(
    snapshot: ClusterSnapshot,
    preemptor: Pod,
    info: NodeInfo,
    constraints: PodConstraints | Prefilter | None = PREFILTER,
) -> Status:
    """`RunFilterPluginsWithNominatedPods` on one node, as it stands."""
    if isinstance(constraints, Prefilter):
        constraints = PodConstraints.prefilter(snapshot, preemptor)
    node = info.node
    assert node is not None
    if (
        node.unschedulable
        or node.taints
        or preemptor.node_selector
        or preemptor.required_affinity is not None  # no terms at all matches no node
    ):
        status = static_filters(preemptor, node)
        if not status.ok:
            return status
    extra = nominated_extra(snapshot, preemptor, info.name)
    if preemptor.host_ports:
        status = node_ports(preemptor.host_ports, [*info.used_ports(), *extra.ports])
        if not status.ok:
            return status
    nominated = extra.requests
    status = fits_request(
        preemptor.requests,
        node,
        info.milli_cpu + nominated.milli_cpu,
        info.memory + nominated.memory,
        info.ephemeral_storage + nominated.ephemeral_storage,
        {
            name: info.scalars.get(name, 0) + nominated.get(name)
            for name, _ in preemptor.requests.scalars
        },
        len(info.pods) + extra.count,
    )
    if status.ok and constraints is not None:
        status = constraints.filter_with_nominated(node, extra.pods)
    return status


def filter_nodes(
    snapshot: ClusterSnapshot,
    preemptor: Pod,
    constraints: PodConstraints | Prefilter | None = PREFILTER,
) -> dict[str, Status]:
    """The scheduling cycle's `Diagnosis.NodeToStatus`: each node's filter status.

    Most nodes need only the resource check (no taints, no nominations, a pod without
    selectors, host ports or extended resources); it is made inline (the loop runs over
    every node of the cluster), then the PreFilter state answers when the pod has spread or
    pod-affinity rules to judge. A node with a pod the cluster view could not read is
    unresolvable: its load is unknown.

    For such a pod without spread or pod-affinity rules, a node's status depends on the node
    and its pods alone and on the request: the pass is kept on the snapshot for the last
    request judged (`_KeptPass`), and the next preemptor with the same request judges again
    only the nodes whose pods or Node changed since (`ClusterSnapshot.take_changed_nodes`)
    and those the whole filter chain judges (nominations, cordon, taints): at 5,000 nodes
    and a claim overlay of a hundred, a few hundred nodes instead of every one.
    """
    if isinstance(constraints, Prefilter):
        constraints = PodConstraints.prefilter(snapshot, preemptor)
    if constraints is not None and constraints.prefilter_failure is not None:
        # A PreFilter failure ends the cycle before any Filter: every node has its status.
        failure = constraints.prefilter_failure
        return {info.name: failure for info in snapshot.nodes()}
    statuses: dict[str, Status] = {}
    want = preemptor.requests
    plain_pod = not (
        preemptor.node_selector
        or preemptor.required_affinity is not None
        or preemptor.host_ports
        or want.scalars
    )
    if not plain_pod:
        for info in snapshot.nodes():
            statuses[info.name] = filter_node(snapshot, preemptor, info, constraints)
    elif constraints is not None:
        _judge_resources(snapshot, preemptor, snapshot.nodes(), constraints, statuses, set())
    else:
        statuses = dict(_kept_resource_pass(snapshot, preemptor))
    if snapshot.rejected:
        for name in statuses:
            unreadable = snapshot.unreadable_pods(name)
            if unreadable:
                statuses[name] = status_of(
                    Code.UNRESOLVABLE,
                    (f"node(s) had a pod the cluster view could not read (uid {unreadable[0]})",),
                    UNREADABLE_POD,
                )
    return statuses


@dataclass(slots=True)
class _KeptPass:
    """The resource pass for one request (cpu, memory, ephemeral storage) over one list of
    nodes: each node's status as it stood when last judged, and the nodes the whole filter
    chain judged (nominations, cordon, taints: what else of the preemptor they read is not
    in the request), which are judged again every time."""

    request: tuple[int, int, int]
    nodes: list[NodeInfo]
    statuses: dict[str, Status]
    chained: set[str]


def _kept_resource_pass(snapshot: ClusterSnapshot, preemptor: Pod) -> dict[str, Status]:
    """`_judge_resources` over every node for a plain preemptor without PreFilter state,
    from the snapshot's kept pass when it is for the same request and the same nodes: then
    only the nodes changed since, nominated to, or judged by the whole chain are judged
    again (in place: the statuses keep the nodes' order). The kept statuses: copy them."""
    want = preemptor.requests
    request = (want.milli_cpu, want.memory, want.ephemeral_storage)
    nodes = snapshot.nodes()
    changed = snapshot.take_changed_nodes()
    kept = snapshot.kept_filter_pass
    if isinstance(kept, _KeptPass) and kept.request == request and kept.nodes is nodes:
        statuses, chained = kept.statuses, kept.chained
        again = changed.union(chained, snapshot.nominated_node_names())
        chained.difference_update(again)
        infos = [snapshot.node_infos[name] for name in again if name in statuses]
        _judge_resources(snapshot, preemptor, infos, None, statuses, chained)
        return statuses
    statuses, chained = {}, set()
    _judge_resources(snapshot, preemptor, nodes, None, statuses, chained)
    snapshot.kept_filter_pass = _KeptPass(request, nodes, statuses, chained)
    return statuses


def _judge_resources(
    snapshot: ClusterSnapshot,
    preemptor: Pod,
    infos: Iterable[NodeInfo],
    constraints: PodConstraints | None,
    statuses: dict[str, Status],
    chained: set[str],
) -> None:
    """Each node's status for a plain preemptor (no selectors, host ports or extended
    resources) into `statuses`: the resource check inline, the whole filter chain for a
    node cordoned, tainted or with nominations (its name added to `chained`), the PreFilter
    state's Filter for a node that has the room."""
    want = preemptor.requests
    want_cpu, want_memory, want_ephemeral = want.milli_cpu, want.memory, want.ephemeral_storage
    nominated = snapshot.nominated_node_names()
    # A failed resource check's status depends only on which checks failed and whether
    # the request exceeds the node's allocatable: one per combination, from fits_request.
    failures: dict[int, Status] = {}
    for info in infos:
        node = info.node
        assert node is not None
        if node.unschedulable or node.taints or info.name in nominated:
            statuses[info.name] = filter_node(snapshot, preemptor, info, constraints)
            chained.add(info.name)
            continue
        allocatable = node.allocatable
        failed = 0
        if len(info.pods) >= node.allowed_pods:
            failed = 1
        if want_cpu > 0 and want_cpu > allocatable.milli_cpu - info.milli_cpu:
            failed |= 2 | (32 if want_cpu > allocatable.milli_cpu else 0)
        if want_memory > 0 and want_memory > allocatable.memory - info.memory:
            failed |= 4 | (32 if want_memory > allocatable.memory else 0)
        if want_ephemeral > 0 and want_ephemeral > (
            allocatable.ephemeral_storage - info.ephemeral_storage
        ):
            failed |= 8 | (32 if want_ephemeral > allocatable.ephemeral_storage else 0)
        if failed:
            status = failures.get(failed)
            if status is None:
                status = failures[failed] = fits_request(
                    want,
                    node,
                    info.milli_cpu,
                    info.memory,
                    info.ephemeral_storage,
                    {},
                    len(info.pods),
                )
        elif constraints is not None:
            status = constraints.filter(node)
        else:
            status = SUCCESS
        statuses[info.name] = status


def summarise_filters(statuses: dict[str, Status]) -> FilterSummary:
    """Count failures by reason; name the nodes that fit and those preemption cannot help."""
    # Thousands of nodes share a handful of (interned) statuses: count them by identity,
    # and walk the nodes by name only when some status names them in the summary.
    values = statuses.values()
    counts = Counter(map(id, values))
    distinct = dict(zip(map(id, values), values, strict=True))
    filtered: Counter[str] = Counter()
    filters: dict[str, str] = {}
    named: set[int] = set()
    for key, count in counts.items():
        status = distinct[key]
        for reason in status.reasons:
            filtered[reason] += count
            if status.plugin:
                filters.setdefault(reason, status.plugin)
        if status.code is not Code.UNSCHEDULABLE:
            named.add(key)
    fits: list[str] = []
    unresolvable: dict[str, list[str]] = {}
    if named:
        for name, status in statuses.items():
            if id(status) not in named:
                continue
            if status.code is Code.SUCCESS:
                fits.append(name)
            elif status.code is Code.UNRESOLVABLE:
                unresolvable.setdefault(status.reasons[0], []).append(name)
    return FilterSummary(dict(sorted(filtered.items())), filters, fits, unresolvable)


def fit_error_message(
    num_nodes: int, statuses: dict[str, Status], rejected: dict[str, Status]
) -> str:
    """`FitError.Error()` of the scheduling cycle, then `preemption: ` and the `FitError` that
    `Evaluator.Preempt` returns: the dry run's rejections, every other node "not helpful".

    Like upstream's `sortReasonsHistogram`, each part lists `<count> <reason>` strings sorted
    as strings.
    """
    counts: Counter[str] = Counter()
    for status in statuses.values():
        for reason in status.reasons:
            counts[reason] += 1
    preemption: Counter[str] = Counter()
    for name in statuses:
        found = rejected.get(name)
        if found is None:
            preemption[ERR_NOT_HELPFUL] += 1
        else:
            for reason in found.reasons:
                preemption[reason] += 1
    return f"{_histogram(num_nodes, counts)} preemption: {_histogram(num_nodes, preemption)}"


def _histogram(num_nodes: int, counts: Counter[str]) -> str:
    reasons = sorted(f"{count} {reason}" for reason, count in counts.items())
    return f"0/{num_nodes} nodes are available: " + ", ".join(reasons) + "."


def scheduling_fit_error(num_nodes: int, statuses: Mapping[str, Status]) -> str:
    """The scheduling cycle's own `FitError.Error()`, before any PostFilter: what the
    scheduler writes into PodScheduled when no node fits and it does not preempt."""
    if num_nodes == 0:
        return ERR_NO_NODES
    counts: Counter[str] = Counter()
    for status in statuses.values():
        for reason in status.reasons:
            counts[reason] += 1
    return _histogram(num_nodes, counts)

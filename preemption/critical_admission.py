"""The kubelet's critical-pod admission preemption (`CriticalPodAdmissionHandler`).

A critical pod already bound to a node that fails admission for lack of resources makes
the kubelet evict the smallest set of other pods that frees what is missing, taking
BestEffort pods first, then Burstable, then Guaranteed, and within a tier the pods whose
requests come closest to the remaining shortfall (`getPodsToPreemptByDistance`).
Deliberate difference: upstream ignores PodDisruptionBudgets here and so do we when
choosing, but the decision still counts the budgets the victims would break, for the audit.
"""

from __future__ import annotations

from dataclasses import dataclass

from preemptctl.preemption.decision import (
    Decision,
    NodeEvaluation,
    PodRef,
    Rationale,
    Strategy,
    Verdict,
)
from preemptctl.preemption.default_preemption import PreemptionArgs, filter_pods_with_pdb_violation
from preemptctl.preemption.filters import Status, node_affinity, node_ports, taint_toleration
from preemptctl.preemption.objects import (
    CPU,
    EPHEMERAL_STORAGE,
    MEMORY,
    PODS,
    QOS_BEST_EFFORT,
    QOS_BURSTABLE,
    QOS_GUARANTEED,
    Pod,
)
from preemptctl.preemption.snapshot import ClusterSnapshot, NodeInfo


@dataclass(frozen=True, slots=True)
class AdmissionRequirement:
    """One resource the node lacks for the pod, and by how much (`admissionRequirement`)."""

    resource: str
    quantity: int


def resource_request(pod: Pod, resource: str) -> int:
    """`resource.GetResourceRequest`: a pod counts as 1 of `pods`; cpu in millicores."""
    if resource == PODS:
        return 1
    return pod.requests.get(resource)


def distance(requirements: list[AdmissionRequirement], pod: Pod) -> float:
    """`admissionRequirementList.distance`: squared unmet fraction of each requirement."""
    total = 0.0
    for requirement in requirements:
        remaining = requirement.quantity - resource_request(pod, requirement.resource)
        if remaining > 0:
            total += (remaining / requirement.quantity) ** 2
    return total


def subtract(requirements: list[AdmissionRequirement], *pods: Pod) -> list[AdmissionRequirement]:
    """`admissionRequirementList.subtract`: what is still missing once `pods` are gone."""
    left = []
    for requirement in requirements:
        quantity = requirement.quantity
        for pod in pods:
            quantity -= resource_request(pod, requirement.resource)
            if quantity <= 0:
                break
        if quantity > 0:
            left.append(AdmissionRequirement(requirement.resource, quantity))
    return left


def smaller_resource_request(first: Pod, second: Pod) -> bool:
    """`smallerResourceRequest`: compare memory, then cpu; equal requests count as smaller,
    as upstream's do, so among identical pods the last one in the order is taken."""
    for resource in (MEMORY, CPU):
        a, b = resource_request(first, resource), resource_request(second, resource)
        if a != b:
            return a < b
    return True


class NoPodsToPreempt(Exception):
    """No set of running pods frees what the critical pod needs."""


def get_pods_to_preempt_by_distance(
    pods: list[Pod], requirements: list[AdmissionRequirement]
) -> list[Pod]:
    """`getPodsToPreemptByDistance`: repeatedly take the pod closest to what is still missing."""
    pods = list(pods)
    chosen: list[Pod] = []
    while requirements:
        if not pods:
            raise NoPodsToPreempt(describe(requirements))
        best_index = 0
        best_distance = float(len(requirements) + 1)
        for index, pod in enumerate(pods):
            d = distance(requirements, pod)
            if d < best_distance or (
                d == best_distance and smaller_resource_request(pod, pods[best_index])
            ):
                best_distance, best_index = d, index
        requirements = subtract(requirements, pods[best_index])
        chosen.append(pods[best_index])
        pods[best_index] = pods[-1]
        pods.pop()
    return chosen


def preemptable(preemptor: Pod, victim: Pod) -> bool:
    """`kubetypes.Preemptable`: a critical pod beats a non-critical one, else priority decides."""
    if preemptor.is_critical() and not victim.is_critical():
        return True
    return preemptor.priority > victim.priority


def sort_pods_by_qos(preemptor: Pod, pods: list[Pod]) -> tuple[list[Pod], list[Pod], list[Pod]]:
    """`sortPodsByQOS`: the preemptable pods split into BestEffort, Burstable, Guaranteed."""
    tiers: dict[str, list[Pod]] = {QOS_BEST_EFFORT: [], QOS_BURSTABLE: [], QOS_GUARANTEED: []}
    for pod in pods:
        if preemptable(preemptor, pod) and pod.qos_class in tiers:
            tiers[pod.qos_class].append(pod)
    return tiers[QOS_BEST_EFFORT], tiers[QOS_BURSTABLE], tiers[QOS_GUARANTEED]


def get_pods_to_preempt(
    preemptor: Pod, pods: list[Pod], requirements: list[AdmissionRequirement]
) -> list[Pod]:
    """`getPodsToPreempt`: the fewest pods of the cheapest QoS tiers that free `requirements`.

    Guaranteed pods are taken only for what BestEffort and Burstable together cannot free,
    then Burstable only for what BestEffort cannot, then BestEffort for the rest.
    """
    best_effort, burstable, guaranteed = sort_pods_by_qos(preemptor, pods)
    unmet = subtract(requirements, *best_effort, *burstable, *guaranteed)
    if unmet:
        raise NoPodsToPreempt(describe(unmet))
    guaranteed_out = get_pods_to_preempt_by_distance(
        guaranteed, subtract(requirements, *best_effort, *burstable)
    )
    burstable_out = get_pods_to_preempt_by_distance(
        burstable, subtract(requirements, *best_effort, *guaranteed_out)
    )
    best_effort_out = get_pods_to_preempt_by_distance(
        best_effort, subtract(requirements, *burstable_out, *guaranteed_out)
    )
    return [*best_effort_out, *burstable_out, *guaranteed_out]


def describe(requirements: list[AdmissionRequirement]) -> str:
    shown = ", ".join(
        f"{r.resource} {r.quantity}{'m' if r.resource == CPU else ''}" for r in requirements
    )
    return f"no set of running pods found to reclaim resources: [{shown}]"


def insufficient_resources(pod: Pod, info: NodeInfo) -> list[AdmissionRequirement]:
    """The kubelet's admission check (`InsufficientResourceError.GetInsufficientAmount`): for
    each resource the pod requests, how much more the node would need with the pod on it."""
    node = info.node
    assert node is not None
    others = [other for other in info.pods.values() if other.uid != pod.uid]
    missing: list[AdmissionRequirement] = []
    if len(others) + 1 > node.allowed_pods:
        missing.append(AdmissionRequirement(PODS, len(others) + 1 - node.allowed_pods))
    names = [CPU, MEMORY, EPHEMERAL_STORAGE, *(name for name, _ in pod.requests.scalars)]
    for name in names:
        want = pod.requests.get(name)
        if want <= 0:
            continue
        used = sum(other.requests.get(name) for other in others)
        free = node.allocatable.get(name) - used
        if want > free:
            missing.append(AdmissionRequirement(name, want - free))
    return missing


def admission_filters(pod: Pod, info: NodeInfo) -> Status:
    """The non-resource admission checks (`GeneralPredicates` and NoExecute taints), which no
    preemption can cure. Like the kubelet's `generalFilter`, static pods (seen here as their
    mirror pods) skip the taint check."""
    assert info.node is not None
    node = info.node
    status = node_affinity(pod, node)
    if not status.ok:
        return status
    if pod.host_ports:
        used = [p for other in info.pods.values() if other.uid != pod.uid for p in other.host_ports]
        status = node_ports(pod.host_ports, used)
        if not status.ok:
            return status
    if pod.static_or_mirror:
        return status
    return taint_toleration(pod, node, effects=("NoExecute",))


def preempt_for_admission(
    snapshot: ClusterSnapshot, pod: Pod, args: PreemptionArgs | None = None
) -> Decision:
    """`CriticalPodAdmissionHandler.HandleAdmissionFailure` for a pod bound to a node."""
    ref = PodRef.of(pod)
    rationale = Rationale(Strategy.CRITICAL_ADMISSION, nodes_total=1 if pod.node_name else 0)

    def decide(status: Verdict, message: str) -> Decision:
        # As for the default strategy, only a decision to preempt names a node.
        node = pod.node_name if status is Verdict.PREEMPT else None
        return Decision(ref, status, message, rationale, node)

    if not pod.node_name:
        return decide(
            Verdict.INELIGIBLE,
            "pod is not bound to a node; critical-admission "
            "preemption applies to a pod the kubelet is admitting",
        )
    if not pod.is_critical():
        return decide(
            Verdict.INELIGIBLE,
            f"pod is not critical (priority {pod.priority} < 2000000000, not static or mirror); "
            "the kubelet preempts only for critical pods",
        )
    info = snapshot.node(pod.node_name)
    if info is None:
        return decide(Verdict.UNSCHEDULABLE, f"node {pod.node_name} is not in the snapshot")
    status = admission_filters(pod, info)
    if not status.ok:
        rationale.unresolvable = {status.reasons[0]: [info.name]}
        return decide(
            Verdict.UNSCHEDULABLE,
            f"admission fails for reasons preemption cannot help: {'; '.join(status.reasons)}",
        )
    missing = insufficient_resources(pod, info)
    rationale.details["insufficient"] = {r.resource: r.quantity for r in missing}
    if not missing:
        rationale.fits = [info.name]
        return decide(Verdict.FITS_WITHOUT_PREEMPTION, f"fits on {info.name} without preemption")
    protected = args.protected_namespaces if args else frozenset()
    others = sorted(
        (
            other
            for other in info.pods.values()
            if other.uid != pod.uid and other.namespace not in protected
        ),
        key=lambda other: (other.namespace, other.name),
    )
    try:
        victims = get_pods_to_preempt(pod, others, missing)
    except NoPodsToPreempt as error:
        rationale.evaluated = [NodeEvaluation(info.name, False, reasons=(str(error),))]
        return decide(Verdict.UNSCHEDULABLE, str(error))
    if args and args.max_victims and len(victims) > args.max_victims:
        message = f"needs {len(victims)} victims, more than the cap of {args.max_victims}"
        rationale.evaluated = [NodeEvaluation(info.name, False, reasons=(message,))]
        return decide(Verdict.UNSCHEDULABLE, message)
    violating, _ = filter_pods_with_pdb_violation(victims, snapshot)
    refs = tuple(PodRef.of(victim) for victim in victims)
    rationale.evaluated = [
        NodeEvaluation(
            info.name, True, victims=tuple(r.key for r in refs), num_pdb_violations=len(violating)
        )
    ]
    rationale.deciding_criterion = "qosTierThenDistance"
    rationale.details["tiers"] = {victim.key: victim.qos_class for victim in victims}
    decision = decide(
        Verdict.PREEMPT,
        f"preempt {len(victims)} pod(s) on {info.name} to admit critical pod; missing "
        + ", ".join(f"{r.resource} {r.quantity}" for r in missing),
    )
    decision.victims = refs
    decision.num_pdb_violations = len(violating)
    return decision

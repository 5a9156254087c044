"""The scheduler filters a preemption decision depends on, with upstream's status codes.

A failure is `Unschedulable` when removing pods from the node could make the pod fit
(resources, host ports) and `UnschedulableAndUnresolvable` when nothing preemption does can
help (node name, cordon, taints, affinity, or a request larger than the whole node).
Filters run in the default profile's order and the first failure is the node's status.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from preemption.objects import CPU, EPHEMERAL_STORAGE, MEMORY, HostPort, Node, Pod, Resources
from preemption.selectors import (
    UNSCHEDULABLE_TAINT,
    first_untolerated_taint,
    node_selector_term_matches,
    tolerates,
)


class Code(StrEnum):
    SUCCESS = "Success"
    UNSCHEDULABLE = "Unschedulable"
    UNRESOLVABLE = "UnschedulableAndUnresolvable"


@dataclass(frozen=True, slots=True)
class Status:
    code: Code
    reasons: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.code is Code.SUCCESS


SUCCESS = Status(Code.SUCCESS)

ERR_NODE_NAME = "node(s) didn't match the requested node name"
ERR_UNSCHEDULABLE = "node(s) were unschedulable"
ERR_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
ERR_PORTS = "node(s) didn't have free ports for the requested pod ports"
ERR_TOO_MANY_PODS = "Too many pods"


def node_unschedulable(pod: Pod, node: Node) -> Status:
    """`NodeUnschedulable.Filter`: a cordoned node, unless the pod tolerates the cordon taint."""
    if node.unschedulable and not any(tolerates(t, UNSCHEDULABLE_TAINT) for t in pod.tolerations):
        return Status(Code.UNRESOLVABLE, (ERR_UNSCHEDULABLE,))
    return SUCCESS


def node_name(pod: Pod, node: Node) -> Status:
    """`NodeName.Filter`: a pod that names its node fits nowhere else."""
    if pod.node_name and pod.node_name != node.name:
        return Status(Code.UNRESOLVABLE, (ERR_NODE_NAME,))
    return SUCCESS


def taint_toleration(pod: Pod, node: Node) -> Status:
    """`TaintToleration.Filter`: NoSchedule and NoExecute taints must be tolerated."""
    taint = first_untolerated_taint(node.taints, pod.tolerations, ("NoSchedule", "NoExecute"))
    if taint is not None:
        return Status(
            Code.UNRESOLVABLE, (f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}",)
        )
    return SUCCESS


def node_affinity(pod: Pod, node: Node) -> Status:
    """`NodeAffinity.Filter`: `nodeSelector` and the required terms (ORed) must match."""
    labels = node.labels
    for key, value in pod.node_selector:
        if labels.get(key) != value:
            return Status(Code.UNRESOLVABLE, (ERR_AFFINITY,))
    terms = pod.required_affinity
    if terms is not None and not any(
        node_selector_term_matches(term, node.name, labels) for term in terms
    ):
        return Status(Code.UNRESOLVABLE, (ERR_AFFINITY,))
    return SUCCESS


STATIC_FILTERS = (node_unschedulable, node_name, taint_toleration, node_affinity)


def static_filters(pod: Pod, node: Node) -> Status:
    """The filters that do not depend on the pods on the node, in the default profile's order."""
    for check in STATIC_FILTERS:
        status = check(pod, node)
        if not status.ok:
            return status
    return SUCCESS


def ports_conflict(wanted: HostPort, used: HostPort) -> bool:
    """`HostPortInfo.CheckConflict`: same protocol and port, and the IPs overlap (0.0.0.0 is all)."""
    if wanted.port != used.port or wanted.protocol != used.protocol:
        return False
    return wanted.ip == used.ip or "0.0.0.0" in (wanted.ip, used.ip)


def node_ports(wanted: Iterable[HostPort], used: Iterable[HostPort]) -> Status:
    """`NodePorts.Filter`: the pod's host ports must be free on the node."""
    used_list = list(used)
    for port in wanted:
        if any(ports_conflict(port, other) for other in used_list):
            return Status(Code.UNSCHEDULABLE, (ERR_PORTS,))
    return SUCCESS


def node_resources_fit(
    request: Resources, node: Node, requested: Resources, pod_count: int
) -> Status:
    """`NodeResourcesFit.Filter` (`fitsRequest`): every requested resource within what is free.

    A request larger than the node's whole allocatable is unresolvable: no preemption frees
    more than the node has (upstream since 1.31).
    """
    reasons: list[str] = []
    unresolvable = False
    if pod_count + 1 > node.allowed_pods:
        reasons.append(ERR_TOO_MANY_PODS)
    if not request.is_zero():
        checks = [
            (CPU, request.milli_cpu, node.allocatable.milli_cpu, requested.milli_cpu),
            (MEMORY, request.memory, node.allocatable.memory, requested.memory),
            (
                EPHEMERAL_STORAGE,
                request.ephemeral_storage,
                node.allocatable.ephemeral_storage,
                requested.ephemeral_storage,
            ),
        ]
        checks.extend(
            (name, amount, node.allocatable.get(name), requested.get(name))
            for name, amount in request.scalars
        )
        for name, want, allocatable, used in checks:
            if want > 0 and want > allocatable - used:
                reasons.append(f"Insufficient {name}")
                unresolvable = unresolvable or want > allocatable
    if not reasons:
        return SUCCESS
    return Status(Code.UNRESOLVABLE if unresolvable else Code.UNSCHEDULABLE, tuple(reasons))

"""The scheduler filters a preemption decision depends on, with upstream's status codes.

A failure is `Unschedulable` when removing pods from the node could make the pod fit
(resources, host ports) and `UnschedulableAndUnresolvable` when nothing preemption does can
help (node name, cordon, taints, affinity, or a request larger than the whole node).
Filters run in the default profile's order and the first failure is the node's status.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from preemptctl.preemption.objects import HostPort, Node, Pod, Resources
from preemptctl.preemption.selectors import (
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
    """A filter's answer for one node; `plugin` names the filter that failed (upstream's
    `Status.Plugin()`), for people reading why a node was passed over."""

    code: Code
    reasons: tuple[str, ...] = ()
    plugin: str = field(default="", compare=False)

    @property
    def ok(self) -> bool:
        return self.code is Code.SUCCESS


SUCCESS = Status(Code.SUCCESS)

_interned_statuses: dict[tuple[Code, tuple[str, ...], str], Status] = {}


def status_of(code: Code, reasons: tuple[str, ...], plugin: str = "") -> Status:
    """One shared Status per distinct (code, reasons, plugin): thousands of nodes fail alike."""
    key = (code, reasons, plugin)
    status = _interned_statuses.get(key)
    if status is None:
        if len(_interned_statuses) > 10_000:
            return Status(code, reasons, plugin)
        status = _interned_statuses.setdefault(key, Status(code, reasons, plugin))
    return status


ERR_NODE_NAME = "node(s) didn't match the requested node name"
ERR_UNSCHEDULABLE = "node(s) were unschedulable"
ERR_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
ERR_PORTS = "node(s) didn't have free ports for the requested pod ports"
ERR_TOO_MANY_PODS = "Too many pods"


def node_unschedulable(pod: Pod, node: Node) -> Status:
    """`NodeUnschedulable.Filter`: a cordoned node, unless the pod tolerates the cordon taint."""
    if node.unschedulable and not any(tolerates(t, UNSCHEDULABLE_TAINT) for t in pod.tolerations):
        return status_of(Code.UNRESOLVABLE, (ERR_UNSCHEDULABLE,), "NodeUnschedulable")
    return SUCCESS


def node_name(pod: Pod, node: Node) -> Status:
    """`NodeName.Filter`: a pod that names its node fits nowhere else."""
    if pod.node_name and pod.node_name != node.name:
        return status_of(Code.UNRESOLVABLE, (ERR_NODE_NAME,), "NodeName")
    return SUCCESS


def taint_toleration(
    pod: Pod, node: Node, effects: tuple[str, ...] = ("NoSchedule", "NoExecute")
) -> Status:
    """`TaintToleration.Filter`: NoSchedule and NoExecute taints must be tolerated.

    The kubelet's admission checks only NoExecute, so it passes `effects` to say so.
    """
    taint = first_untolerated_taint(node.taints, pod.tolerations, effects)
    if taint is not None:
        return status_of(
            Code.UNRESOLVABLE,
            (f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}",),
            "TaintToleration",
        )
    return SUCCESS


def node_affinity(pod: Pod, node: Node) -> Status:
    """`NodeAffinity.Filter`: `nodeSelector` and the required terms (ORed) must match."""
    labels = node.labels
    for key, value in pod.node_selector:
        if labels.get(key) != value:
            return status_of(Code.UNRESOLVABLE, (ERR_AFFINITY,), "NodeAffinity")
    terms = pod.required_affinity
    if terms is not None and not any(
        node_selector_term_matches(term, node.name, labels) for term in terms
    ):
        return status_of(Code.UNRESOLVABLE, (ERR_AFFINITY,), "NodeAffinity")
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
    """`HostPortInfo.CheckConflict`: same protocol and port, overlapping IPs (0.0.0.0 is all).
    `ANY_HOST_PORT` (a negative port) conflicts with every port."""
    if wanted.port != used.port or wanted.protocol != used.protocol:
        return used.port < 0 or wanted.port < 0
    return wanted.ip == used.ip or "0.0.0.0" in (wanted.ip, used.ip)


def node_ports(wanted: Iterable[HostPort], used: Iterable[HostPort]) -> Status:
    """`NodePorts.Filter`: the pod's host ports must be free on the node."""
    used_list = list(used)
    for port in wanted:
        if any(ports_conflict(port, other) for other in used_list):
            return status_of(Code.UNSCHEDULABLE, (ERR_PORTS,), "NodePorts")
    return SUCCESS


def node_resources_fit(
    request: Resources,
    node: Node,
    used: Resources,
    pod_count: int,
) -> Status:
    """`NodeResourcesFit.Filter` (`fitsRequest`): every requested resource within what is free.

    `used` is what the pods on the node (and nominated pods counted with them) request.
    A request larger than the node's whole allocatable is unresolvable: no preemption frees
    more than the node has (upstream since 1.31).
    """
    return fits_request(
        request,
        node,
        used.milli_cpu,
        used.memory,
        used.ephemeral_storage,
        dict(used.scalars) if request.scalars else {},
        pod_count,
    )


def fits_request(
    request: Resources,
    node: Node,
    used_cpu: int,
    used_memory: int,
    used_ephemeral: int,
    used_scalars: Mapping[str, int],
    pod_count: int,
) -> Status:
    """`fitsRequest` over plain integers, for the filter pass that runs on every node."""
    allocatable = node.allocatable
    reasons: list[str] | None = None
    unresolvable = False
    if pod_count + 1 > node.allowed_pods:
        reasons = [ERR_TOO_MANY_PODS]
    want = request.milli_cpu
    if want > 0 and want > allocatable.milli_cpu - used_cpu:
        reasons = [*(reasons or ()), "Insufficient cpu"]
        unresolvable = want > allocatable.milli_cpu
    want = request.memory
    if want > 0 and want > allocatable.memory - used_memory:
        reasons = [*(reasons or ()), "Insufficient memory"]
        unresolvable = unresolvable or want > allocatable.memory
    want = request.ephemeral_storage
    if want > 0 and want > allocatable.ephemeral_storage - used_ephemeral:
        reasons = [*(reasons or ()), "Insufficient ephemeral-storage"]
        unresolvable = unresolvable or want > allocatable.ephemeral_storage
    for name, want in request.scalars:
        total = allocatable.get(name)
        if want > 0 and want > total - used_scalars.get(name, 0):
            reasons = [*(reasons or ()), f"Insufficient {name}"]
            unresolvable = unresolvable or want > total
    if reasons is None:
        return SUCCESS
    return status_of(
        Code.UNRESOLVABLE if unresolvable else Code.UNSCHEDULABLE,
        tuple(reasons),
        "NodeResourcesFit",
    )

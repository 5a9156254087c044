"""Kubernetes JSON (as `kubectl get -o json` or a watch prints it) read as the planner's structs.

Every error names the object at fault (`pod default/web-1: malformed quantity "5x" (cpu)`),
because the person reading it has a snapshot of thousands of objects in front of them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any, TypeVar

from preemptctl.preemption.errors import PlannerInputError
from preemptctl.preemption.objects import (
    PREEMPT_LOWER_PRIORITY,
    HostPort,
    LabelSelector,
    Node,
    NodeSelectorTerm,
    Pod,
    PodDisruptionBudget,
    Requirement,
    Taint,
    Toleration,
)
from preemptctl.preemption.quantity import parse_quantity, to_value
from preemptctl.preemption.resources import pod_requests, qos_class, resource_amounts, to_resources

_LABEL_OPERATORS = {"In", "NotIn", "Exists", "DoesNotExist"}
_NODE_OPERATORS = _LABEL_OPERATORS | {"Gt", "Lt"}

# Most pods share the same handful of tolerations and host-port lists; one tuple each.
_interned: dict[Any, Any] = {}
_T = TypeVar("_T")


def _intern(value: _T) -> _T:
    if len(_interned) > 100_000:
        return value
    interned: _T = _interned.setdefault(value, value)
    return interned


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PlannerInputError(f"{what} must be an object, not {type(value).__name__}")
    return value


# A field of the wrong JSON type (a string where an object belongs...) surfaces as one of
# these while decoding; they are turned into a message naming the object.
_SHAPE_ERRORS = (TypeError, AttributeError, ValueError, KeyError)


def _wrong_shape(error: Exception) -> str:
    return f"a field has the wrong type ({type(error).__name__}: {error})"


def parse_time(text: str | None) -> float | None:
    """An RFC 3339 timestamp as epoch seconds (None stays None)."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except (TypeError, ValueError):
        raise PlannerInputError(f"malformed timestamp {text!r}") from None


def _identity(obj: Mapping[str, Any], kind: str) -> tuple[str, str, Mapping[str, Any]]:
    meta = _mapping(obj.get("metadata"), f"{kind} metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise PlannerInputError(f"a {kind} has no metadata.name")
    namespace = meta.get("namespace") or "default"
    return str(namespace), name, meta


def decode_pod(obj: Mapping[str, Any]) -> Pod:
    """A Pod object as the planner sees it."""
    namespace, name, meta = _identity(obj, "Pod")
    try:
        return _decode_pod(obj, namespace, name, meta)
    except PlannerInputError as error:
        raise PlannerInputError(f"pod {namespace}/{name}: {error}") from None
    except _SHAPE_ERRORS as error:
        raise PlannerInputError(f"pod {namespace}/{name}: {_wrong_shape(error)}") from None


def _decode_pod(obj: Mapping[str, Any], namespace: str, name: str, meta: Mapping[str, Any]) -> Pod:
    spec = _mapping(obj.get("spec"), "spec")
    status = _mapping(obj.get("status"), "status")
    annotations = meta.get("annotations") or {}
    priority = spec.get("priority", 0)
    if priority is None:
        priority = 0
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise PlannerInputError(f"spec.priority must be an integer, not {priority!r}")
    disrupted = unschedulable = False
    for condition in status.get("conditions") or ():
        kind = condition.get("type")
        if kind == "DisruptionTarget":
            disrupted = (
                condition.get("status") == "True"
                and condition.get("reason") == "PreemptionByScheduler"
            )
        elif kind == "PodScheduled":
            unschedulable = (
                condition.get("status") == "False" and condition.get("reason") == "Unschedulable"
            )
    source = annotations.get("kubernetes.io/config.source")
    return Pod(
        namespace=namespace,
        name=name,
        uid=str(meta.get("uid") or uuid.uuid5(uuid.NAMESPACE_URL, f"pod/{namespace}/{name}")),
        priority=priority,
        requests=pod_requests(spec),
        node_name=spec.get("nodeName") or "",
        nominated_node_name=status.get("nominatedNodeName") or "",
        start_time=parse_time(status.get("startTime")),
        labels=_mapping(meta.get("labels"), "metadata.labels"),
        host_ports=_host_ports(spec),
        preemption_policy=spec.get("preemptionPolicy") or PREEMPT_LOWER_PRIORITY,
        scheduler_name=spec.get("schedulerName") or "default-scheduler",
        phase=status.get("phase") or "Pending",
        status_reason=str(status.get("reason") or ""),
        terminating=meta.get("deletionTimestamp") is not None,
        disrupted_by_scheduler=disrupted,
        unschedulable=unschedulable,
        qos_class=qos_class(spec, status),
        static_or_mirror=("kubernetes.io/config.mirror" in annotations)
        or (source is not None and source != "api"),
        tolerations=_tolerations(spec.get("tolerations")),
        node_selector=_intern(tuple(sorted((spec.get("nodeSelector") or {}).items()))),
        required_affinity=_required_affinity(spec),
        priority_class_name=spec.get("priorityClassName") or "",
        resource_version=str(meta.get("resourceVersion") or ""),
    )


def _host_ports(spec: Mapping[str, Any]) -> tuple[HostPort, ...]:
    """Host ports of the containers and of restartable init containers (they keep running)."""
    ports: list[HostPort] = []
    sidecars = [c for c in spec.get("initContainers") or () if c.get("restartPolicy") == "Always"]
    for container in [*(spec.get("containers") or ()), *sidecars]:
        for port in container.get("ports") or ():
            host_port = port.get("hostPort") or 0
            if host_port > 0:
                ip = port.get("hostIP") or "0.0.0.0"
                ports.append(HostPort(ip, port.get("protocol") or "TCP", int(host_port)))
    return _intern(tuple(ports)) if ports else ()


def _tolerations(raw: Any) -> tuple[Toleration, ...]:
    if not raw:
        return ()
    return _intern(
        tuple(
            Toleration(
                t.get("key") or "",
                t.get("operator") or "Equal",
                t.get("value") or "",
                t.get("effect") or "",
            )
            for t in raw
        )
    )


def _requirements(raw: Any, operators: set[str]) -> tuple[tuple[Requirement, ...], bool]:
    requirements = []
    valid = True
    for expression in raw or ():
        operator = expression.get("operator") or ""
        values = tuple(str(v) for v in expression.get("values") or ())
        needs_values = operator in ("In", "NotIn", "Gt", "Lt")
        if operator not in operators or needs_values != bool(values):
            valid = False
        requirements.append(Requirement(str(expression.get("key") or ""), operator, values))
    return tuple(requirements), valid


def _required_affinity(spec: Mapping[str, Any]) -> tuple[NodeSelectorTerm, ...] | None:
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return None
    terms = []
    for term in required.get("nodeSelectorTerms") or ():
        expressions, valid_expressions = _requirements(
            term.get("matchExpressions"), _NODE_OPERATORS
        )
        fields, valid_fields = _requirements(term.get("matchFields"), {"In", "NotIn"})
        if valid_expressions and valid_fields:
            terms.append(NodeSelectorTerm(expressions, fields))
        else:
            # Upstream drops a term it cannot parse: it matches no node.
            terms.append(NodeSelectorTerm((), ()))
    return _intern(tuple(terms))


def decode_label_selector(raw: Any) -> LabelSelector | None:
    """A `metav1.LabelSelector`; None for a missing one (which matches nothing)."""
    if raw is None:
        return None
    expressions, valid = _requirements(raw.get("matchExpressions"), _LABEL_OPERATORS)
    labels = tuple(sorted((str(k), str(v)) for k, v in (raw.get("matchLabels") or {}).items()))
    return LabelSelector(labels, expressions, valid)


def decode_node(obj: Mapping[str, Any]) -> Node:
    """A Node object as the planner sees it: allocatable (falling back to capacity), taints."""
    _, name, meta = _identity(obj, "Node")
    try:
        spec = _mapping(obj.get("spec"), "spec")
        status = _mapping(obj.get("status"), "status")
        allocatable = status.get("allocatable") or status.get("capacity") or {}
        pods = allocatable.get("pods")
        allowed_pods = to_value(parse_quantity(pods)) if pods is not None else 0
        taints = tuple(
            Taint(t.get("key") or "", t.get("value") or "", t.get("effect") or "")
            for t in spec.get("taints") or ()
        )
        return Node(
            name=name,
            allocatable=to_resources(resource_amounts(allocatable)),
            allowed_pods=allowed_pods,
            labels=_mapping(meta.get("labels"), "metadata.labels"),
            taints=taints,
            unschedulable=bool(spec.get("unschedulable")),
            resource_version=str(meta.get("resourceVersion") or ""),
        )
    except PlannerInputError as error:
        raise PlannerInputError(f"node {name}: {error}") from None
    except _SHAPE_ERRORS as error:
        raise PlannerInputError(f"node {name}: {_wrong_shape(error)}") from None


def decode_pdb(obj: Mapping[str, Any]) -> PodDisruptionBudget:
    """A policy/v1 PodDisruptionBudget: its selector and `status.disruptionsAllowed`."""
    namespace, name, meta = _identity(obj, "PodDisruptionBudget")
    try:
        return _decode_pdb(obj, namespace, name, meta)
    except PlannerInputError as error:
        raise PlannerInputError(f"poddisruptionbudget {namespace}/{name}: {error}") from None
    except _SHAPE_ERRORS as error:
        raise PlannerInputError(
            f"poddisruptionbudget {namespace}/{name}: {_wrong_shape(error)}"
        ) from None


def _decode_pdb(
    obj: Mapping[str, Any], namespace: str, name: str, meta: Mapping[str, Any]
) -> PodDisruptionBudget:
    spec = _mapping(obj.get("spec"), "spec")
    status = _mapping(obj.get("status"), "status")
    allowed = status.get("disruptionsAllowed", 0) or 0
    if not isinstance(allowed, int) or isinstance(allowed, bool):
        raise PlannerInputError(f"status.disruptionsAllowed must be an integer, not {allowed!r}")
    return PodDisruptionBudget(
        namespace=namespace,
        name=name,
        selector=decode_label_selector(spec.get("selector")),
        disruptions_allowed=allowed,
        disrupted_pods=frozenset((status.get("disruptedPods") or {}).keys()),
        resource_version=str(meta.get("resourceVersion") or ""),
    )


_LIST_ITEM_KINDS = {
    "PodList": "Pod",
    "NodeList": "Node",
    "PodDisruptionBudgetList": "PodDisruptionBudget",
}
SNAPSHOT_KINDS = ("Node", "Pod", "PodDisruptionBudget")


def iter_list_items(document: Any) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """The (kind, object) pairs of a `v1 List` (or a typed list such as `PodList`)."""
    if not isinstance(document, Mapping):
        raise PlannerInputError("the snapshot is not a JSON object; expected a v1 List")
    list_kind = document.get("kind")
    default_kind = _LIST_ITEM_KINDS.get(str(list_kind))
    if list_kind != "List" and default_kind is None:
        raise PlannerInputError(
            f"the snapshot is a {list_kind or 'object without kind'}, expected a v1 List "
            "(kubectl get nodes,pods,pdb -A -o json)"
        )
    items = document.get("items")
    if items is None:
        return
    if not isinstance(items, list):
        raise PlannerInputError("the snapshot's items must be a list")
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise PlannerInputError(f"item {index} of the snapshot is not an object")
        kind = item.get("kind") or default_kind
        if kind not in SNAPSHOT_KINDS:
            meta = item.get("metadata")
            name = meta.get("name", "?") if isinstance(meta, Mapping) else "?"
            raise PlannerInputError(
                f"item {index} ({kind or 'no kind'} {name}) is of the wrong kind: a snapshot "
                "holds Node, Pod and PodDisruptionBudget objects"
            )
        yield str(kind), item

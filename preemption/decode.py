"""Kubernetes JSON (as `kubectl get -o json` or a watch prints it) read as the planner's structs.

Every error names the object at fault (`pod default/web-1: malformed quantity "5x" (cpu)`),
because the person reading it has a snapshot of thousands of objects in front of them.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from preemptctl.preemption.errors import PlannerInputError
from preemptctl.preemption.names import NameKind, name_problem, shown
from preemptctl.preemption.objects import (
    ANY_HOST_PORT,
    EMPTY_LABELS,
    PREEMPT_LOWER_PRIORITY,
    ZERO,
    AffinityTerm,
    CompositePodGroup,
    CSINode,
    HostPort,
    LabelSelector,
    Namespace,
    Node,
    NodeSelectorTerm,
    PersistentVolume,
    PersistentVolumeClaim,
    Pod,
    PodDisruptionBudget,
    PodGroup,
    Requirement,
    SpreadConstraint,
    StorageClass,
    Taint,
    Toleration,
    VolumeAttachment,
)
from preemptctl.preemption.quantity import parse_quantity, to_value
from preemptctl.preemption.resources import pod_requests, qos_class, resource_amounts, to_resources

_LABEL_OPERATORS = {"In", "NotIn", "Exists", "DoesNotExist"}
_NODE_OPERATORS = _LABEL_OPERATORS | {"Gt", "Lt"}

# Most pods share the same handful of tolerations and host-port lists; one tuple each. The
# table outlives the pods (nothing is ever evicted from it), so only small values enter it,
# and only so many: what a tenant writes must not stay in memory after its pods are gone.
_interned: dict[Any, Any] = {}
_INTERNED_MAX = 20_000
_INTERN_WEIGHT = 16  # items of a value, entries of the raw JSON it was read from
_T = TypeVar("_T")


def _intern(value: _T, raw: Any = None) -> _T:
    """The one shared copy of `value` (read from `raw`, when given: a large `raw` is not
    kept)."""
    if (
        len(_interned) > _INTERNED_MAX
        or len(value) > _INTERN_WEIGHT  # type: ignore[arg-type]
        or (raw is not None and _entries_exceed(raw, _INTERN_WEIGHT))
    ):
        return value
    interned: _T = _interned.setdefault(value, value)
    return interned


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if type(value) is dict:  # JSON objects: skip the (slow) abstract-class check
        return value
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


_INT32 = 2**31


def _string(value: Any, what: str, default: str = "") -> str:
    """A field that must be a string (absent or null is `default`)."""
    if value is None:
        return default
    if not isinstance(value, str):
        raise PlannerInputError(f"{what} must be a string, not {type(value).__name__}")
    return value


def _labels(value: Any, what: str) -> Mapping[str, str]:
    """A string-to-string map (labels, nodeSelector)."""
    if not value:
        return {}
    labels = _mapping(value, what)
    for key, item in labels.items():
        if type(key) is not str or type(item) is not str:
            raise PlannerInputError(f"{what} must map strings to strings ({key!r}: {item!r})")
    return labels


def _int32(value: Any, what: str) -> int:
    """An integer within int32, as the API server stores priorities and counts."""
    if not isinstance(value, int) or isinstance(value, bool) or not -_INT32 <= value < _INT32:
        raise PlannerInputError(f"{what} must be a 32-bit integer, not {value!r}")
    return value


def parse_time(text: str | None) -> float | None:
    """An RFC 3339 timestamp as epoch seconds (None stays None)."""
    if not text:
        return None
    if not isinstance(text, str):
        raise PlannerInputError(f"malformed timestamp {text!r}")
    try:
        return datetime.fromisoformat(text).timestamp()  # 3.11 reads the "Z" suffix itself
    except (TypeError, ValueError):
        raise PlannerInputError(f"malformed timestamp {text!r}") from None


# The kinds whose names become paths of the gateway's writes, or name what those paths
# name (a pod's namespace, its node, its group): a name the API server would refuse is no
# object of a real cluster, and one such as `..` must never reach a path (`names`).
_NAMED_AS = {
    "Pod": NameKind.POD,
    "Node": NameKind.NODE,
    "PodGroup": NameKind.POD_GROUP,
    "CompositePodGroup": NameKind.POD_GROUP,
    "Namespace": NameKind.NAMESPACE,
}
_NAMESPACED = frozenset({"Pod", "PodGroup", "CompositePodGroup"})


def _identity(obj: Mapping[str, Any], kind: str) -> tuple[str, str, Mapping[str, Any]]:
    meta = _mapping(obj.get("metadata"), f"{kind} metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise PlannerInputError(f"a {kind} has no metadata.name")
    namespace = meta.get("namespace") or "default"
    if not isinstance(namespace, str):
        raise PlannerInputError(f"{kind} {shown(name)}: metadata.namespace must be a string")
    named_as = _NAMED_AS.get(kind)
    if named_as is not None:
        problem = (kind in _NAMESPACED and name_problem(NameKind.NAMESPACE, namespace)) or (
            name_problem(named_as, name)
        )
        if problem:
            raise PlannerInputError(problem)
    return namespace, name, meta


@dataclass(frozen=True, slots=True)
class PodCaps:
    """How much of a pod's tenant-written content the planner keeps (every watched pod is
    held in memory for as long as it exists). Ordinary pods are far below every cap; what
    exceeds one is not kept, the pod's `over_cap` names the field, and the planner decides
    about that pod conservatively (docs/planner.md, "Hostile input")."""

    labels: int = 64  # labels per pod
    label_chars: int = 16 * 1024  # summed length of their keys and values
    annotation_chars: int = 1024  # the value of an annotation a setting keeps
    host_ports: int = 64
    tolerations: int = 64
    node_selector: int = 64  # entries of spec.nodeSelector
    affinity_entries: int = 2048  # objects, list items and fields under spec.affinity
    spread_entries: int = 512  # the same under spec.topologySpreadConstraints
    volumes: int = 512
    message_chars: int = 4096  # the scheduler's PodScheduled message, kept for diagnosis


POD_CAPS = PodCaps()


def _entries_exceed(value: Any, limit: int) -> bool:
    """Whether a JSON value holds more than `limit` entries (object fields and list items,
    at any depth); stops counting once past it."""
    count = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is dict:
            count += len(item)
            stack.extend(item.values())
        elif type(item) is list:
            count += len(item)
            stack.extend(item)
        if count > limit:
            return True
    return False


def _capped_labels(
    labels: Mapping[str, str], kept: Collection[str]
) -> tuple[Mapping[str, str], bool]:
    """The labels the planner keeps: all of them within the caps (a selector it is asked
    about later may read any label), else only those a setting names (e.g. the label that
    names a gang). The bool says whether any was dropped."""
    if len(labels) <= POD_CAPS.labels and (
        sum(len(key) + len(value) for key, value in labels.items()) <= POD_CAPS.label_chars
    ):
        return labels, False
    named = {
        key: labels[key]
        for key in kept
        if key in labels and len(key) + len(labels[key]) <= POD_CAPS.annotation_chars
    }
    return named or EMPTY_LABELS, True


def decode_pod(
    obj: Mapping[str, Any],
    kept_annotations: Collection[str] = (),
    kept_labels: Collection[str] = (),
) -> Pod:
    """A Pod object as the planner sees it; of its annotations only `kept_annotations` (those
    a setting reads, such as a label-named group's size) are kept, and of its labels all
    within `POD_CAPS`, or beyond them only `kept_labels` (those a setting reads)."""
    namespace, name, meta = _identity(obj, "Pod")
    try:
        return _decode_pod(obj, namespace, name, meta, kept_annotations, kept_labels)
    except PlannerInputError as error:
        problem = str(error)
    except _SHAPE_ERRORS as error:
        problem = _wrong_shape(error)
    refused = _refused_admission_pod(obj, namespace, name, meta, problem)
    if refused is None:
        raise PlannerInputError(f"pod {namespace}/{name}: {problem}")
    return refused


def _refused_admission(phase: str, reason: str) -> bool:
    """The kubelet refused the pod for lack of room (`OutOfcpu`, `OutOfmemory`, ...): the one
    terminal pod that may be a preemptor (critical-admission preemption reads its requests);
    every other Succeeded or Failed pod is read as `_terminal_pod`."""
    return phase == "Failed" and reason.startswith("OutOf")


def _refused_admission_pod(
    obj: Mapping[str, Any], namespace: str, name: str, meta: Mapping[str, Any], problem: str
) -> Pod | None:
    """A pod the kubelet refused whose spec cannot be read: like any terminal pod it holds
    nothing on its node, so it fails no decision; as a preemptor the planner refuses it,
    naming the problem. None for any other pod (its problem is an input error)."""
    status = obj.get("status")
    if not isinstance(status, Mapping):
        return None
    phase, reason = status.get("phase"), status.get("reason")
    if not (isinstance(phase, str) and isinstance(reason, str)):
        return None
    if not _refused_admission(phase, reason):
        return None
    uid = meta.get("uid")
    if not isinstance(uid, str) or not uid:
        uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"pod/{namespace}/{name}"))
    spec = obj.get("spec")
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    pod = _terminal_pod(
        namespace, name, uid, 0, node if isinstance(node, str) else "", {}, phase, meta
    )
    pod.status_reason = reason
    pod.unsupported = f"its spec cannot be read: {problem}"
    return pod


# The string fields of a pod the planner reads, checked once: a list or dict there (hostile
# or corrupt input) is an input error, not a crash where the value is hashed or compared.
_SPEC_STRINGS = ("nodeName", "preemptionPolicy", "schedulerName", "priorityClassName")
_STATUS_STRINGS = ("nominatedNodeName", "phase", "reason")


def _check_strings(section: Mapping[str, Any], fields: tuple[str, ...], where: str) -> None:
    for field_name in fields:
        value = section.get(field_name)
        if value is not None and type(value) is not str:
            raise PlannerInputError(
                f"{where}.{field_name} must be a string, not {type(value).__name__}"
            )


# The pod conditions the planner reads (a running pod has four or five others).
_READ_CONDITIONS = ("DisruptionTarget", "PodScheduled")


def _decode_pod(
    obj: Mapping[str, Any],
    namespace: str,
    name: str,
    meta: Mapping[str, Any],
    kept_annotations: Collection[str],
    kept_labels: Collection[str] = (),
) -> Pod:
    spec = _mapping(obj.get("spec"), "spec")
    status = _mapping(obj.get("status"), "status")
    annotations = _mapping(meta.get("annotations"), "metadata.annotations")
    priority = spec.get("priority", 0)
    if priority is None:
        priority = 0
    priority = _int32(priority, "spec.priority")
    node_name = spec.get("nodeName") or ""
    nominated = status.get("nominatedNodeName") or ""
    if type(node_name) is not str or type(nominated) is not str:
        _check_strings(spec, _SPEC_STRINGS, "spec")
        _check_strings(status, _STATUS_STRINGS, "status")
    policy = spec.get("preemptionPolicy") or PREEMPT_LOWER_PRIORITY
    scheduler_name = spec.get("schedulerName") or "default-scheduler"
    class_name = spec.get("priorityClassName") or ""
    phase = status.get("phase") or "Pending"
    reason = status.get("reason") or ""
    if not (
        type(policy) is str
        and type(scheduler_name) is str
        and type(class_name) is str
        and type(phase) is str
        and type(reason) is str
    ):
        _check_strings(spec, _SPEC_STRINGS, "spec")
        _check_strings(status, _STATUS_STRINGS, "status")
    disrupted = unschedulable = False
    scheduler_message = ""
    for condition in status.get("conditions") or ():
        kind = condition.get("type")
        if kind not in _READ_CONDITIONS:
            continue
        if kind == "DisruptionTarget":
            disrupted = (
                condition.get("status") == "True"
                and condition.get("reason") == "PreemptionByScheduler"
            )
        elif kind == "PodScheduled":
            unschedulable = (
                condition.get("status") == "False" and condition.get("reason") == "Unschedulable"
            )
            if unschedulable:
                scheduler_message = _string(condition.get("message"), "PodScheduled message")
                scheduler_message = scheduler_message[: POD_CAPS.message_chars]
    source = annotations.get("kubernetes.io/config.source") or ""
    if type(source) is not str:
        source = _string(source, "the config.source annotation")
    uid = meta.get("uid") or str(uuid.uuid5(uuid.NAMESPACE_URL, f"pod/{namespace}/{name}"))
    if type(uid) is not str:
        uid = _string(uid, "metadata.uid")
    # All labels are read here (their own matchLabelKeys take values from them); what the
    # pod keeps is `kept`, within the caps.
    labels = _labels(meta.get("labels"), "metadata.labels")
    kept_label_map, labels_over = _capped_labels(labels, kept_labels)
    over: list[str] = ["labels"] if labels_over else []
    if phase in _TERMINAL_PHASES and not _refused_admission(phase, reason):
        return _terminal_pod(
            namespace, name, uid, priority, node_name, kept_label_map, phase, meta, tuple(over)
        )
    node_selector = _labels(spec.get("nodeSelector"), "spec.nodeSelector")
    if len(node_selector) > POD_CAPS.node_selector:
        node_selector = {}
        over.append("nodeSelector")
    pod_affinity: tuple[AffinityTerm, ...] = ()
    pod_anti_affinity: tuple[AffinityTerm, ...] = ()
    term_problem = spread_problem = volume_problem = ""
    affinity = spec.get("affinity")
    if affinity and _entries_exceed(affinity, POD_CAPS.affinity_entries):
        if node_name and _mapping(affinity, "spec.affinity").get("podAntiAffinity"):
            # Every decision reads a bound pod's anti-affinity (it may reject the preemptor
            # anywhere in its domain): it cannot be dropped, so the pod is not read at all.
            raise PlannerInputError(
                f"spec.affinity has more than {POD_CAPS.affinity_entries} entries (the "
                "planner's cap; a bound pod's anti-affinity cannot be left out)"
            )
        affinity = None
        over.append("affinity")
    if affinity:
        pod_affinity, pod_anti_affinity, term_problem = _pod_affinity_terms(
            _mapping(affinity, "spec.affinity"), namespace, labels
        )
    spread: tuple[SpreadConstraint, ...] = ()
    raw_spread = spec.get("topologySpreadConstraints")
    if raw_spread and _entries_exceed(raw_spread, POD_CAPS.spread_entries):
        raw_spread = None
        over.append("topologySpreadConstraints")
    if raw_spread:
        spread, spread_problem = _spread_constraints(spec, labels)
    claims: tuple[str, ...] = ()
    inline_csi: tuple[tuple[str, str], ...] = ()
    raw_volumes = spec.get("volumes")
    if raw_volumes:
        if len(raw_volumes) > POD_CAPS.volumes:
            # Bound pods' claims are counted (ReadWriteOncePod, volume limits): not droppable.
            raise PlannerInputError(
                f"spec.volumes has more than {POD_CAPS.volumes} volumes (the planner's cap)"
            )
        claims, inline_csi, volume_problem = _volumes(spec, name)
    host_ports = _host_ports(spec)
    if len(host_ports) > POD_CAPS.host_ports:
        host_ports = (ANY_HOST_PORT,)
        over.append("hostPorts")
    raw_tolerations = spec.get("tolerations")
    if raw_tolerations and len(raw_tolerations) > POD_CAPS.tolerations:
        raw_tolerations = None
        over.append("tolerations")
    static_or_mirror = ("kubernetes.io/config.mirror" in annotations) or (
        source != "" and source != "api"
    )
    kept: Mapping[str, str] = EMPTY_LABELS
    if kept_annotations and annotations:
        kept = {
            key: _string(annotations[key], f"annotation {key}")
            for key in kept_annotations
            if key in annotations
        } or EMPTY_LABELS
        if any(len(value) > POD_CAPS.annotation_chars for value in kept.values()):
            kept = {
                key: value for key, value in kept.items() if len(value) <= POD_CAPS.annotation_chars
            } or EMPTY_LABELS
            over.append("annotations")
    group = ""
    scheduling_group = spec.get("schedulingGroup")
    if scheduling_group:
        group = _string(
            _mapping(scheduling_group, "spec.schedulingGroup").get("podGroupName"),
            "spec.schedulingGroup.podGroupName",
        )
    # Positional, in the order of Pod's fields (each named alongside): 33 keywords would
    # cost a microsecond more per pod, 0.15 s of a 150,000-pod build.
    return Pod(
        namespace,
        name,
        uid,
        priority,
        pod_requests(spec),  # requests
        node_name,
        nominated,  # nominated_node_name
        parse_time(status.get("startTime")),  # start_time
        kept_label_map,  # labels
        host_ports,
        policy,  # preemption_policy
        scheduler_name,
        phase,
        reason,  # status_reason
        meta.get("deletionTimestamp") is not None,  # terminating
        disrupted,  # disrupted_by_scheduler
        unschedulable,
        qos_class(spec, status),  # qos_class
        static_or_mirror,
        _tolerations(raw_tolerations),  # tolerations
        _intern(tuple(sorted(node_selector.items()))) if node_selector else (),  # node_selector
        _required_affinity(spec) if affinity else None,  # required_affinity
        class_name,  # priority_class_name
        str(meta.get("resourceVersion") or ""),  # resource_version
        pod_affinity,
        pod_anti_affinity,
        spread,  # spread_constraints
        _over_cap_problem(over)
        or term_problem
        or spread_problem
        or volume_problem
        or _unmodeled_needs(spec),  # unsupported
        scheduler_message,
        claims,
        inline_csi,
        group,
        None,  # spec_priority: the snapshot sets a member's priority to its group's
        kept,  # annotations
        tuple(over),  # over_cap
    )


def _over_cap_problem(over: list[str]) -> str:
    """Why a pod with content beyond the caps cannot be a preemptor ("" when none): what it
    asks for (or is, for selectors reading its labels) is no longer all known."""
    if not over or over == ["annotations"]:
        return ""
    return f"{', '.join(over)} beyond the planner's caps (only part of it was kept)"


_TERMINAL_PHASES = ("Succeeded", "Failed")


def _terminal_pod(
    namespace: str,
    name: str,
    uid: str,
    priority: int,
    node_name: str,
    labels: Mapping[str, str],
    phase: str,
    meta: Mapping[str, Any],
    over_cap: tuple[str, ...] = (),
) -> Pod:
    """A Succeeded or Failed pod: it holds nothing on its node (the scheduler's cache drops
    it, and the snapshot never counts it), so nothing of its spec is read; a quantity no
    node could hold, or one malformed, in a pod that is done can then fail no decision."""
    return Pod(
        namespace,
        name,
        uid,
        priority,
        ZERO,
        node_name,
        labels=labels,
        phase=phase,
        terminating=meta.get("deletionTimestamp") is not None,
        resource_version=str(meta.get("resourceVersion") or ""),
        over_cap=over_cap,
    )


# Volume sources no scheduler filter looks at. Claims, generic ephemeral volumes and inline
# CSI volumes are modeled (see `volumes`); any other source (in-tree cloud disks, RBD,
# iSCSI...) is judged by a filter the planner does not model, so a preemptor using one is
# refused.
_FILTER_FREE_VOLUMES = frozenset(
    {"emptyDir", "configMap", "secret", "projected", "downwardAPI", "hostPath", "image", "nfs"}
)


def _volumes(
    spec: Mapping[str, Any], pod_name: str
) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...], str]:
    """The claims a pod mounts, its inline CSI volumes, and any volume source not modeled."""
    claims: list[str] = []
    inline: list[tuple[str, str]] = []
    for raw in spec.get("volumes") or ():
        volume = _mapping(raw, "a volume")
        if len(volume) == 2 and "name" in volume:
            source, other = volume  # the common case: a name and one source
            if (other if source == "name" else source) in _FILTER_FREE_VOLUMES:
                continue
        name = _string(volume.get("name"), "volume name")
        for source in sorted(k for k in volume if k != "name"):
            if source == "persistentVolumeClaim":
                claim = _mapping(volume[source], "persistentVolumeClaim")
                claims.append(_string(claim.get("claimName"), "claimName"))
            elif source == "ephemeral":
                claims.append(f"{pod_name}-{name}")
            elif source == "csi":
                csi = _mapping(volume[source], "csi")
                inline.append((_string(csi.get("driver"), "csi.driver"), f"{pod_name}/{name}"))
            elif source not in _FILTER_FREE_VOLUMES:
                return (
                    (),
                    (),
                    f"volume {name!r} of type {source} (judged by VolumeRestrictions or "
                    "NodeVolumeLimits for in-tree volume plugins)",
                )
    return tuple(claims), tuple(inline), ""


def _unmodeled_needs(spec: Mapping[str, Any]) -> str:
    """What of this pod's spec a filter the planner does not model would judge ("" if none)."""
    if spec.get("resourceClaims"):
        return "DRA resource claims (spec.resourceClaims)"
    return ""


def _merge_label_keys(
    selector: LabelSelector | None,
    labels: Mapping[str, str],
    match_keys: Any,
    mismatch_keys: Any = None,
) -> LabelSelector | None:
    """`matchLabelKeys` (In the pod's value) and `mismatchLabelKeys` (NotIn) merged into the
    selector, as the API server and the scheduler do; keys the pod lacks are skipped."""
    added: list[Requirement] = []
    for keys, operator in ((match_keys, "In"), (mismatch_keys, "NotIn")):
        for key in keys or ():
            key = _string(key, "matchLabelKeys")
            if key in labels:
                added.append(Requirement(key, operator, (labels[key],)))
    if not added or selector is None:
        return selector
    return LabelSelector(
        selector.match_labels, selector.match_expressions + tuple(added), selector.valid
    )


def _affinity_term(raw: Any, namespace: str, labels: Mapping[str, str]) -> tuple[AffinityTerm, str]:
    term = _mapping(raw, "a pod affinity term")
    selector = decode_label_selector(term.get("labelSelector"))
    selector = _merge_label_keys(
        selector, labels, term.get("matchLabelKeys"), term.get("mismatchLabelKeys")
    )
    namespaces = frozenset(_string(n, "namespaces") for n in term.get("namespaces") or ())
    namespace_selector = decode_label_selector(term.get("namespaceSelector"))
    if not namespaces and namespace_selector is None:
        namespaces = frozenset((namespace,))
    problem = ""
    if (selector is not None and not selector.valid) or (
        namespace_selector is not None and not namespace_selector.valid
    ):
        problem = "a pod (anti-)affinity term with an invalid label selector"
    topology_key = _string(term.get("topologyKey"), "topologyKey")
    if not topology_key:
        problem = "a pod (anti-)affinity term without a topologyKey"
    return AffinityTerm(selector, namespaces, namespace_selector, topology_key), problem


def _pod_affinity_terms(
    affinity: Mapping[str, Any], namespace: str, labels: Mapping[str, str]
) -> tuple[tuple[AffinityTerm, ...], tuple[AffinityTerm, ...], str]:
    """The required pod affinity and anti-affinity terms, and any reason they cannot be judged."""
    found: list[tuple[AffinityTerm, ...]] = []
    problems = []
    for kind in ("podAffinity", "podAntiAffinity"):
        section = _mapping(affinity.get(kind), f"spec.affinity.{kind}")
        terms = []
        for raw in section.get("requiredDuringSchedulingIgnoredDuringExecution") or ():
            term, problem = _affinity_term(raw, namespace, labels)
            terms.append(term)
            if problem:
                problems.append(problem)
        found.append(_intern(tuple(terms), section) if terms else ())
    return found[0], found[1], problems[0] if problems else ""


def _spread_constraints(
    spec: Mapping[str, Any], labels: Mapping[str, str]
) -> tuple[tuple[SpreadConstraint, ...], str]:
    """The DoNotSchedule topology spread constraints (ScheduleAnyway only scores)."""
    constraints = []
    for raw in spec.get("topologySpreadConstraints") or ():
        item = _mapping(raw, "a topology spread constraint")
        if item.get("whenUnsatisfiable") != "DoNotSchedule":
            continue
        max_skew = _int32(item.get("maxSkew"), "maxSkew")
        min_domains = item.get("minDomains")
        min_domains = 1 if min_domains is None else _int32(min_domains, "minDomains")
        if max_skew < 1 or min_domains < 1:
            return (), "a topology spread constraint with maxSkew or minDomains below 1"
        selector = decode_label_selector(item.get("labelSelector"))
        if selector is not None and not selector.valid:
            return (), "a topology spread constraint with an invalid label selector"
        topology_key = _string(item.get("topologyKey"), "topologyKey")
        if not topology_key:
            return (), "a topology spread constraint without a topologyKey"
        constraints.append(
            SpreadConstraint(
                max_skew=max_skew,
                topology_key=topology_key,
                selector=_merge_label_keys(selector, labels, item.get("matchLabelKeys")),
                min_domains=min_domains,
                honor_node_affinity=item.get("nodeAffinityPolicy") != "Ignore",
                honor_node_taints=item.get("nodeTaintsPolicy") == "Honor",
            )
        )
    return _intern(tuple(constraints), spec.get("topologySpreadConstraints")), ""


def decode_claim(obj: Mapping[str, Any]) -> PersistentVolumeClaim:
    """A PersistentVolumeClaim: its bound volume, storage class and access modes."""
    namespace, name, meta = _identity(obj, "PersistentVolumeClaim")
    try:
        spec = _mapping(obj.get("spec"), "spec")
        class_name = spec.get("storageClassName")
        return PersistentVolumeClaim(
            namespace=namespace,
            name=name,
            volume_name=_string(spec.get("volumeName"), "spec.volumeName"),
            storage_class_name=None
            if class_name is None
            else _string(class_name, "spec.storageClassName"),
            access_modes=tuple(_string(m, "accessModes") for m in spec.get("accessModes") or ()),
            terminating=meta.get("deletionTimestamp") is not None,
        )
    except PlannerInputError as error:
        raise PlannerInputError(f"persistentvolumeclaim {namespace}/{name}: {error}") from None
    except _SHAPE_ERRORS as error:
        raise PlannerInputError(
            f"persistentvolumeclaim {namespace}/{name}: {_wrong_shape(error)}"
        ) from None


def decode_volume(obj: Mapping[str, Any]) -> PersistentVolume:
    """A PersistentVolume: node affinity, zone labels, CSI driver and handle."""
    _, name, meta = _identity(obj, "PersistentVolume")
    try:
        spec = _mapping(obj.get("spec"), "spec")
        csi = _mapping(spec.get("csi"), "spec.csi")
        affinity = _mapping(spec.get("nodeAffinity"), "spec.nodeAffinity")
        terms = None
        if affinity.get("required") is not None:
            terms = _required_affinity(
                {
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": affinity["required"]
                        }
                    }
                }
            )
        return PersistentVolume(
            name=name,
            labels=_labels(meta.get("labels"), "metadata.labels"),
            node_affinity=terms,
            storage_class_name=_string(spec.get("storageClassName"), "spec.storageClassName"),
            csi_driver=_string(csi.get("driver"), "spec.csi.driver"),
            csi_handle=_string(csi.get("volumeHandle"), "spec.csi.volumeHandle"),
            bound=spec.get("claimRef") is not None,
        )
    except PlannerInputError as error:
        raise PlannerInputError(f"persistentvolume {name}: {error}") from None
    except _SHAPE_ERRORS as error:
        raise PlannerInputError(f"persistentvolume {name}: {_wrong_shape(error)}") from None


def decode_storage_class(obj: Mapping[str, Any]) -> StorageClass:
    """A StorageClass: when it binds, and whether it restricts topology."""
    _, name, _meta = _identity(obj, "StorageClass")
    try:
        return StorageClass(
            name=name,
            wait_for_first_consumer=obj.get("volumeBindingMode") == "WaitForFirstConsumer",
            restricts_topology=bool(obj.get("allowedTopologies")),
            provisioner=_string(obj.get("provisioner"), "provisioner"),
        )
    except PlannerInputError as error:
        raise PlannerInputError(f"storageclass {name}: {error}") from None


def decode_csinode(obj: Mapping[str, Any]) -> CSINode:
    """A CSINode: each driver's `allocatable.count` (None when it sets no limit)."""
    _, name, _meta = _identity(obj, "CSINode")
    try:
        spec = _mapping(obj.get("spec"), "spec")
        limits: dict[str, int | None] = {}
        for raw in spec.get("drivers") or ():
            driver = _mapping(raw, "a CSINode driver")
            count = _mapping(driver.get("allocatable"), "allocatable").get("count")
            limits[_string(driver.get("name"), "driver name")] = (
                None if count is None else _int32(count, "allocatable.count")
            )
        return CSINode(name, limits)
    except PlannerInputError as error:
        raise PlannerInputError(f"csinode {name}: {error}") from None
    except _SHAPE_ERRORS as error:
        raise PlannerInputError(f"csinode {name}: {_wrong_shape(error)}") from None


def decode_volume_attachment(obj: Mapping[str, Any]) -> VolumeAttachment:
    """A VolumeAttachment: which PersistentVolume is attached to which node, by which driver."""
    _, name, _meta = _identity(obj, "VolumeAttachment")
    try:
        spec = _mapping(obj.get("spec"), "spec")
        source = _mapping(spec.get("source"), "spec.source")
        return VolumeAttachment(
            name=name,
            attacher=_string(spec.get("attacher"), "spec.attacher"),
            node_name=_string(spec.get("nodeName"), "spec.nodeName"),
            volume_name=_string(source.get("persistentVolumeName"), "persistentVolumeName"),
        )
    except PlannerInputError as error:
        raise PlannerInputError(f"volumeattachment {name}: {error}") from None
    except _SHAPE_ERRORS as error:
        raise PlannerInputError(f"volumeattachment {name}: {_wrong_shape(error)}") from None


def decode_namespace(obj: Mapping[str, Any]) -> Namespace:
    """A Namespace: the labels a `namespaceSelector` is matched against."""
    _, name, meta = _identity(obj, "Namespace")
    try:
        return Namespace(name, _labels(meta.get("labels"), "metadata.labels"))
    except PlannerInputError as error:
        raise PlannerInputError(f"namespace {name}: {error}") from None


def _host_ports(spec: Mapping[str, Any]) -> tuple[HostPort, ...]:
    """Host ports of the containers and of restartable init containers (they keep running)."""
    ports: list[HostPort] = []
    for container in spec.get("containers") or ():
        if "ports" in container:
            _add_host_ports(container, ports)
    for container in spec.get("initContainers") or ():
        if container.get("restartPolicy") == "Always" and "ports" in container:
            _add_host_ports(container, ports)
    return _intern(tuple(ports)) if ports else ()


def _add_host_ports(container: Mapping[str, Any], ports: list[HostPort]) -> None:
    for port in container.get("ports") or ():
        host_port = port.get("hostPort") or 0
        if host_port > 0:
            ip = port.get("hostIP") or "0.0.0.0"
            ports.append(HostPort(ip, port.get("protocol") or "TCP", int(host_port)))


# Each toleration list read so far, by its fields as written: most pods carry one of a
# handful (the defaults admission adds), so a look-up replaces building it again.
_toleration_lists: dict[tuple[tuple[Any, ...], ...], tuple[Toleration, ...]] = {}


def _tolerations(raw: Any) -> tuple[Toleration, ...]:
    if not raw:
        return ()
    written = tuple(
        [(t.get("key"), t.get("operator"), t.get("value"), t.get("effect")) for t in raw]
    )
    try:
        found = _toleration_lists.get(written)
        known = True
    except TypeError:  # a list or object where a string belongs: read it the long way
        found, known = None, False
    if found is None:
        found = _intern(
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
        if known and len(raw) <= 16 and len(_toleration_lists) < 2_000:
            _toleration_lists[written] = found
    return found


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
    return _intern(tuple(terms), required)


def decode_label_selector(raw: Any) -> LabelSelector | None:
    """A `metav1.LabelSelector`; None for a missing one (which matches nothing)."""
    if raw is None:
        return None
    raw = _mapping(raw, "a label selector")
    expressions, valid = _requirements(raw.get("matchExpressions"), _LABEL_OPERATORS)
    labels = tuple(sorted(_labels(raw.get("matchLabels"), "matchLabels").items()))
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
            labels=_labels(meta.get("labels"), "metadata.labels"),
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


_DISRUPTION_MODES = ("single", "all")
# Kubernetes 1.36 serves PodGroups at `scheduling.k8s.io/v1alpha2`, where `disruptionMode` is
# a string ("Pod", the default, or "PodGroup") rather than 1.37's `{single: {}}`/`{all: {}}`.
_V1ALPHA2_DISRUPTION_MODES = {"Pod": False, "PodGroup": True}


def decode_pod_group(obj: Mapping[str, Any]) -> PodGroup:
    """A `scheduling.k8s.io/v1beta1` PodGroup (or 1.36's `v1alpha2` one: the same fields but
    for `disruptionMode`, a string there, and `preemptionPolicy` and the parent, which it has
    not): scheduling policy (basic, or gang with its minCount), disruption mode, priority,
    preemption policy, the parent CompositePodGroup, and what the planner does not judge for
    it (topology constraints, resource claims)."""
    namespace, name, meta = _identity(obj, "PodGroup")
    try:
        return _decode_pod_group(obj, namespace, name, meta)
    except PlannerInputError as error:
        raise PlannerInputError(f"podgroup {namespace}/{name}: {error}") from None
    except _SHAPE_ERRORS as error:
        raise PlannerInputError(f"podgroup {namespace}/{name}: {_wrong_shape(error)}") from None


def _decode_pod_group(
    obj: Mapping[str, Any], namespace: str, name: str, meta: Mapping[str, Any]
) -> PodGroup:
    spec = _mapping(obj.get("spec"), "spec")
    policy = _mapping(spec.get("schedulingPolicy"), "spec.schedulingPolicy")
    gang = "gang" in policy
    min_count = 1
    if gang:
        gang_policy = _mapping(policy["gang"], "spec.schedulingPolicy.gang")
        min_count = _int32(gang_policy.get("minCount"), "spec.schedulingPolicy.gang.minCount")
        if min_count < 1:
            raise PlannerInputError(
                f"spec.schedulingPolicy.gang.minCount must be at least 1, not {min_count}"
            )
    elif policy and "basic" not in policy:
        raise PlannerInputError(
            "spec.schedulingPolicy must be {basic: {}} or {gang: {minCount: N}}, not "
            f"{sorted(policy)}"
        )
    priority = spec.get("priority")
    policy_name = _string(spec.get("preemptionPolicy"), "spec.preemptionPolicy")
    if policy_name not in ("", PREEMPT_LOWER_PRIORITY, "Never"):
        raise PlannerInputError(
            f"spec.preemptionPolicy must be PreemptLowerPriority or Never, not {policy_name!r}"
        )
    constraints = _mapping(spec.get("schedulingConstraints"), "spec.schedulingConstraints")
    unsupported = ""
    if constraints.get("topology"):
        unsupported = "topology constraints (spec.schedulingConstraints.topology)"
    elif spec.get("resourceClaims"):
        unsupported = "DRA resource claims (spec.resourceClaims)"
    uid = meta.get("uid") or str(uuid.uuid5(uuid.NAMESPACE_URL, f"podgroup/{namespace}/{name}"))
    return PodGroup(
        namespace=namespace,
        name=name,
        uid=_string(uid, "metadata.uid"),
        priority=0 if priority is None else _int32(priority, "spec.priority"),
        gang=gang,
        min_count=min_count,
        disruption_all=_disruption_all(spec.get("disruptionMode")),
        preemption_policy=policy_name,
        unsupported=unsupported,
        resource_version=str(meta.get("resourceVersion") or ""),
        parent=_parent(spec),
    )


def _disruption_all(value: Any, *, v1alpha2: bool = True) -> bool:
    """Whether `spec.disruptionMode` says `all`: `{all: {}}` (v1beta1, v1alpha3) or, where
    `v1alpha2` allows it, "PodGroup" (a v1alpha2 PodGroup); absent is `single`."""
    if isinstance(value, str) and v1alpha2:
        found = _V1ALPHA2_DISRUPTION_MODES.get(value)
        if found is None:
            raise PlannerInputError(
                f"spec.disruptionMode must be Pod or PodGroup (v1alpha2), not {shown(value)}"
            )
        return found
    mode = _mapping(value, "spec.disruptionMode")
    if mode and (len(mode) != 1 or next(iter(mode)) not in _DISRUPTION_MODES):
        raise PlannerInputError(
            f"spec.disruptionMode must be {{single: {{}}}} or {{all: {{}}}}, not {sorted(mode)}"
        )
    return "all" in mode


def _parent(spec: Mapping[str, Any]) -> str:
    """`spec.parentCompositePodGroupName`, checked as the API server checks a name."""
    parent = _string(spec.get("parentCompositePodGroupName"), "spec.parentCompositePodGroupName")
    if parent:
        problem = name_problem(NameKind.POD_GROUP, parent)
        if problem:
            raise PlannerInputError(f"spec.parentCompositePodGroupName: {problem}")
    return parent


def decode_composite_pod_group(obj: Mapping[str, Any]) -> CompositePodGroup:
    """A `scheduling.k8s.io/v1alpha3` CompositePodGroup: its priority, disruption mode and
    parent (what makes victim units of the PodGroups beneath it)."""
    namespace, name, meta = _identity(obj, "CompositePodGroup")
    what = f"compositepodgroup {namespace}/{name}"
    try:
        spec = _mapping(obj.get("spec"), "spec")
        priority = spec.get("priority")
        uid = meta.get("uid") or str(
            uuid.uuid5(uuid.NAMESPACE_URL, f"compositepodgroup/{namespace}/{name}")
        )
        return CompositePodGroup(
            namespace=namespace,
            name=name,
            uid=_string(uid, "metadata.uid"),
            priority=0 if priority is None else _int32(priority, "spec.priority"),
            disruption_all=_disruption_all(spec.get("disruptionMode"), v1alpha2=False),
            parent=_parent(spec),
            resource_version=str(meta.get("resourceVersion") or ""),
        )
    except PlannerInputError as error:
        raise PlannerInputError(f"{what}: {error}") from None
    except _SHAPE_ERRORS as error:
        raise PlannerInputError(f"{what}: {_wrong_shape(error)}") from None


_LIST_ITEM_KINDS = {
    "PodList": "Pod",
    "NodeList": "Node",
    "PodDisruptionBudgetList": "PodDisruptionBudget",
    "NamespaceList": "Namespace",
    "PersistentVolumeClaimList": "PersistentVolumeClaim",
    "PersistentVolumeList": "PersistentVolume",
    "StorageClassList": "StorageClass",
    "CSINodeList": "CSINode",
    "VolumeAttachmentList": "VolumeAttachment",
    "PodGroupList": "PodGroup",
    "CompositePodGroupList": "CompositePodGroup",
}
# The kinds a snapshot's objects are read as; any other kind is skipped.
SNAPSHOT_KINDS = (
    "Node",
    "Pod",
    "PodDisruptionBudget",
    "Namespace",
    "PersistentVolumeClaim",
    "PersistentVolume",
    "StorageClass",
    "CSINode",
    "VolumeAttachment",
    "PodGroup",
    "CompositePodGroup",
)


def iter_list_items(document: Any) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """The (kind, object) pairs of a `v1 List` (or a typed list such as `PodList`)."""
    if not isinstance(document, Mapping):
        raise PlannerInputError("the snapshot is not a JSON object; expected a v1 List")
    list_kind = document.get("kind")
    default_kind = _LIST_ITEM_KINDS.get(str(list_kind))
    if list_kind != "List" and default_kind is None:
        raise PlannerInputError(
            f"the snapshot is a {list_kind or 'object without kind'}, expected a v1 List "
            "(kubectl get nodes,pods,pdb,namespaces -A -o json)"
        )
    items = document.get("items")
    if items is None:
        return
    if not isinstance(items, list):
        raise PlannerInputError("the snapshot's items must be a list")
    for index, item in enumerate(items):
        if type(item) is not dict and not isinstance(item, Mapping):
            raise PlannerInputError(f"item {index} of the snapshot is not an object")
        kind = item.get("kind") or default_kind
        if not isinstance(kind, str):
            raise PlannerInputError(f"item {index} of the snapshot has no kind")
        yield kind, item

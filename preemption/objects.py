"""Compact views of the Kubernetes objects the planner reads: Pods, Nodes, PodDisruptionBudgets.

Only the fields a preemption decision depends on are kept, so that a view of 150,000 pods
fits comfortably in memory. The structs are treated as immutable: a changed object in the
cluster is a new struct replacing the old one (they are not frozen only because frozen
dataclasses are several times slower to build, and a cluster view builds many).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"

QOS_GUARANTEED = "Guaranteed"
QOS_BURSTABLE = "Burstable"
QOS_BEST_EFFORT = "BestEffort"

PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
PREEMPT_NEVER = "Never"

# kubelet's SystemCriticalPriority (scheduling.SystemCriticalPriority): pods at or above it are
# critical and may preempt on admission.
SYSTEM_CRITICAL_PRIORITY = 2 * 10**9

EMPTY_LABELS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Resources:
    """A resource vector as the scheduler counts it: cpu in millicores, the rest in units."""

    milli_cpu: int = 0
    memory: int = 0
    ephemeral_storage: int = 0
    scalars: tuple[tuple[str, int], ...] = ()

    def get(self, name: str) -> int:
        """The amount of one resource by its Kubernetes name (cpu in millicores)."""
        if name == CPU:
            return self.milli_cpu
        if name == MEMORY:
            return self.memory
        if name == EPHEMERAL_STORAGE:
            return self.ephemeral_storage
        for scalar_name, amount in self.scalars:
            if scalar_name == name:
                return amount
        return 0

    def names(self) -> tuple[str, ...]:
        """The resources with a non-zero amount, in a stable order."""
        named = [
            name
            for name, amount in (
                (CPU, self.milli_cpu),
                (MEMORY, self.memory),
                (EPHEMERAL_STORAGE, self.ephemeral_storage),
            )
            if amount
        ]
        named.extend(name for name, amount in self.scalars if amount)
        return tuple(named)

    def is_zero(self) -> bool:
        """Nothing at all is requested (NodeResourcesFit then checks only the pod count)."""
        return not (
            self.milli_cpu
            or self.memory
            or self.ephemeral_storage
            or any(amount for _, amount in self.scalars)
        )

    def __add__(self, other: Resources) -> Resources:
        scalars = dict(self.scalars)
        for name, amount in other.scalars:
            scalars[name] = scalars.get(name, 0) + amount
        return Resources(
            self.milli_cpu + other.milli_cpu,
            self.memory + other.memory,
            self.ephemeral_storage + other.ephemeral_storage,
            tuple(sorted(scalars.items())),
        )

    def to_json(self) -> dict[str, str]:
        """Kubernetes-style quantities for people: cpu as millicores, the rest as integers."""
        shown: dict[str, str] = {}
        if self.milli_cpu:
            shown[CPU] = f"{self.milli_cpu}m"
        if self.memory:
            shown[MEMORY] = str(self.memory)
        if self.ephemeral_storage:
            shown[EPHEMERAL_STORAGE] = str(self.ephemeral_storage)
        for name, amount in self.scalars:
            if amount:
                shown[name] = str(amount)
        return shown


ZERO = Resources()


class Toleration(NamedTuple):
    key: str
    operator: str
    value: str
    effect: str


class Taint(NamedTuple):
    key: str
    value: str
    effect: str


class HostPort(NamedTuple):
    """A host port a container asks for; empty IP and protocol already defaulted."""

    ip: str
    protocol: str
    port: int


# Stands for the host ports of a bound pod that asks for more than the planner keeps: it
# conflicts with every port, so a preemptor wanting any host port never counts that node's
# ports as free while the pod is there.
ANY_HOST_PORT = HostPort("0.0.0.0", "*", -1)


class Requirement(NamedTuple):
    """One `key operator values` requirement of a label or node selector."""

    key: str
    operator: str
    values: tuple[str, ...]


class NodeSelectorTerm(NamedTuple):
    """A required node-affinity term: its label expressions and its field expressions."""

    match_expressions: tuple[Requirement, ...]
    match_fields: tuple[Requirement, ...]


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A `metav1.LabelSelector`. `valid` is False when upstream would fail to convert it."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()
    valid: bool = True

    def is_empty(self) -> bool:
        """`selector.Empty()`: no requirement (a PDB with such a selector matches nothing)."""
        return not self.match_labels and not self.match_expressions


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """A required `PodAffinityTerm`, defaulted as the scheduler's `AffinityTerm`.

    `namespaces` already holds the owning pod's namespace when neither `namespaces` nor a
    `namespaceSelector` was given; `namespace_selector` None selects no namespace, an empty
    selector selects all. `selector` None (no `labelSelector`) selects no pod. Keys of
    `matchLabelKeys`/`mismatchLabelKeys` are merged into `selector` as the API server does.
    """

    selector: LabelSelector | None
    namespaces: frozenset[str]
    namespace_selector: LabelSelector | None
    topology_key: str
    # Terms key the anti-affinity index, looked up for every pod the dry run removes: the
    # hash is computed once, not rehashed through the selectors each time.
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        fields = (self.selector, self.namespaces, self.namespace_selector, self.topology_key)
        object.__setattr__(self, "_hash", hash(fields))

    def __hash__(self) -> int:
        return self._hash


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """A `whenUnsatisfiable: DoNotSchedule` topology spread constraint (the only kind that
    filters), with `matchLabelKeys` merged into `selector` and the policies defaulted."""

    max_skew: int
    topology_key: str
    selector: LabelSelector | None
    min_domains: int = 1
    honor_node_affinity: bool = True  # nodeAffinityPolicy: Honor (the default)
    honor_node_taints: bool = False  # nodeTaintsPolicy: Ignore (the default)


@dataclass(slots=True, eq=False)
class Pod:
    """What the planner needs of a pod. `requests` is the effective request (see `resources`)."""

    namespace: str
    name: str
    uid: str
    priority: int
    requests: Resources
    node_name: str = ""
    nominated_node_name: str = ""
    start_time: float | None = None
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY_LABELS)
    host_ports: tuple[HostPort, ...] = ()
    preemption_policy: str = PREEMPT_LOWER_PRIORITY
    scheduler_name: str = "default-scheduler"
    phase: str = "Pending"
    status_reason: str = ""  # e.g. the kubelet's OutOfcpu when admission failed
    terminating: bool = False
    disrupted_by_scheduler: bool = False
    unschedulable: bool = False
    qos_class: str = QOS_BEST_EFFORT
    static_or_mirror: bool = False
    tolerations: tuple[Toleration, ...] = ()
    node_selector: tuple[tuple[str, str], ...] = ()
    required_affinity: tuple[NodeSelectorTerm, ...] | None = None
    priority_class_name: str = ""
    resource_version: str = ""
    pod_affinity: tuple[AffinityTerm, ...] = ()
    pod_anti_affinity: tuple[AffinityTerm, ...] = ()
    spread_constraints: tuple[SpreadConstraint, ...] = ()
    # What this pod needs that the planner does not model (e.g. DRA resource claims): as a
    # preemptor it is refused with this text, never guessed about. Empty when all is modeled.
    unsupported: str = ""
    # The scheduler's last PodScheduled=False message ("0/40 nodes are available: ...").
    scheduler_message: str = ""
    # PersistentVolumeClaims it mounts (names in its namespace; a generic ephemeral volume's
    # claim is `<pod>-<volume>`), and inline CSI volumes as (driver, volume handle).
    claims: tuple[str, ...] = ()
    inline_csi: tuple[tuple[str, str], ...] = ()
    # The PodGroup it joins (`spec.schedulingGroup.podGroupName`, same namespace); "" if none.
    group: str = ""
    # Its own `spec.priority` when `priority` holds its group's instead (a member's priority
    # is its group's: the snapshot sets it); None while `priority` is its own.
    spec_priority: int | None = None
    # The annotations a setting asks to keep (e.g. a label-named group's size); no others.
    annotations: Mapping[str, str] = field(default_factory=lambda: EMPTY_LABELS)
    # The fields whose content exceeded the planner's caps and was not kept (see
    # `decode.POD_CAPS`): "labels", "annotations", "hostPorts", "tolerations",
    # "nodeSelector", "affinity", "topologySpreadConstraints". Empty for ordinary pods.
    over_cap: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """`namespace/name`, the way people and the ledger name a pod."""
        return f"{self.namespace}/{self.name}"

    def is_critical(self) -> bool:
        """kubelet's `IsCriticalPod`: static, mirror, or priority at least system-critical."""
        return self.static_or_mirror or self.priority >= SYSTEM_CRITICAL_PRIORITY

    def is_terminal(self) -> bool:
        """Succeeded or Failed: the scheduler no longer counts the pod on its node."""
        return self.phase in ("Succeeded", "Failed")


PREEMPTOR_POLICY_UNSET = ""


@dataclass(slots=True, eq=False)
class PodGroup:
    """A `scheduling.k8s.io/v1beta1` PodGroup as preemption reads it (KEP-4671, KEP-5710);
    Kubernetes 1.36's `v1alpha2` shape reads the same (`decode.decode_pod_group`).

    `min_count` is the gang's `schedulingPolicy.gang.minCount`, 1 for `basic` (at least one
    member placed). `disruption_all` is `disruptionMode: {all: {}}`: every scheduled member,
    on any node, is one victim unit. `preemption_policy` is "" when the group sets none (its
    members' then decide). `unsupported` names what the planner does not judge for it
    (topology constraints, resource claims), "" when nothing. `parent` is
    `spec.parentCompositePodGroupName`: the CompositePodGroup (same namespace) it belongs
    to, "" for a group at the root of its hierarchy.
    """

    namespace: str
    name: str
    uid: str
    priority: int = 0
    gang: bool = False
    min_count: int = 1
    disruption_all: bool = False
    preemption_policy: str = PREEMPTOR_POLICY_UNSET
    unsupported: str = ""
    resource_version: str = ""
    parent: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(slots=True, eq=False)
class CompositePodGroup:
    """A `scheduling.k8s.io/v1alpha3` CompositePodGroup as preemption reads it (KEP-6012, the
    `CompositePodGroup` gate): a group of PodGroups and CompositePodGroups naming it as their
    parent. `disruption_all` is `disruptionMode: {all: {}}`: the highest such ancestor of a
    PodGroup makes every scheduled pod of every PodGroup beneath it one victim unit, with
    the priority of the root of its hierarchy. `parent` is its own
    `spec.parentCompositePodGroupName`, "" at the root.
    """

    namespace: str
    name: str
    uid: str
    priority: int = 0
    disruption_all: bool = False
    parent: str = ""
    resource_version: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(slots=True, eq=False)
class Node:
    """What the planner needs of a node: its labels, taints and allocatable resources."""

    name: str
    allocatable: Resources
    allowed_pods: int
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY_LABELS)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    resource_version: str = ""


@dataclass(slots=True, eq=False)
class PodDisruptionBudget:
    """A policy/v1 PodDisruptionBudget as preemption reads it: selector and remaining budget."""

    namespace: str
    name: str
    selector: LabelSelector | None
    disruptions_allowed: int
    disrupted_pods: frozenset[str] = frozenset()
    resource_version: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(slots=True, eq=False)
class Namespace:
    """A Namespace as `namespaceSelector` reads it: its name and labels."""

    name: str
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY_LABELS)


# -- storage ------------------------------------------------------------------------------------

READ_WRITE_ONCE_POD = "ReadWriteOncePod"


@dataclass(slots=True, eq=False)
class PersistentVolumeClaim:
    """A claim as the volume filters read it: what it is bound to, how it may be accessed."""

    namespace: str
    name: str
    volume_name: str = ""
    storage_class_name: str | None = None
    access_modes: tuple[str, ...] = ()
    terminating: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(slots=True, eq=False)
class PersistentVolume:
    """A volume: where it may be used (nodeAffinity, zone labels) and its CSI identity."""

    name: str
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY_LABELS)
    node_affinity: tuple[NodeSelectorTerm, ...] | None = None
    storage_class_name: str = ""
    csi_driver: str = ""
    csi_handle: str = ""
    bound: bool = False  # has a claimRef


@dataclass(slots=True, eq=False)
class StorageClass:
    name: str
    wait_for_first_consumer: bool = False
    restricts_topology: bool = False  # allowedTopologies given
    provisioner: str = ""


@dataclass(slots=True, eq=False)
class CSINode:
    """A node's CSI drivers and how many volumes each may attach (None: no limit given)."""

    name: str
    limits: Mapping[str, int | None] = field(default_factory=dict)


@dataclass(slots=True, eq=False)
class VolumeAttachment:
    """A volume attached (or attaching) to a node: it counts there until it is detached."""

    name: str
    attacher: str
    node_name: str
    volume_name: str

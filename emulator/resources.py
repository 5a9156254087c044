"""The resources the emulator serves: the ones a preemption controller reads or writes.

A table rather than generic discovery, because each entry carries behaviour the emulator
must get right (which are namespaced, which have a status subresource). The `OPTIONAL` ones
are served unless the emulator is started without them, as a cluster whose feature gate is
off does not serve them: discovery leaves them out and their paths answer 404.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    subresources: frozenset[str] = frozenset()

    @property
    def key(self) -> str:
        """The store's name for it: `pods`, `poddisruptionbudgets`, `events.k8s.io/events`.

        core/v1 and events.k8s.io/v1 Events are stored apart (the real server shares one
        storage and converts; nothing here reads an Event through both APIs)."""
        return (
            f"{self.group}/{self.plural}" if self.group and self.group != "policy" else self.plural
        )

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """`schema.GroupResource.String()`, as error messages name the resource."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


PODS = Resource("", "v1", "pods", "Pod", True, frozenset({"status", "eviction", "binding"}))
NODES = Resource("", "v1", "nodes", "Node", False, frozenset({"status"}))
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", False, frozenset({"status"}))
EVENTS = Resource("", "v1", "events", "Event", True)
PDBS = Resource(
    "policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, frozenset({"status"})
)
EVENTS_V1 = Resource("events.k8s.io", "v1", "events", "Event", True)
PVCS = Resource(
    "", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, frozenset({"status"})
)
PVS = Resource("", "v1", "persistentvolumes", "PersistentVolume", False, frozenset({"status"}))
STORAGE_CLASSES = Resource("storage.k8s.io", "v1", "storageclasses", "StorageClass", False)
CSI_NODES = Resource("storage.k8s.io", "v1", "csinodes", "CSINode", False)
VOLUME_ATTACHMENTS = Resource(
    "storage.k8s.io", "v1", "volumeattachments", "VolumeAttachment", False, frozenset({"status"})
)

# KEP-4671's PodGroup (the `GenericWorkload` gate, beta in 1.37): pods join one with
# `spec.schedulingGroup.podGroupName`. A cluster may not serve it: `Emulator(pod_groups=False)`.
POD_GROUPS = Resource(
    "scheduling.k8s.io", "v1beta1", "podgroups", "PodGroup", True, frozenset({"status"})
)
# The same objects as Kubernetes 1.36 serves them (`Emulator(pod_group_version="v1alpha2")`):
# one store (the key has no version), objects as given, no conversion between the shapes.
POD_GROUPS_V1ALPHA2 = Resource(
    "scheduling.k8s.io", "v1alpha2", "podgroups", "PodGroup", True, frozenset({"status"})
)
# 1.35's first alpha of the workload API (Workloads holding their pod groups), which the
# planner does not read: `Emulator(pod_group_version="v1alpha1")` serves it instead.
WORKLOADS_V1ALPHA1 = Resource("scheduling.k8s.io", "v1alpha1", "workloads", "Workload", True)
# KEP-6012's CompositePodGroup (its own gate, alpha in 1.37): served when asked for,
# `Emulator(composite_pod_groups=True)`.
COMPOSITE_POD_GROUPS = Resource(
    "scheduling.k8s.io",
    "v1alpha3",
    "compositepodgroups",
    "CompositePodGroup",
    True,
    frozenset({"status"}),
)

ALL = (
    PODS,
    NODES,
    NAMESPACES,
    EVENTS,
    PDBS,
    EVENTS_V1,
    PVCS,
    PVS,
    STORAGE_CLASSES,
    CSI_NODES,
    VOLUME_ATTACHMENTS,
    POD_GROUPS,
    POD_GROUPS_V1ALPHA2,
    WORKLOADS_V1ALPHA1,
    COMPOSITE_POD_GROUPS,
)
# APIs a cluster may not serve (a feature gate off, or another release's version).
OPTIONAL = frozenset({POD_GROUPS, POD_GROUPS_V1ALPHA2, WORKLOADS_V1ALPHA1, COMPOSITE_POD_GROUPS})
BY_PATH = {(r.group, r.version, r.plural): r for r in ALL}
BY_KEY = {r.key: r for r in ALL if r is not POD_GROUPS_V1ALPHA2}
BY_KIND = {r.kind: r for r in ALL if r not in (EVENTS_V1, POD_GROUPS_V1ALPHA2)}
BY_API = {(r.api_version, r.kind): r for r in ALL}
# Which resource serves PodGroups (or, for 1.35, what serves instead) per `pod_group_version`.
POD_GROUP_VERSIONS = {
    "v1beta1": POD_GROUPS,
    "v1alpha2": POD_GROUPS_V1ALPHA2,
    "v1alpha1": WORKLOADS_V1ALPHA1,
}


def serving(
    *,
    pod_groups: bool = True,
    pod_group_version: str = "v1beta1",
    composite_pod_groups: bool = False,
) -> frozenset[Resource]:
    """The resources an emulator serves: every one that is not optional; PodGroups at
    `pod_group_version` (1.37's `v1beta1`, 1.36's `v1alpha2`, or 1.35's `v1alpha1`, which
    serves Workloads instead) unless `pod_groups` is False; CompositePodGroups when asked."""
    served = set(ALL) - OPTIONAL
    if pod_groups:
        served.add(POD_GROUP_VERSIONS[pod_group_version])
    if composite_pod_groups:
        served.add(COMPOSITE_POD_GROUPS)
    return frozenset(served)

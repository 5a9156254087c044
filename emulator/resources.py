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
)
OPTIONAL = frozenset({POD_GROUPS})  # APIs a cluster may not serve (a feature gate off)
BY_PATH = {(r.group, r.version, r.plural): r for r in ALL}
BY_KEY = {r.key: r for r in ALL}
BY_KIND = {r.kind: r for r in ALL if r is not EVENTS_V1}


def serving(*, pod_groups: bool = True) -> frozenset[Resource]:
    """The resources an emulator serves: all of them, or all but the optional ones left out."""
    left_out = set() if pod_groups else {POD_GROUPS}
    return frozenset(ALL) - left_out

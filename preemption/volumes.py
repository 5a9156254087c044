"""The volume filters, as kube-scheduler's plugins judge a pod's claims and CSI volumes.

- VolumeRestrictions: a ReadWriteOncePod claim another pod already uses fails every node
  (Unschedulable: preempting that pod resolves it, on the node where it runs).
- NodeVolumeLimits: a node's CSINode `allocatable.count` per driver bounds the volumes
  attached there: the pods' volumes and every VolumeAttachment on the node (a victim's
  volume still counts until it is detached, so evicting it frees nothing at once).
- VolumeBinding: claims must exist and not be terminating; a bound claim's volume must exist
  and its nodeAffinity match the node (UnschedulableAndUnresolvable otherwise); an unbound
  claim of an Immediate class fails everywhere.
- VolumeZone: a bound volume's zone and region labels must match the node's, when the node
  has any.

Unbound WaitForFirstConsumer claims are judged only when provisioning can go anywhere (a
class without allowedTopologies and no unbound static volume of the class to choose from);
otherwise the planner refuses the pod rather than guess where a volume would be made.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from preemptctl.preemption.filters import SUCCESS, Code, Status, status_of
from preemptctl.preemption.objects import READ_WRITE_ONCE_POD, Node, PersistentVolume, Pod
from preemptctl.preemption.selectors import node_selector_term_matches

if TYPE_CHECKING:
    from preemptctl.preemption.snapshot import ClusterSnapshot

ERR_RWOP_CONFLICT = (
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"
)
ERR_MAX_VOLUMES = "node(s) exceed max volume count"
ERR_NODE_CONFLICT = "node(s) had volume node affinity conflict"
ERR_UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
ERR_MISSING_PV = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
ERR_ZONE_CONFLICT = "node(s) had no available volume zone"

VOLUME_RESTRICTIONS = "VolumeRestrictions"
NODE_VOLUME_LIMITS = "NodeVolumeLimits"
VOLUME_BINDING = "VolumeBinding"
VOLUME_ZONE = "VolumeZone"

_GA_LABEL = {
    "failure-domain.beta.kubernetes.io/zone": "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region": "topology.kubernetes.io/region",
}
ZONE_LABELS = (*_GA_LABEL.values(), *_GA_LABEL)


def pod_csi_volumes(snapshot: ClusterSnapshot, pod: Pod) -> list[tuple[str, str]]:
    """The (driver, volume handle) of each CSI volume the pod mounts: its bound claims'
    volumes and its inline CSI volumes."""
    found = list(pod.inline_csi)
    for claim_name in pod.claims:
        claim = snapshot.claims.get(f"{pod.namespace}/{claim_name}")
        if claim is None or not claim.volume_name:
            continue
        volume = snapshot.volumes.get(claim.volume_name)
        if volume is not None and volume.csi_driver:
            found.append((volume.csi_driver, volume.csi_handle or volume.name))
    return found


class VolumeChecks:
    """The volume filters' PreFilter state for one preemptor.

    `counts` holds what the dry run changes ("rwop": pods using one of the preemptor's
    ReadWriteOncePod claims; "absent/<uid>": a pod removed from its node; "added/<uid>": a
    nominated pod placed on the node judged); its owner logs every change to undo it.
    """

    def __init__(self, snapshot: ClusterSnapshot, pod: Pod) -> None:
        self.snapshot = snapshot
        self.pod = pod
        self.everywhere: Status | None = None  # a PreFilter failure: every node fails
        self.unsupported = ""
        self.bound_volumes: list[PersistentVolume] = []
        self.rwop_claims: set[str] = set()
        self.wanted: dict[str, set[str]] = {}  # driver -> handles the preemptor needs
        self.zones: list[tuple[str, frozenset[str]]] = []
        self.counts: dict[str, int] = {}
        self.pods: dict[str, Pod] = {}
        self.attached: dict[str, dict[str, set[str]]] = {}  # node -> driver -> handles
        self._csi: dict[str, list[tuple[str, str]]] = {}
        self._read_claims()
        if self.everywhere is None and not self.unsupported:
            self._count_rwop_users()
            for driver, handle in pod_csi_volumes(snapshot, pod):
                self.wanted.setdefault(driver, set()).add(handle)
            if self.wanted:
                self._index_attachments()

    def _read_claims(self) -> None:
        """VolumeBinding's and VolumeRestrictions' PreFilter over the preemptor's claims."""
        snapshot, pod = self.snapshot, self.pod
        for name in pod.claims:
            claim = snapshot.claims.get(f"{pod.namespace}/{name}")
            if claim is None:
                self._fail(f'persistentvolumeclaim "{name}" not found', VOLUME_BINDING)
                return
            if claim.terminating:
                self._fail(f'persistentvolumeclaim "{name}" is being deleted', VOLUME_BINDING)
                return
            if READ_WRITE_ONCE_POD in claim.access_modes:
                self.rwop_claims.add(claim.key)
            if claim.volume_name:
                volume = snapshot.volumes.get(claim.volume_name)
                if volume is None:
                    self._fail(ERR_MISSING_PV, VOLUME_BINDING)
                    return
                self.bound_volumes.append(volume)
                for key in ZONE_LABELS:
                    value = volume.labels.get(key)
                    if value is not None:
                        self.zones.append((key, frozenset(value.split("__"))))
                continue
            self._read_unbound(name, claim.storage_class_name)
            if self.everywhere is not None or self.unsupported:
                return

    def _read_unbound(self, name: str, class_name: str | None) -> None:
        if not class_name:
            self._fail(ERR_UNBOUND_IMMEDIATE, VOLUME_BINDING)
            return
        storage_class = self.snapshot.storage_classes.get(class_name)
        if storage_class is None:
            self.unsupported = (
                f"the unbound claim {name} of StorageClass {class_name}, which is not in the "
                "snapshot (add storageclasses to it)"
            )
        elif not storage_class.wait_for_first_consumer:
            self._fail(ERR_UNBOUND_IMMEDIATE, VOLUME_BINDING)
        elif storage_class.restricts_topology or any(
            v.storage_class_name == class_name and not v.bound
            for v in self.snapshot.volumes.values()
        ):
            self.unsupported = (
                f"the unbound WaitForFirstConsumer claim {name}: StorageClass {class_name} "
                "restricts where volumes are made or binds static volumes, and the planner "
                "does not model volume binding"
            )

    def _fail(self, reason: str, plugin: str) -> None:
        self.everywhere = status_of(Code.UNRESOLVABLE, (reason,), plugin)

    def _count_rwop_users(self) -> None:
        users = self.snapshot.bound.claim_users
        self.counts["rwop"] = sum(
            1 for key in self.rwop_claims for uid in users.get(key, {}) if uid != self.pod.uid
        )
        if not self.counts["rwop"]:
            del self.counts["rwop"]

    def _index_attachments(self) -> None:
        for attachment in self.snapshot.volume_attachments.values():
            if attachment.attacher not in self.wanted:
                continue
            volume = self.snapshot.volumes.get(attachment.volume_name)
            handle = volume.csi_handle if volume is not None and volume.csi_handle else ""
            handle = handle or attachment.volume_name
            by_driver = self.attached.setdefault(attachment.node_name, {})
            by_driver.setdefault(attachment.attacher, set()).add(handle)

    def csi_of(self, pod: Pod) -> list[tuple[str, str]]:
        found = self._csi.get(pod.uid)
        if found is None:
            found = self._csi[pod.uid] = pod_csi_volumes(self.snapshot, pod)
        return found

    def rwop_uses(self, pod: Pod) -> int:
        """How many of the preemptor's ReadWriteOncePod claims the pod mounts."""
        if not self.rwop_claims or pod.uid == self.pod.uid:
            return 0
        return sum(1 for name in pod.claims if f"{pod.namespace}/{name}" in self.rwop_claims)

    # -- Filter -------------------------------------------------------------------------------

    def filter(self, node: Node) -> Status:
        """VolumeRestrictions, NodeVolumeLimits, VolumeBinding, VolumeZone, in profile order."""
        if self.everywhere is not None:
            return self.everywhere
        if self.counts.get("rwop", 0) > 0:
            return status_of(Code.UNSCHEDULABLE, (ERR_RWOP_CONFLICT,), VOLUME_RESTRICTIONS)
        if self.wanted and self._exceeds_limits(node):
            return status_of(Code.UNSCHEDULABLE, (ERR_MAX_VOLUMES,), NODE_VOLUME_LIMITS)
        for volume in self.bound_volumes:
            terms = volume.node_affinity
            if terms is not None and not any(
                node_selector_term_matches(term, node.name, node.labels) for term in terms
            ):
                return status_of(Code.UNRESOLVABLE, (ERR_NODE_CONFLICT,), VOLUME_BINDING)
        if self.zones and not _zones_match(self.zones, node.labels):
            return status_of(Code.UNRESOLVABLE, (ERR_ZONE_CONFLICT,), VOLUME_ZONE)
        return SUCCESS

    def _exceeds_limits(self, node: Node) -> bool:
        csinode = self.snapshot.csinodes.get(node.name)
        if csinode is None:
            return False
        info = self.snapshot.node_infos.get(node.name)
        for driver, wanted in self.wanted.items():
            limit = csinode.limits.get(driver)
            if limit is None:
                continue
            attached = set(self.attached.get(node.name, {}).get(driver, ()))
            on_node = [] if info is None else list(info.pods.values())
            on_node += [self.pods[key[6:]] for key in self.counts if key.startswith("added/")]
            for pod in on_node:
                if (pod.claims or pod.inline_csi) and f"absent/{pod.uid}" not in self.counts:
                    attached.update(h for d, h in self.csi_of(pod) if d == driver)
            if len(attached) + len(wanted - attached) > limit:
                return True
        return False


def _zones_match(zones: list[tuple[str, frozenset[str]]], labels: Mapping[str, str]) -> bool:
    """`VolumeZone.Filter`: a node with no zone or region label takes any volume; otherwise
    each of the volume's zone labels (a beta key also read as its GA key) must allow the
    node's value."""
    if not any(key in labels for key in ZONE_LABELS):
        return True
    for key, values in zones:
        value = labels.get(key)
        if value is None:
            value = labels.get(_GA_LABEL.get(key, key))
        if value is None or value not in values:
            return False
    return True

"""Reading one pod by namespace/name and UID: the check every write starts from; and one
pod group the same way (`get_pod_group`), for a group preemption's checks.

A pod is identified by its UID, not its name: a StatefulSet recreates `web-1` under a new
UID, and a preemption that chose the old `web-1` must not act on the new one. A PodGroup
likewise: a Job controller recreating `train-a` makes another group.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from kubernetes.client.exceptions import ApiException

from preemptctl.kube.classify import Call, api_status, classify, classify_status
from preemptctl.kube.client import KubeClient
from preemptctl.kube.discovery import POD_GROUP_VERSIONS, SCHEDULING, served
from preemptctl.kube.results import ErrorKind, NotRetryable, WriteEffect, WriteResult
from preemptctl.preemption.decision import PodRef
from preemptctl.preemption.decode import decode_pod, decode_pod_group
from preemptctl.preemption.errors import PlannerInputError
from preemptctl.preemption.group_decision import GroupRef
from preemptctl.preemption.names import NameKind, name_problem, shown
from preemptctl.preemption.objects import Pod, PodGroup
from preemptctl.preemption.standing import PreemptorStanding, Standing


def path_segment(kind: NameKind, value: str, what: str) -> str:
    """`value` quoted as one segment of an API path, once it is a name the API server would
    accept as a `kind`; else `NotRetryable`, naming `what` the request was for. `quote`
    leaves `.` and `..` as they are and the HTTP client then removes them as dot segments: a
    pod named `..` would turn a DELETE of it into one of its namespace
    (`preemption.names`)."""
    problem = name_problem(kind, value)
    if problem is not None:
        raise NotRetryable(ErrorKind.INVALID, f"refused to build a request for {what}: {problem}")
    return quote(value, safe="")


def pod_path(namespace: str, name: str, subresource: str = "") -> str:
    """The API path of the pod `namespace/name` (and of its `subresource`), both names
    checked (`path_segment`)."""
    what = f"pod {shown(f'{namespace}/{name}')}"
    path = (
        f"/api/v1/namespaces/{path_segment(NameKind.NAMESPACE, namespace, what)}"
        f"/pods/{path_segment(NameKind.POD, name, what)}"
    )
    return f"{path}/{subresource}" if subresource else path


class Presence(enum.Enum):
    """What a lookup by namespace/name and UID found."""

    FOUND = "Found"
    GONE = "Gone"  # no pod by that name
    REPLACED = "Replaced"  # a pod by that name, with another UID


@dataclass(frozen=True)
class PodLookup:
    """A pod as the API server returned it, read through typed accessors: the gateway
    parses the Kubernetes JSON, its callers never do."""

    presence: Presence
    pod: dict[str, Any] | None  # the pod now under that name (FOUND or REPLACED)

    @property
    def found(self) -> bool:
        return self.presence is Presence.FOUND

    def _part(self, name: str) -> dict[str, Any]:
        part = (self.pod or {}).get(name)
        return part if isinstance(part, dict) else {}

    @property
    def uid(self) -> str | None:
        """The UID of the pod now under the name (another one's when REPLACED)."""
        uid = self._part("metadata").get("uid")
        return str(uid) if uid else None

    @property
    def resource_version(self) -> str:
        return str(self._part("metadata").get("resourceVersion") or "")

    @property
    def terminating(self) -> bool:
        """The pod has a deletionTimestamp: it is on its way out."""
        return bool(self._part("metadata").get("deletionTimestamp"))

    @property
    def node_name(self) -> str | None:
        node = self._part("spec").get("nodeName")
        return str(node) if node else None

    @property
    def scheduler_name(self) -> str:
        return str(self._part("spec").get("schedulerName") or "default-scheduler")

    @property
    def nominated_node_name(self) -> str | None:
        node = self._part("status").get("nominatedNodeName")
        return str(node) if node else None

    @property
    def conditions(self) -> list[dict[str, Any]]:
        return list(self._part("status").get("conditions") or [])

    def standing(self) -> PreemptorStanding:
        """Where the pod stands, as a preemptor: gone, replaced, bound (to its node) or
        pending."""
        if self.presence is Presence.GONE:
            return PreemptorStanding(Standing.GONE)
        if self.presence is Presence.REPLACED:
            return PreemptorStanding(Standing.REPLACED)
        node = self.node_name
        if node:
            return PreemptorStanding(Standing.BOUND, node)
        return PreemptorStanding(Standing.PENDING)

    def decoded(self) -> Pod:
        """The pod in the planner's model; `PlannerInputError` when it cannot be read."""
        if self.pod is None:
            raise PlannerInputError("no pod to read: it is gone")
        return decode_pod(self.pod)


def get_pod(kube: KubeClient, ref: PodRef) -> PodLookup:
    """The pod `ref` names, if it is still that pod (same UID)."""
    call = Call("get", "pods", ref.key)
    try:
        pod = kube.request("GET", pod_path(ref.namespace, ref.name), call)
    except ApiException as error:
        status = api_status(error)
        if status.code == 404:
            return PodLookup(Presence.GONE, None)
        raise classify_status(status, call) from None
    if ref.uid and pod["metadata"].get("uid") != ref.uid:
        return PodLookup(Presence.REPLACED, pod)
    return PodLookup(Presence.FOUND, pod)


def replaced(ref: PodRef, noun: str, replaced_by_uid: str | None) -> WriteResult:
    """`ref`'s name belongs to another pod now (UID `replaced_by_uid`, when known): it is
    never touched."""
    return WriteResult(
        WriteEffect.REPLACED,
        ref.key,
        f"{noun} was replaced by a pod with another UID; left alone",
        replaced_by_uid=replaced_by_uid,
    )


def result_if_absent(lookup: PodLookup, ref: PodRef, noun: str = "pod") -> WriteResult | None:
    """A write to `ref` needs no call when the pod is gone (done, as far as a preemption
    cares) or its name belongs to a new pod (never touched, its UID kept); None when it is
    still there."""
    if lookup.presence is Presence.GONE:
        return WriteResult(WriteEffect.ALREADY_GONE, ref.key, f"{noun} is already gone")
    if lookup.presence is Presence.REPLACED:
        return replaced(ref, noun, lookup.uid)
    return None


def read_before_write(kube: KubeClient, ref: PodRef, noun: str = "pod") -> PodLookup | WriteResult:
    """The pod a write to `ref` starts from; or the write's result already, when the pod is
    gone or its name belongs to another pod (`result_if_absent`): then nothing is written."""
    lookup = get_pod(kube, ref)
    absent = result_if_absent(lookup, ref, noun)
    return lookup if absent is None else absent


# -- pod groups ---------------------------------------------------------------------------------


def pod_group_path(namespace: str, name: str, version: str = POD_GROUP_VERSIONS[0]) -> str:
    """The API path of the PodGroup `namespace/name` at `version` of its group, both names
    checked (`path_segment`)."""
    what = f"pod group {shown(f'{namespace}/{name}')}"
    return (
        f"/apis/{SCHEDULING}/{version}"
        f"/namespaces/{path_segment(NameKind.NAMESPACE, namespace, what)}"
        f"/podgroups/{path_segment(NameKind.POD_GROUP, name, what)}"
    )


@dataclass(frozen=True)
class PodGroupLookup:
    """A PodGroup as the API server returned it (decoded in the planner's model), if it is
    still the group a preemption names (same UID)."""

    presence: Presence
    group: PodGroup | None  # the group now under that name (FOUND or REPLACED)

    @property
    def standing(self) -> Standing:
        """The group's object as a standing: `Pending` while it exists (its members say
        more: `preemption.standing.group_standing_of`), `Gone` or `Replaced`."""
        if self.presence is Presence.GONE:
            return Standing.GONE
        if self.presence is Presence.REPLACED:
            return Standing.REPLACED
        return Standing.PENDING


def get_pod_group(kube: KubeClient, ref: GroupRef) -> PodGroupLookup:
    """The PodGroup `ref` names, if it is still that group (same UID), read at the newest
    version of the API the server serves (`kube.discovery.served`, asked once per client).
    On a cluster without the PodGroup API (at a version the planner reads) the group is
    gone. A group the planner cannot read is a `PlannerInputError`."""
    call = Call("get", "podgroups", ref.key, SCHEDULING)
    try:
        found = served(kube, SCHEDULING, "podgroups", POD_GROUP_VERSIONS)
    except ApiException as error:
        raise classify_status(api_status(error), call) from None
    except Exception as error:  # transport failures: classified, never a raw traceback
        raise classify(error, call) from error
    if not found.version:
        return PodGroupLookup(Presence.GONE, None)
    try:
        obj = kube.request("GET", pod_group_path(ref.namespace, ref.name, found.version), call)
    except ApiException as error:
        status = api_status(error)
        if status.code == 404:
            return PodGroupLookup(Presence.GONE, None)
        raise classify_status(status, call) from None
    group = decode_pod_group(obj)
    if ref.uid and group.uid != ref.uid:
        return PodGroupLookup(Presence.REPLACED, group)
    return PodGroupLookup(Presence.FOUND, group)

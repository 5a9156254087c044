"""Reading one pod by namespace/name and UID: the check every write starts from.

A pod is identified by its UID, not its name: a StatefulSet recreates `web-1` under a new
UID, and a preemption that chose the old `web-1` must not act on the new one.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from kubernetes.client.exceptions import ApiException

from preemptctl.kube.classify import Call, api_status, classify_status
from preemptctl.kube.client import KubeClient
from preemptctl.kube.outcomes import PodRef, Verdict, WriteOutcome


def pod_path(namespace: str, name: str, subresource: str = "") -> str:
    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"
    return f"{path}/{subresource}" if subresource else path


class Presence(enum.Enum):
    FOUND = "Found"
    GONE = "Gone"  # no pod by that name
    REPLACED = "Replaced"  # a pod by that name, with another UID


@dataclass(frozen=True)
class PodLookup:
    presence: Presence
    pod: dict[str, Any] | None  # the pod now under that name (FOUND or REPLACED)

    @property
    def found(self) -> bool:
        return self.presence is Presence.FOUND

    @property
    def resource_version(self) -> str:
        return str(self.pod["metadata"]["resourceVersion"]) if self.pod else ""

    @property
    def status(self) -> dict[str, Any]:
        return dict((self.pod or {}).get("status") or {})


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


def settled_by_absence(lookup: PodLookup, ref: PodRef, noun: str = "pod") -> WriteOutcome | None:
    """A write to `ref` needs no call when the pod is gone (done, as far as a preemption
    cares) or its name belongs to a new pod (never touched); None when it is still there."""
    if lookup.presence is Presence.GONE:
        return WriteOutcome(Verdict.ALREADY_GONE, ref.key, f"{noun} is already gone")
    if lookup.presence is Presence.REPLACED:
        return WriteOutcome(
            Verdict.REPLACED, ref.key, f"{noun} was replaced by a pod with another UID; left alone"
        )
    return None

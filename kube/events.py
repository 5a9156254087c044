"""Events (events.k8s.io/v1): the only place the controller posts one.

`record_event` records an event about any object (`ObjectRef`: a pod, a PodGroup),
idempotent per key: the event's name is derived from the object's UID and the key's parts,
so a retried activity that already created it gets AlreadyExists and reports it as
unchanged instead of recording it twice. `record_pod_event` is its form for a pod. Their
uses:

- `record_preempted`, the `Preempted` event on a victim, as the scheduler records it.
  Upstream: `Eventf(victim, preemptor, Normal, "Preempted", "Preempting", "Preempted by pod
  %v on node %v", preemptor.UID, nodeName)` through the events.k8s.io/v1 recorder; keyed by
  the victim and the preemptor. A group preemption's victim gets upstream's workload-aware
  form, "Preempted by podgroup ...", related to the PodGroup (`record_preempted_by_group`).
  One deliberate difference: the note names the preemptor by namespace/name before its UID
  ("Preempted by pod default/urgent (uid ...) on node node-1"), so `kubectl describe pod`
  of a victim says who took it without a look-up (upstream's names the UID alone);
- `pod_group_preempted_note`, the `Preempted` event on a victim PodGroup (a gang taken whole,
  or members of a group taken one by one): who preempted it and how many of its pods, which,
  on which node; upstream records none on the group;
- the events that tell a preemptor (a pod, or a PodGroup and its placed members) what is
  done for it (`Preempting`, `PreemptionFailed`, `PreemptionUnsupported`), keyed by the
  caller (per run, or per reason).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from preemptctl.kube.classify import Call, api_status, classify_status
from preemptctl.kube.client import KubeClient
from preemptctl.kube.pods import path_segment
from preemptctl.kube.results import WriteEffect, WriteResult
from preemptctl.preemption.decision import PodRef
from preemptctl.preemption.group_decision import GroupRef
from preemptctl.preemption.names import NameKind, shown

REPORTING_CONTROLLER = "preemptctl"
ACTION = "Preempting"
NOTE_LIMIT = 1024  # the API refuses a longer note


GROUP_VICTIMS_LISTED = 10  # a victim PodGroup's note names this many of its pods, then counts


def preempted_note(preemptor: PodRef, node: str) -> str:
    """A victim's note: upstream's words, the preemptor named by namespace/name and UID."""
    return f"Preempted by pod {preemptor.key} (uid {preemptor.uid}) on node {node}"


def preempted_by_group_note(group: GroupRef, node: str) -> str:
    """A group preemption's victim's note: upstream's workload-aware words, the group named
    by namespace/name and UID, and the victim's own node (upstream's says `cluster`)."""
    return f"Preempted by podgroup {group.key} (uid {group.uid}) on node {node}"


def pod_group_preempted_note(preemptor: ObjectRef, taken: Sequence[tuple[PodRef, str]]) -> str:
    """A victim PodGroup's note: who preempted it (a pod or a pod group, by namespace/name
    and UID), how many of its pods, and which, each on its node (the first
    `GROUP_VICTIMS_LISTED`, then how many more)."""
    kind = "podgroup" if preemptor.kind == "PodGroup" else "pod"
    listed = [f"{pod.name} on {node}" if node else pod.name for pod, node in taken]
    shown_here = ", ".join(listed[:GROUP_VICTIMS_LISTED])
    if len(listed) > GROUP_VICTIMS_LISTED:
        shown_here += f" and {len(listed) - GROUP_VICTIMS_LISTED} more"
    return (
        f"Preempted by {kind} {preemptor.key} (uid {preemptor.uid}): "
        f"{len(taken)} of its pods, {shown_here}"
    )


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """The object an event is about (or related to), as events.k8s.io names it."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def pod(cls, ref: PodRef) -> ObjectRef:
        return cls("v1", "Pod", ref.namespace, ref.name, ref.uid)

    @classmethod
    def pod_group(cls, ref: GroupRef) -> ObjectRef:
        return cls("scheduling.k8s.io/v1beta1", "PodGroup", ref.namespace, ref.name, ref.uid)

    def to_json(self) -> dict[str, str]:
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
        }


def event_name(regarding: PodRef | ObjectRef, key: tuple[str, ...]) -> str:
    """The event's name: the object's, then a digest of its UID and `key` (one event per
    key)."""
    digest = hashlib.sha256("/".join((regarding.uid, *key)).encode()).hexdigest()[:16]
    return f"{regarding.name[:200]}.{digest}"


def record_pod_event(
    kube: KubeClient,
    regarding: PodRef,
    reason: str,
    note: str,
    reporting_instance: str,
    *,
    key: tuple[str, ...],
    normal: bool = False,
    related: PodRef | None = None,
) -> WriteResult:
    """`record_event` about a pod, related to another pod if given."""
    return record_event(
        kube,
        ObjectRef.pod(regarding),
        reason,
        note,
        reporting_instance,
        key=key,
        normal=normal,
        related=ObjectRef.pod(related) if related is not None else None,
    )


def record_event(
    kube: KubeClient,
    regarding: ObjectRef,
    reason: str,
    note: str,
    reporting_instance: str,
    *,
    key: tuple[str, ...],
    normal: bool = False,
    related: ObjectRef | None = None,
) -> WriteResult:
    """Record an event about `regarding` (a Warning unless `normal`), once per `key`;
    `reporting_instance` is the worker's identity. Already recorded: `UNCHANGED`."""
    body: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": event_name(regarding, key), "namespace": regarding.namespace},
        "eventTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": reporting_instance,
        "action": ACTION,
        "reason": reason,
        "type": "Normal" if normal else "Warning",
        "note": note[:NOTE_LIMIT],
        "regarding": regarding.to_json(),
    }
    if related is not None:
        body["related"] = related.to_json()
    call = Call("create", "events", regarding.key, group="events.k8s.io")
    on = f"an event on {shown(regarding.key)}"
    namespace = path_segment(NameKind.NAMESPACE, regarding.namespace, on)
    path = f"/apis/events.k8s.io/v1/namespaces/{namespace}/events"
    try:
        kube.request("POST", path, call, body=body)
    except ApiException as error:
        status = api_status(error)
        if status.code == 409 and status.reason == "AlreadyExists":
            already = f"{reason} event already recorded"
            return WriteResult(WriteEffect.UNCHANGED, regarding.key, already)
        raise classify_status(status, call) from None
    return WriteResult(WriteEffect.DONE, regarding.key, f"{reason} event recorded")


def record_preempted(
    kube: KubeClient,
    victim: PodRef,
    preemptor: PodRef,
    node: str,
    reporting_instance: str,
) -> WriteResult:
    """Record that `preemptor` preempted `victim` on `node` (one event per victim and
    preemptor)."""
    return record_pod_event(
        kube,
        victim,
        "Preempted",
        preempted_note(preemptor, node),
        reporting_instance,
        key=(preemptor.uid,),
        normal=True,
        related=preemptor,
    )


def record_preempted_by_group(
    kube: KubeClient,
    victim: PodRef,
    group: GroupRef,
    node: str,
    reporting_instance: str,
) -> WriteResult:
    """Record that the pod group `group` preempted `victim` on `node`, in upstream's
    workload-aware words (one event per victim and group); related to the PodGroup, unless
    the group is named by a label and has no object."""
    return record_event(
        kube,
        ObjectRef.pod(victim),
        "Preempted",
        preempted_by_group_note(group, node),
        reporting_instance,
        key=(group.uid,),
        normal=True,
        related=None if group.label_named else ObjectRef.pod_group(group),
    )

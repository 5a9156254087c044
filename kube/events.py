"""Events about pods (events.k8s.io/v1): the only place the controller posts one.

`record_pod_event` records an event about a pod, idempotent per key: the event's name is
derived from the pod's UID and the key's parts, so a retried activity that already created
it gets AlreadyExists and reports it as unchanged instead of recording it twice. Its two
uses:

- `record_preempted`, the `Preempted` event on a victim, as the scheduler records it.
  Upstream: `Eventf(victim, preemptor, Normal, "Preempted", "Preempting", "Preempted by pod
  %v on node %v", preemptor.UID, nodeName)` through the events.k8s.io/v1 recorder; keyed by
  the victim and the preemptor;
- the events that tell a preemptor what is done for it (`Preempting`, `PreemptionFailed`,
  `PreemptionUnsupported`), keyed by the caller (per run, or per reason).
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from kubernetes.client.exceptions import ApiException

from preemptctl.kube.classify import Call, api_status, classify_status
from preemptctl.kube.client import KubeClient
from preemptctl.kube.results import WriteEffect, WriteResult
from preemptctl.preemption.decision import PodRef

REPORTING_CONTROLLER = "preemptctl"
ACTION = "Preempting"
NOTE_LIMIT = 1024  # the API refuses a longer note


def preempted_note(preemptor_uid: str, node: str) -> str:
    return f"Preempted by pod {preemptor_uid} on node {node}"


def event_name(pod: PodRef, key: tuple[str, ...]) -> str:
    """The event's name: the pod's, then a digest of its UID and `key` (one event per key)."""
    digest = hashlib.sha256("/".join((pod.uid, *key)).encode()).hexdigest()[:16]
    return f"{pod.name[:200]}.{digest}"


def _pod_reference(ref: PodRef) -> dict[str, str]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": ref.namespace,
        "name": ref.name,
        "uid": ref.uid,
    }


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
        "regarding": _pod_reference(regarding),
    }
    if related is not None:
        body["related"] = _pod_reference(related)
    call = Call("create", "events", regarding.key, group="events.k8s.io")
    path = f"/apis/events.k8s.io/v1/namespaces/{quote(regarding.namespace, safe='')}/events"
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
        preempted_note(preemptor.uid, node),
        reporting_instance,
        key=(preemptor.uid,),
        normal=True,
        related=preemptor,
    )

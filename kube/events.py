"""The `Preempted` event on a victim, as the scheduler records it.

Upstream: `Eventf(victim, preemptor, Normal, "Preempted", "Preempting",
"Preempted by pod %v on node %v", preemptor.UID, nodeName)` through the events.k8s.io/v1
recorder. The event's name is derived from the victim's and preemptor's UIDs, so a retried
activity that already created it gets AlreadyExists and reports it as unchanged instead of
recording the preemption twice.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from kubernetes.client.exceptions import ApiException

from preemptctl.kube.classify import Call, api_status, classify_status
from preemptctl.kube.client import KubeClient
from preemptctl.kube.outcomes import PodRef, Verdict, WriteOutcome

REPORTING_CONTROLLER = "preemptctl"


def preempted_note(preemptor_uid: str, node: str) -> str:
    return f"Preempted by pod {preemptor_uid} on node {node}"


def event_name(victim: PodRef, preemptor: PodRef) -> str:
    digest = hashlib.sha256(f"{victim.uid}/{preemptor.uid}".encode()).hexdigest()[:16]
    return f"{victim.name[:200]}.{digest}"


def _pod_reference(ref: PodRef) -> dict[str, str]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": ref.namespace,
        "name": ref.name,
        "uid": ref.uid,
    }


def preempted_event(
    victim: PodRef, preemptor: PodRef, node: str, reporting_instance: str
) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": event_name(victim, preemptor), "namespace": victim.namespace},
        "eventTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": reporting_instance,
        "action": "Preempting",
        "reason": "Preempted",
        "type": "Normal",
        "note": preempted_note(preemptor.uid, node),
        "regarding": _pod_reference(victim),
        "related": _pod_reference(preemptor),
    }


def record_preempted(
    kube: KubeClient,
    victim: PodRef,
    preemptor: PodRef,
    node: str,
    reporting_instance: str,
) -> WriteOutcome:
    """Record that `preemptor` preempted `victim` on `node`; `reporting_instance` is the
    worker's identity."""
    call = Call("create", "events", victim.key, group="events.k8s.io")
    path = f"/apis/events.k8s.io/v1/namespaces/{quote(victim.namespace, safe='')}/events"
    try:
        kube.request(
            "POST", path, call, body=preempted_event(victim, preemptor, node, reporting_instance)
        )
    except ApiException as error:
        status = api_status(error)
        if status.code == 409 and status.reason == "AlreadyExists":
            return WriteOutcome(Verdict.UNCHANGED, victim.key, "Preempted event already recorded")
        raise classify_status(status, call) from None
    return WriteOutcome(Verdict.DONE, victim.key, "Preempted event recorded")

"""The `DisruptionTarget` condition on a victim, before it is deleted.

Upstream (`prepareCandidate` in the scheduler's preemption executor) sets it so that the
victim's controllers and the kubelet know why the pod goes away. Like upstream's
`UpdatePodCondition`, nothing is sent when an identical condition is already there: a
retried activity then costs one GET, and the condition's lastTransitionTime is not bumped.

The patch carries the resourceVersion read just before, so it applies to the pod that was
checked (same UID, condition absent) or fails with a retryable conflict.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from preemptctl.kube.classify import Call, api_status, classify_status
from preemptctl.kube.client import STRATEGIC_MERGE_PATCH, KubeClient
from preemptctl.kube.outcomes import PodRef, Verdict, WriteOutcome
from preemptctl.kube.pods import Presence, get_pod, pod_path

DISRUPTION_TARGET = "DisruptionTarget"
PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"


def preemption_message(scheduler_name: str) -> str:
    """The condition message upstream writes (`<scheduler>: preempting to accommodate a
    higher priority pod`)."""
    return f"{scheduler_name}: preempting to accommodate a higher priority pod"


def _identical(condition: dict[str, Any], wanted: dict[str, Any]) -> bool:
    return all(condition.get(key) == wanted[key] for key in ("type", "status", "reason", "message"))


def add_disruption_target(kube: KubeClient, victim: PodRef, scheduler_name: str) -> WriteOutcome:
    """Mark `victim` as about to be preempted by a scheduler named `scheduler_name` (the
    preemptor's `spec.schedulerName`, as upstream)."""
    wanted = {
        "type": DISRUPTION_TARGET,
        "status": "True",
        "reason": PREEMPTION_BY_SCHEDULER,
        "message": preemption_message(scheduler_name),
    }
    lookup = get_pod(kube, victim)
    if lookup.presence is Presence.GONE:
        return WriteOutcome(Verdict.ALREADY_GONE, victim.key, "victim is already gone")
    if lookup.presence is Presence.REPLACED:
        return WriteOutcome(
            Verdict.REPLACED,
            victim.key,
            "victim was replaced by a pod with another UID; left alone",
        )
    conditions = lookup.status.get("conditions") or []
    if any(_identical(condition, wanted) for condition in conditions):
        return WriteOutcome(Verdict.UNCHANGED, victim.key, "DisruptionTarget already set")
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    patch = {
        "metadata": {"resourceVersion": lookup.resource_version},
        "status": {"conditions": [dict(wanted, lastTransitionTime=now)]},
    }
    call = Call("patch", "pods/status", victim.key)
    try:
        kube.request(
            "PATCH",
            pod_path(victim.namespace, victim.name, "status"),
            call,
            body=patch,
            content_type=STRATEGIC_MERGE_PATCH,
        )
    except ApiException as error:
        status = api_status(error)
        if status.code == 404:
            return WriteOutcome(Verdict.ALREADY_GONE, victim.key, "victim is already gone")
        raise classify_status(status, call) from None
    return WriteOutcome(Verdict.DONE, victim.key, "DisruptionTarget condition added")

"""The `DisruptionTarget` condition on a victim: set before it is deleted, removed from a
victim the preemption spared.

Upstream (`prepareCandidate` in the scheduler's preemption executor) sets it so that the
victim's controllers and the kubelet know why the pod goes away, with server-side apply on
the status subresource (`ApplyStatus`, a field manager, force): `managedFields` then shows
who marked the pod. This does the same under the field manager `preemptctl`, with no read
first: the applied object carries the victim's UID, so a pod replaced under the same name is
refused by the API server rather than marked (kube-apiserver answers 422, `metadata.uid` is
immutable, without naming the new pod, which a GET then finds), and the answer is the pod
as it is now, so a victim already terminating (its deletionTimestamp set: deleted already,
by this preemption's earlier attempt or by anyone) is told apart without a GET. The price,
paid only when a step is run again: the condition's lastTransitionTime is bumped, where
upstream's `UpdatePodCondition` (which compares against its cache first) leaves it.

Removal applies the same manager's configuration without the condition: server-side apply
removes what its manager no longer applies. A condition this manager does not own (another
writer, or an older version that patched it) is removed by a strategic merge patch that
deletes it by type, guarded by the resourceVersion read just before.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from preemptctl.kube.classify import (
    ApiStatus,
    Call,
    api_status,
    classify_status,
    is_uid_mismatch_refusal,
    is_uid_precondition_conflict,
    replacement_uid,
)
from preemptctl.kube.client import APPLY_PATCH, STRATEGIC_MERGE_PATCH, KubeClient
from preemptctl.kube.pods import (
    get_pod,
    pod_path,
    read_before_write,
    replaced,
    result_if_absent,
)
from preemptctl.kube.results import WriteEffect, WriteResult
from preemptctl.preemption.decision import PodRef

DISRUPTION_TARGET = "DisruptionTarget"
FIELD_MANAGER = "preemptctl"
PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"


def preemption_message(scheduler_name: str) -> str:
    """The condition message upstream writes (`<scheduler>: preempting to accommodate a
    higher priority pod`)."""
    return f"{scheduler_name}: preempting to accommodate a higher priority pod"


def add_disruption_target(kube: KubeClient, victim: PodRef, scheduler_name: str) -> WriteResult:
    """Mark `victim` as about to be preempted by a scheduler named `scheduler_name` (the
    preemptor's `spec.schedulerName`, as upstream), in one request. A victim the answer
    shows terminating is reported so (`TERMINATING`): it needs no DELETE."""
    wanted = {
        "type": DISRUPTION_TARGET,
        "status": "True",
        "reason": PREEMPTION_BY_SCHEDULER,
        "message": preemption_message(scheduler_name),
        "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    call = Call("patch", "pods/status", victim.key)
    try:
        answer = _apply_status(kube, victim, [wanted], call)
    except ApiException as error:
        return _refused(kube, victim, api_status(error), call)
    if ((answer or {}).get("metadata") or {}).get("deletionTimestamp"):
        return WriteResult(WriteEffect.TERMINATING, victim.key, "victim is already terminating")
    return WriteResult(WriteEffect.DONE, victim.key, "DisruptionTarget condition added")


def remove_disruption_target(kube: KubeClient, victim: PodRef) -> WriteResult:
    """Clear the `DisruptionTarget` this controller set on `victim` (a victim the preemption
    spared, or left behind when it failed); one set for another reason is left alone."""
    lookup = read_before_write(kube, victim, "victim")
    if isinstance(lookup, WriteResult):
        return lookup
    ours = [
        condition
        for condition in lookup.conditions
        if condition.get("type") == DISRUPTION_TARGET
        and condition.get("reason") == PREEMPTION_BY_SCHEDULER
    ]
    if not ours:
        return WriteResult(WriteEffect.UNCHANGED, victim.key, "no DisruptionTarget to remove")
    call = Call("patch", "pods/status", victim.key)
    try:
        answer = _apply_status(kube, victim, [], call)
        remaining = [
            condition
            for condition in ((answer or {}).get("status") or {}).get("conditions") or []
            if condition.get("type") == DISRUPTION_TARGET
        ]
        if remaining:  # not (only) ours to drop by apply: delete it by type
            kube.request(
                "PATCH",
                pod_path(victim.namespace, victim.name, "status"),
                call,
                body={
                    "metadata": {
                        "uid": victim.uid,
                        "resourceVersion": (answer or {})
                        .get("metadata", {})
                        .get("resourceVersion"),
                    },
                    "status": {"conditions": [{"type": DISRUPTION_TARGET, "$patch": "delete"}]},
                },
                content_type=STRATEGIC_MERGE_PATCH,
            )
    except ApiException as error:
        return _refused(kube, victim, api_status(error), call)
    return WriteResult(WriteEffect.DONE, victim.key, "DisruptionTarget condition removed")


def _apply_status(
    kube: KubeClient, victim: PodRef, conditions: list[dict[str, Any]], call: Call
) -> Any:
    """Server-side apply of the victim's status conditions as field manager `preemptctl`."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": victim.name, "namespace": victim.namespace, "uid": victim.uid},
        "status": {"conditions": conditions},
    }
    return kube.request(
        "PATCH",
        pod_path(victim.namespace, victim.name, "status"),
        call,
        body=body,
        query={"fieldManager": FIELD_MANAGER, "force": "true"},
        content_type=APPLY_PATCH,
    )


def _refused(kube: KubeClient, victim: PodRef, status: ApiStatus, call: Call) -> WriteResult:
    """A refused status write: gone and replaced victims are results, the rest errors."""
    if status.code == 404:
        return WriteResult(WriteEffect.ALREADY_GONE, victim.key, "victim is already gone")
    current_uid = replacement_uid(status) if is_uid_precondition_conflict(status) else None
    if current_uid:  # the answer names the pod now under the name: no need to read it
        return replaced(victim, "victim", current_uid)
    if status.code == 409 or is_uid_mismatch_refusal(status):
        # A conflict, or the 422 a real API server gives an apply naming a replaced pod
        # (it does not say the new UID): the pod now under the name says which it is.
        absent = result_if_absent(get_pod(kube, victim), victim, "victim")
        if absent is not None:
            return absent
    raise classify_status(status, call) from None

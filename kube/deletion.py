"""Deleting a victim, safely under retries.

The delete carries a UID precondition, so the API server itself refuses to delete a pod
recreated under the victim's name (a StatefulSet's `web-1`); that refusal, like a 404, means
the victim is gone and the preemption may go on. Neither is ever retried into a delete. The
refusal names the pod now under the name, whose UID the result carries (`replaced_by_uid`),
so nobody needs to read it again.

With `use_eviction`, the policy/v1 Eviction API is used instead of DELETE, so the API server
enforces PodDisruptionBudgets at the moment of deletion (the planner's PDB check works on a
view that may be a moment old). An exhausted budget is a 429, hence retryable. kube-apiserver
weighs the budget before the delete's UID precondition: evicting a victim replaced by a Ready
pod under a budget spends one of its disruptions even though the 409 then spares the pod (the
disruption controller gives it back a couple of minutes later).
"""

from __future__ import annotations

from typing import Any

from kubernetes.client.exceptions import ApiException

from preemptctl.kube.classify import (
    Call,
    api_status,
    classify_status,
    is_uid_precondition_conflict,
    replacement_uid,
)
from preemptctl.kube.client import KubeClient
from preemptctl.kube.pods import pod_path
from preemptctl.kube.results import WriteEffect, WriteResult
from preemptctl.preemption.decision import PodRef


def delete_victim(
    kube: KubeClient,
    victim: PodRef,
    *,
    grace_period_seconds: int | None = None,
    use_eviction: bool = False,
) -> WriteResult:
    """Delete (or evict) exactly the pod `victim` names, UID included."""
    options: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "preconditions": {"uid": victim.uid},
    }
    if grace_period_seconds is not None:
        options["gracePeriodSeconds"] = grace_period_seconds
    if use_eviction:
        call = Call("create", "pods/eviction", victim.key)
        method, path = "POST", pod_path(victim.namespace, victim.name, "eviction")
        body: dict[str, Any] = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": victim.name, "namespace": victim.namespace},
            "deleteOptions": options,
        }
    else:
        call = Call("delete", "pods", victim.key)
        method, path, body = "DELETE", pod_path(victim.namespace, victim.name), options
    try:
        kube.request(method, path, call, body=body)
    except ApiException as error:
        status = api_status(error)
        if status.code == 404:
            return WriteResult(WriteEffect.ALREADY_GONE, victim.key, "victim is already gone")
        if is_uid_precondition_conflict(status):
            return WriteResult(
                WriteEffect.REPLACED,
                victim.key,
                f"victim was replaced by a pod with another UID; not deleted ({status.message})",
                replaced_by_uid=replacement_uid(status),
            )
        raise classify_status(status, call) from None
    verb = "evicted" if use_eviction else "deleted"
    return WriteResult(WriteEffect.DONE, victim.key, f"victim {verb}")

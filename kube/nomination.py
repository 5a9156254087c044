"""`status.nominatedNodeName`: setting it on the preemptor, clearing it on lower-priority pods.

KEP-5278 lets components other than the scheduler nominate (a cluster autoscaler, a
Kueue-like controller), so a nomination found on the pod is not assumed to be ours: it is
overwritten only when the decision requires it (`overwrite=True`), and the outcome says
what was there, so the caller can record the overwrite, or the nomination it kept, in the
ledger. Clearing removes only a nomination to the node the decision names; one that has
moved elsewhere since is someone else's and is left.

A nomination the decision requires (`overwrite`) is one merge patch carrying the pod's UID,
with no read first: whatever is there is overwritten, and what the decision saw there
(`seen`) is what the outcome names as overwritten. Keeping another component's nomination,
and clearing one, must know what is there now: those read first, and their patch carries
the resourceVersion read, so a concurrent change makes it fail with a retryable conflict
instead of overwriting what was not seen.
"""

from __future__ import annotations

from kubernetes.client.exceptions import ApiException

from preemptctl.kube.classify import (
    Call,
    api_status,
    classify_status,
    is_uid_mismatch_refusal,
    is_uid_precondition_conflict,
    replacement_uid,
)
from preemptctl.kube.client import MERGE_PATCH, KubeClient
from preemptctl.kube.pods import pod_path, read_before_write, replaced
from preemptctl.kube.results import WriteEffect, WriteResult
from preemptctl.preemption.decision import PodRef


def _patch_nomination(
    kube: KubeClient, ref: PodRef, precondition: dict[str, str], node: str | None
) -> WriteResult | None:
    """The patch of `ref`'s nomination, guarded by `precondition` (its UID or the
    resourceVersion read); None when it was written, the result when the pod is gone or
    was replaced under its name."""
    call = Call("patch", "pods/status", ref.key)
    patch = {"metadata": precondition, "status": {"nominatedNodeName": node}}
    try:
        kube.request(
            "PATCH",
            pod_path(ref.namespace, ref.name, "status"),
            call,
            body=patch,
            content_type=MERGE_PATCH,
        )
    except ApiException as error:
        status = api_status(error)
        if status.code == 404:
            return WriteResult(WriteEffect.ALREADY_GONE, ref.key, "pod is already gone")
        if is_uid_precondition_conflict(status) or is_uid_mismatch_refusal(status):
            return replaced(ref, "pod", replacement_uid(status))
        raise classify_status(status, call) from None
    return None


def nominate(
    kube: KubeClient, preemptor: PodRef, node: str, *, overwrite: bool, seen: str | None = None
) -> WriteResult:
    """Nominate `preemptor` to `node`. With `overwrite`, in one patch whatever is there
    (`seen`: the nomination the decision saw, named in the outcome); without it, a
    different nomination already there is kept, and `previous` names it."""
    if overwrite:
        return _nominate_over(kube, preemptor, node, seen)
    lookup = read_before_write(kube, preemptor)
    if isinstance(lookup, WriteResult):
        return lookup
    current = lookup.nominated_node_name
    if current == node:
        return WriteResult(WriteEffect.UNCHANGED, preemptor.key, f"already nominated to {node}")
    if current is not None:
        return WriteResult(
            WriteEffect.KEPT_OTHER_NOMINATION,
            preemptor.key,
            f"kept the nomination to {current} set by another component",
            previous=current,
        )
    absent = _patch_nomination(kube, preemptor, {"resourceVersion": lookup.resource_version}, node)
    return absent or WriteResult(WriteEffect.DONE, preemptor.key, f"nominated to {node}")


def _nominate_over(kube: KubeClient, preemptor: PodRef, node: str, seen: str | None) -> WriteResult:
    """One merge patch with the UID precondition: gone and replaced pods are results."""
    absent = _patch_nomination(kube, preemptor, {"uid": preemptor.uid}, node)
    if absent is not None:
        return absent
    if seen == node:
        return WriteResult(WriteEffect.UNCHANGED, preemptor.key, f"already nominated to {node}")
    message = f"nominated to {node}"
    if seen is not None:
        message += f", overwriting the nomination to {seen}"
    return WriteResult(WriteEffect.DONE, preemptor.key, message, previous=seen)


def clear_nomination(kube: KubeClient, pod: PodRef, node: str) -> WriteResult:
    """Clear `pod`'s nomination to `node` (upstream's `ClearNominatedNodeName` for the
    lower-priority pods nominated to the node a preemption takes)."""
    lookup = read_before_write(kube, pod)
    if isinstance(lookup, WriteResult):
        return lookup
    current = lookup.nominated_node_name
    if current is None:
        return WriteResult(WriteEffect.UNCHANGED, pod.key, "not nominated")
    if current != node:
        return WriteResult(
            WriteEffect.KEPT_OTHER_NOMINATION,
            pod.key,
            f"nominated to {current} now, not {node}; left alone",
            previous=current,
        )
    absent = _patch_nomination(kube, pod, {"resourceVersion": lookup.resource_version}, None)
    return absent or WriteResult(
        WriteEffect.DONE, pod.key, f"cleared the nomination to {node}", previous=current
    )

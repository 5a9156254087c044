"""`status.nominatedNodeName`: setting it on the preemptor, clearing it on lower-priority pods.

KEP-5278 lets components other than the scheduler nominate (a cluster autoscaler, a
Kueue-like controller), so a nomination found on the pod is not assumed to be ours: it is
overwritten only when the decision requires it (`overwrite=True`), and the outcome says
what was there, so the caller can record the overwrite, or the nomination it kept, in the
ledger. Clearing removes only a nomination to the node the decision names; one that has
moved elsewhere since is someone else's and is left.

Each patch carries the resourceVersion read before deciding, so a concurrent change makes
it fail with a retryable conflict instead of overwriting what was not seen.
"""

from __future__ import annotations

from kubernetes.client.exceptions import ApiException

from preemptctl.kube.classify import Call, api_status, classify_status
from preemptctl.kube.client import MERGE_PATCH, KubeClient
from preemptctl.kube.pods import PodLookup, pod_path, read_before_write
from preemptctl.kube.results import WriteEffect, WriteResult
from preemptctl.preemption.decision import PodRef


def _patch_nomination(kube: KubeClient, ref: PodRef, lookup: PodLookup, node: str | None) -> None:
    call = Call("patch", "pods/status", ref.key)
    patch = {
        "metadata": {"resourceVersion": lookup.resource_version},
        "status": {"nominatedNodeName": node},
    }
    try:
        kube.request(
            "PATCH",
            pod_path(ref.namespace, ref.name, "status"),
            call,
            body=patch,
            content_type=MERGE_PATCH,
        )
    except ApiException as error:
        raise classify_status(api_status(error), call) from None


def nominate(kube: KubeClient, preemptor: PodRef, node: str, *, overwrite: bool) -> WriteResult:
    """Nominate `preemptor` to `node`. A different nomination already there is kept unless
    `overwrite`; either way `previous` names it."""
    lookup = read_before_write(kube, preemptor)
    if isinstance(lookup, WriteResult):
        return lookup
    current = lookup.nominated_node_name
    if current == node:
        return WriteResult(WriteEffect.UNCHANGED, preemptor.key, f"already nominated to {node}")
    if current is not None and not overwrite:
        return WriteResult(
            WriteEffect.KEPT_OTHER_NOMINATION,
            preemptor.key,
            f"kept the nomination to {current} set by another component",
            previous=current,
        )
    _patch_nomination(kube, preemptor, lookup, node)
    message = f"nominated to {node}"
    if current is not None:
        message += f", overwriting the nomination to {current}"
    return WriteResult(WriteEffect.DONE, preemptor.key, message, previous=current)


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
    _patch_nomination(kube, pod, lookup, None)
    return WriteResult(
        WriteEffect.DONE, pod.key, f"cleared the nomination to {node}", previous=current
    )

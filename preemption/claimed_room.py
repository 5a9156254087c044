"""Claims in the way: which claims of running preemptions held the room a preemptor lacked.

Not an upstream step (upstream has no claims: see `preemption.claims`). A decision that finds
no candidate while claims are laid over the cluster says which of them stood in its way, in
its rationale (`CLAIMS_IN_THE_WAY`: each node where a claim held the room, with the pods the
claims place there, "namespace/name"), so whoever retries it can do so when one of those
preemptions ends rather than after a blind backoff (`worker.trigger_rules.RetryBook`).

A claim stands in the way on a node when the preemptor would have room there without it:
- a pod: a node its dry run rejected, with a pod a claim places there, where the preemptor's
  requests fit once every pod below its priority is gone and the claims' pods are not
  counted (other nominations at or above its priority are). Resources and the pod count
  only: a node rejected for ports, affinity or spread counts if its resources would do;
- a group: placed again on the cluster without its potential victims and without the
  claims' pods (`pod_group_preemption.domain_rooms`, `schedule_pod_group`), it places enough
  members (minCount; basic: one): the nodes of that placement where claims placed pods.

Read under the decision lock with the claims applied; never changes the decision.
"""

from __future__ import annotations

from collections.abc import Iterable

from preemptctl.preemption.claims import CLAIMED_PRIORITY
from preemptctl.preemption.default_preemption import PreemptionArgs
from preemptctl.preemption.filters import fits_request
from preemptctl.preemption.objects import Pod
from preemptctl.preemption.pod_group_preemption import (
    domain_rooms,
    enough_placed,
    new_pod_group_preemptor,
    schedule_pod_group,
)
from preemptctl.preemption.snapshot import ClusterSnapshot, NodeInfo

CLAIMS_IN_THE_WAY = "claimsInTheWay"
"""The rationale's key: {node: [the pods claims place there, "namespace/name", sorted]}."""


def claimed_pods(snapshot: ClusterSnapshot, node: str) -> list[Pod]:
    """The pods claims place on `node` (nominations at the claimed priority)."""
    if not snapshot.has_nominations(node):
        return []
    return [pod for pod in snapshot.nominated_pods(node) if pod.priority >= CLAIMED_PRIORITY]


def claims_in_the_way(
    snapshot: ClusterSnapshot, preemptor: Pod, rejected: Iterable[str]
) -> dict[str, list[str]]:
    """For a pod that found no candidate: each of the nodes its dry run `rejected` where the
    room it lacked is claimed, with the claims' pods there (see the module docstring)."""
    found: dict[str, list[str]] = {}
    for name in rejected:
        claimed = claimed_pods(snapshot, name)
        if not claimed:
            continue
        info = snapshot.node(name)
        if info is not None and _fits_without(snapshot, preemptor, info, claimed):
            found[name] = sorted(pod.key for pod in claimed)
    return found


def _fits_without(
    snapshot: ClusterSnapshot, preemptor: Pod, info: NodeInfo, claimed: list[Pod]
) -> bool:
    """Whether the preemptor's requests fit on the node with every pod below its priority
    gone and the `claimed` pods not counted."""
    node = info.node
    if node is None:
        return False
    ignored = {pod.uid for pod in claimed} | {preemptor.uid}
    kept = info.pods_by_importance()[: info.lower_priority_start(preemptor.priority)]
    kept += [
        pod
        for pod in snapshot.nominated_pods(info.name)
        if pod.priority >= preemptor.priority and pod.uid not in ignored
    ]
    want = preemptor.requests
    status = fits_request(
        want,
        node,
        sum(pod.requests.milli_cpu for pod in kept),
        sum(pod.requests.memory for pod in kept),
        sum(pod.requests.ephemeral_storage for pod in kept),
        {name: sum(pod.requests.get(name) for pod in kept) for name, _ in want.scalars},
        len(kept),
    )
    return status.ok


def group_claims_in_the_way(
    snapshot: ClusterSnapshot, group_key: str, args: PreemptionArgs | None = None
) -> dict[str, list[str]]:
    """For a group that found no candidate: the nodes where, placed without its potential
    victims and without the claims' pods, it puts a member and a claim held room; empty
    when that placement would not place enough members either (or no claim is laid)."""
    claimed = {
        name: pods
        for name in sorted(snapshot.nominated_node_names())
        if (pods := claimed_pods(snapshot, name))
    }
    if not claimed:
        return {}
    args = args or PreemptionArgs()
    preemptor = new_pod_group_preemptor(snapshot, group_key, args)
    ignoring = frozenset(pod.uid for pods in claimed.values() for pod in pods)
    rooms = domain_rooms(snapshot, preemptor, args, remove=True, ignoring=ignoring)
    scheduled = schedule_pod_group(preemptor, rooms)
    if not enough_placed(preemptor, len(scheduled.placement)):
        return {}
    used = set(scheduled.placement.values())
    return {name: sorted(pod.key for pod in pods) for name, pods in claimed.items() if name in used}

"""The scheduler's own diagnosis of a pending pod, read back to check the planner against it.

When a scheduling cycle fails, kube-scheduler writes its `FitError` into the pod's
PodScheduled condition: `0/40 nodes are available: 3 Insufficient cpu, 2 node(s) didn't
match pod anti-affinity rules. preemption: ...`. Each reason comes from one filter plugin. A
reason from a plugin the planner does not run means the planner would judge the pod on less
than the scheduler does, so the planner refuses such a pod rather than guessing.
"""

from __future__ import annotations

import re

# Reasons of the filters the planner models, as upstream words them (prefixes where the
# reason carries a name: a resource, a taint).
MODELED_REASON_PREFIXES = (
    "Insufficient ",  # NodeResourcesFit
    "Too many pods",  # NodeResourcesFit
    "node(s) didn't match the requested node name",  # NodeName
    "node(s) were unschedulable",  # NodeUnschedulable
    "node(s) had untolerated taint",  # TaintToleration
    "node(s) didn't match Pod's node affinity/selector",  # NodeAffinity
    "node(s) didn't have free ports for the requested pod ports",  # NodePorts
    "node(s) didn't match pod affinity rules",  # InterPodAffinity
    "node(s) didn't match pod anti-affinity rules",  # InterPodAffinity
    "node(s) didn't satisfy existing pods anti-affinity rules",  # InterPodAffinity
    "node(s) didn't match pod topology spread constraints",  # PodTopologySpread
    "node has pod using PersistentVolumeClaim with the same name",  # VolumeRestrictions (RWOP)
    "node(s) exceed max volume count",  # NodeVolumeLimits
    "node(s) had volume node affinity conflict",  # VolumeBinding
    "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)",  # VolumeBinding
    "pod has unbound immediate PersistentVolumeClaims",  # VolumeBinding
    'persistentvolumeclaim "',  # VolumeBinding: not found, being deleted
    "node(s) had no available volume zone",  # VolumeZone
    "node(s) had a pod the cluster view could not read",  # this controller's own
)

_HEAD = re.compile(r"^0/\d+ nodes are available: ")
_ENTRY = re.compile(r"(\d+) (.+)")


def scheduler_reasons(message: str) -> list[str]:
    """The filter reasons of a `FitError` message, without counts and without the part
    after `preemption:` (that is the scheduler's own preemption attempt, not a filter)."""
    head = _HEAD.match(message)
    if head is None:
        return []
    body = message[head.end() :].split(" preemption: ", 1)[0].strip()
    if body.endswith("."):
        body = body[:-1]
    reasons = []
    for entry in body.split(", "):
        found = _ENTRY.fullmatch(entry.strip())
        if found is not None:
            reasons.append(found[2])
    return reasons


def unmodeled_scheduler_reasons(message: str) -> list[str]:
    """The scheduler's reasons that come from no filter the planner models."""
    return [
        reason
        for reason in scheduler_reasons(message)
        if not reason.startswith(MODELED_REASON_PREFIXES)
    ]

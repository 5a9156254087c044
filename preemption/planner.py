"""The planner's front door: one decision for one pod, by the strategy asked for; or one for
a pending pod group (`plan_group`).

A decision that finds no candidate (`Unschedulable`) while claims of running preemptions are
laid over the snapshot names, in its rationale, the claims that held the room it lacked
(`claimed_room.CLAIMS_IN_THE_WAY`); with no claim laid (`preemptctl plan`) it reads as
before.
"""

from __future__ import annotations

from preemptctl.preemption.claimed_room import (
    CLAIMS_IN_THE_WAY,
    claims_in_the_way,
    group_claims_in_the_way,
)
from preemptctl.preemption.critical_admission import preempt_for_admission
from preemptctl.preemption.decision import Decision, Strategy, Verdict
from preemptctl.preemption.default_preemption import PreemptionArgs, preempt
from preemptctl.preemption.errors import UnknownPodError
from preemptctl.preemption.group_decision import GroupDecision
from preemptctl.preemption.objects import Pod
from preemptctl.preemption.pod_group_preemption import plan_pod_group
from preemptctl.preemption.snapshot import ClusterSnapshot


def plan(
    snapshot: ClusterSnapshot,
    pod_key: str,
    strategy: Strategy = Strategy.DEFAULT,
    args: PreemptionArgs | None = None,
) -> Decision:
    """Decide the preemption for the pod `namespace/name` in `snapshot`."""
    pod = snapshot.pod_by_key(pod_key)
    if pod is None:
        raise UnknownPodError(f"pod {pod_key} is not in the snapshot")
    return plan_for(snapshot, pod, strategy, args)


def plan_for(
    snapshot: ClusterSnapshot,
    preemptor: Pod,
    strategy: Strategy = Strategy.DEFAULT,
    args: PreemptionArgs | None = None,
) -> Decision:
    """Decide the preemption for `preemptor`, a pod the caller already holds (the decision
    path's, as the API server just returned it), in `snapshot`."""
    if strategy is Strategy.CRITICAL_ADMISSION:
        return preempt_for_admission(snapshot, preemptor, args)
    decision = preempt(snapshot, preemptor, args)
    if decision.verdict is Verdict.UNSCHEDULABLE:
        rejected = (e.node for e in decision.rationale.evaluated if not e.candidate)
        in_the_way = claims_in_the_way(snapshot, preemptor, rejected)
        if in_the_way:
            decision.rationale.details[CLAIMS_IN_THE_WAY] = in_the_way
    return decision


def plan_group(
    snapshot: ClusterSnapshot, group_key: str, args: PreemptionArgs | None = None
) -> GroupDecision:
    """Decide the preemption for the pending pod group `namespace/name` in `snapshot` (a
    PodGroup, else a group the configured label names): upstream's `PodGroupPostFilter`.
    `UnknownPodGroupError` when neither exists."""
    decision = plan_pod_group(snapshot, group_key, args)
    if decision.verdict is Verdict.UNSCHEDULABLE:
        in_the_way = group_claims_in_the_way(snapshot, group_key, args)
        if in_the_way:
            decision.rationale[CLAIMS_IN_THE_WAY] = in_the_way
    return decision

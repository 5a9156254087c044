"""The planner's front door: one decision for one pod, by the strategy asked for; or one for
a pending pod group (`plan_group`)."""

from __future__ import annotations

from preemptctl.preemption.critical_admission import preempt_for_admission
from preemptctl.preemption.decision import Decision, Strategy
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
    return preempt(snapshot, preemptor, args)


def plan_group(
    snapshot: ClusterSnapshot, group_key: str, args: PreemptionArgs | None = None
) -> GroupDecision:
    """Decide the preemption for the pending pod group `namespace/name` in `snapshot` (a
    PodGroup, else a group the configured label names): upstream's `PodGroupPostFilter`.
    `UnknownPodGroupError` when neither exists."""
    return plan_pod_group(snapshot, group_key, args)

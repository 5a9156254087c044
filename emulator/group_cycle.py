"""A pod group's scheduling cycle in the simulated scheduler: gangs placed all-or-nothing, as
kube-scheduler 1.37 places them with the `GenericWorkload` gate (KEP-4671).

Upstream's steps (`pkg/scheduler/schedule_one_podgroup.go`, `algorithm_podgroup.go`, and the
`GangScheduling` plugin), each as the simulation takes it:

1. `PreEnqueue`: a pod whose PodGroup does not exist, or a member of a gang with fewer than
   minCount members (bound or pending), stays out of the scheduling queue ("waiting for
   minCount pods from a gang to appear in scheduling queue"); nothing is written on it.
2. `podGroupSchedulingDefaultAlgorithm`: the group's queued pods, in queue order, each placed
   on the snapshot with the members placed before it assumed there (`place`: the nominated
   node first, else the first that fits). After each, `PlacementFeasible`: once the members
   still to try cannot bring the placed and bound ones up to minCount, the cycle stops with
   `minCount (N) cannot be satisfied: S scheduled, R remaining`.
   One deliberate difference: a member that does not fit on its nominated node while
   lower-priority pods are still leaving it (`room_being_made`: the group preemption's
   victims in their grace period) makes the group wait, unwritten, for the next pass.
   Upstream may bind it elsewhere if room appears there first (a nomination is no promise),
   and a group preemption's victims end their grace periods moments apart: another victim
   of the same preemption, gone first, would decide where the gang lands, and a dev run
   would not be the same every time. The gang lands where its preemption made room for it.
   (Room elsewhere while the nominated node is not being freed, a victim not yet deleted
   among them, is taken as upstream takes it.)
3. `submitPodGroupAlgorithmResult`: a feasible group binds every placed member together, a
   member that fits nowhere keeps its own FitError; a group that is not feasible binds none,
   and each member carries the group's message (a placed member, or one never tried) or its
   own FitError (a member that fit nowhere).

A `basic` group has no minCount: what fits binds. A group named by a label (a setting, not
upstream) is a gang whose minCount is its size annotation, else its member count, as the
planner reads it (`new_pod_group_preemptor`).

The cycle leaves the snapshot as it found it: the caller binds the placed members.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from preemptctl.emulator.placement import place, room_being_made
from preemptctl.preemption.default_preemption import PreemptionArgs
from preemptctl.preemption.errors import PlannerInputError, UnknownPodGroupError
from preemptctl.preemption.objects import Pod
from preemptctl.preemption.pod_group_preemption import (
    PodGroupPreemptor,
    new_pod_group_preemptor,
)
from preemptctl.preemption.snapshot import ClusterSnapshot

WAITING_FOR_GROUP = 'waiting for pod\'s pod group "{name}" to appear in scheduling queue'
WAITING_FOR_MIN_COUNT = "waiting for minCount pods from a gang to appear in scheduling queue"


def min_count_unsatisfiable(min_count: int, scheduled: int, remaining: int) -> str:
    """`PlacementFeasible`'s Unschedulable message (the GangScheduling plugin's wording)."""
    return (
        f"minCount ({min_count}) cannot be satisfied: {scheduled} scheduled, {remaining} remaining"
    )


@dataclass(slots=True)
class GroupCycle:
    """One pod group scheduling cycle: where its members go, or why the group does not."""

    group: PodGroupPreemptor
    placed: dict[str, str] = field(default_factory=dict)  # member uid -> node, in order
    fit_errors: dict[str, str] = field(default_factory=dict)  # uid -> its own FitError
    message: str = ""  # the group's, when it is not feasible
    waiting_for: str = ""  # a member's nominated node being freed: try again next pass

    @property
    def feasible(self) -> bool:
        """Bind the placed members: the gang's minCount met, or a basic group placed one."""
        return not self.message and not self.waiting_for and bool(self.placed)

    def message_for(self, member: Pod) -> str:
        """What PodScheduled says of a member that is not bound in this cycle."""
        return self.fit_errors.get(member.uid) or self.message


def queued_group(
    snapshot: ClusterSnapshot, key: str, args: PreemptionArgs
) -> tuple[PodGroupPreemptor | None, str]:
    """`PreEnqueue`: the group `namespace/name` as the cycle reads it, or None and why its
    pods wait outside the queue (no such PodGroup, fewer members than minCount, or a size
    annotation the planner cannot read)."""
    try:
        group = new_pod_group_preemptor(snapshot, key, args)
    except UnknownPodGroupError:
        return None, WAITING_FOR_GROUP.format(name=key.partition("/")[2])
    except PlannerInputError as error:
        return None, str(error)
    if group.gang and len(group.pending) + len(group.bound) < group.min_count:
        return None, WAITING_FOR_MIN_COUNT
    return group, ""


def run_group_cycle(
    snapshot: ClusterSnapshot, group: PodGroupPreemptor, members: Sequence[Pod]
) -> GroupCycle:
    """`podGroupSchedulingDefaultAlgorithm` with `PlacementFeasible` after each member;
    `members` are the group's queued pods in queue order."""
    cycle = GroupCycle(group)
    scheduled = len(group.bound)
    remaining = len(members)
    if group.gang and remaining + scheduled < group.min_count:
        cycle.message = min_count_unsatisfiable(group.min_count, scheduled, remaining)
        return cycle
    assumed: list[Pod] = []
    try:
        for member in members:
            placement = place(snapshot, member)
            being_freed = room_being_made(snapshot, member, placement)
            if being_freed:
                cycle.waiting_for = being_freed
                break
            remaining -= 1
            if placement.node is None:
                cycle.fit_errors[member.uid] = placement.fit_error
            else:
                cycle.placed[member.uid] = placement.node
                scheduled += 1
                # AssumeAndReserveInSnapshot: the next members see this one placed.
                snapshot.upsert_pod(dataclasses.replace(member, node_name=placement.node))
                assumed.append(member)
            if group.gang and remaining + scheduled < group.min_count:
                cycle.message = min_count_unsatisfiable(group.min_count, scheduled, remaining)
                break
    finally:
        for member in reversed(assumed):  # the revert functions, last in first out
            snapshot.upsert_pod(member)
    return cycle

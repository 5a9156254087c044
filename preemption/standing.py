"""Where the preemptor stands, and the one rule that stops a preemption because of it.

Upstream's preemption stops short when its preemptor no longer needs the room: the
scheduler's `prepareCandidateAsync` gives up when the pod was deleted or bound meanwhile.
Here the question is asked at three moments (before deciding, before each victim's
delete, while waiting for the bind), of the API server or of the cluster view, and
`reason_to_stop` is the one answer all three use, so the reasons the ledger records are
the same words wherever the preemption stopped.

A group preemption asks the same question of its pod group (`GroupStanding`,
`reason_to_stop_group`): the group gone or replaced stops it wherever it is; before the
decision, a group with no pending member needs no room; after it, members bound to other
nodes than the ones the decision placed them on mean the placement the victims were chosen
for is not the one the scheduler made (upstream's gang placement is all-or-nothing, so the
victims' room would be freed for nothing).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from preemptctl.preemption.objects import Pod


class Standing(StrEnum):
    """Where the preemptor stands (the values are what workflow histories hold)."""

    PENDING = "Pending"
    BOUND = "Bound"  # on a node: `PreemptorStanding.node`
    GONE = "Gone"  # no pod by that name
    REPLACED = "Replaced"  # a pod of that name with another UID


@dataclass
class PreemptorStanding:
    """Where the preemptor stands now, and on which node when bound."""

    state: Standing
    node: str | None = None


def standing_of(pod: Pod) -> PreemptorStanding:
    """Where a pod the cluster view shows stands: bound to its node, or pending (the view
    keys pods by UID, so a pod it shows is that pod, never a replacement)."""
    if pod.node_name:
        return PreemptorStanding(Standing.BOUND, pod.node_name)
    return PreemptorStanding(Standing.PENDING)


def reason_to_stop(standing: PreemptorStanding, needs_room_on: str | None = None) -> str:
    """Why the preemption must stop because its preemptor no longer needs room on
    `needs_room_on` (None: before the decision, on any node); "" when it still does.

    Gone or replaced stops it wherever it is. Bound stops it before the decision (it
    needs no room any more), and after it when bound to another node than the one the
    victims are on (their room would be freed for nothing). A critical-admission
    preemptor is bound by nature: it needs room on its own node, which its caller names."""
    if standing.state is Standing.GONE:
        return "the preemptor is gone"
    if standing.state is Standing.REPLACED:
        return "the preemptor was replaced by a pod with another UID"
    if standing.state is Standing.BOUND and standing.node != needs_room_on:
        if needs_room_on is None:
            return f"the preemptor is already bound to {standing.node}"
        return f"the preemptor was bound to {standing.node}, not {needs_room_on}"
    return ""


@dataclass
class GroupStanding:
    """Where a pod group stands: `Gone`, `Replaced` (a group of that name with another UID),
    else `Pending` (some member not bound yet) or `Bound` (every member bound); which members
    are bound and where (`bound`: "namespace/name" -> node), and how many are pending."""

    state: Standing
    bound: dict[str, str] = field(default_factory=dict)
    pending: int = 0


def group_standing_of(exists: Standing, members: Iterable[Pod]) -> GroupStanding:
    """Where a group stands from its object's presence (`Pending` when it exists, `Gone`,
    `Replaced`) and its non-terminal members as the cluster view shows them."""
    if exists in (Standing.GONE, Standing.REPLACED):
        return GroupStanding(exists)
    bound: dict[str, str] = {}
    pending = 0
    for pod in members:
        if pod.terminating or pod.is_terminal():
            continue
        if pod.node_name:
            bound[pod.key] = pod.node_name
        else:
            pending += 1
    state = Standing.PENDING if pending or not bound else Standing.BOUND
    return GroupStanding(state, dict(sorted(bound.items())), pending)


def reason_to_stop_group(
    standing: GroupStanding, group: str, nominations: Mapping[str, str] | None = None
) -> str:
    """Why the preemption for the pod group `group` ("namespace/name") must stop; "" when
    the group still needs the room.

    Gone or replaced stops it wherever it is. Before the decision (`nominations` None), a
    group with no pending member needs no room. After it, a member bound to another node
    than the one the decision placed it on (`nominations`: "namespace/name" -> node) stops
    it: the scheduler placed the group otherwise. Members bound where they were placed, or
    not placed by the decision, go on."""
    if standing.state is Standing.GONE:
        return f"the pod group {group} is gone"
    if standing.state is Standing.REPLACED:
        return f"the pod group {group} was replaced by one with another UID"
    if nominations is None:
        if not standing.pending:
            bound = len(standing.bound)
            return f"no member of the pod group {group} is pending ({bound} bound)"
        return ""
    elsewhere = [
        f"{pod} to {node}, not {nominations[pod]}"
        for pod, node in sorted(standing.bound.items())
        if pod in nominations and nominations[pod] != node
    ]
    if elsewhere:
        return f"members of the pod group {group} were bound elsewhere: " + "; ".join(elsewhere)
    return ""

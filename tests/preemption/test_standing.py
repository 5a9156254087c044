"""Where the preemptor stands, and the one rule that stops a preemption because of it.

Scenarios:
- gone or replaced stops a preemption whatever the moment, with the same words;
- before the decision (no node yet), a preemptor bound anywhere stops it;
- after it, bound to the victims' node goes on, bound to another node stops it and names
  both nodes;
- a pending preemptor never stops it;
- a pod the view shows stands bound to its node, or pending.

A pod group (`reason_to_stop_group`):
- gone or replaced stops its preemption whatever the moment, naming the group;
- before the decision, a group with no pending member stops it, saying how many are bound;
  one pending member is enough to go on;
- after it, a member bound to another node than its nomination stops it, naming the member
  and both nodes; members bound to their nominations, or not placed by the decision, go on;
- a group's standing from its members as the view shows them: bound members by node,
  pending ones counted, terminating and finished ones left out.
"""

from __future__ import annotations

import pytest

from preemptctl.preemption.objects import Pod, Resources
from preemptctl.preemption.standing import (
    GroupStanding,
    PreemptorStanding,
    Standing,
    group_standing_of,
    reason_to_stop,
    reason_to_stop_group,
    standing_of,
)

GONE = PreemptorStanding(Standing.GONE)
REPLACED = PreemptorStanding(Standing.REPLACED)
PENDING = PreemptorStanding(Standing.PENDING)
BOUND = PreemptorStanding(Standing.BOUND, "node-1")


@pytest.mark.parametrize("needs_room_on", [None, "node-1"])
def test_gone_or_replaced_stops_it_whatever_the_moment(needs_room_on: str | None) -> None:
    assert reason_to_stop(GONE, needs_room_on) == "the preemptor is gone"
    assert reason_to_stop(REPLACED, needs_room_on) == (
        "the preemptor was replaced by a pod with another UID"
    )


def test_bound_before_the_decision_stops_it() -> None:
    assert reason_to_stop(BOUND) == "the preemptor is already bound to node-1"


def test_bound_after_the_decision_stops_it_only_elsewhere() -> None:
    assert reason_to_stop(BOUND, "node-1") == ""
    assert reason_to_stop(BOUND, "node-9") == "the preemptor was bound to node-1, not node-9"


@pytest.mark.parametrize("needs_room_on", [None, "node-1"])
def test_pending_never_stops_it(needs_room_on: str | None) -> None:
    assert reason_to_stop(PENDING, needs_room_on) == ""


def test_a_pod_the_view_shows_stands_bound_or_pending() -> None:
    pending = Pod("default", "web", "u1", 1000, Resources())
    assert standing_of(pending) == PENDING
    bound = Pod("default", "web", "u1", 1000, Resources(), node_name="node-1")
    assert standing_of(bound) == BOUND


# -- pod groups ---------------------------------------------------------------------------------

TRAIN = "ml/train-a"


def member(name: str, node: str = "", *, terminating: bool = False, phase: str = "") -> Pod:
    return Pod(
        "ml",
        name,
        f"uid-{name}",
        1000,
        Resources(),
        node_name=node,
        terminating=terminating,
        phase=phase or ("Running" if node else "Pending"),
    )


@pytest.mark.parametrize("nominations", [None, {"ml/w-0": "node-1"}])
def test_a_group_gone_or_replaced_stops_it_whatever_the_moment(
    nominations: dict[str, str] | None,
) -> None:
    gone = reason_to_stop_group(GroupStanding(Standing.GONE), TRAIN, nominations)
    replaced = reason_to_stop_group(GroupStanding(Standing.REPLACED), TRAIN, nominations)
    assert gone == "the pod group ml/train-a is gone"
    assert replaced == "the pod group ml/train-a was replaced by one with another UID"


def test_before_the_decision_a_group_with_no_pending_member_stops_it() -> None:
    bound = group_standing_of(Standing.PENDING, [member("w-0", "node-1"), member("w-1", "node-2")])
    assert reason_to_stop_group(bound, TRAIN) == (
        "no member of the pod group ml/train-a is pending (2 bound)"
    )
    one_pending = group_standing_of(Standing.PENDING, [member("w-0", "node-1"), member("w-1")])
    assert reason_to_stop_group(one_pending, TRAIN) == ""


def test_after_the_decision_a_member_bound_elsewhere_stops_it() -> None:
    standing = group_standing_of(
        Standing.PENDING, [member("w-0", "node-1"), member("w-1", "node-3"), member("w-2")]
    )
    nominations = {"ml/w-0": "node-1", "ml/w-1": "node-2", "ml/w-2": "node-2"}
    assert reason_to_stop_group(standing, TRAIN, nominations) == (
        "members of the pod group ml/train-a were bound elsewhere: ml/w-1 to node-3, not node-2"
    )


def test_after_the_decision_members_bound_where_placed_or_not_placed_go_on() -> None:
    standing = group_standing_of(
        Standing.PENDING, [member("w-0", "node-1"), member("w-9", "node-7"), member("w-2")]
    )
    assert reason_to_stop_group(standing, TRAIN, {"ml/w-0": "node-1", "ml/w-2": "node-2"}) == ""


def test_a_groups_standing_counts_its_members_as_the_view_shows_them() -> None:
    standing = group_standing_of(
        Standing.PENDING,
        [
            member("w-1", "node-2"),
            member("w-0", "node-1"),
            member("w-2"),
            member("w-3", terminating=True),
            member("w-4", "node-1", phase="Succeeded"),
        ],
    )
    assert standing == GroupStanding(
        Standing.PENDING, {"ml/w-0": "node-1", "ml/w-1": "node-2"}, pending=1
    )
    everyone_bound = group_standing_of(Standing.PENDING, [member("w-0", "node-1")])
    assert everyone_bound.state is Standing.BOUND

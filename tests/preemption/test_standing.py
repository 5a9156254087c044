"""Where the preemptor stands, and the one rule that stops a preemption because of it.

Scenarios:
- gone or replaced stops a preemption whatever the moment, with the same words;
- before the decision (no node yet), a preemptor bound anywhere stops it;
- after it, bound to the victims' node goes on, bound to another node stops it and names
  both nodes;
- a pending preemptor never stops it;
- a pod the view shows stands bound to its node, or pending.
"""

from __future__ import annotations

import pytest

from preemptctl.preemption.objects import Pod, Resources
from preemptctl.preemption.standing import (
    PreemptorStanding,
    Standing,
    reason_to_stop,
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

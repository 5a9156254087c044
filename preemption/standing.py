"""Where the preemptor stands, and the one rule that stops a preemption because of it.

Upstream's preemption stops short when its preemptor no longer needs the room: the
scheduler's `prepareCandidateAsync` gives up when the pod was deleted or bound meanwhile.
Here the question is asked at three moments (before deciding, before each victim's
delete, while waiting for the bind), of the API server or of the cluster view, and
`reason_to_stop` is the one answer all three use, so the reasons the ledger records are
the same words wherever the preemption stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
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

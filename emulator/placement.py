"""Where the simulated scheduler puts one pod: the scheduling cycle's filter, then one fixed
choice of node, or upstream's FitError when none fits.

Fit is the planner's own (`filter_nodes` over a `ClusterSnapshot`), so every filter the
planner models judges it; the choice among fitting nodes is a fixed rule rather than
upstream's scores, so that a simulated run is the same every time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from preemptctl.preemption.filters import Status
from preemptctl.preemption.find_nodes_that_fit import filter_nodes, scheduling_fit_error
from preemptctl.preemption.objects import Pod
from preemptctl.preemption.snapshot import ClusterSnapshot


@dataclass(frozen=True, slots=True)
class Placement:
    """One pod's scheduling cycle: the node it goes to, or why it fits nowhere."""

    node: str | None
    fit_error: str  # "" when it fits


def place(snapshot: ClusterSnapshot, pod: Pod) -> Placement:
    """`schedulePod` for one pod on the snapshot as it stands (nominated pods of at least
    its priority counting as placed, terminating pods still on their nodes)."""
    statuses = filter_nodes(snapshot, pod)
    node = choose_node(pod, statuses)
    if node is not None:
        return Placement(node, "")
    return Placement(None, fit_error(len(statuses), statuses))


def choose_node(pod: Pod, statuses: Mapping[str, Status]) -> str | None:
    """The node to bind to: the nominated node when it fits (upstream evaluates it first),
    otherwise the first fitting node by name (upstream would score them; one fixed rule keeps
    the simulation reproducible)."""
    nominated = statuses.get(pod.nominated_node_name)
    if nominated is not None and nominated.ok:
        return pod.nominated_node_name
    return next((name for name in sorted(statuses) if statuses[name].ok), None)


def room_being_made(snapshot: ClusterSnapshot, pod: Pod, placement: Placement) -> str:
    """The node `pod` is nominated to, when it was not placed there while pods of lower
    priority are still leaving that node (a preemption's victims in their grace period);
    "" otherwise. A gang's member waits for that room (`group_cycle`) rather than taking
    room that another of its preemption's victims freed first elsewhere."""
    node = pod.nominated_node_name
    if not node or placement.node == node:
        return ""
    info = snapshot.node_infos.get(node)
    if info is None:
        return ""
    leaving = any(p.terminating and p.priority < pod.priority for p in info.pods.values())
    return node if leaving else ""


def fit_error(num_nodes: int, statuses: Mapping[str, Status]) -> str:
    """`FitError.Error()` without a PostFilter message (the scheduler does not preempt here),
    worded by the planner's own `scheduling_fit_error`."""
    return scheduling_fit_error(num_nodes, statuses)

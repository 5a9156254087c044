"""A decision told in words (`DecisionStory`), from what the decision path decided: for the
people who read a preemption in the Temporal UI rather than in `preemptctl explain`.

Translation only: the words are the planner's (its message names the criterion that chose
the node, or why nothing could be chosen), arranged to be read at a glance: what is done
for whom, to which pods (each with its UID), why, and the command that tells the rest.
"""

from __future__ import annotations

from preemptctl.activities.contracts import DecisionStory, Nomination
from preemptctl.activities.group_contracts import VictimPlacement
from preemptctl.preemption.decision import Decision, PodRef, Verdict
from preemptctl.preemption.group_decision import GroupDecision, GroupRef


def explain_command(key: str) -> str:
    return f"preemptctl explain {key}"


def _victim(pod: PodRef, *more: str) -> str:
    said = ", ".join((f"uid {pod.uid}", f"priority {pod.priority}", *more))
    return f"{pod.key} ({said})"


def pod_story(decision: Decision, *, dry_run: bool) -> DecisionStory:
    """A pod preemption's decision in words."""
    preemptor = decision.preemptor
    who = f"{preemptor.key} (priority {preemptor.priority})"
    if decision.verdict is Verdict.PREEMPT:
        verb = "Would preempt" if dry_run else "Preempt"
        headline = f"{verb} {len(decision.victims)} pod(s) on {decision.nominated_node} for {who}"
        if dry_run:
            headline += ", a dry run: nothing touched"
    else:
        headline = f"{decision.verdict} for {who}"
    return DecisionStory(
        headline,
        [_victim(v) for v in decision.victims],
        decision.message,
        explain_command(preemptor.key),
    )


def group_story(
    group: GroupRef,
    decision: GroupDecision,
    placements: list[Nomination],
    victims: list[VictimPlacement],
    min_count: int,
    *,
    dry_run: bool,
) -> DecisionStory:
    """A group preemption's decision in words: where its members go, each victim with its
    node and unit, and why each unit was taken."""
    who = f"pod group {group.key} (priority {group.priority}, minCount {min_count})"
    if decision.verdict is Verdict.PREEMPT:
        nodes = ", ".join(sorted({placed.node for placed in placements}))
        verb = "Would preempt" if dry_run else "Preempt"
        headline = (
            f"{verb} {len(victims)} pod(s) in {len(decision.units)} unit(s) for {who}: "
            f"{len(placements)} member(s) placed on {nodes}"
        )
        if dry_run:
            headline += ", a dry run: nothing touched"
    else:
        headline = f"{decision.verdict} for {who}"
    why = "; ".join(f"{unit.unit} taken: {unit.reason}" for unit in decision.units)
    return DecisionStory(
        headline,
        [_victim(v.pod, f"on {v.node or 'no node'}", v.unit) for v in victims],
        f"{decision.message}" + (f"; {why}" if why else ""),
        explain_command(group.key),
    )

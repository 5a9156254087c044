"""The selection of a run that decided before, read back from the ledger.

A run decides once. Its select is asked again only when the worker running it was lost
after the decision was written ahead and before the workflow recorded the answer (every step
of the one runbook is a local activity of one workflow task: a worker killed mid-way leaves
the next one to run them all again). The decision path then answers `Resumed`, and the run
goes on from the decision on record, never from a new one: the same node, the same victims
(each on the node recorded with it), the same members placed, the same end if it ended at
its decision. Its victims' steps find those already deleted terminating or gone, and send
nothing twice (`activities.victim_steps`). A run whose worker was lost after the run had
recorded its end (completed, failed, aborted) but before the workflow closed is told how it
ended (`ended_as`): it ends so again without a step, and without a second end in the ledger.

Translation only, from the ledger's per-attempt view (`ledger.views.AttemptView`).
"""

from __future__ import annotations

from collections.abc import Callable

from preemptctl.activities.contracts import DecisionStory, Nomination, Selection
from preemptctl.activities.group_contracts import GroupSelection, VictimPlacement
from preemptctl.activities.story import explain_command
from preemptctl.ledger.views import AttemptView
from preemptctl.ledger.vocabulary import WORKFLOW_OUTCOMES, Outcome
from preemptctl.preemption.decision import PodRef, Verdict
from preemptctl.preemption.group_decision import GroupRef
from preemptctl.preemption.objects import Pod

DEFAULT_SCHEDULER = "default-scheduler"


def resumed_selection(
    preemptor: PodRef, attempt: AttemptView | None, pod_by_key: Callable[[str], Pod | None]
) -> Selection:
    """A pod's run, resumed from its decision on record (`pod_by_key`: the view, for the
    UIDs of the lower nominations to clear, recorded by name)."""
    if attempt is None or attempt.decision is None:
        return Selection(preemptor, "the decision on record could not be read back")
    decision = attempt.decision
    clear = [
        PodRef.of(pod)
        for key in decision.get("nominatedPodsToClear") or []
        if (pod := pod_by_key(str(key))) is not None
    ]
    victims = [victim.victim for victim in attempt.victims]
    message = str(decision.get("message") or "")
    return Selection(
        preemptor=attempt.preemptor,
        message=message,
        verdict=Verdict(str(decision.get("status"))),
        node=attempt.node,
        victims=victims,
        nominations_to_clear=clear,
        num_pdb_violations=int(decision.get("numPDBViolations") or 0),
        scheduler_name=_scheduler_of(decision),
        dry_run=attempt.outcome is Outcome.DRY_RUN,
        story=_story(attempt.preemptor.key, message, victims),
        victim_nodes={v.victim.uid: v.node for v in attempt.victims if v.node},
        ended_as=ended_as(attempt),
    )


def resumed_group_selection(group: GroupRef, attempt: AttemptView | None) -> GroupSelection:
    """A group's run, resumed from its decision on record: each member on the node it was
    placed on, each victim on its node with its unit."""
    if attempt is None or attempt.decision is None:
        return GroupSelection(group, "the decision on record could not be read back")
    decision = attempt.decision
    namespace = group.namespace
    placements = [
        Nomination(PodRef(namespace, member.pod.partition("/")[2], member.uid), member.node)
        for member in attempt.members
    ]
    victims = [
        VictimPlacement(victim.victim, victim.node or "", victim.unit or "")
        for victim in attempt.victims
    ]
    groups = sorted(
        {
            victim.unit.partition(" ")[2]
            for victim in attempt.victims
            if victim.unit and victim.unit.startswith("podGroup ")
        }
    )
    summary = (decision.get("rationale") or {}).get("group") or {}
    message = str(decision.get("message") or "")
    return GroupSelection(
        group,
        message,
        verdict=Verdict(str(decision.get("status"))),
        placements=placements,
        victims=victims,
        victim_groups=groups,
        min_count=int(summary.get("minCount") or 1),
        num_pdb_violations=int(decision.get("numPDBViolations") or 0),
        scheduler_name=_scheduler_of(decision),
        dry_run=attempt.outcome is Outcome.DRY_RUN,
        story=_story(group.key, message, [v.victim for v in attempt.victims]),
        ended_as=ended_as(attempt),
    )


def ended_as(attempt: AttemptView) -> Outcome | None:
    """The end the run's workflow recorded itself (completed, failed, aborted), when it did:
    its worker was lost between that end step and the workflow's close. None for a run
    still open, and for an end the decision wrote ahead (the selection says it again)."""
    outcome = attempt.outcome
    return outcome if outcome in WORKFLOW_OUTCOMES else None


def already_ended(outcome: Outcome) -> str:
    """What a resumed run that had ended says: nothing is done again."""
    return (
        f"this run had already ended {outcome.value} (recorded in the ledger): nothing done again"
    )


def _scheduler_of(decision: dict[str, object]) -> str:
    context = decision.get("context")
    if isinstance(context, dict) and context.get("schedulerName"):
        return str(context["schedulerName"])
    return DEFAULT_SCHEDULER


def _story(key: str, message: str, victims: list[PodRef]) -> DecisionStory:
    return DecisionStory(
        f"Resumed from the decision on record for {key}",
        [f"{victim.key} (uid {victim.uid})" for victim in victims],
        message,
        explain_command(key),
    )

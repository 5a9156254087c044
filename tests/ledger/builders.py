"""Ledger events as the workflow will write them, built from the planner's own types.

The decision payloads come from `preemption.decision.Decision.to_json()`, so a change to
the planner's JSON shows up here rather than drifting from a hand-written copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from preemptctl.ledger.events import (
    LedgerEvent,
    RecordedEvent,
    decision_events,
    group_decision_events,
)
from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.payloads import Retried, Terminal, VictimStep, Write
from preemptctl.preemption.decision import (
    Decision,
    NodeEvaluation,
    PodRef,
    Rationale,
    SelectionStep,
    Strategy,
    Verdict,
)
from preemptctl.preemption.group_decision import GroupDecision, GroupRef, UnitChoice

T0 = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
API = PodRef("prod", "api-0", "uid-api-0", 1000)
BATCH_7 = PodRef("default", "batch-7", "uid-batch-7", 100)
BATCH_8 = PodRef("default", "batch-8", "uid-batch-8", 50)


def four_candidate(
    preemptor: PodRef = API,
    victims: Sequence[PodRef] = (BATCH_7, BATCH_8),
    node: str = "node-3",
) -> Decision:
    """A Preempt decision where `node` wins by minHighestPriority among four candidates."""
    others = [n for n in ("node-1", "node-2", "node-3", "node-4") if n != node]
    rationale = Rationale(
        strategy=Strategy.DEFAULT,
        nodes_total=6,
        potential_nodes=5,
        candidates_wanted=5,
        evaluated=[
            NodeEvaluation(node, True, victims=tuple(v.key for v in victims)),
            *(NodeEvaluation(n, True, victims=(f"default/w-{n}",)) for n in others),
            NodeEvaluation("node-5", False, reasons=("Insufficient memory",)),
        ],
        selection=[
            SelectionStep("minNumPDBViolations", tuple(sorted((node, *others)))),
            SelectionStep("minHighestPriority", (node,)),
        ],
        deciding_criterion="minHighestPriority",
    )
    return Decision(
        preemptor=preemptor,
        verdict=Verdict.PREEMPT,
        message=f"preempt {len(victims)} pod(s) on {node} (0 PDB violation(s)); "
        "chosen by minHighestPriority among 4 candidate node(s)",
        rationale=rationale,
        nominated_node=node,
        victims=tuple(victims),
    )


def four_candidate_decision(
    preemptor: PodRef = API,
    victims: Sequence[PodRef] = (BATCH_7, BATCH_8),
    node: str = "node-3",
) -> dict[str, Any]:
    """`four_candidate`'s JSON, as the ledger keeps it."""
    return four_candidate(preemptor, victims, node).to_json()


def unschedulable(preemptor: PodRef = API) -> Decision:
    return Decision(
        preemptor=preemptor,
        verdict=Verdict.UNSCHEDULABLE,
        message="0/6 nodes are available: 6 Insufficient cpu.",
        rationale=Rationale(strategy=Strategy.DEFAULT, nodes_total=6),
    )


def event(
    preemption_id: str,
    kind: EventKind,
    at: datetime,
    *,
    preemptor: PodRef = API,
    node: str | None = "node-3",
    victim: PodRef | None = None,
    payload: dict[str, Any] | None = None,
    run_id: str = "run-1",
    step: str | int = "",
) -> LedgerEvent:
    return LedgerEvent(
        preemption_id=preemption_id,
        run_id=run_id,
        kind=kind,
        preemptor=preemptor,
        node=node,
        victim=victim,
        payload=payload or {},
        occurred_at=at,
        step=step,
    )


def completed_preemption(
    preemption_id: str = "preempt-uid-api-0",
    *,
    preemptor: PodRef = API,
    victims: Sequence[PodRef] = (BATCH_7, BATCH_8),
    node: str = "node-3",
    start: datetime = T0,
    outcome: EventKind = EventKind.COMPLETED,
    run_id: str = "run-1",
) -> list[LedgerEvent]:
    """Decision, nomination, each victim marked and deleted, scheduled, then `outcome`."""
    at = start
    story = decision_events(
        preemption_id, run_id, preemptor, four_candidate(preemptor, victims, node), at
    )
    story.append(
        event(preemption_id, EventKind.NOMINATED, at, preemptor=preemptor, node=node, run_id=run_id)
    )
    for victim in victims:
        at += timedelta(seconds=1)
        story.append(
            event(
                preemption_id,
                EventKind.VICTIM_MARKED,
                at,
                preemptor=preemptor,
                node=node,
                victim=victim,
                run_id=run_id,
            )
        )
        at += timedelta(seconds=1)
        story.append(
            event(
                preemption_id,
                EventKind.VICTIM_DELETED,
                at,
                preemptor=preemptor,
                node=node,
                victim=victim,
                run_id=run_id,
            )
        )
    at += timedelta(seconds=4)
    story.append(
        event(
            preemption_id,
            EventKind.PREEMPTOR_SCHEDULED,
            at,
            preemptor=preemptor,
            node=node,
            payload={"secondsSinceDecision": (at - start).total_seconds()},
            run_id=run_id,
        )
    )
    payload = {"error": "victim delete kept failing"} if outcome is EventKind.FAILED else {}
    story.append(
        event(
            preemption_id,
            outcome,
            at,
            preemptor=preemptor,
            node=node,
            payload=payload,
            run_id=run_id,
        )
    )
    return story


def one_runbook_completed(
    preemption_id: str,
    *,
    preemptor: PodRef = API,
    victims: Sequence[PodRef] = (BATCH_7, BATCH_8),
    node: str = "node-3",
    start: datetime = T0,
    run_id: str = "run-1",
) -> list[LedgerEvent]:
    """A run of the one runbook that completed: its decision, then, with its end, the
    nomination and each victim deleted, the end saying nothing of the bind (which comes
    after, recorded by whoever sees it)."""
    story = decision_events(
        preemption_id, run_id, preemptor, four_candidate(preemptor, victims, node), start
    )
    at = start + timedelta(seconds=1)
    story.append(
        event(preemption_id, EventKind.NOMINATED, at, preemptor=preemptor, node=node, run_id=run_id)
    )
    for victim in victims:
        story.append(
            event(
                preemption_id,
                EventKind.VICTIM_DELETED,
                at,
                preemptor=preemptor,
                node=node,
                victim=victim,
                run_id=run_id,
            )
        )
    reason = f"{len(victims)} victim(s) preempted on {node} for {preemptor.key}"
    story.append(
        event(
            preemption_id,
            EventKind.COMPLETED,
            at,
            preemptor=preemptor,
            node=node,
            payload=Terminal(reason).to_json(),
            run_id=run_id,
        )
    )
    return story


def retried(
    preemption_id: str,
    at: datetime,
    *,
    new_run: str,
    previous_run: str,
    previous_outcome: str | None = "failed",
    by: str = "trigger",
    reason: str = "",
    preemptor: PodRef = API,
) -> LedgerEvent:
    """The `retried` event a new run appends before its decision (under its own run ID)."""
    payload = Retried(new_run, previous_run, previous_outcome, by, reason or None)
    return event(
        preemption_id,
        EventKind.RETRIED,
        at,
        preemptor=preemptor,
        node=None,
        payload=payload.to_json(),
        run_id=new_run,
    )


def failed_attempt(
    preemption_id: str = "preempt-uid-api-0",
    *,
    run_id: str = "run-1",
    preemptor: PodRef = API,
    victims: Sequence[PodRef] = (BATCH_7, BATCH_8),
    node: str = "node-3",
    start: datetime = T0,
    error: str = 'pods "batch-7" is forbidden: cannot delete (403 Forbidden)',
    retryable: bool | None = False,
) -> list[LedgerEvent]:
    """Decision; the first victim marked, its delete refused, then unmarked; the others
    spared; then `failed` with `error` and `retryable`, 2 s after `start`."""
    first, at = victims[0], start + timedelta(seconds=1)
    story = decision_events(
        preemption_id, run_id, preemptor, four_candidate(preemptor, victims, node), start
    )
    story += [
        event(
            preemption_id,
            EventKind.VICTIM_MARKED,
            at,
            victim=first,
            node=node,
            preemptor=preemptor,
            run_id=run_id,
        ),
        event(
            preemption_id,
            EventKind.VICTIM_FAILED,
            at,
            victim=first,
            node=node,
            preemptor=preemptor,
            payload=VictimStep(error=error).to_json(),
            run_id=run_id,
        ),
        event(
            preemption_id,
            EventKind.VICTIM_UNMARKED,
            at,
            victim=first,
            node=node,
            preemptor=preemptor,
            payload=VictimStep(message="DisruptionTarget removed").to_json(),
            run_id=run_id,
        ),
        event(
            preemption_id,
            EventKind.FAILED,
            start + timedelta(seconds=2),
            preemptor=preemptor,
            node=node,
            payload=Terminal(error=error, retryable=retryable).to_json(),
            run_id=run_id,
        ),
    ]
    return story


def recorded(story: Sequence[LedgerEvent]) -> list[RecordedEvent]:
    """Events as the ledger would hand them back, ids in append order (no database)."""
    return [
        RecordedEvent(
            id=index,
            preemption_id=e.preemption_id,
            run_id=e.run_id,
            kind=e.kind,
            occurred_at=e.occurred_at,
            preemptor=e.preemptor,
            node=e.node,
            victim=e.victim,
            payload=e.payload,
            idempotency_key=e.key,
        )
        for index, e in enumerate(story, start=1)
    ]


# -- a group preemption ----------------------------------------------------------------------

TRAIN_A = GroupRef("ml", "train-a", "uid-train-a", 1000)
TRAIN_A_MEMBERS = tuple(PodRef("ml", f"train-a-{i}", f"uid-train-a-{i}", 1000) for i in range(4))
TRAIN_A_PLACED = tuple(
    (member, node)
    for member, node in zip(TRAIN_A_MEMBERS, ("node-1", "node-1", "node-2", "node-2"), strict=True)
)
TRAIN_B = tuple(PodRef("ml", f"train-b-{i}", f"uid-train-b-{i}", 500) for i in range(3))
TRAIN_B_NODES = ("node-1", "node-2", "node-3")
BATCH_1 = PodRef("default", "batch-1", "uid-batch-1", 100)
GROUP_VICTIM_NODES = {
    **{victim.uid: node for victim, node in zip(TRAIN_B, TRAIN_B_NODES, strict=True)},
    BATCH_1.uid: "node-2",
}


def train_a_decision() -> GroupDecision:
    """ml/train-a (a gang of 4, minCount 4, priority 1000) placed on node-1 and node-2 by
    preempting ml/train-b whole (3 pods on node-1, node-2 and node-3, disruptionMode all)
    and default/batch-1 (on node-2)."""
    units = (
        UnitChoice(
            "podGroup ml/train-b",
            True,
            500,
            TRAIN_B,
            TRAIN_B_NODES,
            0,
            "ml/train-a-0 would not fit on node-1 beside it (Insufficient cpu)",
        ),
        UnitChoice(
            "pod default/batch-1",
            False,
            100,
            (BATCH_1,),
            ("node-2",),
            0,
            "ml/train-a-2 would not fit on node-2 beside it (Insufficient cpu)",
        ),
    )
    return GroupDecision(
        pod_group=TRAIN_A.key,
        uid=TRAIN_A.uid,
        verdict=Verdict.PREEMPT,
        message="preempt 4 pod(s) in 2 unit(s) on 3 node(s) to place 4 of 4 pending pod(s) "
        "(minCount 4; 0 PDB violation(s))",
        nominations={member.key: node for member, node in TRAIN_A_PLACED},
        victims=(*TRAIN_B, BATCH_1),
        units=units,
        rationale={
            "strategy": "pod-group",
            "plannerVersion": "1",
            "nodesTotal": 5,
            "group": {
                "kind": "PodGroup",
                "schedulingPolicy": "gang",
                "minCount": 4,
                "priority": 1000,
                "pending": 4,
                "bound": 0,
            },
            "potentialVictimPods": 9,
            "placement": {member.key: node for member, node in TRAIN_A_PLACED},
            "unitsConsidered": 3,
            "unitsReprieved": 1,
        },
    )


def group_preemption(
    preemption_id: str = "group-preemption-ml-train-a-uid-train-a",
    *,
    run_id: str = "run-1",
    start: datetime = T0,
    end: EventKind | None = EventKind.COMPLETED,
) -> list[LedgerEvent]:
    """ml/train-a's group preemption: the write-ahead, each member nominated, each victim
    marked and deleted, then (unless `end` is None) its end 10 s after `start`."""
    group = TRAIN_A.as_preemptor()
    story = group_decision_events(
        preemption_id,
        run_id,
        TRAIN_A,
        train_a_decision(),
        start,
        placed=TRAIN_A_PLACED,
        victim_nodes=GROUP_VICTIM_NODES,
        context={"worker": "w", "sequence": 1, "claims": []},
    )
    at = start + timedelta(seconds=1)
    for member, node in TRAIN_A_PLACED:
        story.append(
            event(
                preemption_id,
                EventKind.MEMBER_NOMINATED,
                at,
                preemptor=group,
                node=node,
                payload=Write("Done", "nominated", pod=member.key, uid=member.uid).to_json(),
                run_id=run_id,
                step=member.uid,
            )
        )
    for victim in (*TRAIN_B, BATCH_1):
        node = GROUP_VICTIM_NODES[victim.uid]
        for kind in (EventKind.VICTIM_MARKED, EventKind.VICTIM_DELETED):
            at += timedelta(seconds=1)
            story.append(
                event(
                    preemption_id,
                    kind,
                    at,
                    preemptor=group,
                    node=node,
                    victim=victim,
                    run_id=run_id,
                )
            )
    if end is not None:
        story.append(
            event(
                preemption_id,
                end,
                start + timedelta(seconds=10),
                preemptor=group,
                node=None,
                payload=Terminal(reason="4 of 4 member(s) bound (minCount 4)").to_json(),
                run_id=run_id,
            )
        )
    return story

"""The value an activity appends: `LedgerEvent`, and the key that makes appends idempotent.

Activities build these without touching ORM classes, so the table can change shape (via a
migration) without the workflow's code changing. Pods are the planner's `PodRef`, one name
for one thing from the decision to the ledger.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.payloads import MemberPlaced, Terminal, VictimChosen
from preemptctl.ledger.vocabulary import KIND_OF_OUTCOME, KIND_OF_VERDICT, outcome_of_decision
from preemptctl.preemption.decision import Decision, PodRef, Verdict
from preemptctl.preemption.group_decision import GroupDecision, GroupRef


def idempotency_key(
    preemption_id: str,
    run_id: str,
    kind: EventKind,
    victim_uid: str | None = None,
    step: str | int = "",
) -> str:
    """The key for one event of one run: an activity retried after a crash computes it again.

    `step` tells apart events of the same kind, run and victim that are genuinely distinct
    (for example each cleared nomination, keyed by that pod's UID). It must come from the
    workflow's state, never from the clock, or a retry would not find its first attempt.
    """
    return f"{preemption_id}/{run_id}/{kind.value}/{victim_uid or ''}/{step}"


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class LedgerEvent:
    """One event to append; `idempotency_key` defaults to `idempotency_key(...)` of its fields.

    `occurred_at` should be when the thing happened (for a workflow, `workflow.now()`), not
    when the append ran: a retry an hour later must not move the event in time, and it does
    not, because the first attempt's row is the one that stays.
    """

    preemption_id: str
    run_id: str
    kind: EventKind
    preemptor: PodRef
    node: str | None = None
    victim: PodRef | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    occurred_at: datetime = field(default_factory=utc_now)
    step: str | int = ""
    key: str = ""

    def __post_init__(self) -> None:
        if self.occurred_at.tzinfo is None:
            raise ValueError("occurred_at must be timezone-aware")
        if not self.preemption_id or not self.run_id:
            raise ValueError("an event needs its preemption_id and run_id")
        if not self.key:
            key = idempotency_key(
                self.preemption_id,
                self.run_id,
                self.kind,
                self.victim.uid if self.victim else None,
                self.step,
            )
            object.__setattr__(self, "key", key)

    def to_row(self) -> dict[str, Any]:
        """The column values of `preemption_events`, as the writer inserts them."""
        victim = self.victim
        return {
            "preemption_id": self.preemption_id,
            "run_id": self.run_id,
            "kind": self.kind.value,
            "occurred_at": self.occurred_at,
            "preemptor_namespace": self.preemptor.namespace,
            "preemptor_name": self.preemptor.name,
            "preemptor_uid": self.preemptor.uid,
            "preemptor_priority": self.preemptor.priority,
            "node": self.node,
            "victim_namespace": victim.namespace if victim else None,
            "victim_name": victim.name if victim else None,
            "victim_uid": victim.uid if victim else None,
            "victim_priority": victim.priority if victim else None,
            "payload": self.payload,
            "idempotency_key": self.key,
        }


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    """An event as read back: what was appended plus its ledger order (`id`)."""

    id: int
    preemption_id: str
    run_id: str
    kind: EventKind
    occurred_at: datetime
    preemptor: PodRef
    node: str | None
    victim: PodRef | None
    payload: dict[str, Any]
    idempotency_key: str


def decision_events(
    preemption_id: str,
    run_id: str,
    preemptor: PodRef,
    decision: Decision,
    occurred_at: datetime,
    *,
    context: dict[str, Any] | None = None,
    kind: EventKind | None = None,
    victim_nodes: Mapping[str, str] | None = None,
) -> list[LedgerEvent]:
    """The batch that records a decision: the decision itself (its JSON, with `context` when
    given), then one `victim_chosen` per victim, on its own node (`victim_nodes`, by UID:
    a gang taken whole has members on other nodes than the preemptor's; the nominated node
    where none is given).

    Append it with `append_batch` before touching the first victim: the decision and its
    victims land together or not at all, and every victim can be found by the victim index
    from then on, even in a dry run where nothing else is ever written about it.
    `kind` defaults to the one the decision's verdict calls for (`KIND_OF_VERDICT`).
    """
    node = decision.nominated_node
    payload = decision.to_json()
    if context is not None:
        payload["context"] = context
    recorded = [
        LedgerEvent(
            preemption_id=preemption_id,
            run_id=run_id,
            kind=kind or KIND_OF_VERDICT[decision.verdict],
            preemptor=preemptor,
            node=node,
            payload=payload,
            occurred_at=occurred_at,
        )
    ]
    for rank, victim in enumerate(decision.victims):
        recorded.append(
            LedgerEvent(
                preemption_id=preemption_id,
                run_id=run_id,
                kind=EventKind.VICTIM_CHOSEN,
                preemptor=preemptor,
                node=(victim_nodes or {}).get(victim.uid, node),
                victim=victim,
                payload=VictimChosen(rank).to_json(),
                occurred_at=occurred_at,
            )
        )
    return recorded


def end_of_decision(
    preemption_id: str,
    run_id: str,
    preemptor: PodRef,
    decision: Decision,
    occurred_at: datetime,
    *,
    dry_run: bool,
) -> LedgerEvent | None:
    """The run's end, when the decision ends it (`outcome_of_decision`) and its decision
    event does not say so itself (a refusal's does): `completed` for a preemptor that fits,
    `dry_run` for a dry run's preemption. Written ahead with the decision."""
    return _end(
        preemption_id,
        run_id,
        preemptor,
        decision.verdict,
        decision.message,
        decision.nominated_node,
        occurred_at,
        dry_run,
    )


def _end(
    preemption_id: str,
    run_id: str,
    preemptor: PodRef,
    verdict: Verdict,
    message: str,
    node: str | None,
    occurred_at: datetime,
    dry_run: bool,
) -> LedgerEvent | None:
    outcome = outcome_of_decision(verdict, dry_run)
    if outcome is None or KIND_OF_OUTCOME[outcome] is KIND_OF_VERDICT[verdict]:
        return None
    return LedgerEvent(
        preemption_id,
        run_id,
        KIND_OF_OUTCOME[outcome],
        preemptor,
        node=node,
        payload=Terminal(reason=message).to_json(),
        occurred_at=occurred_at,
    )


def group_decision_events(
    preemption_id: str,
    run_id: str,
    group: GroupRef,
    decision: GroupDecision,
    occurred_at: datetime,
    *,
    placed: Sequence[tuple[PodRef, str]] = (),
    victim_nodes: Mapping[str, str] | None = None,
    context: dict[str, Any] | None = None,
) -> list[LedgerEvent]:
    """The batch that records a group preemption's decision: the decision (its JSON, with
    `context`), one `member_placed` per member it placed (`placed`: the member and its
    node), then one `victim_chosen` per victim, on its node (`victim_nodes`, by UID) and
    naming its unit. The preemptor columns name the group (`GroupRef.as_preemptor`).

    Appended together before any victim is touched, as `decision_events`: from then on the
    group's claim (its victims and its members' room) holds, and every victim can be found
    by the victim index."""
    preemptor = group.as_preemptor()
    payload = decision.to_json()
    if context is not None:
        payload["context"] = context
    recorded = [
        LedgerEvent(
            preemption_id,
            run_id,
            KIND_OF_VERDICT[decision.verdict],
            preemptor,
            payload=payload,
            occurred_at=occurred_at,
        )
    ]
    for member, node in placed:
        recorded.append(
            LedgerEvent(
                preemption_id,
                run_id,
                EventKind.MEMBER_PLACED,
                preemptor,
                node=node,
                payload=MemberPlaced(member.key, member.uid).to_json(),
                occurred_at=occurred_at,
                step=member.uid,
            )
        )
    nodes = victim_nodes or {}
    for rank, victim in enumerate(decision.victims):
        unit = decision.unit_of(victim)
        recorded.append(
            LedgerEvent(
                preemption_id,
                run_id,
                EventKind.VICTIM_CHOSEN,
                preemptor,
                node=nodes.get(victim.uid),
                victim=victim,
                payload=VictimChosen(rank, unit.unit if unit else None).to_json(),
                occurred_at=occurred_at,
            )
        )
    return recorded


def end_of_group_decision(
    preemption_id: str,
    run_id: str,
    group: GroupRef,
    decision: GroupDecision,
    occurred_at: datetime,
    *,
    dry_run: bool,
) -> LedgerEvent | None:
    """The group preemption's end, when its decision ends it (as `end_of_decision`)."""
    return _end(
        preemption_id,
        run_id,
        group.as_preemptor(),
        decision.verdict,
        decision.message,
        None,
        occurred_at,
        dry_run,
    )

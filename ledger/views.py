"""The per-preemption and per-victim views, folded from events and never stored.

Pure functions over `RecordedEvent`s (no database here): the same fold serves `history`,
`explain` and tests, and a view can never disagree with the events it came from, because
it is nothing but those events read in ledger order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from preemptctl.ledger.events import RecordedEvent
from preemptctl.ledger.kinds import DECISION_KINDS, TERMINAL_KINDS, VICTIM_KINDS, EventKind
from preemptctl.ledger.payloads import Ended, Retried, Scheduled, VictimStep
from preemptctl.ledger.vocabulary import END_OF_KIND, FATE_OF_KIND, End, Fate, kinds_ending_in
from preemptctl.preemption.decision import PodRef

__all__ = ["End", "Fate", "Outcome", "PreemptionView", "Status", "VictimView", "kinds_ending_in"]

Outcome = End
"""The old name of `End`, kept while the CLI still imports it from here."""


class Status(StrEnum):
    """Where a preemption stands, read from its latest events."""

    DECIDING = "deciding"  # events, but no decision yet
    HELD = "held"  # throttled by a rate budget
    PREEMPTING = "preempting"  # victims chosen, not all settled
    WAITING = "waiting"  # victims settled, preemptor not scheduled yet
    SCHEDULED = "scheduled"  # preemptor scheduled, run not closed yet
    FINISHED = "finished"  # a terminal event, not followed by a retry


@dataclass(frozen=True, slots=True)
class VictimView:
    """One victim of one preemption: who it was and what became of it."""

    preemption_id: str
    victim: PodRef
    preemptor: PodRef
    node: str | None
    fate: Fate
    chosen_at: datetime | None
    settled_at: datetime | None
    error: str | None = None
    replaced_by_uid: str | None = None
    # Deleted by this preemption, though the API server's answer never reached it (a retry
    # found the victim gone after an earlier attempt had sent the DELETE).
    answer_lost: bool = False
    # The DisruptionTarget condition this preemption set was removed when the run stopped
    # short of deleting the victim (`victim_unmarked`).
    unmarked: bool = False

    def to_json(self) -> dict[str, Any]:
        """The victim as `history --json` prints it (camelCase, like the planner's JSON)."""
        shown = {
            **self.victim.to_json(),
            "fate": str(self.fate),
            "settledAt": _iso(self.settled_at),
            "error": self.error,
        }
        if self.replaced_by_uid:
            shown["replacedByUid"] = self.replaced_by_uid
        if self.answer_lost:
            shown["answerLost"] = True
        if self.unmarked:
            shown["unmarked"] = True
        return shown


@dataclass(frozen=True, slots=True)
class PreemptionView:
    """One preemption (one workflow ID, any number of runs), as its events tell it."""

    preemption_id: str
    run_id: str
    runs: tuple[str, ...]
    preemptor: PodRef
    node: str | None
    status: Status
    outcome: End | None
    started: datetime
    finished: datetime | None
    decided_at: datetime | None
    decision: dict[str, Any] | None
    victims: tuple[VictimView, ...]
    scheduled_at: datetime | None
    scheduled_node: str | None
    seconds_to_schedule: float | None
    error: str | None
    abort_reason: str | None
    events: tuple[RecordedEvent, ...]

    @property
    def victim_count(self) -> int:
        return len(self.victims)

    @property
    def duration_seconds(self) -> float | None:
        if self.finished is None:
            return None
        return (self.finished - self.started).total_seconds()

    def to_json(self) -> dict[str, Any]:
        """One line of `history --json`; the events and full decision stay in the ledger."""
        return {
            "preemptionId": self.preemption_id,
            "runId": self.run_id,
            "runs": list(self.runs),
            "preemptor": self.preemptor.to_json(),
            "node": self.node,
            "status": str(self.status),
            "outcome": None if self.outcome is None else str(self.outcome),
            "started": _iso(self.started),
            "finished": _iso(self.finished),
            "durationSeconds": self.duration_seconds,
            "victims": [victim.to_json() for victim in self.victims],
            "scheduledAt": _iso(self.scheduled_at),
            "secondsToSchedule": self.seconds_to_schedule,
            "error": self.error,
        }


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _victims_of(decision: dict[str, Any] | None) -> list[PodRef]:
    if not decision:
        return []
    return [
        PodRef(v["namespace"], v["name"], v["uid"], int(v["priority"]))
        for v in decision.get("victims", ())
    ]


def _fold_victims(
    ordered: Sequence[RecordedEvent],
    decision: dict[str, Any] | None,
    decided_at: datetime | None,
    node: str | None,
    finished: bool,
) -> tuple[VictimView, ...]:
    """The latest decision's victims in its order, then any other pod something was done to.

    A pod only chosen by an earlier run's decision, and left alone, is not a victim.
    """
    preemption_id, preemptor = ordered[0].preemption_id, ordered[-1].preemptor
    chosen: dict[str, PodRef] = {ref.uid: ref for ref in _victims_of(decision)}
    touched: dict[str, list[RecordedEvent]] = {}
    unmarked = {
        e.victim.uid
        for e in ordered
        if e.kind is EventKind.VICTIM_UNMARKED and e.victim is not None and "error" not in e.payload
    }
    for recorded in ordered:
        if recorded.kind in VICTIM_KINDS and recorded.victim is not None:
            touched.setdefault(recorded.victim.uid, []).append(recorded)
            if recorded.kind is not EventKind.VICTIM_CHOSEN:
                chosen.setdefault(recorded.victim.uid, recorded.victim)
    views = []
    for uid, ref in chosen.items():
        history = touched.get(uid, [])
        last = history[-1] if history else None
        fate = FATE_OF_KIND[last.kind] if last is not None else Fate.CHOSEN
        if fate in (Fate.CHOSEN, Fate.MARKED) and finished:
            fate = Fate.SPARED  # the run ended without deleting it
        settled = [e for e in history if FATE_OF_KIND[e.kind].settled]
        step = VictimStep.from_json(last.payload if last is not None else {})
        views.append(
            VictimView(
                preemption_id=preemption_id,
                victim=ref,
                preemptor=preemptor,
                node=(last.node if last is not None and last.node else node),
                fate=fate,
                chosen_at=decided_at,
                settled_at=settled[-1].occurred_at if settled else None,
                error=step.error,
                replaced_by_uid=step.replaced_by_uid if fate is Fate.REPLACED else None,
                answer_lost=step.answer_lost and fate is Fate.DELETED,
                unmarked=uid in unmarked,
            )
        )
    return tuple(views)


def fold_preemption(events: Iterable[RecordedEvent]) -> PreemptionView:
    """The view of one preemption from all of its events (any order; ledger order is used)."""
    ordered = sorted(events, key=lambda e: e.id)
    if not ordered:
        raise ValueError("a preemption view needs at least one event")
    if len({e.preemption_id for e in ordered}) != 1:
        raise ValueError("events of several preemptions cannot fold into one view")

    runs: list[str] = []
    decision: dict[str, Any] | None = None
    decided_at: datetime | None = None
    outcome: End | None = None
    finished_at: datetime | None = None
    nominated: str | None = None
    scheduled: RecordedEvent | None = None
    error: str | None = None
    abort_reason: str | None = None
    for recorded in ordered:
        if recorded.run_id not in runs:
            runs.append(recorded.run_id)
        kind = recorded.kind
        if kind in DECISION_KINDS:
            decision, decided_at = recorded.payload, recorded.occurred_at
        if kind is EventKind.NOMINATED and recorded.node:
            nominated = recorded.node
        if kind is EventKind.PREEMPTOR_SCHEDULED:
            scheduled = recorded
        if kind in TERMINAL_KINDS:
            outcome, finished_at = END_OF_KIND[kind], recorded.occurred_at
        if kind is EventKind.RETRIED:
            outcome, finished_at = None, None
            new_run = Retried.from_json(recorded.payload).new_run_id
            if new_run and new_run not in runs:
                runs.append(new_run)
        if kind is EventKind.FAILED:
            error = Ended.from_json(recorded.payload).error or error
        if kind is EventKind.VICTIM_FAILED:
            error = VictimStep.from_json(recorded.payload).error or error
        if kind is EventKind.PREEMPTION_ABORTED:
            abort_reason = Ended.from_json(recorded.payload).reason

    node = (decision or {}).get("nominatedNode") or nominated
    if node is None:
        node = next((e.node for e in ordered if e.node), None)
    victims = _fold_victims(ordered, decision, decided_at, node, outcome is not None)
    seconds_to_schedule = None
    if scheduled is not None:
        given = Scheduled.from_json(scheduled.payload).seconds_since_decision
        if given is not None:
            seconds_to_schedule = given
        elif decided_at is not None:
            seconds_to_schedule = (scheduled.occurred_at - decided_at).total_seconds()

    return PreemptionView(
        preemption_id=ordered[0].preemption_id,
        run_id=runs[-1],
        runs=tuple(runs),
        preemptor=ordered[-1].preemptor,
        node=node,
        status=_status(ordered, decision, victims, scheduled, outcome),
        outcome=outcome,
        started=ordered[0].occurred_at,
        finished=finished_at,
        decided_at=decided_at,
        decision=decision,
        victims=victims,
        scheduled_at=scheduled.occurred_at if scheduled else None,
        scheduled_node=(scheduled.node or node) if scheduled else None,
        seconds_to_schedule=seconds_to_schedule,
        error=error,
        abort_reason=abort_reason,
        events=tuple(ordered),
    )


def _status(
    ordered: Sequence[RecordedEvent],
    decision: dict[str, Any] | None,
    victims: Sequence[VictimView],
    scheduled: RecordedEvent | None,
    outcome: End | None,
) -> Status:
    if outcome is not None:
        return Status.FINISHED
    if ordered[-1].kind is EventKind.THROTTLED:
        return Status.HELD
    if decision is None:
        return Status.DECIDING
    if scheduled is not None:
        return Status.SCHEDULED
    if any(not v.fate.settled for v in victims):
        return Status.PREEMPTING
    return Status.WAITING


def fold_preemptions(events: Iterable[RecordedEvent]) -> dict[str, PreemptionView]:
    """One view per preemption among `events`, keyed by preemption ID."""
    grouped: dict[str, list[RecordedEvent]] = {}
    for recorded in events:
        grouped.setdefault(recorded.preemption_id, []).append(recorded)
    return {pid: fold_preemption(group) for pid, group in grouped.items()}

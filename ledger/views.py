"""The per-attempt, per-preemption and per-victim views, folded from events and never stored.

A preemption is one workflow ID; each run of it is one attempt, with its own start, end,
outcome, duration, node, decision and victims, read from that run's events alone (a
`retried` event belongs to the run it names as `newRunId`, the run it opens). Attempts are
numbered from 1 in ledger order. A preemption's status and outcome are its latest
attempt's; nothing is measured across runs, so a later aborted run never rewrites an
earlier completed one.

A group preemption is folded the same way: its preemptor is its pod group (the preemptor
columns name it), its decision is the group's (`podGroup` in the decision JSON), and an
attempt also tells the members its decision placed (`members`: `member_placed`, then the
nominate step's `member_nominated`), every node the decision touches (`nodes`), and each
victim's unit (from `victim_chosen`).

Pure functions over `RecordedEvent`s (no database here): the same fold serves `history`,
`explain` and tests, and a view can never disagree with the events it came from, because
it is nothing but those events read in ledger order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from preemptctl.ledger.events import RecordedEvent
from preemptctl.ledger.kinds import DECISION_KINDS, TERMINAL_KINDS, VICTIM_KINDS, EventKind
from preemptctl.ledger.payloads import (
    MemberPlaced,
    Retried,
    Scheduled,
    Terminal,
    VictimChosen,
    VictimStep,
    Write,
)
from preemptctl.ledger.vocabulary import FATE_OF_KIND, OUTCOME_OF_KIND, Fate, Outcome
from preemptctl.preemption.decision import PodRef

FIRST_STARTER = "trigger"
"""Who starts a preemption's first attempt: the trigger loop, the only starter of a new one."""

Link = Callable[[str, str], str]
"""Builds a direct link to one run (workflow ID, run ID), e.g. its Temporal UI page."""


class Status(StrEnum):
    """Where an attempt (and so its preemption) stands, read from its latest events."""

    DECIDING = "deciding"  # events, but no decision yet
    HELD = "held"  # throttled by a rate budget
    PREEMPTING = "preempting"  # victims chosen, not all settled
    WAITING = "waiting"  # victims settled, preemptor not scheduled yet
    SCHEDULED = "scheduled"  # preemptor scheduled, run not closed yet
    FINISHED = "finished"  # a terminal event


@dataclass(frozen=True, slots=True)
class VictimView:
    """One victim of one attempt: who it was and what became of it."""

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
    # The attempt (run) this victim belongs to.
    run_id: str = ""
    attempt: int = 1
    # A group preemption's victim: the unit it went with ("podGroup ml/train-b").
    unit: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The victim as `history --json` prints it (camelCase, like the planner's JSON)."""
        shown = {
            **self.victim.to_json(),
            "fate": str(self.fate),
            "settledAt": _iso(self.settled_at),
            "error": self.error,
        }
        if self.unit is not None:
            shown["unit"] = self.unit
        if self.replaced_by_uid:
            shown["replacedByUid"] = self.replaced_by_uid
        if self.answer_lost:
            shown["answerLost"] = True
        if self.unmarked:
            shown["unmarked"] = True
        return shown


@dataclass(frozen=True, slots=True)
class MemberView:
    """One member a group preemption's decision placed: on which node, and what its
    nomination write settled as (`effect`; None while not written), or why it failed."""

    pod: str  # "namespace/name"
    uid: str
    node: str
    effect: str | None = None
    error: str | None = None

    @property
    def nominated(self) -> bool:
        """Its nominatedNodeName was written (or already held)."""
        return self.effect is not None and self.error is None

    def to_json(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "uid": self.uid,
            "node": self.node,
            "nomination": self.effect,
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class AttemptView:
    """One run of a preemption, told by its own events only."""

    preemption_id: str
    attempt: int  # 1-based, in ledger order
    run_id: str
    preemptor: PodRef
    node: str | None
    status: Status
    outcome: Outcome | None
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
    # Whether running it again can help: None while open, or when it completed; False for
    # an `unsupported` end and a failure recorded non-retryable (an RBAC denial); None for a
    # failure whose writer did not record it; True for every other end.
    retryable: bool | None
    # How it was started: "trigger" or "person" (its `retried` event), why, and after which
    # run. The first attempt is the trigger's: only the trigger loop starts a preemption
    # (`preemptctl retry` runs one on record again, and records `retried`). None for a later
    # attempt whose `retried` event is not recorded yet.
    started_by: str | None
    retry_reason: str | None
    previous_run_id: str | None
    previous_outcome: str | None
    events: tuple[RecordedEvent, ...]
    # A group preemption's: its group ("namespace/name"; None for a pod's), the members its
    # decision placed, and every node the decision touches.
    pod_group: str | None = None
    members: tuple[MemberView, ...] = ()
    nodes: tuple[str, ...] = ()
    members_bound: int | None = None  # as `preemptor_scheduled` said, for a group
    # The preemptor was bound after this run had ended without it (a `preemptor_scheduled`
    # after the run's terminal event): what the run left undone no longer needs doing.
    bound_after_end: bool = False

    @property
    def victim_count(self) -> int:
        return len(self.victims)

    @property
    def victim_nodes(self) -> tuple[str, ...]:
        """The nodes its victims run on, by name."""
        return tuple(sorted({v.node for v in self.victims if v.node}))

    @property
    def member_nodes(self) -> tuple[str, ...]:
        """A group preemption's: the nodes its decision placed members on, by name."""
        placed = {m.node for m in self.members if m.node}
        placed |= {str(n) for n in ((self.decision or {}).get("nominations") or {}).values()}
        return tuple(sorted(placed))

    @property
    def duration_seconds(self) -> float | None:
        """From this run's first event to its end: never across runs."""
        if self.finished is None:
            return None
        return (self.finished - self.started).total_seconds()

    @property
    def parks(self) -> bool:
        """It ended in a way retrying cannot cure: the worker parks the pod (RetryBook);
        unless its preemptor was bound after it ended (nothing left to retry)."""
        return self.outcome is not None and self.retryable is False and not self.bound_after_end

    @property
    def cause(self) -> str | None:
        """Why it did not complete, in one phrase (None when it completed or is open)."""
        if self.outcome is None or self.outcome is Outcome.COMPLETED:
            return None
        if self.outcome is Outcome.FAILED:
            return self.error or "no error recorded"
        if self.outcome is Outcome.ABORTED:
            return self.abort_reason or "no reason recorded"
        message = (self.decision or {}).get("message")
        return str(message) if message else str(self.outcome)

    def to_json(self, attempts: int, link: Link | None = None) -> dict[str, Any]:
        """One record of `history --json`; `attempts` is its preemption's total."""
        shown: dict[str, Any] = {
            "preemptionId": self.preemption_id,
            "attempt": self.attempt,
            "attempts": attempts,
            "runId": self.run_id,
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
            "abortReason": self.abort_reason,
            "retryable": self.retryable,
            "startedBy": self.started_by,
            "retryReason": self.retry_reason,
            "previousRunId": self.previous_run_id,
            "previousOutcome": self.previous_outcome,
        }
        if self.pod_group is not None:
            shown["podGroup"] = self.pod_group
            shown["nodes"] = list(self.nodes)
            shown["victimNodes"] = list(self.victim_nodes)
            shown["memberNodes"] = list(self.member_nodes)
            shown["members"] = [member.to_json() for member in self.members]
            shown["membersBound"] = self.members_bound
        if self.bound_after_end:
            shown["boundAfterEnd"] = True
        if link is not None:
            shown["uiUrl"] = link(self.preemption_id, self.run_id)
        return shown


@dataclass(frozen=True, slots=True)
class PreemptionView:
    """One preemption (one workflow ID): its attempts in order, the latest one last."""

    preemption_id: str
    preemptor: PodRef
    attempts: tuple[AttemptView, ...]
    events: tuple[RecordedEvent, ...]

    @property
    def latest(self) -> AttemptView:
        return self.attempts[-1]

    @property
    def run_id(self) -> str:
        return self.latest.run_id

    @property
    def runs(self) -> tuple[str, ...]:
        return tuple(attempt.run_id for attempt in self.attempts)

    @property
    def status(self) -> Status:
        return self.latest.status

    @property
    def outcome(self) -> Outcome | None:
        return self.latest.outcome

    @property
    def started(self) -> datetime:
        """When its first attempt started."""
        return self.attempts[0].started

    @property
    def pod_group(self) -> str | None:
        """The pod group a group preemption is for (as any of its attempts decided it)."""
        return next((a.pod_group for a in self.attempts if a.pod_group), None)

    @property
    def parked(self) -> bool:
        """Parked per the ledger: the latest attempt ended non-retryably, none came after,
        and its preemptor was not bound after it ended."""
        return self.latest.parks

    def to_json(self, link: Link | None = None) -> list[dict[str, Any]]:
        """Its records of `history --json`: one per attempt, in order."""
        return [attempt.to_json(len(self.attempts), link) for attempt in self.attempts]


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
    attempt: int,
) -> tuple[VictimView, ...]:
    """The attempt's decision's victims in its order, then any other pod it did something to."""
    preemption_id, preemptor = ordered[0].preemption_id, ordered[-1].preemptor
    run_id = _run_of(ordered[0])
    chosen: dict[str, PodRef] = {ref.uid: ref for ref in _victims_of(decision)}
    touched: dict[str, list[RecordedEvent]] = {}
    unmarked = {
        e.victim.uid
        for e in ordered
        if e.kind is EventKind.VICTIM_UNMARKED and e.victim is not None and "error" not in e.payload
    }
    units: dict[str, str] = {}
    for recorded in ordered:
        if recorded.kind in VICTIM_KINDS and recorded.victim is not None:
            touched.setdefault(recorded.victim.uid, []).append(recorded)
            if recorded.kind is not EventKind.VICTIM_CHOSEN:
                chosen.setdefault(recorded.victim.uid, recorded.victim)
            else:
                unit = VictimChosen.from_json(recorded.payload).unit
                if unit is not None:
                    units[recorded.victim.uid] = unit
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
                run_id=run_id,
                attempt=attempt,
                unit=units.get(uid),
            )
        )
    return tuple(views)


def _fold_members(ordered: Sequence[RecordedEvent]) -> tuple[MemberView, ...]:
    """The members a group decision placed, in its order, each with its nomination's write."""
    placed: dict[str, MemberView] = {}
    for recorded in ordered:
        if recorded.kind is EventKind.MEMBER_PLACED:
            member = MemberPlaced.from_json(recorded.payload)
            placed[member.uid] = MemberView(member.pod, member.uid, recorded.node or "")
        elif recorded.kind is EventKind.MEMBER_NOMINATED:
            write = Write.from_json(recorded.payload)
            known = placed.get(write.uid or "")
            if known is not None:
                placed[known.uid] = MemberView(
                    known.pod, known.uid, known.node, write.effect, write.error
                )
    return tuple(placed.values())


def _group_nodes(decision: dict[str, Any] | None) -> tuple[str, ...]:
    """Every node a group decision touches: where members are placed, where victims run
    (`GroupDecision.nodes`, read back from its JSON)."""
    if not decision:
        return ()
    touched = {str(node) for node in (decision.get("nominations") or {}).values()}
    for unit in (decision.get("rationale") or {}).get("units") or ():
        if isinstance(unit, dict):
            touched.update(str(node) for node in unit.get("nodes") or ())
    return tuple(sorted(touched))


def _run_of(recorded: RecordedEvent) -> str:
    """The run an event tells about: its own, except that `retried` opens the new run."""
    if recorded.kind is EventKind.RETRIED:
        return Retried.from_json(recorded.payload).new_run_id or recorded.run_id
    return recorded.run_id


def _retryable(outcome: Outcome | None, terminal: RecordedEvent | None) -> bool | None:
    if outcome is None or outcome is Outcome.COMPLETED:
        return None
    if outcome is Outcome.UNSUPPORTED:
        return False
    if outcome is Outcome.FAILED:
        return None if terminal is None else Terminal.from_json(terminal.payload).retryable
    return True


def _bound_after_end(
    scheduled: RecordedEvent | None, terminal: RecordedEvent | None, outcome: Outcome | None
) -> bool:
    """Bound after the run had ended without it (failed, aborted, fruitless: placed by the
    scheduler on its own), as recorded (`afterEnd`) or as read from the order of events. A
    completed run of the one runbook ends at its last victim's delete and its bind comes
    after: that is the preemption's own scheduling, not a bind after the end."""
    if scheduled is None or terminal is None:
        return False
    if Scheduled.from_json(scheduled.payload).after_end:
        return True
    return scheduled.id > terminal.id and outcome is not Outcome.COMPLETED


def fold_attempt(
    events: Sequence[RecordedEvent], attempt: int, previous_run_id: str | None = None
) -> AttemptView:
    """The view of one run from its events, in ledger order: `attempt` is its number, and
    `previous_run_id` the run before it in the ledger, for when its `retried` event (which
    names that run itself) is not recorded."""
    ordered = list(events)
    run_id = _run_of(ordered[0])
    decision: dict[str, Any] | None = None
    decided_at: datetime | None = None
    outcome: Outcome | None = None
    terminal: RecordedEvent | None = None
    nominated: str | None = None
    scheduled: RecordedEvent | None = None
    error: str | None = None
    abort_reason: str | None = None
    retried: Retried | None = None
    for recorded in ordered:
        kind = recorded.kind
        if kind in DECISION_KINDS:
            decision, decided_at = recorded.payload, recorded.occurred_at
        if kind is EventKind.NOMINATED and recorded.node:
            nominated = recorded.node
        if kind is EventKind.PREEMPTOR_SCHEDULED:
            scheduled = recorded
        if kind in TERMINAL_KINDS:
            outcome, terminal = OUTCOME_OF_KIND[kind], recorded
        if kind is EventKind.RETRIED:
            retried = Retried.from_json(recorded.payload)
        if kind is EventKind.FAILED:
            error = Terminal.from_json(recorded.payload).error or error
        if kind is EventKind.VICTIM_FAILED:
            error = VictimStep.from_json(recorded.payload).error or error
        if kind is EventKind.PREEMPTION_ABORTED:
            abort_reason = Terminal.from_json(recorded.payload).reason

    pod_group = (decision or {}).get("podGroup")
    members = _fold_members(ordered)
    if pod_group is None and members:  # decided, though the decision event is not read
        pod_group = ordered[-1].preemptor.key
    if pod_group is not None:
        node = None  # a group's decision has no one node: `nodes`
    else:
        node = (decision or {}).get("nominatedNode") or nominated
        if node is None:
            node = next((e.node for e in ordered if e.node), None)
    victims = _fold_victims(ordered, decision, decided_at, node, outcome is not None, attempt)
    seconds_to_schedule = None
    members_bound = None
    if scheduled is not None:
        members_bound = Scheduled.from_json(scheduled.payload).members_bound
        given = Scheduled.from_json(scheduled.payload).seconds_since_decision
        if given is not None:
            seconds_to_schedule = given
        elif decided_at is not None:
            seconds_to_schedule = (scheduled.occurred_at - decided_at).total_seconds()

    return AttemptView(
        preemption_id=ordered[0].preemption_id,
        attempt=attempt,
        run_id=run_id,
        preemptor=ordered[-1].preemptor,
        node=node,
        status=_status(ordered, decision, victims, scheduled, outcome),
        outcome=outcome,
        started=ordered[0].occurred_at,
        finished=terminal.occurred_at if terminal is not None else None,
        decided_at=decided_at,
        decision=decision,
        victims=victims,
        scheduled_at=scheduled.occurred_at if scheduled else None,
        scheduled_node=(scheduled.node or node) if scheduled else None,
        seconds_to_schedule=seconds_to_schedule,
        error=error,
        abort_reason=abort_reason,
        retryable=_retryable(outcome, terminal),
        started_by=retried.by if retried is not None else FIRST_STARTER if attempt == 1 else None,
        retry_reason=retried.reason if retried is not None else None,
        previous_run_id=(retried.previous_run_id if retried else None) or previous_run_id,
        previous_outcome=retried.previous_outcome if retried is not None else None,
        events=tuple(ordered),
        pod_group=None if pod_group is None else str(pod_group),
        members=members,
        nodes=_group_nodes(decision) if pod_group is not None else (),
        members_bound=members_bound,
        bound_after_end=_bound_after_end(scheduled, terminal, outcome),
    )


def fold_preemption(events: Iterable[RecordedEvent]) -> PreemptionView:
    """The view of one preemption from all of its events (any order; ledger order is used)."""
    ordered = sorted(events, key=lambda e: e.id)
    if not ordered:
        raise ValueError("a preemption view needs at least one event")
    if len({e.preemption_id for e in ordered}) != 1:
        raise ValueError("events of several preemptions cannot fold into one view")
    by_run: dict[str, list[RecordedEvent]] = {}
    for recorded in ordered:
        by_run.setdefault(_run_of(recorded), []).append(recorded)
    attempts: list[AttemptView] = []
    for number, run_events in enumerate(by_run.values(), start=1):
        previous = attempts[-1].run_id if attempts else None
        attempts.append(fold_attempt(run_events, number, previous))
    return PreemptionView(
        preemption_id=ordered[0].preemption_id,
        preemptor=ordered[-1].preemptor,
        attempts=tuple(attempts),
        events=tuple(ordered),
    )


def _status(
    ordered: Sequence[RecordedEvent],
    decision: dict[str, Any] | None,
    victims: Sequence[VictimView],
    scheduled: RecordedEvent | None,
    outcome: Outcome | None,
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

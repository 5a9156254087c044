"""What the activities do to a victim, whoever preempts it: shared by the pod and the group
preemption's activities.

Each step acts on the cluster through `kube/`, then appends the ledger event of what became
of the victim, keyed by the run and the victim: a retry appends nothing twice. What the
cluster answered is kept in the attempt's heartbeat details before the append
(`activities.heartbeat`), so an attempt retried after a failed append records the answer
the first attempt got (a victim it deleted is "deleted", not "already gone"). The heartbeat
may never reach the server (a worker killed right after its DELETE), so a delete also
records its intent (`victim_delete_sent`) before the call: a retry that finds it, and then
the victim gone, records the victim deleted by this preemption (`answerLost`).

A delete first asks its caller whether the preemptor still needs the room (`stopped`: the
pod's standing or the group's); if it does not, the victim is left alone and the reason
reported for the workflow to record the abort.

The one runbook (`workflows.runbook`, issue 29) preempts each victim in one step of its own
(`preempt`): mark, ask whether the room is still needed, delete with the UID precondition,
announce; nothing is appended to the ledger there (the decision's write-ahead chose the
victim: that is the intent; the run's end records every fate in one statement). A DELETE
answered 2xx is never sent again for that UID:

- a retry in this process (a fault on the call after it, a ledger that failed, the step's
  own retry) finds the answer kept in memory (`DeletesAnswered`) and sends nothing;
- a step run again by another worker (this one killed after its DELETE) finds the victim
  terminating, or gone, in the answer to its mark (the apply carries the UID and answers
  with the pod as it is): its deletion has begun, no DELETE is sent, and the victim is
  recorded deleted by this preemption, its answer lost (`answerLost`). The decision saw it
  running (a victim already terminating when decided is never touched), so it went after
  the write-ahead chose it: by this run's own earlier attempt, or, the one case the step
  cannot tell apart, by another actor in between; the recorded message says both.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial

from temporalio.exceptions import ApplicationError

from preemptctl.activities.contracts import RunRef, VictimFate, VictimInput, VictimResult, Written
from preemptctl.activities.errors import kube_errors, ledger_errors
from preemptctl.activities.heartbeat import answered, answered_all, remember, remember_all
from preemptctl.activities.recording import Recorder, event
from preemptctl.kube import conditions, deletion
from preemptctl.kube.pods import Presence, get_pod
from preemptctl.kube.results import WriteEffect, WriteResult
from preemptctl.ledger.events import LedgerEvent
from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.payloads import DeleteSent, VictimStep, Write
from preemptctl.ledger.queries import delete_sent
from preemptctl.ledger.vocabulary import KIND_OF_FATE, Fate
from preemptctl.preemption.decision import PodRef

FOUND_DELETED = (
    "found {now} at its step: deleted by this preemption (the decision saw it running and "
    "chose it; its DELETE went out from an earlier attempt of this step, whose worker was "
    "lost before the answer was recorded, or another actor deleted it meanwhile); no DELETE "
    "sent again"
)


class DeletesAnswered:
    """The DELETEs this process sent and had answered, by run and victim UID: a retry of a
    victim's step in this process reads the answer here instead of sending the call again.
    Bounded (the oldest forgotten first): a step is retried within minutes of its DELETE."""

    def __init__(self, limit: int = 100_000) -> None:
        self._answers: OrderedDict[tuple[str, str], VictimResult] = OrderedDict()
        self._limit = limit
        self._lock = threading.Lock()

    def get(self, run_id: str, uid: str) -> VictimResult | None:
        with self._lock:
            return self._answers.get((run_id, uid))

    def keep(self, run_id: str, uid: str, result: VictimResult) -> None:
        with self._lock:
            self._answers[(run_id, uid)] = result
            while len(self._answers) > self._limit:
                self._answers.popitem(last=False)


class VictimSteps:
    """Mark, delete and unmark one victim, each recorded; or preempt it in one step."""

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder
        self._kube = recorder.kube
        self.answered = DeletesAnswered()

    # -- one victim, one step (the one runbook) ------------------------------------------------

    def preempt(
        self,
        request: VictimInput,
        stopped: Callable[[], str],
        announce: Callable[[VictimInput], None],
    ) -> VictimResult:
        """Mark `request.victim`, then, if the room is still needed (`stopped()` says why
        not), delete it with the UID precondition and `announce` it (its `Preempted`
        event). What became of it is returned, not recorded (the run's end records it). A
        write refused for good is the victim FAILED; one that may pass is raised, for the
        step to be retried. Never a second DELETE for a UID (see the module docstring)."""
        run_id, uid = request.run.run_id, request.victim.uid
        known = self.answered.get(run_id, uid)
        if known is not None:
            return known
        self._recorder.refuse_if_dry("delete", request.victim)
        mark = _written_or_refused(partial(self._mark_written, request))
        if isinstance(mark, VictimResult):
            return mark
        if mark.effect in (WriteEffect.TERMINATING, WriteEffect.ALREADY_GONE):
            now = "terminating" if mark.effect is WriteEffect.TERMINATING else "gone"
            result = VictimResult(
                Fate.DELETED,
                FOUND_DELETED.format(now=now),
                answer_lost=True,
                terminating=now == "terminating",
                marked=now == "terminating",
            )
            self.answered.keep(run_id, uid, result)
            announce(request)
            return result
        if mark.effect is WriteEffect.REPLACED:
            return _victim_result(mark, Fate.DELETED)
        reason = stopped()
        if reason:
            return VictimResult(
                Fate.SPARED,
                "the preemption was stopped before deleting it",
                stopped=reason,
                marked=True,
            )
        result = _settled(
            partial(
                deletion.delete_victim,
                self._kube,
                request.victim,
                grace_period_seconds=request.grace_period_seconds,
                use_eviction=request.use_eviction,
            ),
            Fate.DELETED,
        )
        result.marked = True
        self.answered.keep(run_id, uid, result)
        if result.fate is Fate.DELETED:
            announce(request)
        return result

    def fate_events(
        self, run: RunRef, preemptor: PodRef, fates: list[VictimFate]
    ) -> list[LedgerEvent]:
        """The ledger event of each victim's settled fate (a spared one has none: the
        views derive it from the run's end)."""
        return [
            self._fate_event(VictimInput(run, fate.pod, preemptor, fate.node), fate.result)
            for fate in fates
            if fate.result.fate in KIND_OF_FATE
        ]

    # -- mark -------------------------------------------------------------------------------

    def mark(self, request: VictimInput) -> VictimResult:
        """Add the DisruptionTarget condition, unless the victim is gone, replaced, or already
        terminating (then there is nothing left to do to it); record what became of it."""
        result = answered() or self._mark(request)
        if result.fate is Fate.ALREADY_GONE and self._delete_sent(request):
            # A re-run of this mark after this run's own delete: a local activity is re-run
            # when its worker dies before the workflow task that ran it was recorded, and
            # finds the victim its delete removed. It was marked; the delete that follows
            # finds its intent and records the victim deleted by this preemption.
            result = VictimResult(Fate.MARKED, "marked; this run has already sent its delete")
        self.record(request, result)
        return result

    def _mark(self, request: VictimInput) -> VictimResult:
        self._recorder.refuse_if_dry("mark", request.victim)
        with self._failure_recorded(request):
            written = conditions.add_disruption_target(
                self._kube, request.victim, request.scheduler_name
            )
        result = _victim_result(written, Fate.MARKED)
        remember(result)
        return result

    def _delete_sent(self, request: VictimInput) -> bool:
        """Whether this run recorded the intent to delete this victim (`_intend_delete`)."""
        run = request.run
        with ledger_errors():
            return delete_sent(
                self._recorder.ledger, run.preemption_id, run.run_id, request.victim.uid
            )

    # -- delete -----------------------------------------------------------------------------

    def delete(
        self,
        request: VictimInput,
        stopped: Callable[[], str],
        announce: Callable[[VictimInput], None],
    ) -> VictimResult:
        """Delete (or evict) exactly this victim, UID precondition included, unless the
        preemptor no longer needs the room (`stopped()` says why); record what became of
        the victim, and `announce` a victim deleted (its `Preempted` event). A victim left
        alone because the preemptor moved on is reported (`stopped`), not recorded: the
        workflow stops and records the abort."""
        result = answered() or self._delete(request, stopped)
        if result.stopped:
            return result
        self.record(request, result)
        if result.fate is Fate.DELETED and not self._recorder.dry_run:
            announce(request)
        return result

    def _delete(self, request: VictimInput, stopped: Callable[[], str]) -> VictimResult:
        reason = stopped()
        if reason:
            return self._stopped(request, reason)
        self._recorder.refuse_if_dry("delete", request.victim)
        sent_before = self._intend_delete(request)
        with self._failure_recorded(request):
            written = deletion.delete_victim(
                self._kube,
                request.victim,
                grace_period_seconds=request.grace_period_seconds,
                use_eviction=request.use_eviction,
            )
        result = _victim_result(written, Fate.DELETED)
        if result.fate is Fate.ALREADY_GONE and sent_before:
            result = VictimResult(
                Fate.DELETED,
                "deleted by this preemption: an earlier attempt of this run sent the DELETE "
                f"and its answer was lost; the retry found the victim gone ({written.message})",
                answer_lost=True,
            )
        remember(result)
        return result

    def _stopped(self, request: VictimInput, reason: str) -> VictimResult:
        """The victim left alone because the preemptor no longer needs the room (`reason`):
        SPARED, unless an earlier attempt of this run recorded its intent to delete it (a
        worker killed after its DELETE, and the preemptor moved on meanwhile). Then what
        became of it is read, not written: gone, replaced or terminating, it was deleted by
        this preemption (recorded as such); still running, the DELETE never went out."""
        spared = VictimResult(
            Fate.SPARED, "the preemption was stopped before deleting it", stopped=reason
        )
        if not self._delete_sent(request):
            return spared
        with kube_errors():
            lookup = get_pod(self._kube, request.victim)
        if lookup.presence is Presence.FOUND and not lookup.terminating:
            return spared
        now = "terminating" if lookup.presence is Presence.FOUND else "gone"
        return VictimResult(
            Fate.DELETED,
            "deleted by this preemption before it stopped: an earlier attempt of this run sent "
            f"the DELETE and its answer was lost; the victim is {now}",
            terminating=now == "terminating",
            answer_lost=True,
        )

    def _intend_delete(self, request: VictimInput) -> bool:
        """Record, before the DELETE is sent, that this run is sending it; True when an
        earlier attempt of this run had recorded it already (and so may have sent it).

        The heartbeat alone cannot tell: a worker killed right after the call may never
        have sent its heartbeat to the server, while this row was committed before the
        call. The insert is idempotent, and whether it was new is the answer, in one
        round trip."""
        return self._recorder.append([self._intent(request)]) == 0

    @staticmethod
    def _intent(request: VictimInput) -> LedgerEvent:
        return event(
            request.run,
            EventKind.VICTIM_DELETE_SENT,
            request.preemptor,
            request.node,
            DeleteSent(eviction=request.use_eviction).to_json(),
            victim=request.victim,
        )

    # -- a round of victims in one step ------------------------------------------------------

    def mark_round(self, requests: list[VictimInput]) -> list[VictimResult]:
        """`mark` for every victim of a round, each settled on its own (one refused for good
        is FAILED, the others go on; one that may succeed later fails the step, which is
        retried: the victims answered already are not asked again), their fates appended
        in one statement."""
        if not requests:
            return []
        memo = answered_all()
        self._recorder.refuse_if_dry("mark", requests[0].victim)
        answers: dict[str, VictimResult] = {}
        for request in requests:
            uid = request.victim.uid
            result = memo.get(uid)
            if result is None:
                result = _settled(partial(self._mark_written, request), Fate.MARKED)
                memo[uid] = result
                remember_all(memo)
            if result.fate is Fate.ALREADY_GONE and self._delete_sent(request):
                result = VictimResult(Fate.MARKED, "marked; this run has already sent its delete")
            answers[uid] = result
        self._recorder.append([self._fate_event(r, answers[r.victim.uid]) for r in requests])
        return [answers[r.victim.uid] for r in requests]

    def _mark_written(self, request: VictimInput) -> WriteResult:
        return conditions.add_disruption_target(self._kube, request.victim, request.scheduler_name)

    def delete_round(
        self,
        requests: list[VictimInput],
        stopped: Callable[[], str],
        announce: Callable[[VictimInput], None],
    ) -> list[VictimResult]:
        """`delete` for every victim of a round: the preemptor re-checked once for them
        all, their intents appended in one statement before the first DELETE, each victim
        settled on its own, their fates appended in one statement, each deleted one
        announced. A retry of the round finds the intents it appended (one statement: all
        of them or none), so a victim gone by then is one this run deleted."""
        if not requests:
            return []
        memo = answered_all()
        todo = [r for r in requests if r.victim.uid not in memo]
        if todo:
            reason = stopped()
            if reason:
                for request in todo:
                    memo[request.victim.uid] = self._stopped(request, reason)
            else:
                self._recorder.refuse_if_dry("delete", todo[0].victim)
                self._delete_each(todo, memo)
        answers = [memo[r.victim.uid] for r in requests]
        fates = [(r, a) for r, a in zip(requests, answers, strict=True) if not a.stopped]
        if fates:
            self._recorder.append([self._fate_event(r, a) for r, a in fates])
        if not self._recorder.dry_run:
            for request, answer in fates:
                if answer.fate is Fate.DELETED:
                    announce(request)
        return answers

    def _delete_each(self, todo: list[VictimInput], memo: dict[str, VictimResult]) -> None:
        intents = [self._intent(request) for request in todo]
        sent_before = self._recorder.append(intents) < len(intents)
        for request in todo:
            result = _settled(
                partial(
                    deletion.delete_victim,
                    self._kube,
                    request.victim,
                    grace_period_seconds=request.grace_period_seconds,
                    use_eviction=request.use_eviction,
                ),
                Fate.DELETED,
            )
            if result.fate is Fate.ALREADY_GONE and sent_before:
                result = VictimResult(
                    Fate.DELETED,
                    "deleted by this preemption: an earlier attempt of this run sent the DELETE "
                    f"and its answer was lost; the retry found the victim gone ({result.message})",
                    answer_lost=True,
                )
            memo[request.victim.uid] = result
            remember_all(memo)

    # -- unmark -----------------------------------------------------------------------------

    def unmark(self, request: VictimInput) -> str:
        """Remove the DisruptionTarget condition this preemption set on a victim it did not
        delete after all (the run aborted or failed), and record the removal: the pod is no
        longer about to be disrupted. A removal refused for good is recorded, not raised:
        the condition then lapses on its own (kube-controller-manager, after 2 minutes)."""
        self._recorder.refuse_if_dry("unmark", request.victim)
        try:
            with kube_errors():
                written = conditions.remove_disruption_target(self._kube, request.victim)
            step = VictimStep(message=written.message)
        except ApplicationError as error:
            if not error.non_retryable:
                raise
            step = VictimStep(error=error.message)
        self._recorder.append(
            [
                event(
                    request.run,
                    EventKind.VICTIM_UNMARKED,
                    request.preemptor,
                    request.node,
                    step.to_json(),
                    victim=request.victim,
                )
            ]
        )
        return step.error or step.message or ""

    # -- the victim's fate in the ledger ----------------------------------------------------

    @contextmanager
    def _failure_recorded(self, request: VictimInput) -> Iterator[None]:
        """A write that failed for good is recorded as the victim's fate, then raised."""
        try:
            with kube_errors():
                yield
        except ApplicationError as error:
            if error.non_retryable:
                self.record(request, VictimResult(Fate.FAILED, error.message))
            raise

    def record(self, request: VictimInput, result: VictimResult) -> None:
        """Append the event of the fate the victim ended this step in."""
        self._recorder.append([self._fate_event(request, result)])

    @staticmethod
    def _fate_event(request: VictimInput, result: VictimResult) -> LedgerEvent:
        failed = result.fate is Fate.FAILED
        payload = VictimStep(
            message=None if failed else result.message,
            error=result.message if failed else None,
            terminating=result.terminating,
            replaced_by_uid=result.replaced_by_uid,
            answer_lost=result.answer_lost,
        ).to_json()
        return event(
            request.run,
            KIND_OF_FATE[result.fate],
            request.preemptor,
            request.node,
            payload,
            victim=request.victim,
        )


def _written_or_refused(write: Callable[[], WriteResult]) -> WriteResult | VictimResult:
    """What one write settled as, or the victim FAILED when it was refused for good (the
    message says why and what to do); a failure that may pass is raised, for the round's
    step to be retried."""
    try:
        with kube_errors():
            return write()
    except ApplicationError as error:
        if not error.non_retryable:
            raise
        return VictimResult(Fate.FAILED, error.message)


def _settled(write: Callable[[], WriteResult], done: Fate) -> VictimResult:
    """The victim's fate from one write (`done` when it happened), FAILED when refused."""
    written = _written_or_refused(write)
    return written if isinstance(written, VictimResult) else _victim_result(written, done)


def _victim_result(written: WriteResult, done: Fate) -> VictimResult:
    """The victim's fate from what the write settled as (`done` when it happened)."""
    if written.effect is WriteEffect.ALREADY_GONE:
        return VictimResult(Fate.ALREADY_GONE, written.message)
    if written.effect is WriteEffect.TERMINATING:
        return VictimResult(Fate.ALREADY_GONE, written.message, terminating=True)
    if written.effect is WriteEffect.REPLACED:
        return VictimResult(Fate.REPLACED, written.message, replaced_by_uid=written.replaced_by_uid)
    return VictimResult(done, written.message)


def written(kind: EventKind, pod: PodRef, node: str, result: WriteResult | str) -> Written:
    """A nomination write as settled (or the error that refused it for good), for the run's
    end to record."""
    if isinstance(result, str):
        return Written(kind.value, pod, node, error=result)
    return Written(kind.value, pod, node, result.effect.value, result.message, result.previous)


def write_events(run: RunRef, preemptor: PodRef, writes: list[Written]) -> list[LedgerEvent]:
    """The ledger event of each nomination write, as the step that made it would have
    appended it: the preemptor's own nomination without a step key, the others (a member's,
    a cleared one) keyed by the pod."""
    found: list[LedgerEvent] = []
    for write in writes:
        kind = EventKind(write.kind)
        own = kind is EventKind.NOMINATED
        payload = Write(
            write.effect or None,
            write.message or None,
            write.previous,
            error=write.error,
            pod=None if own else write.pod.key,
            uid=None if own else write.pod.uid,
        )
        found.append(
            event(
                run,
                kind,
                preemptor,
                write.node,
                payload.to_json(),
                step="" if own else write.pod.uid,
            )
        )
    return found

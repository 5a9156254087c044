"""The preemption workflow's activities: every side effect it has, each safe to retry.

Each activity translates between the workflow's contracts and `kube/` (one gateway call, or
a few), the decision path (`deciding/`) and the ledger, and classifies what went wrong
(`activities.errors`). It decides nothing itself: the gateway says what a write settled as,
the domain says whether the preemptor still needs room (`preemption.standing`), the decision
path decides and writes its decision ahead.

Each activity that acts on the cluster appends the ledger event of what it did, in the same
attempt, keyed by the run and the victim: a retry appends nothing twice. What the cluster
answered is kept in the attempt's heartbeat details before the append (`activities.heartbeat`),
so an attempt retried after a failed append records the answer the first attempt got (a
victim it deleted is "deleted", not "already gone"). The heartbeat may never reach the server
(a worker killed right after its DELETE), so a delete also records its intent
(`victim_delete_sent`) before the call: a retry that finds it, and then the victim gone,
records the victim deleted by this preemption (`answerLost`), with its `Preempted` event.

A run's end is the workflow's to record (`record_end`), the decision's write-ahead's when the
decision ends it: an activity that finds the preemptor no longer needs room (select, delete)
reports why and records nothing of the sort.

A worker that runs dry (`dry_run`, the operator's PREEMPT_DRY_RUN: shadow mode, preemption
handed back to kube-scheduler) writes nothing to the cluster, whatever a request says: a
request to act (an older run's, retried; one started by a worker that acted) is decided as a
dry run by the select step, which says so (`Selection.dry_run`) and records it as one
(`dry_run`, no claim held); and every write step (nominate, mark, delete, unmark) refuses
for good (`WorkerRunsDry`), for a run decided by a worker that acted and continued by one
that runs dry. Events on pods are not posted either.

The activities are synchronous (the Kubernetes client and the ledger's engine are), so the
worker runs them on a thread pool. Decisions are serialized by the ledger's decision lock
(see `deciding.path`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import Engine
from temporalio import activity
from temporalio.exceptions import ApplicationError

from preemptctl.activities.contracts import (
    EndInput,
    NominationInput,
    NominationResult,
    PreemptorCheck,
    RunRef,
    SelectInput,
    Selection,
    VictimInput,
    VictimResult,
)
from preemptctl.activities.errors import (
    decision_errors,
    kube_errors,
    ledger_errors,
    worker_runs_dry,
)
from preemptctl.activities.heartbeat import answered, remember
from preemptctl.deciding.path import Decided, DecisionPath, DecisionRequest
from preemptctl.kube import conditions, deletion, events, nomination
from preemptctl.kube.client import KubeClient
from preemptctl.kube.pods import get_pod
from preemptctl.kube.results import KubeCallError, WriteEffect, WriteResult
from preemptctl.kube.view import ClusterView
from preemptctl.ledger.events import LedgerEvent
from preemptctl.ledger.inputs_recorder import INPUTS_MAX_BYTES, INPUTS_RETENTION_DAYS
from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.payloads import DeleteSent, Retried, Scheduled, Terminal, VictimStep, Write
from preemptctl.ledger.queries import delete_sent, earlier_run
from preemptctl.ledger.vocabulary import KIND_OF_FATE, KIND_OF_OUTCOME, Fate, Outcome
from preemptctl.ledger.writer import append_batch
from preemptctl.preemption.decision import PodRef, Verdict
from preemptctl.preemption.default_preemption import PreemptionArgs
from preemptctl.preemption.standing import PreemptorStanding, reason_to_stop, standing_of

logger = logging.getLogger(__name__)


class PreemptionActivities:
    """The activities, bound to one cluster (client and view) and one ledger."""

    def __init__(
        self,
        kube: KubeClient,
        view: ClusterView,
        ledger: Engine,
        *,
        identity: str = "preemptctl",
        view_ready_timeout: float = 30.0,
        planner_args: PreemptionArgs | None = None,
        evictions_per_minute: int = 0,
        lock_wait_seconds: float = 4.0,
        inputs_max_bytes: int = INPUTS_MAX_BYTES,
        inputs_retention_days: int = INPUTS_RETENTION_DAYS,
        dry_run: bool = False,
    ) -> None:
        self._kube = kube
        self._dry_run = dry_run
        self._view = view
        self._ledger = ledger
        self._identity = identity
        self._decisions = DecisionPath(
            ledger,
            view,
            lambda pod: get_pod(kube, pod),
            identity=identity,
            planner_args=planner_args,
            evictions_per_minute=evictions_per_minute,
            lock_wait_seconds=lock_wait_seconds,
            view_ready_timeout=view_ready_timeout,
            inputs_max_bytes=inputs_max_bytes,
            inputs_retention_days=inputs_retention_days,
        )

    @property
    def decisions(self) -> DecisionPath:
        """The decision path, for its lock hold figures (`DecisionPath.holds`)."""
        return self._decisions

    def close(self) -> int:
        """At shutdown, once the worker has stopped running activities: let the decision
        path's inputs recorder finish what is queued, for a bounded time, and stop it
        (blocking: from async code, in a thread). The decisions whose inputs were left
        unrecorded."""
        return self._decisions.close()

    def all(self) -> list[Callable[..., Any]]:
        """Every activity, for `Worker(activities=...)`."""
        return [
            self.select_preemption,
            self.nominate_preemptor,
            self.mark_victim,
            self.delete_victim,
            self.unmark_victim,
            self.check_preemptor,
            self.record_end,
        ]

    # -- deciding ---------------------------------------------------------------------------

    @activity.defn(name="select_preemption")
    def select_preemption(self, request: SelectInput) -> Selection:
        """The decision path (`deciding.path`): the preemptor fresh from the API server,
        then lock, claims, plan, budget, write ahead, serial across all replicas; then tell
        the preemptor what is decided for it.

        A run after the first appends `retried` first. The path writes the decision ahead
        (with its end when it is final: fits, ineligible, no candidate, unsupported, dry
        run) or `throttled`; a preemptor that no longer needs room is reported (no verdict,
        the reason as the message) for the workflow to record the abort."""
        if not request.throttled:
            self._record_retried(request)
        run = request.run
        dry_run = request.dry_run or self._dry_run
        decision_request = DecisionRequest(
            run.preemption_id,
            run.run_id,
            _when(run),
            request.preemptor,
            request.strategy,
            dry_run,
            request.throttled,
        )
        with decision_errors(request.preemptor):
            decided = self._decisions.decide(decision_request, beat=activity.heartbeat)
        if not isinstance(decided, Decided):
            return Selection(request.preemptor, decided.reason)
        self._tell_the_preemptor_the_decision(request, decided, dry_run=dry_run)
        return _selection(decided, dry_run=dry_run)

    def _tell_the_preemptor_the_decision(
        self, request: SelectInput, decided: Decided, *, dry_run: bool
    ) -> None:
        """`Preempting` (which pods, where) for a decision to preempt that goes on now;
        `PreemptionUnsupported` (why) for a refusal."""
        decision = decided.decision
        if decided.retry_after_seconds:
            return
        if decision.verdict is Verdict.UNSUPPORTED:
            self._tell_the_preemptor(request.preemptor, "PreemptionUnsupported", decision.message)
        elif decision.verdict is Verdict.PREEMPT and not dry_run:
            victims = ", ".join(v.key for v in decision.victims)
            self._tell_the_preemptor(
                request.preemptor,
                "Preempting",
                f"{len(decision.victims)} pod(s) on {decision.nominated_node}: {victims}",
                normal=True,
                run=request.run,
            )

    def _record_retried(self, request: SelectInput) -> None:
        """A run after the first appends `retried` (who, why, after which run) before
        anything else of its own, so the ledger tells each attempt apart and in order."""
        run = request.run
        with ledger_errors():
            earlier = earlier_run(self._ledger, run.preemption_id, run.run_id)
        if earlier is None:
            return
        ended = earlier.outcome.value if earlier.outcome is not None else None
        reason = request.retry_reason or (
            f"{request.preemptor.key} still needed room after run {earlier.run_id} "
            f"ended {ended or 'without recording an end'}"
        )
        payload = Retried(run.run_id, earlier.run_id, ended, request.started_by, reason)
        self._append([_event(run, EventKind.RETRIED, request.preemptor, None, payload.to_json())])

    def _tell_the_preemptor(
        self,
        preemptor: PodRef,
        reason: str,
        note: str,
        *,
        normal: bool = False,
        run: RunRef | None = None,
    ) -> None:
        """An event on the preemptor, so `kubectl describe` tells what is done for it and why
        nothing happens (a Warning unless `normal`). One per `run` when given (each run
        tells its own story), else one per pod and reason. Best effort: the ledger already
        has it all. A worker that runs dry posts none."""
        if self._dry_run:
            return
        try:
            events.record_pod_event(
                self._kube,
                preemptor,
                reason,
                note,
                self._identity,
                key=(reason, run.run_id if run is not None else ""),
                normal=normal,
            )
        except KubeCallError as error:
            logger.warning("could not record %s on %s: %s", reason, preemptor.key, error)

    # -- the cluster ------------------------------------------------------------------------

    @activity.defn(name="nominate_preemptor")
    def nominate_preemptor(self, request: NominationInput) -> NominationResult:
        """Set the preemptor's nominatedNodeName (a nomination another component set is
        overwritten: the decision requires it), clear lower-priority nominations to the node,
        and record each. A write that fails for good is recorded and the preemption goes on,
        as upstream's does; one that may succeed later is retried."""
        run, node = request.run, request.node
        self._refuse_if_dry("nominate", request.preemptor, f"to {node}")
        batch: list[LedgerEvent] = []
        result = NominationResult()
        try:
            with kube_errors():
                written = nomination.nominate(self._kube, request.preemptor, node, overwrite=True)
            result = NominationResult(written.effect.value, written.message, written.previous)
            payload = Write(result.effect, result.message, result.previous)
        except ApplicationError as error:
            if not error.non_retryable:
                raise
            result, payload = NominationResult(error=error.message), Write(error=error.message)
        batch.append(_event(run, EventKind.NOMINATED, request.preemptor, node, payload.to_json()))
        for pod in request.clear:
            try:
                with kube_errors():
                    cleared = nomination.clear_nomination(self._kube, pod, node)
                payload = Write(cleared.effect.value, cleared.message, pod=pod.key, uid=pod.uid)
            except ApplicationError as error:
                if not error.non_retryable:
                    raise
                payload = Write(error=error.message, pod=pod.key, uid=pod.uid)
            batch.append(
                _event(
                    run,
                    EventKind.NOMINATION_CLEARED,
                    request.preemptor,
                    node,
                    payload.to_json(),
                    step=pod.uid,
                )
            )
        self._append(batch)
        return result

    @activity.defn(name="mark_victim")
    def mark_victim(self, request: VictimInput) -> VictimResult:
        """Add the DisruptionTarget condition, unless the victim is gone, replaced, or already
        terminating (then there is nothing left to do to it); record what became of it."""
        result = answered() or self._mark(request)
        if result.fate is Fate.ALREADY_GONE and self._delete_sent(request):
            # A re-run of this mark after this run's own delete: a local activity is re-run
            # when its worker dies before the workflow task that ran it was recorded, and
            # finds the victim its delete removed. It was marked; the delete that follows
            # finds its intent and records the victim deleted by this preemption.
            result = VictimResult(Fate.MARKED, "marked; this run has already sent its delete")
        self._record_victim(request, result)
        return result

    def _delete_sent(self, request: VictimInput) -> bool:
        """Whether this run recorded the intent to delete this victim (`_intend_delete`)."""
        run = request.run
        with ledger_errors():
            return delete_sent(self._ledger, run.preemption_id, run.run_id, request.victim.uid)

    def _mark(self, request: VictimInput) -> VictimResult:
        self._refuse_if_dry("mark", request.victim)
        with self._failure_recorded(request):
            written = conditions.add_disruption_target(
                self._kube, request.victim, request.scheduler_name
            )
        result = _victim_result(written, Fate.MARKED)
        remember(result)
        return result

    @activity.defn(name="delete_victim")
    def delete_victim(self, request: VictimInput) -> VictimResult:
        """Delete (or evict) exactly this victim, UID precondition included, if the preemptor
        still needs the room (`reason_to_stop`: not gone, not replaced, not bound to another
        node; the view answers when it shows the preemptor, else the API server). Record what
        became of the victim, and the `Preempted` event on it, as upstream records it. A
        victim left alone because the preemptor moved on is reported (`stopped`): the
        workflow stops and records the abort."""
        result = answered() or self._delete(request)
        if result.stopped:
            return result
        self._record_victim(request, result)
        if result.fate is Fate.DELETED and not self._dry_run:
            try:
                events.record_preempted(
                    self._kube, request.victim, request.preemptor, request.node, self._identity
                )
            except KubeCallError as error:
                logger.warning("could not record Preempted on %s: %s", request.victim.key, error)
        return result

    def _delete(self, request: VictimInput) -> VictimResult:
        stopped = reason_to_stop(self._preemptor_standing(request.preemptor), request.node)
        if stopped:
            return VictimResult(
                Fate.SPARED, "the preemption was stopped before deleting it", stopped=stopped
            )
        self._refuse_if_dry("delete", request.victim)
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

    def _intend_delete(self, request: VictimInput) -> bool:
        """Record, before the DELETE is sent, that this run is sending it; True when an
        earlier attempt of this run had recorded it already (and so may have sent it).

        The heartbeat alone cannot tell: a worker killed right after the call may never
        have sent its heartbeat to the server, while this row was committed before the
        call. The insert is idempotent, and whether it was new is the answer, in one
        round trip."""
        intent = _event(
            request.run,
            EventKind.VICTIM_DELETE_SENT,
            request.preemptor,
            request.node,
            DeleteSent(eviction=request.use_eviction).to_json(),
            victim=request.victim,
        )
        return self._append([intent]) == 0

    @activity.defn(name="unmark_victim")
    def unmark_victim(self, request: VictimInput) -> str:
        """Remove the DisruptionTarget condition this preemption set on a victim it did not
        delete after all (the run aborted or failed), and record the removal: the pod is no
        longer about to be disrupted. A removal refused for good is recorded, not raised:
        the condition then lapses on its own (kube-controller-manager, after 2 minutes)."""
        self._refuse_if_dry("unmark", request.victim)
        try:
            with kube_errors():
                written = conditions.remove_disruption_target(self._kube, request.victim)
            step = VictimStep(message=written.message)
        except ApplicationError as error:
            if not error.non_retryable:
                raise
            step = VictimStep(error=error.message)
        self._append(
            [
                _event(
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

    @activity.defn(name="check_preemptor")
    def check_preemptor(self, request: PreemptorCheck) -> PreemptorStanding:
        """Where the preemptor stands now, read from the API server (not the view)."""
        with kube_errors():
            return get_pod(self._kube, request.preemptor).standing()

    def _preemptor_standing(self, preemptor: PodRef) -> PreemptorStanding:
        """The view's answer when it shows the preemptor; else the API server's."""
        with self._view.read() as snapshot:
            pod = snapshot.pods.get(preemptor.uid)
            if pod is not None:
                return standing_of(pod)
        with kube_errors():
            return get_pod(self._kube, preemptor).standing()

    def _refuse_if_dry(self, step: str, pod: PodRef, where: str = "") -> None:
        """A worker that runs dry writes nothing to the cluster, whatever the request says:
        the step fails for good, saying why and what to do (`WorkerRunsDry`)."""
        if self._dry_run:
            raise worker_runs_dry(step, pod, where)

    @contextmanager
    def _failure_recorded(self, request: VictimInput) -> Iterator[None]:
        """A write that failed for good is recorded as the victim's fate, then raised."""
        try:
            with kube_errors():
                yield
        except ApplicationError as error:
            if error.non_retryable:
                self._record_victim(request, VictimResult(Fate.FAILED, error.message))
            raise

    def _record_victim(self, request: VictimInput, result: VictimResult) -> None:
        failed = result.fate is Fate.FAILED
        payload = VictimStep(
            message=None if failed else result.message,
            error=result.message if failed else None,
            terminating=result.terminating,
            replaced_by_uid=result.replaced_by_uid,
            answer_lost=result.answer_lost,
        ).to_json()
        self._append(
            [
                _event(
                    request.run,
                    KIND_OF_FATE[result.fate],
                    request.preemptor,
                    request.node,
                    payload,
                    victim=request.victim,
                )
            ]
        )

    # -- the ledger -------------------------------------------------------------------------

    @activity.defn(name="record_end")
    def record_end(self, request: EndInput) -> int:
        """Append how the run ended (what the workflow records itself: completed, failed,
        aborted), with the preemptor's scheduling and a victim failed for good, if any."""
        run = request.run
        batch: list[LedgerEvent] = []
        if request.failed_victim is not None:
            batch.append(
                _event(
                    run,
                    EventKind.VICTIM_FAILED,
                    request.preemptor,
                    request.node,
                    VictimStep(error=request.message).to_json(),
                    victim=request.failed_victim,
                )
            )
        if request.scheduled_node is not None:
            scheduled = Scheduled(request.seconds_to_schedule).to_json()
            batch.append(
                _event(
                    run,
                    EventKind.PREEMPTOR_SCHEDULED,
                    request.preemptor,
                    request.scheduled_node,
                    scheduled,
                )
            )
        if request.outcome is Outcome.FAILED:
            ended = Terminal(error=request.message, retryable=request.retryable)
            self._tell_the_preemptor(
                request.preemptor,
                "PreemptionFailed",
                _failure_note(request.message, retryable=request.retryable),
                run=run,
            )
        elif request.outcome is Outcome.ABORTED:
            ended = Terminal(reason=request.message)
        else:
            bound = request.scheduled_node is not None
            ended = Terminal(None if bound else request.message, preemptor_scheduled=bound)
        kind = KIND_OF_OUTCOME[request.outcome]
        batch.append(_event(run, kind, request.preemptor, request.node, ended.to_json()))
        return self._append(batch)

    def _append(self, batch: list[LedgerEvent]) -> int:
        with ledger_errors():
            return append_batch(self._ledger, batch)


# -- translations ---------------------------------------------------------------------------


def _when(run: RunRef) -> datetime:
    return datetime.fromisoformat(run.occurred_at)


def _event(
    run: RunRef,
    kind: EventKind,
    preemptor: PodRef,
    node: str | None,
    payload: dict[str, Any],
    *,
    victim: PodRef | None = None,
    step: str = "",
) -> LedgerEvent:
    """The ledger event of one step of `run`, at the workflow's clock."""
    return LedgerEvent(
        preemption_id=run.preemption_id,
        run_id=run.run_id,
        kind=kind,
        preemptor=preemptor,
        node=node,
        victim=victim,
        payload=payload,
        occurred_at=_when(run),
        step=step,
    )


def _selection(decided: Decided, *, dry_run: bool) -> Selection:
    """The decision as the workflow reads it (held back: when to decide again, and why)."""
    decision = decided.decision
    return Selection(
        preemptor=decision.preemptor,
        message=decided.message,
        verdict=decision.verdict,
        node=decision.nominated_node,
        victims=list(decision.victims),
        nominations_to_clear=list(decision.nominated_pods_to_clear),
        num_pdb_violations=decision.num_pdb_violations,
        scheduler_name=decided.scheduler_name,
        retry_after_seconds=decided.retry_after_seconds,
        dry_run=dry_run,
    )


def _victim_result(written: WriteResult, done: Fate) -> VictimResult:
    """The victim's fate from what the write settled as (`done` when it happened)."""
    if written.effect is WriteEffect.ALREADY_GONE:
        return VictimResult(Fate.ALREADY_GONE, written.message)
    if written.effect is WriteEffect.TERMINATING:
        return VictimResult(Fate.ALREADY_GONE, written.message, terminating=True)
    if written.effect is WriteEffect.REPLACED:
        return VictimResult(Fate.REPLACED, written.message, replaced_by_uid=written.replaced_by_uid)
    return VictimResult(done, written.message)


def _failure_note(message: str, *, retryable: bool) -> str:
    """A failed preemption's event note: its cause, then what to do about it."""
    if retryable:
        return f"{message}. Nothing to do yet: the preemption is tried again after a backoff."
    return (
        f"{message}. Retrying cannot help until this is fixed (grant the permission named, "
        "or correct the request); the pod is tried again once it changes."
    )

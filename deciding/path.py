"""The decision path: one preemption's decision, in the steps a person could follow.

`DecisionPath.decide` runs them in order:

1. fresh preemptor: the preemptor as the API server has it now: still there, same UID, not
   bound (a critical-admission preemptor is bound by nature: on its own node); otherwise the
   preemption stops here (`Stopped`, the reason from `preemption.standing.reason_to_stop`).
   Then wait for the cluster view's first sync. Outside the lock.
2. lock: the ledger-wide decision lock (`ledger.claims.decision_lock`), with a lock timeout;
   the cluster view held still;
3. claims: every other run's open claim (read incrementally, `ledger.claims.ClaimReader`),
   those the view already shows fulfilled set aside;
4. plan: the planner over the view with the claims applied and the preemptor as step 1 read
   it;
5. budget: whether the eviction budget lets the victims go now (held back: `throttled`);
6. write ahead: the decision, one `victim_chosen` per victim and, when the decision ends the
   run, its end (`ledger.events.decision_events`, `end_of_decision`), before any victim is
   touched.

Steps 2 to 6 run in one transaction holding the lock, so decisions are serial across every
worker replica and a claim exists from the moment its decision does. Requests that arrive
while a decision runs wait their turn (`deciding.queue`), and the next holder of the lock
decides them all in one acquisition: the claims are read and laid over the view once, and
each decision's own claim is laid over before the next is made, so the batch decides exactly
as one-by-one decisions would, for one lock, one claims read and one commit.

After the commit, outside the lock, what each planner run was given is handed to the
ledger's inputs recorder (`ledger.inputs_recorder`): under the lock only references are taken
(`preemption.recorded_inputs.capture`). Nothing here knows Temporal: the path is also what
`benchmarks/decision_path.py` measures, and each lock hold's duration is kept in `holds`.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from sqlalchemy import Connection, Engine

from preemptctl.deciding.queue import DecisionQueue, NoTurnError, Waiting
from preemptctl.kube.pods import PodLookup
from preemptctl.ledger.claims import ClaimReader, decision_lock, victims_chosen_since
from preemptctl.ledger.errors import LedgerUnavailableError
from preemptctl.ledger.events import LedgerEvent, decision_events, end_of_decision
from preemptctl.ledger.inputs import InputsRow
from preemptctl.ledger.inputs_recorder import (
    CLOSE_SECONDS,
    INPUTS_BACKLOG,
    INPUTS_MAX_BYTES,
    INPUTS_RETENTION_DAYS,
    InputsRecorder,
)
from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.payloads import Throttled
from preemptctl.ledger.writer import append_batch_on
from preemptctl.preemption.budget import WINDOW, seconds_until_budget_allows
from preemptctl.preemption.claims import Claim, ClaimBook
from preemptctl.preemption.decision import Decision, PodRef, Strategy, Verdict
from preemptctl.preemption.default_preemption import PreemptionArgs
from preemptctl.preemption.errors import PlannerInputError
from preemptctl.preemption.objects import Pod
from preemptctl.preemption.planner import plan_for
from preemptctl.preemption.recorded_inputs import Captured, capture
from preemptctl.preemption.snapshot import ClusterSnapshot
from preemptctl.preemption.standing import reason_to_stop


class ClusterView(Protocol):
    """What the path needs of the cluster view (`kube.view.ClusterView`)."""

    def read(self) -> AbstractContextManager[ClusterSnapshot]: ...

    def wait_ready(self, timeout: float | None = None) -> bool: ...


PodReader = Callable[[PodRef], PodLookup]
"""Reads one pod from the API server (`kube.pods.get_pod` with a client)."""


class ViewNotReadyError(Exception):
    """The cluster view has not finished its first sync: decide again later."""


@dataclass(frozen=True, slots=True)
class DecisionRequest:
    """One decision to make: for which run, which preemptor, how."""

    preemption_id: str
    run_id: str
    occurred_at: datetime
    preemptor: PodRef
    strategy: Strategy = Strategy.DEFAULT
    dry_run: bool = False
    throttled: int = 0  # times the budget held this run back before: the throttled event's step


@dataclass(slots=True)
class Decided:
    """The planner's decision, and how long the eviction budget holds it back (0: written)."""

    decision: Decision
    retry_after_seconds: float = 0.0
    message: str = ""
    claims: list[str] = field(default_factory=list)  # "ns/name" of the claims respected
    scheduler_name: str = "default-scheduler"  # the preemptor's, as step 1 read it


@dataclass(frozen=True, slots=True)
class Stopped:
    """1) The preemptor no longer needs room: why (nothing was decided or written)."""

    reason: str


@dataclass(slots=True)
class _Job:
    """A request with its preemptor as step 1 read it, and its inputs once planned."""

    request: DecisionRequest
    preemptor: Pod
    scheduler_name: str
    captured: Captured | None = None


class DecisionPath:
    """Decisions for one worker process: one claim reader, one sequence of decisions."""

    def __init__(
        self,
        ledger: Engine,
        view: ClusterView,
        read_pod: PodReader,
        *,
        identity: str = "preemptctl",
        planner_args: PreemptionArgs | None = None,
        evictions_per_minute: int = 0,
        lock_wait_seconds: float = 4.0,
        view_ready_timeout: float = 30.0,
        queue_wait_seconds: float = 60.0,
        max_batch: int = 32,
        inputs_max_bytes: int = INPUTS_MAX_BYTES,
        inputs_retention_days: int = INPUTS_RETENTION_DAYS,
        inputs_backlog: int = INPUTS_BACKLOG,
    ) -> None:
        self._ledger = ledger
        self._view = view
        self._read_pod = read_pod
        self._identity = identity
        self._planner_args = planner_args
        self._evictions_per_minute = evictions_per_minute
        self._lock_wait_seconds = lock_wait_seconds
        self._view_ready_timeout = view_ready_timeout
        self._inputs_max_bytes = inputs_max_bytes
        self.queue: DecisionQueue[_Job, Decided] = DecisionQueue(
            self._decide_batch, wait_seconds=queue_wait_seconds, max_batch=max_batch
        )
        """The requests waiting their turn (`deciding.queue`)."""
        self.inputs = (
            InputsRecorder(
                ledger, inputs_max_bytes, inputs_retention_days, inputs_backlog, self.queue.busy
            )
            if inputs_max_bytes
            else None
        )
        """Records each decision's inputs in the background (None: recording is off)."""
        self._claims = ClaimReader()
        self._decisions = 0
        self.holds: deque[tuple[float, int]] = deque(maxlen=10_000)
        """(seconds the decision lock was held, decisions made in that hold), newest last."""

    def close(self, timeout: float = CLOSE_SECONDS) -> int:
        """At shutdown, once no decision is under way: stop the inputs recorder after it
        has recorded what is queued (for at most `timeout` seconds); the number of
        decisions whose inputs were left unrecorded (`InputsRecorder.close`)."""
        return 0 if self.inputs is None else self.inputs.close(timeout)

    def decide(
        self, request: DecisionRequest, beat: Callable[[], object] = lambda: None
    ) -> Decided | Stopped:
        """Decide for `request.preemptor`: 1) outside the lock, then 2)-6) in this process's
        next batch. Raises `LedgerError` when the ledger cannot be reached or the lock not
        taken, `KubeCallError` when the API server cannot be, `ViewNotReadyError` before
        the view's first sync, and `PlannerInputError` for a preemptor the planner cannot
        read. `beat` is called about every second while the request waits its turn (the
        activity heartbeats with it). The decision's inputs are handed to the recorder after
        it is committed, by this thread."""
        job = self._fresh_preemptor(request)
        if isinstance(job, Stopped):
            return job
        try:
            decided = self.queue.submit(job, beat)
        except NoTurnError as error:
            raise LedgerUnavailableError(str(error)) from None
        self._record_inputs(job)
        return decided

    # -- the steps ----------------------------------------------------------------------------

    def _fresh_preemptor(self, request: DecisionRequest) -> _Job | Stopped:
        """1) The preemptor as the API server has it now, unless it no longer needs room;
        then the view synced."""
        lookup = self._read_pod(request.preemptor)
        standing = lookup.standing()
        critical = request.strategy is Strategy.CRITICAL_ADMISSION  # bound by nature
        reason = reason_to_stop(standing, standing.node if critical else None)
        if reason:
            return Stopped(reason)
        preemptor = lookup.decoded()
        if not self._view.wait_ready(self._view_ready_timeout):
            raise ViewNotReadyError("the cluster view has not finished its initial sync yet")
        return _Job(request, preemptor, lookup.scheduler_name)

    @contextmanager
    def _lock(self, decisions: int) -> Iterator[Connection]:
        """2) The decision lock, timed from acquired to released (after the commit)."""
        with decision_lock(self._ledger, lock_wait_seconds=self._lock_wait_seconds) as db:
            acquired = time.perf_counter()
            try:
                yield db
            finally:
                self.holds.append((time.perf_counter() - acquired, decisions))

    def _open_claims(self, db: Connection, snapshot: ClusterSnapshot) -> ClaimBook:
        """3) Every open claim; those the view already shows fulfilled set aside."""
        book = ClaimBook(self._claims.read(db))
        book.set_aside_fulfilled(snapshot)
        return book

    def _plan(self, snapshot: ClusterSnapshot, job: _Job, respected: list[str]) -> Decision:
        """4) The planner's decision over the snapshot (claims laid over it) with the
        preemptor as step 1 read it; references to its inputs kept on the job."""
        self._decisions += 1
        request = job.request
        with _planning_with(snapshot, job.preemptor):
            decision = plan_for(snapshot, job.preemptor, request.strategy, self._planner_args)
            if self._inputs_max_bytes:
                job.captured = capture(
                    snapshot,
                    job.preemptor,
                    request.strategy,
                    self._planner_args,
                    decision,
                    respected,
                )
        return decision

    def _budget(self, db: Connection, request: DecisionRequest, decision: Decision) -> float:
        """5) Seconds the eviction budget holds this decision back; 0 when it may go on."""
        budget = self._evictions_per_minute
        if decision.verdict is not Verdict.PREEMPT or request.dry_run or not budget:
            return 0.0
        recent = victims_chosen_since(db, request.occurred_at - WINDOW)
        return seconds_until_budget_allows(
            recent, len(decision.victims), budget, request.occurred_at
        )

    @staticmethod
    def _write_ahead(
        db: Connection, request: DecisionRequest, decision: Decision, context: dict[str, object]
    ) -> None:
        """6) The decision, its victims and, when the decision ends the run, its end."""
        args = (request.preemption_id, request.run_id, request.preemptor, decision)
        batch = decision_events(*args, request.occurred_at, context=context)
        end = end_of_decision(*args, request.occurred_at, dry_run=request.dry_run)
        if end is not None:
            batch.append(end)
        append_batch_on(db, batch)

    # -- one batch, under one hold of the lock ----------------------------------------------------

    def _decide_batch(self, batch: list[Waiting[_Job, Decided]]) -> None:
        """2)-6) for every queued request, in one transaction holding the lock."""
        with self._lock(len(batch)) as db, self._view.read() as snapshot, ExitStack() as overlay:
            claims = self._open_claims(db, snapshot)
            # A preemptor deciding again (a retried run) must not meet its own claim: those
            # are decided first, each without it, before the shared overlay.
            claimed = [w for w in batch if w.job.request.preemptor.uid in claims]
            for waiting in claimed:
                own = claims.without(waiting.job.request.preemptor.uid)
                with own.applied(snapshot, ""):
                    self._decide_one(db, snapshot, waiting, own.holders())
            overlay.enter_context(claims.applied(snapshot, ""))
            respected = claims.holders()
            for waiting in batch:
                if waiting in claimed:
                    continue
                decided = self._decide_one(db, snapshot, waiting, respected)
                claim = _claim_of(waiting.job.request, decided)
                if claim is not None:  # the next decision respects this one
                    overlay.enter_context(ClaimBook([claim]).applied(snapshot, ""))
                    respected = [*respected, claim.preemptor_uid]

    def _decide_one(
        self,
        db: Connection,
        snapshot: ClusterSnapshot,
        waiting: Waiting[_Job, Decided],
        respected: list[str],
    ) -> Decided | None:
        """4)-6) for one request; its answer (or the planner's refusal to read it) set on
        it, so the rest of the batch is decided whatever becomes of this one."""
        job = waiting.job
        request = job.request
        names = [snapshot.pods[uid].key for uid in respected if uid in snapshot.pods]
        try:
            decision = self._plan(snapshot, job, respected)
        except PlannerInputError as error:
            waiting.error = error
            return None
        wait = self._budget(db, request, decision)
        if wait:
            message = (
                f"held back by the eviction budget ({self._evictions_per_minute}/min): "
                f"{len(decision.victims)} victim(s) fit in {wait:.0f}s; {decision.message}"
            )
            append_batch_on(db, [_throttled(request, decision, wait, message)])
            waiting.answer = Decided(decision, wait, message, names, job.scheduler_name)
            return waiting.answer
        context = {"worker": self._identity, "sequence": self._decisions, "claims": names}
        self._write_ahead(db, request, decision, context)
        waiting.answer = Decided(decision, 0.0, decision.message, names, job.scheduler_name)
        return waiting.answer

    def _record_inputs(self, job: _Job) -> None:
        """After the commit: hand the decision's inputs to the recorder (never waits)."""
        captured, job.captured = job.captured, None
        if captured is None or self.inputs is None:
            return
        request = job.request
        row = InputsRow(
            request.preemption_id,
            request.run_id,
            request.preemptor,
            request.occurred_at,
            step=request.throttled,
        )
        self.inputs.submit(row, captured)


@contextmanager
def _planning_with(snapshot: ClusterSnapshot, fresh: Pod) -> Iterator[None]:
    """Plan with the preemptor exactly as the API server just returned it (the view may be a
    moment behind), then put the view's own copy back."""
    previous = snapshot.pods.get(fresh.uid)
    snapshot.upsert_pod(fresh)
    try:
        yield
    finally:
        if previous is not None:
            snapshot.upsert_pod(previous)
        else:
            snapshot.remove_pod(fresh.uid)


def _claim_of(request: DecisionRequest, decided: Decided | None) -> Claim | None:
    """The claim a written decision makes (none for a throttled, final or dry-run one)."""
    if decided is None or decided.retry_after_seconds or request.dry_run:
        return None
    decision = decided.decision
    if decision.verdict is not Verdict.PREEMPT or decision.nominated_node is None:
        return None
    return Claim(
        decision.preemptor.uid,
        decision.nominated_node,
        frozenset(v.uid for v in decision.victims),
        request.preemption_id,
        request.run_id,
    )


def _throttled(
    request: DecisionRequest, decision: Decision, wait: float, message: str
) -> LedgerEvent:
    return LedgerEvent(
        request.preemption_id,
        request.run_id,
        EventKind.THROTTLED,
        request.preemptor,
        node=decision.nominated_node,
        payload=Throttled(message, wait, [v.key for v in decision.victims]).to_json(),
        occurred_at=request.occurred_at,
        step=str(request.throttled),
    )

"""The decision path: lock, claims, plan, budget, write ahead — the serial part of a preemption.

`DecisionPath.decide` runs these steps in one transaction holding the ledger-wide decision
lock (`ledger.claims.decision_lock`), so that decisions are serial across every worker
replica and a claim exists from the moment its decision does:

2. lock: the decision lock, with a lock timeout; the cluster view held still;
3. claims: every other run's open claim (read incrementally, `ledger.claims.ClaimReader`),
   those the view already shows done set aside;
4. plan: the planner over the view with the claims applied and the preemptor as the API
   server just returned it;
5. budget: whether the eviction budget lets the victims go now;
6. write ahead: the decision, one `victim_chosen` per victim and, when the decision is
   final, its end, before any victim is touched.

Step 1 (is the preemptor still there, unbound?) needs the API server and happens before,
outside the lock, in the select activity. Nothing here knows Temporal: the path is also what
`benchmarks/decision_path.py` measures, and each lock hold's duration is kept in `holds`.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine

from preemptctl.ledger.claims import ClaimReader, decision_lock, victims_chosen_since
from preemptctl.ledger.errors import LedgerUnavailableError
from preemptctl.ledger.events import LedgerEvent, decision_events
from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.payloads import Ended, Throttled
from preemptctl.ledger.writer import append_batch_on
from preemptctl.preemption.budget import WINDOW, seconds_until_budget_allows
from preemptctl.preemption.claims import Claim, ClaimBook
from preemptctl.preemption.decision import Decision, PodRef, Strategy, Verdict
from preemptctl.preemption.decode import decode_pod
from preemptctl.preemption.default_preemption import PreemptionArgs
from preemptctl.preemption.errors import PlannerInputError
from preemptctl.preemption.planner import plan
from preemptctl.preemption.snapshot import ClusterSnapshot

SnapshotReader = Callable[[], AbstractContextManager[ClusterSnapshot]]


@dataclass(frozen=True, slots=True)
class DecisionRequest:
    """One decision to make: for which run, which preemptor (and its object as the API
    server just returned it), how."""

    preemption_id: str
    run_id: str
    occurred_at: datetime
    preemptor: PodRef
    preemptor_obj: dict[str, Any]
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


class _Waiting:
    """One queued request, and its answer once a batch has decided it."""

    def __init__(self, request: DecisionRequest) -> None:
        self.request = request
        self.done = threading.Event()
        self.answer: Decided | None = None
        self.error: BaseException | None = None

    def result(self) -> Decided:
        if self.error is not None:
            raise self.error
        assert self.answer is not None
        return self.answer


class DecisionPath:
    """Decisions for one worker process: one claim reader, one sequence of decisions.

    Requests that arrive while a decision runs are queued, and the next holder of the lock
    decides them all in one acquisition (as the scheduler's single loop takes one pod after
    another): the claims are read and laid over the view once, and each decision's own claim
    is laid over before the next is made, so the batch decides exactly as one-by-one
    decisions would, for one lock, one claims read and one commit."""

    def __init__(
        self,
        ledger: Engine,
        *,
        identity: str = "preemptctl",
        planner_args: PreemptionArgs | None = None,
        evictions_per_minute: int = 0,
        lock_wait_seconds: float = 4.0,
        queue_wait_seconds: float = 60.0,
        max_batch: int = 32,
    ) -> None:
        self._ledger = ledger
        self._identity = identity
        self._planner_args = planner_args
        self._evictions_per_minute = evictions_per_minute
        self._lock_wait_seconds = lock_wait_seconds
        self._queue_wait_seconds = queue_wait_seconds
        self._max_batch = max_batch
        self._claims = ClaimReader()
        self._local = threading.Lock()  # one batch at a time in this process
        self._queue: deque[_Waiting] = deque()
        self._queue_lock = threading.Lock()
        self._decisions = 0
        self.holds: deque[tuple[float, int]] = deque(maxlen=10_000)
        """(seconds the decision lock was held, decisions made in that hold), newest last."""

    def decide(
        self,
        request: DecisionRequest,
        read: SnapshotReader,
        beat: Callable[[], object] = lambda: None,
    ) -> Decided:
        """Decide for `request.preemptor` over the snapshot `read` yields, under the lock;
        raises `LedgerError` when the ledger cannot be reached or the lock not taken, and
        `PlannerInputError` for a preemptor the planner cannot read. `beat` is called about
        every second while the request waits its turn (the activity heartbeats with it)."""
        waiting = _Waiting(request)
        with self._queue_lock:
            self._queue.append(waiting)
        deadline = time.monotonic() + self._queue_wait_seconds
        while not self._local.acquire(timeout=1.0):
            beat()
            if waiting.done.is_set():  # a batch has decided it meanwhile
                return waiting.result()
            if time.monotonic() < deadline:
                continue
            with self._queue_lock:
                queued = waiting in self._queue
                if queued:
                    self._queue.remove(waiting)
            if queued:
                raise LedgerUnavailableError(
                    f"no turn to decide within {self._queue_wait_seconds:g}s; retry"
                )
            while not waiting.done.wait(1.0):  # a batch has taken it: the answer is coming
                beat()
            return waiting.result()
        try:
            while not waiting.done.is_set():
                with self._queue_lock:
                    batch = [
                        self._queue.popleft() for _ in range(min(self._max_batch, len(self._queue)))
                    ]
                if not batch:  # cannot happen: a batch answers everything it took
                    raise RuntimeError(f"the decision for {request.preemptor.key} was lost")
                self._decide_batch(batch, read)
        finally:
            self._local.release()
        return waiting.result()

    def _decide_batch(self, batch: list[_Waiting], read: SnapshotReader) -> None:
        try:
            with self._lock(len(batch)) as db, read() as snapshot, ExitStack() as overlay:
                claims = self._open_claims(db, snapshot)
                # A preemptor deciding again (a retried run) must not meet its own claim:
                # those are decided first, each without it, before the shared overlay.
                claimed = [w for w in batch if w.request.preemptor.uid in claims]
                for waiting in claimed:
                    own = claims.without(waiting.request.preemptor.uid)
                    with own.applied(snapshot, ""):
                        self._decide_one(db, snapshot, waiting, own.holders())
                overlay.enter_context(claims.applied(snapshot, ""))
                respected = claims.holders()
                for waiting in batch:
                    if waiting in claimed:
                        continue
                    decided = self._decide_one(db, snapshot, waiting, respected)
                    claim = _claim_of(waiting.request, decided)
                    if claim is not None:  # the next decision respects this one
                        overlay.enter_context(ClaimBook([claim]).applied(snapshot, ""))
                        respected = [*respected, claim.preemptor_uid]
        except BaseException as error:
            for waiting in batch:
                if not waiting.done.is_set():
                    waiting.error = error
                    waiting.done.set()
            if not isinstance(error, Exception):
                raise
        else:
            for waiting in batch:
                waiting.done.set()

    def _decide_one(
        self, db: Connection, snapshot: ClusterSnapshot, waiting: _Waiting, respected: list[str]
    ) -> Decided | None:
        """Plan, budget and write ahead one request; its answer (or error) set on it."""
        request = waiting.request
        names = [snapshot.pods[uid].key for uid in respected if uid in snapshot.pods]
        try:
            decision = self._plan(snapshot, request)
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
            waiting.answer = Decided(decision, wait, message, names)
            return waiting.answer
        context = {"worker": self._identity, "sequence": self._decisions, "claims": names}
        self._write_ahead(db, request, decision, context)
        waiting.answer = Decided(decision, 0.0, decision.message, names)
        return waiting.answer

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
        """3) Every open claim; those the view already shows done set aside."""
        book = ClaimBook(
            Claim(claim.preemptor_uid, claim.node, claim.victim_uids)
            for claim in self._claims.read(db)
        )
        book.settled(snapshot)
        return book

    def _plan(self, snapshot: ClusterSnapshot, request: DecisionRequest) -> Decision:
        """4) The planner's decision over the snapshot (claims laid over it) with the
        preemptor as the API server just returned it."""
        self._decisions += 1
        with _planning_with(snapshot, request.preemptor_obj):
            return plan(snapshot, request.preemptor.key, request.strategy, self._planner_args)

    def _budget(self, db: Connection, request: DecisionRequest, decision: Decision) -> float:
        """5) Seconds the eviction budget holds this decision back; 0 when it may go on."""
        budget = self._evictions_per_minute
        if decision.status is not Verdict.PREEMPT or request.dry_run or not budget:
            return 0.0
        recent = victims_chosen_since(db, request.occurred_at - WINDOW)
        return seconds_until_budget_allows(
            recent, len(decision.victims), budget, request.occurred_at
        )

    @staticmethod
    def _write_ahead(
        db: Connection, request: DecisionRequest, decision: Decision, context: dict[str, Any]
    ) -> None:
        """6) The decision, its victims and, when the decision is final, its end."""
        payload = {**decision.to_json(), "context": context}
        batch = decision_events(
            request.preemption_id, request.run_id, request.preemptor, payload, request.occurred_at
        )
        end: EventKind | None = None
        if decision.status is Verdict.FITS_WITHOUT_PREEMPTION:
            end = EventKind.COMPLETED
        elif decision.status is Verdict.PREEMPT and request.dry_run:
            end = EventKind.DRY_RUN
        if end is not None:
            batch.append(
                LedgerEvent(
                    request.preemption_id,
                    request.run_id,
                    end,
                    request.preemptor,
                    node=decision.nominated_node,
                    payload=Ended(reason=decision.message).to_json(),
                    occurred_at=request.occurred_at,
                )
            )
        append_batch_on(db, batch)


@contextmanager
def _planning_with(snapshot: ClusterSnapshot, obj: dict[str, Any]) -> Iterator[None]:
    """Plan with the preemptor exactly as the API server just returned it (the view may be a
    moment behind), then put the view's own copy back."""
    fresh = decode_pod(obj)
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
    if decision.status is not Verdict.PREEMPT or decision.nominated_node is None:
        return None
    return Claim(
        decision.preemptor.uid, decision.nominated_node, frozenset(v.uid for v in decision.victims)
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

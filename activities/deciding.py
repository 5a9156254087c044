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

After the commit, outside the lock, what each planner run was given is recorded
(`ledger.inputs`, for `preemptctl replay --decision`): under the lock only references are
taken (`preemption.recorded_inputs.capture`); the encoding, compression and append happen
on a background thread (`InputsRecorder`) with a bounded backlog, which also prunes inputs
older than the retention about once an hour, and at shutdown (`DecisionPath.close`)
records what is queued for a bounded time, then stops. A failure to record is logged,
never fails the decision.

Step 1 (is the preemptor still there, unbound?) needs the API server and happens before,
outside the lock, in the select activity. Nothing here knows Temporal: the path is also what
`benchmarks/decision_path.py` measures, and each lock hold's duration is kept in `holds`.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine

import preemptctl
from preemptctl.ledger.claims import ClaimReader, decision_lock, victims_chosen_since
from preemptctl.ledger.errors import LedgerError, LedgerUnavailableError
from preemptctl.ledger.events import LedgerEvent, decision_events
from preemptctl.ledger.inputs import InputsRow, prune, record
from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.payloads import Terminal, Throttled
from preemptctl.ledger.vocabulary import KIND_OF_OUTCOME, outcome_of_decision
from preemptctl.ledger.writer import append_batch_on
from preemptctl.preemption.budget import WINDOW, seconds_until_budget_allows
from preemptctl.preemption.claims import Claim, ClaimBook
from preemptctl.preemption.decision import PLANNER_VERSION, Decision, PodRef, Strategy, Verdict
from preemptctl.preemption.decode import decode_pod
from preemptctl.preemption.default_preemption import PreemptionArgs
from preemptctl.preemption.errors import PlannerInputError
from preemptctl.preemption.objects import Pod
from preemptctl.preemption.planner import plan
from preemptctl.preemption.recorded_inputs import Captured, EncodedCache, capture, dumps
from preemptctl.preemption.snapshot import ClusterSnapshot

log = logging.getLogger(__name__)

INPUTS_MAX_BYTES = 4 * 1024 * 1024
"""Compressed inputs above this are recorded as a "too large" marker (0: record none)."""
INPUTS_RETENTION_DAYS = 30
PRUNE_EVERY_SECONDS = 3600.0
INPUTS_BACKLOG = 16
"""Decisions whose inputs may wait for the recorder; past that, a marker says they were
not recorded (recording a 5,000-node decision costs several times the decision itself, and
a burst of decisions must not wait for it)."""
YIELD_SECONDS = 5.0
"""At most this long the recorder waits, per decision, for the decision path to be idle."""
YIELD_POLL_SECONDS = 0.005
CLOSE_SECONDS = 10.0
"""At shutdown, at most this long the recorder goes on recording what is queued."""
RECORDING_VERSION = f"{preemptctl.__version__} planner {PLANNER_VERSION}"[:64]

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
        self.captured: Captured | None = None  # the planner's inputs, to record after

    def result(self) -> Decided:
        if self.error is not None:
            raise self.error
        assert self.answer is not None
        return self.answer


class InputsRecorder:
    """One background thread per worker process that encodes, compresses and appends each
    decision's inputs, and prunes them about hourly (`ledger.inputs`), so that neither the
    decision lock nor the activity waits for it.

    Its backlog is bounded: a decision that finds it full is recorded as a marker row ("not
    recorded: ..."), so a burst of decisions costs no more than the recorder keeps up with,
    and `replay --decision` says why it cannot replay those. `close` (at shutdown) records
    what is queued for a bounded time and stops the thread; inputs still queued then are
    lost (no row: replay says none was recorded), and a decision made after it gets a
    marker row. A ledger that refuses is logged: the decision stands without its inputs."""

    def __init__(
        self,
        ledger: Engine,
        max_bytes: int,
        retention_days: int,
        backlog: int,
        busy: Callable[[], bool] = lambda: False,
    ) -> None:
        self._ledger = ledger
        self._busy = busy
        self._max_bytes = max_bytes
        self._retention_days = retention_days
        self._backlog = backlog
        self._queue: queue.Queue[tuple[DecisionRequest, Captured] | None] = queue.Queue(backlog)
        self._start = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._closing = threading.Event()  # no more yielding to decisions: shutting down
        self._stop = threading.Event()  # past close's deadline: drop what is left
        self._pruned_at = -PRUNE_EVERY_SECONDS  # monotonic; the first recording prunes
        self._encoded = EncodedCache()  # pods' and nodes' JSON, reused between decisions
        self.skipped = 0
        """Decisions whose inputs were not recorded because the backlog was full."""
        self._behind: deque[DecisionRequest] = deque()
        """Decisions that found the backlog full, waiting for the thread to write their
        marker rows (a transaction each, kept off the deciding thread)."""
        self._dropped = 0  # queued when close's deadline passed

    def submit(self, request: DecisionRequest, captured: Captured) -> None:
        """Queue one decision's inputs; a marker row instead when the backlog is full or
        the recorder is closed."""
        if not self._started():
            self._append(request, b"", omitted="not recorded: the worker was shutting down")
            return
        try:
            self._queue.put_nowait((request, captured))
        except queue.Full:
            # The backlog is full, so the thread has work queued: it writes the marker
            # after its next item, before that item counts as done (`wait` sees it).
            self.skipped += 1
            self._behind.append(request)

    def wait(self) -> None:
        """Until every queued decision's inputs are recorded (tests; orderly shutdown)."""
        self._queue.join()

    def close(self, timeout: float = CLOSE_SECONDS) -> int:
        """Record what is queued for at most `timeout` seconds (without waiting for the
        decision path any more), then stop the thread; the number of decisions whose
        inputs were left unrecorded. Later submissions get a marker row."""
        with self._start:
            self._closed = True
            thread = self._thread
        if thread is None:
            return 0
        deadline = time.monotonic() + timeout
        self._closing.set()
        with suppress(queue.Full):  # after what is queued: the thread ends there
            self._queue.put(None, timeout=timeout)
        thread.join(max(0.0, deadline - time.monotonic()))
        self._stop.set()  # what the thread has not taken yet is dropped
        left = 0
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            left += item is not None
            self._queue.task_done()
        if thread.is_alive():  # recording one still: it ends after it
            with suppress(queue.Full):
                self._queue.put_nowait(None)
        self._mark_behind()  # markers are cheap: every decision that found it full has one
        left += self._dropped
        if left or thread.is_alive():
            log.warning(
                "decision inputs recorder closed: %d decision(s)' inputs not recorded%s",
                left,
                ", one still being appended" if thread.is_alive() else "",
            )
        return left

    def _started(self) -> bool:
        """The thread is running (started now if need be); False once closed."""
        with self._start:
            if self._closed:
                return False
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="decision-inputs", daemon=True
                )
                self._thread.start()
            return True

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:  # closed: everything before it is recorded
                    return
                if self._stop.is_set():  # past close's deadline
                    self._dropped += 1
                    continue
                request, captured = item
                try:
                    self._yield()
                    self._append(request, dumps(captured, self._encoded))
                    self._prune()
                except Exception:  # a bug here must not stop recording for good
                    log.exception("recording the inputs of run %s failed", request.run_id)
            finally:
                self._mark_behind()
                self._queue.task_done()

    def _mark_behind(self) -> None:
        """Write the marker row of each decision that found the backlog full."""
        while True:
            try:
                request = self._behind.popleft()
            except IndexError:
                return
            self._append(
                request,
                b"",
                omitted=f"not recorded: the recorder was {self._backlog} decisions behind",
            )

    def _yield(self) -> None:
        """Let a decision queued or under way go first: encoding holds the GIL, and on a
        small machine its cores. Bounded, so that a steady stream of decisions still gets
        its inputs recorded (or, once the backlog is full, marked as not recorded)."""
        deadline = time.monotonic() + YIELD_SECONDS
        while not self._closing.is_set() and self._busy() and time.monotonic() < deadline:
            time.sleep(YIELD_POLL_SECONDS)

    def _append(self, request: DecisionRequest, raw: bytes, omitted: str | None = None) -> None:
        row = InputsRow(
            request.preemption_id,
            request.run_id,
            request.preemptor,
            request.occurred_at,
            RECORDING_VERSION,
            raw,
            step=request.throttled,
            omitted=omitted,
        )
        try:
            record(self._ledger, row, max_bytes=self._max_bytes)
        except LedgerError as error:
            log.warning(
                "the inputs of the decision for %s (run %s) were not recorded: %s",
                request.preemptor.key,
                request.run_id,
                error,
            )

    def _prune(self) -> None:
        now = time.monotonic()
        if now - self._pruned_at < PRUNE_EVERY_SECONDS:
            return
        self._pruned_at = now
        try:
            pruned = prune(self._ledger, self._retention_days)
        except LedgerError as error:
            log.warning("pruning decision inputs failed: %s", error)
            return
        if pruned:
            log.info("pruned %d decision input(s) older than %d days", pruned, self._retention_days)


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
        inputs_max_bytes: int = INPUTS_MAX_BYTES,
        inputs_retention_days: int = INPUTS_RETENTION_DAYS,
        inputs_backlog: int = INPUTS_BACKLOG,
    ) -> None:
        self._ledger = ledger
        self._identity = identity
        self._planner_args = planner_args
        self._evictions_per_minute = evictions_per_minute
        self._lock_wait_seconds = lock_wait_seconds
        self._queue_wait_seconds = queue_wait_seconds
        self._max_batch = max_batch
        self._inputs_max_bytes = inputs_max_bytes
        self.inputs = (
            InputsRecorder(
                ledger, inputs_max_bytes, inputs_retention_days, inputs_backlog, self._busy
            )
            if inputs_max_bytes
            else None
        )
        """Records each decision's inputs in the background (None: recording is off)."""
        self._claims = ClaimReader()
        self._local = threading.Lock()  # one batch at a time in this process
        self._queue: deque[_Waiting] = deque()
        self._queue_lock = threading.Lock()
        self._decisions = 0
        self.holds: deque[tuple[float, int]] = deque(maxlen=10_000)
        """(seconds the decision lock was held, decisions made in that hold), newest last."""

    def close(self, timeout: float = CLOSE_SECONDS) -> int:
        """At shutdown, once no decision is under way: stop the inputs recorder after it
        has recorded what is queued (for at most `timeout` seconds); the number of
        decisions whose inputs were left unrecorded (`InputsRecorder.close`)."""
        return 0 if self.inputs is None else self.inputs.close(timeout)

    def _busy(self) -> bool:
        """A decision is queued or under way in this process (the recorder waits for it)."""
        return bool(self._queue) or self._local.locked()

    def decide(
        self,
        request: DecisionRequest,
        read: SnapshotReader,
        beat: Callable[[], object] = lambda: None,
    ) -> Decided:
        """Decide for `request.preemptor` over the snapshot `read` yields, under the lock;
        raises `LedgerError` when the ledger cannot be reached or the lock not taken, and
        `PlannerInputError` for a preemptor the planner cannot read. `beat` is called about
        every second while the request waits its turn (the activity heartbeats with it).
        The decision's inputs are recorded after it is committed, by this thread."""
        waiting = _Waiting(request)
        decided = self._decide(waiting, read, beat)
        self._record_inputs(waiting)
        return decided

    def _decide(
        self, waiting: _Waiting, read: SnapshotReader, beat: Callable[[], object]
    ) -> Decided:
        request = waiting.request
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
            decision, waiting.captured = self._plan(snapshot, request, respected)
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
        book = ClaimBook(self._claims.read(db))
        book.set_aside_fulfilled(snapshot)
        return book

    def _plan(
        self, snapshot: ClusterSnapshot, request: DecisionRequest, respected: list[str]
    ) -> tuple[Decision, Captured | None]:
        """4) The planner's decision over the snapshot (claims laid over it) with the
        preemptor as the API server just returned it; and references to its inputs."""
        self._decisions += 1
        with _planning_with(snapshot, request.preemptor_obj) as preemptor:
            decision = plan(snapshot, request.preemptor.key, request.strategy, self._planner_args)
            if not self._inputs_max_bytes:
                return decision, None
            captured = capture(
                snapshot, preemptor, request.strategy, self._planner_args, decision, respected
            )
            return decision, captured

    def _record_inputs(self, waiting: _Waiting) -> None:
        """After the commit: hand the decision's inputs to the recorder (never waits)."""
        captured, waiting.captured = waiting.captured, None
        if captured is not None and waiting.answer is not None and self.inputs is not None:
            self.inputs.submit(waiting.request, captured)

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
        db: Connection, request: DecisionRequest, decision: Decision, context: dict[str, Any]
    ) -> None:
        """6) The decision, its victims and, when the decision is final, its end."""
        payload = {**decision.to_json(), "context": context}
        batch = decision_events(
            request.preemption_id, request.run_id, request.preemptor, payload, request.occurred_at
        )
        outcome = outcome_of_decision(decision.verdict, request.dry_run)
        end = None if outcome is None else KIND_OF_OUTCOME[outcome]
        if end is not None and end is not batch[0].kind:  # a refusal's decision event ends it
            batch.append(
                LedgerEvent(
                    request.preemption_id,
                    request.run_id,
                    end,
                    request.preemptor,
                    node=decision.nominated_node,
                    payload=Terminal(reason=decision.message).to_json(),
                    occurred_at=request.occurred_at,
                )
            )
        append_batch_on(db, batch)


@contextmanager
def _planning_with(snapshot: ClusterSnapshot, obj: dict[str, Any]) -> Iterator[Pod]:
    """Plan with the preemptor exactly as the API server just returned it (the view may be a
    moment behind), then put the view's own copy back."""
    fresh = decode_pod(obj)
    previous = snapshot.pods.get(fresh.uid)
    snapshot.upsert_pod(fresh)
    try:
        yield fresh
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

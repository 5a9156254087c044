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
from contextlib import AbstractContextManager, contextmanager
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


class DecisionPath:
    """Decisions for one worker process: one claim reader, one sequence of decisions."""

    def __init__(
        self,
        ledger: Engine,
        *,
        identity: str = "preemptctl",
        planner_args: PreemptionArgs | None = None,
        evictions_per_minute: int = 0,
        lock_wait_seconds: float = 10.0,
    ) -> None:
        self._ledger = ledger
        self._identity = identity
        self._planner_args = planner_args
        self._evictions_per_minute = evictions_per_minute
        self._lock_wait_seconds = lock_wait_seconds
        self._claims = ClaimReader()
        self._local = threading.Lock()  # one reader of the claim cache at a time
        self._decisions = 0
        self.holds: deque[float] = deque(maxlen=10_000)
        """Seconds each decision held the decision lock, newest last."""

    def decide(self, request: DecisionRequest, read: SnapshotReader) -> Decided:
        """Decide for `request.preemptor` over the snapshot `read` yields, under the lock;
        raises `LedgerError` when the ledger cannot be reached or the lock not taken."""
        with self._lock() as db, read() as snapshot:
            book = self._open_claims(db, snapshot, request.preemptor)
            decision = self._plan(snapshot, book, request)
            wait = self._budget(db, request, decision)
            claims = [snapshot.pods[uid].key for uid in book.holders() if uid in snapshot.pods]
            if wait:
                message = (
                    f"held back by the eviction budget ({self._evictions_per_minute}/min): "
                    f"{len(decision.victims)} victim(s) fit in {wait:.0f}s; {decision.message}"
                )
                append_batch_on(db, [_throttled(request, decision, wait, message)])
                return Decided(decision, wait, message, claims)
            context = {"worker": self._identity, "sequence": self._decisions, "claims": claims}
            self._write_ahead(db, request, decision, context)
        return Decided(decision, 0.0, decision.message, claims)

    @contextmanager
    def _lock(self) -> Iterator[Connection]:
        """2) The decision lock, timed from acquired to released (after the commit)."""
        if not self._local.acquire(timeout=self._lock_wait_seconds):
            raise LedgerUnavailableError(
                f"the decision lock was not free within {self._lock_wait_seconds:g}s; retry"
            )
        try:
            with decision_lock(self._ledger, lock_wait_seconds=self._lock_wait_seconds) as db:
                acquired = time.perf_counter()
                try:
                    yield db
                finally:
                    self.holds.append(time.perf_counter() - acquired)
        finally:
            self._local.release()

    def _open_claims(
        self, db: Connection, snapshot: ClusterSnapshot, preemptor: PodRef
    ) -> ClaimBook:
        """3) Every other run's open claim; those the view already shows done set aside."""
        book = ClaimBook(
            Claim(claim.preemptor_uid, claim.node, claim.victim_uids)
            for claim in self._claims.read(db)
            if claim.preemptor_uid != preemptor.uid
        )
        book.settled(snapshot)
        return book

    def _plan(
        self, snapshot: ClusterSnapshot, book: ClaimBook, request: DecisionRequest
    ) -> Decision:
        """4) The planner's decision, with the claims applied and the fresh preemptor.
        Raises `PlannerInputError` for a preemptor the planner cannot read."""
        self._decisions += 1
        preemptor = request.preemptor
        with book.applied(snapshot, preemptor.uid), _planning_with(snapshot, request.preemptor_obj):
            return plan(snapshot, preemptor.key, request.strategy, self._planner_args)

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

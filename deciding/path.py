"""The decision path: one preemption's decision, in the steps a person could follow.

`DecisionPath.decide` runs them in order:

1. fresh preemptor: the preemptor as the API server has it now: still there, same UID, not
   bound (a critical-admission preemptor is bound by nature: on its own node); otherwise the
   preemption stops here (`Stopped`, the reason from `preemption.standing.reason_to_stop`),
   unless the run decided before (it resumes: `Resumed`).
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

`DecisionPath.decide_group` runs the same steps for a pending pod group (one group
preemption): 1) the group as the API server has it (still there with this UID; a group a
pod label names, as the view shows its pods) and, in the view, with a pending member
(`preemption.standing.reason_to_stop_group`); 4) the planner's `plan_pod_group`; 6) the
decision, one `member_placed` per member it placed and one `victim_chosen` per victim
(naming its unit), and its end when final (`ledger.events.group_decision_events`). Pod and
group decisions share the lock, the queue and the claims: a group's claim holds every
victim it chose, on any node, and each member's room on its node, and every later
decision, pod or group, counts it as done.

Step 4 runs first, outside the lock (issue 29: the planner is most of a decision's cost, and
the lock makes every replica wait): against the claims this process knows of (the last
read's, and its own decisions since) with the view held still. Then steps 2, 3, 5 and 6 run
in one transaction holding the lock, where the read of the claims checks the plans: a claim
they did not know of (another replica decided meanwhile), or a run of the batch that decided
already, and the batch is planned again under the lock, with the view held still, as if it
had never been planned ahead. So decisions are serial across every worker replica, and a
claim exists from the moment its decision does. Requests that arrive while a decision runs
wait their turn (`deciding.queue`), and the next turn decides them all together, the most
important first (pod or group, by priority): the claims are laid over the view once, and
each decision's own claim is laid over before the next is planned, so the batch decides
exactly as one-by-one decisions in priority order would, for one lock, one claims read and
one commit.

After the commit, outside the lock, what each planner run was given is handed to the
ledger's inputs recorder (`ledger.inputs_recorder`): when planning, only references are taken
(`preemption.recorded_inputs.capture`, `capture_group` for a group). Nothing here
knows Temporal: the path is also what `benchmarks/decision_path.py` measures, and each lock
hold's duration is kept in `holds`.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from sqlalchemy import Connection, Engine

from preemptctl.deciding.queue import DecisionQueue, NoTurnError, Waiting
from preemptctl.kube.pods import PodGroupLookup, PodLookup, Presence
from preemptctl.ledger.claims import (
    DECISION_SECONDS,
    ClaimReader,
    RunsOf,
    decision_engine,
    decision_lock,
    victims_chosen_since,
)
from preemptctl.ledger.errors import LedgerUnavailableError
from preemptctl.ledger.events import (
    LedgerEvent,
    decision_events,
    end_of_decision,
    end_of_group_decision,
    group_decision_events,
)
from preemptctl.ledger.inputs import InputsRow
from preemptctl.ledger.inputs_recorder import (
    CLOSE_SECONDS,
    INPUTS_BACKLOG,
    INPUTS_MAX_BYTES,
    INPUTS_RETENTION_DAYS,
    InputsRecorder,
)
from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.payloads import Retried, Throttled
from preemptctl.ledger.queries import decided
from preemptctl.ledger.writer import append_batch_on
from preemptctl.preemption.budget import WINDOW, seconds_until_budget_allows
from preemptctl.preemption.claims import Claim, ClaimBook
from preemptctl.preemption.decision import Decision, PodRef, Strategy, Verdict
from preemptctl.preemption.default_preemption import PreemptionArgs
from preemptctl.preemption.errors import PlannerInputError
from preemptctl.preemption.group_decision import GroupDecision, GroupRef
from preemptctl.preemption.objects import Pod, PodGroup
from preemptctl.preemption.planner import plan_for, plan_group
from preemptctl.preemption.recorded_inputs import Captured, capture, capture_group
from preemptctl.preemption.snapshot import ClusterSnapshot
from preemptctl.preemption.standing import (
    GroupStanding,
    Standing,
    group_standing_of,
    reason_to_stop,
    reason_to_stop_group,
)

SHADOW_WAITS = 3
"""How often a dry run found ineligible decides again (`_wait_for_the_scheduler`)."""
SHADOW_WAIT_SECONDS = 1.0


class ClusterView(Protocol):
    """What the path needs of the cluster view (`kube.view.ClusterView`)."""

    def read(self) -> AbstractContextManager[ClusterSnapshot]: ...

    def wait_ready(self, timeout: float | None = None) -> bool: ...


PodReader = Callable[[PodRef], PodLookup]
"""Reads one pod from the API server (`kube.pods.get_pod` with a client)."""

GroupReader = Callable[[GroupRef], PodGroupLookup]
"""Reads one PodGroup from the API server (`kube.pods.get_pod_group` with a client)."""


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
    started_by: str = "trigger"  # who started the run, for its `retried` event
    retry_reason: str = ""


@dataclass(slots=True)
class Decided:
    """The planner's decision, and how long the eviction budget holds it back (0: written)."""

    decision: Decision
    retry_after_seconds: float = 0.0
    message: str = ""
    claims: list[str] = field(default_factory=list)  # "ns/name" of the claims respected
    scheduler_name: str = "default-scheduler"  # the preemptor's, as step 1 read it
    # The victims the view showed terminating when deciding (their deletion has begun), and
    # the preemptor's nomination as step 1 read it: what the steps after the decision need
    # to know of the cluster without reading it again.
    terminating: list[str] = field(default_factory=list)
    nominated_node_seen: str | None = None
    # Each victim's own node (by UID), as the view showed it: a gang taken whole for one pod
    # has members on other nodes than the one the pod is nominated to.
    victim_nodes: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Stopped:
    """1) The preemptor no longer needs room: why (nothing was decided or written)."""

    reason: str


@dataclass(frozen=True, slots=True)
class GroupDecisionRequest:
    """One group decision to make: for which run of which group preemption, for which group."""

    preemption_id: str
    run_id: str
    occurred_at: datetime
    group: GroupRef
    dry_run: bool = False
    throttled: int = 0  # times the budget held this run back before: the throttled event's step
    started_by: str = "trigger"
    retry_reason: str = ""


@dataclass(frozen=True, slots=True)
class Resumed:
    """The run decided before (its select was asked again: a worker lost after the decision
    was written, before the workflow recorded its answer). A run decides once: its caller
    answers from the decision on record, not from a new one."""

    preemption_id: str
    run_id: str


@dataclass(slots=True)
class DecidedGroup:
    """A group decision, or why there is none: `stopped` says why the group no longer needs
    room (1; nothing decided or written, `decision` None). `retry_after_seconds` is how long
    the eviction budget holds the decision back (0: written ahead); `claims` the
    "namespace/name" of the claims it respected."""

    decision: GroupDecision | None
    stopped: str = ""
    retry_after_seconds: float = 0.0
    message: str = ""
    claims: list[str] = field(default_factory=list)
    terminating: list[str] = field(default_factory=list)  # as `Decided.terminating`


@dataclass(slots=True)
class _Job:
    """A request with its preemptor as step 1 read it, and its inputs once planned."""

    request: DecisionRequest
    preemptor: Pod
    scheduler_name: str
    captured: Captured | None = None

    @property
    def holder(self) -> str:
        """The UID its claim is held under."""
        return self.request.preemptor.uid

    @property
    def priority(self) -> int:
        return self.preemptor.priority


@dataclass(slots=True)
class _GroupJob:
    """A group request with its PodGroup as step 1 read it (None: a group a label names)."""

    request: GroupDecisionRequest
    fresh: PodGroup | None
    captured: Captured | None = None

    @property
    def holder(self) -> str:
        return self.request.group.uid

    @property
    def priority(self) -> int:
        return self.fresh.priority if self.fresh is not None else self.request.group.priority


_AnyJob = _Job | _GroupJob
_AnyAnswer = Decided | DecidedGroup | Resumed


@dataclass(slots=True)
class _Planned:
    """4) One request planned: its decision (None: the planner could not read it, `error`),
    the holders of the claims it respected, the claim it makes once written, and what the
    view showed that the steps after the plan need (each victim's node, those terminating,
    the members placed, whether the preemptor or a member was nominated already): 5) and 6)
    read no view, so they may run after the view has moved on."""

    waiting: Waiting[_AnyJob, _AnyAnswer]
    decision: Decision | GroupDecision | None
    respected: list[str]
    claim: Claim | None = None
    victim_nodes: dict[str, str] = field(default_factory=dict)
    terminating: list[str] = field(default_factory=list)
    placed: list[tuple[PodRef, str]] = field(default_factory=list)
    nominated: bool = False
    error: PlannerInputError | None = None
    sequence: int = 0  # its planner run's, in this process


@dataclass(frozen=True, slots=True)
class _Ahead:
    """A batch planned outside the lock: against which claims (`known`, by run), and each
    request's plan, in the order planned."""

    known: frozenset[tuple[str, str]]
    planned: list[_Planned]


class DecisionPath:
    """Decisions for one worker process: one claim reader, one sequence of decisions."""

    def __init__(
        self,
        ledger: Engine,
        view: ClusterView,
        read_pod: PodReader,
        *,
        read_group: GroupReader | None = None,
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
        # The deciding transactions' own small pool, its connections' timeouts set once.
        self._engine = decision_engine(
            ledger, lock_wait_seconds=lock_wait_seconds, statement_seconds=DECISION_SECONDS
        )
        self._view = view
        self._read_pod = read_pod
        self._read_group = read_group
        self._identity = identity
        self._planner_args = planner_args
        self._evictions_per_minute = evictions_per_minute
        self._lock_wait_seconds = lock_wait_seconds
        self._view_ready_timeout = view_ready_timeout
        self._inputs_max_bytes = inputs_max_bytes
        self.queue: DecisionQueue[_AnyJob, _AnyAnswer] = DecisionQueue(
            self._decide_batch,
            wait_seconds=queue_wait_seconds,
            max_batch=max_batch,
            priority=lambda job: job.priority,
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
        self.planned_again = 0
        """Batches planned ahead whose plans no longer stood under the lock."""

    def prime(self) -> None:
        """Read every open claim once now (the worker does, once its view has synced), so
        that the first decision reads only what changed, as every later one does."""
        with self._lock(0) as db:
            self._claims.read(db)

    @property
    def engine(self) -> Engine:
        """The engine the deciding transactions run on (`ledger.claims.decision_engine`)."""
        return self._engine

    def close(self, timeout: float = CLOSE_SECONDS) -> int:
        """At shutdown, once no decision is under way: stop the inputs recorder after it
        has recorded what is queued (for at most `timeout` seconds); the number of
        decisions whose inputs were left unrecorded (`InputsRecorder.close`)."""
        left = 0 if self.inputs is None else self.inputs.close(timeout)
        if self._engine is not self._ledger:
            self._engine.dispose()
        return left

    def decide(
        self, request: DecisionRequest, beat: Callable[[], object] = lambda: None
    ) -> Decided | Stopped | Resumed:
        """Decide for `request.preemptor`: 1) outside the lock, then 2)-6) in this process's
        next batch. Raises `LedgerError` when the ledger cannot be reached or the lock not
        taken, `KubeCallError` when the API server cannot be, `ViewNotReadyError` before
        the view's first sync, and `PlannerInputError` for a preemptor the planner cannot
        read. `beat` is called about every second while the request waits its turn (the
        activity heartbeats with it). The decision's inputs are handed to the recorder after
        it is committed, by this thread."""
        job = self._fresh_preemptor(request)
        if isinstance(job, Stopped):
            return self._resumed_if_decided(request) or job
        decided = self._submit(job, beat)
        self._record_inputs(job)
        assert isinstance(decided, Decided | Resumed)
        return decided

    def decide_group(
        self, request: GroupDecisionRequest, beat: Callable[[], object] = lambda: None
    ) -> DecidedGroup | Resumed:
        """Decide for the pod group `request.group`: 1) outside the lock, then 2)-6) in this
        process's next batch, beside pod decisions. Raises as `decide` does (a PodGroup the
        planner cannot read, or a group missing from a view that has synced, is a
        `PlannerInputError`)."""
        job = self._fresh_group(request)
        if isinstance(job, Stopped):
            resumed = self._resumed_if_decided(request)
            return resumed or DecidedGroup(None, stopped=job.reason, message=job.reason)
        decided = self._submit(job, beat)
        self._record_inputs(job)
        assert isinstance(decided, DecidedGroup | Resumed)
        return decided

    def _resumed_if_decided(
        self, request: DecisionRequest | GroupDecisionRequest
    ) -> Resumed | None:
        """A run whose preemptor (or group) no longer needs room, but that decided before:
        its worker was lost after the decision, and the victims it deleted since may be what
        bound the preemptor. It goes on from its decision (`Resumed`), for its victims' steps
        to find those gone and record them deleted by it; stopping it here would end it with
        the deletes it made unrecorded."""
        if not decided(self._ledger, request.preemption_id, request.run_id):
            return None
        return Resumed(request.preemption_id, request.run_id)

    def _submit(self, job: _AnyJob, beat: Callable[[], object]) -> _AnyAnswer:
        try:
            return self.queue.submit(job, beat)
        except NoTurnError as error:
            raise LedgerUnavailableError(str(error)) from None

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

    def _fresh_group(self, request: GroupDecisionRequest) -> _GroupJob | Stopped:
        """1) The group as the API server has it now (a label-named group has no object: its
        pods are the group), the view synced, and a member of it pending in the view;
        otherwise the reason it no longer needs room."""
        ref = request.group
        fresh: PodGroup | None = None
        exists = Standing.PENDING
        if not ref.label_named:
            lookup = (
                self._read_group(ref) if self._read_group is not None else self._view_group(ref)
            )
            exists, fresh = lookup.standing, lookup.group
        if exists is not Standing.PENDING:
            return Stopped(reason_to_stop_group(GroupStanding(exists), ref.key))
        if not self._view.wait_ready(self._view_ready_timeout):
            raise ViewNotReadyError("the cluster view has not finished its initial sync yet")
        label = self._planner_args.pod_group_label if self._planner_args else ""
        with self._view.read() as snapshot:
            if ref.label_named:
                members = snapshot.label_group_members(label, ref.key) if label else []
            else:
                members = snapshot.group_members(ref.key)
        if ref.label_named and not members:
            return Stopped(reason_to_stop_group(GroupStanding(Standing.GONE), ref.key))
        reason = reason_to_stop_group(group_standing_of(Standing.PENDING, members), ref.key)
        return Stopped(reason) if reason else _GroupJob(request, fresh)

    def _view_group(self, ref: GroupRef) -> PodGroupLookup:
        """The PodGroup as the view shows it, when no API server reader was given (tests,
        benchmarks): the worker always reads it fresh."""
        if not self._view.wait_ready(self._view_ready_timeout):
            raise ViewNotReadyError("the cluster view has not finished its initial sync yet")
        with self._view.read() as snapshot:
            group = snapshot.pod_group(ref.key)
        if group is None:
            return PodGroupLookup(Presence.GONE, None)
        if group.uid != ref.uid:
            return PodGroupLookup(Presence.REPLACED, group)
        return PodGroupLookup(Presence.FOUND, group)

    @contextmanager
    def _lock(self, decisions: int) -> Iterator[Connection]:
        """2) The decision lock, timed from acquired to released (after the commit)."""
        with decision_lock(
            self._engine,
            lock_wait_seconds=self._lock_wait_seconds,
            timeouts_set=self._engine is not self._ledger,
        ) as db:
            acquired = time.perf_counter()
            try:
                yield db
            finally:
                self.holds.append((time.perf_counter() - acquired, decisions))

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

    def _plan_group(
        self, snapshot: ClusterSnapshot, job: _GroupJob, respected: list[str]
    ) -> GroupDecision:
        """4) The planner's decision for the group over the snapshot (claims laid over it),
        with its PodGroup as step 1 read it; references to its inputs kept on the job."""
        self._decisions += 1
        key = job.request.group.key
        with _planning_with_group(snapshot, job.fresh):
            decision = plan_group(snapshot, key, self._planner_args)
            if self._inputs_max_bytes:
                job.captured = capture_group(snapshot, key, self._planner_args, decision, respected)
        return decision

    def _budget(
        self,
        db: Connection,
        request: DecisionRequest | GroupDecisionRequest,
        verdict: Verdict,
        victims: int,
        pending: list[LedgerEvent],
    ) -> float:
        """5) Seconds the eviction budget holds this decision back; 0 when it may go on. The
        victims chosen earlier in this batch (not written yet) count too."""
        budget = self._evictions_per_minute
        if verdict is not Verdict.PREEMPT or request.dry_run or not budget:
            return 0.0
        since = request.occurred_at - WINDOW
        recent = victims_chosen_since(db, since)
        recent += [
            e.occurred_at
            for e in pending
            if e.kind is EventKind.VICTIM_CHOSEN and e.occurred_at >= since
        ]
        return seconds_until_budget_allows(sorted(recent), victims, budget, request.occurred_at)

    @staticmethod
    def _write_ahead(
        request: DecisionRequest,
        decision: Decision,
        context: dict[str, object],
        victim_nodes: dict[str, str],
    ) -> list[LedgerEvent]:
        """6) The decision, its victims (each on its node) and, when the decision ends the
        run, its end."""
        args = (request.preemption_id, request.run_id, request.preemptor, decision)
        batch = decision_events(
            *args, request.occurred_at, context=context, victim_nodes=victim_nodes
        )
        end = end_of_decision(*args, request.occurred_at, dry_run=request.dry_run)
        if end is not None:
            batch.append(end)
        return batch

    @staticmethod
    def _write_ahead_group(
        request: GroupDecisionRequest,
        decision: GroupDecision,
        context: dict[str, object],
        placed: list[tuple[PodRef, str]],
        victim_nodes: dict[str, str],
    ) -> list[LedgerEvent]:
        """6) The group's decision, its placed members, its victims (each on its node, with
        its unit) and, when the decision ends the run, its end."""
        args = (request.preemption_id, request.run_id, request.group, decision)
        batch = group_decision_events(
            *args, request.occurred_at, placed=placed, victim_nodes=victim_nodes, context=context
        )
        end = end_of_group_decision(*args, request.occurred_at, dry_run=request.dry_run)
        if end is not None:
            batch.append(end)
        return batch

    # -- one batch: planned ahead, settled under one hold of the lock ---------------------------

    def _decide_batch(self, batch: list[Waiting[_AnyJob, _AnyAnswer]]) -> None:
        """2)-6) for every queued request (in the queue's priority order). The planning is
        done first, outside the lock, against the claims this process knows of; then, in one
        transaction holding the lock: one read (claims, and the batch's own runs), the check
        that the plans still stand (no claim they did not know of: another replica decided
        meanwhile; no run of the batch decided already), 5) and 6) for each, and one insert
        of everything they write. When a plan no longer stands, the batch is planned again
        under the lock, as it always was: the lock is what makes decisions serial, the
        planning ahead only keeps the planner out of it."""
        ahead = self._plan_ahead(batch)
        pending: list[LedgerEvent] = []
        with self._lock(len(batch)) as db:
            claims, runs = self._claims.read(db, [w.job.request.preemption_id for w in batch])
            made = None if ahead is None else self._settle_ahead(db, ahead, claims, runs, pending)
            if made is None:
                self.planned_again += ahead is not None
                pending = []
                made = self._decide_under_the_lock(db, batch, claims, runs, pending)
            append_batch_on(db, pending)
        self._claims.note(made)  # committed: the next batch plans against them

    def _plan_ahead(self, batch: list[Waiting[_AnyJob, _AnyAnswer]]) -> _Ahead | None:
        """4) for the whole batch, outside the lock, against the claims known from the last
        read and this process's own decisions since (None before the first read)."""
        known = self._claims.known()
        if known is None:
            return None
        planned: list[_Planned] = []

        def keep(plan: _Planned) -> Claim | None:
            planned.append(plan)
            return plan.claim

        with self._view.read() as snapshot:
            book = ClaimBook(known)
            book.set_aside_fulfilled(snapshot)
            self._plan_in_turn(snapshot, list(batch), book, keep)
        return _Ahead(frozenset((c.preemption_id, c.run_id) for c in known), planned)

    def _settle_ahead(
        self,
        db: Connection,
        ahead: _Ahead,
        claims: list[Claim],
        runs: RunsOf,
        pending: list[LedgerEvent],
    ) -> list[Claim] | None:
        """5)-6) under the lock for a batch planned ahead, when its plans still stand; the
        claims made. None, nothing answered, when the batch must be planned again: a claim
        the plans did not know of (another replica's decision since), a run of the batch
        that decided already (it resumes), or a decision held back by the eviction budget
        whose claim the decisions after it respected."""
        if any((claim.preemption_id, claim.run_id) not in ahead.known for claim in claims):
            return None
        requests = [plan.waiting.job.request for plan in ahead.planned]
        if any(runs.decided(r.preemption_id, r.run_id) for r in requests):
            return None
        for request in requests:
            pending += _retried(request, runs)
        made: list[Claim] = []
        last = len(ahead.planned) - 1
        for index, plan in enumerate(ahead.planned):
            claim = self._settle(db, plan, pending)
            if claim is not None:
                made.append(claim)
            elif plan.claim is not None and index < last:
                for undone in ahead.planned:
                    undone.waiting.answer, undone.waiting.error = None, None
                return None
        return made

    def _decide_under_the_lock(
        self,
        db: Connection,
        batch: list[Waiting[_AnyJob, _AnyAnswer]],
        claims: list[Claim],
        runs: RunsOf,
        pending: list[LedgerEvent],
    ) -> list[Claim]:
        """3)-6) for the batch with the view held still under the lock: the claims just read
        (those the view shows fulfilled set aside); a run that decided already resumes; each
        other request planned, then settled before the next is planned. The claims made."""
        made: list[Claim] = []

        def settle(plan: _Planned) -> Claim | None:
            claim = self._settle(db, plan, pending)
            if claim is not None:
                made.append(claim)
            return claim

        with self._view.read() as snapshot:
            book = ClaimBook(claims)
            book.set_aside_fulfilled(snapshot)
            deciding = []
            for waiting in batch:
                request = waiting.job.request
                if runs.decided(request.preemption_id, request.run_id):
                    waiting.answer = Resumed(request.preemption_id, request.run_id)
                else:
                    pending += _retried(request, runs)
                    deciding.append(waiting)
            self._plan_in_turn(snapshot, deciding, book, settle)
        return made

    def _plan_in_turn(
        self,
        snapshot: ClusterSnapshot,
        deciding: list[Waiting[_AnyJob, _AnyAnswer]],
        claims: ClaimBook,
        settle: Callable[[_Planned], Claim | None],
    ) -> None:
        """4) each request in turn over the snapshot with the claims laid over it, each
        plan handed to `settle`, whose claim (if any) the next plan respects. A preemptor
        deciding again (a retried run) must not meet its own claim: those are planned
        first, each without it, before the shared overlay."""
        with ExitStack() as overlay:
            claimed = [w for w in deciding if w.job.holder in claims]
            for waiting in claimed:
                own = claims.without(waiting.job.holder)
                with own.applied(snapshot, ""):
                    settle(self._plan_one(snapshot, waiting, own.all()))
            overlay.enter_context(claims.applied(snapshot, ""))
            respected = claims.all()
            for waiting in deciding:
                if waiting in claimed:
                    continue
                claim = settle(self._plan_one(snapshot, waiting, respected))
                if claim is not None:  # the next decision respects this one
                    overlay.enter_context(ClaimBook([claim]).applied(snapshot, ""))
                    respected = [*respected, claim]

    def _plan_one(
        self,
        snapshot: ClusterSnapshot,
        waiting: Waiting[_AnyJob, _AnyAnswer],
        respected: list[Claim],
    ) -> _Planned:
        """4) for one request, with what the steps after it need of the view; a request
        the planner cannot read is planned as its error, so the rest of its batch is
        decided whatever becomes of it."""
        job = waiting.job
        names = [claim.holder for claim in respected]
        uids = [claim.preemptor_uid for claim in respected]
        planned = self._plan_one_of(snapshot, waiting, job, names, uids)
        planned.sequence = self._decisions
        return planned

    def _plan_one_of(
        self,
        snapshot: ClusterSnapshot,
        waiting: Waiting[_AnyJob, _AnyAnswer],
        job: _AnyJob,
        names: list[str],
        uids: list[str],
    ) -> _Planned:
        try:
            if isinstance(job, _GroupJob):
                group = self._plan_group(snapshot, job, uids)
                placed = [
                    (PodRef.of(member), node)
                    for key, node in group.nominations.items()
                    if (member := snapshot.pod_by_key(key)) is not None
                ]
                return _Planned(
                    waiting,
                    group,
                    names,
                    _group_claim_of(snapshot, job.request, group),
                    _nodes_of(snapshot, group.victims),
                    _terminating(snapshot, group.victims),
                    placed,
                    nominated=any(
                        member.nominated_node_name
                        for member in snapshot.group_members(job.request.group.key)
                    ),
                )
            decision = self._plan(snapshot, job, uids)
            return _Planned(
                waiting,
                decision,
                names,
                _claim_of(job.request, decision),
                _nodes_of(snapshot, decision.victims),
                _terminating(snapshot, decision.victims),
                nominated=bool(job.preemptor.nominated_node_name),
            )
        except PlannerInputError as error:
            return _Planned(waiting, None, names, error=error)

    def _settle(self, db: Connection, plan: _Planned, pending: list[LedgerEvent]) -> Claim | None:
        """5)-6) for one planned request: held back (the eviction budget, or a dry run
        waiting for the scheduler), or written ahead; its answer set, what it writes added
        to `pending`. The claim its decision makes, if it makes one."""
        waiting, decision, names = plan.waiting, plan.decision, plan.respected
        if plan.error is not None or decision is None:
            waiting.error = plan.error
            return None
        job = waiting.job
        if isinstance(job, _GroupJob):
            assert isinstance(decision, GroupDecision)
            return self._settle_group(db, plan, job, decision, pending)
        assert isinstance(decision, Decision)
        request = job.request
        held = self._held(db, request, request.preemptor, decision, plan, pending)
        if held is not None:
            wait, message = held
            waiting.answer = Decided(decision, wait, message, names, job.scheduler_name)
            return None
        context = self._context(names, job.scheduler_name, plan.sequence)
        pending += self._write_ahead(request, decision, context, plan.victim_nodes)
        waiting.answer = Decided(
            decision,
            0.0,
            decision.message,
            names,
            job.scheduler_name,
            plan.terminating,
            job.preemptor.nominated_node_name or None,
            plan.victim_nodes,
        )
        return plan.claim

    def _settle_group(
        self,
        db: Connection,
        plan: _Planned,
        job: _GroupJob,
        decision: GroupDecision,
        pending: list[LedgerEvent],
    ) -> Claim | None:
        request, waiting, names = job.request, plan.waiting, plan.respected
        held = self._held(db, request, request.group.as_preemptor(), decision, plan, pending)
        if held is not None:
            wait, message = held
            waiting.answer = DecidedGroup(decision, "", wait, message, names)
            return None
        context = self._context(names, "", plan.sequence)
        pending += self._write_ahead_group(
            request, decision, context, plan.placed, plan.victim_nodes
        )
        waiting.answer = DecidedGroup(decision, "", 0.0, decision.message, names, plan.terminating)
        return plan.claim

    def _held(
        self,
        db: Connection,
        request: DecisionRequest | GroupDecisionRequest,
        preemptor: PodRef,
        decision: Decision | GroupDecision,
        plan: _Planned,
        pending: list[LedgerEvent],
    ) -> tuple[float, str] | None:
        """5) How long the decision is held back and why (the eviction budget, or a dry run
        waiting for the scheduler); None when it goes on."""
        node = decision.nominated_node if isinstance(decision, Decision) else None
        return self._hold_back(
            db, request, preemptor, node, decision, pending
        ) or self._wait_for_the_scheduler(
            request, preemptor, decision, pending, nominated=plan.nominated
        )

    def _hold_back(
        self,
        db: Connection,
        request: DecisionRequest | GroupDecisionRequest,
        preemptor: PodRef,
        node: str | None,
        decision: Decision | GroupDecision,
        pending: list[LedgerEvent],
    ) -> tuple[float, str] | None:
        """5) for a pod's or a group's decision alike: None when the eviction budget lets it
        go on; else how long it waits and why, its `throttled` event added to `pending`."""
        wait = self._budget(db, request, decision.verdict, len(decision.victims), pending)
        if not wait:
            return None
        message = _held_back(self._evictions_per_minute, len(decision.victims), wait)
        message += decision.message
        throttled = Throttled(message, wait, [v.key for v in decision.victims])
        pending.append(_throttled(request, preemptor, node, throttled))
        return wait, message

    @staticmethod
    def _wait_for_the_scheduler(
        request: DecisionRequest | GroupDecisionRequest,
        preemptor: PodRef,
        decision: Decision | GroupDecision,
        pending: list[LedgerEvent],
        *,
        nominated: bool,
    ) -> tuple[float, str] | None:
        """A dry run (shadow mode) of a nominated preemptor (or group) found ineligible, at
        most `SHADOW_WAITS` times: held back
        a second, its `throttled` event saying why, then decided again. In shadow mode
        kube-scheduler preempts first, in the very cycle that marks the pod unschedulable,
        and the worker shows the victims it is evicting as still running only once it has
        read their `Preempted` Events (`kube.upstream_events.ShadowView`): a dry run that
        came before them would read those victims terminating on the pod's nomination and
        call it ineligible, where it means to decide as if it had been first. After the
        waits it decides as it finds (a victim no Event names stays terminating)."""
        if not (request.dry_run and nominated) or decision.verdict is not Verdict.INELIGIBLE:
            return None
        if request.throttled >= SHADOW_WAITS:
            return None
        message = (
            "a dry run found it ineligible while kube-scheduler may still be preempting for "
            f"it: deciding again in {SHADOW_WAIT_SECONDS:g}s, once its Preempted Events are "
            f"read; {decision.message}"
        )
        throttled = Throttled(message, SHADOW_WAIT_SECONDS, [v.key for v in decision.victims])
        pending.append(_throttled(request, preemptor, None, throttled))
        return SHADOW_WAIT_SECONDS, message

    def _context(self, claims: list[str], scheduler_name: str, sequence: int) -> dict[str, object]:
        """What the decision's row records of how it was made: by which worker, its
        sequence there, the claims it respected, and the preemptor's scheduler (what a run
        resumed from the ledger marks its victims in the name of)."""
        context: dict[str, object] = {
            "worker": self._identity,
            "sequence": sequence,
            "claims": claims,
        }
        if scheduler_name:
            context["schedulerName"] = scheduler_name
        return context

    def _record_inputs(self, job: _AnyJob) -> None:
        """After the commit: hand the decision's inputs to the recorder (never waits)."""
        captured, job.captured = job.captured, None
        if captured is None or self.inputs is None:
            return
        request = job.request
        row = InputsRow(
            request.preemption_id,
            request.run_id,
            request.preemptor
            if isinstance(request, DecisionRequest)
            else request.group.as_preemptor(),
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


@contextmanager
def _planning_with_group(snapshot: ClusterSnapshot, fresh: PodGroup | None) -> Iterator[None]:
    """Plan with the PodGroup exactly as the API server just returned it (None: a group a
    label names, which has no object), then put the view's own copy back."""
    if fresh is None:
        yield
        return
    previous = snapshot.pod_group(fresh.key)
    snapshot.upsert_pod_group(fresh)
    try:
        yield
    finally:
        if previous is not None:
            snapshot.upsert_pod_group(previous)
        else:
            snapshot.remove_pod_group(fresh.key)


def _retried(request: DecisionRequest | GroupDecisionRequest, runs: RunsOf) -> list[LedgerEvent]:
    """A run after the first appends `retried` (who started it, why, after which run and
    how that one ended) before anything else of its own, so the ledger tells each attempt
    apart and in order; the first run, or one that appended it already, nothing."""
    if request.throttled or runs.retried(request.preemption_id, request.run_id):
        return []
    earlier = runs.earlier(request.preemption_id, request.run_id)
    if earlier is None:
        return []
    preemptor = (
        request.preemptor if isinstance(request, DecisionRequest) else request.group.as_preemptor()
    )
    ended = earlier.outcome.value if earlier.outcome is not None else None
    reason = request.retry_reason or (
        f"{preemptor.key} still needed room after run {earlier.run_id} "
        f"ended {ended or 'without recording an end'}"
    )
    payload = Retried(request.run_id, earlier.run_id, ended, request.started_by, reason)
    retried = LedgerEvent(
        request.preemption_id,
        request.run_id,
        EventKind.RETRIED,
        preemptor,
        payload=payload.to_json(),
        occurred_at=request.occurred_at,
    )
    return [retried]


def _nodes_of(snapshot: ClusterSnapshot, victims: Sequence[PodRef]) -> dict[str, str]:
    """Each victim's node (by UID), as the view shows it."""
    return {
        victim.uid: pod.node_name
        for victim in victims
        if (pod := snapshot.pods.get(victim.uid)) is not None and pod.node_name
    }


def _terminating(snapshot: ClusterSnapshot, victims: Sequence[PodRef]) -> list[str]:
    """The UIDs of `victims` the view shows terminating (their deletion has begun)."""
    return [
        victim.uid
        for victim in victims
        if (pod := snapshot.pods.get(victim.uid)) is not None and pod.terminating
    ]


def _claim_of(request: DecisionRequest, decision: Decision) -> Claim | None:
    """The claim a written decision makes (none for a final or dry-run one)."""
    if request.dry_run:
        return None
    if decision.verdict is not Verdict.PREEMPT or decision.nominated_node is None:
        return None
    return Claim(
        decision.preemptor.uid,
        decision.nominated_node,
        frozenset(v.uid for v in decision.victims),
        request.preemption_id,
        request.run_id,
        holder=request.preemptor.key,
    )


def _group_claim_of(
    snapshot: ClusterSnapshot, request: GroupDecisionRequest, decision: GroupDecision
) -> Claim | None:
    """The claim a written group decision makes: its victims, its members on their nodes
    (none for a final or dry-run one)."""
    if request.dry_run or decision.verdict is not Verdict.PREEMPT:
        return None
    members = tuple(
        (member.uid, node)
        for key, node in sorted(decision.nominations.items())
        if (member := snapshot.pod_by_key(key)) is not None
    )
    return Claim(
        request.group.uid,
        "",
        frozenset(v.uid for v in decision.victims),
        request.preemption_id,
        request.run_id,
        members=members,
        holder=request.group.key,
    )


def _held_back(per_minute: int, victims: int, wait: float) -> str:
    return (
        f"held back by the eviction budget ({per_minute}/min): "
        f"{victims} victim(s) fit in {wait:.0f}s; "
    )


def _throttled(
    request: DecisionRequest | GroupDecisionRequest,
    preemptor: PodRef,
    node: str | None,
    throttled: Throttled,
) -> LedgerEvent:
    return LedgerEvent(
        request.preemption_id,
        request.run_id,
        EventKind.THROTTLED,
        preemptor,
        node=node,
        payload=throttled.to_json(),
        occurred_at=request.occurred_at,
        step=str(request.throttled),
    )

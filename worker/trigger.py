"""The trigger loop: starts the preemption of each pod (and each pod group) that needs room,
and follows it.

The rules (`worker.trigger_rules`) say which pods need a preemption (`trigger_reason`) and
when each is tried again (`RetryBook`: backoff after a failed start or an end, parking
after a non-retryable end); this loop applies them to the cluster view and to Temporal. A
critical pod the kubelet refused gets one critical-admission preemption per admission
failure: the kubelet never admits a Failed pod again, so evicting for it each time its node
fills would cost victims for nothing. A parked pod is tried again when it changes, when a
person asks (`TriggerLoop.retry` in-process, or a new run of its workflow started by
`preemptctl retry`, seen at the next re-check of the parked pods or when the pod is bound):
such a run is reported `retried` (who started it and why, from its request) and followed
to its end like the loop's own.

A pod (or group) whose preemption found no candidate while claims of preemptions still
running held the room it lacked (its decision's `claimsInTheWay`, read from the ledger) is
not left to a blind backoff: the end of any of those preemptions, as the loop learns it,
wakes it (`RetryBook.freed`, at least a second after its own end), logged and counted in
`preemptctl_retries_woken_total`, and the run that starts says why in its `retried` event.

A pod that belongs to a group (a PodGroup it names, or the gang label's group) never gets a
preemption of its own: its group gets one group preemption (`GroupPreemption`, its ID from
the group's UID, `pending_group`), started once however many members are pending and
joined by every trigger for any member (USE_EXISTING), backed off and parked as a pod's is
(under the group's UID), and told `member_bound` the moment the watch shows one of its
members bound. Its reports (started, retried, finished) name the group as their preemptor
and in `podGroup` (the field `history --json` names it by), and list its members.
`running_preemption` answers upstream's `IsPodRunningPreemption` for a pod,
a group's member included, from its workflow's state query.

Housekeeping never holds up a start (issue 20, finding 7): re-checking the parked pods
(one describe each) and signalling bound preemptors run in a task of their own
(`_housekeep`), each call concurrent with the others within a bound (`SIGNAL_SLOTS`,
`RECHECK_SLOTS`), a re-check pass within a time budget (`RECHECK_BUDGET`: what it did not
reach goes first next pass), so a tenant's parked pods or a slow Temporal cannot delay a
new pod's start by more than its own calls.

The view hands the loop each pod as it decoded it for its snapshot (`ClusterView.subscribe`),
so no watched pod is decoded twice. At most `max_in_flight` preemptions run at once from this
worker; any number of workers may run, since the workflow ID (from the pod's UID) lets only
one preemption per pod exist. Every Temporal call in the loop survives an unavailable or slow
server: the pod waits out a backoff and the loop goes on. Memory is bounded by the cluster:
a deleted pod is forgotten, and only the latest `FINISHED_KEPT` finished preemptions are
kept for dev mode's report.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle

from preemptctl.kube.view import ClusterView
from preemptctl.ledger.kinds import DECISION_KINDS, TERMINAL_KINDS, EventKind
from preemptctl.ledger.payloads import Terminal
from preemptctl.ledger.views import AttemptView
from preemptctl.ledger.vocabulary import Fate, Outcome
from preemptctl.ledger.writer import record_bound_after_end, record_scheduled
from preemptctl.preemption.decision import PodRef, Strategy
from preemptctl.preemption.group_decision import GroupRef
from preemptctl.preemption.objects import Pod
from preemptctl.worker.cancellation import cancel_and_wait
from preemptctl.worker.config import Settings
from preemptctl.worker.metrics import Metrics
from preemptctl.worker.run_ends import ASK_TEMPORAL_AFTER, RunEnds
from preemptctl.worker.starter import Starts, group_preemption_request, preemption_request
from preemptctl.worker.trigger_rules import (
    GroupKey,
    Parked,
    PendingGroup,
    PendingPod,
    RetryBook,
    Woken,
    claims_in_the_way,
    group_of,
    note_left_to_another_scheduler,
    pending_group,
    pending_groups,
    pod_signature,
    trigger_reason,
    woken_reason,
)
from preemptctl.workflows.contract import (
    RUNBOOK,
    GroupPreemptionProgress,
    GroupPreemptionRequest,
    GroupPreemptionResult,
    PreemptionProgress,
    PreemptionRequest,
    PreemptionResult,
    group_result_of_failure,
    group_workflow_id_for,
    result_of_failure,
    workflow_id_for,
)
from preemptctl.workflows.group_preemption import GroupPreemptionWorkflow
from preemptctl.workflows.preemption import PreemptionWorkflow

log = logging.getLogger(__name__)

FINISHED_KEPT = 1000  # finished preemptions kept for dev mode's report
RPC_TIMEOUT = timedelta(seconds=10)
# Housekeeping's Temporal calls at once: signals to bound preemptors, and describes of
# parked pods' workflows (apart, so a long re-check pass never queues a signal).
SIGNAL_SLOTS = 8
RECHECK_SLOTS = 4
# One pass of parked re-checks stops after this long; the pods it did not reach are
# re-checked first in the next pass.
RECHECK_BUDGET = 5.0

Reporter = Callable[[str, dict[str, Any]], None]
# How the loop runs its task: `spawn(name, factory)`, e.g. a supervisor that restarts it.
Spawner = Callable[[str, Callable[[], Awaitable[None]]], "asyncio.Task[None]"]


@dataclass(frozen=True)
class _Target:
    """What a preemption is for: a pod (`pod`), or a pod group (`group`), by its UID."""

    uid: str
    key: str  # namespace/name
    pod: Pod | None = None
    group: GroupRef | None = None

    @property
    def workflow_id(self) -> str:
        namespace, _, name = self.key.partition("/")
        if self.group is not None:
            return group_workflow_id_for(namespace, name, self.uid)
        return workflow_id_for(namespace, name, self.uid)


def _awaits_bind(result: PreemptionResult | GroupPreemptionResult) -> bool:
    """A run of the one runbook that preempted ends at its last victim's delete: its
    preemptor's bind is still to come, and it is the trigger's to see and record."""
    preempted = any(victim.fate is not Fate.SPARED for victim in result.victims)
    return result.runbook >= RUNBOOK and result.outcome == Outcome.COMPLETED and preempted


def _attempt_awaits_bind(attempt: AttemptView) -> bool:
    """As `_awaits_bind`, for a run the ledger tells: completed after preempting, with no
    bind on record and an end that says nothing of one (a run of the one runbook)."""
    if attempt.outcome is not Outcome.COMPLETED or attempt.scheduled_at is not None:
        return False
    if not any(victim.fate is not Fate.SPARED for victim in attempt.victims):
        return False
    end = next((e for e in reversed(attempt.events) if e.kind is EventKind.COMPLETED), None)
    return end is not None and Terminal.from_json(end.payload).preemptor_scheduled is None


def _end_message(attempt: AttemptView) -> str:
    """How the run ended, in its own words: its end's reason or error, or its decision's
    message when the decision ended it."""
    for recorded in reversed(attempt.events):
        if recorded.kind in DECISION_KINDS:
            return str(recorded.payload.get("message") or "")
        if recorded.kind in TERMINAL_KINDS:
            ended = Terminal.from_json(recorded.payload)
            if ended.reason or ended.error:
                return ended.error or ended.reason or ""
    return ""


def group_signature(pending: PendingGroup) -> str:
    """What a pending group asks of the cluster: its priority and what each waiting member
    asks (`pod_signature`); a parked group is tried again when this changes (a member added,
    or changed)."""
    return repr((pending.group.priority, tuple(pod_signature(m) for m in pending.members)))


def _create_task(name: str, factory: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
    async def body() -> None:
        await factory()

    return asyncio.create_task(body(), name=name)


class TriggerLoop:
    """Watches the cluster view for pods that need room and starts their preemptions."""

    def __init__(
        self,
        view: ClusterView,
        client: Client,
        settings: Settings,
        metrics: Metrics,
        *,
        report: Reporter | None = None,
        clock: Callable[[], float] = time.monotonic,
        tick: float = 0.25,
        resync_every: float = 30.0,
        recheck_parked_every: float | None = None,
        recheck_budget: float = RECHECK_BUDGET,
        eager_start: bool = True,
        ledger: Engine | None = None,
        starts: Starts | None = None,
    ) -> None:
        """`recheck_parked_every`: how often the parked pods' workflows are described for a
        run a person started (default: every `resync_every`; dev mode looks every second);
        `recheck_budget`: how long one such pass may take; `eager_start`: ask for the first
        workflow task in the start's answer (a worker of this process runs the workflows);
        `ledger`: where a parked pod bound after its run ended is recorded bound, so
        `history` and `explain` stop offering it a retry."""
        self._view = view
        self._client = client
        self._settings = settings
        self._metrics = metrics
        self._report = report or (lambda _event, _fields: None)
        self._clock = clock
        self._tick = tick
        self._resync_every = resync_every
        self._recheck_every = resync_every if recheck_parked_every is None else recheck_parked_every
        self._recheck_budget = recheck_budget
        self._starts = starts or Starts(client, settings.task_queue, eager=eager_start)
        self._ledger = ledger
        # The ends of the runs followed, from the ledger (no long poll on Temporal per run).
        self._ends = RunEnds(ledger) if ledger is not None else None
        self._watching_ends: asyncio.Task[None] | None = None
        self._lock = threading.Lock()
        self._pending: dict[str, PendingPod] = {}
        # Groups that need a group preemption, by group UID; the groups the loop has seen,
        # by UID (a parked or followed one's workflow ID is its group's); members' events
        # since the last look, by group key.
        self._groups: dict[str, PendingGroup] = {}
        self._group_refs: dict[str, GroupRef] = {}
        self._dirty_groups: dict[str, GroupKey] = {}
        # member uid -> (the member as seen bound, its group's UID), to signal the group's run
        self._members_bound: dict[str, tuple[Pod, str]] = {}
        # uid -> the pod as seen bound (and how it was parked, if it was), to signal its run
        self._bound: dict[str, tuple[Pod, Parked | None]] = {}
        self._rechecked: dict[str, float] = {}  # parked uid -> when last re-checked
        self._in_flight: dict[str, asyncio.Task[None]] = {}  # by pod or group UID
        self._handles: dict[str, WorkflowHandle[Any, Any]] = {}
        self._book = RetryBook(settings.retry_backoff_max_seconds)
        self._admissions_served: dict[str, str] = {}  # uid -> the admission failure served
        self._wake = asyncio.Event()
        self._chores_due = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._housekeeping: asyncio.Task[None] | None = None
        self._finished: deque[dict[str, Any]] = deque(maxlen=FINISHED_KEPT)
        # pod uid -> the event a follower waiting for that pod's bind is woken by
        self._bind_waiters: dict[str, asyncio.Event] = {}
        # Pods and groups (by UID) whose followed run follows the runbook of runs started
        # before issue 29 (a person's retry from an older release): it waits for the bind
        # itself, and is told of it by a signal. Runs of the one runbook need none.
        self._legacy: set[str] = set()
        # The pod gauges are counted when they are read (a scrape), not after every watch
        # event: counting the pods in backoff walks every pending pod, ~0.2 ms per event
        # with 1,000 pending, on the view's thread, for a figure read every few seconds.
        metrics.pending_pods.set_function(self._count_pending)
        metrics.parked_pods.set_function(self._count_parked)
        metrics.backoff_pods.set_function(self._count_backoff)

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self, spawn: Spawner = _create_task) -> None:
        """Start the loop and its housekeeping as tasks made by `spawn` (a supervisor
        restarts either if it crashes)."""
        self._loop = asyncio.get_running_loop()
        self._view.subscribe(self._on_pod_event)
        self.resync()
        self._task = spawn("trigger-loop", self.run)
        self._housekeeping = spawn("trigger-housekeeping", self._housekeep)
        if self._ends is not None:
            self._watching_ends = spawn("trigger-ends", self._watch_ends)

    async def stop(self, drain: bool = True) -> None:
        """Stop starting preemptions; with `drain`, wait for the ones followed to finish
        (they go on in Temporal regardless: another worker picks them up)."""
        loops = [
            task
            for task in (self._task, self._housekeeping, self._watching_ends)
            if task is not None
        ]
        if loops:
            await cancel_and_wait(loops, what="the trigger loop")
        if drain and self._in_flight:
            await asyncio.gather(*self._in_flight.values(), return_exceptions=True)
        await cancel_and_wait(self._in_flight.values(), what="the preemptions followed")

    @property
    def idle(self) -> bool:
        """Nothing in flight and no pending pod or group that could be started now or soon."""
        with self._lock:
            return not self._in_flight and not self._pending and not self._groups

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    @property
    def finished(self) -> list[dict[str, Any]]:
        """The latest `FINISHED_KEPT` finished preemptions, oldest first (dev mode's report)."""
        return list(self._finished)

    def caught_up(self) -> bool:
        """Nothing in flight, no group whose member changed still to be looked at, and every
        pod and group that still needs room has had its preemption: what is left is waiting
        for a backoff re-check, not for this loop. (A member's event reaches the loop before
        its group does: the group is looked at on the loop's next turn, `_refresh_groups`,
        so until then a gang the scheduler just marked would look like nothing pending.)"""
        with self._lock:
            return (
                not self._in_flight
                and not self._dirty_groups
                and all(self._book.tried(uid) for uid in (*self._pending, *self._groups))
            )

    def tracked(self) -> int:
        """Pods the loop keeps any state for (bounded by the pods that exist)."""
        with self._lock:
            return len(set(self._book.uids()) | set(self._admissions_served))

    # -- parked pods ----------------------------------------------------------------------------

    def parked(self) -> list[Parked]:
        """Pods parked after a non-retryable end, oldest first (for a CLI or a person)."""
        with self._lock:
            return sorted(self._book.all_parked(), key=lambda p: (p.since, p.pod))

    def retry(self, pod: str) -> bool:
        """A person asks to try `pod` (namespace/name or uid, of a pod or a group) again now;
        False if it is not parked or backing off here."""
        with self._lock:
            keys = [(uid, c.pod.key) for uid, c in self._pending.items()]
            keys += [(uid, g.group.key) for uid, g in self._groups.items()]
            uids = [uid for uid, key in keys if pod in (uid, key) and uid in self._book]
            for uid in uids:
                self._book.unpark(uid)
        if uids:
            self._wake_soon()
        return bool(uids)

    # -- learning which pods need room ----------------------------------------------------------

    def resync(self) -> None:
        """Evaluate every pod in the view (at start, and now and then in case an event was
        missed), and forget what the loop kept about pods that no longer exist."""
        with self._view.read() as snapshot:
            pods = list(snapshot.pods.values())
            groups = pending_groups(snapshot, self._settings)
        with self._lock:
            self._pending = {}
            for pod in pods:
                self._consider(pod)
            self._groups = {}
            for group in groups:
                self._consider_group(group)
            present = {pod.uid for pod in pods} | set(self._groups)
            for uid in self._book.uids():
                if uid not in present and uid not in self._in_flight:
                    self._book.forget(uid)
            kept = set(self._groups) | set(self._in_flight) | set(self._book.uids())
            for uid in list(self._group_refs):
                if uid not in kept:
                    del self._group_refs[uid]
            for uid in list(self._admissions_served):
                if uid not in present:
                    del self._admissions_served[uid]
            for uid in list(self._rechecked):
                if self._book.parked(uid) is None:
                    self._rechecked.pop(uid, None)

    def _consider(self, pod: Pod) -> None:
        note_left_to_another_scheduler(pod, self._settings, self._metrics.left_to_other_schedulers)
        found = trigger_reason(pod, self._settings)
        if (
            found is not None
            and found[1] is Strategy.CRITICAL_ADMISSION
            and self._admissions_served.get(pod.uid) == pod.status_reason
        ):
            found = None  # this admission failure had its preemption
        if found is None:
            self._pending.pop(pod.uid, None)
            if pod.uid not in self._in_flight:
                self._book.forget(pod.uid)
            return
        parked = self._book.parked(pod.uid)
        if parked is not None and parked.signature != pod_signature(pod):
            log.info("%s changed; no longer parked (%s)", pod.key, parked.reason)
            self._book.unpark(pod.uid)
        self._pending[pod.uid] = PendingPod(pod, *found)

    def _consider_group(self, group: PendingGroup) -> None:
        """`group` needs a group preemption: keep it pending (under its UID), unparked if
        what it asks changed since it was parked."""
        uid = group.group.uid
        self._group_refs[uid] = group.group
        parked = self._book.parked(uid)
        if parked is not None and parked.signature != group_signature(group):
            log.info("%s changed; no longer parked (%s)", group.group.key, parked.reason)
            self._book.unpark(uid)
        self._groups[uid] = group

    def _refresh_groups(self) -> None:
        """Look again at each group one of whose members changed since the last look."""
        with self._lock:
            dirty, self._dirty_groups = self._dirty_groups, {}
        if not dirty:
            return
        with self._view.read() as snapshot:
            found = {
                key: pending_group(snapshot, group, self._settings) for key, group in dirty.items()
            }
        with self._lock:
            for key, group in found.items():
                for uid in [u for u, g in self._groups.items() if g.group.key == key]:
                    if group is None or group.group.uid != uid:
                        del self._groups[uid]  # no longer pending, or another group now
                if group is not None:
                    self._consider_group(group)

    def _forget(self, uid: str) -> None:
        self._pending.pop(uid, None)
        self._admissions_served.pop(uid, None)
        if uid not in self._in_flight:
            self._book.forget(uid)

    def _on_pod_event(self, event_type: str, uid: str, pod: Pod | None) -> None:
        """From the view's watch thread, with the pod as the view decoded it: keep the
        pending pods current, and tell a preemption its preemptor was bound the moment the
        watch shows it. A pod the planner cannot read (`pod` None) is the view's to report;
        here it is just not a pending pod."""
        with self._lock:
            if event_type == "DELETED":
                self._forget(uid)
            elif pod is None:
                self._pending.pop(uid, None)
                return
            else:
                # A parked pod bound now: a run `preemptctl retry` started (from any process)
                # is waiting for this bind; tell it as the loop tells its own runs (and
                # report and follow that run, if no re-check has found it yet).
                parked = self._book.parked(pod.uid)
                self._consider(pod)
                waiter = self._bind_waiters.get(pod.uid)
                if pod.node_name and waiter is not None:
                    self._wake_soon(waiter)
                legacy = pod.uid in self._legacy
                if pod.node_name and ((legacy and pod.uid in self._handles) or parked is not None):
                    self._bound[pod.uid] = (pod, parked)
                    self._wake_soon(self._chores_due)
                group = group_of(pod, self._settings)
                if group is not None:
                    self._dirty_groups[group.key] = group
                    running = self._running_group(group.key)
                    if pod.node_name and running is not None and running in self._legacy:
                        self._members_bound[pod.uid] = (pod, running)
                        self._wake_soon(self._chores_due)
        self._wake_soon()

    def _running_group(self, key: str) -> str | None:
        """The UID of the group `key` whose group preemption this loop follows, if any."""
        for uid in self._in_flight:
            ref = self._group_refs.get(uid)
            if ref is not None and ref.key == key:
                return uid
        return None

    def _wake_soon(self, event: asyncio.Event | None = None) -> None:
        """Set `event` (the loop's wake-up by default) from any thread."""
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nothing to wake
                self._loop.call_soon_threadsafe((event or self._wake).set)

    def _count_pending(self) -> int:
        with self._lock:
            return len(self._pending) + len(self._groups)

    def _count_parked(self) -> int:
        with self._lock:
            return len(self._book.all_parked())

    def _count_backoff(self) -> int:
        with self._lock:
            now = self._clock()
            return sum(
                1
                for uid in (*self._pending, *self._groups)
                if uid not in self._in_flight
                and self._book.parked(uid) is None
                and not self._book.due(uid, now)
            )

    # -- starting and following preemptions -------------------------------------------------------

    async def run(self) -> None:
        """The loop itself: wake on a watch event or a tick, start what is due. Runs until
        cancelled. Nothing here waits for housekeeping (`_housekeep`)."""
        last_resync = self._clock()
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._tick):  # not wait_for: see `cancellation`
                    await self._wake.wait()
            self._wake.clear()
            if self._clock() - last_resync > self._resync_every:
                await asyncio.to_thread(self.resync)
                last_resync = self._clock()
            else:
                self._refresh_groups()
            await self._start_due()

    async def _watch_ends(self) -> None:
        """Every tick while runs are followed: one look at the ledger for their ends
        (`worker.run_ends`). Runs until cancelled."""
        assert self._ends is not None
        while True:
            await asyncio.sleep(self._tick)
            await self._ends.poll()

    # -- housekeeping: off the start path -------------------------------------------------------

    async def _housekeep(self) -> None:
        """Signal each bound preemptor's run as soon as the watch shows the bind, and
        re-check the parked pods every `recheck_parked_every`: each call a task of its own,
        at most `SIGNAL_SLOTS` signals and `RECHECK_SLOTS` describes at once, one re-check
        pass at a time. Runs until cancelled (its calls with it)."""
        signals = asyncio.Semaphore(SIGNAL_SLOTS)
        last_recheck = self._clock()
        recheck: asyncio.Task[None] | None = None
        async with asyncio.TaskGroup() as chores:
            while True:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._tick):
                        await self._chores_due.wait()
                self._chores_due.clear()
                with self._lock:
                    bound, self._bound = self._bound, {}
                    members, self._members_bound = self._members_bound, {}
                for uid, (pod, parked) in bound.items():
                    chores.create_task(self._signal_bound(signals, uid, pod, parked))
                for uid, (pod, group_uid) in members.items():
                    chores.create_task(self._signal_member_bound(signals, uid, pod, group_uid))
                if self._clock() - last_recheck > self._recheck_every and (
                    recheck is None or recheck.done()
                ):
                    last_recheck = self._clock()
                    recheck = chores.create_task(self._recheck_parked())

    async def _recheck_parked(self) -> None:
        """One pass: find the parked pods whose preemption a person ran again (`preemptctl
        retry`, from another process): their workflow has a run that started after the pod
        was parked. Such a run is reported and followed (`_adopt`), its pod no longer
        parked. Describes run `RECHECK_SLOTS` at once, least recently re-checked first; the
        pass ends after `recheck_budget` seconds, whatever it has not reached waits for the
        next."""
        with self._lock:
            parked = sorted(
                self._book.all_parked(), key=lambda p: (self._rechecked.get(p.uid, 0.0), p.since)
            )
        slots = asyncio.Semaphore(RECHECK_SLOTS)

        async def recheck(one: Parked) -> None:
            async with slots:
                self._rechecked[one.uid] = self._clock()
                workflow_id = self._target_of(one).workflow_id
                try:
                    description = await self._client.get_workflow_handle(workflow_id).describe(
                        rpc_timeout=RPC_TIMEOUT
                    )
                except Exception as error:  # NOT_FOUND, or Temporal unavailable: next time
                    log.debug("could not describe %s: %s", workflow_id, error)
                    return
                if description.start_time > one.since:
                    await self._adopt(one, workflow_id, description.run_id, None)

        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._recheck_budget), asyncio.TaskGroup() as checks:
                for one in parked:
                    checks.create_task(recheck(one))

    async def _signal_bound(
        self, slots: asyncio.Semaphore, uid: str, pod: Pod, parked: Parked | None
    ) -> None:
        """Tell the preemption of `pod` that it is bound, so its bind wait ends now instead
        of at its next poll. For a pod that was parked, the run to tell is not one this loop
        started: the latest run of its workflow, the one a person's `preemptctl retry`
        started (reported and followed from here on, if no re-check found it first)."""
        async with slots:
            handle: WorkflowHandle[Any, Any] | None = self._handles.get(uid)
            if handle is None and parked is not None:
                workflow_id = workflow_id_for(pod.namespace, pod.name, uid)
                handle = self._client.get_workflow_handle(workflow_id)
                try:
                    description = await handle.describe(rpc_timeout=RPC_TIMEOUT)
                    if description.start_time > parked.since:
                        handle = await self._adopt(parked, workflow_id, description.run_id, pod)
                    elif description.close_time is not None:
                        # Bound with no run waiting for it: its latest run ended without
                        # it (parked), and the ledger says so from now on.
                        await self._record_bound_after_end(workflow_id, pod)
                        return
                except Exception as error:  # gone, or Temporal unavailable: signal anyway
                    log.debug("could not describe %s: %s", workflow_id, error)
            if handle is None:
                return
            try:
                await handle.signal(
                    PreemptionWorkflow.preemptor_bound, pod.node_name, rpc_timeout=RPC_TIMEOUT
                )
            except Exception as error:  # finished meanwhile, or Temporal unavailable
                log.debug("could not signal %s: %s", handle.id, error)

    async def _record_bound_after_end(self, workflow_id: str, pod: Pod) -> None:
        """Record `pod` bound after its preemption's latest run ended without it; a ledger
        that cannot take it now costs only the stale retry hint, so it is logged, not raised
        (the housekeeping task must go on)."""
        if self._ledger is None or not pod.node_name:
            return
        try:
            recorded = await asyncio.to_thread(
                record_bound_after_end,
                self._ledger,
                workflow_id,
                PodRef.of(pod),
                pod.node_name,
                datetime.now(UTC),
            )
        except Exception as error:  # the ledger is down: the next bind of it is not seen
            log.warning("could not record %s bound after its preemption: %s", pod.key, error)
            return
        if recorded:
            log.info("%s bound to %s after its preemption ended", pod.key, pod.node_name)

    async def _signal_member_bound(
        self, slots: asyncio.Semaphore, uid: str, pod: Pod, group_uid: str
    ) -> None:
        """Tell the group preemption of `pod`'s group that this member is bound (`uid`,
        its node), so its bind wait counts it now instead of at its next poll."""
        handle = self._handles.get(group_uid)
        if handle is None:  # the run ended meanwhile
            return
        async with slots:
            try:
                await handle.signal(
                    GroupPreemptionWorkflow.member_bound,
                    args=[uid, pod.node_name],
                    rpc_timeout=RPC_TIMEOUT,
                )
            except Exception as error:  # finished meanwhile, or Temporal unavailable
                log.debug("could not signal %s: %s", handle.id, error)

    def _target_of(self, parked: Parked) -> _Target:
        """The pod or group a parked entry stands for."""
        group = self._group_refs.get(parked.uid)
        if group is not None:
            return _Target(parked.uid, parked.pod, group=group)
        return _Target(parked.uid, parked.pod)

    async def _adopt(
        self, parked: Parked, workflow_id: str, run_id: str, pod: Pod | None
    ) -> WorkflowHandle[Any, Any]:
        """A run of a parked pod's (or group's) workflow started after it was parked (a
        person's `preemptctl retry`): unpark it, report the run `retried` (who started it
        and why, read from its request), and follow it to its end as the loop's own runs
        (backoff or parking after it). `pod`: the pod as seen bound, when the bind is what
        led here. The handle to that run."""
        target = self._target_of(parked)
        handle: WorkflowHandle[Any, Any] = self._client.get_workflow_handle(
            workflow_id,
            run_id=run_id,
            result_type=PreemptionResult if target.group is None else GroupPreemptionResult,
        )
        with self._lock:
            if not self._adoptable(parked, pod is not None):
                return self._handles.get(parked.uid, handle)
        started_by, reason = await self._started_by(workflow_id, run_id, target)
        # From here to the report nothing awaits: the report comes before the run's end.
        with self._lock:
            if target.group is None:
                current = self._pending.get(parked.uid)
                followed = current.pod if current is not None else pod
                if followed is None:
                    return handle  # gone from the view: nothing to follow it for
                target = _Target(parked.uid, parked.pod, pod=followed)
            if not self._adoptable(parked, pod is not None):
                return self._handles.get(parked.uid, handle)  # adopted meanwhile
            self._book.unpark(parked.uid)
            self._book.started(parked.uid)
            self._handles[parked.uid] = handle
            self._in_flight[parked.uid] = asyncio.create_task(
                self._follow(target, handle, self._clock())
            )
        self._metrics.in_flight.set(len(self._in_flight))
        log.info("%s: its preemption was run again (run %s); no longer parked", parked.pod, run_id)
        self._report(
            "retried",
            {
                "workflowId": workflow_id,
                "runId": run_id,
                "preemptor": parked.pod,
                **({"podGroup": parked.pod} if target.group is not None else {}),
                "startedBy": started_by,
                "reason": reason,
            },
        )
        return handle

    async def _started_by(self, workflow_id: str, run_id: str, target: _Target) -> tuple[str, str]:
        """Who started a run and why, from the request in its first history event (a
        person, and no reason, when Temporal does not answer)."""
        kind = PreemptionRequest if target.group is None else GroupPreemptionRequest
        try:
            handle = self._client.get_workflow_handle(workflow_id, run_id=run_id)
            history = await handle.fetch_history()
            for event in history.events[:1]:
                attributes = event.workflow_execution_started_event_attributes
                (request,) = await self._client.data_converter.decode(
                    attributes.input.payloads, [kind]
                )
                if request.runbook < RUNBOOK:
                    self._legacy.add(target.uid)
                return str(request.started_by), str(request.retry_reason)
        except Exception as error:  # Temporal busy: the report goes without who and why
            log.debug("could not read the request of %s run %s: %s", workflow_id, run_id, error)
        return "person", ""

    def _adoptable(self, parked: Parked, bound: bool) -> bool:
        """Followed by no one, and still parked as it was when its newer run was found (or,
        for a pod seen `bound`, forgotten since: a bound pod needs no room) (asked under
        the lock)."""
        if parked.uid in self._in_flight:
            return False
        return self._book.parked(parked.uid) == parked or (bound and parked.uid not in self._book)

    async def _start_due(self) -> None:
        """Start what is due, pods and groups together, the highest priority first."""
        now = self._clock()
        with self._lock:
            due: list[tuple[int, str, PendingPod | PendingGroup]] = [
                (c.pod.priority, c.pod.key, c)
                for uid, c in self._pending.items()
                if uid not in self._in_flight and self._book.due(uid, now)
            ]
            due += [
                (g.group.priority, g.group.key, g)
                for uid, g in self._groups.items()
                if uid not in self._in_flight and self._book.due(uid, now)
            ]
        due.sort(key=lambda item: (-item[0], item[1]))
        for _, _, pending in due:
            if len(self._in_flight) >= self._settings.max_in_flight:
                return
            if isinstance(pending, PendingGroup):
                await self._start_group(pending, now)
            else:
                await self._start(pending, now)

    async def _start_group(self, pending: PendingGroup, now: float) -> None:
        """Start the group preemption of `pending` (or join the one running for it), as
        `_start` starts a pod's."""
        group, settings = pending.group, self._settings
        target = _Target(group.uid, group.key, group=group)
        request = group_preemption_request(
            group, settings, reason=pending.reason, retry_reason=self._retry_reason(group.uid)
        )
        try:
            async with asyncio.timeout(RPC_TIMEOUT.total_seconds()):
                handle = await self._starts.group_preemption(request)
        except Exception as error:  # Temporal unavailable or slow: try this group later
            with self._lock:
                delay = self._book.start_failed(group.uid, now)
            log.warning(
                "could not start the group preemption of %s: %s; retrying in %gs",
                group.key,
                error or type(error).__name__,
                delay,
            )
            return
        with self._lock:
            self._book.started(group.uid)
            self._handles[group.uid] = handle
            self._in_flight[group.uid] = asyncio.create_task(
                self._follow(target, handle, self._clock())
            )
        members = [m.key for m in pending.members]
        self._report(
            "started",
            {
                "workflowId": handle.id,
                "preemptor": group.key,
                "podGroup": group.key,
                "members": members,
            },
        )
        self._metrics.in_flight.set(len(self._in_flight))

    async def _start(self, pending: PendingPod, now: float) -> None:
        # Every step but the decision runs as a local activity unless
        # `Settings.local_activities` is false: it cuts the Temporal server's CPU per
        # preemption by more than half (docs/scale-out.md). The start asks for eager
        # dispatch when the workflows run in this process (`eager_start`): the worker
        # polling the task queue shares this client, so the first workflow task comes back
        # with the start's answer.
        pod, settings = pending.pod, self._settings
        request = preemption_request(
            PodRef.of(pod),
            settings,
            reason=pending.reason,
            strategy=pending.strategy,
            retry_reason=self._retry_reason(pod.uid),
        )
        try:
            async with asyncio.timeout(RPC_TIMEOUT.total_seconds()):
                handle = await self._starts.preemption(request)
        except Exception as error:  # Temporal unavailable or slow: try this pod later
            with self._lock:
                delay = self._book.start_failed(pod.uid, now)
            log.warning(
                "could not start the preemption of %s: %s; retrying in %gs",
                pod.key,
                error or type(error).__name__,
                delay,
            )
            return
        with self._lock:
            self._book.started(pod.uid)
            if pending.strategy is Strategy.CRITICAL_ADMISSION:
                self._admissions_served[pod.uid] = pod.status_reason
                self._pending.pop(pod.uid, None)
        self._handles[pod.uid] = handle
        self._report("started", {"workflowId": handle.id, "preemptor": pod.key})
        target = _Target(pod.uid, pod.key, pod=pod)
        self._in_flight[pod.uid] = asyncio.create_task(self._follow(target, handle, self._clock()))
        self._metrics.in_flight.set(len(self._in_flight))

    async def _follow(
        self, target: _Target, handle: WorkflowHandle[Any, Any], began: float
    ) -> None:
        """Wait for the preemption's end, report it, and book it (`_ended`). The end is
        read from the ledger (`worker.run_ends`); from Temporal when the loop has no ledger,
        or the run recorded none."""
        fields: dict[str, Any] = {}
        outcome: str = Outcome.FAILED  # a failure that carries no result
        retryable, lost = True, False
        try:
            attempt = await self._end_on_record(handle)
            if attempt is not None:
                outcome, retryable, fields = self._read_attempt(target, attempt)
                self._claim_ended(target, outcome, fields)
                if _attempt_awaits_bind(attempt):
                    await self._record_the_bind(target, handle, fields)
            else:
                result = await handle.result()
                outcome, retryable, fields = self._read_any(result)
                self._claim_ended(target, outcome, fields)
                if _awaits_bind(result):
                    await self._record_the_bind(target, handle, fields)
        except WorkflowFailureError as error:
            # A failed preemption (an RBAC denial among them) carries its result in the
            # failure's details: read `retryable` there too, or a denial would back off and
            # come round again instead of parking its pod.
            carried = (
                result_of_failure(error) if target.group is None else group_result_of_failure(error)
            )
            if carried is not None:
                outcome, retryable, fields = self._read_any(carried)
            else:
                fields = {"message": str(error.cause or error)}
            self._claim_ended(target, outcome, fields)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # Temporal unavailable: the preemption itself goes on
            outcome, lost = "unknown", True  # not an outcome: no metric counts it
            fields = {"message": f"lost track of the preemption: {error}"}
        finally:
            self._ended(target, outcome, retryable, fields, lost=lost, since=began)
        seconds = self._clock() - began
        if not lost:
            self._metrics.attempts.labels(outcome).inc()
            self._metrics.duration.labels(outcome).observe(seconds)
        record = {
            "workflowId": handle.id,
            "preemptor": target.key,
            **({"podGroup": target.key} if target.group is not None else {}),
            "outcome": outcome,
            "seconds": round(seconds, 3),
            **fields,
        }
        self._finished.append(record)
        self._report("finished", record)
        if self._loop is not None:
            self._wake.set()

    async def _end_on_record(self, handle: WorkflowHandle[Any, Any]) -> AttemptView | None:
        """The run's end as the ledger records it; None when the loop has no ledger, or the
        run closed without recording one (then Temporal's result tells it)."""
        run_id = handle.result_run_id
        if self._ends is None or not run_id:
            return None
        while True:
            attempt = await self._ends.wait(handle.id, run_id, ASK_TEMPORAL_AFTER)
            if attempt is not None:
                return attempt
            description = await handle.describe(rpc_timeout=RPC_TIMEOUT)
            if description.close_time is not None:
                self._ends.forget(handle.id, run_id)
                return None

    def _read_attempt(
        self, target: _Target, attempt: AttemptView
    ) -> tuple[str, bool, dict[str, Any]]:
        """Outcome, retryability and report fields of a run that ended, as the ledger tells
        it; upstream's metrics of it observed."""
        outcome = attempt.outcome or Outcome.FAILED
        dry = outcome is Outcome.DRY_RUN  # its victims were chosen, never touched
        victims = [v.victim.key for v in attempt.victims if dry or v.fate is not Fate.SPARED]
        throttled = sum(1 for e in attempt.events if e.kind is EventKind.THROTTLED)
        decided, finished = attempt.decided_at, attempt.finished
        evaluation = (decided - attempt.started).total_seconds() if decided else None
        execution = (
            (finished - decided).total_seconds() if decided and finished and victims else None
        )
        self._observe(len(victims), throttled, outcome, evaluation, execution)
        fields: dict[str, Any] = {"node": attempt.node, "victims": victims}
        if target.group is not None:
            summary = ((attempt.decision or {}).get("rationale") or {}).get("group") or {}
            fields.update(
                node=None,
                members={m.pod: m.node for m in attempt.members},
                bound=0,
                minCount=int(summary.get("minCount") or 1),
            )
        fields["message"] = _end_message(attempt)
        in_the_way = claims_in_the_way(attempt.decision)
        if outcome is Outcome.NO_CANDIDATE and in_the_way:
            fields["claimsInTheWay"] = in_the_way
        return str(outcome), attempt.retryable is not False, fields

    def _read_any(
        self, result: PreemptionResult | GroupPreemptionResult
    ) -> tuple[str, bool, dict[str, Any]]:
        if isinstance(result, GroupPreemptionResult):
            return self._read_group(result)
        return self._read(result)

    def _read_group(self, result: GroupPreemptionResult) -> tuple[str, bool, dict[str, Any]]:
        """Outcome, retryability and report fields of a finished group preemption: its
        victims on every node, where it placed each member, how many are bound."""
        self._observe(
            len(result.victims),
            result.throttled,
            result.outcome,
            result.evaluation_seconds,
            result.execution_seconds,
        )
        fields = {
            "node": None,
            "victims": [v.pod.key for v in result.victims if v.fate is not Fate.SPARED],
            "members": {m.pod.key: m.node for m in result.members},
            "bound": result.bound,
            "minCount": result.min_count,
            "message": result.message,
        }
        return result.outcome, result.retryable is not False, fields

    def _read(self, result: PreemptionResult) -> tuple[str, bool, dict[str, Any]]:
        """Outcome, retryability and report fields of a finished preemption's result."""
        victims = [v.pod.key for v in result.victims if v.fate is not Fate.SPARED]
        self._observe(
            len(result.victims),
            result.throttled,
            result.outcome,
            result.evaluation_seconds,
            result.execution_seconds,
        )
        fields = {
            "node": result.node,
            "victims": victims,
            "message": result.message,
        }
        return result.outcome, result.retryable is not False, fields

    def _observe(
        self,
        victims: int,
        throttled: int,
        outcome: str,
        evaluation_seconds: float | None,
        execution_seconds: float | None,
    ) -> None:
        """Upstream's metrics of a finished preemption: its victims, its two step timings
        (labelled as upstream labels them: the preemption plugin, and how it went)."""
        if victims:
            self._metrics.victims.observe(victims)
        if throttled:
            self._metrics.throttled.inc(throttled)
        plugin = "DefaultPreemption"
        if evaluation_seconds is not None:
            self._metrics.evaluation_duration.labels(plugin, outcome).observe(evaluation_seconds)
        if execution_seconds is not None:
            self._metrics.execution_duration.labels(plugin, outcome).observe(execution_seconds)

    def _ended(
        self,
        target: _Target,
        outcome: str,
        retryable: bool,
        fields: dict[str, Any],
        *,
        lost: bool,
        since: float | None = None,
    ) -> None:
        """Book the end of a preemption: back off, or park its pod (or group) when retrying
        cannot help. The view may trail the API by a moment, so even a completed preemption
        waits before its pod can look like it needs one again. A preemption the loop lost
        track of (its result unreadable while Temporal is unavailable) is looked at again
        after the start backoff: starting it again joins the run still going, if any. One
        that found no candidate while claims held the room it lacked (`claimsInTheWay`)
        waits for the end of one of them, the backoff at most (`since`: when its run
        started, so an end seen just before this one counts)."""
        uid = target.uid
        in_the_way: dict[str, list[str]] = fields.get("claimsInTheWay") or {}
        woken: Woken | None = None
        with self._lock:
            self._in_flight.pop(uid, None)
            self._handles.pop(uid, None)
            self._legacy.discard(uid)
            if lost:
                self._book.start_failed(uid, self._clock())
            elif retryable:
                blocked = {pod for pods in in_the_way.values() for pod in pods}
                delay = self._book.ended(uid, self._clock(), blocked, since)
                if blocked:
                    log.info(
                        "%s found no candidate while running preemptions claim the room it "
                        "lacks (%s); tried again when one of them ends, at the latest in %gs",
                        target.key,
                        "; ".join(f"{n}: {', '.join(p)}" for n, p in sorted(in_the_way.items())),
                        delay,
                        extra={"preemptor": target.key},
                    )
                    woken = self._book.woken(uid)
            else:
                reason = str(fields.get("message") or outcome)
                self._book.park(
                    Parked(uid, target.key, reason, datetime.now(UTC), self._signature(target))
                )
                log.warning(
                    "%s parked: %s; it is tried again when it changes or on preemptctl retry",
                    target.key,
                    reason,
                )
            self._metrics.in_flight.set(len(self._in_flight))
        if woken is not None:  # a holder's end was read first
            self._note_woken(woken, target.key, "group" if target.group else "pod")

    def _claim_ended(self, target: _Target, outcome: str, fields: dict[str, Any]) -> None:
        """`target`'s run ended, and with it its claim, if it held one: wake every pod and
        group whose latest preemption found no candidate while that claim held the room it
        lacked (`RetryBook.freed`), instead of leaving them to their backoff. Called as soon
        as the end is known, before the loop waits for a bind."""
        placed = {target.key, *(fields.get("members") or {})}
        with self._lock:
            woken = self._book.freed(target.key, placed, self._clock(), str(outcome))
            names = {uid: c.pod.key for uid, c in self._pending.items()}
            names |= {uid: g.group.key for uid, g in self._groups.items()}
            groups = set(self._groups)
        for wake in woken:
            if wake.uid in names:
                self._note_woken(wake, names[wake.uid], "group" if wake.uid in groups else "pod")
        if woken:
            self._wake.set()

    def _note_woken(self, wake: Woken, key: str, kind: str) -> None:
        """Say and count a wake: what a platform engineer reads in place of a backoff."""
        self._metrics.woken.labels(kind).inc()
        log.info(
            "%s %s; trying again %s",
            key,
            woken_reason(wake).split(";", 1)[0],
            "now" if wake.at <= self._clock() else f"in {wake.at - self._clock():.1f}s",
            extra={"preemptor": key, "freed_by": wake.holder},
        )

    def _retry_reason(self, uid: str) -> str:
        """Why a start of `uid` happens, for its run's `retried` event: a wake's reason;
        "" for a start after a backoff (the ledger then says the pod still needed room)."""
        with self._lock:
            woken = self._book.woken(uid)
        return woken_reason(woken) if woken is not None else ""

    def _signature(self, target: _Target) -> str:
        """What `target` asks of the cluster now (under the lock): a parked pod or group is
        tried again when this changes."""
        if target.group is not None:
            group = self._groups.get(target.uid)
            return group_signature(group) if group is not None else ""
        current = self._pending.get(target.uid)
        pod = current.pod if current is not None else target.pod
        return pod_signature(pod) if pod is not None else ""

    # -- the bind after a run of the one runbook ---------------------------------------------------

    async def _record_the_bind(
        self, target: _Target, handle: WorkflowHandle[Any, Any], fields: dict[str, Any]
    ) -> None:
        """A run of the one runbook completed at its last victim's delete: wait (in this
        follower, holding its slot as the run's own wait did) until the watch shows the
        preemptor bound (a group: minCount of its placed members), at most
        `scheduled_wait_seconds`; record the bind in the ledger and say it in the report."""
        wait = self._settings.scheduled_wait_seconds
        if target.group is None:
            uids, needed = [target.uid], 1
        else:
            placed = fields.get("members") or {}
            with self._view.read() as snapshot:
                uids = [pod.uid for key in placed if (pod := snapshot.pod_by_key(key))]
            needed = int(fields.get("minCount") or 1)
        bound = await self._bound_within(uids, needed, wait)
        key = target.key
        if len(bound) < needed:
            if target.group is not None:
                fields["bound"] = len(bound)
                fields["message"] = (
                    f"{key}: {len(bound)} of minCount {needed} member(s) bound within {wait:g}s"
                )
            else:
                fields["message"] = f"{key} was not bound within {wait:g}s"
            return
        if target.group is not None:
            fields["bound"] = len(bound)
            fields["message"] = f"{key}: {len(bound)} member(s) bound (minCount {needed})"
            node = None
        else:
            node = bound[target.uid]
            fields["message"] = f"{key} bound to {node}"
        await self._record_scheduled(target, handle, node, len(bound))

    async def _bound_within(self, uids: list[str], needed: int, seconds: float) -> dict[str, str]:
        """The pods of `uids` the view shows bound (uid -> node), once `needed` of them
        are or `seconds` have passed; woken by the watch."""
        woken = asyncio.Event()
        for uid in uids:
            self._bind_waiters[uid] = woken
        try:
            deadline = self._clock() + seconds
            while True:
                woken.clear()
                with self._view.read() as snapshot:
                    bound = {
                        uid: pod.node_name
                        for uid in uids
                        if (pod := snapshot.pods.get(uid)) is not None and pod.node_name
                    }
                left = deadline - self._clock()
                if len(bound) >= needed or left <= 0:
                    return bound
                with contextlib.suppress(TimeoutError):  # woken by the watch, or the tick
                    async with asyncio.timeout(min(left, self._tick)):
                        await woken.wait()
        finally:
            for uid in uids:
                if self._bind_waiters.get(uid) is woken:
                    del self._bind_waiters[uid]

    async def _record_scheduled(
        self, target: _Target, handle: WorkflowHandle[Any, Any], node: str | None, bound: int
    ) -> None:
        """The bind in the ledger; a ledger that cannot take it now is logged (the run's
        `history` then shows it unscheduled), never raised into the follower."""
        if self._ledger is None:
            return
        preemptor = (
            target.group.as_preemptor()
            if target.group is not None
            else PodRef.of(target.pod)
            if target.pod is not None
            else None
        )
        run_id = handle.result_run_id
        if preemptor is None or run_id is None:
            return
        try:
            await asyncio.to_thread(
                record_scheduled,
                self._ledger,
                handle.id,
                run_id,
                preemptor,
                node,
                datetime.now(UTC),
                members_bound=bound if target.group is not None else None,
            )
        except Exception as error:  # the ledger is down: the bind goes unrecorded
            log.warning("could not record %s bound: %s", target.key, error)

    # -- upstream's IsPodRunningPreemption --------------------------------------------------------

    async def running_preemption(self, pod: Pod) -> bool:
        """Upstream's `IsPodRunningPreemption` for `pod`: whether a preemption for it is
        under way (deciding, or preempting its victims), read from its workflow's `state`
        query, whichever worker runs it. For a member of a group: whether its group's
        preemption is, and placed this member (or has not decided yet). False when there is
        no such run, or Temporal does not answer."""
        group = group_of(pod, self._settings)
        try:
            if group is None:
                handle = self._client.get_workflow_handle(
                    workflow_id_for(pod.namespace, pod.name, pod.uid)
                )
                state: PreemptionProgress = await handle.query(
                    PreemptionWorkflow.state, rpc_timeout=RPC_TIMEOUT
                )
                return state.preempting
            ref = next((r for r in self._group_refs.values() if r.key == group.key), None)
            if ref is None:
                return False
            handle = self._client.get_workflow_handle(
                group_workflow_id_for(ref.namespace, ref.name, ref.uid)
            )
            progress: GroupPreemptionProgress = await handle.query(
                GroupPreemptionWorkflow.state, rpc_timeout=RPC_TIMEOUT
            )
        except Exception as error:  # no such run, or Temporal unavailable
            log.debug("could not ask the preemption of %s: %s", pod.key, error)
            return False
        placed = {member.pod.uid for member in progress.members}
        return progress.preempting and (not placed or pod.uid in placed)

"""The trigger loop: which pods get a preemption, and when.

A pod triggers a preemption when it is pending and unschedulable (`PodScheduled=False`,
reason `Unschedulable`), served by one of our scheduler names, at or above the minimum
priority, not `preemptionPolicy: Never`, not terminating, and not already being preempted.
A critical pod the kubelet refused for lack of resources (phase Failed, reason `OutOf…`)
gets the kubelet's critical-admission strategy instead.

Like the scheduler's queue, a pod that was tried waits before it is tried again: 1 s, then
doubling up to 10 s (upstream's podInitialBackoff and podMaxBackoff), and then it is
re-checked every 10 s for as long as it stays unschedulable. At most `max_in_flight`
preemptions run at once from this worker; any number of workers may run, since the
workflow ID (from the pod's UID) lets only one preemption per pod exist.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from preemptctl.activities.contracts import PreemptionRequest
from preemptctl.kube.view import ClusterView
from preemptctl.preemption.decision import PodRef, Strategy
from preemptctl.preemption.decode import decode_pod
from preemptctl.preemption.errors import PlannerInputError
from preemptctl.preemption.objects import PREEMPT_NEVER, Pod
from preemptctl.worker.config import Settings
from preemptctl.worker.metrics import Metrics
from preemptctl.worker.starter import start_preemption
from preemptctl.workflows.preemption import PreemptionResult, PreemptionWorkflow, workflow_id_for

log = logging.getLogger(__name__)

INITIAL_BACKOFF = 1.0
MAX_BACKOFF = 10.0


def trigger_reason(pod: Pod, settings: Settings) -> tuple[str, Strategy] | None:
    """Why `pod` needs a preemption now, and by which strategy; None when it does not."""
    if pod.terminating or pod.priority < settings.min_priority:
        return None
    if pod.preemption_policy == PREEMPT_NEVER:
        return None
    if (
        pod.node_name
        and pod.phase == "Failed"
        and pod.is_critical()
        and pod.status_reason.startswith("OutOf")
    ):
        return f"admission failed ({pod.status_reason})", Strategy.CRITICAL_ADMISSION
    if pod.scheduler_name not in settings.scheduler_names:
        return None
    if not pod.node_name and pod.phase == "Pending" and pod.unschedulable:
        return "Unschedulable", Strategy.DEFAULT
    return None


class Backoff:
    """Per-pod retry spacing, as the scheduler's backoff queue spaces retries."""

    def __init__(self) -> None:
        self._attempts: dict[str, int] = {}
        self._next: dict[str, float] = {}

    def due(self, uid: str, now: float) -> bool:
        return now >= self._next.get(uid, 0.0)

    def tried(self, uid: str, now: float) -> None:
        attempts = self._attempts.get(uid, 0) + 1
        self._attempts[uid] = attempts
        self._next[uid] = now + min(INITIAL_BACKOFF * 2 ** (attempts - 1), MAX_BACKOFF)

    def hold(self, uid: str, until: float) -> None:
        """Do not try `uid` before `until` (a preemption for it just ended)."""
        self._next[uid] = max(self._next.get(uid, 0.0), until)

    def forget(self, uid: str) -> None:
        self._attempts.pop(uid, None)
        self._next.pop(uid, None)


@dataclass
class Candidate:
    pod: Pod
    reason: str
    strategy: Strategy


Reporter = Callable[[str, dict[str, Any]], None]


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
    ) -> None:
        self._view = view
        self._client = client
        self._settings = settings
        self._metrics = metrics
        self._report = report or (lambda _event, _fields: None)
        self._clock = clock
        self._tick = tick
        self._lock = threading.Lock()
        self._candidates: dict[str, Candidate] = {}
        self._bound: dict[str, str] = {}
        self._in_flight: dict[str, asyncio.Task[None]] = {}
        self._handles: dict[str, WorkflowHandle[PreemptionWorkflow, PreemptionResult]] = {}
        self._backoff = Backoff()
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self.finished: list[dict[str, Any]] = []
        self._tried: set[str] = set()

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._view.subscribe(self._on_watch_event)
        self.resync()
        self._task = asyncio.create_task(self._run(), name="trigger-loop")

    async def stop(self, drain: bool = True) -> None:
        """Stop starting preemptions; with `drain`, wait for the ones followed to finish
        (they go on in Temporal regardless: another worker picks them up)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if drain and self._in_flight:
            await asyncio.gather(*self._in_flight.values(), return_exceptions=True)
        for task in self._in_flight.values():
            task.cancel()

    @property
    def idle(self) -> bool:
        """Nothing in flight and no candidate that could be started now or soon."""
        with self._lock:
            return not self._in_flight and not self._candidates

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def settled(self) -> bool:
        """Nothing in flight, and every pod that still needs room has had its preemption:
        what is left is waiting for a backoff re-check, not for this loop."""
        with self._lock:
            return not self._in_flight and all(uid in self._tried for uid in self._candidates)

    # -- learning which pods need room ----------------------------------------------------------

    def resync(self) -> None:
        """Evaluate every pod in the view (at start, and now and then in case an event was
        missed)."""
        with self._view.read() as snapshot:
            pods = list(snapshot.pods.values())
        with self._lock:
            self._candidates = {}
            for pod in pods:
                self._consider(pod)
            self._metrics.pending_pods.set(len(self._candidates))

    def _consider(self, pod: Pod) -> None:
        found = trigger_reason(pod, self._settings)
        if found is None:
            self._candidates.pop(pod.uid, None)
            if pod.uid not in self._in_flight:
                self._backoff.forget(pod.uid)
        else:
            self._candidates[pod.uid] = Candidate(pod, *found)

    def _on_watch_event(self, event_type: str, kind: str, obj: dict[str, Any]) -> None:
        """From the view's watch thread: keep the candidates current, and tell a preemption
        its preemptor was bound the moment the watch shows it."""
        if kind != "Pod":
            return
        try:
            pod = decode_pod(obj)
        except PlannerInputError:
            return
        with self._lock:
            if event_type == "DELETED":
                self._candidates.pop(pod.uid, None)
            else:
                self._consider(pod)
                if pod.node_name and pod.uid in self._handles:
                    self._bound[pod.uid] = pod.node_name
            self._metrics.pending_pods.set(len(self._candidates))
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    # -- starting and following preemptions -------------------------------------------------------

    async def _run(self) -> None:
        resync_every, last_resync = 30.0, self._clock()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self._tick)
            self._wake.clear()
            if self._clock() - last_resync > resync_every:
                await asyncio.to_thread(self.resync)
                last_resync = self._clock()
            await self._signal_bound()
            await self._start_due()

    async def _signal_bound(self) -> None:
        with self._lock:
            bound, self._bound = self._bound, {}
        for uid, node in bound.items():
            handle = self._handles.get(uid)
            if handle is not None:
                try:
                    await handle.signal(PreemptionWorkflow.preemptor_bound, node)
                except Exception as error:  # the workflow may have finished meanwhile
                    log.debug("could not signal %s: %s", handle.id, error)

    async def _start_due(self) -> None:
        now = self._clock()
        with self._lock:
            due = sorted(
                (
                    c
                    for uid, c in self._candidates.items()
                    if uid not in self._in_flight and self._backoff.due(uid, now)
                ),
                key=lambda c: (-c.pod.priority, c.pod.namespace, c.pod.name),
            )
        for candidate in due:
            if len(self._in_flight) >= self._settings.max_in_flight:
                return
            await self._start(candidate, now)

    async def _start(self, candidate: Candidate, now: float) -> None:
        pod, settings = candidate.pod, self._settings
        request = PreemptionRequest(
            PodRef.of(pod),
            reason=candidate.reason,
            strategy=candidate.strategy.value,
            dry_run=settings.dry_run,
            use_eviction=settings.use_eviction,
            scheduled_wait_seconds=settings.scheduled_wait_seconds,
            call_timeout_seconds=settings.call_timeout_seconds,
            search_attributes=settings.search_attributes,
        )
        self._backoff.tried(pod.uid, now)
        ended_ago = await self._seconds_since_last_preemption_ended(pod)
        if ended_ago is not None and ended_ago < MAX_BACKOFF:
            # Another worker just finished this pod's preemption; our view may not show its
            # effect yet. Look again once it surely does.
            self._backoff.hold(pod.uid, now + MAX_BACKOFF - ended_ago)
            return
        try:
            handle = await start_preemption(self._client, request, task_queue=settings.task_queue)
        except Exception as error:
            log.warning("could not start the preemption of %s: %s", pod.key, error)
            return
        self._handles[pod.uid] = handle
        self._report("started", {"workflowId": handle.id, "preemptor": pod.key})
        self._in_flight[pod.uid] = asyncio.create_task(self._follow(pod, handle, self._clock()))
        self._metrics.in_flight.set(len(self._in_flight))

    async def _seconds_since_last_preemption_ended(self, pod: Pod) -> float | None:
        """How long ago this pod's latest preemption closed; None if it runs or never ran."""
        handle = self._client.get_workflow_handle(workflow_id_for(pod.uid))
        try:
            description = await handle.describe()
        except RPCError as error:
            if error.status is RPCStatusCode.NOT_FOUND:
                return None
            raise
        if description.close_time is None:
            return None
        return (datetime.now(UTC) - description.close_time).total_seconds()

    async def _follow(
        self, pod: Pod, handle: WorkflowHandle[PreemptionWorkflow, PreemptionResult], began: float
    ) -> None:
        outcome, fields = "failed", {}
        try:
            result = await handle.result()
            outcome = result.outcome
            victims = [v.pod.key for v in result.victims if v.status != "spared"]
            fields = {"node": result.node, "victims": victims, "message": result.message}
            if result.victims:
                self._metrics.victims.observe(len(result.victims))
            if result.throttled:
                self._metrics.throttled.inc(result.throttled)
        except WorkflowFailureError as error:
            fields = {"message": str(error.cause or error)}
        except asyncio.CancelledError:
            raise
        except Exception as error:
            fields = {"message": f"lost track of the preemption: {error}"}
        finally:
            self._tried.add(pod.uid)
            # The cluster view may trail the API by a moment: give it time to show what the
            # preemption did before the pod can look like it needs one again.
            self._backoff.hold(pod.uid, self._clock() + MAX_BACKOFF)
            self._in_flight.pop(pod.uid, None)
            self._handles.pop(pod.uid, None)
            self._metrics.in_flight.set(len(self._in_flight))
        seconds = self._clock() - began
        self._metrics.attempts.labels(outcome).inc()
        self._metrics.duration.labels(outcome).observe(seconds)
        record = {
            "workflowId": handle.id,
            "preemptor": pod.key,
            "outcome": outcome,
            "seconds": round(seconds, 3),
            **fields,
        }
        self.finished.append(record)
        self._report("finished", record)
        if self._loop is not None:
            self._wake.set()

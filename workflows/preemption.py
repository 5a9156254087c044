"""One preemption, from decision to the preemptor's scheduling, as a durable workflow.

The runbook a person would follow, step by step:

1. Select: re-read the preemptor and decide (one activity). Nothing to do ⇒ record and stop.
2. Write ahead: append the decision to the ledger before touching the cluster. A dry run
   stops here.
3. Nominate the preemptor to the chosen node; clear lower-priority nominations to it
   (failures there are recorded, not fatal, as upstream).
4. Victims: mark (DisruptionTarget) then delete each, all but the last in parallel. The last
   is recorded in workflow state before it is touched (upstream's
   `lastVictimsPendingPreemption`) and only touched if every other victim succeeded. Before
   each delete the preemptor is re-checked: gone, replaced, or bound elsewhere stops the
   preemption so no pod is evicted for nothing.
5. Outcome: wait (a durable timer) until the preemptor is bound or the deadline passes.

Every step's outcome is appended to the ledger by its own retried activity, so a ledger
outage delays the preemption but loses nothing, and a worker killed at any point resumes
from the last completed step: no victim is deleted twice, none is forgotten.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeUpdate
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from preemptctl.activities.contracts import (
        LedgerEntry,
        NominationInput,
        PreemptionRequest,
        PreemptorCheck,
        PreemptorState,
        RecordInput,
        SelectInput,
        Selection,
        VictimInput,
        WriteResult,
    )
    from preemptctl.activities.preemption import (
        ABORTED,
        TERMINATING,
        THROTTLED,
        PreemptionActivities,
    )
    from preemptctl.ledger.kinds import EventKind
    from preemptctl.preemption.decision import PodRef
    from preemptctl.workflows import search_attributes as sa

# Kubernetes writes: quick retries with backoff, bounded; RBAC denials and invalid requests
# fail at once (the activities mark them non-retryable).
KUBE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
)
KUBE_TIMEOUTS: dict[str, Any] = {
    "schedule_to_close_timeout": timedelta(minutes=5),
    "retry_policy": KUBE_RETRY,
}
# The ledger: the preemption waits for it rather than lose an event.
LEDGER_TIMEOUTS: dict[str, Any] = {
    "schedule_to_close_timeout": timedelta(days=1),
    "retry_policy": RetryPolicy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=30),
    ),
}
# The Preempted event is informational: a few tries, then move on.
EVENT_TIMEOUTS: dict[str, Any] = {
    "schedule_to_close_timeout": timedelta(minutes=1),
    "retry_policy": RetryPolicy(maximum_attempts=3, initial_interval=timedelta(seconds=1)),
}

DELETED, ALREADY_GONE, REPLACED = "Done", "AlreadyGone", "Replaced"


def workflow_id_for(preemptor_uid: str) -> str:
    """One preemption per pod at a time: the ID is derived from the preemptor's UID."""
    return f"preemption-{preemptor_uid}"


@dataclass
class VictimProgress:
    pod: PodRef
    status: str = "pending"  # marking, marked, deleting, deleted, already-gone, replaced,
    # terminating, failed, spared
    message: str = ""


@dataclass
class PreemptionState:
    """What the `state` query returns; the trigger loop answers upstream's
    `IsPodRunningPreemption` from `preempting` and `pending_last_victim`."""

    phase: str = "selecting"  # selecting, recording, nominating, preempting, waiting, finished
    preempting: bool = False
    node: str | None = None
    pending_last_victim: PodRef | None = None
    victims: list[VictimProgress] = field(default_factory=list)
    outcome: str | None = None  # completed, aborted, failed, dry-run, no-candidate, ineligible
    message: str = ""


@dataclass
class PreemptionResult:
    outcome: str
    message: str
    node: str | None = None
    victims: list[VictimProgress] = field(default_factory=list)
    preemptor_node: str | None = None
    seconds_to_schedule: float | None = None
    throttled: int = 0  # times the eviction budget held this preemption back
    # False when retrying cannot help until something changes (an RBAC denial, a preemptor
    # the planner refuses as Unsupported): the trigger parks the pod instead of backing off.
    retryable: bool = True


class _Stop(Exception):
    """The preemption cannot go on; `outcome` says how it ends."""

    def __init__(self, outcome: str, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.message = message


@workflow.defn(name="Preemption")
class PreemptionWorkflow:
    def __init__(self) -> None:
        self._state = PreemptionState()
        self._request: PreemptionRequest | None = None
        self._preemptor: PodRef | None = None
        self._bound_to: str | None = None
        self._throttled = 0

    @workflow.query(name="state")
    def state(self) -> PreemptionState:
        return self._state

    @workflow.signal(name="preemptor_bound")
    def preemptor_bound(self, node: str) -> None:
        """The trigger loop saw the preemptor bound: stop waiting for the next poll."""
        self._bound_to = node

    @workflow.run
    async def run(self, request: PreemptionRequest) -> PreemptionResult:
        self._request = request
        self._preemptor = request.preemptor
        try:
            return await self._preempt(request)
        except _Stop as stop:
            return await self._finish(stop.outcome, stop.message)

    # -- the runbook ------------------------------------------------------------------------

    async def _preempt(self, request: PreemptionRequest) -> PreemptionResult:
        selection = await self._select(request)
        while selection.status == THROTTLED:
            # Recorded, not dropped: the decision waits for the eviction budget, then is made
            # afresh (the cluster may have changed meanwhile).
            await self._record(
                LedgerEntry(
                    EventKind.THROTTLED,
                    node=selection.node,
                    payload={
                        "message": selection.message,
                        "retryAfter": selection.retry_after_seconds,
                        "victims": [v.key for v in selection.victims],
                    },
                    step=str(self._throttled),
                )
            )
            self._throttled += 1
            await workflow.sleep(timedelta(seconds=selection.retry_after_seconds))
            selection = await self._select(request)
        if selection.status == ABORTED:
            await self._record(
                LedgerEntry(EventKind.PREEMPTION_ABORTED, payload={"reason": selection.message})
            )
            raise _Stop("aborted", selection.message)

        self._enter("recording")
        await self._record(decision=selection.decision)
        if selection.status == "Ineligible":
            raise _Stop("ineligible", selection.message)
        if selection.status == "Unschedulable":
            raise _Stop("no-candidate", selection.message)
        if selection.status == "FitsWithoutPreemption":
            await self._record(
                LedgerEntry(EventKind.COMPLETED, payload={"reason": selection.message})
            )
            raise _Stop("completed", selection.message)
        if request.dry_run:
            await self._record(LedgerEntry(EventKind.DRY_RUN, node=selection.node))
            raise _Stop("dry-run", f"dry run: {selection.message}")

        assert selection.node is not None
        self._enter("nominating")
        await self._nominate(selection)

        self._enter("preempting")
        await self._preempt_victims(selection)

        self._enter("waiting")
        return await self._wait_for_scheduling(request, selection)

    async def _select(self, request: PreemptionRequest) -> Selection:
        self._state.preempting = True
        selection = await workflow.execute_activity_method(
            PreemptionActivities.select_preemption,
            SelectInput(
                workflow.info().workflow_id,
                request.preemptor,
                request.strategy,
                request.dry_run,
                run_id=workflow.info().run_id,
                occurred_at=workflow.now().isoformat(),
            ),
            summary=f"select victims for {request.preemptor.key}",
            **self._timeouts(KUBE_TIMEOUTS),
        )
        self._preemptor = selection.preemptor
        self._state.node = selection.node
        self._state.victims = [VictimProgress(v) for v in selection.victims]
        self._state.message = selection.message
        updates: list[SearchAttributeUpdate[Any]] = [sa.PREEMPTION_PHASE.value_set("recording")]
        if selection.node:
            updates.append(sa.TARGET_NODE.value_set(selection.node))
        if selection.victims:
            updates.append(sa.VICTIM_PODS.value_set([v.key for v in selection.victims]))
        self._upsert(updates)
        if selection.status == "Preempt":
            workflow.set_current_details(
                f"Preempt {len(selection.victims)} pod(s) on {selection.node} for "
                f"{selection.preemptor.key} (priority {selection.preemptor.priority}): "
                + ", ".join(v.key for v in selection.victims)
            )
        return selection

    async def _nominate(self, selection: Selection) -> None:
        node = selection.node
        assert node is not None and self._preemptor is not None
        try:
            result = await self._kube(
                PreemptionActivities.nominate_preemptor,
                NominationInput(self._preemptor, node, self._preemptor),
                f"nominate {self._preemptor.key} to {node}",
            )
            payload = {
                "verdict": result.verdict,
                "message": result.message,
                "previous": result.previous,
            }
        except ActivityError as error:
            payload = {"error": _cause(error)}
        await self._record(LedgerEntry(EventKind.NOMINATED, node=node, payload=payload))
        for pod in selection.nominations_to_clear:
            try:
                cleared = await self._kube(
                    PreemptionActivities.clear_nomination,
                    NominationInput(pod, node, self._preemptor),
                    f"clear nomination of {pod.key} to {node}",
                )
                payload = {
                    "pod": pod.key,
                    "uid": pod.uid,
                    "verdict": cleared.verdict,
                    "message": cleared.message,
                }
            except ActivityError as error:
                payload = {"pod": pod.key, "uid": pod.uid, "error": _cause(error)}
            await self._record(
                LedgerEntry(EventKind.NOMINATION_CLEARED, node=node, payload=payload, step=pod.uid)
            )

    async def _preempt_victims(self, selection: Selection) -> None:
        progress = self._state.victims
        if not progress:
            self._state.preempting = False
            return
        *others, last = progress
        results = await asyncio.gather(*(self._preempt_victim(v, selection) for v in others))
        failed = [
            v for v, ok in zip(others, results, strict=True) if not ok and v.status == "failed"
        ]
        if failed:
            last.status, last.message = "spared", "an earlier victim failed; not touched"
            raise _Stop(
                "failed", f"victim {failed[0].pod.key} could not be preempted: {failed[0].message}"
            )
        if any(not ok for ok in results):
            last.status = "spared"
            raise _Stop("aborted", self._state.message)
        self._state.pending_last_victim = last.pod
        if not await self._preempt_victim(last, selection, is_last=True):
            if last.status == "failed":
                raise _Stop(
                    "failed", f"victim {last.pod.key} could not be preempted: {last.message}"
                )
            raise _Stop("aborted", self._state.message)

    async def _preempt_victim(
        self, victim: VictimProgress, selection: Selection, is_last: bool = False
    ) -> bool:
        """Mark, re-check the preemptor, delete; True when the victim is out of the way."""
        assert self._preemptor is not None and selection.node is not None
        request = VictimInput(
            victim.pod,
            self._preemptor,
            selection.node,
            use_eviction=self._request.use_eviction if self._request else False,
            grace_period_seconds=self._request.grace_period_seconds if self._request else None,
            scheduler_name=selection.scheduler_name,
        )
        pod = victim.pod
        victim.status = "marking"
        try:
            marked = await self._kube(
                PreemptionActivities.mark_victim, request, f"mark {pod.key} (uid {pod.uid})"
            )
        except ActivityError as error:
            return await self._victim_failed(victim, error, selection.node)
        if await self._settled(victim, marked, selection.node):
            return True
        victim.status = "marked"
        await self._record(LedgerEntry(EventKind.VICTIM_MARKED, node=selection.node, victim=pod))

        if not await self._preemptor_still_needs(selection.node):
            victim.status, victim.message = (
                "spared",
                "the preemption was stopped before deleting it",
            )
            return False
        if is_last:
            self._state.preempting = False
        victim.status = "deleting"
        try:
            deleted = await self._kube(
                PreemptionActivities.delete_victim, request, f"delete {pod.key} (uid {pod.uid})"
            )
        except ActivityError as error:
            return await self._victim_failed(victim, error, selection.node)
        if await self._settled(victim, deleted, selection.node):
            return True
        victim.status, victim.message = "deleted", deleted.message
        await self._record(
            LedgerEntry(
                EventKind.VICTIM_DELETED,
                node=selection.node,
                victim=pod,
                payload={"message": deleted.message},
            )
        )
        try:
            await workflow.execute_activity_method(
                PreemptionActivities.record_preempted_event,
                request,
                summary=f"record Preempted event on {pod.key}",
                **self._timeouts(EVENT_TIMEOUTS),
            )
        except ActivityError as error:
            workflow.logger.warning(
                "could not record the Preempted event on %s: %s", pod.key, _cause(error)
            )
        return True

    async def _settled(self, victim: VictimProgress, result: WriteResult, node: str) -> bool:
        """A victim gone, replaced or already terminating needs nothing more: record it."""
        if result.verdict == ALREADY_GONE or result.verdict == TERMINATING:
            victim.status = "already-gone" if result.verdict == ALREADY_GONE else "terminating"
            payload = {"message": result.message, "terminating": result.verdict == TERMINATING}
            await self._record(
                LedgerEntry(
                    EventKind.VICTIM_ALREADY_GONE, node=node, victim=victim.pod, payload=payload
                )
            )
            return True
        if result.verdict == REPLACED:
            victim.status = "replaced"
            await self._record(
                LedgerEntry(
                    EventKind.VICTIM_REPLACED,
                    node=node,
                    victim=victim.pod,
                    payload={"message": result.message},
                )
            )
            return True
        return False

    async def _victim_failed(self, victim: VictimProgress, error: ActivityError, node: str) -> bool:
        victim.status, victim.message = "failed", _cause(error)
        await self._record(
            LedgerEntry(
                EventKind.VICTIM_FAILED,
                node=node,
                victim=victim.pod,
                payload={"error": victim.message},
            )
        )
        return False

    async def _preemptor_still_needs(self, node: str) -> bool:
        """Upstream deletes victims for a preemptor that may no longer need them; we check."""
        if self._state.outcome is not None or self._state.phase == "stopping":
            return False
        assert self._preemptor is not None
        now = await self._kube(
            PreemptionActivities.check_preemptor,
            PreemptorCheck(self._preemptor),
            f"check {self._preemptor.key} still needs room",
        )
        reason = None
        if now.state in ("Gone", "Replaced"):
            reason = f"the preemptor is {now.state.lower()}"
        elif now.state == "Bound" and now.node != node:
            reason = f"the preemptor was bound to {now.node}, not {node}"
        if reason is None:
            return True
        if self._state.phase != "stopping":
            self._state.phase, self._state.message = "stopping", reason
            await self._record(
                LedgerEntry(EventKind.PREEMPTION_ABORTED, node=node, payload={"reason": reason})
            )
        return False

    async def _wait_for_scheduling(
        self, request: PreemptionRequest, selection: Selection
    ) -> PreemptionResult:
        assert self._preemptor is not None
        started = workflow.now()
        deadline = started + timedelta(seconds=request.scheduled_wait_seconds)
        while True:
            state: PreemptorState = await self._kube(
                PreemptionActivities.check_preemptor,
                PreemptorCheck(self._preemptor),
                f"is {self._preemptor.key} bound yet",
            )
            if state.state == "Bound":
                seconds = (workflow.now() - started).total_seconds()
                await self._record(
                    LedgerEntry(
                        EventKind.PREEMPTOR_SCHEDULED,
                        node=state.node,
                        payload={"secondsSinceDecision": seconds},
                    ),
                    LedgerEntry(
                        EventKind.COMPLETED,
                        node=selection.node,
                        payload={"preemptorScheduled": True},
                    ),
                )
                result = await self._finish(
                    "completed", f"{self._preemptor.key} bound to {state.node}"
                )
                result.preemptor_node, result.seconds_to_schedule = state.node, seconds
                return result
            if state.state in ("Gone", "Replaced") or workflow.now() >= deadline:
                reason = (
                    f"the preemptor is {state.state.lower()}"
                    if state.state != "Pending"
                    else f"the preemptor was not bound within {request.scheduled_wait_seconds:g}s"
                )
                await self._record(
                    LedgerEntry(
                        EventKind.COMPLETED,
                        node=selection.node,
                        payload={"preemptorScheduled": False, "reason": reason},
                    )
                )
                return await self._finish("completed", reason)
            remaining = (deadline - workflow.now()).total_seconds()
            poll = max(0.001, min(request.scheduled_poll_seconds, remaining))
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(
                    lambda: self._bound_to is not None, timeout=timedelta(seconds=poll)
                )
            self._bound_to = None  # a signal only wakes the next check; the API decides

    # -- bookkeeping ------------------------------------------------------------------------

    def _upsert(self, updates: list[SearchAttributeUpdate[Any]]) -> None:
        if self._request is None or self._request.search_attributes:
            workflow.upsert_search_attributes(updates)

    def _timeouts(self, options: dict[str, Any]) -> dict[str, Any]:
        """`options` with the request's per-attempt timeout (`call_timeout_seconds`)."""
        seconds = self._request.call_timeout_seconds if self._request else 30.0
        return {**options, "start_to_close_timeout": timedelta(seconds=seconds)}

    def _enter(self, phase: str) -> None:
        self._state.phase = phase
        self._upsert([sa.PREEMPTION_PHASE.value_set(phase)])

    async def _kube(self, method: Any, argument: Any, summary: str) -> Any:
        return await workflow.execute_activity_method(
            method, argument, summary=summary, **self._timeouts(KUBE_TIMEOUTS)
        )

    async def _record(self, *entries: LedgerEntry, decision: dict[str, Any] | None = None) -> None:
        assert self._preemptor is not None
        info = workflow.info()
        await workflow.execute_activity_method(
            PreemptionActivities.record_events,
            RecordInput(
                info.workflow_id,
                info.run_id,
                self._preemptor,
                workflow.now().isoformat(),
                list(entries),
                decision,
            ),
            summary="ledger: "
            + ", ".join([*(["decision"] if decision else []), *(e.kind for e in entries)]),
            **self._timeouts(LEDGER_TIMEOUTS),
        )

    async def _finish(self, outcome: str, message: str) -> PreemptionResult:
        self._state.phase, self._state.outcome, self._state.message = "finished", outcome, message
        self._state.preempting = False
        self._upsert(
            [sa.PREEMPTION_PHASE.value_set("finished"), sa.PREEMPTION_OUTCOME.value_set(outcome)]
        )
        # Claims now end with the run's terminal event in the ledger; runs recorded before
        # that released an in-memory reservation here.
        releases = not workflow.patched("claims-in-ledger")
        if releases and outcome in ("failed", "aborted") and self._preemptor is not None:
            await workflow.execute_activity_method(
                PreemptionActivities.release_reservation,
                self._preemptor,
                summary=f"release what {self._preemptor.key} had claimed",
                **self._timeouts(KUBE_TIMEOUTS),
            )
        if outcome == "failed":
            await self._record(
                LedgerEntry(EventKind.FAILED, node=self._state.node, payload={"error": message})
            )
            raise ApplicationError(message, type="PreemptionFailed", non_retryable=True)
        return PreemptionResult(
            outcome, message, self._state.node, list(self._state.victims), throttled=self._throttled
        )


def _cause(error: ActivityError) -> str:
    """The innermost failure's message: what a person needs to read."""
    cause: BaseException = error
    while cause.__cause__ is not None:
        cause = cause.__cause__
    return str(cause)

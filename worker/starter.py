"""Starting a preemption: one workflow per preemptor (a pod, or a pod group), however many
triggers or replicas ask.

Whoever starts a run (the trigger loop, a person's `preemptctl retry`) builds its request
from the settings in force now (`preemption_request`): how a run behaves (dry or acting,
eviction, waits, timeouts, local activities) is the operator's current choice, never an
older run's; only which pod, why, and who started it come from the caller.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
)

from preemptctl.activities.view_channel import NoWorkflowProcess, ViewChannelServer
from preemptctl.preemption.decision import PodRef, Strategy
from preemptctl.preemption.group_decision import GroupRef
from preemptctl.worker.config import Settings
from preemptctl.workflows import search_attributes as sa
from preemptctl.workflows.contract import (
    RUNBOOK,
    GroupPreemptionRequest,
    GroupPreemptionResult,
    Phase,
    PreemptionRequest,
    PreemptionResult,
    group_workflow_id_for,
    workflow_id_for,
)
from preemptctl.workflows.group_preemption import GroupPreemptionWorkflow
from preemptctl.workflows.preemption import PreemptionWorkflow

WORKFLOW_TASK_TIMEOUT = timedelta(seconds=4)
"""How long a workflow task may go unanswered before another worker takes it. A preemption
is one workflow task whose steps are local activities (longer ones are extended by the SDK
as they run): when its worker dies mid-way, this is how soon another runs it again (the
server's default, 10 s, was the whole of the recovery time)."""


def preemption_request(
    preemptor: PodRef,
    settings: Settings,
    *,
    reason: str = "Unschedulable",
    strategy: Strategy = Strategy.DEFAULT,
    started_by: str = "trigger",
    retry_reason: str = "",
    scheduled_poll_seconds: float | None = None,
) -> PreemptionRequest:
    """The request for a run of `preemptor`'s preemption, as the settings say runs behave
    now (`scheduled_poll_seconds`: the caller's, when it polls more often than the
    default)."""
    request = PreemptionRequest(
        preemptor,
        reason=reason,
        strategy=strategy,
        dry_run=settings.dry_run,
        use_eviction=settings.use_eviction,
        scheduled_wait_seconds=settings.scheduled_wait_seconds,
        call_timeout_seconds=settings.call_timeout_seconds,
        local_activities=settings.local_activities,
        search_attributes=settings.search_attributes,
        started_by=started_by,
        retry_reason=retry_reason,
        runbook=RUNBOOK,
    )
    if scheduled_poll_seconds is not None:
        request.scheduled_poll_seconds = scheduled_poll_seconds
    return request


def search_attributes_at_start(request: PreemptionRequest) -> TypedSearchAttributes:
    """What a run carries from its start, whoever starts it (the trigger loop here, or a
    person's `preemptctl retry`), so `PreemptorPod = "ns/name"` in the UI finds every run."""
    pod = request.preemptor
    if not request.search_attributes:
        return TypedSearchAttributes([])
    return TypedSearchAttributes(
        [
            SearchAttributePair(sa.PREEMPTOR_POD, pod.key),
            SearchAttributePair(sa.PREEMPTOR_NAMESPACE, pod.namespace),
            SearchAttributePair(sa.PREEMPTOR_UID, pod.uid),
            SearchAttributePair(sa.PREEMPTION_PHASE, Phase.SELECTING.value),
        ]
    )


async def start_preemption(
    client: Client, request: PreemptionRequest, *, task_queue: str, eager: bool = False
) -> WorkflowHandle[PreemptionWorkflow, PreemptionResult]:
    """Start the preemption of `request.preemptor`, or join the one already running for it.

    `eager`: the caller runs a worker on `task_queue` with this same client (the trigger
    loop does): the server may hand that worker the first workflow task in its answer to
    the start, instead of through a poll. Without such a worker it starts as usual."""
    pod = request.preemptor
    return await client.start_workflow(
        PreemptionWorkflow.run,
        request,
        id=workflow_id_for(pod.namespace, pod.name, pod.uid),
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        search_attributes=search_attributes_at_start(request),
        static_summary=f"Preempt for {pod.key} (priority {pod.priority})",
        static_details=(
            f"Preemptor {pod.key}, uid {pod.uid}, priority {pod.priority}; trigger: "
            f"{request.reason}; strategy {request.strategy}"
            + ("; dry run" if request.dry_run else "")
        ),
        request_eager_start=eager,
        task_timeout=WORKFLOW_TASK_TIMEOUT,
    )


def group_preemption_request(
    group: GroupRef,
    settings: Settings,
    *,
    reason: str = "Unschedulable",
    started_by: str = "trigger",
    retry_reason: str = "",
) -> GroupPreemptionRequest:
    """The request for a run of `group`'s preemption, as the settings say runs behave now."""
    return GroupPreemptionRequest(
        group,
        reason=reason,
        dry_run=settings.dry_run,
        use_eviction=settings.use_eviction,
        scheduled_wait_seconds=settings.scheduled_wait_seconds,
        call_timeout_seconds=settings.call_timeout_seconds,
        local_activities=settings.local_activities,
        search_attributes=settings.search_attributes,
        started_by=started_by,
        retry_reason=retry_reason,
        runbook=RUNBOOK,
    )


def group_search_attributes_at_start(request: GroupPreemptionRequest) -> TypedSearchAttributes:
    """What a group run carries from its start: its group as the preemptor
    (`PreemptorPod = "ml/train-a"` finds it beside pod preemptions) and as `PodGroup`."""
    group = request.group
    if not request.search_attributes:
        return TypedSearchAttributes([])
    return TypedSearchAttributes(
        [
            SearchAttributePair(sa.PREEMPTOR_POD, group.key),
            SearchAttributePair(sa.PREEMPTOR_NAMESPACE, group.namespace),
            SearchAttributePair(sa.PREEMPTOR_UID, group.uid),
            SearchAttributePair(sa.POD_GROUP, group.key),
            SearchAttributePair(sa.PREEMPTION_PHASE, Phase.SELECTING.value),
        ]
    )


async def start_group_preemption(
    client: Client, request: GroupPreemptionRequest, *, task_queue: str, eager: bool = False
) -> WorkflowHandle[GroupPreemptionWorkflow, GroupPreemptionResult]:
    """Start the preemption of `request.group`, or join the one already running for it (a
    trigger for any of its pending members joins the group's one workflow)."""
    group = request.group
    kind = "label-named group" if group.label_named else "pod group"
    return await client.start_workflow(
        GroupPreemptionWorkflow.run,
        request,
        id=group_workflow_id_for(group.namespace, group.name, group.uid),
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        search_attributes=group_search_attributes_at_start(request),
        static_summary=f"Preempt for {kind} {group.key} (priority {group.priority})",
        static_details=(
            f"Pod group {group.key}, uid {group.uid}, priority {group.priority}; trigger: "
            f"{request.reason}" + ("; dry run" if request.dry_run else "")
        ),
        request_eager_start=eager,
        task_timeout=WORKFLOW_TASK_TIMEOUT,
    )


@dataclass(frozen=True)
class Started:
    """A start made in a workflow process: the run, and whether its first workflow task
    came back in the start's answer (eager)."""

    workflow_id: str
    run_id: str
    eager: bool


class Starts:
    """How the trigger loop starts preemptions: eagerly, through the client of the worker
    that runs the workflows (this process's own, or a workflow process's, handed over the
    view channel, `activities.view_channel`). Where no workflow process serves yet, the
    start goes through this process's client, not eagerly."""

    def __init__(
        self,
        client: Client,
        task_queue: str,
        *,
        eager: bool = True,
        workflow_processes: ViewChannelServer | None = None,
    ) -> None:
        self._client = client
        self._task_queue = task_queue
        self._eager = eager
        self._processes = workflow_processes
        self.eagerly = 0  # starts whose first workflow task came back in their answer

    async def preemption(
        self, request: PreemptionRequest
    ) -> WorkflowHandle[PreemptionWorkflow, PreemptionResult]:
        started = await self._in_a_workflow_process("start_preemption", request)
        if started is not None:
            return self._client.get_workflow_handle_for(
                PreemptionWorkflow.run, started.workflow_id, run_id=started.run_id
            )
        handle = await start_preemption(
            self._client, request, task_queue=self._task_queue, eager=self._eager
        )
        self.eagerly += bool(getattr(handle, "__temporal_eagerly_started", False))
        return handle

    async def group_preemption(
        self, request: GroupPreemptionRequest
    ) -> WorkflowHandle[GroupPreemptionWorkflow, GroupPreemptionResult]:
        started = await self._in_a_workflow_process("start_group_preemption", request)
        if started is not None:
            return self._client.get_workflow_handle_for(
                GroupPreemptionWorkflow.run, started.workflow_id, run_id=started.run_id
            )
        handle = await start_group_preemption(
            self._client, request, task_queue=self._task_queue, eager=self._eager
        )
        self.eagerly += bool(getattr(handle, "__temporal_eagerly_started", False))
        return handle

    async def _in_a_workflow_process(self, operation: str, request: Any) -> Started | None:
        if self._processes is None:
            return None
        try:
            started: Started = await asyncio.to_thread(
                self._processes.ask, operation, request, START_SECONDS
            )
        except NoWorkflowProcess:
            return None
        self.eagerly += started.eager
        return started


START_SECONDS = 10.0  # how long a start handed to a workflow process may take


def start_in_this_process(client: Client, task_queue: str, loop: asyncio.AbstractEventLoop) -> Any:
    """What a workflow process answers the main process's starts with (`Starts`), from the
    thread that serves it: the start, made through this process's client on its event
    loop, eagerly (this process's worker takes the first workflow task)."""

    def start(operation: str, request: Any) -> Started:
        async def started() -> Started:
            if operation == "start_group_preemption":
                handle: WorkflowHandle[Any, Any] = await start_group_preemption(
                    client, request, task_queue=task_queue, eager=True
                )
            elif operation == "start_preemption":
                handle = await start_preemption(client, request, task_queue=task_queue, eager=True)
            else:
                raise ValueError(f"no such start: {operation!r}")
            eager = bool(getattr(handle, "__temporal_eagerly_started", False))
            return Started(handle.id, handle.result_run_id or "", eager)

        return asyncio.run_coroutine_threadsafe(started(), loop).result(START_SECONDS)

    return start

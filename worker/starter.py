"""Starting a preemption: one workflow per preemptor (a pod, or a pod group), however many
triggers or replicas ask.

Whoever starts a run (the trigger loop, a person's `preemptctl retry`) builds its request
from the settings in force now (`preemption_request`): how a run behaves (dry or acting,
eviction, waits, timeouts, local activities) is the operator's current choice, never an
older run's; only which pod, why, and who started it come from the caller.
"""

from __future__ import annotations

from temporalio.client import Client, WorkflowHandle
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
)

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
    )

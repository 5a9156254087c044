"""Starting a preemption: one workflow per preemptor, however many triggers or replicas ask."""

from __future__ import annotations

from temporalio.client import Client, WorkflowHandle
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
)

from preemptctl.workflows import search_attributes as sa
from preemptctl.workflows.contract import (
    Phase,
    PreemptionRequest,
    PreemptionResult,
    workflow_id_for,
)
from preemptctl.workflows.preemption import PreemptionWorkflow


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

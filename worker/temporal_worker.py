"""The Temporal worker that runs preemption workflows and their activities in this process."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from temporalio.client import Client
from temporalio.worker import PollerBehaviorAutoscaling, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from preemptctl.activities.preemption import PreemptionActivities
from preemptctl.workflows.preemption import PreemptionWorkflow

DEFAULT_TASK_QUEUE = "preemptctl"

# Modules the workflow sandbox must not re-import per run: the activities' I/O libraries
# (imported only for the activity method references) and our own pure modules.
PASSTHROUGH_MODULES = (
    "kubernetes",
    "urllib3",
    "sqlalchemy",
    "psycopg",
    "orjson",
    "yaml",
    "preemptctl.activities",
    "preemptctl.kube",
    "preemptctl.ledger",
    "preemptctl.preemption",
)


def workflow_runner() -> SandboxedWorkflowRunner:
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES)
    )


def build_worker(
    client: Client,
    activities: PreemptionActivities,
    *,
    task_queue: str = DEFAULT_TASK_QUEUE,
    max_concurrent_activities: int = 64,
    max_pollers: int = 20,
) -> Worker:
    """A worker for preemptions: the workflow, and the activities on a thread pool (the
    Kubernetes client and the ledger engine are synchronous).

    Pollers scale with the backlog, up to `max_pollers` per task kind: a burst of
    preemptions brings workflow and activity tasks faster than five long polls (the SDK's
    default) take them."""
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[PreemptionWorkflow],
        activities=activities.all(),
        activity_executor=ThreadPoolExecutor(max_workers=max_concurrent_activities),
        max_concurrent_activities=max_concurrent_activities,
        workflow_runner=workflow_runner(),
        workflow_task_poller_behavior=PollerBehaviorAutoscaling(maximum=max_pollers),
        activity_task_poller_behavior=PollerBehaviorAutoscaling(maximum=max_pollers),
    )

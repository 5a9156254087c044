"""`preemptctl retry`: a failed preemption, fixed and re-run by a person, end to end.

Scenarios (the real dev server, the emulator, the Postgres ledger):
- a preemption that failed on an RBAC denial is retried once the denial is lifted: the new
  run of the same preemption completes, and the ledger holds both attempts, the `retried`
  event naming the person's reason and the failed run before it;
- retrying a preemption whose preemptor is now bound is refused in one line, starting nothing;
- retrying a preemption whose run is still open is refused;
- retrying a pod that is gone, or a malformed target, is refused;
- the new run behaves as the settings in force say (dry run, eviction, timeouts, local
  activities), not as the failed run was told; only who and why come from the person;
- issue 20, finding 4: after the operator hands preemption back to kube-scheduler (the
  worker restarted with PREEMPT_DRY_RUN=true), a retry whose request says to act (the CLI's
  environment not updated) is run as a dry run by the worker: recorded as one, and no pod
  deleted, evicted or patched, no event created.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle

from preemptctl.activities.preemption import PreemptionActivities
from preemptctl.worker.config import Settings
from preemptctl.worker.errors import UsageError
from preemptctl.worker.retry_command import RETRY_POLL_SECONDS, retry, started_with
from preemptctl.worker.temporal_worker import build_worker
from preemptctl.workflows.preemption import PreemptionWorkflow
from tests.workflows.harness import Stack, bind_when_room, running_stack
from tests.workflows.scenarios import one_full_node

pytestmark = pytest.mark.asyncio(loop_scope="session")

VICTIMS = ["default/victim-0", "default/victim-1"]


def settings_for(client: Client, stack: Stack, **more: Any) -> Settings:
    return Settings(
        temporal_address=client.service_client.config.target_host,
        temporal_namespace=client.namespace,
        task_queue=stack.task_queue,
        kubeconfig=str(stack.emulator.kubeconfig_path),
        **more,
    )


async def failed_on_a_denied_delete(stack: Stack) -> WorkflowHandle[Any, Any]:
    """A preemption of `urgent` that failed for good: its DELETE of victim-0 refused."""
    stack.emulator.faults.deny("delete", "pods", name="victim-0")
    failed = await stack.start("default/urgent")
    with pytest.raises(WorkflowFailureError):
        await failed.result()
    stack.emulator.faults.clear()
    return failed


async def test_a_failed_preemption_retried_by_a_person_completes(client, ledger, emulator):
    async with running_stack(client, ledger, emulator, one_full_node()) as stack:
        emulator.faults.deny("delete", "pods", name="victim-0")
        failed = await stack.start("default/urgent")
        with pytest.raises(WorkflowFailureError):
            await failed.result()
        emulator.faults.clear()  # the person fixed the RBAC rule

        outcome = await retry(
            settings_for(client, stack), "default/urgent", "granted delete", dry_run=False
        )
        scheduler = asyncio.create_task(bind_when_room(stack, "default/urgent", "node-1", VICTIMS))
        new_run = client.get_workflow_handle_for(
            PreemptionWorkflow.run, outcome["preemptionId"], run_id=outcome["runId"]
        )
        result = await new_run.result()
        await scheduler
        kinds = stack.ledger_kinds(failed.id)
        retried = stack.ledger_payloads(failed.id, "retried")

    assert outcome["preemptionId"] == failed.id
    assert outcome["previousRunId"] == failed.result_run_id
    assert outcome["runId"] != failed.result_run_id
    assert result.outcome == "completed"
    assert kinds.count("failed") == 1
    assert kinds[-1] == "completed"
    assert len(retried) == 1
    assert retried[0]["by"] == "person"
    assert retried[0]["reason"] == "granted delete"
    assert retried[0]["previousRunId"] == failed.result_run_id


async def test_a_bound_preemptor_is_not_retried(client, ledger, emulator):
    async with running_stack(client, ledger, emulator, one_full_node()) as stack:
        emulator.faults.deny("delete", "pods", name="victim-0")
        failed = await stack.start("default/urgent")
        with pytest.raises(WorkflowFailureError):
            await failed.result()
        stack.bind("default/urgent", "node-1")
        with pytest.raises(UsageError, match="already bound to node-1: nothing to retry"):
            await retry(settings_for(client, stack), failed.id, "", dry_run=False)
        runs = [e async for e in client.list_workflows(f'WorkflowId = "{failed.id}"')]
    assert len(runs) == 1


async def test_an_open_run_is_not_retried(client, ledger, emulator):
    async with running_stack(client, ledger, emulator, one_full_node(), with_worker=False) as stack:
        handle = await stack.start("default/urgent")
        try:
            with pytest.raises(UsageError, match="still open"):
                await retry(settings_for(client, stack), "default/urgent", "", dry_run=True)
        finally:
            await handle.terminate("test over")


async def test_nothing_on_record_or_a_malformed_target_is_refused(client, ledger, emulator):
    async with running_stack(client, ledger, emulator, one_full_node()) as stack:
        settings = settings_for(client, stack)
        with pytest.raises(
            UsageError,
            match=r"^default/nobody is gone \(no pod or pod group by that name\): nothing to ",
        ):
            await retry(settings, "default/nobody", "", dry_run=True)
        with pytest.raises(UsageError, match="expected NAMESPACE/NAME or a preemption ID"):
            await retry(settings, "just-a-name", "", dry_run=True)


async def test_a_retry_runs_as_the_settings_in_force_say(client, ledger, emulator):
    async with running_stack(client, ledger, emulator, one_full_node()) as stack:
        failed = await failed_on_a_denied_delete(stack)
        settings = settings_for(
            client,
            stack,
            dry_run=True,
            use_eviction=True,
            scheduled_wait_seconds=42.0,
            call_timeout_seconds=3.0,
            local_activities=False,
        )
        outcome = await retry(settings, "default/urgent", "shadow mode now", dry_run=False)
        new_run = client.get_workflow_handle_for(
            PreemptionWorkflow.run, failed.id, run_id=outcome["runId"]
        )
        result = await new_run.result()
        request = await started_with(client, failed.id, outcome["runId"])
        before = await started_with(client, failed.id, failed.result_run_id or "")

    assert (before.dry_run, before.use_eviction, before.local_activities) == (False, False, False)
    assert outcome["dryRun"] is True
    assert (request.dry_run, request.use_eviction, request.local_activities) == (True, True, False)
    assert (request.scheduled_wait_seconds, request.call_timeout_seconds) == (42.0, 3.0)
    assert request.scheduled_poll_seconds == RETRY_POLL_SECONDS
    assert (request.preemptor, request.started_by) == (before.preemptor, "person")
    assert request.retry_reason == "shadow mode now"
    assert result.outcome == "dry-run"


async def test_a_retry_on_a_worker_that_runs_dry_writes_nothing(client, ledger, emulator):
    async with running_stack(client, ledger, emulator, one_full_node(), with_worker=False) as stack:
        async with build_worker(client, stack.activities, task_queue=stack.task_queue):
            failed = await failed_on_a_denied_delete(stack)
        shadow = PreemptionActivities(stack.kube, stack.view, ledger, dry_run=True)
        async with build_worker(client, shadow, task_queue=stack.task_queue):
            asked_at = time.time()
            # The CLI's environment still says to act: only the worker runs dry.
            outcome = await retry(settings_for(client, stack), "default/urgent", "", dry_run=False)
            new_run = client.get_workflow_handle_for(
                PreemptionWorkflow.run, failed.id, run_id=outcome["runId"]
            )
            result = await new_run.result()
        kinds = stack.ledger_kinds(failed.id)

    writes = [
        f"{r.verb} {r.resource} {r.name}"
        for r in emulator.requests
        if r.received_at >= asked_at and r.verb in ("create", "update", "patch", "delete")
    ]
    assert outcome["dryRun"] is False
    assert writes == []
    assert result.outcome == "dry-run"
    assert result.message.startswith("dry run (the worker runs dry, PREEMPT_DRY_RUN=true): ")
    assert kinds[kinds.index("retried") :] == [
        "retried",
        "decision_made",
        "victim_chosen:victim-0",
        "victim_chosen:victim-1",
        "dry_run",
    ]

"""`preemptctl retry`: a failed preemption, fixed and re-run by a person, end to end.

Scenarios (the real dev server, the emulator, the Postgres ledger):
- a preemption that failed on an RBAC denial is retried once the denial is lifted: the new
  run of the same preemption completes, and the ledger holds both attempts, the `retried`
  event naming the person's reason and the failed run before it;
- retrying a preemption whose preemptor is now bound is refused in one line, starting nothing;
- retrying a preemption whose run is still open is refused;
- retrying a pod that is gone, or a malformed target, is refused.
"""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import Client, WorkflowFailureError

from preemptctl.worker.config import Settings
from preemptctl.worker.errors import UsageError
from preemptctl.worker.retry_command import retry
from preemptctl.workflows.preemption import PreemptionWorkflow
from tests.workflows.harness import Stack, bind_when_room, running_stack
from tests.workflows.scenarios import one_full_node

pytestmark = pytest.mark.asyncio(loop_scope="session")

VICTIMS = ["default/victim-0", "default/victim-1"]


def settings_for(client: Client, stack: Stack) -> Settings:
    return Settings(
        temporal_address=client.service_client.config.target_host,
        temporal_namespace=client.namespace,
        task_queue=stack.task_queue,
        kubeconfig=str(stack.emulator.kubeconfig_path),
    )


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
        with pytest.raises(UsageError, match="default/nobody is gone: nothing to retry"):
            await retry(settings, "default/nobody", "", dry_run=True)
        with pytest.raises(UsageError, match="expected NAMESPACE/NAME or a preemption ID"):
            await retry(settings, "just-a-name", "", dry_run=True)

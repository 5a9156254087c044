"""`preemptctl retry` for a gang: a failed group preemption, fixed and re-run by a person.

Scenarios (the real dev server, the emulator, the Postgres ledger; the bundled gang
scenario, as tests/workflows/test_full_stack_groups.py runs it):
- a group preemption that failed on an RBAC denial is retried by `--pod-group ml/train-a`
  once the denial is lifted: a new run of `GroupPreemptionWorkflow` under the same ID
  completes, the ledger holds both attempts, and its `retried` event names the person, the
  reason and the failed run; the new run was started by a person, polling every
  `RETRY_POLL_SECONDS`, as the settings in force say (a dry run when they say so);
- by the group preemption's ID: refused, starting nothing, once the gang is placed (every
  member bound), once the PodGroup is gone, and once it is replaced by a new UID (by name,
  the new group has no preemption on record);
- a group with a run still open is refused;
- a member pod named instead of its group is refused, the line naming the `--pod-group`;
- the group's name alone (`retry ml/train-a`, no pod by that name) retries the group;
- the command line: `--pod-group` with `--dry-run -o json` and in text, and a target and
  `--pod-group` both, or neither, refused in one line.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from sqlalchemy import Engine
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle

from preemptctl.emulator import Emulator
from preemptctl.emulator.resources import POD_GROUPS
from preemptctl.worker.cli import main
from preemptctl.worker.config import Settings
from preemptctl.worker.errors import UsageError
from preemptctl.worker.retry_command import RETRY_POLL_SECONDS, group_started_with, retry
from preemptctl.workflows.contract import workflow_id_for
from preemptctl.workflows.group_preemption import GroupPreemptionWorkflow
from tests.workflows.harness import Stack, running_stack
from tests.workflows.test_full_stack_groups import TRAINERS, gang

pytestmark = pytest.mark.asyncio(loop_scope="session")


def settings_for(client: Client, stack: Stack, **more: Any) -> Settings:
    return Settings(
        temporal_address=client.service_client.config.target_host,
        temporal_namespace=client.namespace,
        task_queue=stack.task_queue,
        kubeconfig=str(stack.emulator.kubeconfig_path),
        **more,
    )


async def failed_on_a_denied_delete(stack: Stack) -> WorkflowHandle[Any, Any]:
    """A group preemption of ml/train-a that failed for good: every DELETE of a pod refused
    (not retryable: the trigger parks the group), no victim deleted, the marks undone."""
    stack.emulator.faults.deny("delete", "pods")
    failed = await stack.start_group("ml/train-a")
    with pytest.raises(WorkflowFailureError):
        await failed.result()
    stack.emulator.faults.clear()
    return failed


async def runs_of(client: Client, workflow_id: str) -> int:
    return len([e async for e in client.list_workflows(f'WorkflowId = "{workflow_id}"')])


async def test_a_failed_group_preemption_retried_by_a_person_completes(
    client: Client, ledger: Engine, emulator: Emulator
) -> None:
    async with running_stack(client, ledger, emulator, gang()) as stack:
        failed = await failed_on_a_denied_delete(stack)  # the person fixed the RBAC rule

        outcome = await retry(
            settings_for(client, stack),
            "ml/train-a",
            "granted delete",
            dry_run=False,
            pod_group=True,
        )
        new_run = client.get_workflow_handle_for(
            GroupPreemptionWorkflow.run, outcome["preemptionId"], run_id=outcome["runId"]
        )
        result = await new_run.result()
        request = await group_started_with(client, failed.id, outcome["runId"])
        kinds = stack.ledger_kinds(failed.id)
        retried = stack.ledger_payloads(failed.id, "retried")

    assert outcome["preemptionId"] == failed.id
    assert (outcome["preemptor"], outcome["podGroup"]) == ("ml/train-a", "ml/train-a")
    assert outcome["members"] == {"pending": 4, "bound": 0}
    assert (outcome["previousRunId"], outcome["previousStatus"]) == (
        failed.result_run_id,
        "failed",
    )
    assert outcome["runId"] != failed.result_run_id
    assert (request.started_by, request.retry_reason) == ("person", "granted delete")
    assert request.scheduled_poll_seconds == RETRY_POLL_SECONDS
    assert result.outcome == "completed"
    assert kinds.count("failed") == 1
    assert kinds[kinds.index("failed") + 1] == "retried"
    assert kinds[-1] == "completed"
    assert len(retried) == 1
    assert retried[0]["by"] == "person"
    assert retried[0]["reason"] == "granted delete"
    assert retried[0]["previousRunId"] == failed.result_run_id


async def test_a_groups_name_alone_retries_the_group(
    client: Client, ledger: Engine, emulator: Emulator
) -> None:
    """`retry ml/train-a`, no pod by that name: the PodGroup's preemption, as `history` and
    `explain` take the name (issue 25: it answered "is gone: nothing to retry")."""
    async with running_stack(client, ledger, emulator, gang()) as stack:
        failed = await failed_on_a_denied_delete(stack)
        flags = [
            "--temporal-address",
            client.service_client.config.target_host,
            "--temporal-namespace",
            client.namespace,
            "--kubeconfig",
            str(emulator.kubeconfig_path),
        ]
        code, out, err = await asyncio.to_thread(cli, "retry", "ml/train-a", "--dry-run", *flags)
        runs = await runs_of(client, failed.id)
    assert (code, err) == (0, "")
    assert out.splitlines()[:3] == [
        f"would start a new run of {failed.id} for pod group ml/train-a",
        f"  after run   {failed.result_run_id} (failed)",
        "  members     4 pending, 0 bound",
    ]
    assert runs == 1


async def test_a_group_retry_runs_as_the_settings_in_force_say(
    client: Client, ledger: Engine, emulator: Emulator
) -> None:
    async with running_stack(client, ledger, emulator, gang()) as stack:
        failed = await failed_on_a_denied_delete(stack)
        settings = settings_for(client, stack, dry_run=True, scheduled_wait_seconds=42.0)
        outcome = await retry(settings, failed.id, "", dry_run=False)
        new_run = client.get_workflow_handle_for(
            GroupPreemptionWorkflow.run, failed.id, run_id=outcome["runId"]
        )
        result = await new_run.result()
        request = await group_started_with(client, failed.id, outcome["runId"])
        before = await group_started_with(client, failed.id, failed.result_run_id or "")
        retried = stack.ledger_payloads(failed.id, "retried")

    assert (before.dry_run, request.dry_run, outcome["dryRun"]) == (False, True, True)
    assert request.scheduled_wait_seconds == 42.0
    assert (request.group, request.reason) == (before.group, before.reason)
    assert (request.started_by, request.retry_reason) == ("person", "a person ran preemptctl retry")
    assert result.outcome == "dry-run"
    assert [r["by"] for r in retried] == ["person"]


async def test_a_placed_group_is_not_retried(
    client: Client, ledger: Engine, emulator: Emulator
) -> None:
    async with running_stack(client, ledger, emulator, gang()) as stack:
        failed = await failed_on_a_denied_delete(stack)
        for node, trainer in enumerate(TRAINERS, start=1):  # the scheduler placed it anyway
            stack.bind(trainer, f"node-{node}")
        with pytest.raises(
            UsageError,
            match=r"^pod group ml/train-a is already placed: all 4 member\(s\) bound "
            r"\(to node-1, node-2, node-3, node-4\): nothing to retry$",
        ):
            await retry(settings_for(client, stack), failed.id, "", dry_run=False)
        assert await runs_of(client, failed.id) == 1


async def test_a_gone_or_replaced_group_is_not_retried(
    client: Client, ledger: Engine, emulator: Emulator
) -> None:
    async with running_stack(client, ledger, emulator, gang()) as stack:
        failed = await failed_on_a_denied_delete(stack)
        settings = settings_for(client, stack)
        before = emulator.store.get(POD_GROUPS, "ml", "train-a")
        emulator.store.delete(POD_GROUPS, "ml", "train-a")
        with pytest.raises(UsageError, match=r"^pod group ml/train-a is gone: nothing to retry$"):
            await retry(settings, failed.id, "", dry_run=False)
        with pytest.raises(UsageError, match=r"^pod group ml/train-a is gone: nothing to retry$"):
            await retry(settings, "ml/train-a", "", dry_run=False, pod_group=True)

        emulator.store.create(
            POD_GROUPS, "ml", {"metadata": {"name": "train-a"}, "spec": before["spec"]}
        )
        with pytest.raises(
            UsageError,
            match=r"^pod group ml/train-a is now another group \(uid changed\): nothing to retry$",
        ):
            await retry(settings, failed.id, "", dry_run=False)
        with pytest.raises(UsageError, match=r"^no group preemption group-preemption-ml-train-a-"):
            await retry(settings, "ml/train-a", "", dry_run=False, pod_group=True)
        assert await runs_of(client, failed.id) == 1


async def test_an_open_group_run_is_not_retried(
    client: Client, ledger: Engine, emulator: Emulator
) -> None:
    async with running_stack(client, ledger, emulator, gang(), with_worker=False) as stack:
        handle = await stack.start_group("ml/train-a")
        try:
            with pytest.raises(UsageError, match="still open"):
                await retry(settings_for(client, stack), handle.id, "", dry_run=True)
            with pytest.raises(UsageError, match="still open"):
                await retry(
                    settings_for(client, stack), "ml/train-a", "", dry_run=True, pod_group=True
                )
        finally:
            await handle.terminate("test over")


async def test_a_member_named_is_pointed_to_its_group(
    client: Client, ledger: Engine, emulator: Emulator
) -> None:
    async with running_stack(client, ledger, emulator, gang()) as stack:
        member = stack.preemptor("ml/train-a-0")
        with pytest.raises(UsageError) as refused:
            await retry(settings_for(client, stack), "ml/train-a-0", "", dry_run=True)
    assert str(refused.value) == (
        f"no preemption {workflow_id_for('ml', 'train-a-0', member.uid)} on record: nothing "
        "to retry; it is a member of pod group ml/train-a: name that (--pod-group ml/train-a)"
    )


def cli(*argv: str) -> tuple[int, str, str]:
    """`preemptctl` in-process, its output captured (run in a thread: it runs its own loop)."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


async def test_the_command_line_names_a_group_with_pod_group(
    client: Client, ledger: Engine, emulator: Emulator
) -> None:
    async with running_stack(client, ledger, emulator, gang()) as stack:
        failed = await failed_on_a_denied_delete(stack)
        flags = [
            "--temporal-address",
            client.service_client.config.target_host,
            "--temporal-namespace",
            client.namespace,
            "--kubeconfig",
            str(emulator.kubeconfig_path),
        ]
        as_json = await asyncio.to_thread(
            cli, "retry", "--pod-group", "ml/train-a", "--dry-run", "-o", "json", *flags
        )
        as_text = await asyncio.to_thread(
            cli, "retry", "--pod-group", "ml/train-a", "--dry-run", *flags
        )
        runs = await runs_of(client, failed.id)

    code, out, err = as_json
    assert (code, err) == (0, "")
    shown = json.loads(out)
    assert shown == {
        "preemptionId": failed.id,
        "preemptor": "ml/train-a",
        "podGroup": "ml/train-a",
        "previousRunId": failed.result_run_id,
        "previousStatus": "failed",
        "runId": None,
        "dryRun": False,
        "link": f"temporal workflow describe --workflow-id {failed.id}",
        "members": {"pending": 4, "bound": 0},
    }
    code, out, err = as_text
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"would start a new run of {failed.id} for pod group ml/train-a",
        f"  after run   {failed.result_run_id} (failed)",
        "  members     4 pending, 0 bound",
        f"  see         temporal workflow describe --workflow-id {failed.id}",
    ]
    assert runs == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["retry"],
        ["retry", "default/web-1", "--pod-group", "ml/train-a"],
    ],
)
async def test_one_preemption_is_named(argv: list[str]) -> None:
    assert cli(*argv) == (
        2,
        "",
        "preemptctl retry: name one preemption: a pod NS/NAME, --pod-group NS/NAME, or a "
        "preemption ID\n",
    )


async def test_a_malformed_pod_group_is_refused_before_asking_anything() -> None:
    code, out, err = await asyncio.to_thread(cli, "retry", "--pod-group", "train-a")
    assert (code, out) == (2, "")
    assert err == "preemptctl retry: expected NAMESPACE/NAME after --pod-group, not 'train-a'\n"

"""A failed preemption, from failure to completion, as docs/runbook.md tells it: attempts end
to end, on the real dev server, the emulator and a Postgres ledger of the test's own.

Scenarios:
- the delete is denied (`preemptctl dev --fault deny-delete`'s fault), the preemption fails;
  the fault is lifted and a person runs `preemptctl retry` (the command itself); the new run
  completes. Read back through the CLI: `history --json` has one record per attempt (1
  failed, not retryable, with the denial as its error; 2 completed, started by a person with
  the reason, after run 1), `explain` tells both attempts in order, and the ledger holds
  the `retried` event; the new run polls its preemptor every few seconds, since no trigger
  loop signals it the bind, and the UI finds both runs by `PreemptorPod`;
- in that retried attempt one victim is replaced (deleted and recreated under its name, as a
  StatefulSet does) just as its DELETE arrives: the attempt records it `replaced`, with the
  replacement's UID (`replacedByUid`), never deletes the replacement, and completes;
- the denied delete does not hot-loop: the trigger loop parks the pod after its one failed
  run, and while it stays parked the loop starts another pod's preemption but never this
  one's again, even a day later on its clock.

Replacement under load, across worker kills, is tests/faults/test_replaced_victim.py.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError

from preemptctl.emulator import Emulator
from preemptctl.emulator.faults import NamedFaults
from preemptctl.emulator.resources import PODS
from preemptctl.worker.config import Settings
from preemptctl.worker.metrics import Metrics
from preemptctl.worker.retry_command import RETRY_POLL_SECONDS, started_with
from preemptctl.worker.trigger import TriggerLoop
from preemptctl.workflows.contract import workflow_id_for
from tests.support.emulator import as_list, pod
from tests.workflows.harness import Stack, running_stack
from tests.workflows.scenarios import one_full_node

pytestmark = pytest.mark.asyncio(loop_scope="session")

PREEMPTCTL = str(Path(sys.executable).parent / "preemptctl")
VICTIMS = ["default/victim-0", "default/victim-1"]
REASON = "granted delete on pods"


def unschedulable(item: dict[str, Any]) -> dict[str, Any]:
    """As the scheduler leaves a pod no node fits: what the trigger loop looks for."""
    item["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    ]
    return item


def pending_urgent() -> dict[str, Any]:
    scenario = one_full_node()
    unschedulable(scenario["items"][-1])
    return scenario


def cli(stack: Stack, ledger: Engine, *args: str) -> str:
    """`preemptctl ARGS` against this test's Temporal, emulator and ledger; its stdout."""
    environment = {
        "PATH": "/usr/bin:/bin",
        "KUBECONFIG": str(stack.emulator.kubeconfig_path),
        "PREEMPT_TEMPORAL_ADDRESS": stack.client.service_client.config.target_host,
        "PREEMPT_TEMPORAL_UI_URL": "http://127.0.0.1:8233",
        "PREEMPT_DATABASE_URL": ledger.url.render_as_string(hide_password=False),
    }
    done = subprocess.run(
        [PREEMPTCTL, *args], capture_output=True, text=True, env=environment, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def replace_on_first_delete(emulator: Emulator) -> dict[str, str]:
    """Arm the emulator: the first pod DELETE to arrive finds its pod replaced by a pending
    one of the same name (a new UID). Returns {"victim": key, "uid": the new UID} once done."""
    done: dict[str, str] = {}

    def arriving(verb: str, resource: str, namespace: str, name: str) -> None:
        if verb == "delete" and resource == "pods" and not done:
            old = emulator.store.get(PODS, namespace, name)
            with emulator.store.transaction():
                emulator.store.delete(PODS, namespace, name, grace_period=0)
                fresh = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": name, "namespace": namespace},
                    "spec": {k: v for k, v in old["spec"].items() if k != "nodeName"},
                }
                created = emulator.store.create(PODS, namespace, fresh)
            done.update(victim=f"{namespace}/{name}", uid=str(created["metadata"]["uid"]))

    emulator.faults.on_arrival = arriving
    return done


async def bind_when_victims_settled(stack: Stack, old_uids: dict[str, str]) -> None:
    """A stand-in scheduler: once every victim is terminating, gone or replaced (a new UID
    under its name), end the terminating ones and bind `urgent` to node-1."""
    async with asyncio.timeout(20):
        while True:
            pods = {key: stack.emulator.pod(key) for key in old_uids}
            if all(
                obj is None
                or obj["metadata"]["uid"] != old_uids[key]
                or obj["metadata"].get("deletionTimestamp")
                for key, obj in pods.items()
            ):
                break
            await asyncio.sleep(0.05)
    for key, obj in pods.items():
        if obj is not None and obj["metadata"]["uid"] == old_uids[key]:
            stack.emulator.finalize(key)
    stack.bind("default/urgent", "node-1")


async def runs_of(
    client: Client, workflow_id: str, also: str = ""
) -> list[WorkflowExecutionStatus | None]:
    """The statuses of the workflow's runs, newest first (those matching `also` too)."""
    query = f'WorkflowId = "{workflow_id}"' + (f" AND {also}" if also else "")
    return [run.status async for run in client.list_workflows(query)]


async def test_denied_then_retried_preemption_has_both_attempts_and_the_replacement_on_record(
    client: Client, own_ledger: Engine, emulator: Emulator
) -> None:
    async with running_stack(client, own_ledger, emulator, pending_urgent()) as stack:
        faults = NamedFaults(emulator.faults)
        faults.apply(["deny-delete"])
        # polling every 30 s, as the trigger starts it
        failed = await stack.start("default/urgent", scheduled_poll_seconds=30.0)
        with pytest.raises(WorkflowFailureError):
            await failed.result()
        faults.apply([])  # the fix: in a cluster, the ClusterRole grants delete on pods
        old_uids = {key: stack.preemptor(key).uid for key in VICTIMS}
        replaced = replace_on_first_delete(emulator)

        retried = json.loads(
            await asyncio.to_thread(
                cli, stack, own_ledger, "retry", "default/urgent", "--reason", REASON, "-o", "json"
            )
        )
        scheduler = asyncio.create_task(bind_when_victims_settled(stack, old_uids))
        second = client.get_workflow_handle(failed.id, run_id=retried["runId"])
        await second.result()
        await scheduler
        history = await asyncio.to_thread(
            cli, stack, own_ledger, "history", "--pod", "default/urgent", "--json"
        )
        explained = await asyncio.to_thread(cli, stack, own_ledger, "explain", "default/urgent")
        retried_events = stack.ledger_payloads(failed.id, "retried")
        second_input = await started_with(client, failed.id, retried["runId"])
        by_pod = await runs_of(client, failed.id, 'PreemptorPod = "default/urgent"')
        stack_pods = {
            key: obj["metadata"]["uid"] for key in VICTIMS if (obj := emulator.pod(key)) is not None
        }

    attempts = [json.loads(line) for line in history.splitlines()]
    assert [(a["attempt"], a["attempts"], a["outcome"]) for a in attempts] == [
        (1, 2, "failed"),
        (2, 2, "completed"),
    ]
    first, last = attempts
    assert {a["preemptionId"] for a in attempts} == {failed.id}
    assert first["runId"] == failed.result_run_id
    assert first["retryable"] is False
    assert 'cannot delete resource "pods"' in first["error"]
    assert last["runId"] == retried["runId"]
    assert (last["startedBy"], last["retryReason"], last["previousRunId"]) == (
        "person",
        REASON,
        failed.result_run_id,
    )
    fates = {f"{v['namespace']}/{v['name']}": v for v in last["victims"]}
    assert fates[replaced["victim"]]["fate"] == "replaced"
    assert fates[replaced["victim"]]["replacedByUid"] == replaced["uid"]
    [other] = [v for key, v in fates.items() if key != replaced["victim"]]
    assert other["fate"] == "deleted"
    assert stack_pods[replaced["victim"]] == replaced["uid"]  # the replacement still runs
    assert explained.index("attempt 1") < explained.index("attempt 2")
    assert failed.result_run_id in explained and retried["runId"] in explained
    assert REASON in explained
    assert second_input.scheduled_poll_seconds == RETRY_POLL_SECONDS  # no trigger signals it
    assert by_pod == [WorkflowExecutionStatus.COMPLETED, WorkflowExecutionStatus.FAILED]
    assert [(e["by"], e["reason"], e["previousRunId"]) for e in retried_events] == [
        ("person", REASON, failed.result_run_id)
    ]


class Clock:
    """The trigger loop's clock, moved by the test: backoffs pass without waiting."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_denied_delete_parks_its_pod_after_one_failed_run(
    client: Client, own_ledger: Engine, emulator: Emulator
) -> None:
    async with running_stack(client, own_ledger, emulator, pending_urgent()) as stack:
        NamedFaults(emulator.faults).apply(["deny-delete"])
        clock, started = Clock(), asyncio.Event()
        starts: list[str] = []

        def report(event: str, fields: dict[str, Any]) -> None:
            if event == "started":
                starts.append(fields["preemptor"])
                started.set()

        settings = Settings(task_queue=stack.task_queue, scheduled_wait_seconds=10.0)
        trigger = TriggerLoop(stack.view, client, settings, Metrics(), report=report, clock=clock)
        trigger.start()
        try:
            async with asyncio.timeout(60):
                while not trigger.parked():
                    await asyncio.sleep(0.1)
            [parked] = trigger.parked()
            urgent = stack.preemptor("default/urgent")
            clock.now += 24 * 3600  # far past any backoff
            started.clear()
            emulator.load(as_list(unschedulable(pod("later", priority=500, cpu="1"))))
            async with asyncio.timeout(30):  # the loop's next pass: it starts `later` ...
                while "default/later" not in starts:
                    await started.wait()
                    started.clear()
        finally:
            await trigger.stop(drain=False)
        urgent_runs = await runs_of(
            client, workflow_id_for(urgent.namespace, urgent.name, urgent.uid)
        )

    assert parked.pod == "default/urgent"
    assert 'cannot delete resource "pods"' in parked.reason
    assert starts.count("default/urgent") == 1  # ... and never `urgent` again
    assert urgent_runs == [WorkflowExecutionStatus.FAILED]

"""A preemption survives what production throws at it.

Scenarios:
- the worker process is SIGKILLed after the first victim's deletion; a new worker finishes
  the preemption: every victim deleted exactly once, no duplicate ledger event, nothing left
  preempting and no last victim shown pending;
- the ledger database is down when the preemption starts: nothing in the cluster is touched
  while the select activity fails and is retried (write-ahead: no decision recorded, no
  write), and once the database is back the preemption completes with a complete ledger.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from temporalio.client import WorkflowHandle

from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.worker.temporal_worker import build_worker
from preemptctl.workflows.preemption import PreemptionWorkflow
from tests.support.postgres import OutageProxy
from tests.workflows.harness import Stack, bind_when_room, running_stack
from tests.workflows.scenarios import one_full_node

pytestmark = pytest.mark.asyncio(loop_scope="session")

ROOT = Path(__file__).resolve().parents[2]
VICTIMS = ["default/victim-0", "default/victim-1"]


async def until(condition, timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out waiting"
        await asyncio.sleep(0.02)


async def select_attempts_reach(handle: WorkflowHandle, attempts: int) -> None:
    """Until the select activity has failed and been retried `attempts` - 1 times."""
    deadline = asyncio.get_running_loop().time() + 30.0
    while True:
        description = await handle.describe()
        pending = description.raw_description.pending_activities
        if any(
            a.activity_type.name == "select_preemption" and a.attempt >= attempts for a in pending
        ):
            return
        assert asyncio.get_running_loop().time() < deadline, "the select was never retried"
        await asyncio.sleep(0.05)


def successful_deletes(stack: Stack, name: str) -> int:
    return sum(
        1 for r in stack.emulator.requests.matching("delete", "pods", name) if 200 <= r.code < 300
    )


def worker_process(stack: Stack, temporal_address: str, database_url: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.worker_process",
            "--temporal",
            temporal_address,
            "--task-queue",
            stack.task_queue,
            "--kubeconfig",
            str(stack.emulator.kubeconfig_path),
            "--database-url",
            database_url,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "ready"
    return process


async def test_worker_killed_after_first_deletion_is_finished_by_another(
    temporal, client, ledger, emulator
):
    database_url = ledger.url.render_as_string(hide_password=False)
    async with running_stack(client, ledger, emulator, one_full_node(), with_worker=False) as stack:
        # Hold the last victim's mark long enough that the kill lands mid-preemption.
        emulator.faults.delay("patch", "pods/status", 2.0, name="victim-1")
        first = worker_process(
            stack, temporal.client.service_client.config.target_host, database_url
        )
        try:
            handle = await stack.start("default/urgent", call_timeout_seconds=2.0)
            await until(lambda: "victim_deleted:victim-0" in stack.ledger_kinds(handle.id))
            await asyncio.sleep(0.3)
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait()
        scheduler = asyncio.create_task(bind_when_room(stack, "default/urgent", "node-1", VICTIMS))
        async with build_worker(client, stack.activities, task_queue=stack.task_queue):
            result = await handle.result()
            state = await handle.query(PreemptionWorkflow.state)
        await scheduler
        kinds = stack.ledger_kinds(handle.id)
    assert result.outcome == "completed"
    assert successful_deletes(stack, "victim-0") == 1
    assert successful_deletes(stack, "victim-1") == 1
    duplicates = [kind for kind, count in Counter(kinds).items() if count > 1]
    assert duplicates == []
    # Finished: nothing preempting, and no last victim shown pending once it is deleted.
    assert state.preempting is False and state.pending_last_victim is None
    assert kinds[-1] == "completed"


async def test_ledger_outage_delays_the_preemption_and_loses_nothing(client, ledger, emulator):
    with OutageProxy(ledger.url.render_as_string(hide_password=False)) as proxy:
        outage_engine = create_ledger_engine(proxy.url)
        try:
            async with running_stack(client, outage_engine, emulator, one_full_node()) as stack:
                proxy.cut()
                handle = await stack.start("default/urgent")
                # The outage lasts while the select (a local activity: its attempts are not
                # listed by describe) fails and is retried, after 1 s and again after 2 s.
                await asyncio.sleep(2.5)
                writes_during_outage = [
                    r for r in emulator.requests if r.verb in ("patch", "delete", "create")
                ]
                proxy.restore()
                result = await handle.result()
                kinds = stack.ledger_kinds(handle.id)
        finally:
            outage_engine.dispose()
    assert writes_during_outage == []
    assert result.outcome == "completed"
    assert kinds[0] == "decision_made"
    assert {"victim_deleted:victim-0", "victim_deleted:victim-1"} <= set(kinds)
    assert kinds[-1] == "completed"

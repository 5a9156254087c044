"""`preemptctl dev --once`: the whole system on one machine, end to end.

Scenarios:
- the default (online/offline) scenario: nginx-a preempts batch-1a and batch-1b on node-1 and
  is bound there; the report and the ledger agree;
- twenty 2-cpu preemptors over ten full 4-cpu nodes: every preemptor ends bound, all forty
  batch pods are taken, none twice;
- --once with --no-worker is refused in one line;
- --no-worker starts the dev server, ledger and cluster but no worker, and stops on SIGTERM,
  having printed the task queue of its own that a `preemptctl worker` must use;
- a taken --temporal-port or --ui-port is one line and exit 2, with no temp dir left behind;
- a task queue another worker already polls is refused (a dev run's queue is its own), and
  a fresh one is accepted;
- an activity failure the activity classified (an ApplicationError) is logged as one line,
  not a traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from preemptctl.worker.dev_command import _ExpectedActivityFailures, check_own_task_queue
from preemptctl.worker.errors import UsageError
from tests.support.emulator import as_list, node, pod

PREEMPTCTL = str(Path(sys.executable).parent / "preemptctl")


def dev_once(tmp_path: Path, *args: str) -> dict[str, Any]:
    completed = subprocess.run(
        [PREEMPTCTL, "dev", "--once", "--temporal-port", "0", "--ui-port", "0", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=240,
        env={
            "PATH": "/usr/bin:/bin",
            "PREEMPT_DATABASE_URL": f"sqlite:///{tmp_path / 'ledger.sqlite'}",
        },
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    report: dict[str, Any] = json.loads(completed.stdout)
    report["stderr"] = completed.stderr
    return report


def last_outcome_by_preemptor(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {record["preemptor"]: record for record in report["preemptions"]}


def test_default_scenario_preempts_batch_pods_and_binds_nginx(tmp_path: Path) -> None:
    report = dev_once(tmp_path)
    nginx = last_outcome_by_preemptor(report)["default/nginx-a"]
    assert nginx["outcome"] == "completed"
    assert nginx["node"] == "node-1"
    assert sorted(nginx["victims"]) == ["default/batch-1a", "default/batch-1b"]
    assert nginx["message"] == "default/nginx-a bound to node-1"
    assert "temporal UI   http://127.0.0.1:" in report["stderr"]
    history = subprocess.run(
        [PREEMPTCTL, "history", "--pod", "default/nginx-a", "--json"],
        capture_output=True,
        text=True,
        check=True,
        env={
            "PATH": "/usr/bin:/bin",
            "PREEMPT_DATABASE_URL": f"sqlite:///{tmp_path / 'ledger.sqlite'}",
        },
    )
    rows = [json.loads(line) for line in history.stdout.splitlines()]
    assert rows and rows[0]["outcome"] == "completed"


def test_twenty_preemptors_over_ten_nodes_all_bind_and_take_no_victim_twice(
    tmp_path: Path,
) -> None:
    items = []
    for n in range(10):
        items.append(node(f"node-{n:02d}", cpu="4"))
        items += [
            pod(f"batch-{n:02d}-{i}", node_name=f"node-{n:02d}", priority=100, cpu="1")
            for i in range(4)
        ]
    for p in range(20):
        urgent = pod(f"urgent-{p:02d}", priority=1000, cpu="2")
        urgent["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        ]
        items.append(urgent)
    scenario = tmp_path / "twenty.json"
    scenario.write_text(json.dumps(as_list(*items)))

    report = dev_once(tmp_path, "--scenario", str(scenario))

    final = last_outcome_by_preemptor(report)
    assert len(final) == 20
    assert all(
        record["message"].endswith("bound to " + record["node"]) for record in final.values()
    )
    victims = [v for record in report["preemptions"] for v in record["victims"]]
    assert len(victims) == len(set(victims)) == 40


def test_once_without_a_worker_is_refused() -> None:
    completed = subprocess.run(
        [PREEMPTCTL, "dev", "--once", "--no-worker"], capture_output=True, text=True, check=False
    )
    assert completed.returncode == 2
    assert completed.stderr.strip() == "preemptctl dev: --once needs the worker; drop --no-worker"


def test_no_worker_starts_everything_but_the_worker_until_sigterm(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [PREEMPTCTL, "dev", "--no-worker", "--temporal-port", "0", "--ui-port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={
            "PATH": "/usr/bin:/bin",
            "PREEMPT_DATABASE_URL": f"sqlite:///{tmp_path / 'ledger.sqlite'}",
        },
    )
    assert process.stderr is not None
    seen: list[str] = []
    try:
        for line in process.stderr:
            seen.append(line)
            if line.startswith("running; Ctrl-C stops"):
                break
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=60)
    assert code == 0
    assert any(line.startswith("kubeconfig") for line in seen)
    assert any(line.startswith("task queue    preemptctl-dev-") for line in seen)
    assert not any(line.startswith("preemption started") for line in seen)


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port some other process listens on."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield int(listener.getsockname()[1])


@pytest.mark.parametrize("flag", ["--temporal-port", "--ui-port"])
def test_a_taken_port_is_one_line_and_leaves_nothing_behind(
    tmp_path: Path, taken_port: int, flag: str
) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    ports = {"--temporal-port": "0", "--ui-port": "0", flag: str(taken_port)}
    completed = subprocess.run(
        [PREEMPTCTL, "dev", "--once", *(word for pair in ports.items() for word in pair)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={
            "PATH": "/usr/bin:/bin",
            "TMPDIR": str(scratch),
            "PREEMPT_DATABASE_URL": f"sqlite:///{tmp_path / 'ledger.sqlite'}",
        },
    )
    assert completed.returncode == 2
    assert completed.stderr.strip() == (
        f"preemptctl dev: {flag} {taken_port} is taken (another `preemptctl dev` or Temporal "
        "server?); stop it, or pass 0 for a free port"
    )
    assert list(scratch.iterdir()) == []


@workflow.defn(name="DevNeighbour")
class _Neighbour:
    @workflow.run
    async def run(self) -> None:
        return None


async def _polled(client: Client, queue: str) -> bool:
    described = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace="default",
            task_queue=TaskQueue(name=queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    return bool(described.pollers)


async def test_a_task_queue_another_worker_polls_is_refused(temporal: WorkflowEnvironment) -> None:
    queue = f"dev-neighbour-{uuid.uuid4().hex[:8]}"
    async with Worker(
        temporal.client,
        task_queue=queue,
        workflows=[_Neighbour],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        for _ in range(300):  # the first poll reaches the server within moments
            if await _polled(temporal.client, queue):
                break
            await asyncio.sleep(0.05)
        with pytest.raises(UsageError, match=f"task queue {queue} on .* already has a worker"):
            await check_own_task_queue(temporal.client, "default", queue)


async def test_a_fresh_task_queue_is_accepted(temporal: WorkflowEnvironment) -> None:
    await check_own_task_queue(temporal.client, "default", f"dev-{uuid.uuid4().hex}")


def _failed_activity_record(error: BaseException) -> logging.LogRecord:
    try:
        raise error
    except BaseException:
        return logging.getLogger("temporalio.activity").makeRecord(
            "temporalio.activity",
            logging.WARNING,
            __file__,
            1,
            "Completing activity as failed (%s)",
            ("delete_victim",),
            sys.exc_info(),
        )


def test_a_classified_activity_failure_is_one_line() -> None:
    record = _failed_activity_record(ApplicationError("403 forbidden", type="Forbidden"))
    assert _ExpectedActivityFailures().filter(record)
    line = logging.Formatter("%(message)s").format(record)
    assert line == "Completing activity as failed (delete_victim): Forbidden: 403 forbidden"


def test_an_unexpected_activity_failure_keeps_its_traceback() -> None:
    record = _failed_activity_record(KeyError("bug"))
    assert _ExpectedActivityFailures().filter(record)
    assert "Traceback" in logging.Formatter("%(message)s").format(record)

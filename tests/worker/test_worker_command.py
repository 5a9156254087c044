"""`preemptctl worker` starts only when everything it needs answers, and several can run.

Scenarios:
- a wrong Temporal address, a missing kubeconfig, an unmigrated ledger, a taken SDK metrics
  port, a Temporal namespace without the search attributes the preemptions carry (it would
  refuse every start): each one line on stderr, before anything runs;
- with its ledger database down, the worker waits instead of exiting: one log line per
  attempt (no password, no traceback), /readyz 503 saying it waits for the ledger,
  /healthz 200, and SIGTERM ends it with exit 0;
- two workers at once on one cluster give one preemption per pod: the pod is preempted for
  once, no victim is deleted twice, the pod ends bound, and both stop cleanly on SIGTERM;
  each says at start which scheduler names it serves.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from preemptctl.emulator import SimulatedCluster
from preemptctl.migrations import upgrade
from preemptctl.worker.ports import free_port
from preemptctl.worker.scenarios import ONLINE_OFFLINE
from preemptctl.worker.temporal_binary import temporal_cli
from preemptctl.workflows import search_attributes
from preemptctl.workflows.contract import workflow_id_for
from tests.support.temporal import wait_until_closed

PREEMPTCTL = str(Path(sys.executable).parent / "preemptctl")


@pytest.fixture
def cluster():
    with SimulatedCluster(max_grace_seconds=0.5) as simulated:
        simulated.load(ONLINE_OFFLINE)
        simulated.start()
        yield simulated


def start_worker(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PREEMPTCTL, "worker", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={
            "PATH": "/usr/bin:/bin",
            "PREEMPT_METRICS_PORT": str(free_port()),
            "PREEMPT_PROBE_PORT": str(free_port()),
            **env,
        },
    )


def migrated_sqlite(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    upgrade(url)
    return url


def test_unreachable_temporal_is_one_line_and_a_runtime_failure(cluster, tmp_path: Path) -> None:
    completed = start_worker(
        "--kubeconfig",
        str(cluster.kubeconfig_path),
        "--temporal-address",
        "127.0.0.1:1",
        env={"PREEMPT_DATABASE_URL": migrated_sqlite(tmp_path)},
    )
    assert completed.returncode == 1  # as kubectl: a server that does not answer is exit 1
    lines = completed.stderr.strip().splitlines()
    assert lines[-1].startswith("preemptctl worker: cannot reach Temporal at 127.0.0.1:1")
    assert "Traceback" not in completed.stderr


def test_missing_kubeconfig_is_one_line(tmp_path: Path) -> None:
    completed = start_worker(
        "--kubeconfig",
        str(tmp_path / "absent"),
        env={"PREEMPT_DATABASE_URL": migrated_sqlite(tmp_path)},
    )
    assert completed.returncode == 2
    assert (
        completed.stderr.strip()
        == f"preemptctl worker: kubeconfig: no such file {tmp_path / 'absent'}"
    )


def test_unmigrated_ledger_is_one_line(cluster, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.sqlite'}"
    completed = start_worker(
        "--kubeconfig", str(cluster.kubeconfig_path), env={"PREEMPT_DATABASE_URL": url}
    )
    assert completed.returncode == 2
    last = completed.stderr.strip().splitlines()[-1]
    assert last.startswith("preemptctl worker: ledger sqlite:///")
    assert "run `preemptctl migrate` first" in last
    assert "Traceback" not in completed.stderr


async def test_two_workers_give_one_preemption_per_pod(temporal, cluster, tmp_path: Path) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "PREEMPT_DATABASE_URL": migrated_sqlite(tmp_path),
        "PREEMPT_TEMPORAL_ADDRESS": temporal.client.service_client.config.target_host,
        "PREEMPT_KUBECONFIG": str(cluster.kubeconfig_path),
        "PREEMPT_TASK_QUEUE": "two-workers",
        "PREEMPT_LOG_FORMAT": "text",
    }
    began = datetime.now(UTC).isoformat()
    replicas = [
        subprocess.Popen(
            [PREEMPTCTL, "worker"],
            env={
                **env,
                "PREEMPT_METRICS_PORT": str(free_port()),
                "PREEMPT_PROBE_PORT": str(free_port()),
                # off: this test reads none, and a port found free may be taken before
                # the SDK binds it (it was, once, in CI)
                "PREEMPT_SDK_METRICS_PORT": "0",
            },
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        for _ in range(600):
            pod = cluster.emulator.pod("default/nginx-a") or {}
            if pod.get("spec", {}).get("nodeName"):
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)  # long enough for a second preemption to start, if any would
        uid = cluster.emulator.pod("default/nginx-a")["metadata"]["uid"]
        # The scenario's UIDs are fixed, so earlier tests on this server ran the same ID.
        query = (
            f'WorkflowId = "{workflow_id_for("default", "nginx-a", uid)}" AND StartTime > "{began}"'
        )
        runs = [execution async for execution in temporal.client.list_workflows(query)]
        await wait_until_closed(temporal.client, f'StartTime > "{began}"')
    finally:
        for replica in replicas:
            replica.send_signal(signal.SIGTERM)
        codes = [replica.wait(timeout=60) for replica in replicas]
        logs = [replica.stderr.read() if replica.stderr else "" for replica in replicas]
    assert cluster.emulator.pod("default/nginx-a")["spec"]["nodeName"] == "node-1"
    assert len(runs) == 1
    deleted = [
        r.name for r in cluster.emulator.requests.matching("delete", "pods") if 200 <= r.code < 300
    ]
    # nginx-a takes batch-1a and batch-1b; report-x (pending too) takes batch-3d only if it
    # was decided first, as a serial run in that order would. Never a victim twice.
    assert len(deleted) == len(set(deleted))
    assert {"batch-1a", "batch-1b"} <= set(deleted) <= {"batch-1a", "batch-1b", "batch-3d"}
    assert codes == [0, 0], logs
    serving = "serving pods of schedulerName default-scheduler (PREEMPT_SCHEDULER_NAMES); "
    assert all(serving in log for log in logs), logs


def test_sdk_metrics_port_in_use_is_one_line(cluster, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        completed = start_worker(
            "--kubeconfig",
            str(cluster.kubeconfig_path),
            env={
                "PREEMPT_DATABASE_URL": migrated_sqlite(tmp_path),
                "PREEMPT_SDK_METRICS_PORT": str(port),
            },
        )
    assert completed.returncode == 2
    last = completed.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"preemptctl worker: cannot serve the Temporal SDK's metrics on port {port}"
    )
    assert "Traceback" not in completed.stderr


async def test_a_namespace_without_the_search_attributes_is_one_line(
    cluster, tmp_path: Path
) -> None:
    bare = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_cli(), dev_server_log_level="error"
    )
    try:
        completed = await asyncio.to_thread(
            start_worker,
            "--kubeconfig",
            str(cluster.kubeconfig_path),
            env={
                "PREEMPT_DATABASE_URL": migrated_sqlite(tmp_path),
                "PREEMPT_TEMPORAL_ADDRESS": bare.client.service_client.config.target_host,
                "PREEMPT_SDK_METRICS_PORT": "0",
            },
        )
    finally:
        await bare.shutdown()
    assert completed.returncode == 2
    last = completed.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "preemptctl worker: Temporal namespace default lacks the search attribute(s) "
    )
    assert all(key.name in last for key in search_attributes.ALL)
    assert "run `preemptctl setup-temporal` once" in last
    assert "Traceback" not in completed.stderr


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError:
        return 0, ""


def test_worker_waits_for_its_ledger_database(cluster) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        db_port = closed.getsockname()[1]
    port = free_port()
    worker = subprocess.Popen(
        [PREEMPTCTL, "worker", "--kubeconfig", str(cluster.kubeconfig_path)],
        env={
            "PATH": "/usr/bin:/bin",
            "PREEMPT_DATABASE_URL": f"postgresql+psycopg://w:hunter2@127.0.0.1:{db_port}/ledger",
            "PREEMPT_METRICS_PORT": str(free_port()),
            "PREEMPT_PROBE_PORT": str(port),
            "PREEMPT_SDK_METRICS_PORT": "0",
            "PREEMPT_LOG_FORMAT": "text",
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        ready = (0, "")
        while "waiting for the ledger" not in ready[1] and time.monotonic() < deadline:
            ready = get(port, "/readyz")
            time.sleep(0.1)  # polling, not proving a negative
        health = get(port, "/healthz")
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=30)
    stderr = worker.stderr.read() if worker.stderr else ""
    assert ready[0] == 503 and ready[1].startswith("waiting for the ledger"), ready
    assert health == (200, "ok\n")
    assert code == 0, stderr
    waits = [line for line in stderr.splitlines() if "waiting for the ledger" in line]
    assert waits and all("(attempt " in line for line in waits)
    assert "hunter2" not in stderr
    assert "Traceback" not in stderr

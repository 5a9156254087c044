"""A replica whose workflows run in processes of their own (docs/scale-out.md).

Scenarios, how many:
- `workflow_processes` -1 is one per core the container may use but one, at least one; the
  cores are the CPU affinity capped by cgroup v2's cpu.max (rounded up; "max" is no cap);
  0 and N are taken as given.

Scenarios, a running controller with workflow processes (real Temporal, the emulator, a
ledger):
- every preemption of the scenario completes, each victim deleted once; the select ran in
  the main process (the only one with the view), the workflows in the workflow processes;
  /readyz names them ready; /metrics serves the replica: their process metrics labelled by
  process, their ledger appends summed into the replica's counter;
- a workflow process SIGKILLed is restarted and counted (task_restarts{task}); /readyz is
  503 while none polls and 200 again once its successor does;
- a workflow process that stops reporting (SIGSTOP: its loop stuck) is killed and restarted;
- on exit every workflow process has drained and exited (SIGTERM), none is left running.

Scenario, `preemptctl worker` itself: it forks its workflow processes at start-up (before
any thread); they wait for its word, poll, and /readyz names them; SIGTERM drains them all
and the worker exits 0, none left behind.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from preemptctl.emulator import SimulatedCluster
from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.worker.config import Settings, load_settings
from preemptctl.worker.connections import connect_cluster
from preemptctl.worker.metrics import Metrics
from preemptctl.worker.ports import free_port
from preemptctl.worker.probes import ProbeServer
from preemptctl.worker.runtime import Controller, running_controller
from preemptctl.worker.scenarios import ONLINE_OFFLINE
from preemptctl.worker.workflow_processes import available_cores, workflow_process_count
from tests.support.temporal import wait_until_closed

# -- how many ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cpu_max", "expected"),
    [("max 100000\n", None), ("200000 100000\n", 2), ("150000 100000\n", 2), ("50000 100000", 1)],
)
def test_cores_are_the_affinity_capped_by_the_cgroup_cpu_limit(
    tmp_path: Path, cpu_max: str, expected: int | None
) -> None:
    path = tmp_path / "cpu.max"
    path.write_text(cpu_max)
    affinity = len(os.sched_getaffinity(0))
    assert available_cores(path) == min(affinity, expected or affinity)


def test_a_missing_cgroup_file_leaves_the_affinity(tmp_path: Path) -> None:
    assert available_cores(tmp_path / "absent") == len(os.sched_getaffinity(0))


@pytest.mark.parametrize(("setting", "cores", "count"), [(-1, 4, 3), (-1, 2, 1), (-1, 1, 1)])
def test_minus_one_is_one_per_core_but_one_at_least_one(
    setting: int, cores: int, count: int
) -> None:
    assert workflow_process_count(Settings(workflow_processes=setting), cores) == count


@pytest.mark.parametrize("setting", [0, 1, 5])
def test_a_given_count_is_taken_as_given(setting: int) -> None:
    assert workflow_process_count(Settings(workflow_processes=setting), 8) == setting


# -- a running controller ------------------------------------------------------------------------


@pytest.fixture
def cluster() -> Iterator[SimulatedCluster]:
    with SimulatedCluster(max_grace_seconds=0.5) as simulated:
        simulated.load(ONLINE_OFFLINE)
        simulated.start()
        yield simulated


def get(port: int, path: str) -> tuple[int, str]:
    """The answer's status and body; (0, "") while nothing listens yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except urllib.error.URLError:
        return 0, ""


async def fetch(port: int, path: str) -> tuple[int, str]:
    return await asyncio.to_thread(get, port, path)


async def until(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.1)
    assert condition(), what


async def until_answer(port: int, path: str, code: int, timeout: float = 60.0) -> str:
    """Ask `path` until it answers `code`; its body."""
    async with asyncio.timeout(timeout):
        while True:
            answered, body = await fetch(port, path)
            if answered == code:
                return body
            await asyncio.sleep(0.2)


@asynccontextmanager
async def controller_with_processes(
    temporal, cluster: SimulatedCluster, url: str, queue: str, count: int
) -> AsyncIterator[tuple[Controller, int]]:
    # Ports the kernel gives the listeners themselves: a port found free and bound later
    # can be taken meanwhile (once in CI, by another process's outgoing connection).
    settings = load_settings(
        overrides={
            "kubeconfig": str(cluster.kubeconfig_path),
            "database_url": url,
            "http_bind_address": "127.0.0.1",
            # never bound: the probe server below is opened on port 0 and handed over
            "metrics_port": free_port(),
            "probe_port": free_port(),
            "task_queue": queue,
            "temporal_address": temporal.client.service_client.config.target_host,
            "log_format": "text",
        },
        environ={},
    )
    probes = ProbeServer("127.0.0.1", 0, 0, Metrics())
    probes.start()
    ledger = create_ledger_engine(url)
    try:
        async with running_controller(
            settings,
            temporal.client,
            connect_cluster(settings),
            ledger,
            probes=probes,
            workflow_processes=count,
        ) as controller:
            yield controller, probes.server_address[1]
    finally:
        ledger.dispose()
        probes.close()


def deleted(cluster: SimulatedCluster) -> list[str]:
    return [
        r.name for r in cluster.emulator.requests.matching("delete", "pods") if 200 <= r.code < 300
    ]


def bound(cluster: SimulatedCluster, key: str) -> bool:
    return bool((cluster.emulator.pod(key) or {}).get("spec", {}).get("nodeName"))


def sample(metrics: str, name: str) -> float:
    found = re.search(rf"^{re.escape(name)} (\S+)$", metrics, re.MULTILINE)
    assert found is not None, f"{name} not in /metrics"
    return float(found.group(1))


async def test_preemptions_run_in_the_workflow_processes(
    temporal, cluster: SimulatedCluster, migrated_postgres_url: str
) -> None:
    async with controller_with_processes(
        temporal, cluster, migrated_postgres_url, "processes", 2
    ) as (controller, port):
        processes = controller.processes
        assert processes is not None
        await until(lambda: processes.ready() == 2, "both workflow processes poll")
        _, ready = await fetch(port, "/readyz")
        pids = processes.pids()
        await until(lambda: bound(cluster, "default/nginx-a"), "nginx-a bound")
        await wait_until_closed(temporal.client, 'TaskQueue = "processes"')
        code, metrics = await fetch(port, "/metrics")
    assert "workflow processes: 2 of 2 ready" in ready.splitlines()
    assert sorted(pids) == ["workflows-0", "workflows-1"]
    assert all(not os.path.exists(f"/proc/{pid}") for pid in pids.values())  # drained, gone
    assert len(deleted(cluster)) == len(set(deleted(cluster))) >= 2
    assert code == 200
    assert sample(metrics, 'preemptctl_workflow_processes{state="ready"}') == 2
    for process in ("main", "workflows-0", "workflows-1"):
        assert sample(metrics, f'process_resident_memory_bytes{{process="{process}"}}') > 0
    # nginx-a's end with its victims' fates is appended by a workflow process, its decision
    # by the main one (asked over the view channel), its bind by the main one's trigger loop:
    # all in the replica's one counter.
    appends = sample(metrics, "preemptctl_ledger_append_duration_seconds_count")
    assert appends >= 3


async def test_a_killed_workflow_process_is_restarted_and_counted(
    temporal, cluster: SimulatedCluster, migrated_postgres_url: str
) -> None:
    async with controller_with_processes(
        temporal, cluster, migrated_postgres_url, "killed-process", 1
    ) as (controller, port):
        assert controller.processes is not None
        await until_answer(port, "/readyz", 200)
        [first] = controller.processes.pids().values()
        os.kill(first, signal.SIGKILL)
        not_ready = await until_answer(port, "/readyz", 503)
        await until_answer(port, "/readyz", 200)
        [second] = controller.processes.pids().values()
        await until(lambda: bound(cluster, "default/nginx-a"), "nginx-a bound")
        await wait_until_closed(temporal.client, 'TaskQueue = "killed-process"')
        _, metrics = await fetch(port, "/metrics")
    assert "no workflow process polls yet" in not_ready
    assert second != first
    assert sample(metrics, 'preemptctl_task_restarts_total{task="workflows-0"}') == 1
    assert len(deleted(cluster)) == len(set(deleted(cluster)))


async def test_a_workflow_process_that_stops_reporting_is_killed_and_restarted(
    temporal, cluster: SimulatedCluster, migrated_postgres_url: str
) -> None:
    async with controller_with_processes(
        temporal, cluster, migrated_postgres_url, "stuck-process", 1
    ) as (controller, port):
        processes = controller.processes
        assert processes is not None
        processes._stale_after = 2.0  # white box: a short silence is enough here
        await until_answer(port, "/readyz", 200)
        [first] = processes.pids().values()
        os.kill(first, signal.SIGSTOP)
        await until(lambda: first not in processes.pids().values(), "the stuck one replaced")
        await until_answer(port, "/readyz", 200)
        _, metrics = await fetch(port, "/metrics")
        await wait_until_closed(temporal.client, 'TaskQueue = "stuck-process"')
    assert sample(metrics, 'preemptctl_task_restarts_total{task="workflows-0"}') == 1


def children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


async def test_the_worker_command_forks_its_workflow_processes_and_drains_them(
    temporal, cluster: SimulatedCluster, migrated_postgres_url: str
) -> None:
    port = free_port()
    worker = subprocess.Popen(
        [str(Path(sys.executable).parent / "preemptctl"), "worker"],
        env={
            "PATH": "/usr/bin:/bin",
            "PREEMPT_DATABASE_URL": migrated_postgres_url,
            "PREEMPT_TEMPORAL_ADDRESS": temporal.client.service_client.config.target_host,
            "PREEMPT_KUBECONFIG": str(cluster.kubeconfig_path),
            "PREEMPT_TASK_QUEUE": "forked",
            "PREEMPT_LOG_FORMAT": "text",
            "PREEMPT_METRICS_PORT": str(port),
            "PREEMPT_PROBE_PORT": str(free_port()),
            "PREEMPT_SDK_METRICS_PORT": "0",
            "PREEMPT_WORKFLOW_PROCESSES": "2",
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        async with asyncio.timeout(60):
            while "workflow processes: 2 of 2 ready" not in (await fetch(port, "/readyz"))[1]:
                await asyncio.sleep(0.2)
        forked = children_of(worker.pid)
        await until(lambda: bound(cluster, "default/nginx-a"), "nginx-a bound")
        await wait_until_closed(temporal.client, 'TaskQueue = "forked"')
    finally:
        worker.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(worker.wait, 60)
    assert code == 0, worker.stderr.read() if worker.stderr else ""
    assert len(forked) >= 2  # the two workflow processes (and no fork server: none needed)
    assert all(not os.path.exists(f"/proc/{pid}") for pid in forked)
    assert len(deleted(cluster)) == len(set(deleted(cluster)))

"""A rig for the hostile-tenant suite: the fault rig's parts, one worker, judged from outside.

The fault-injection rig (`tests.support.fault_rig`) is reused whole: the simulated cluster
with its request log, a migrated Postgres ledger of its own behind a `TcpProxy`, the
persistent Temporal dev server, and `preemptctl worker` processes. What a hostile scenario
needs beyond it, and only that, is here:

- each worker gets a kubelet probe port of its own (`PREEMPT_PROBE_PORT`; the default, 9466,
  would be shared by every worker on the machine), and what an operator reads of the process
  from outside: its resident memory from /proc and its log file;
- the worker's database URL may carry extra query parameters (a secret in `?password=`);
- the worker may reach Temporal through a proxy the test controls (a slow line), and the
  emulator through a wire log that records every request line it sends, routable or not;
- the simulated kubelet's cap on grace periods is a parameter (a scenario may need a
  terminating pod to stay terminating).

    with hostile_rig(temporal, tmp, scenario) as rig:
        rig.add(pod); rig.wait_for(...); rig.requests; rig.ledger_payloads("decision_made")
"""

from __future__ import annotations

import os
import random
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, select

from preemptctl.emulator import SimulatedCluster
from preemptctl.emulator.kubeconfig import write_kubeconfig
from preemptctl.ledger.models import events as events_table
from preemptctl.ledger.models import upstream_preemptions
from preemptctl.migrations import upgrade
from preemptctl.worker.ports import free_port
from tests.support.fault_rig import (
    PREEMPTCTL,
    PREEMPTOR_PRIORITY,
    HookedRequestLog,
    RandomApiFaults,
    Rig,
    WorkerProcess,
    seed,
)
from tests.support.postgres import fresh_database
from tests.support.tcp_proxy import TcpProxy
from tests.support.temporal_server import PersistentTemporal
from tests.support.wire_log import WireLog


class HostileWorker(WorkerProcess):
    """A `preemptctl worker` with its kubelet probe port of its own, read from outside: its
    resident memory (/proc/PID/status) and its log file."""

    def __init__(self, name: str, env: dict[str, str], log_dir: Path) -> None:
        super().__init__(name, env, log_dir)
        self.metrics_port = self.probe_port  # the fault rig's name for PREEMPT_METRICS_PORT
        # The fault rig now gives each worker a probe port of its own; this one reads it.
        self.kubelet_port = int(self.env.setdefault("PREEMPT_PROBE_PORT", str(free_port())))

    def memory(self) -> dict[str, int]:
        """VmRSS (resident now) and VmHWM (the highest resident so far), in bytes, as the
        kernel reports them for the running process."""
        pid = self.pid
        if pid is None:
            raise AssertionError(f"worker {self.name} is not running; see {self.log_path}")
        found = {}
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                found[key] = int(value.split()[0]) * 1024
        return found

    def log_text(self) -> str:
        """Everything the worker wrote to stdout and stderr so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@dataclass
class HostileRig(Rig):
    """The fault rig's `Rig`, with the hostile suite's extras."""

    kubeconfig: Path = Path()
    wire: WireLog | None = None
    temporal_proxy: TcpProxy | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def worker(self) -> HostileWorker:
        first = self.workers[0]
        assert isinstance(first, HostileWorker)
        return first

    def wait_bounded(self, condition: Callable[[], bool], timeout: float) -> bool:
        """Wait until `condition()`, at most `timeout` seconds; whether it came true. For a
        scenario judged on what happened by then, whatever the outcome."""
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def cli_env(self, **extra: str) -> dict[str, str]:
        """The environment the workers run with (the CLI then reads the same ledger, Temporal
        and cluster), plus `extra`."""
        return {**self.env, **extra}

    def preemptctl(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """Run `preemptctl ARGS` as an operator would, with the workers' environment."""
        return run_preemptctl(args, env if env is not None else self.cli_env(), timeout=timeout)

    def ledger_rows(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Every ledger event (of `kind`), in order, read directly."""
        engine = create_engine(self.database_url)
        try:
            with engine.connect() as connection:
                statement = select(events_table).order_by(events_table.c.id)
                if kind is not None:
                    statement = statement.where(events_table.c.kind == kind)
                return [dict(row._mapping) for row in connection.execute(statement)]
        finally:
            engine.dispose()

    def upstream_rows(self) -> list[dict[str, Any]]:
        """Every row of `upstream_preemptions`, in order."""
        engine = create_engine(self.database_url)
        try:
            with engine.connect() as connection:
                statement = select(upstream_preemptions).order_by(upstream_preemptions.c.id)
                return [dict(row._mapping) for row in connection.execute(statement)]
        finally:
            engine.dispose()


def run_preemptctl(
    args: Sequence[str], env: dict[str, str], *, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """`preemptctl ARGS` in a process of its own: exit code, stdout and stderr as text."""
    return subprocess.run(
        [PREEMPTCTL, *args],
        env=env,
        capture_output=True,
        text=True,
        errors="surrogateescape",
        timeout=timeout,
        check=False,
    )


def base_env(work_dir: Path) -> dict[str, str]:
    """A clean environment for a worker or the CLI: nothing of the test runner's leaks in."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(work_dir),
        **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"},
    }


def with_query(url: str, query: str) -> str:
    """`url` with `query` (`a=b&c=d`) appended to its query string."""
    if not query:
        return url
    return url + ("&" if "?" in url else "?") + query


@contextmanager
def hostile_rig(
    temporal: PersistentTemporal,
    work_dir: Path,
    scenario: dict[str, Any],
    *,
    env: dict[str, str] | None = None,
    database_query: str = "",
    temporal_proxy: TcpProxy | None = None,
    wire_log: bool = False,
    max_grace_seconds: float | None = 0.5,
    workers: int = 1,
    start: bool = True,
) -> Iterator[HostileRig]:
    """A rig on `scenario` with `workers` workers, started and ready (unless `start` is
    False). `database_query` is added to the workers' database URL; `temporal_proxy`, a
    proxy already listening in front of `temporal`, is the workers' Temporal address;
    `wire_log` puts a `WireLog` between the workers and the emulator."""
    run_seed = seed()
    cluster = SimulatedCluster(max_grace_seconds=max_grace_seconds)
    faults = RandomApiFaults(random.Random(run_seed), 0.0)
    requests = HookedRequestLog()
    cluster.emulator.faults = faults
    cluster.emulator.requests = requests
    cluster.load(scenario)
    task_queue = f"hostile-{uuid.uuid4().hex[:8]}"
    with ExitStack() as stack:
        url = stack.enter_context(fresh_database("preemptctl_hostile"))
        stack.enter_context(cluster)
        upgrade(url)
        proxy = stack.enter_context(TcpProxy.for_url(url))
        kubeconfig = cluster.kubeconfig_path
        wire = None
        if wire_log:
            host, _, port = cluster.base_url.removeprefix("http://").rstrip("/").rpartition(":")
            wire = stack.enter_context(WireLog(host, int(port)))
            kubeconfig = write_kubeconfig(work_dir / "wire.kubeconfig", wire.base_url)
        address = (
            f"127.0.0.1:{temporal_proxy.port}" if temporal_proxy is not None else temporal.address
        )
        worker_env = {
            **base_env(work_dir),
            "PREEMPT_DATABASE_URL": with_query(proxy.rewrite(url), database_query),
            "PREEMPT_TEMPORAL_ADDRESS": address,
            "PREEMPT_KUBECONFIG": str(kubeconfig),
            "PREEMPT_TASK_QUEUE": task_queue,
            "PREEMPT_LOG_FORMAT": "text",
            "PREEMPT_HTTP_BIND_ADDRESS": "127.0.0.1",
            "PREEMPT_MIN_PRIORITY": str(PREEMPTOR_PRIORITY),
            "PREEMPT_SCHEDULED_WAIT_SECONDS": "20",
            **(env or {}),
        }
        fleet: list[WorkerProcess] = [
            HostileWorker(f"worker-{i}", worker_env, work_dir) for i in range(workers)
        ]
        rig = HostileRig(
            cluster,
            faults,
            requests,
            temporal,
            proxy,
            url,
            task_queue,
            fleet,
            random.Random(run_seed),
            run_seed,
            kubeconfig=kubeconfig,
            wire=wire,
            temporal_proxy=temporal_proxy,
            env=worker_env,
        )
        try:
            if start:
                for worker in fleet:
                    worker.start()
                for worker in fleet:
                    worker.wait_ready()
            yield rig
        finally:
            faults.on_arrival = None
            # SIGKILL, not SIGTERM: nothing is judged after the block, and a draining worker
            # costs a suite of a dozen rigs half a minute.
            for worker in fleet:
                worker.kill()


__all__ = [
    "HostileRig",
    "HostileWorker",
    "base_env",
    "hostile_rig",
    "run_preemptctl",
    "with_query",
]

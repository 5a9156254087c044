"""The replica's workflow processes, seen from its main process: started, watched, restarted
and drained (docs/scale-out.md, "More than one interpreter").

One Python interpreter tops out near one core: the planner, the workflow code, the
activities and the SDK's Python side take turns on its GIL. A replica therefore runs the
cluster view, the trigger loop, the select (its decision path) and the HTTP endpoints in its
main process, and the workflows with their local activities in `count` workflow processes
(`worker.workflow_process`).

How they start: `preemptctl worker` forks them at start-up (`fork_workflow_processes`),
before its event loop and its first thread exist, from a process that has imported
everything already: they poll within a second and share the imported code's pages with
it. Later (a restart, or a controller started inside a running event loop, as in the
tests) a process is forked from a fork server that imported their code once
(`multiprocessing`'s forkserver): the first such start imports the SDK, the Kubernetes
client and SQLAlchemy (seconds on a busy machine), the next ones take a fraction of a
second. Nothing is forked from the main process once it has threads (the Temporal core's
would not survive a fork); the fork server imports modules and starts no thread.

Each one runs under the main process's `Supervisor`, as a task named after it
(`workflows-0`, ...): a process that exits, or that stops reporting for `STALE_AFTER`
seconds (its event loop stuck; `FIRST_REPORT_WITHIN` for its first report) and is killed
for it, is restarted with the supervisor's
backoff and counted in `preemptctl_task_restarts_total{task}`; one that keeps crashing is
given up on and /healthz says so. /readyz is false while none polls. Its metrics reach the
main process with each report and are served as the replica's (`ReplicaMetrics`). `stop`
drains them all: SIGTERM, then up to `STOP_GRACE` seconds for their steps in flight, then
SIGKILL for any still running.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import multiprocessing
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from multiprocessing import forkserver
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path

from preemptctl.activities.view_channel import ChannelAddress
from preemptctl.worker.cancellation import cancel_and_wait
from preemptctl.worker.config import Settings
from preemptctl.worker.metrics import Metrics, ReplicaMetrics
from preemptctl.worker.supervisor import run_in_thread
from preemptctl.worker.temporal_worker import GRACEFUL_SHUTDOWN
from preemptctl.worker.workflow_process import Go, Report, name_of, run_workflow_process

log = logging.getLogger("preemptctl")

# A workflow process that sent no report for this long is stuck: killed, then restarted.
STALE_AFTER = 30.0
# Its first report may take longer: a fresh interpreter imports the SDK, the Kubernetes
# client and SQLAlchemy first (2 s on a busy machine; far less than this).
FIRST_REPORT_WITHIN = 120.0
# How long a stop waits for the workflow processes to drain before it kills them: their
# worker's graceful shutdown, and a few seconds to exit.
STOP_GRACE = GRACEFUL_SHUTDOWN.total_seconds() + 5.0
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")  # cgroup v2: "<quota> <period>" or "max ..."

Spawner = Callable[[str, Callable[[], Awaitable[None]]], "asyncio.Task[None]"]


@dataclass
class Forked:
    """A workflow process forked at start-up, waiting for the word to start, and our end of
    its pipe (its reports come through it)."""

    process: BaseProcess
    reports: Connection


def fork_workflow_processes(settings: Settings, count: int) -> list[Forked]:
    """Fork `count` workflow processes now, from this process as it is: call it before any
    thread or event loop exists (`preemptctl worker` does, in `run`), never after."""
    context = multiprocessing.get_context("fork")
    forked = []
    for index in range(count):
        ours, theirs = context.Pipe()
        process = context.Process(
            target=run_workflow_process,
            args=(settings, index, theirs),
            name=name_of(index),
            daemon=True,
        )
        process.start()
        theirs.close()  # the child holds the only other end: its exit is our EOF
        forked.append(Forked(process, ours))
    return forked


class WorkflowProcessExited(Exception):
    """A workflow process ended while the replica runs (the supervisor restarts it)."""


def available_cores(cpu_max: Path = CGROUP_CPU_MAX) -> int:
    """The cores this process may use: its CPU affinity, capped by the container's CPU
    limit (cgroup v2 `cpu.max`, rounded up), at least 1. `os.cpu_count()` is the node's."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores = cores or 1
    with contextlib.suppress(OSError, ValueError, ZeroDivisionError):
        quota, period = cpu_max.read_text().split()[:2]
        if quota != "max":
            cores = min(cores, math.ceil(int(quota) / int(period)))
    return max(1, cores)


def workflow_process_count(settings: Settings, cores: int | None = None) -> int:
    """How many workflow processes `settings` ask for: `workflow_processes`, or with -1
    one per core the container may use but the main process's, at least one."""
    if settings.workflow_processes >= 0:
        return settings.workflow_processes
    return max(1, (cores if cores is not None else available_cores()) - 1)


@dataclass
class _Running:
    """One workflow process as the main process knows it."""

    process: BaseProcess
    heard: float  # when its latest report arrived, or it started (monotonic)
    reported: bool = False  # at least once
    ready: bool = False
    stale: bool = False  # killed for its silence


class WorkflowProcesses:
    """`count` workflow processes for `settings`, each kept running by a supervised task."""

    def __init__(
        self,
        settings: Settings,
        count: int,
        metrics: Metrics,
        *,
        stale_after: float = STALE_AFTER,
        clock: Callable[[], float] = time.monotonic,
        forked: Sequence[Forked] = (),
        view_channel: ChannelAddress | None = None,
    ) -> None:
        """`forked`: processes forked at start-up (`fork_workflow_processes`), taken as the
        first of each index; the others, and every restart, come from the fork server.
        `view_channel`: where this process answers their selects and look-ups
        (`activities.view_channel`), told to each in its word to start."""
        self._settings = settings
        self._view_channel = view_channel
        self._count = count
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload([run_workflow_process.__module__])
        self._replica: ReplicaMetrics = metrics.merge_processes()
        self._stale_after = stale_after
        self._clock = clock
        self._running: dict[str, _Running] = {}
        self._forked = dict(enumerate(forked))
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        metrics.watch_workflow_processes(lambda: (self.running(), self.ready()))

    @property
    def count(self) -> int:
        return self._count

    def prepare(self) -> None:
        """Start the fork server now, when `start` will need it (it imports the workflow
        processes' code in the background, so that `start` later forks at once)."""
        if len(self._forked) < self._count:
            forkserver.ensure_running()

    def start(self, spawn: Spawner) -> None:
        """Start each workflow process as a task made by `spawn` (the supervisor)."""
        for index in range(self._count):
            self._tasks.append(spawn(name_of(index), self._keeper(index)))

    def _keeper(self, index: int) -> Callable[[], Awaitable[None]]:
        return lambda: self._keep(index)

    def running(self) -> int:
        return sum(1 for one in list(self._running.values()) if one.process.is_alive())

    def ready(self) -> int:
        """Workflow processes whose worker polls (as their latest report says)."""
        return sum(
            1 for one in list(self._running.values()) if one.ready and one.process.is_alive()
        )

    def describe(self) -> str:
        """One line for /readyz and the logs."""
        return f"workflow processes: {self.ready()} of {self._count} ready"

    def pids(self) -> dict[str, int]:
        """The running workflow processes' ids, by name (for a benchmark's CPU meter)."""
        return {
            name: one.process.pid
            for name, one in list(self._running.items())
            if one.process.pid is not None and one.process.is_alive()
        }

    async def stop(self, grace: float = STOP_GRACE) -> None:
        """Drain every workflow process: SIGTERM, wait up to `grace` seconds for each to
        finish its steps in flight and exit, SIGKILL those still running."""
        self._stopping = True
        await cancel_and_wait(self._tasks, what="the workflow processes' watchers")
        running = list(self._running.items())
        running += [(name_of(i), _Running(f.process, 0.0)) for i, f in self._forked.items()]
        self._forked.clear()
        for _, one in running:
            if one.process.is_alive():
                one.process.terminate()
        deadline = self._clock() + grace

        def join_all() -> None:
            for name, one in running:
                one.process.join(max(0.0, deadline - self._clock()))
                if one.process.is_alive():
                    log.error("%s did not drain within %gs; killing it", name, grace)
                    one.process.kill()
                    one.process.join(5)

        await asyncio.to_thread(join_all)
        for name, _ in running:
            self._replica.retire(name)
        self._running.clear()

    async def _keep(self, index: int) -> None:
        """Run workflow process `index` until it exits (or is killed for its silence), and
        raise: the supervisor restarts it. Cancelled by `stop`, which drains it."""
        name = name_of(index)
        forked = self._forked.pop(index, None)
        if forked is not None:
            process, reports = forked.process, forked.reports
        else:
            reports, theirs = self._context.Pipe()
            process = self._context.Process(
                target=run_workflow_process,
                args=(self._settings, index, theirs),
                name=name,
                daemon=True,
            )
            await asyncio.to_thread(process.start)
            theirs.close()  # the child holds the only other end: its exit is our EOF
        with contextlib.suppress(OSError):  # gone already: the watch below says how
            reports.send(Go(self._view_channel))
        one = self._running[name] = _Running(process, self._clock())
        log.info("%s started (pid %s)", name, process.pid)
        try:
            why = await run_in_thread(f"watch-{name}", lambda: self._watch(name, one, reports))
        finally:
            if not self._stopping:
                if process.is_alive():
                    process.kill()
                await asyncio.to_thread(process.join, 5)
                self._replica.retire(name)
                reports.close()
        raise WorkflowProcessExited(f"{name} {why}")

    def _watch(self, name: str, one: _Running, reports: Connection) -> str:
        """Read `name`'s reports until it exits (in a thread of its own); kill it when it
        has been silent for `stale_after` seconds. How it ended."""
        while True:
            if reports.poll(0.5):
                try:
                    report: Report = reports.recv()
                except (EOFError, OSError):
                    break
                one.heard, one.ready, one.reported = self._clock(), report.ready, True
                self._replica.update(name, report.metrics)
            elif not one.process.is_alive():
                break
            elif not one.stale and self._clock() - one.heard > self._allowed(one):
                log.error("%s sent nothing for %gs; killing it", name, self._allowed(one))
                one.stale = True
                one.process.kill()
        one.ready = False
        one.process.join(5)
        if one.stale:
            return f"was killed after {self._allowed(one):g}s without a report"
        return f"exited with code {one.process.exitcode}"

    def _allowed(self, one: _Running) -> float:
        """How long `one` may be silent: `stale_after`, longer before its first report."""
        return self._stale_after if one.reported else max(self._stale_after, FIRST_REPORT_WITHIN)

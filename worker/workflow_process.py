"""A workflow process: one of the interpreters beside a replica's main process, running the
preemption workflows and their local activities (select, nominate, each victim, record the
end), and never a regular activity (`worker.workflow_processes`, docs/scale-out.md).

It has its own Temporal client, Kubernetes client and ledger engine, and no cluster view: the
main process holds the one view, and answers what needs it over a local channel
(`activities.view_channel`): the select (decided there, under the decision lock, as ever)
and a victim's check that the room is still needed. It reports to the main
process through a pipe every `REPORT_EVERY` seconds: that it is alive, whether its worker
polls, and its metrics, which the main process serves as the replica's. SIGTERM (or SIGINT)
drains it: its worker stops polling and lets the steps in flight finish within
`GRACEFUL_SHUTDOWN`. It dies with the main process (SIGKILL: `PR_SET_PDEATHSIG` towards
the fork server, which exits when the main process does), as a container's processes do,
and stops when the main process stops reading its reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import logging
import multiprocessing
import os
import signal
import threading
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from preemptctl.activities.view_channel import ChannelAddress, ViewChannel
from preemptctl.kube.view import ClusterView
from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.worker.config import Settings
from preemptctl.worker.connections import StartupError, connect_cluster, connect_temporal
from preemptctl.worker.logs import configure_logging
from preemptctl.worker.metrics import FamilyReport, Metrics, report_of
from preemptctl.worker.starter import start_in_this_process
from preemptctl.worker.temporal_worker import Role, build_worker, preemption_activities

log = logging.getLogger("preemptctl")

REPORT_EVERY = 1.0  # seconds between two reports to the main process


@dataclass(frozen=True)
class Go:
    """The main process's word to start, with where its view channel listens (None: no
    channel; the activities then ask the API server, and the select cannot run here)."""

    view_channel: ChannelAddress | None = None


LEDGER_POOL = 16  # ledger connections kept open (and as many more opened under load)
PR_SET_PDEATHSIG = 1  # prctl(2)


@dataclass(frozen=True)
class Report:
    """What a workflow process tells the main one, every `REPORT_EVERY` seconds."""

    ready: bool  # its worker polls
    metrics: list[FamilyReport] = field(default_factory=list)


def name_of(index: int) -> str:
    """`workflows-<index>`: the process in logs, metrics labels and supervised task names."""
    return f"workflows-{index}"


def run_workflow_process(settings: Settings, index: int, channel: Connection) -> None:
    """The process's entry point: forked from the main process at start-up, or from the fork
    server later (`worker.workflow_processes`); it gets `settings`, `index` and its end of a
    pipe. It waits for the main process's word (`Go`) before it connects to anything: a
    process forked at start-up idles until the main process has checked every connection,
    and a start-up that fails ends it without a word."""
    _die_with_parent()
    configure_logging(settings.log_format, process=name_of(index))
    name = name_of(index)
    try:
        word = channel.recv()
        if not isinstance(word, Go):
            return
    except (EOFError, OSError, KeyboardInterrupt):  # the main process stopped first
        return
    try:
        asyncio.run(serve(settings, index, channel, word.view_channel))
    except KeyboardInterrupt:
        pass
    except StartupError as error:  # a connection the main process had just made
        log.error("%s cannot start: %s", name, error)
        raise SystemExit(2) from None
    except Exception:
        log.exception("%s failed", name)
        raise SystemExit(1) from None


async def serve(
    settings: Settings,
    index: int,
    channel: Connection,
    view_channel: ChannelAddress | None = None,
) -> None:
    """Connect, poll the workflows' task queue and report, until SIGTERM, SIGINT, or the main
    process no longer reads; then drain and return."""
    stop = asyncio.Event()
    serving = threading.Event()  # set: stop serving the main process's starts
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    name = name_of(index)
    metrics = Metrics()
    kube = connect_cluster(settings)
    # Each of its local activity slots may append at once: a pool that makes them queue
    # for a connection holds their workflow tasks open (LEDGER_POOL, and as many more).
    ledger = create_ledger_engine(settings.effective_database_url(), pool_size=LEDGER_POOL)
    metrics.watch_ledger(ledger)
    ready = False

    async def report() -> None:
        while not stop.is_set():
            sent = Report(ready, report_of(metrics.registry))
            try:
                await asyncio.to_thread(channel.send, sent)
            except (OSError, EOFError):  # the main process is gone, or stopped reading
                log.warning("%s: the main process no longer reads; stopping", name)
                stop.set()
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(REPORT_EVERY):
                    await stop.wait()

    reporting = asyncio.create_task(report(), name="report")
    try:
        # The SDK's own metrics stay with the main process (one port per replica).
        client = await connect_temporal(
            dataclasses.replace(settings, identity=_identity(settings, name))
        )
        # A view never started: the view is the main process's alone, asked over the view
        # channel; without one, every look-up misses and asks the API server instead.
        to_main = ViewChannel(view_channel) if view_channel is not None else None
        activities = preemption_activities(
            settings, kube, ClusterView(kube, kinds=()), ledger, view_channel=to_main
        )
        async with build_worker(
            client, activities, task_queue=settings.task_queue, role=Role.WORKFLOWS
        ):
            ready = True
            log.info("%s ready: workflows of task queue %s", name, settings.task_queue)
            if to_main is not None:  # the main process's starts, made here: eager
                serve_main = threading.Thread(
                    target=to_main.serve_main,
                    args=(start_in_this_process(client, settings.task_queue, loop), serving),
                    name="serve-main",
                    daemon=True,
                )
                serve_main.start()
            await stop.wait()
            serving.set()
            ready = False
            log.info("%s stopping: draining the steps in flight", name)
        await asyncio.to_thread(activities.close)
    finally:
        stop.set()
        serving.set()
        reporting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reporting
        ledger.dispose()
        channel.close()


def _identity(settings: Settings, name: str) -> str:
    """The Temporal client identity of this process: the replica's, and which process."""
    return f"{settings.identity}/{name}"


def _die_with_parent() -> None:
    """Be SIGKILLed when the main process dies, however it dies (Linux; elsewhere the
    failed report ends the process instead): a killed replica leaves no process running
    workflows behind, as a container's end would not."""
    with contextlib.suppress(OSError, AttributeError):
        libc: Any = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    parent = multiprocessing.parent_process()
    if parent is not None and not parent.is_alive():  # it died before the request took
        os._exit(1)

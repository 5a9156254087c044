"""`preemptctl worker`: the controller, beside a cluster, until SIGTERM.

Start-up checks every connection before doing anything (one line and exit 2 for a wrong
setting). A ledger database that does not answer yet is waited for, with backoff and one
log line per attempt, while /readyz says why the worker is not ready. SIGTERM or SIGINT
stops starting preemptions and lets the Temporal worker drain what it is running (a
preemption it does not finish is resumed by another worker).

The workflows run in `workflow_processes` processes beside this one (docs/scale-out.md): by
default one per core the container may use but this process's, at least one; SIGTERM
drains them first, then this process's worker.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from collections.abc import Sequence
from typing import Any

from preemptctl.worker.config import ConfigError, Settings, load_settings
from preemptctl.worker.connections import (
    LedgerUnreachableError,
    StartupError,
    TemporalUnreachableError,
    connect_cluster,
    connect_temporal,
    sdk_runtime,
    wait_for_ledger,
)
from preemptctl.worker.errors import Unavailable, UsageError
from preemptctl.worker.logs import configure_logging
from preemptctl.worker.metrics import Metrics
from preemptctl.worker.probes import open_probe_server
from preemptctl.worker.runtime import running_controller
from preemptctl.worker.temporal_setup import check_search_attributes
from preemptctl.worker.trigger_rules import serving_line
from preemptctl.worker.workflow_processes import (
    Forked,
    fork_workflow_processes,
    workflow_process_count,
)

log = logging.getLogger("preemptctl")

# Flags that override settings; each maps to the Settings field of the same name.
FLAGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("--kubeconfig", {"help": "kubeconfig file (default $KUBECONFIG, then in-cluster)"}),
    ("--temporal-address", {"help": "Temporal frontend host:port"}),
    ("--temporal-namespace", {"help": "Temporal namespace"}),
    ("--task-queue", {"help": "Temporal task queue"}),
    ("--database-url", {"help": "ledger database URL (default $PREEMPT_DATABASE_URL)"}),
    ("--metrics-port", {"help": "port for /metrics and /parked (and the probes again)"}),
    ("--probe-port", {"help": "port for /healthz and /readyz, the kubelet's probes"}),
    ("--log-format", {"choices": ["json", "text"]}),
)


def add_setting_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="settings file (YAML); or $PREEMPT_CONFIG")
    for flag, options in FLAGS:
        parser.add_argument(flag, default=None, **options)
    parser.add_argument(
        "--dry-run",
        action="store_const",
        const=True,
        default=None,
        help="shadow mode: decide and record every preemption, touch nothing",
    )


def settings_from(args: argparse.Namespace) -> Settings:
    overrides = {
        flag[2:].replace("-", "_"): getattr(args, flag[2:].replace("-", "_")) for flag, _ in FLAGS
    }
    overrides["dry_run"] = args.dry_run
    try:
        return load_settings(args.config, overrides)
    except ConfigError as error:
        raise UsageError(str(error)) from None


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "worker",
        help="run the controller beside a cluster (Temporal worker and trigger loop)",
        description="Watch the cluster for unschedulable pods and preempt for them, each "
        "preemption a Temporal workflow recorded in the ledger.",
    )
    add_setting_flags(parser)
    parser.set_defaults(handler=run)


async def serve(settings: Settings, forked: Sequence[Forked] = ()) -> None:
    """Start in order: cluster config, probes (not ready), ledger (waited for while its
    database does not answer), Temporal, then the controller, until SIGTERM. `forked`: the
    workflow processes `run` forked before the event loop began."""
    kube = connect_cluster(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    metrics = Metrics()
    probes = open_probe_server(settings, metrics)
    probes.readiness = lambda: (False, "starting: opening the ledger")
    probes.start()
    try:
        waiting = "starting: opening the ledger"

        def not_ready() -> tuple[bool, str]:
            return False, waiting

        def on_wait(why: str) -> None:
            nonlocal waiting
            waiting = why

        probes.readiness = not_ready
        ledger = await wait_for_ledger(settings, stop, on_wait=on_wait)
        if ledger is None:
            return
        try:
            probes.readiness = lambda: (False, "starting: connecting to Temporal")
            client = await connect_temporal(
                settings, sdk_runtime(settings.sdk_metrics_port, settings.http_bind_address)
            )
            if settings.search_attributes:
                await check_search_attributes(client, settings.temporal_namespace)

            log.info("%s", serving_line(settings))

            def report(event: str, fields: dict[str, Any]) -> None:
                log.info(
                    "preemption %s: %s",
                    event,
                    fields.get("preemptor"),
                    extra={"preemption": fields},
                )

            async with running_controller(
                settings,
                client,
                kube,
                ledger,
                report=report,
                probes=probes,
                workflow_processes=workflow_process_count(settings),
                forked=forked,
            ):
                await stop.wait()
                log.info("stopping: draining the preemptions in progress")
        finally:
            ledger.dispose()
    finally:
        probes.close()


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    configure_logging(settings.log_format)
    # Forked now, while this process has no thread and no event loop: they share its
    # imported code and poll within a second (`workflow_processes`).
    forked = fork_workflow_processes(settings, workflow_process_count(settings))
    try:
        asyncio.run(serve(settings, forked))
    except (LedgerUnreachableError, TemporalUnreachableError) as error:
        raise Unavailable(str(error)) from None
    except StartupError as error:
        raise UsageError(str(error)) from None
    finally:
        for one in forked:  # drained already, unless start-up failed before the controller
            if one.process.is_alive():
                one.process.kill()
    return 0

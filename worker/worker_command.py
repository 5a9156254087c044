"""`preemptctl worker`: the controller, beside a cluster, until SIGTERM.

Start-up checks every connection before doing anything (one line and exit 2 for a wrong
setting); SIGTERM or SIGINT stops starting preemptions and lets the Temporal worker drain
what it is running (a preemption it does not finish is resumed by another worker).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from typing import Any

from preemptctl.worker.config import ConfigError, Settings, load_settings
from preemptctl.worker.errors import UsageError
from preemptctl.worker.runtime import (
    StartupError,
    configure_logging,
    connect_cluster,
    connect_temporal,
    open_ledger,
    running_controller,
    sdk_runtime,
)

log = logging.getLogger("preemptctl")

# Flags that override settings; each maps to the Settings field of the same name.
FLAGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("--kubeconfig", {"help": "kubeconfig file (default $KUBECONFIG, then in-cluster)"}),
    ("--temporal-address", {"help": "Temporal frontend host:port"}),
    ("--temporal-namespace", {"help": "Temporal namespace"}),
    ("--task-queue", {"help": "Temporal task queue"}),
    ("--database-url", {"help": "ledger database URL (default $PREEMPT_DATABASE_URL)"}),
    ("--metrics-port", {"help": "port for /metrics, /healthz and /readyz"}),
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


async def serve(settings: Settings) -> None:
    kube = connect_cluster(settings)
    ledger = open_ledger(settings)
    client = await connect_temporal(settings, sdk_runtime(settings.sdk_metrics_port))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)

    def report(event: str, fields: dict[str, Any]) -> None:
        log.info("preemption %s: %s", event, fields)

    async with running_controller(settings, client, kube, ledger, report=report):
        await stop.wait()
        log.info("stopping: draining the preemptions in progress")
    ledger.dispose()


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    configure_logging(settings.log_format)
    try:
        asyncio.run(serve(settings))
    except StartupError as error:
        raise UsageError(str(error)) from None
    return 0

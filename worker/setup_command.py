"""`preemptctl setup-temporal`: register the search attributes on an existing Temporal server.

It connects as the worker does (the same settings: Temporal's environment configuration,
the settings file, `PREEMPT_*` variables, TLS, client certificates, API keys), so a server
the worker can reach is one this command can set up.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from preemptctl.worker.config import ConfigError, Settings, load_settings, temporal_tls
from preemptctl.worker.errors import Unavailable, UsageError
from preemptctl.worker.temporal_setup import register_search_attributes

CONNECT_TIMEOUT_SECONDS = 15.0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "setup-temporal",
        help="register the preemption search attributes on a Temporal namespace (once)",
        description="Add the custom search attributes (PreemptorPod, TargetNode, VictimPods, "
        "...) that make preemptions findable in the Temporal UI. Safe to run again. "
        "Connects with the worker's settings (TEMPORAL_* and PREEMPT_* variables, --config).",
    )
    parser.add_argument("--config", metavar="FILE", help="settings file (YAML); or $PREEMPT_CONFIG")
    parser.add_argument(
        "--temporal-address",
        "--address",  # the name this flag had before it matched `worker`'s
        dest="temporal_address",
        metavar="HOST:PORT",
        help="Temporal frontend (default: the settings' temporal_address, localhost:7233)",
    )
    parser.add_argument(
        "--temporal-namespace",
        "--namespace",
        dest="temporal_namespace",
        metavar="NAMESPACE",
        help="Temporal namespace (default: the settings' temporal_namespace, default)",
    )
    parser.set_defaults(handler=run)


def settings_from(args: argparse.Namespace) -> Settings:
    overrides = {
        "temporal_address": args.temporal_address,
        "temporal_namespace": args.temporal_namespace,
    }
    try:
        return load_settings(args.config, overrides)
    except ConfigError as error:
        raise UsageError(str(error)) from None


async def _setup(settings: Settings) -> list[str]:
    address, namespace = settings.temporal_address, settings.temporal_namespace
    try:
        tls = temporal_tls(settings)
    except ConfigError as error:
        raise UsageError(str(error)) from None
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT_SECONDS):
            client = await Client.connect(
                address,
                namespace=namespace,
                tls=tls,
                api_key=settings.temporal_api_key or None,
                identity=settings.identity,
            )
    except (RuntimeError, TimeoutError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else "timed out"
        raise Unavailable(f"cannot reach Temporal at {address}: {reason}") from None
    try:
        return await register_search_attributes(client, namespace)
    except RPCError as error:
        message = (
            f"Temporal at {address} refused to register search attributes on namespace "
            f"{namespace}: {error.message}"
        )
        if error.status in (
            RPCStatusCode.UNAVAILABLE,
            RPCStatusCode.DEADLINE_EXCEEDED,
            RPCStatusCode.INTERNAL,
        ):
            raise Unavailable(message) from None
        raise UsageError(message) from None


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    added = asyncio.run(_setup(settings))
    where = f"namespace {settings.temporal_namespace} at {settings.temporal_address}"
    if added:
        print(f"registered on {where}: {', '.join(added)}")
    else:
        print(f"{where} already has every search attribute")
    return 0

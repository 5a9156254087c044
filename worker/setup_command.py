"""`preemptctl setup-temporal`: register the search attributes on an existing Temporal server."""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError

from preemptctl.worker.errors import UsageError
from preemptctl.worker.temporal_setup import register_search_attributes

ADDRESS_ENV = "PREEMPT_TEMPORAL_ADDRESS"
NAMESPACE_ENV = "PREEMPT_TEMPORAL_NAMESPACE"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "setup-temporal",
        help="register the preemption search attributes on a Temporal namespace (once)",
        description="Add the custom search attributes (PreemptorPod, TargetNode, VictimPods, "
        "...) that make preemptions findable in the Temporal UI. Safe to run again.",
    )
    parser.add_argument(
        "--address",
        default=os.environ.get(ADDRESS_ENV, "localhost:7233"),
        help=f"Temporal frontend host:port (default ${ADDRESS_ENV} or localhost:7233)",
    )
    parser.add_argument(
        "--namespace",
        default=os.environ.get(NAMESPACE_ENV, "default"),
        help=f"Temporal namespace (default ${NAMESPACE_ENV} or default)",
    )
    parser.set_defaults(handler=run)


async def _setup(address: str, namespace: str) -> list[str]:
    try:
        client = await Client.connect(address, namespace=namespace)
    except RuntimeError as error:
        raise UsageError(f"cannot reach Temporal at {address}: {error}") from None
    try:
        return await register_search_attributes(client, namespace)
    except RPCError as error:
        raise UsageError(
            f"Temporal at {address} refused to register search attributes on namespace "
            f"{namespace}: {error.message}"
        ) from None


def run(args: argparse.Namespace) -> int:
    added = asyncio.run(_setup(args.address, args.namespace))
    if added:
        print(f"registered on namespace {args.namespace} at {args.address}: {', '.join(added)}")
    else:
        print(f"namespace {args.namespace} at {args.address} already has every search attribute")
    return 0

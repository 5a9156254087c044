"""A preemption worker in a process of its own, so a test can SIGKILL it mid-preemption.

    python -m tests.support.worker_process --temporal HOST:PORT --task-queue Q \\
        --kubeconfig PATH --database-url URL

Prints `ready` once the cluster view has synced and the worker polls.
"""

from __future__ import annotations

import argparse
import asyncio

from temporalio.client import Client

from preemptctl.activities.preemption import PreemptionActivities
from preemptctl.kube.client import connect
from preemptctl.kube.view import ClusterView
from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.worker.temporal_worker import build_worker


async def serve(args: argparse.Namespace) -> None:
    client = await Client.connect(args.temporal)
    kube = connect(args.kubeconfig)
    view = ClusterView(kube)
    view.start()
    if not view.wait_ready(30):
        raise SystemExit("the cluster view did not sync")
    activities = PreemptionActivities(kube, view, create_ledger_engine(args.database_url))
    async with build_worker(client, activities, task_queue=args.task_queue):
        print("ready", flush=True)
        await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--temporal", required=True)
    parser.add_argument("--task-queue", required=True)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--database-url", required=True)
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()

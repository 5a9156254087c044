"""A group preemption with many victims on many nodes, each API call slowed down: how long
from its first victim's DELETE to its last (issue 29: "a 160-victim group preemption, 5 ms
injected API latency: last DELETE ≤ 1 s after the first").

Run by hand (not in CI; it needs the machine's Postgres):
    .venv/bin/python -m benchmarks.wide_group [--members 16] [--victims-per-node 10]
        [--latency-ms 5]

A pending gang of `--members` pods (minCount all of them), each needing a whole node, over as
many nodes each full of `--victims-per-node` lower-priority pods: one group preemption, as
the trigger loop starts it (every step a local activity), through the Temporal dev server,
the API emulator with every request held `--latency-ms` before it is served, and a Postgres
ledger. The victims but the last are preempted 16 at a time (upstream's parallelizer), each
its own step: mark, then delete. Reported: the first and the last successful DELETE, the
spread between them, and the whole run from its start to its end.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import time
import uuid
from typing import Any

import psycopg
from temporalio.client import WorkflowFailureError
from temporalio.testing import WorkflowEnvironment

from preemptctl.activities.preemption import PreemptionActivities
from preemptctl.emulator import Emulator
from preemptctl.emulator.resources import POD_GROUPS
from preemptctl.kube.client import connect
from preemptctl.kube.view import ClusterView
from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.migrations import upgrade
from preemptctl.preemption.group_decision import GroupRef
from preemptctl.worker.starter import start_group_preemption
from preemptctl.worker.temporal_binary import temporal_cli
from preemptctl.worker.temporal_worker import build_worker
from preemptctl.workflows import search_attributes
from preemptctl.workflows.contract import (
    RUNBOOK,
    GroupPreemptionRequest,
    group_result_of_failure,
)

ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


def scenario(members: int, per_node: int) -> dict[str, Any]:
    """`members` nodes of `per_node` cpu, each full of 1-cpu pods at priority 100; a pending
    gang of `members` pods asking `per_node` cpu each, at priority 1000."""
    items: list[dict[str, Any]] = []

    def pod(name: str, cpu: str, priority: int, node: str | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "priority": priority,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
        }
        status: dict[str, Any] = {"phase": "Running" if node else "Pending"}
        if node:
            spec["nodeName"] = node
        else:
            spec["schedulingGroup"] = {"podGroupName": "wide"}
            status["conditions"] = [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
            ]
        meta = {"name": name, "namespace": "bench", "uid": str(uuid.uuid4())}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}

    for n in range(members):
        node = f"node-{n:03d}"
        allocatable = {"cpu": str(per_node), "memory": "64Gi", "pods": "110"}
        items.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": node},
                "status": {"allocatable": allocatable, "capacity": allocatable},
            }
        )
        items += [pod(f"low-{n:03d}-{j:02d}", "1", 100, node) for j in range(per_node)]
        items.append(pod(f"wide-{n:03d}", str(per_node), 1000))
    items.append(
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "wide", "namespace": "bench", "uid": str(uuid.uuid4())},
            "spec": {"schedulingPolicy": {"gang": {"minCount": members}}, "priority": 1000},
        }
    )
    return {"apiVersion": "v1", "kind": "List", "items": items}


async def run(members: int, per_node: int, latency: float) -> None:
    database = f"preemptctl_wide_{secrets.token_hex(4)}"
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{database}"')
    url = f"postgresql://postgres@127.0.0.1:5432/{database}"
    emulator = Emulator()
    emulator.load(scenario(members, per_node))
    emulator.start()
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_cli(),
        search_attributes=search_attributes.ALL,
        dev_server_log_level="error",
    )
    try:
        upgrade(url)
        ledger = create_ledger_engine(url, pool_size=16)
        kube = connect(str(emulator.kubeconfig_path), pool_size=32)
        view = ClusterView(kube)
        view.start()
        assert view.wait_ready(60)
        activities = PreemptionActivities(kube, view, ledger, identity="bench")
        activities.decisions.prime()
        obj = emulator.store.get(POD_GROUPS, "bench", "wide")
        group = GroupRef("bench", "wide", obj["metadata"]["uid"], 1000)
        emulator.faults.delay(None, None, latency)  # every request, from now on
        async with build_worker(env.client, activities, task_queue="wide"):
            request = GroupPreemptionRequest(group, local_activities=True, runbook=RUNBOOK)
            began = time.time()
            handle = await start_group_preemption(env.client, request, task_queue="wide")
            try:
                result = await handle.result()
            except WorkflowFailureError as failed:
                carried = group_result_of_failure(failed)
                why = carried or failed.cause
                raise SystemExit(f"the group preemption failed: {why}") from None
            ended = time.time()
        deletes = sorted(
            r.received_at
            for r in emulator.requests.matching("delete", "pods")
            if 200 <= r.code < 300
        )
        view.stop()
        ledger.dispose()
    finally:
        await env.shutdown()
        emulator.stop()
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    victims = members * per_node
    print(
        f"group preemption: {members} members on {members} nodes, {victims} victims, "
        f"{latency * 1000:g} ms added to every API request"
    )
    print(f"outcome:                {result.outcome} ({len(result.victims)} victims)")
    print(f"victims deleted:        {len(deletes)} (expected {victims})")
    if deletes:
        print(f"first DELETE:           {deletes[0] - began:.3f} s after the start")
        print(
            f"last DELETE:            {deletes[-1] - deletes[0]:.3f} s after the first "
            "(target ≤ 1 s)"
        )
    print(f"whole run:              {ended - began:.3f} s, start to end")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--members", type=int, default=16)
    parser.add_argument("--victims-per-node", type=int, default=10)
    parser.add_argument("--latency-ms", type=float, default=5.0)
    args = parser.parse_args()
    asyncio.run(run(args.members, args.victims_per_node, args.latency_ms / 1000))


if __name__ == "__main__":
    main()

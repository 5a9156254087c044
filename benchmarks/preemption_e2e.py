"""End-to-end preemption benchmark: the Temporal dev server, the API emulator (in a child
process) and a Postgres ledger, with the real worker in this process.

Run by hand (not in CI):
    .venv/bin/python -m benchmarks.preemption_e2e [--preemptions 300] [--rate 30]

N preemptors, each needing the two 1-cpu victims of one full 2-cpu node, are started at
`--rate` per second. Reported: preemptions per second sustained (started ÷ time until the
last victim's delete reached the API server), p50/p99 latency from starting a preemption to
its last victim's delete, the worker's resident memory, the activities per preemption and
where a preemption's time goes (count and mean duration of each activity, from the workflow
histories). Targets (issue 14): sustained ≥ 0.9 x offered, p99 ≤ 2 s at 20/s and ≤ 1 s at
5/s, RSS ≤ 300 MiB, activities ≤ 3 + 2 x victims.

No scheduler binds the preemptors here, so each preemption ends its wait for the bind with
one `check_preemptor` poll (in a cluster the trigger loop's `preemptor_bound` signal ends it
instead); the activity count is printed with and without that poll.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import resource
import secrets
import statistics
import time
import uuid
from collections import defaultdict
from multiprocessing.connection import Connection
from typing import Any

import psycopg
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment

from preemptctl.activities.contracts import PreemptionRequest
from preemptctl.activities.preemption import PreemptionActivities
from preemptctl.emulator import Emulator
from preemptctl.kube.client import connect
from preemptctl.kube.view import ClusterView
from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.migrations import upgrade
from preemptctl.preemption.decision import PodRef
from preemptctl.worker.starter import start_preemption
from preemptctl.worker.temporal_binary import temporal_cli
from preemptctl.worker.temporal_worker import build_worker
from preemptctl.workflows import search_attributes

ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


def scenario(count: int) -> dict[str, Any]:
    def pod(name: str, priority: int, cpu: str, node: str | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "priority": priority,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
        }
        status: dict[str, Any] = {"phase": "Running" if node else "Pending"}
        if node:
            spec["nodeName"] = node
        else:
            status["conditions"] = [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
            ]
        meta = {"name": name, "namespace": "bench", "uid": str(uuid.uuid4())}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}

    items: list[dict[str, Any]] = []
    for i in range(count):
        name = f"node-{i:04d}"
        allocatable = {"cpu": "2", "memory": "8Gi", "pods": "110"}
        items.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name},
                "status": {"allocatable": allocatable, "capacity": allocatable},
            }
        )
        items += [pod(f"victim-{i:04d}-{j}", 100, "1", name) for j in range(2)]
        items.append(pod(f"urgent-{i:04d}", 1000, "2"))
    return {"apiVersion": "v1", "kind": "List", "items": items}


def serve(count: int, channel: Connection) -> None:
    """The child process: the emulator, answering 'deletes' with the delete times."""
    emulator = Emulator(bookmark_interval=5.0)
    emulator.load(scenario(count))
    emulator.start()
    channel.send(str(emulator.kubeconfig_path))
    while (command := channel.recv()) is not None:
        assert command == "deletes"
        channel.send(
            {
                r.name: r.received_at
                for r in emulator.requests.matching("delete", "pods")
                if 200 <= r.code < 300
            }
        )
    emulator.stop()


def rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 2**20


async def activity_times(
    env: WorkflowEnvironment, handles: list[Any]
) -> tuple[dict[str, float], dict[str, float]]:
    """Per activity type: mean seconds from scheduling to completion, and mean count per
    preemption (from a sample of twenty histories)."""
    spent: dict[str, list[float]] = defaultdict(list)
    sample = handles[:: max(1, len(handles) // 20)]
    for handle in sample:
        history = await handle.fetch_history()
        scheduled: dict[int, tuple[str, float]] = {}
        for event in history.events:
            moment = event.event_time.ToDatetime().timestamp()
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                name = event.activity_task_scheduled_event_attributes.activity_type.name
                scheduled[event.event_id] = (name, moment)
            elif event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
                spent["(local activities)"].append(0.0)
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                attributes = event.activity_task_completed_event_attributes
                name, began = scheduled[attributes.scheduled_event_id]
                spent[name].append(moment - began)
    means = {name: statistics.mean(times) for name, times in sorted(spent.items())}
    counts = {name: len(times) / len(sample) for name, times in sorted(spent.items())}
    return means, counts


async def run(count: int, rate: float, local: bool) -> None:
    database = f"preemptctl_bench_{secrets.token_hex(4)}"
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{database}"')
    url = f"postgresql://postgres@127.0.0.1:5432/{database}"
    parent, child = multiprocessing.Pipe()
    emulator = multiprocessing.get_context("fork").Process(target=serve, args=(count, child))
    emulator.start()
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_cli(),
        search_attributes=search_attributes.ALL,
        dev_server_log_level="error",
    )
    try:
        upgrade(url)
        ledger = create_ledger_engine(url, pool_size=16)
        kube = connect(parent.recv(), pool_size=32)
        view = ClusterView(kube)
        view.start()
        assert view.wait_ready(60)
        activities = PreemptionActivities(kube, view, ledger, identity="bench")
        async with build_worker(env.client, activities, task_queue="bench"):
            started: dict[str, float] = {}
            began = time.time()

            async def start(i: int) -> Any:
                """Start the i-th preemption on time, whatever the earlier starts cost."""
                await asyncio.sleep(max(0.0, began + i / rate - time.time()))
                preemptor = PodRef("bench", f"urgent-{i:04d}", "", 1000)
                with view.read() as snapshot:
                    pod = snapshot.pod_by_key(preemptor.key)
                    assert pod is not None
                    preemptor = PodRef.of(pod)
                request = PreemptionRequest(
                    preemptor, scheduled_wait_seconds=0.2, local_activities=local
                )
                started[preemptor.name] = time.time()
                return await start_preemption(env.client, request, task_queue="bench")

            handles = await asyncio.gather(*(start(i) for i in range(count)))
            all_started = time.time() - began
            results = await asyncio.gather(*(h.result() for h in handles))
            parent.send("deletes")
            deletes: dict[str, float] = parent.recv()
            times, counts = await activity_times(env, handles)
        view.stop()
        ledger.dispose()
    finally:
        await env.shutdown()
        parent.send(None)
        emulator.join(10)
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')

    latencies = []
    for i, result in enumerate(results):
        start = started[f"urgent-{i:04d}"]
        last = max(deletes[v.pod.name] for v in result.victims)
        latencies.append(last - start)
    latencies.sort()
    span = max(deletes.values()) - min(started.values())
    print(
        f"preemptions:            {count} offered at {rate:g}/s, 2 victims each"
        + (", every step but the decision a local activity" if local else "")
    )
    print(
        f"started:                all {count} in {all_started:.1f} s ({count / all_started:.1f}/s)"
    )
    print(
        f"outcomes:               {dict(sorted(_count(str(r.outcome) for r in results).items()))}"
    )
    print(f"victims deleted:        {len(deletes)} (expected {2 * count})")
    print(
        f"sustained:              {count / span:.1f} preemptions/s "
        f"(target ≥ {0.9 * rate:.1f}, 0.9 x offered)"
    )
    print(
        f"start → last delete:    p50 {statistics.median(latencies):.2f} s, "
        f"p99 {latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))]:.2f} s "
        f"(target p99 ≤ 2 s at 20/s, ≤ 1 s at 5/s)"
    )
    print(f"worker resident memory: {rss_mib():.0f} MiB (this process: worker, view, driver)")
    total = sum(counts.values())
    print(
        f"activities/preemption:  {total:.1f}, {total - counts.get('check_preemptor', 0):.1f} "
        f"without the bind poll (target ≤ 3 + 2 x 2 = 7)"
    )
    print("where the time goes (per preemption: count, mean scheduled → completed):")
    for name, seconds in times.items():
        print(f"  {name:<24} {counts[name]:4.1f} x {seconds * 1000:7.1f} ms")


def _count(values: Any) -> dict[str, int]:
    counted: dict[str, int] = defaultdict(int)
    for value in values:
        counted[value] += 1
    return counted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--preemptions", type=int, default=300)
    parser.add_argument("--rate", type=float, default=30.0)
    parser.add_argument(
        "--local-activities", action="store_true", help="every step but the decision local"
    )
    args = parser.parse_args()
    asyncio.run(run(args.preemptions, args.rate, args.local_activities))


if __name__ == "__main__":
    main()

"""End-to-end preemption benchmark: the Temporal dev server, the API emulator (in a child
process) and a Postgres ledger, with the real worker in this process.

Run by hand (not in CI):
    .venv/bin/python -m benchmarks.preemption_e2e [--preemptions 300] [--rate 30]

N preemptors, each needing the two 1-cpu victims of one full 2-cpu node, are started at
`--rate` per second, eagerly and with every step but the decision a local activity, as the
trigger loop starts them (`--remote-activities`: every step a regular activity). Reported:
preemptions per second sustained (started ÷ time until the last victim's delete reached the
API server), p50/p99 latency from starting a preemption to
its last victim's delete, the worker's resident memory, the activities per preemption and
where a preemption's time goes (count and mean duration of each activity, from the workflow
histories). Targets (issue 14): sustained ≥ 0.9 x offered, p99 ≤ 2 s at 20/s and ≤ 1 s at
5/s, RSS ≤ 300 MiB, activities ≤ 3 + 2 x victims.

CPU per preemption, per process: user + system time from /proc/<pid>/stat over the run (the
first start to the last result), divided by the preemptions: this process (worker, view and
driver; split by thread), the Temporal dev server, the emulator, and the Postgres backends
serving the ledger database. CPU time does not depend much on what else runs on the machine;
throughput and latency do.

No scheduler binds the preemptors here, so each preemption ends its wait for the bind with
one `check_preemptor` poll (in a cluster the trigger loop's `preemptor_bound` signal ends it
instead); the activity count is printed with and without that poll.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import faulthandler
import json
import multiprocessing
import os
import pstats
import re
import resource
import secrets
import signal
import statistics
import threading
import time
import uuid
from collections import defaultdict
from contextlib import ExitStack
from multiprocessing.connection import Connection
from typing import Any

import psycopg
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment

from preemptctl.activities.preemption import PreemptionActivities
from preemptctl.emulator import Emulator
from preemptctl.kube.client import connect
from preemptctl.kube.view import ClusterView
from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.migrations import upgrade
from preemptctl.preemption.decision import PodRef
from preemptctl.worker.starter import start_preemption
from preemptctl.worker.temporal_binary import temporal_cli
from preemptctl.worker.temporal_worker import build_worker, with_cached_hints
from preemptctl.workflows import search_attributes
from preemptctl.workflows.contract import PreemptionRequest

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


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(stat_path: str, *, system_only: bool = False) -> float:
    """User + system CPU seconds of a process or thread, from its /proc stat file (only
    the system time with `system_only`)."""
    try:
        with open(stat_path) as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:  # gone
        return 0.0
    return (int(fields[12]) + (0 if system_only else int(fields[11]))) / CLOCK_TICKS


def children(pid: int) -> dict[str, int]:
    """This process's child processes, by command name."""
    found: dict[str, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                text = stat.read()
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        if int(text.rsplit(")", 1)[1].split()[1]) == pid:
            found[name] = int(entry)
    return found


def thread_group(native_id: int, names: dict[int, str]) -> str:
    """A thread's group: the Python thread's name without its number, else the OS name
    (the Temporal core's Rust threads)."""
    name = names.get(native_id)
    if name is None:
        try:
            with open(f"/proc/self/task/{native_id}/comm") as comm:
                name = "core: " + comm.read().strip()
        except OSError:
            name = "?"
    return re.sub(r"[_-]?\d+(_\d+)?$", "", name) or name


class CpuMeter:
    """CPU seconds per process (and per thread group of this one) between two samples."""

    def __init__(self, processes: dict[str, list[int]]) -> None:
        self.processes = processes
        self.before = self._sample()

    def _sample(self) -> dict[str, float]:
        sample = {
            name: sum(cpu_seconds(f"/proc/{pid}/stat") for pid in pids)
            for name, pids in self.processes.items()
        }
        # The kernel's share of this process: futex waits and wakes of threads handing the
        # GIL to each other show up here, besides the sockets.
        sample["  system time (kernel)"] = cpu_seconds("/proc/self/stat", system_only=True)
        names = {t.native_id: t.name for t in threading.enumerate() if t.native_id}
        for tid in os.listdir("/proc/self/task"):
            group = "  thread " + thread_group(int(tid), names)
            sample[group] = sample.get(group, 0.0) + cpu_seconds(f"/proc/self/task/{tid}/stat")
        return sample

    def spent(self) -> dict[str, float]:
        after = self._sample()
        return {name: after[name] - self.before.get(name, 0.0) for name in after}


class ThreadProfiles:
    """cProfile in every thread of this process started from now on, and in this one: the
    worker's time is spread over the event loop, the workflow threads and the activity
    threads, and cProfile sees one thread at a time."""

    def __init__(self) -> None:
        self.profiles: list[cProfile.Profile] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        def begin(*_: Any) -> None:
            profile = cProfile.Profile()
            with self._lock:
                self.profiles.append(profile)
            profile.enable()  # replaces this hook in the new thread

        threading.setprofile(begin)
        begin()

    def stop(self) -> None:
        threading.setprofile(None)
        for profile in self.profiles:
            profile.disable()  # only the calling thread's really stops; the rest are read

    def write(self, path: str) -> None:
        merged = pstats.Stats(self.profiles[0])
        for profile in self.profiles[1:]:
            merged.add(profile)
        merged.dump_stats(path)


def postgres_backends(url: str, database: str) -> list[int]:
    with psycopg.connect(url, autocommit=True) as connection:
        rows = connection.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (database,),
        ).fetchall()
    return [int(pid) for (pid,) in rows]


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
                spent[f"{_local_activity_type(event)} (local)"].append(0.0)
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                attributes = event.activity_task_completed_event_attributes
                name, began = scheduled[attributes.scheduled_event_id]
                spent[name].append(moment - began)
    means = {name: statistics.mean(times) for name, times in sorted(spent.items())}
    counts = {name: len(times) / len(sample) for name, times in sorted(spent.items())}
    return means, counts


async def run(
    count: int, rate: float, local: bool, profile: str | None, search: bool = True
) -> None:
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
        # Starts and results through a client that reads as the worker's does (the trigger
        # loop's, once the runtime hands it the same client).
        client = with_cached_hints(env.client)
        async with build_worker(client, activities, task_queue="bench"):
            # Open the ledger's pool in full, so that its backends are there to be measured.
            with ExitStack() as opened:
                for _ in range(16):
                    opened.enter_context(ledger.connect())
            spawned = children(os.getpid())
            meter = CpuMeter(
                {
                    "worker (this process)": [os.getpid()],
                    "temporal dev server": [spawned["temporal"]],
                    "emulator": [emulator.pid or 0],
                    "postgres (ledger backends)": postgres_backends(url, database),
                }
            )
            profiles = ThreadProfiles() if profile else None
            if profiles is not None:
                profiles.start()
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
                    preemptor,
                    scheduled_wait_seconds=0.2,
                    local_activities=local,
                    search_attributes=search,
                )
                started[preemptor.name] = time.time()
                return await start_preemption(client, request, task_queue="bench", eager=True)

            handles = await asyncio.gather(*(start(i) for i in range(count)))
            all_started = time.time() - began
            # The SDK marks a handle whose start came back with the first workflow task.
            eager = sum(1 for h in handles if getattr(h, "__temporal_eagerly_started", False))
            # A failed preemption (e.g. its decision never got a turn) is counted, not fatal.
            answers = await asyncio.gather(*(h.result() for h in handles), return_exceptions=True)
            results = {i: r for i, r in enumerate(answers) if not isinstance(r, BaseException)}
            cpu = meter.spent()
            holds = list(activities.decisions.holds)
            if profiles is not None and profile:
                profiles.stop()
                profiles.write(profile)
            wall = time.time() - began
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
    for i, result in results.items():
        started_at = started[f"urgent-{i:04d}"]
        last = max(deletes.get(v.pod.name, 0.0) for v in result.victims)
        if last:
            latencies.append(last - started_at)
    latencies.sort()
    span = max(deletes.values()) - min(started.values())
    print(
        f"preemptions:            {count} offered at {rate:g}/s, 2 victims each"
        + (
            ", every step but the decision a local activity"
            if local
            else ", every step a regular activity"
        )
    )
    print(
        f"started:                all {count} in {all_started:.1f} s ({count / all_started:.1f}/s)"
        f", {eager} with their first workflow task in the start's answer (eager)"
    )
    outcomes = dict(sorted(_count(str(r.outcome) for r in results.values()).items()))
    failed = f", {count - len(results)} failed" if len(results) < count else ""
    print(f"outcomes:               {outcomes}{failed}")
    print(f"victims deleted:        {len(deletes)} (expected {2 * count})")
    print(
        f"sustained:              {len(latencies) / span:.1f} preemptions/s "
        f"(target ≥ {0.9 * rate:.1f}, 0.9 x offered)"
    )
    print(
        f"start → last delete:    p50 {statistics.median(latencies):.2f} s, "
        f"p99 {latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))]:.2f} s "
        f"(target p99 ≤ 2 s at 20/s, ≤ 1 s at 5/s)"
    )
    print(f"worker resident memory: {rss_mib():.0f} MiB (this process: worker, view, driver)")
    total = sum(counts.values())
    polls = counts.get("check_preemptor", 0) + counts.get("check_preemptor (local)", 0)
    print(
        f"activities/preemption:  {total:.1f}, {total - polls:.1f} "
        f"without the bind poll (target ≤ 3 + 2 x 2 = 7)"
    )
    print(f"CPU per preemption (ms; over {wall:.1f} s, share of a core in brackets):")
    for name, seconds in cpu.items():
        if name.startswith("  ") and seconds < 0.005 * count:
            continue
        print(f"  {name:<30} {seconds * 1000 / count:6.1f}  ({seconds / wall:.2f})")
    total_cpu = sum(v for k, v in cpu.items() if not k.startswith("  "))
    print(f"  {'all processes':<30} {total_cpu * 1000 / count:6.1f}  ({total_cpu / wall:.2f})")
    if holds:
        held_for = sorted(held for held, _ in holds)
        print(
            f"decision lock:          {len(holds)} holds, {sum(n for _, n in holds)} decisions; "
            f"hold median {statistics.median(held_for) * 1000:.0f} ms, "
            f"p99 {held_for[round(0.99 * (len(held_for) - 1))] * 1000:.0f} ms"
        )
    print("where the time goes (per preemption: count, mean scheduled → completed):")
    for name, seconds in times.items():
        print(f"  {name:<24} {counts[name]:4.1f} x {seconds * 1000:7.1f} ms")


def _local_activity_type(event: Any) -> str:
    """The activity type a local activity's marker records (its `data` detail, JSON)."""
    try:
        data = event.marker_recorded_event_attributes.details["data"].payloads[0].data
        return str(json.loads(data).get("activity_type") or "?")
    except (KeyError, IndexError, ValueError):
        return "?"


def _count(values: Any) -> dict[str, int]:
    counted: dict[str, int] = defaultdict(int)
    for value in values:
        counted[value] += 1
    return counted


def main() -> None:
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1: where each thread is
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--preemptions", type=int, default=300)
    parser.add_argument("--rate", type=float, default=30.0)
    parser.add_argument(
        "--remote-activities",
        action="store_true",
        help="every step a regular activity (the trigger runs all but the decision locally)",
    )
    parser.add_argument(
        "--profile",
        metavar="FILE",
        help="cProfile every thread of the worker process into FILE (pstats; slows it down)",
    )
    parser.add_argument(
        "--no-search-attributes",
        action="store_true",
        help="no search attribute upserts (what they cost the server)",
    )
    args = parser.parse_args()
    asyncio.run(
        run(
            args.preemptions,
            args.rate,
            not args.remote_activities,
            args.profile,
            not args.no_search_attributes,
        )
    )


if __name__ == "__main__":
    main()

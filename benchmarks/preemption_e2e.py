"""End-to-end preemption benchmark: the Temporal dev server, the API emulator (in a child
process) and a Postgres ledger, with the real worker in this process (and, with
`--workflow-processes K`, its K workflow processes beside it).

Run by hand (not in CI):
    .venv/bin/python -m benchmarks.preemption_e2e [--preemptions 300] [--rate 30]
        [--workflow-processes K] [--baseline]

N preemptors, each needing the two 1-cpu victims of one full 2-cpu node, are started at
`--rate` per second, with every step but the decision a local activity, as the trigger loop
starts them (`--remote-activities`: every step a regular activity); eagerly when the
workflows run in this process. Reported: preemptions per second sustained (started ÷ time
until the last victim's delete reached the API server), p50/p99 latency from starting a
preemption to its last victim's delete, the replica's resident memory (this process and its
workflow processes), workflow tasks and history events per preemption (every history, read
at the end), ledger transactions per preemption (pg_stat_database's xact_commit over the
run), the activities per preemption and where a preemption's time goes (count and mean
duration of each activity, from the workflow histories).

`--workflow-processes K` runs the replica as `preemptctl worker` does with
`workflow_processes: K` (docs/scale-out.md): this process holds the view and runs the
select (its worker polls activity tasks only), K spawned processes run the workflows and
their local activities.

`--baseline` first serves the same preemptors, on a fresh emulator, with a bare client: the
same decisions (the planner over the view, each decision's claim laid over the next, one at
a time under one lock, as the decision path decides), each victim deleted straight through
the Kubernetes client, nothing durable (no Temporal, no ledger); its sustained rate is the
denominator of the ratio printed at the end (issue 22: ≥ 0.7).

CPU per preemption, per process: user + system time from /proc/<pid>/stat over the run (the
first start to the last result), divided by the preemptions: this process (worker, view and
driver; split by thread), the workflow processes, the Temporal dev server, the emulator, and
the Postgres backends serving the ledger database. CPU time does not depend much on what
else runs on the machine; throughput and latency do.

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
import shutil
import signal
import statistics
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import psycopg
from sqlalchemy import func, select
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment

from preemptctl.activities.preemption import PreemptionActivities
from preemptctl.activities.view_channel import ViewChannelServer
from preemptctl.emulator import Emulator
from preemptctl.kube.client import connect
from preemptctl.kube.conditions import add_disruption_target
from preemptctl.kube.deletion import delete_victim
from preemptctl.kube.events import record_pod_event, record_preempted
from preemptctl.kube.nomination import nominate
from preemptctl.kube.view import ClusterView
from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.ledger.kinds import TERMINAL_KINDS
from preemptctl.ledger.models import events as events_table
from preemptctl.migrations import upgrade
from preemptctl.preemption.claims import Claim, ClaimBook
from preemptctl.preemption.decision import PodRef, Strategy, Verdict
from preemptctl.preemption.planner import plan_for
from preemptctl.worker.config import load_settings
from preemptctl.worker.metrics import Metrics
from preemptctl.worker.starter import Starts
from preemptctl.worker.supervisor import Supervisor
from preemptctl.worker.temporal_binary import temporal_cli
from preemptctl.worker.temporal_worker import Role, build_worker, with_cached_hints
from preemptctl.worker.workflow_processes import WorkflowProcesses
from preemptctl.workflows import search_attributes
from preemptctl.workflows.contract import RUNBOOK, PreemptionRequest
from tests.workflows.counting import LedgerRoundTrips

ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
LOCAL_ACTIVITY_MARKER = "core_local_activity"  # the Temporal core's marker of a local activity


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
        if command == "requests":  # every call so far, by verb and resource
            channel.send(Counter(f"{r.verb} {r.resource}" for r in emulator.requests))
            continue
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


@dataclass
class Histories:
    """What the workflow histories say, per preemption."""

    workflow_tasks: float  # workflow tasks completed
    failed_tasks: float  # workflow tasks failed (a replay that did not match, an error)
    timed_out_tasks: float  # workflow tasks timed out (a sticky worker too busy, or gone)
    events: float  # history events
    times: dict[str, float]  # activity type -> mean seconds scheduled → completed
    counts: dict[str, float]  # activity type -> count
    waits: dict[str, float]  # activity type -> mean seconds scheduled → started (a worker took it)


async def read_histories(handles: list[Any], concurrency: int = 16) -> Histories:
    """Every history, read once the runs have ended: workflow tasks and events per
    preemption, and each activity's count and mean time from scheduled to completed."""
    limit = asyncio.Semaphore(concurrency)

    async def one(handle: Any) -> Any:
        async with limit:
            return await handle.fetch_history()

    histories = await asyncio.gather(*(one(handle) for handle in handles))
    spent: dict[str, list[float]] = defaultdict(list)
    waited: dict[str, list[float]] = defaultdict(list)
    tasks = failed = timed_out = events = 0
    for history in histories:
        scheduled: dict[int, tuple[str, float]] = {}
        events += len(history.events)
        for event in history.events:
            kind = event.event_type
            moment = event.event_time.ToDatetime().timestamp()
            if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                tasks += 1
            elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                failed += 1
            elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
                timed_out += 1
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                name = event.activity_task_scheduled_event_attributes.activity_type.name
                scheduled[event.event_id] = (name, moment)
            elif kind == EventType.EVENT_TYPE_MARKER_RECORDED:
                marker = event.marker_recorded_event_attributes.marker_name
                if marker == LOCAL_ACTIVITY_MARKER:
                    spent[f"{_local_activity_type(event)} (local)"].append(0.0)
                else:  # a patch's marker (workflow.patched), a version: no step
                    spent[f"marker {marker}"].append(0.0)
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                attributes = event.activity_task_started_event_attributes
                name, began = scheduled[attributes.scheduled_event_id]
                waited[name].append(moment - began)
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                attributes = event.activity_task_completed_event_attributes
                name, began = scheduled[attributes.scheduled_event_id]
                spent[name].append(moment - began)
    n = max(1, len(histories))
    return Histories(
        tasks / n,
        failed / n,
        timed_out / n,
        events / n,
        {name: statistics.mean(times) for name, times in sorted(spent.items())},
        {name: len(times) / n for name, times in sorted(spent.items())},
        {name: statistics.mean(times) for name, times in sorted(waited.items())},
    )


async def ends_recorded(url: str, count: int, timeout: float) -> None:
    """Until `count` runs have recorded their end in the ledger (or `timeout` passes); on a
    connection of its own, so that the worker's statements are counted alone."""
    terminal = [kind.value for kind in TERMINAL_KINDS]
    query = select(func.count(func.distinct(events_table.c.run_id))).where(
        events_table.c.kind.in_(terminal)
    )
    deadline = time.time() + timeout
    watcher = create_ledger_engine(url, pool_size=1)
    try:
        while time.time() < deadline:
            with watcher.connect() as connection:
                if connection.execute(query).scalar_one() >= count:
                    return
            await asyncio.sleep(0.1)
    finally:
        watcher.dispose()


def xact_commits(url: str, database: str) -> int:
    """Transactions committed in `database` so far (pg_stat_database; the statistics reach
    it within a second of each transaction)."""
    with psycopg.connect(url, autocommit=True) as connection:
        row = connection.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (database,)
        ).fetchone()
    return int(row[0]) if row else 0


def resident_mib(pids: list[int]) -> float:
    """The resident memory of these processes together."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as statm:
                total += int(statm.read().split()[1]) * resource.getpagesize()
        except OSError:
            continue
    return total / 2**20


@dataclass
class Emulated:
    """An emulator child process serving a fresh copy of the scenario."""

    process: Any
    channel: Connection
    kubeconfig: str

    @classmethod
    def start(cls, count: int) -> Emulated:
        parent, child = multiprocessing.Pipe()
        process = multiprocessing.get_context("fork").Process(target=serve, args=(count, child))
        process.start()
        return cls(process, parent, parent.recv())

    def deletes(self) -> dict[str, float]:
        """Each victim's successful delete, by pod name: when the API server received it."""
        self.channel.send("deletes")
        received: dict[str, float] = self.channel.recv()
        return received

    def requests(self) -> Counter[str]:
        """Every call the API server had so far, by "verb resource"."""
        self.channel.send("requests")
        counted: Counter[str] = self.channel.recv()
        return counted

    def stop(self) -> None:
        self.channel.send(None)
        self.process.join(10)


@dataclass
class Run:
    """One run's figures, durable or bare."""

    started: dict[str, float]  # preemptor name -> when its preemption began
    victims: dict[str, list[str]]  # preemptor name -> its victims' names
    deletes: dict[str, float]
    cpu: dict[str, float]
    wall: float
    memory_mib: float
    calls: Counter[str] = field(default_factory=Counter)  # API calls during the run, by verb

    def latencies(self) -> list[float]:
        """Start → last victim's delete, of each preemption whose victims were all deleted."""
        found = []
        for name, began in self.started.items():
            victims = self.victims.get(name) or []
            times = [self.deletes.get(victim) for victim in victims]
            if victims and all(times):
                found.append(max(t for t in times if t) - began)
        return sorted(found)

    def sustained(self) -> float:
        """Preemptions carried out per second, from the first start to the last delete."""
        done = self.latencies()
        if not done or not self.deletes:
            return 0.0
        return len(done) / (max(self.deletes.values()) - min(self.started.values()))


def p99(values: list[float]) -> float:
    return values[min(len(values) - 1, round(0.99 * (len(values) - 1)))]


async def run_baseline(count: int, rate: float, *, writes: bool = False) -> Run:
    """The bare client: each preemptor decided in turn under one lock (the planner over the
    view, the claims of the decisions before it laid over the view, as the decision path
    lays them), then its victims deleted in parallel straight through the Kubernetes client.
    No Temporal, no ledger, no retries. With `writes`, the plain client: the same calls the
    product makes (its nomination, the `Preempting` Event, and each victim marked, deleted
    with its UID precondition and told `Preempted`), through the same gateway, nothing
    durable."""
    emulated = Emulated.start(count)
    kube = connect(emulated.kubeconfig, pool_size=32)
    view = ClusterView(kube)
    view.start()
    try:
        assert view.wait_ready(60)
        book = ClaimBook()
        deciding = threading.Lock()
        executor = ThreadPoolExecutor(max_workers=64, thread_name_prefix="bare")
        loop = asyncio.get_running_loop()
        started: dict[str, float] = {}
        chosen: dict[str, list[str]] = {}

        def preempt_victim(victim: PodRef, preemptor: PodRef, node: str) -> None:
            if writes:
                add_disruption_target(kube, victim, "default-scheduler")
            delete_victim(kube, victim)
            if writes:
                record_preempted(kube, victim, preemptor, node, "bench")

        def preempt(name: str) -> None:
            with deciding, view.read() as snapshot, book.applied(snapshot, ""):
                pod = snapshot.pod_by_key(f"bench/{name}")
                assert pod is not None
                decision = plan_for(snapshot, pod, Strategy.DEFAULT)
                if decision.verdict is not Verdict.PREEMPT or decision.nominated_node is None:
                    return
                book.claim(
                    Claim(
                        pod.uid, decision.nominated_node, frozenset(v.uid for v in decision.victims)
                    )
                )
            chosen[name] = [victim.name for victim in decision.victims]
            preemptor, node = PodRef.of(pod), decision.nominated_node
            if writes:
                nominate(kube, preemptor, node, overwrite=True)
                record_pod_event(
                    kube, preemptor, "Preempting", node, "bench", key=("bench",), normal=True
                )
            steps = [
                executor.submit(preempt_victim, victim, preemptor, node)
                for victim in decision.victims
            ]
            for step in steps:
                step.result()

        meter = CpuMeter(
            {"bare client (this process)": [os.getpid()], "emulator": [emulated.process.pid or 0]}
        )
        calls_before = emulated.requests()
        began = time.time()

        async def start(i: int) -> None:
            await asyncio.sleep(max(0.0, began + i / rate - time.time()))
            name = f"urgent-{i:04d}"
            started[name] = time.time()
            await loop.run_in_executor(executor, preempt, name)

        await asyncio.gather(*(start(i) for i in range(count)))
        cpu = meter.spent()
        wall = time.time() - began
        executor.shutdown()
        calls = emulated.requests() - calls_before
        memory = resident_mib([os.getpid()])
        return Run(started, chosen, emulated.deletes(), cpu, wall, memory, calls)
    finally:
        view.stop()
        emulated.stop()


async def run_durable(
    count: int,
    rate: float,
    local: bool,
    profile: str | None,
    search: bool,
    processes: int,
    activity_slots: int = 16,
) -> tuple[
    Run, Histories, int, int, list[tuple[float, int]], dict[str, int], float, LedgerRoundTrips
]:
    """The durable run: the worker as `preemptctl worker` runs it. Its figures, what the
    histories say, the ledger's transactions, the eager starts, the decision lock's holds,
    the outcomes, and how long all the starts took."""
    database = f"preemptctl_bench_{secrets.token_hex(4)}"
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{database}"')
    url = f"postgresql://postgres@127.0.0.1:5432/{database}"
    emulated = Emulated.start(count)
    # The dev server keeps its state in a SQLite file, in WAL mode, as it must under load.
    state = tempfile.mkdtemp(prefix="preemptctl-bench-temporal-")
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_cli(),
        search_attributes=search_attributes.ALL,
        dev_server_log_level="error",
        dev_server_extra_args=[
            "--db-filename",
            os.path.join(state, "temporal.db"),
            "--sqlite-pragma",
            "journal_mode=wal",
        ],
    )
    metrics = Metrics()
    try:
        upgrade(url)
        ledger = create_ledger_engine(url, pool_size=16)
        kube = connect(emulated.kubeconfig, pool_size=32)
        view = ClusterView(kube)
        view.start()
        assert view.wait_ready(60)
        activities = PreemptionActivities(kube, view, ledger, identity="bench")
        activities.decisions.prime()  # as the worker does once its view has synced
        channel = ViewChannelServer(activities.serve) if processes else None
        # Starts and results through a client that reads as the worker's does (the trigger
        # loop's, once the runtime hands it the same client).
        client = with_cached_hints(env.client)
        role = Role.ACTIVITIES if processes else Role.ALL
        workflow_processes: WorkflowProcesses | None = None
        async with build_worker(
            client,
            activities,
            task_queue="bench",
            role=role,
            max_concurrent_activities=activity_slots,
        ):
            if processes:
                settings = load_settings(
                    overrides={
                        "temporal_address": env.client.service_client.config.target_host,
                        "kubeconfig": emulated.kubeconfig,
                        "database_url": url,
                        "task_queue": "bench",
                        "identity": "bench",
                        "log_format": "text",
                    },
                    environ={},
                )
                assert channel is not None
                channel.start()
                workflow_processes = WorkflowProcesses(
                    settings, processes, metrics, view_channel=channel.address
                )
                workflow_processes.start(Supervisor(metrics).spawn)
                async with asyncio.timeout(120):
                    while workflow_processes.ready() < processes:
                        await asyncio.sleep(0.2)
            # Open the ledger's pool in full, so that its backends are there to be measured.
            with ExitStack() as opened:
                for _ in range(16):
                    opened.enter_context(ledger.connect())
            spawned = children(os.getpid())
            measured = {
                "worker (this process)": [os.getpid()],
                "temporal dev server": [spawned["temporal"]],
                "emulator": [emulated.process.pid or 0],
                "postgres (ledger backends)": postgres_backends(url, database),
            }
            replica = [os.getpid()]
            if workflow_processes is not None:
                replica += list(workflow_processes.pids().values())
                measured["workflow processes"] = list(workflow_processes.pids().values())
            commits_before = xact_commits(ADMIN, database)
            calls_before = emulated.requests()
            # The ledger statements of this process (the decisions' among them); a workflow
            # process's own (the end's) are not seen from here.
            trips = LedgerRoundTrips(ledger, activities.decisions.engine).__enter__()
            meter = CpuMeter(measured)
            profiles = ThreadProfiles() if profile else None
            if profiles is not None:
                profiles.start()
            started: dict[str, float] = {}
            # As the trigger loop starts them: eagerly, in the workflow process when there is
            # one (handed over the view channel), else through this process's worker.
            starts = Starts(client, "bench", eager=not processes, workflow_processes=channel)
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
                    local_activities=local,
                    search_attributes=search,
                    runbook=RUNBOOK,  # as the trigger starts it
                )
                started[preemptor.name] = time.time()
                return await starts.preemption(request)

            handles = await asyncio.gather(*(start(i) for i in range(count)))
            all_started = time.time() - began
            # The SDK marks a handle whose start came back with the first workflow task.
            eager = starts.eagerly
            # Each run's end is in the ledger, as the trigger loop learns it: no result long
            # poll per run (read below, once the meter has stopped).
            await ends_recorded(url, count, timeout=max(60.0, 4 * count / rate))
            cpu = meter.spent()
            memory = resident_mib(replica)
            trips.__exit__(None, None, None)
            calls = emulated.requests() - calls_before
            # A failed preemption (e.g. its decision never got a turn) is counted, not fatal.
            answers = await asyncio.gather(*(h.result() for h in handles), return_exceptions=True)
            results = {i: r for i, r in enumerate(answers) if not isinstance(r, BaseException)}
            holds = list(activities.decisions.holds)
            if profiles is not None and profile:
                profiles.stop()
                profiles.write(profile)
            wall = time.time() - began
            await asyncio.sleep(1.5)  # the backends' statistics reach pg_stat_database
            commits = xact_commits(ADMIN, database) - commits_before
            deletes = emulated.deletes()
            histories = await read_histories(handles)
            if workflow_processes is not None:
                await workflow_processes.stop()
        if channel is not None:
            channel.close()
        view.stop()
        ledger.dispose()
    finally:
        await env.shutdown()
        emulated.stop()
        shutil.rmtree(state, ignore_errors=True)
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    victims = {
        f"urgent-{i:04d}": [v.pod.name for v in result.victims] for i, result in results.items()
    }
    outcomes = dict(sorted(_count(str(r.outcome) for r in results.values()).items()))
    if len(results) < count:
        outcomes["(workflow failed)"] = count - len(results)
    figures = Run(started, victims, deletes, cpu, wall, memory, calls)
    return figures, histories, commits, eager, holds, outcomes, all_started, trips


async def run(
    count: int,
    rate: float,
    local: bool,
    profile: str | None,
    search: bool = True,
    processes: int = 0,
    baseline: bool = False,
    activity_slots: int = 16,
) -> None:
    load = os.getloadavg()
    bare = await run_baseline(count, rate) if baseline else None
    plain = await run_baseline(count, rate, writes=True) if baseline else None
    durable, histories, commits, eager, holds, outcomes, all_started, trips = await run_durable(
        count, rate, local, profile, search, processes, activity_slots
    )
    steps = "every step a local activity" if local else "every step a regular activity"
    where = f"{processes} workflow processes beside this one" if processes else "one process"
    print(
        f"preemptions:            {count} offered at {rate:g}/s, 2 victims each, {steps}; {where}"
        "; the Temporal dev server on a SQLite file (WAL), the ledger on Postgres"
    )
    print(
        f"machine load (1, 5, 15 min) before the run: {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f}"
    )
    print(
        f"started:                all {count} in {all_started:.1f} s ({count / all_started:.1f}/s)"
        f", {eager} with their first workflow task in the start's answer (eager)"
    )
    print(f"outcomes:               {outcomes}")
    latencies = durable.latencies()
    print(f"victims deleted:        {len(durable.deletes)} (expected {2 * count})")
    sustained = durable.sustained()
    print(
        f"sustained:              {sustained:.1f} preemptions/s "
        f"(target ≥ 27/s at 30/s offered; ≥ {0.9 * rate:.1f}, 0.9 x offered)"
    )
    if latencies:
        print(
            f"start → last delete:    p50 {statistics.median(latencies):.2f} s, "
            f"p99 {p99(latencies):.2f} s (target p99 ≤ 2 s)"
        )
    print(
        f"replica resident memory: {durable.memory_mib:.0f} MiB (this process with the view "
        f"and the driver{', and the workflow processes' if processes else ''})"
    )
    locals_ = sum(n for name, n in histories.counts.items() if name.endswith("(local)"))
    remote = sum(
        n
        for name, n in histories.counts.items()
        if not name.endswith("(local)") and not name.startswith("marker ")
    )
    print("per preemption (counted):")
    print(
        f"  workflow tasks         {histories.workflow_tasks:.1f} (and "
        f"{histories.failed_tasks:.2f} failed, {histories.timed_out_tasks:.2f} timed out; "
        "target ≤ 2)"
    )
    print(f"  history events         {histories.events:.1f} (target ≤ 12)")
    print(f"  activities             {locals_:.1f} local, {remote:.1f} remote")
    seen = "" if not processes else " (this process only: the end's are a workflow process's)"
    inputs = sum(1 for line in trips.sent if "decision_input" in line)
    print(
        f"  ledger statements      {(trips.statements - inputs) / count:.1f}{seen} "
        f"(target ≤ 4), and {inputs / count:.1f} recording the decision's inputs for replay "
        f"(in the background); {commits / count:.1f} transactions"
    )
    print(f"  API calls              {calls_line(durable.calls, count)} (target ≤ 8)")
    print_cpu(durable, count)
    if holds:
        held_for = sorted(held for held, _ in holds)
        print(
            f"decision lock:          {len(holds)} holds, {sum(n for _, n in holds)} decisions; "
            f"hold median {statistics.median(held_for) * 1000:.0f} ms, "
            f"p99 {p99(held_for) * 1000:.0f} ms, held {sum(held_for):.1f} s in all"
        )
    print("where the time goes (per preemption: count, mean scheduled → completed):")
    for name, seconds in histories.times.items():
        waited = histories.waits.get(name)
        until = f" ({waited * 1000:.1f} ms of it until a worker took it)" if waited else ""
        print(f"  {name:<24} {histories.counts[name]:4.1f} x {seconds * 1000:7.1f} ms{until}")
    for label, other in (
        ("bare client (decide, then delete; nothing else)", bare),
        ("plain client (the same calls as the product: nominate, Events, mark, delete)", plain),
    ):
        if other is None:
            continue
        other_latencies = other.latencies()
        print(f"{label}, same preemptors, a fresh emulator:")
        print(
            f"  sustained {other.sustained():.1f}/s; start → last delete p50 "
            f"{statistics.median(other_latencies):.2f} s, p99 {p99(other_latencies):.2f} s; "
            f"victims deleted {len(other.deletes)}; API calls {calls_line(other.calls, count)}"
        )
        print_cpu(other, count, indent="  ")
        ratio = sustained / other.sustained() if other.sustained() else 0.0
        print(f"  durable ÷ this client: {ratio:.2f} (target ≥ 0.9 of the bare client)")


def calls_line(calls: Counter[str], count: int) -> str:
    """API calls per preemption, by verb and resource (the view's lists and watches left
    out: they are the replica's, not a preemption's)."""
    made = {k: n for k, n in calls.items() if not k.startswith(("list ", "watch "))}
    total = sum(made.values()) / count
    each = ", ".join(f"{k} {n / count:.1f}" for k, n in sorted(made.items()))
    return f"{total:.1f} ({each})"


def print_cpu(figures: Run, count: int, indent: str = "") -> None:
    print(
        f"{indent}CPU per preemption (ms; over {figures.wall:.1f} s, share of a core in brackets):"
    )
    for name, seconds in figures.cpu.items():
        if name.startswith("  ") and seconds < 0.005 * count:
            continue
        print(f"{indent}  {name:<30} {seconds * 1000 / count:6.1f}  ({seconds / figures.wall:.2f})")
    total_cpu = sum(v for k, v in figures.cpu.items() if not k.startswith("  "))
    print(
        f"{indent}  {'all processes':<30} {total_cpu * 1000 / count:6.1f}  "
        f"({total_cpu / figures.wall:.2f})  (target ≤ 60 ms at 20/s)"
    )


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
    parser.add_argument(
        "--workflow-processes",
        type=int,
        default=0,
        metavar="K",
        help="run the workflows in K processes beside this one, as preemptctl worker does",
    )
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="first serve the same preemptors with a bare client, and print the ratio",
    )
    parser.add_argument(
        "--activity-slots",
        type=int,
        default=16,
        metavar="N",
        help="the worker's regular activity slots (the decision waits for one)",
    )
    args = parser.parse_args()
    asyncio.run(
        run(
            args.preemptions,
            args.rate,
            not args.remote_activities,
            args.profile,
            not args.no_search_attributes,
            args.workflow_processes,
            args.baseline,
            args.activity_slots,
        )
    )


if __name__ == "__main__":
    main()

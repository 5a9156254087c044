"""Decision-path benchmark: the serial part of every preemption, alone, at cluster scale.

Run by hand (not in CI; it needs the machine's Postgres):
    .venv/bin/python -m benchmarks.decision_path [--nodes 5000] [--decisions 300] [--threads 4]

What runs is the select activity's critical section, `deciding.path.DecisionPath`, as
the worker runs it: the ledger-wide decision lock on a real Postgres ledger, the open claims
read incrementally, the planner over a 5,000-node / 150,000-pod snapshot with the claims
applied, the eviction budget, and the write-ahead of the decision with its victims. Several
threads decide at once, as the worker's activity threads do, so the lock is contended.

A run in flight keeps its claim: at most `--in-flight` runs are open at a time; when a run
ends its victims leave the snapshot, its preemptor is bound there (as the watch would show)
and its `completed` event is appended outside the lock, as the `record_end` activity does.
Meanwhile the run keeps of its decision what the worker's workflow keeps (`InFlight`).

Each decision's inputs are recorded as the worker records them (unless --no-inputs): captured
under the lock, written out for the shared layout by the recorder's thread in the same
process after the commit, appended to the ledger with the packs of objects no decision
before stored. The first decision (a warm-up, before the burst) stores every object; the
burst that follows is measured.

Reported: decisions per second through the lock (the ceiling for any number of worker
replicas), the lock's hold time per decision (median and p99), the decision latency
including the wait for the lock, and for the inputs: how many of the burst's decisions were
recorded and how many got a "not recorded" marker, the bytes the first decision stored and
what each later one added on average (the rows' and packs' compressed bytes, and the growth
of the two tables on disk), how long the recorder needed after the last decision, and how
much of the CPU per decision the cyclic garbage collector took (its collections by kind). The
machine's load average is printed with them. Targets (issues 14 and 22): ≥ 40 decisions/s
with inputs recorded, every one recorded, ≤ 100 KiB new per decision after the first.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import secrets
import statistics
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import orjson
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.planner import snapshot_file
from benchmarks.synthetic_cluster import preemptor
from preemptctl.deciding.path import Decided, DecisionPath, DecisionRequest
from preemptctl.kube.pods import PodLookup, Presence
from preemptctl.kube.view import settle_the_heap
from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.ledger.events import LedgerEvent
from preemptctl.ledger.inputs import Appended
from preemptctl.ledger.inputs_recorder import INPUTS_MAX_BYTES
from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.writer import append
from preemptctl.migrations import upgrade
from preemptctl.preemption.decision import Decision, PodRef, Verdict
from preemptctl.preemption.decode import decode_pod
from preemptctl.preemption.snapshot import ClusterSnapshot

ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
KiB = 1024
INPUTS_TABLES = ("decision_inputs", "decision_input_packs")


class View:
    """The cluster view's shape: one snapshot, read under one lock, synced."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.snapshot = snapshot
        self.lock = threading.Lock()

    @contextmanager
    def read(self) -> Iterator[ClusterSnapshot]:
        with self.lock:
            yield self.snapshot

    def wait_ready(self, timeout: float | None = None) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class InFlight:
    """What a run in flight keeps of its decision until it ends, as the worker's workflow
    does (`activities.preemption.Selection`): its preemptor, node and victims. Not the
    decision whole: its rationale holds an evaluation per node the dry run visited (500 at
    5,000 nodes), which the worker drops with the activity's answer; a hundred runs in
    flight would keep 50,000 of them for every full collection to traverse."""

    preemptor: PodRef
    nominated_node: str | None
    victims: tuple[PodRef, ...]

    @classmethod
    def of(cls, decision: Decision) -> InFlight:
        return cls(decision.preemptor, decision.nominated_node, decision.victims)


class CollectorTime:
    """A `gc.callbacks` entry: the CPU time the cyclic collector takes, and its collections
    by generation. A collection runs in the thread whose allocation set it off, holding the
    interpreter, so that thread's CPU time from start to stop is the collection's."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = [0, 0, 0]
        self._began = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.thread_time()
        else:
            self.seconds += time.thread_time() - self._began
            self.collections[info["generation"]] += 1


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def load() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg()) + f" on {os.cpu_count()} cores"


def table_bytes(url: str) -> int:
    """What the inputs' tables take on disk (heap, TOAST and indexes)."""
    with psycopg.connect(url) as connection:
        found = connection.execute(
            "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
            "WHERE c.relname = ANY(%s) AND c.relkind = 'r'",
            (list(INPUTS_TABLES),),
        ).fetchone()
    return int(found[0] or 0) if found else 0


def run(
    nodes: int,
    decisions: int,
    threads: int,
    in_flight: int,
    batch: int,
    record_inputs: bool,
    from_start: bool = False,
) -> None:
    print(f"load average at the start: {load()}")
    path = snapshot_file(nodes)
    started = time.perf_counter()
    view = View(ClusterSnapshot.from_list(orjson.loads(path.read_bytes())))
    view.snapshot.warm()  # as the cluster view does once synced, and then settles the heap
    settle_the_heap()
    print(
        f"snapshot: {nodes} nodes, {len(view.snapshot.pods)} pods, "
        f"built in {time.perf_counter() - started:.1f} s"
    )
    objects = [preemptor(name=f"urgent-{i}") for i in range(decisions)]
    by_name = {obj["metadata"]["name"]: obj for obj in objects}

    def api_server(ref: PodRef) -> PodLookup:
        """Step 1's read of the preemptor, as the API server would answer it."""
        return PodLookup(Presence.FOUND, by_name[ref.name])

    with view.read() as snapshot:
        for obj in objects:
            snapshot.upsert_pod(decode_pod(obj))

    database = f"preemptctl_decisions_{secrets.token_hex(4)}"
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{database}"')
    url = f"postgresql://postgres@127.0.0.1:5432/{database}"
    try:
        upgrade(url)
        ledger = create_ledger_engine(url, pool_size=threads + 2)
        path_ = DecisionPath(
            ledger,
            view,
            api_server,
            identity="bench",
            max_batch=batch,
            inputs_max_bytes=INPUTS_MAX_BYTES if record_inputs else 0,
        )
        open_runs: deque[tuple[int, InFlight]] = deque()
        runs_lock = threading.Lock()
        latencies: list[float] = []
        outcomes: dict[str, int] = {}

        def end(index: int, decision: InFlight) -> None:
            """The run is over: the cluster shows its effect, its end is recorded."""
            with view.read() as snapshot:
                for victim in decision.victims:
                    snapshot.remove_pod(victim.uid)
                pod = snapshot.pods.get(decision.preemptor.uid)
                if pod is not None and decision.nominated_node:
                    snapshot.upsert_pod(dataclasses.replace(pod, node_name=decision.nominated_node))
            append(
                ledger,
                LedgerEvent(
                    f"p-{index}",
                    "run-1",
                    EventKind.COMPLETED,
                    decision.preemptor,
                    payload={"preemptorScheduled": True},
                ),
            )

        def decide(index: int) -> None:
            obj = objects[index]
            meta = obj["metadata"]
            request = DecisionRequest(
                f"p-{index}",
                "run-1",
                datetime.now(UTC),
                PodRef(meta["namespace"], meta["name"], meta["uid"], 1_000_000),
            )
            began = time.perf_counter()
            decided = path_.decide(request)
            assert isinstance(decided, Decided), decided
            latencies.append(time.perf_counter() - began)
            verdict = str(decided.decision.verdict)
            ended: list[tuple[int, InFlight]] = []
            with runs_lock:
                outcomes[verdict] = outcomes.get(verdict, 0) + 1
                if decided.decision.verdict is Verdict.PREEMPT:
                    open_runs.append((index, InFlight.of(decided.decision)))
                while len(open_runs) > in_flight:
                    ended.append(open_runs.popleft())
            for done in ended:
                end(*done)

        decide(0)  # warm: the first read of the claims is a full one
        first: Appended | None = None
        first_seconds = 0.0
        if path_.inputs is not None and not from_start:  # the first stores every object
            waited = time.perf_counter()
            path_.inputs.wait()
            first_seconds = time.perf_counter() - waited
            first = path_.inputs.appended[0] if path_.inputs.appended else None
            path_.inputs.appended.clear()
        disk_before = table_bytes(url)
        recorder_cpu = path_.inputs.cpu_seconds if path_.inputs is not None else 0.0
        path_.holds.clear()
        latencies.clear()
        collector = CollectorTime()
        gc.callbacks.append(collector)
        cpu_began = time.process_time()
        began = time.perf_counter()
        with ThreadPoolExecutor(max_workers=threads) as pool:
            list(pool.map(decide, range(1, decisions)))
        wall = time.perf_counter() - began
        behind, skipped = 0.0, 0
        appended: list[Appended] = []
        if path_.inputs is not None:  # the recorder catches up before the ledger goes
            path_.inputs.wait()
            recorder_cpu = path_.inputs.cpu_seconds - recorder_cpu
            behind = time.perf_counter() - began - wall
            skipped = path_.inputs.skipped
            appended = list(path_.inputs.appended)
            if from_start and appended:  # the first decision's, recorded during the burst
                first, appended = appended[0], appended[1:]
        cpu = time.process_time() - cpu_began
        gc.callbacks.remove(collector)
        disk_after = table_bytes(url)
        ledger.dispose()
    finally:
        gc.unfreeze()
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')

    holds = [seconds * 1000 / made for seconds, made in path_.holds]
    sizes = [made for _, made in path_.holds]
    waits = [w * 1000 for w in latencies]
    print(
        f"decisions:           {decisions - 1} from {threads} threads, {in_flight} runs in flight"
    )
    print(f"verdicts:            {dict(sorted(outcomes.items()))}")
    print(f"through the lock:    {(decisions - 1) / wall:.1f} decisions/s (target ≥ 40)")
    per_decision = cpu * 1000 / (decisions - 1)
    recorder = recorder_cpu * 1000 / (decisions - 1)
    print(
        f"CPU per decision:    {per_decision:.1f} ms in this process (every thread: deciding, "
        f"ending runs, recording"
        + (f"; the recorder's {recorder:.1f} ms of it" if record_inputs else "")
        + f"): one interpreter with a core to itself makes at most "
        f"{1000 / per_decision:.0f} decisions/s"
    )
    print(
        f"cyclic collector:    {collector.seconds * 1000 / (decisions - 1):.1f} ms of it per "
        f"decision ({collector.collections[2]} full collections, "
        f"{collector.collections[0] + collector.collections[1]} younger)"
    )
    if record_inputs:
        recorded = [made for made in appended if made.appended]
        print(
            f"inputs recorder:     {len(recorded)} of the {decisions - 1} recorded, "
            f"{skipped} marked not recorded "
            f"(backlog full); {behind:.1f} s more to record the last decisions' inputs"
        )
        if first is not None:
            when = (
                f"the recorder took {first_seconds:.1f} s for it"
                if first_seconds
                else "recorded during the burst"
            )
            print(
                f"inputs, first:       {(first.row_bytes + first.pack_bytes) / KiB:,.0f} KiB new "
                f"(every object; {when})"
            )
        if recorded:
            new = [made.row_bytes + made.pack_bytes for made in recorded]
            print(
                f"inputs, after it:    {sum(new) / len(new) / KiB:.1f} KiB new per decision on "
                f"average (rows {sum(m.row_bytes for m in recorded) / len(new) / KiB:.1f} KiB, "
                f"packs {sum(m.pack_bytes for m in recorded) / len(new) / KiB:.1f} KiB; max "
                f"{max(new) / KiB:.1f} KiB); on disk "
                f"{(disk_after - disk_before) / len(new) / KiB:.1f} KiB per decision"
            )
    print(
        f"planned again:       {path_.planned_again} batch(es) planned again under the lock\n"
        f"lock hold/decision:  median {statistics.median(holds):.1f} ms, "
        f"p99 {percentile(holds, 0.99):.1f} ms "
        f"({len(sizes)} acquisitions, {statistics.mean(sizes):.1f} decisions each on average)"
    )
    print(
        f"decision latency:    median {statistics.median(waits):.1f} ms, "
        f"p99 {percentile(waits, 0.99):.1f} ms (with the wait for the lock)"
    )
    print(f"load average at the end: {load()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--decisions", type=int, default=300)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--in-flight", type=int, default=100)
    parser.add_argument("--batch", type=int, default=32, help="most decisions per acquisition")
    parser.add_argument(
        "--burst-from-start",
        action="store_true",
        help="start the burst right after the first decision, while the recorder is still "
        "storing every object (by default it waits for that first recording)",
    )
    parser.add_argument(
        "--no-inputs",
        action="store_true",
        help="do not record each decision's inputs (recorded by default, as the worker does, "
        "by a thread of the same process after the commit)",
    )
    args = parser.parse_args()
    for batch in sorted({1, args.batch}):
        print(f"-- at most {batch} decision(s) per acquisition of the lock")
        run(
            args.nodes,
            args.decisions,
            args.threads,
            args.in_flight,
            batch,
            not args.no_inputs,
            args.burst_from_start,
        )


if __name__ == "__main__":
    main()

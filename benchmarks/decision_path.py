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

Reported: decisions per second through the lock (the ceiling for any number of worker
replicas), the lock's hold time per decision (median and p99), and the decision latency
including the wait for the lock. Target (issue 14): ≥ 40 decisions/s.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import secrets
import statistics
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import orjson
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.planner import snapshot_file
from benchmarks.synthetic_cluster import preemptor
from preemptctl.deciding.path import Decided, DecisionPath, DecisionRequest
from preemptctl.kube.pods import PodLookup, Presence
from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.ledger.events import LedgerEvent
from preemptctl.ledger.inputs_recorder import INPUTS_MAX_BYTES
from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.writer import append
from preemptctl.migrations import upgrade
from preemptctl.preemption.decision import PodRef, Verdict
from preemptctl.preemption.decode import decode_pod
from preemptctl.preemption.snapshot import ClusterSnapshot

ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


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


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def run(
    nodes: int, decisions: int, threads: int, in_flight: int, batch: int, record_inputs: bool
) -> None:
    path = snapshot_file(nodes)
    started = time.perf_counter()
    view = View(ClusterSnapshot.from_list(orjson.loads(path.read_bytes())))
    view.snapshot.warm()  # as the cluster view does once synced, and then freezes the heap
    gc.collect()
    gc.freeze()
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
        open_runs: deque[tuple[int, Decided]] = deque()
        runs_lock = threading.Lock()
        latencies: list[float] = []
        outcomes: dict[str, int] = {}

        def end(index: int, decided: Decided) -> None:
            """The run is over: the cluster shows its effect, its end is recorded."""
            decision = decided.decision
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
            ended: list[tuple[int, Decided]] = []
            with runs_lock:
                outcomes[verdict] = outcomes.get(verdict, 0) + 1
                if decided.decision.verdict is Verdict.PREEMPT:
                    open_runs.append((index, decided))
                while len(open_runs) > in_flight:
                    ended.append(open_runs.popleft())
            for done in ended:
                end(*done)

        decide(0)  # warm: the first read of the claims is a full one
        path_.holds.clear()
        latencies.clear()
        began = time.perf_counter()
        with ThreadPoolExecutor(max_workers=threads) as pool:
            list(pool.map(decide, range(1, decisions)))
        wall = time.perf_counter() - began
        behind, skipped = 0.0, 0
        if path_.inputs is not None:  # the recorder catches up before the ledger goes
            path_.inputs.wait()
            behind = time.perf_counter() - began - wall
            skipped = path_.inputs.skipped
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
    if record_inputs:
        print(
            f"inputs recorder:     {decisions - 1 - skipped} of the {decisions - 1} recorded, "
            f"{skipped} marked not recorded "
            f"(backlog full); {behind:.1f} s more to record the last decisions' inputs"
        )
    print(
        f"lock hold/decision:  median {statistics.median(holds):.1f} ms, "
        f"p99 {percentile(holds, 0.99):.1f} ms "
        f"({len(sizes)} acquisitions, {statistics.mean(sizes):.1f} decisions each on average)"
    )
    print(
        f"decision latency:    median {statistics.median(waits):.1f} ms, "
        f"p99 {percentile(waits, 0.99):.1f} ms (with the wait for the lock)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--decisions", type=int, default=300)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--in-flight", type=int, default=100)
    parser.add_argument("--batch", type=int, default=32, help="most decisions per acquisition")
    parser.add_argument(
        "--no-inputs",
        action="store_true",
        help="do not record each decision's inputs (recorded by default, as the worker does, "
        "by a thread of the same process after the commit)",
    )
    args = parser.parse_args()
    for batch in sorted({1, args.batch}):
        print(f"-- at most {batch} decision(s) per acquisition of the lock")
        run(args.nodes, args.decisions, args.threads, args.in_flight, batch, not args.no_inputs)


if __name__ == "__main__":
    main()

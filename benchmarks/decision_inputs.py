"""What recording a decision's inputs costs: new bytes per decision, and CPU time under the
decision lock and after it.

Run by hand (not in CI):
    .venv/bin/python benchmarks/decision_inputs.py [--nodes 5000] [--decisions 40] [--gangs]

Over the synthetic cluster of benchmarks/planner.py (30 pods per node, nearly full), a run
of decisions as the worker makes them: each decision is planned, its inputs captured (the
part under the decision lock) and written out for the shared layout by one `InputsPacker`
(the recorder's part: only what changed since the decision before is encoded), its new
packs and its root compressed as the ledger stores them. Between two decisions the cluster
moves as a preemption moves it: the decision's victims are deleted and its preemptor bound
(new objects, as the watch delivers them). The first decision stores every object; the
figures after it are what each later decision adds. The first and the last decisions are
rebuilt from what was stored (the packs read back as the ledger would) and planned again:
each must give the same decision. Times are CPU time (time.process_time), not wall clock:
the machine is shared. With --gangs, the cluster where 20% of the pods are in gangs, and
every fourth decision is a pending gang's.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import itertools
import os
import statistics
import sys
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.planner import snapshot_file
from benchmarks.synthetic_cluster import pending_gang, preemptor
from preemptctl.ledger.inputs import COMPRESSION_LEVEL
from preemptctl.preemption.decision import Decision, Strategy
from preemptctl.preemption.decode import decode_pod
from preemptctl.preemption.default_preemption import preempt
from preemptctl.preemption.group_decision import GroupDecision
from preemptctl.preemption.inputs_replay import compare, rebuild
from preemptctl.preemption.planner import plan_for, plan_group
from preemptctl.preemption.recorded_inputs import (
    Captured,
    capture,
    capture_group,
    decision_summary,
    group_decision_summary,
)
from preemptctl.preemption.shared_inputs import InputsPacker, resolve
from preemptctl.preemption.snapshot import ClusterSnapshot

KiB = 1024


class Packs:
    """The ledger's packs in memory, compressed as it stores them."""

    def __init__(self) -> None:
        self.stored: dict[int, bytes] = {}
        self.ids = itertools.count(1)

    def new_id(self) -> int:
        return next(self.ids)

    def load(self, ids: Iterable[int]) -> Iterator[tuple[int, Sequence[Any]]]:
        for pack_id in ids:
            yield pack_id, orjson.loads(zlib.decompress(self.stored[pack_id]))


def _snapshot(nodes: int, gangs: bool) -> ClusterSnapshot:
    path = snapshot_file(nodes, gangs=0.2 if gangs else 0.0)
    snapshot = ClusterSnapshot.from_list(orjson.loads(path.read_bytes()))
    snapshot.warm()
    gc.collect()
    gc.freeze()  # as the cluster view does once synced
    return snapshot


def _decide(snapshot: ClusterSnapshot, index: int, gangs: bool) -> tuple[Any, Captured, float]:
    """One decision and its capture, the capture's CPU milliseconds."""
    if gangs and index % 4 == 3:
        group, *members = pending_gang(f"pending-{index}", size=8)
        snapshot.apply("PodGroup", group)
        for member in members:
            snapshot.apply("Pod", member)
        key = f"{group['metadata']['namespace']}/{group['metadata']['name']}"
        decision: Any = plan_group(snapshot, key)
        began = time.process_time()
        captured = capture_group(snapshot, key, None, decision)
        return decision, captured, (time.process_time() - began) * 1000
    pod = decode_pod(preemptor(f"urgent-{index}"))
    snapshot.upsert_pod(pod)
    decision = preempt(snapshot, pod)
    began = time.process_time()
    captured = capture(snapshot, pod, Strategy.DEFAULT, None, decision)
    return decision, captured, (time.process_time() - began) * 1000


def _move_on(snapshot: ClusterSnapshot, decision: Decision | GroupDecision) -> None:
    """What the watch shows once the preemption is done: victims gone, preemptor bound."""
    for victim in decision.victims:
        snapshot.remove_pod(victim.uid)
    if isinstance(decision, GroupDecision):
        for key, node_name in decision.nominations.items():
            member = snapshot.pod_by_key(key)
            if member is not None:
                snapshot.upsert_pod(dataclasses.replace(member, node_name=node_name))
        return
    pod = snapshot.pods.get(decision.preemptor.uid)
    if pod is not None and decision.nominated_node:
        snapshot.upsert_pod(dataclasses.replace(pod, node_name=decision.nominated_node))


def _same_on_replay(packs: Packs, root: dict[str, Any], decision: Any) -> bool:
    rebuilt = rebuild(root, resolve(root, packs.load))
    if rebuilt.preemptor is None:
        again = group_decision_summary(plan_group(rebuilt.snapshot, rebuilt.pod_group))
        return compare(group_decision_summary(decision), again) == []
    replayed = plan_for(rebuilt.snapshot, rebuilt.preemptor, Strategy.DEFAULT, rebuilt.args)
    return compare(decision_summary(decision), decision_summary(replayed)) == []


def run(nodes: int, decisions: int, gangs: bool) -> None:
    began = time.perf_counter()
    snapshot = _snapshot(nodes, gangs)
    print(
        f"snapshot: {nodes} nodes, {len(snapshot.pods)} pods{' (20% in gangs)' if gangs else ''}, "
        f"built in {time.perf_counter() - began:.0f} s; load average {_load()}"
    )
    packs = Packs()
    packer = InputsPacker(packs.new_id)
    rows: list[dict[str, Any]] = []
    kept: list[tuple[dict[str, Any], Any]] = []
    for index in range(decisions):
        decision, captured, capture_ms = _decide(snapshot, index, gangs)
        began_cpu = time.process_time()
        shared = packer.shared(captured)
        packed_at = time.process_time()
        root = orjson.dumps(shared.document)
        row = zlib.compress(root, COMPRESSION_LEVEL)
        pack_bytes = 0
        for pack in shared.packs:
            body = zlib.compress(pack.body(), COMPRESSION_LEVEL)
            packs.stored[pack.id] = body
            pack_bytes += len(body)
        done = time.process_time()
        rows.append(
            {
                "capture_ms": capture_ms,
                "pack_ms": (packed_at - began_cpu) * 1000,
                "compress_ms": (done - packed_at) * 1000,
                "row": len(row),
                "packs": pack_bytes,
                "blobs": shared.blobs,
                "pods": captured.pod_count,
            }
        )
        if index in (0, decisions - 1):
            kept.append((orjson.loads(root), decision))
        _move_on(snapshot, decision)
    replays = [_same_on_replay(packs, root, decision) for root, decision in kept]
    _report(rows, replays)


def _report(rows: list[dict[str, Any]], replays: list[bool]) -> None:
    first, after = rows[0], rows[1:]

    def median(key: str) -> float:
        return statistics.median(row[key] for row in after)

    def p99(key: str) -> float:
        ordered = sorted(row[key] for row in after)
        return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]

    new = [row["row"] + row["packs"] for row in after]
    print(
        f"first decision:      {first['pods']} pods referenced, {first['blobs']} blobs stored, "
        f"{(first['row'] + first['packs']) / KiB:,.0f} KiB new (row {first['row'] / KiB:.1f} "
        f"KiB); recorder CPU {first['pack_ms']:.0f} ms + compress {first['compress_ms']:.0f} ms"
    )
    print(
        f"after it:            {len(after)} decisions, new bytes per decision: average "
        f"{statistics.mean(new) / KiB:.1f} KiB, max {max(new) / KiB:.1f} KiB (row median "
        f"{median('row') / KiB:.1f} KiB, new blobs median {median('blobs'):.0f})"
    )
    print(
        f"under the lock:      capture median {median('capture_ms'):.2f} ms, "
        f"p99 {p99('capture_ms'):.2f} ms (CPU)"
    )
    print(
        f"after the commit:    recorder median {median('pack_ms'):.1f} ms, p99 "
        f"{p99('pack_ms'):.1f} ms + compress median {median('compress_ms'):.1f} ms (CPU)"
    )
    print(
        f"replayed:            {'same decision' if all(replays) else 'DIFFERENT'} for the "
        f"first and the last decision, from what was stored"
    )


def _load() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg()) + f" on {os.cpu_count()} cores"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--decisions", type=int, default=40)
    parser.add_argument("--gangs", action="store_true", help="20%% of pods in gangs")
    given = parser.parse_args()
    run(given.nodes, given.decisions, given.gangs)


if __name__ == "__main__":
    main()

"""What recording a decision's inputs costs: bytes per decision, and CPU time to extract them.

Run by hand (not in CI):
    .venv/bin/python benchmarks/decision_inputs.py [--nodes 5000] [--decisions 8]

Over the synthetic cluster of benchmarks/planner.py (30 pods per node, nearly full; with
`--constrained`, 20% of the pods carry anti-affinity or spread rules and the preemptors take
turns with none, anti-affinity, a spread constraint and the guarded label), each decision is
planned, its inputs captured (the part under the decision lock), encoded to JSON and
compressed (the part after the commit), then rebuilt and planned again, which must give the
same decision. Times are CPU time (time.process_time), not wall clock: the machine is shared.
Pods' and nodes' JSON is reused between decisions through one `EncodedCache`, as the worker's
recorder does, and the snapshot is frozen out of the cyclic collector's way as the view is.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.synthetic_cluster import cluster, constrained_preemptor, preemptor
from preemptctl.ledger.inputs import compress
from preemptctl.preemption.decision import Strategy
from preemptctl.preemption.decode import decode_pod
from preemptctl.preemption.default_preemption import preempt
from preemptctl.preemption.inputs_replay import compare, rebuild
from preemptctl.preemption.recorded_inputs import EncodedCache, capture, decision_summary, dumps
from preemptctl.preemption.snapshot import ClusterSnapshot


def _snapshot(nodes: int, constrained: float) -> ClusterSnapshot:
    from benchmarks.planner import DATA

    suffix = f"-constrained-{round(constrained * 100)}" if constrained else ""
    path = DATA / f"cluster-{nodes}{suffix}.json"
    document: Any = (
        orjson.loads(path.read_bytes())
        if path.exists()
        else cluster(nodes=nodes, constrained=constrained)
    )
    snapshot = ClusterSnapshot.from_list(document)
    del document
    gc.collect()
    gc.freeze()  # as the cluster view does once synced
    return snapshot


def measure(snapshot: ClusterSnapshot, decisions: int, constrained: bool) -> dict[str, list[float]]:
    figures: dict[str, list[float]] = {
        "raw": [],
        "stored": [],
        "pods": [],
        "plan_ms": [],
        "capture_ms": [],
        "encode_ms": [],
        "compress_ms": [],
    }
    cache = EncodedCache()
    for index in range(decisions):
        made = constrained_preemptor(index) if constrained else preemptor(f"urgent-{index}")
        pod = decode_pod(made)
        snapshot.upsert_pod(pod)
        planning = time.process_time()
        decision = preempt(snapshot, pod)
        start = time.process_time()
        captured = capture(snapshot, pod, Strategy.DEFAULT, None, decision)
        captured_at = time.process_time()
        raw = dumps(captured, cache)
        encoded_at = time.process_time()
        stored = compress(raw)
        done = time.process_time()
        snapshot.remove_pod(pod.uid)
        figures["raw"].append(len(raw))
        figures["stored"].append(len(stored))
        figures["pods"].append(len(captured.pods))
        figures["plan_ms"].append((start - planning) * 1000)
        figures["capture_ms"].append((captured_at - start) * 1000)
        figures["encode_ms"].append((encoded_at - captured_at) * 1000)
        figures["compress_ms"].append((done - encoded_at) * 1000)
        again = rebuild(json.loads(zlib.decompress(stored)))
        replayed = preempt(again.snapshot, again.preemptor, again.args)
        differences = compare(again.recorded, decision_summary(replayed))
        assert not differences, (made["metadata"]["name"], differences)
    return figures


def report(title: str, figures: dict[str, list[float]]) -> None:
    def median(key: str) -> float:
        return statistics.median(figures[key])

    print(
        f"{title}: {len(figures['raw'])} decisions, same decision on replay; median "
        f"{median('raw') / 1024:.0f} KiB raw, {median('stored') / 1024:.0f} KiB stored "
        f"(max {max(figures['stored']) / 1024:.0f} KiB), {median('pods'):.0f} pods kept whole; "
        f"CPU: planning {median('plan_ms'):.0f} ms; capture {median('capture_ms'):.1f} ms "
        "(under the lock), encode "
        f"{median('encode_ms'):.0f} ms (first decision, nothing cached: "
        f"{figures['encode_ms'][0]:.0f} ms) + compress {median('compress_ms'):.0f} ms (after it)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--decisions", type=int, default=8)
    given = parser.parse_args()
    plain = _snapshot(given.nodes, 0.0)
    report(f"{given.nodes} nodes, plain", measure(plain, given.decisions, constrained=False))
    gc.unfreeze()
    del plain
    constrained = _snapshot(given.nodes, 0.2)
    report(
        f"{given.nodes} nodes, 20% constrained",
        measure(constrained, given.decisions, constrained=True),
    )


if __name__ == "__main__":
    main()

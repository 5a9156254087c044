"""Cluster view benchmark: initial sync of a large cluster, then sustained watch throughput.

    .venv/bin/python -m benchmarks.cluster_view [--nodes 5000] [--pods-per-node 30]
                                                [--updates 30000] [--rate 2000]

The emulator runs in a child process (so the figures are the view's own: its memory, its
decoding), seeded with `benchmarks.synthetic_cluster` (realistic pods: owner references,
env, probes, volumes, statuses). The parent lists and watches it through the real client,
exactly as the worker would, and prints:

- initial sync: seconds until the view is ready, objects/s, and the CPU time the view's
  process spent on it (the wall-clock time also counts the emulator's, on the same machine);
- memory: RSS after sync and peak RSS of the view's process;
- watch throughput: pod status updates made in the emulator at `--rate` per second, the rate
  the view applied them at, and how far behind it was when the updates stopped.

Not run in CI: it needs a few GB of memory and about a minute.
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import sys
import time
from multiprocessing.connection import Connection

from benchmarks.synthetic_cluster import cluster
from preemptctl.emulator import Emulator
from preemptctl.emulator.resources import PODS
from preemptctl.kube.client import connect
from preemptctl.kube.view import ClusterView

MERGE_PATCH = "application/merge-patch+json"


def rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def serve(nodes: int, pods_per_node: int, channel: Connection) -> None:
    """The child: an emulator holding the cluster, making updates when asked."""
    emulator = Emulator(bookmark_interval=5.0, history_limit=500_000)
    emulator.load(cluster(nodes=nodes, pods_per_node=pods_per_node))
    emulator.start()
    channel.send((str(emulator.kubeconfig_path), emulator.store.revision))
    pods = [
        (p["metadata"]["namespace"], p["metadata"]["name"]) for p in emulator.store.objects(PODS)
    ]
    while True:
        command = channel.recv()
        if command is None:
            break
        updates, rate = command
        started = time.perf_counter()
        for index in range(updates):
            namespace, name = pods[index % len(pods)]
            emulator.store.patch(
                PODS,
                namespace,
                name,
                MERGE_PATCH,
                {"metadata": {"annotations": {"bench/tick": str(index)}}},
            )
            due = started + (index + 1) / rate
            pause = due - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
        channel.send(time.perf_counter() - started)
    emulator.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods-per-node", type=int, default=30)
    parser.add_argument("--updates", type=int, default=30_000)
    parser.add_argument("--rate", type=float, default=2000.0)
    parser.add_argument("--page-size", type=int, default=500)
    args = parser.parse_args(argv)

    parent, child = multiprocessing.Pipe()
    process = multiprocessing.get_context("fork").Process(
        target=serve, args=(args.nodes, args.pods_per_node, child), daemon=True
    )
    seeding = time.perf_counter()
    process.start()
    kubeconfig, _ = parent.recv()
    print(
        f"emulator seeded in {time.perf_counter() - seeding:.1f}s "
        f"({args.nodes} nodes, {args.nodes * args.pods_per_node} pods)"
    )

    baseline = rss_mib()
    view = ClusterView(connect(kubeconfig, read_timeout=120), page_size=args.page_size)
    started, started_cpu = time.perf_counter(), time.process_time()
    view.start()
    if not view.wait_ready(600):
        print("the view did not become ready", file=sys.stderr)
        return 1
    synced = time.perf_counter() - started
    synced_cpu = time.process_time() - started_cpu
    with view.read() as snapshot:
        pods, nodes = len(snapshot.pods), len(snapshot.nodes())
    objects = pods + nodes
    print(
        f"initial sync: {synced:.1f}s for {nodes} nodes + {pods} pods "
        f"({objects / synced:,.0f} objects/s); the view's process spent {synced_cpu:.1f}s "
        "of CPU (listing, decoding, warming; the emulator runs apart)"
    )
    print(
        f"memory: RSS {rss_mib():.0f} MiB after sync (process baseline {baseline:.0f} MiB), "
        f"peak {peak_rss_mib():.0f} MiB"
    )

    applied_before = view.stats.applied
    parent.send((args.updates, args.rate))
    watch_started = time.perf_counter()
    producing = parent.recv()
    behind = args.updates - (view.stats.applied - applied_before)
    while view.stats.applied - applied_before < args.updates:
        if time.perf_counter() - watch_started > producing + 120:
            print("the view fell behind for good", file=sys.stderr)
            return 1
        time.sleep(0.005)
    consumed = time.perf_counter() - watch_started
    print(
        f"watch: {args.updates} pod updates produced at {args.updates / producing:,.0f}/s, "
        f"applied at {args.updates / consumed:,.0f}/s; {behind} behind when production "
        f"stopped, caught up {consumed - producing:.2f}s later"
    )
    print(f"peak RSS of the view's process: {peak_rss_mib():.0f} MiB")

    view.stop()
    parent.send(None)
    process.join(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

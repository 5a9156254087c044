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

With `--memory`, instead: the view's retained memory per pod, for the ordinary pods of
the initial sync and then for `--hostile` pods (issue 20, finding 2: a 250 KiB annotation
and 12,000 labels each) created in the emulator and applied by the view's watch; RSS of the
view's process after a full collection, with freed heap handed back to the OS (and with
`--heap`, the Python heap the view holds, traced: run it apart, tracing inflates the RSS).

    .venv/bin/python -m benchmarks.cluster_view --nodes 200 --memory --hostile 200 [--heap]

Not run in CI: it needs a few GB of memory and about a minute.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import multiprocessing
import resource
import sys
import time
import tracemalloc
from multiprocessing.connection import Connection

from benchmarks.synthetic_cluster import cluster, hostile_pod
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
    pods_nodes = sorted(
        {p["spec"].get("nodeName") or "" for p in emulator.store.objects(PODS)} - {""}
    )
    while True:
        command = channel.recv()
        if command is None:
            break
        if command[0] == "hostile":
            count = command[1]
            for index in range(count):
                made = hostile_pod(index, pods_nodes[index % len(pods_nodes)])
                emulator.store.create(PODS, "tenant", made)
            channel.send(count)
            continue
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


def retained_mib() -> float:
    """RSS once garbage is collected and freed heap handed back to the OS."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    return rss_mib()


def traced_kib() -> float:
    """The Python heap traced since the view started (0 when `--heap` is off)."""
    gc.collect()
    return tracemalloc.get_traced_memory()[0] / 1024


def memory_figures(view: ClusterView, parent: Connection, baseline: float, hostile: int) -> None:
    """Retained memory per pod: ordinary pods (the initial sync), then hostile ones; as the
    Python heap the view holds (traced since before the sync) and as the process's RSS (which
    also keeps what the allocator could not hand back)."""
    with view.read() as snapshot:
        ordinary = len(snapshot.pods)
    synced, heap = retained_mib(), traced_kib()
    tracing = tracemalloc.is_tracing()
    print(
        f"memory: {synced:.0f} MiB RSS retained after sync (process baseline {baseline:.0f} "
        f"MiB); per ordinary pod ({ordinary} pods): "
        + (f"{heap / ordinary:.1f} KiB of heap, " if tracing else "")
        + f"{(synced - baseline) * 1024 / ordinary:.1f} KiB of RSS"
    )
    applied = view.stats.applied
    parent.send(("hostile", hostile))
    parent.recv()
    deadline = time.perf_counter() + 600
    while view.stats.applied + view.stats.rejected - applied < hostile:
        if time.perf_counter() > deadline:
            print("the view did not apply the hostile pods", file=sys.stderr)
            return
        time.sleep(0.05)
    after, heap_after = retained_mib(), traced_kib()
    print(
        f"memory: {after:.0f} MiB RSS retained with {hostile} hostile pods; per hostile pod: "
        + (f"{(heap_after - heap) / hostile:.1f} KiB of heap, " if tracing else "")
        + f"{(after - synced) * 1024 / hostile:.1f} KiB of RSS"
    )
    with view.read() as snapshot:
        over = getattr(snapshot, "over_cap_pods", dict)()
        total = dict(getattr(snapshot, "over_cap_total", {}))
    print(f"pods over the caps now: {over}; pod objects read over a cap, ever: {total}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods-per-node", type=int, default=30)
    parser.add_argument("--updates", type=int, default=30_000)
    parser.add_argument("--rate", type=float, default=2000.0)
    parser.add_argument("--page-size", type=int, default=500)
    parser.add_argument("--memory", action="store_true", help="memory per pod, then stop")
    parser.add_argument("--hostile", type=int, default=200, help="hostile pods for --memory")
    parser.add_argument(
        "--heap",
        action="store_true",
        help="with --memory, also trace the Python heap (slower; tracing adds to the RSS)",
    )
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
    if args.memory and args.heap:
        tracemalloc.start()
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
    pod_list = view.reflectors["Pod"]
    print(
        f"initial sync: {synced:.1f}s for {nodes} nodes + {pods} pods "
        f"({objects / synced:,.0f} objects/s); the view's process spent {synced_cpu:.1f}s "
        "of CPU (listing, decoding, warming; the emulator runs apart)"
    )
    print(
        f"pod list pages: {pod_list.page_size.limit} pods a page at the end, "
        f"{pod_list.stats.pages_too_large} refused for their size"
    )
    print(
        f"memory: RSS {rss_mib():.0f} MiB after sync (process baseline {baseline:.0f} MiB), "
        f"peak {peak_rss_mib():.0f} MiB"
    )

    if args.memory:
        memory_figures(view, parent, baseline, args.hostile)
        view.stop()
        parent.send(None)
        process.join(10)
        return 0

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

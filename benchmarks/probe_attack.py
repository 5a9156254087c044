"""The kubelet's probes under a slow-client attack (issue 20, finding 3); prints its figures.

    .venv/bin/python -m benchmarks.probe_attack [--probes 10] [--period 1.0]

Each scenario starts the worker's probe server on 127.0.0.1 (its real `ProbeServer`, the
checks answering at once), lets slow-loris clients (`tests.support.slow_clients`: requests
dripped one byte at a time, never finished, reopened as soon as the server closes them; in a
process of their own, as an attacker's would be) settle for a second, then probes as the
kubelet does: a fresh connection, `GET /healthz` then `GET /readyz` in turn, every
`--period` seconds, each within the deployment's `timeoutSeconds` (3 s). It prints, per
scenario, how many probes were answered and the answer time (median and slowest), beside a
Prometheus-style `GET /metrics` on the metrics port. An unanswered probe counts as the
timeout.

Scenarios: none (the baseline); the issue's (16 clients, one address, a byte every 5 s, on
the metrics port); the same from 16 addresses; 256 clients from 64 addresses dripping a
byte every 0.5 s on the metrics port; and the same on the probe port itself.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from dataclasses import dataclass
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event

from preemptctl.worker.metrics import Metrics
from preemptctl.worker.probes import ProbeServer
from tests.support.slow_clients import Answer, SlowClients, probe

KUBELET_TIMEOUT = 3.0  # deploy/base/deployment.yaml: timeoutSeconds of every probe


@dataclass(frozen=True)
class Scenario:
    name: str
    clients: int
    addresses: int
    interval: float
    target: str  # "metrics" or "probes": the port the attacker drips into


SCENARIOS = (
    Scenario("no attack", 0, 1, 5.0, "metrics"),
    Scenario("issue 20: 16 clients, 1 address, 1 B/5 s, metrics port", 16, 1, 5.0, "metrics"),
    Scenario("16 clients, 16 addresses, 1 B/5 s, metrics port", 16, 16, 5.0, "metrics"),
    Scenario("256 clients, 64 addresses, 1 B/0.5 s, metrics port", 256, 64, 0.5, "metrics"),
    Scenario("256 clients, 64 addresses, 1 B/0.5 s, probe port", 256, 64, 0.5, "probes"),
)


def open_server() -> ProbeServer:
    server = ProbeServer("127.0.0.1", 0, 0, Metrics())  # port 0: free ports
    server.readiness = lambda: (True, "ready")
    server.start()
    return server


def ports(server: ProbeServer) -> dict[str, int]:
    """The port of each listener: where Prometheus scrapes, and where the kubelet probes."""
    return {"metrics": server.server_address[1], "probes": server.probe_address[1]}


def summary(answers: list[Answer]) -> str:
    answered = [a.seconds for a in answers if a.status == 200]
    times = answered + [KUBELET_TIMEOUT] * (len(answers) - len(answered))
    return (
        f"{len(answered)}/{len(answers)} answered, "
        f"median {statistics.median(times) * 1000:.1f} ms, "
        f"slowest {max(times) * 1000:.1f} ms"
    )


def attack(
    port: int,
    scenario: Scenario,
    sources: list[str],
    ready: Event,
    stop: Event,
    results: Queue[tuple[int, int]],
) -> None:
    """The attacker, in a process of its own (as it would be: it does not share the
    server's interpreter lock)."""
    with SlowClients(port, scenario.clients, interval=scenario.interval, sources=sources) as a:
        ready.set()
        stop.wait()
    results.put((a.opened, a.closed_by_server))


def run(scenario: Scenario, probes: int, period: float) -> None:
    server = open_server()
    try:
        where = ports(server)
        sources = [f"127.0.1.{i + 1}" for i in range(scenario.addresses)]
        spawn = multiprocessing.get_context("spawn")  # no fork of a process with threads
        ready, stop = spawn.Event(), spawn.Event()
        results: Queue[tuple[int, int]] = spawn.Queue()
        attacker = spawn.Process(
            target=attack,
            args=(where[scenario.target], scenario, sources, ready, stop, results),
            daemon=True,
        )
        attacker.start()
        try:
            ready.wait(60)
            time.sleep(1.0)
            kubelet: list[Answer] = []
            scrapes: list[Answer] = []
            for i in range(probes):
                began = time.monotonic()
                path = "/healthz" if i % 2 == 0 else "/readyz"
                kubelet.append(probe(where["probes"], path, timeout=KUBELET_TIMEOUT))
                scrapes.append(probe(where["metrics"], "/metrics", timeout=KUBELET_TIMEOUT))
                time.sleep(max(0.0, period - (time.monotonic() - began)))
        finally:
            stop.set()
            opened, closed = results.get(timeout=60)
            attacker.join(60)
        print(f"{scenario.name}")
        print(f"  kubelet probes: {summary(kubelet)}")
        print(f"  /metrics:       {summary(scrapes)}")
        print(f"  attack: {opened} connections opened, {closed} closed by the server")
        dropped = ", ".join(f"{why} {count}" for why, count in sorted(server.dropped.items()))
        print(f"  dropped by the server: {dropped or 'none'}")
    finally:
        server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=int, default=10, help="probes per scenario")
    parser.add_argument("--period", type=float, default=1.0, help="seconds between probes")
    args = parser.parse_args()
    for scenario in SCENARIOS:
        run(scenario, args.probes, args.period)


if __name__ == "__main__":
    main()

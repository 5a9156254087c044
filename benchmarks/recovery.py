"""How fast preemptions move again after a crash; prints its figures.

    .venv/bin/python -m benchmarks.recovery [--rounds 3] [--outage 3]

Goals (issues 11 and 29): after a worker is SIGKILLed, its preemptions move again on another
worker within 5 s (its workflow task times out after 4 s, `WORKFLOW_TASK_TIMEOUT`); after
Temporal or Postgres comes back, within 5 s.

The rig is the fault-injection suite's (`tests.support.fault_rig`): the simulated cluster,
a Postgres ledger behind a TCP proxy, a persistent Temporal dev server and two `preemptctl
worker` processes with their default timeouts. Each round adds one preemptor and injects one
fault at the worst moment: the instant the API server has carried out its first victim's
DELETE, before the answer leaves.

- worker kill: the worker that sent that DELETE (found by its connection's port) is
  SIGKILLed; the clock starts at the kill. Its activity's result is lost, so the other
  worker has to notice and retry.
- Temporal restart: the dev server is SIGKILLed and started again `--outage` seconds later
  on its SQLite file; the clock starts when it serves again.
- database outage: the ledger's proxy is cut (open connections reset) and restored
  `--outage` seconds later; the clock starts at the restore.

"Moving again" is the preemption's next step on record: the first ledger row appended after
the clock started (sampled every 20 ms), or its workflow's close, whichever comes first. With
the one runbook (issue 29) a run appends its decision and then its end, nothing between: its
victims' steps are local activities, which go on while Temporal is down, so a run hit by a
Temporal restart may have recorded its end before the server is back, and its close is what
is left. The first
pod write that reaches the API server after the clock started is shown beside it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import create_engine, func, select

from preemptctl.emulator import Request
from preemptctl.ledger.models import events as events_table
from tests.support.fault_rig import Rig, WorkerProcess, crowded_cluster, fault_rig, preemptor
from tests.support.temporal_server import PersistentTemporal

GOALS = {"worker kill": 5.0, "Temporal restart": 5.0, "database outage": 5.0}
POD_WRITES = frozenset({("delete", "pods"), ("patch", "pods"), ("patch", "pods/status")})


@dataclass(frozen=True)
class Sample:
    ledger_seconds: float | None  # None: nothing moved before the round gave up
    api_seconds: float | None
    closed_seconds: float | None = None  # the run's workflow closed (None: not seen)

    @property
    def moved_seconds(self) -> float | None:
        """The preemption's next step on record, the ledger's or Temporal's (a run whose
        steps all ran during the outage, as local activities, has only its close left)."""
        steps = [s for s in (self.ledger_seconds, self.closed_seconds) if s is not None]
        return min(steps) if steps else None


def parent_pid(pid: int | None) -> int | None:
    """`pid`'s parent (from /proc), None when it is gone or unknown."""
    if pid is None:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def sender_pid(port: int, server_port: int) -> int | None:
    """The process owning the TCP socket from local `port` to `server_port` (from /proc; a
    port number alone is not enough, Linux reuses one for other destinations)."""
    inode = None
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local = int(fields[1].rsplit(":", 1)[1], 16)
            remote = int(fields[2].rsplit(":", 1)[1], 16)
            if local == port and remote == server_port and fields[9] != "0":
                inode = fields[9]
                break
        if inode:
            break
    if inode is None:
        return None
    wanted = f"socket:[{inode}]"
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            links = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in links:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == wanted:
                    return int(pid)
            except OSError:
                continue
    return None


def client_port_of_current_request() -> int | None:
    """The peer port of the request the emulator's handler thread is serving now (the
    request log's append runs in that thread, inside the handler)."""
    frame = sys._getframe(1)
    while frame is not None:
        handler = frame.f_locals.get("self")
        address = getattr(handler, "client_address", None)
        if isinstance(address, tuple) and len(address) >= 2:
            return int(address[1])
        frame = frame.f_back  # type: ignore[assignment]
    return None


class LedgerClock:
    """When the ledger's row count last grew, sampled every 20 ms in a thread of its own."""

    def __init__(self, url: str) -> None:
        self._engine = create_engine(url)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._count = 0
        self._grew: list[float] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            try:
                with self._engine.connect() as connection:
                    count = connection.execute(select(func.count()).select_from(events_table))
                    value = int(count.scalar_one())
            except Exception:
                continue
            with self._lock:
                if value > self._count:
                    self._grew.append(time.time())
                self._count = value

    def first_growth_after(self, moment: float) -> float | None:
        with self._lock:
            return next((t for t in self._grew if t > moment), None)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._engine.dispose()


def first_pod_write_after(rig: Rig, moment: float) -> float | None:
    return next(
        (
            r.received_at
            for r in rig.requests
            if r.received_at > moment and (r.verb, r.resource) in POD_WRITES
        ),
        None,
    )


def at_first_delete(rig: Rig, act: Callable[[Request], None]) -> threading.Event:
    """Run `act` inside the emulator the first time a victim's DELETE succeeds this round."""
    fired = threading.Event()
    once = threading.Lock()

    def on_deleted(request: Request) -> None:
        if not once.acquire(blocking=False):
            return
        act(request)
        fired.set()

    rig.requests.on_deleted = on_deleted
    return fired


def one_round(
    rig: Rig,
    clock: LedgerClock,
    number: int,
    fault: str,
    outage: float,
    temporal: PersistentTemporal,
) -> Sample:
    started: list[float] = []
    killed: list[WorkerProcess] = []

    def kill_sender(_request: Request) -> None:
        port = client_port_of_current_request()
        server_port = int(rig.cluster.base_url.rsplit(":", 1)[1])
        pid = sender_pid(port, server_port) if port is not None else None
        # The DELETE goes out from a workflow process of the replica: kill the replica (its
        # workflow processes die with it).
        senders = {pid, parent_pid(pid)} - {None}
        for worker in rig.workers:
            if worker.pid in senders:
                worker.kill()
                killed.append(worker)
        started.append(time.time())

    def stop_temporal(_request: Request) -> None:
        temporal.kill()

    def cut_database(_request: Request) -> None:
        rig.proxy.cut()

    act = {"worker kill": kill_sender, "Temporal restart": stop_temporal}.get(fault, cut_database)
    fired = at_first_delete(rig, act)
    rig.add(preemptor(f"urgent-{number}"))
    if not fired.wait(60):
        raise SystemExit(f"round {number}: no victim was deleted within 60 s")
    if fault == "Temporal restart":
        time.sleep(outage)
        temporal.start()
        started.append(time.time())
    elif fault == "database outage":
        time.sleep(outage)
        rig.proxy.restore()
        started.append(time.time())
    if fault == "worker kill" and not killed:
        raise SystemExit(f"round {number}: could not tell which worker sent the DELETE")
    closed = closed_after(rig, timeout=120)
    rig.settle(timeout=120)
    rig.requests.on_deleted = None
    for worker in killed:
        worker.start()
        worker.wait_ready()
    moment = started[0]
    ledger = clock.first_growth_after(moment)
    api = first_pod_write_after(rig, moment)
    return Sample(
        None if ledger is None else ledger - moment,
        None if api is None else api - moment,
        None if closed is None else closed - moment,
    )


def closed_after(rig: Rig, timeout: float) -> float | None:
    """When no run is open any more (polled every 50 ms); None if not within `timeout`."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if not rig.running_workflows():
                return time.time()
        except Exception:  # Temporal restarting
            pass
        time.sleep(0.05)
    return None


def seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:5.2f} s"


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summary(fault: str, samples: list[Sample]) -> str:
    moved = [s.moved_seconds for s in samples if s.moved_seconds is not None]
    writes = [s.api_seconds for s in samples if s.api_seconds is not None]
    missing = len(samples) - len(moved)
    worst = max(moved) if moved else None
    verdict = "meets" if worst is not None and not missing and worst <= GOALS[fault] else "MISSES"
    return (
        f"{fault:<17} moving again after median {seconds(median(moved))}, max "
        f"{seconds(worst)} (goal <= {GOALS[fault]:g} s: {verdict}); first pod write after "
        f"median {seconds(median(writes))}; samples {', '.join(f'{s:.2f}' for s in moved)}"
        + (f"; {missing} round(s) never moved" if missing else "")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds per fault")
    parser.add_argument(
        "--outage", type=float, default=3.0, help="seconds Temporal or Postgres stays down"
    )
    args = parser.parse_args()
    faults = list(GOALS)
    preemptions = args.rounds * len(faults)
    nodes = (preemptions + 1) // 2
    with (
        tempfile.TemporaryDirectory(prefix="preemptctl-recovery-") as work,
        PersistentTemporal(Path(work) / "temporal.db") as temporal,
        fault_rig(temporal, Path(work), crowded_cluster(nodes, 0)) as rig,
    ):
        clock = LedgerClock(rig.database_url)
        try:
            results: dict[str, list[Sample]] = {fault: [] for fault in faults}
            number = 0
            for _ in range(args.rounds):
                for fault in faults:
                    sample = one_round(rig, clock, number, fault, args.outage, temporal)
                    results[fault].append(sample)
                    print(
                        f"round {number:>2} {fault:<17} ledger {seconds(sample.ledger_seconds)}, "
                        f"closed {seconds(sample.closed_seconds)}, "
                        f"API {seconds(sample.api_seconds)}",
                        flush=True,
                    )
                    number += 1
            unbound = rig.unbound_preemptors()
        finally:
            clock.close()
    print()
    print(
        f"recovery over {args.rounds} round(s) per fault, outages of {args.outage:g} s, "
        f"two workers, default timeouts"
    )
    for fault in faults:
        print(summary(fault, results[fault]))
    if unbound:
        print(f"left unbound: {', '.join(unbound)}")


if __name__ == "__main__":
    main()

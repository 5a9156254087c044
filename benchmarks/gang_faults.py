"""Gangs under faults: how long each pending gang waits to be bound; prints its figures.

    .venv/bin/python -m benchmarks.gang_faults [--runs 3] [--cut 25] [--share 0.14]

Run by hand, not in CI. Goal (issue 25, "Done when"): every gang bound within 120 s of its
wave, and no DELETE answered 2xx twice.

The rig is the fault-injection suite's (`tests.support.fault_rig`): the simulated cluster
(its scheduler binds a gang all or nothing), a Postgres ledger behind a TCP proxy, a
persistent Temporal dev server and two `preemptctl worker` processes, their trigger loops on.
Each run, on a fresh cluster and ledger:

- 32 nodes of 8 CPU, full of lower work: four 2-CPU pods each, 36 of them in 12 gangs of
  three (`disruptionMode: all`, each on three nodes, priority 3), the rest single pods
  (priorities 1, 2 and 4);
- 10 pending gangs of four 4-CPU members (minCount 4, priority 2000), one of which cannot fit
  (its members need 12 CPU), and 6 pending 4-CPU pods (priority 1000), arriving in 5 waves
  `--wave-gap` seconds apart;
- faults: ~14 % of the workers' API requests answered 500, 503, 429 or dropped; every
  worker SIGKILLed the moment the API server has carried out the 2nd, 10th and 25th DELETE
  (before the answer leaves), and one at random twice; each killed worker started again;
  Temporal SIGKILLed after the second wave and started again 5 s later; the ledger's
  Postgres cut off (connections reset, listener closed) after the fourth wave, for `--cut`
  seconds.

Printed per run: each gang's seconds from its wave to bound (all members bound; sampled every
0.25 s), the slowest, each pod's slowest, DELETEs answered 2xx twice (must be 0), the group
runs that ended `no-candidate` (the gang that cannot fit apart), and every invariant of the
fault suite's audit, gang ones included, held or not.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from tests.faults.test_worker_kills import kill_after_deletes
from tests.support.emulator import as_list, node, pod
from tests.support.fault_rig import (
    INVARIANTS,
    PREEMPTOR_PRIORITY,
    Audit,
    Rig,
    fault_rig,
    gang_members,
    pod_group,
    preemptor,
)
from tests.support.temporal_server import PersistentTemporal

GOAL_SECONDS = 120.0
NODES = 32
NODE_CPU = "8"
VICTIM_GANGS = 12
PENDING_GANGS = 10
PENDING_PODS = 6
WAVES = 5
GANG_PRIORITY = 2000
KILL_AT_DELETES = (2, 10, 25)
RANDOM_KILLS = 2
TEMPORAL_DOWN_SECONDS = 5.0
CANNOT_FIT = "gang-0"  # the first wave's first gang


def crowded_with_gangs() -> dict[str, Any]:
    """32 full nodes: slot 0 of every node and slot 1 of the first four hold the 12 victim
    gangs' members (gang g on three consecutive nodes), every other slot a single pod."""
    objects: list[dict[str, Any]] = [node(f"node-{n}", cpu=NODE_CPU) for n in range(NODES)]
    slots = [(n, 0) for n in range(NODES)] + [(n, 1) for n in range(4)]
    taken: set[tuple[int, int]] = set()
    for g in range(VICTIM_GANGS):
        group = pod_group(f"work-{g}", min_count=3, priority=3, disruption_all=True)
        places = slots[3 * g : 3 * g + 3]
        taken.update(places)
        objects += [group, *gang_members(group, cpu="2", nodes=[f"node-{n}" for n, _ in places])]
    for n in range(NODES):
        for j in range(4):
            if (n, j) not in taken:
                objects.append(
                    pod(
                        f"batch-{n}-{j}",
                        node_name=f"node-{n}",
                        priority=(1, 2, 4, 4)[j],
                        cpu="2",
                        grace_period=1,
                    )
                )
    return as_list(*objects)


@dataclass
class Arrival:
    """A pending gang or pod, when its wave came, and when it was first seen bound."""

    name: str
    members: list[str]  # pod keys
    min_count: int
    wave: int
    arrived: float
    bound: float | None = None


@dataclass
class RunFigures:
    gangs: list[Arrival] = field(default_factory=list)
    pods: list[Arrival] = field(default_factory=list)
    audit: Audit | None = None
    no_candidate_runs: int = 0
    seconds: float = 0.0
    stuck: list[str] = field(default_factory=list)  # each run left open, with its history


def stuck_workflows(rig: Rig) -> list[str]:
    """Each workflow still running at the end, with its last history events: where it
    waits (a workflow task never completed, a timer, a local activity marker missing)."""

    async def ask() -> list[str]:
        client = await Client.connect(rig.temporal.address)
        told = []
        query = f'TaskQueue = "{rig.task_queue}" AND ExecutionStatus = "Running"'
        async for execution in client.list_workflows(query):
            handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
            history = await handle.fetch_history()
            kinds = [
                f"{e.event_id}:{EventType.Name(e.event_type).removeprefix('EVENT_TYPE_')}"
                for e in history.events
            ]
            told.append(f"{execution.id} ({len(kinds)} events): ... {' '.join(kinds[-8:])}")
        return told

    try:
        return asyncio.run(ask())
    except Exception as error:  # the report says it, the figures stand
        return [f"cannot read the open runs: {error}"]


def add_wave(rig: Rig, wave: int, figures: RunFigures) -> None:
    gangs_per_wave = PENDING_GANGS // WAVES
    now = time.monotonic()
    for g in range(wave * gangs_per_wave, (wave + 1) * gangs_per_wave):
        name = f"gang-{g}"
        cannot_fit = name == CANNOT_FIT
        group = pod_group(name, min_count=4, priority=GANG_PRIORITY, cannot_fit=cannot_fit)
        members = gang_members(group, cpu="12" if cannot_fit else "4", nodes=[None] * 4)
        rig.add_gang(group, members)
        if not cannot_fit:
            keys = [f"default/{m['metadata']['name']}" for m in members]
            figures.gangs.append(Arrival(name, keys, 4, wave, now))
    pods_per_wave = [2, 1, 1, 1, 1][wave]
    first = sum([2, 1, 1, 1, 1][:wave])
    for k in range(first, first + pods_per_wave):
        rig.add(preemptor_pod(f"urgent-{k}"))
        figures.pods.append(Arrival(f"urgent-{k}", [f"default/urgent-{k}"], 1, wave, now))


def preemptor_pod(name: str) -> dict[str, Any]:
    made = preemptor(name)
    made["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "4"
    assert made["spec"]["priority"] == PREEMPTOR_PRIORITY
    return made


def watch_bindings(rig: Rig, figures: RunFigures, stop: threading.Event) -> None:
    """Note when each arrival is first seen bound (every 0.25 s)."""
    while not stop.wait(0.25):
        for arrival in [*figures.gangs, *figures.pods]:
            if arrival.bound is not None:
                continue
            bound = sum(
                1
                for key in arrival.members
                if ((rig.cluster.emulator.pod(key) or {}).get("spec") or {}).get("nodeName")
            )
            if bound >= arrival.min_count:
                arrival.bound = time.monotonic()


def keep_running(rig: Rig, killed: threading.Event, stop: threading.Event) -> None:
    """Start every worker again after each kill at a DELETE, and any worker found not
    running (killed at random, or exited by itself: its log says why)."""
    while not stop.is_set():
        killed.wait(0.5)
        killed.clear()
        for worker in rig.workers:
            if worker.pid is None and not stop.is_set():
                try:
                    rig.ensure_running(worker)
                except AssertionError as error:  # killed again while starting: next round
                    print(f"  ({error})", flush=True)


def random_kills(rig: Rig, kills: int, stop: threading.Event) -> None:
    """SIGKILL a random worker after a random pause, `kills` times (`keep_running` starts
    it again)."""
    for _ in range(kills):
        if stop.wait(rig.rng.uniform(3.0, 20.0)):
            return
        rig.rng.choice(rig.workers).kill()


def one_run(
    temporal: PersistentTemporal, work: Path, share: float, cut: float, wave_gap: float
) -> RunFigures:
    figures = RunFigures()
    killed = threading.Event()
    stop = threading.Event()
    started = time.monotonic()
    restarts_before = temporal.restarts  # the server outlives the runs: count this run's
    with fault_rig(
        temporal,
        work,
        crowded_with_gangs(),
        share=share,
        arm=lambda rig: kill_after_deletes(rig, KILL_AT_DELETES, killed),
    ) as rig:
        threads = [
            threading.Thread(target=watch_bindings, args=(rig, figures, stop), daemon=True),
            threading.Thread(target=keep_running, args=(rig, killed, stop), daemon=True),
            threading.Thread(target=random_kills, args=(rig, RANDOM_KILLS, stop), daemon=True),
        ]
        for thread in threads:
            thread.start()
        try:
            for wave in range(WAVES):
                add_wave(rig, wave, figures)
                if wave == 1:
                    temporal.kill()
                    time.sleep(TEMPORAL_DOWN_SECONDS)
                    temporal.restart()
                    time.sleep(max(0.0, wave_gap - TEMPORAL_DOWN_SECONDS))
                elif wave == 3:
                    rig.proxy.drop_connections()
                    rig.proxy.cut()
                    time.sleep(cut)
                    rig.proxy.restore()
                elif wave < WAVES - 1:
                    time.sleep(wave_gap)
            rig.settle(timeout=300.0)
            rig.faults.enabled.clear()
            time.sleep(1.0)  # a last binding sample
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=120)
        figures.audit = rig.audit()
        figures.audit.injected["temporal restarts"] -= restarts_before
        figures.stuck = stuck_workflows(rig)
        cannot_fit = rig.gangs[f"default/{CANNOT_FIT}"].uid
        figures.no_candidate_runs = sum(
            1
            for row in rig.ledger_rows()
            if row["kind"] == "no_candidate" and row["preemptor_uid"] != cannot_fit
            if row["preemptor_uid"] in {gang.uid for gang in rig.gangs.values()}
        )
    figures.seconds = time.monotonic() - started
    return figures


def waited(arrival: Arrival) -> float | None:
    return None if arrival.bound is None else arrival.bound - arrival.arrived


def report(number: int, figures: RunFigures) -> bool:
    """Print one run's figures; whether it met the goal."""
    audit = figures.audit
    assert audit is not None
    gang_waits = [waited(a) for a in figures.gangs]
    pod_waits = [waited(a) for a in figures.pods]
    slowest = max((w for w in gang_waits if w is not None), default=None)
    slowest_pod = max((w for w in pod_waits if w is not None), default=None)
    never = [a.name for a in figures.gangs if a.bound is None]
    doubles = len(audit.of("no victim UID deleted twice"))
    broken = [i for i in INVARIANTS if audit.of(i)]
    print(f"run {number} (seed {audit.seed}, {figures.seconds:.0f} s)")
    for arrival, w in zip(figures.gangs, gang_waits, strict=True):
        print(f"  {arrival.name:<8} wave {arrival.wave}: bound after {fmt(w)}")
    print(f"  slowest gang {fmt(slowest)}; slowest pod {fmt(slowest_pod)}")
    print(f"  DELETEs answered 2xx twice: {doubles}; deletes {audit.deletes}, runs {audit.runs}")
    no_candidate = figures.no_candidate_runs
    print(f"  group runs ended no-candidate (the gang that cannot fit apart): {no_candidate}")
    print(f"  injected: {', '.join(f'{k} {v}' for k, v in sorted(audit.injected.items()))}")
    if broken:
        print(f"  invariants BROKEN: {', '.join(broken)}")
        for invariant in broken:
            for line in audit.of(invariant)[:5]:
                print(f"    {invariant}: {line}")
    else:
        print(f"  invariants held: all {len(INVARIANTS)}")
    for line in figures.stuck:
        print(f"  still open: {line}")
    met = not never and slowest is not None and slowest <= GOAL_SECONDS and not doubles
    return met and not broken


def fmt(value: float | None) -> str:
    return "never" if value is None else f"{value:5.1f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--cut", type=float, default=25.0, help="seconds Postgres is cut off")
    parser.add_argument("--share", type=float, default=0.14, help="share of API faults")
    parser.add_argument("--wave-gap", type=float, default=10.0, help="seconds between waves")
    parser.add_argument("--keep", action="store_true", help="keep the workers' logs (printed)")
    args = parser.parse_args()
    results: list[tuple[bool, float | None]] = []
    with contextlib.ExitStack() as stack:
        prefix = "preemptctl-gang-faults-"
        work = (
            tempfile.mkdtemp(prefix=prefix)
            if args.keep
            else stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix))
        )
        if args.keep:
            print(f"workers' logs under {work}")
        temporal = stack.enter_context(PersistentTemporal(Path(work) / "temporal.db"))
        for number in range(args.runs):
            run_dir = Path(work) / f"run-{number}"
            run_dir.mkdir()
            figures = one_run(temporal, run_dir, args.share, args.cut, args.wave_gap)
            met = report(number, figures)
            slowest = max((w for a in figures.gangs if (w := waited(a)) is not None), default=None)
            results.append((met, slowest))
    print()
    slowest_all = [s for _, s in results if s is not None]
    print(
        f"{len(results)} run(s): goal (every gang bound within {GOAL_SECONDS:g} s of its wave, "
        f"no double delete, every invariant) met in {sum(1 for m, _ in results if m)}; slowest "
        f"gang per run: {', '.join(fmt(s).strip() for s in slowest_all)}"
    )


if __name__ == "__main__":
    main()

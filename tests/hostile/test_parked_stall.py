"""Parked pods do not stall the start of other preemptions (issue 20, finding 7).

Scenario: one acting `preemptctl worker` that reaches Temporal through a slow line (every
RPC, a workflow's describe and signal among them, `LATENCY` seconds late, as from a distant
or overloaded frontend). A full node of four 1-CPU batch pods. A tenant has created
`PARKED` pods in two groups, each asking for a DRA resource claim (the planner refuses such
a pod: Unsupported, not retryable), so every one of them is parked; group A asks for 100
CPUs, group B for 100 CPUs in a zone that does not exist.

1. The slow line starts. A 10,000-CPU node appears and every pod of group A is bound to it
   at once, as a scheduler binds them (a Binding each); the trigger then tells each one's
   preemption it was bound, by a signal. At that moment a preemptor for the full node
   arrives.
2. At the trigger's periodic resync (30 s after it started, which its log's `worker ready`
   line dates) it re-checks each parked pod of group B by describing its workflow; a second
   preemptor arrives just after that resync begins.

Judged from outside the worker (Temporal's record of each preemption's start, /parked):
- every pod of both groups was parked (else nothing could stall);
- each preemptor's preemption starts within `START_BOUND` seconds of its creation: the
  time of its own start (a describe and a start, `LATENCY` each) and some slack, not the
  `PARKED` x `LATENCY` seconds the parked pods' RPCs take one after another.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest
from temporalio.client import Client

from preemptctl.emulator.binding import bind
from tests.support.emulator import node, pod
from tests.support.fault_rig import PREEMPTOR_PRIORITY, crowded_cluster
from tests.support.hostile_rig import HostileRig, hostile_rig
from tests.support.slow_line import SlowLine
from tests.support.temporal_server import PersistentTemporal
from tests.support.tenant_objects import ZONE, zoned_preemptor

PARKED = 12  # per group
LATENCY = 0.6  # seconds added to each RPC on the slow line
START_BOUND = 4.0  # seconds from a preemptor's creation to its preemption's start
RESYNC_SECONDS = 30.0  # worker.trigger.TriggerLoop's resync period (not a setting)
INTO_THE_RESYNC = 1.5  # the second preemptor arrives this long after the resync begins
PARK_SECONDS = 30.0
START_SECONDS = 30.0  # how long a start is waited for before judging what there is


def parked_pod(name: str, *, zone: str | None = None) -> dict[str, Any]:
    """A tenant's pod that asks for a DRA resource claim and more CPU than any node has
    (in `zone`, when given)."""
    obj = pod(name, "tenant", priority=PREEMPTOR_PRIORITY, cpu="100")
    if zone is not None:
        obj["spec"]["nodeSelector"] = {ZONE: zone}
    obj["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}]
    return obj


def scenario() -> dict[str, Any]:
    cluster = crowded_cluster(1, 0)
    cluster["items"][0]["metadata"]["labels"][ZONE] = "full"
    cluster["items"] += [parked_pod(f"parked-a-{k}") for k in range(PARKED)]
    cluster["items"] += [parked_pod(f"parked-b-{k}", zone="nowhere") for k in range(PARKED)]
    return cluster


def parked(rig: HostileRig) -> list[str]:
    """The worker's /parked, as an operator reads it."""
    url = f"http://127.0.0.1:{rig.worker.metrics_port}/parked"
    with urllib.request.urlopen(url, timeout=5) as answer:
        return sorted(str(entry["pod"]) for entry in json.loads(answer.read()))


def logged_at(rig: HostileRig, text: str) -> float | None:
    """When the worker first logged a line containing `text` (epoch seconds, from the
    line's UTC timestamp); None when it has not."""
    for line in rig.worker.log_text().splitlines():
        if text in line:
            stamp = line.split(" ", 1)[0].replace("Z", "+00:00")
            return datetime.fromisoformat(stamp).timestamp()
    return None


def bind_all(rig: HostileRig, names: list[str], node_name: str) -> None:
    """Bind each tenant pod to `node_name` as a scheduler does: a Binding pinned to its UID."""
    for name in names:
        current = rig.cluster.emulator.pod(f"tenant/{name}")
        assert current is not None, name
        bind(
            rig.cluster.store,
            "tenant",
            name,
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {
                    "name": name,
                    "namespace": "tenant",
                    "uid": current["metadata"]["uid"],
                },
                "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
            },
        )


def started_at(rig: HostileRig, name: str) -> datetime | None:
    """When Temporal started the preemption of default/NAME (asked directly, not through
    the slow line); None when it has not started."""

    async def ask() -> datetime | None:
        client = await Client.connect(rig.temporal.address)
        query = f'TaskQueue = "{rig.task_queue}" AND PreemptorPod = "default/{name}"'
        async for execution in client.list_workflows(query):
            return execution.start_time
        return None

    return asyncio.run(ask())


def start_latency(rig: HostileRig, name: str, created: float) -> float | None:
    """Seconds from `created` (epoch) to the start of NAME's preemption, waited for at most
    `START_SECONDS`; None when it did not start by then."""
    moment: list[datetime] = []

    def found() -> bool:
        start = started_at(rig, name)
        if start is not None:
            moment.append(start)
        return start is not None

    rig.wait_bounded(found, START_SECONDS)
    return moment[0].timestamp() - created if moment else None


@dataclass
class Outcome:
    parked: list[str]
    after_binding: float | None  # seconds to the first preemptor's start
    during_resync: float | None  # seconds to the second preemptor's start


@pytest.fixture(scope="module")
def outcome(
    persistent_temporal: PersistentTemporal, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Outcome]:
    work = tmp_path_factory.mktemp("parked-stall")
    host, _, port = persistent_temporal.address.rpartition(":")
    with (
        SlowLine(host, int(port)) as line,
        hostile_rig(persistent_temporal, work, scenario(), temporal_proxy=line) as rig,
    ):
        expected = sorted(
            f"tenant/parked-{group}-{k}" for group in ("a", "b") for k in range(PARKED)
        )
        rig.wait_bounded(lambda: parked(rig) == expected, PARK_SECONDS)
        parked_now = parked(rig)
        line.delay = LATENCY
        rig.add(node("big", cpu="10000", pods="1000"))
        bind_all(rig, [f"parked-a-{k}" for k in range(PARKED)], "big")
        created = time.time()
        rig.add(zoned_preemptor("urgent-1", "full"))
        after_binding = start_latency(rig, "urgent-1", created)
        trigger_started = logged_at(rig, "worker ready:")
        assert trigger_started is not None, "the worker never logged that it was ready"
        pause = trigger_started + RESYNC_SECONDS + INTO_THE_RESYNC - time.time()
        time.sleep(max(0.0, pause))  # to the resync's time, not an assertion about time
        created = time.time()
        rig.add(zoned_preemptor("urgent-2", "full"))
        during_resync = start_latency(rig, "urgent-2", created)
        line.delay = 0.0
        yield Outcome(parked_now, after_binding, during_resync)


def test_every_tenant_pod_was_parked(outcome: Outcome) -> None:
    assert len(outcome.parked) == 2 * PARKED, outcome.parked


def test_a_preemption_starts_promptly_while_parked_pods_are_bound(outcome: Outcome) -> None:
    assert outcome.after_binding is not None and outcome.after_binding <= START_BOUND, (
        f"started after {outcome.after_binding}s"
    )


def test_a_preemption_starts_promptly_while_parked_pods_are_rechecked(outcome: Outcome) -> None:
    assert outcome.during_resync is not None and outcome.during_resync <= START_BOUND, (
        f"started after {outcome.during_resync}s"
    )

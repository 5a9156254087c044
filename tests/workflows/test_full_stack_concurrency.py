"""Concurrent preemptions never claim the same victim or the same freed capacity.

Scenario: three 4-cpu nodes, each full of four 1-cpu priority-100 pods; six 2-cpu
preemptors start at once. Then:
- no victim appears in two decisions;
- once every preemptor is bound, no node holds more than it can;
- the preemptions took exactly the victims a serial run (one decision after another, each
  applied before the next, in the order they were decided) takes.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from sqlalchemy import select

from preemptctl.emulator.resources import NODES, PODS
from preemptctl.ledger.models import events as events_table
from preemptctl.preemption.planner import plan
from preemptctl.preemption.snapshot import ClusterSnapshot
from preemptctl.workflows.preemption import PreemptionWorkflow
from tests.support.emulator import as_list, node, pod
from tests.workflows.harness import Stack, bind_when_room, running_stack

pytestmark = pytest.mark.asyncio(loop_scope="session")

NODE_NAMES = ["node-a", "node-b", "node-c"]
PREEMPTORS = [f"default/urgent-{i}" for i in range(6)]


def crowded_cluster() -> dict:
    items = [node(name, cpu="4") for name in NODE_NAMES]
    for name in NODE_NAMES:
        items += [pod(f"{name}-batch-{j}", node_name=name, priority=100, cpu="1") for j in range(4)]
    items += [pod(key.split("/")[1], priority=1000, cpu="2") for key in PREEMPTORS]
    return as_list(*items)


async def schedule_when_preempted_for(stack: Stack, handle, key: str) -> None:
    """The stand-in scheduler for one preemptor: bind it once its victims are out."""
    while True:
        state = await handle.query(PreemptionWorkflow.state)
        if state.outcome is not None and not state.victims:
            return
        if state.node and state.victims and state.phase in ("preempting", "waiting"):
            victims = [v.pod.key for v in state.victims]
            await bind_when_room(stack, key, state.node, victims)
            return
        await asyncio.sleep(0.05)


def decisions_in_order(stack: Stack) -> list[dict]:
    with stack.ledger.connect() as connection:
        rows = connection.execute(
            select(events_table.c.payload)
            .where(events_table.c.kind == "decision_made")
            .where(events_table.c.preemptor_name.like("urgent-%"))
            .order_by(events_table.c.id)
        ).all()
    decisions = [row.payload for row in rows if row.payload["preemptor"] in PREEMPTORS]
    # Ledger order is append order; two workflows may append in another order than they
    # decided, so order by the worker's decision sequence.
    return sorted(decisions, key=lambda d: d["context"]["sequence"])


def cluster_as_served(stack: Stack) -> ClusterSnapshot:
    """The planner's view of the emulator's objects as it serves them (with the fields the
    API server fills in, such as start times, which break ties)."""
    snapshot = ClusterSnapshot()
    for obj in stack.emulator.store.objects(NODES):
        snapshot.apply("Node", obj)
    for obj in stack.emulator.store.objects(PODS):
        snapshot.apply("Pod", obj)
    return snapshot


def serial_run(snapshot: ClusterSnapshot, order: list[str]) -> dict[str, set[str]]:
    taken: dict[str, set[str]] = {}
    for key in order:
        decision = plan(snapshot, key)
        taken[key] = {victim.key for victim in decision.victims}
        for victim in decision.victims:
            snapshot.remove_pod(victim.uid)
        preemptor = snapshot.pod_by_key(key)
        assert preemptor is not None and decision.nominated_node is not None
        snapshot.upsert_pod(dataclasses.replace(preemptor, node_name=decision.nominated_node))
    return taken


async def test_concurrent_preemptions_take_what_a_serial_run_takes(client, ledger, emulator):
    scenario = crowded_cluster()
    async with running_stack(client, ledger, emulator, scenario) as stack:
        before = cluster_as_served(stack)
        handles = await asyncio.gather(*(stack.start(key) for key in PREEMPTORS))
        schedulers = [
            asyncio.create_task(schedule_when_preempted_for(stack, handle, key))
            for handle, key in zip(handles, PREEMPTORS, strict=True)
        ]
        results = await asyncio.gather(*(h.result() for h in handles))
        await asyncio.gather(*schedulers)
        decisions = decisions_in_order(stack)

    assert [r.outcome for r in results] == ["completed"] * len(PREEMPTORS)
    chosen = [f"{v['namespace']}/{v['name']}" for d in decisions for v in d["victims"]]
    assert len(chosen) == len(set(chosen)), "a victim was claimed twice"

    for name in NODE_NAMES:
        on_node = [
            p
            for p in emulator.store.objects(PODS)
            if p["spec"].get("nodeName") == name and not p["metadata"].get("deletionTimestamp")
        ]
        used = sum(int(p["spec"]["containers"][0]["resources"]["requests"]["cpu"]) for p in on_node)
        assert used <= 4, f"{name} holds {used} cpu of 4"

    serial = serial_run(before, [d["preemptor"] for d in decisions])
    actual = {
        d["preemptor"]: {f"{v['namespace']}/{v['name']}" for v in d["victims"]} for d in decisions
    }
    assert actual == serial

"""The guards an operator sets, applied to real preemptions.

Scenarios:
- a preemption over the eviction budget is recorded as throttled, sleeps (a durable timer)
  and then goes on with a fresh decision; nothing is dropped;
- pods in a protected namespace are never victims;
- a victim cap turns a preemption that would need more victims into no candidate.
"""

from __future__ import annotations

import itertools

from preemption.default_preemption import PreemptionArgs
from tests.support.emulator import as_list, node, pod
from tests.workflows.harness import running_stack
from tests.workflows.scenarios import one_full_node


def two_full_nodes() -> dict:
    items = [node("node-1", cpu="2"), node("node-2", cpu="2")]
    for name in ("node-1", "node-2"):
        items += [pod(f"{name}-batch-{i}", node_name=name, priority=100, cpu="1") for i in range(2)]
    items += [pod(f"urgent-{i}", priority=1000, cpu="2") for i in range(2)]
    return as_list(*items)


async def test_over_the_eviction_budget_a_preemption_is_throttled_then_proceeds(
    time_skipping, ledger, emulator
):
    # Each reading of this clock is 30 s after the last: half the 2/min budget refills.
    clock = itertools.count(0.0, 30.0).__next__
    async with running_stack(
        time_skipping.client,
        ledger,
        emulator,
        two_full_nodes(),
        clock=clock,
        evictions_per_minute=2,
    ) as stack:
        options = {"search_attributes": False, "scheduled_wait_seconds": 1.0}
        first = await stack.start("default/urgent-0", **options)
        await first.result()
        second = await stack.start("default/urgent-1", **options)
        result = await second.result()
        kinds = stack.ledger_kinds(second.id)
        throttled = stack.ledger_payloads(second.id, "throttled")
    assert stack.ledger_kinds(first.id)[0] == "decision_made"
    assert kinds[0] == "throttled"
    assert throttled[0]["retryAfter"] == 30.0
    assert "eviction budget (2/min)" in throttled[0]["message"]
    assert "decision_made" in kinds
    assert result.outcome == "completed"
    assert all(v.status == "deleted" for v in result.victims)


async def test_protected_namespaces_are_never_victims(client, ledger, emulator):
    scenario = one_full_node()
    scenario["items"][1]["metadata"]["namespace"] = "kube-system"  # victim-0
    args = PreemptionArgs(protected_namespaces=frozenset({"kube-system"}))
    async with running_stack(client, ledger, emulator, scenario, planner_args=args) as stack:
        handle = await stack.start("default/urgent", scheduled_wait_seconds=0.5)
        result = await handle.result()
    assert result.outcome == "no-candidate"
    assert stack.deletes() == []


async def test_victim_cap_refuses_a_preemption_needing_more(client, ledger, emulator):
    args = PreemptionArgs(max_victims=1)
    async with running_stack(client, ledger, emulator, one_full_node(), planner_args=args) as stack:
        handle = await stack.start("default/urgent")
        result = await handle.result()
    assert result.outcome == "no-candidate"
    assert "more than the cap of 1" in result.message
    assert stack.deletes() == []

"""The guards an operator sets, applied to real preemptions.

Scenarios:
- a preemption over the eviction budget is recorded as throttled, sleeps (a durable timer)
  and then goes on with a fresh decision; nothing is dropped;
- pods in a protected namespace are never victims;
- a victim cap turns a preemption that would need more victims into no candidate.
"""

from __future__ import annotations

from preemptctl.preemption.default_preemption import PreemptionArgs
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
    time_skipping, own_ledger, emulator
):
    async with running_stack(
        time_skipping.client, own_ledger, emulator, two_full_nodes(), evictions_per_minute=2
    ) as stack:
        options = {"search_attributes": False, "scheduled_wait_seconds": 1.0}
        # Both decide at once: the first takes the minute's whole budget (2 victims), the
        # other is held until those are a minute old.
        handles = [await stack.start(f"default/urgent-{i}", **options) for i in range(2)]
        results = [await handle.result() for handle in handles]
        kinds = [stack.ledger_kinds(handle.id) for handle in handles]
        throttled = [stack.ledger_payloads(handle.id, "throttled") for handle in handles]
    held = [i for i in range(2) if throttled[i]]
    assert len(held) == 1
    [i] = held
    assert kinds[1 - i][0] == "decision_made"
    assert kinds[i][0] == "throttled" and "decision_made" in kinds[i]
    assert 0.0 < throttled[i][0]["retryAfter"] <= 60.0
    assert "eviction budget (2/min)" in throttled[i][0]["message"]
    assert results[i].throttled >= 1
    assert [r.outcome for r in results] == ["completed", "completed"]
    assert all(v.fate == "deleted" for r in results for v in r.victims)


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

"""Every branch of the victim step, with the ledger and the emulator's request log asserted.

Scenarios:
- API errors on a delete (500, a dropped connection) are retried until the victim is deleted,
  and the ledger records the deletion once;
- a 429 with Retry-After is honoured, then the delete goes through;
- a victim already gone (404 on delete) counts as done;
- a victim replaced by a same-named pod between mark and delete is never deleted: the
  precondition protects the new pod, and the ledger says "replaced";
- a preemptor that vanishes mid-way (while a victim's mark is under way) stops the
  preemption before any delete (aborted); the victim marked is unmarked;
- a preemptor bound to another node mid-way stops the preemption as well;
- an RBAC denial fails the preemption at once with a message naming the verb and resource;
  the victim refused is unmarked, and the last victim is never touched.
"""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import WorkflowFailureError

from preemptctl.emulator.resources import PODS
from preemptctl.workflows.contract import workflow_id_for
from tests.support.emulator import pod
from tests.workflows.harness import Stack, bind_when_room, keep_history, running_stack
from tests.workflows.scenarios import one_full_node

pytestmark = pytest.mark.asyncio(loop_scope="session")

VICTIMS = ["default/victim-0", "default/victim-1"]


def successful_deletes(stack: Stack, name: str) -> int:
    return sum(
        1 for r in stack.emulator.requests.matching("delete", "pods", name) if 200 <= r.code < 300
    )


async def preempt_and_bind(stack: Stack) -> object:
    handle = await stack.start("default/urgent")
    scheduler = asyncio.create_task(bind_when_room(stack, "default/urgent", "node-1", VICTIMS))
    result = await handle.result()
    await scheduler
    return result


def marked(emulator, key: str) -> bool:
    """The victim carries the DisruptionTarget condition (the workflow's mark step is done)."""
    victim = emulator.pod(key) or {}
    conditions = (victim.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "DisruptionTarget" for c in conditions)


def arriving(emulator, verb: str, resource: str, name: str) -> asyncio.Event:
    """Set the moment such a request reaches the emulator (before it is served)."""
    seen = asyncio.Event()
    loop = asyncio.get_running_loop()

    def arrival(v: str, r: str, _namespace: str, n: str) -> None:
        if (v, r, n) == (verb, resource, name):
            loop.call_soon_threadsafe(seen.set)

    emulator.faults.on_arrival = arrival
    return seen


async def until(condition, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out waiting"
        await asyncio.sleep(0.01)


async def test_server_errors_and_dropped_connections_on_delete_are_retried(
    client, ledger, emulator
):
    async with running_stack(client, ledger, emulator, one_full_node()) as stack:
        emulator.faults.fail("delete", "pods", 500, times=1, name="victim-0")
        emulator.faults.drop("delete", "pods", times=1, name="victim-1")
        result = await preempt_and_bind(stack)
        preemptor = stack.preemptor("default/urgent")
        kinds = stack.ledger_kinds(workflow_id_for("default", "urgent", preemptor.uid))
    assert result.outcome == "completed"
    assert len(emulator.requests.matching("delete", "pods", "victim-0")) >= 2
    assert successful_deletes(stack, "victim-0") == 1
    assert successful_deletes(stack, "victim-1") == 1
    assert kinds.count("victim_deleted:victim-0") == 1
    assert kinds.count("victim_deleted:victim-1") == 1


async def test_throttled_delete_waits_for_retry_after(client, ledger, emulator):
    async with running_stack(client, ledger, emulator, one_full_node()) as stack:
        emulator.faults.fail("delete", "pods", 429, times=1, retry_after=1, name="victim-0")
        result = await preempt_and_bind(stack)
    attempts = emulator.requests.matching("delete", "pods", "victim-0")
    assert result.outcome == "completed"
    assert attempts[0].code == 429
    assert successful_deletes(stack, "victim-0") == 1


async def test_victim_already_gone_counts_as_done(client, ledger, emulator):
    async with running_stack(client, ledger, emulator, one_full_node()) as stack:
        emulator.faults.delay("delete", "pods", 1.0, name="victim-0", times=1)
        handle = await stack.start("default/urgent")
        scheduler = asyncio.create_task(bind_when_room(stack, "default/urgent", "node-1", VICTIMS))
        await until(lambda: marked(emulator, "default/victim-0"))
        emulator.store.delete(PODS, "default", "victim-0", grace_period=0)
        result = await handle.result()
        await scheduler
        kinds = stack.ledger_kinds(handle.id)
    assert result.outcome == "completed"
    assert {v.pod.name: v.fate for v in result.victims}["victim-0"] == "already-gone"
    assert [r.code for r in emulator.requests.matching("delete", "pods", "victim-0")] == [404]
    assert "victim_already_gone:victim-0" in kinds
    assert "victim_deleted:victim-0" not in kinds


async def test_replaced_victim_is_never_deleted(client, ledger, emulator):
    async with running_stack(client, ledger, emulator, one_full_node(victims=1)) as stack:
        emulator.faults.delay("delete", "pods", 1.0, name="victim-0")
        handle = await stack.start("default/urgent", scheduled_wait_seconds=0.5)

        await until(lambda: marked(emulator, "default/victim-0"))
        original_uid = emulator.pod("default/victim-0")["metadata"]["uid"]
        emulator.store.delete(PODS, "default", "victim-0", grace_period=0)
        emulator.store.create(
            PODS, "default", pod("victim-0", node_name="node-1", priority=100, cpu="1")
        )
        result = await handle.result()
        await keep_history(handle, "one-runbook-victim-replaced")
        kinds = stack.ledger_kinds(handle.id)
    survivor = emulator.pod("default/victim-0")
    assert survivor is not None and survivor["metadata"]["uid"] != original_uid
    assert survivor["metadata"].get("deletionTimestamp") is None
    assert result.victims[0].fate == "replaced"
    assert "victim_replaced:victim-0" in kinds
    assert "victim_deleted:victim-0" not in kinds


async def test_preemptor_vanishing_midway_stops_before_any_delete(client, ledger, emulator):
    async with running_stack(client, ledger, emulator, one_full_node()) as stack:
        emulator.faults.delay("patch", "pods/status", 1.0, times=2)
        marking = arriving(emulator, "patch", "pods/status", "victim-0")
        handle = await stack.start("default/urgent")
        await marking.wait()
        emulator.store.delete(PODS, "default", "urgent", grace_period=0)
        result = await handle.result()
        await keep_history(handle, "one-runbook-preemptor-vanished-aborted")
        kinds = stack.ledger_kinds(handle.id)
    assert result.outcome == "aborted"
    assert stack.deletes() == []
    assert kinds.count("preemption_aborted") == 1
    assert {v.fate for v in result.victims} == {"spared"}
    assert "victim_unmarked:victim-0" in kinds
    assert emulator.requests.matching("patch", "pods/status", "victim-1") == []


async def test_preemptor_bound_elsewhere_midway_stops_the_preemption(client, ledger, emulator):
    async with running_stack(client, ledger, emulator, one_full_node()) as stack:
        emulator.faults.delay("patch", "pods/status", 1.0, times=2)
        marking = arriving(emulator, "patch", "pods/status", "victim-0")
        handle = await stack.start("default/urgent")
        await marking.wait()
        stack.bind("default/urgent", "node-elsewhere")
        result = await handle.result()
    assert result.outcome == "aborted"
    assert "node-elsewhere" in result.message
    assert stack.deletes() == []


async def test_rbac_denial_fails_the_preemption_and_spares_the_last_victim(
    client, ledger, emulator
):
    async with running_stack(client, ledger, emulator, one_full_node()) as stack:
        emulator.faults.deny("delete", "pods", name="victim-0")
        handle = await stack.start("default/urgent")
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
        await keep_history(handle, "one-runbook-rbac-denied-failed")
        kinds = stack.ledger_kinds(handle.id)
    message = str(failure.value.cause)
    assert 'cannot delete resource "pods"' in message
    assert kinds[-1] == "failed"
    assert "victim_failed:victim-0" in kinds
    assert "victim_unmarked:victim-0" in kinds  # marked, then refused its DELETE
    victim_1 = [k for k in kinds if k.endswith(":victim-1")]
    assert victim_1 == ["victim_chosen:victim-1"]  # the last: never touched
    assert emulator.requests.matching("patch", "pods/status", "victim-1") == []
    assert emulator.requests.matching("delete", "pods", "victim-1") == []
    assert len(emulator.requests.matching("delete", "pods", "victim-0")) == 1

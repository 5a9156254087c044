"""What one preemption costs, counted (issue 22, item 2): workflow tasks and history events
(the Temporal server's work), ledger transactions and statements (the database's).

A pod preemption with two victims on one full node, run as production runs it: local
activities, the bind told by the trigger's signal the moment the victims are gone (no poll),
decision inputs not recorded (their writer is the decision path's, in the background).
A group preemption of the bundled gang (four members on four nodes, four victims) the same
way, its members' binds signalled.

Scenarios (the counts are printed, `pytest -s`, and held):
- a pod preemption costs the same whatever its victims (two, four): 3 workflow tasks, 25
  history events, 5 local activities, 13 ledger statements (`POD`; before the victims went
  in rounds: 26 events, 6 local activities and 14 statements for two victims, each victim
  two more events, two more local activities and three more statements);
- a group preemption of four members and four victims: 5 local activities, no timer
  cancelled, 13 ledger statements, and 23 events besides the workflow tasks its members'
  signals wake it for (`GANG`).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import orjson
import pytest
from sqlalchemy import Engine

from preemptctl.emulator import Emulator
from preemptctl.worker.scenarios import BUNDLED
from preemptctl.workflows.group_preemption import GroupPreemptionWorkflow
from preemptctl.workflows.preemption import PreemptionWorkflow
from tests.workflows.counting import LedgerRoundTrips, history_costs
from tests.workflows.harness import Stack, keep_history, running_stack
from tests.workflows.scenarios import one_full_node

pytestmark = pytest.mark.asyncio(loop_scope="session")

PRODUCTION = {"local_activities": True, "scheduled_poll_seconds": 30.0}


async def gone_or_terminating(stack: Stack, victims: list[str]) -> None:
    """Until every victim is deleted (terminating or gone); then end them, as a kubelet does."""
    for _ in range(400):
        remaining = [v for v in victims if stack.emulator.pod(v) is not None]
        if all(
            (stack.emulator.pod(v) or {}).get("metadata", {}).get("deletionTimestamp")
            for v in remaining
        ):
            for victim in remaining:
                stack.emulator.finalize(victim)
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the victims were never all deleted: {victims}")


@pytest.mark.parametrize("victims", [2, 4])
async def test_a_pod_preemption_costs_the_same_whatever_its_victims(
    client, ledger: Engine, emulator: Emulator, victims: int
):
    async with running_stack(
        client, ledger, emulator, one_full_node(victims), inputs_max_bytes=0
    ) as stack:
        with LedgerRoundTrips(ledger) as trips:
            handle = await stack.start("default/urgent", **PRODUCTION)
            await gone_or_terminating(stack, [f"default/victim-{i}" for i in range(victims)])
            stack.bind("default/urgent", "node-1")
            await handle.signal(PreemptionWorkflow.preemptor_bound, "node-1")  # the trigger
            result = await handle.result()
        costs = history_costs(await handle.fetch_history())
        if victims == 2:
            await keep_history(handle, "two-victims-in-rounds-completed")
    print(f"\npod preemption, {victims} victims: {costs}; {trips}")
    assert result.outcome == "completed"
    assert {
        "workflow tasks": costs.workflow_tasks,
        "events": costs.events,
        "local activities": costs.by_type["MARKER_RECORDED"] - 1,  # less the patch's marker
        "ledger statements": trips.statements,
    } == POD


def gang() -> dict[str, Any]:
    scenario: dict[str, Any] = orjson.loads(BUNDLED["gang"].read_bytes())
    for item in scenario["items"]:
        if "uid" in item["metadata"]:
            item["metadata"]["uid"] = str(uuid.uuid4())
    return scenario


async def test_a_group_preemption_of_four_members(client, ledger: Engine, emulator: Emulator):
    victims = ["ml/notebook", "ml/train-b-0", "ml/train-b-1", "ml/train-b-2"]
    async with running_stack(client, ledger, emulator, gang(), inputs_max_bytes=0) as stack:
        with LedgerRoundTrips(ledger) as trips:
            handle = await stack.start_group("ml/train-a", **PRODUCTION)
            await gone_or_terminating(stack, victims)
            for i in range(4):
                member = stack.preemptor(f"ml/train-a-{i}")
                stack.bind(member.key, f"node-{i + 1}")
                await handle.signal(
                    GroupPreemptionWorkflow.member_bound, args=[member.uid, f"node-{i + 1}"]
                )
            result = await handle.result()
        costs = history_costs(await handle.fetch_history())
    print(f"\ngroup preemption, 4 members, 4 victims: {costs}; {trips}")
    assert (result.outcome, result.bound) == ("completed", 4)
    signals = costs.by_type["WORKFLOW_EXECUTION_SIGNALED"]
    # Each member's signal may wake the workflow on its own: 1 to 4 workflow tasks for them.
    assert 3 <= costs.workflow_tasks <= 2 + signals
    assert {
        "events besides the signals' tasks": costs.events - 3 * (costs.workflow_tasks - 2),
        "local activities": costs.by_type["MARKER_RECORDED"],
        "timers cancelled": costs.by_type["TIMER_CANCELED"],
        "ledger statements": trips.statements,
    } == GANG


# Before `victims-in-rounds` (runs recorded before it): 3 workflow tasks, 22 + 2v events,
# 2v + 2 local activities and 3v + 8 ledger statements for v victims (26, 6 and 14 for two).
POD = {"workflow tasks": 3, "events": 25, "local activities": 5, "ledger statements": 13}
GANG = {
    "events besides the signals' tasks": 23,
    "local activities": 5,
    "timers cancelled": 0,
    "ledger statements": 13,
}

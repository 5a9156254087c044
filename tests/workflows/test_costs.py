"""What one preemption costs, counted (issue 29, "a shell with nothing we do not need"):
workflow tasks and history events (the Temporal server's work), local activities, ledger
statements (the database's round trips).

A pod preemption of the one runbook (`workflows.runbook`) on one full node, run as
production runs it: every step a local activity, the select too, the run ending at its last
victim's delete (the bind is the trigger's to record), decision inputs not recorded (their
writer is the decision path's, in the background). A group preemption of the bundled gang
(four members on four nodes, four victims) the same way.

Scenarios (the counts are printed, `pytest -s`, and held):
- a pod preemption of v victims is one workflow task of 10 + v history events: select,
  nominate, each victim and the end as local activities (markers), two search attribute
  changes; 12 events for two victims (the issue's bound), against 26 events and 3 workflow
  tasks before;
- its ledger statements do not grow with its victims: four (`POD`);
- a group preemption of four members and four victims: one workflow task, 14 events, the
  same four ledger statements (`GANG`).
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
        stack.activities.decisions.prime()  # as the worker does once its view has synced
        with LedgerRoundTrips(ledger, stack.activities.decisions.engine) as trips:
            handle = await stack.start("default/urgent", **PRODUCTION)
            result = await handle.result()
        costs = history_costs(await handle.fetch_history())
        if victims == 2:
            await keep_history(handle, "one-runbook-two-victims-completed")
    print(f"\npod preemption, {victims} victims: {costs}; {trips}: {trips.sent}")
    assert result.outcome == "completed"
    assert {
        "workflow tasks": costs.workflow_tasks,
        "events": costs.events,
        "local activities": costs.by_type["MARKER_RECORDED"],
        "ledger statements": trips.statements,
    } == {**POD, "events": 10 + victims, "local activities": 3 + victims}


def gang() -> dict[str, Any]:
    scenario: dict[str, Any] = orjson.loads(BUNDLED["gang"].read_bytes())
    for item in scenario["items"]:
        if "uid" in item["metadata"]:
            item["metadata"]["uid"] = str(uuid.uuid4())
    return scenario


async def test_a_group_preemption_of_four_members(client, ledger: Engine, emulator: Emulator):
    victims = ["ml/notebook", "ml/train-b-0", "ml/train-b-1", "ml/train-b-2"]
    async with running_stack(client, ledger, emulator, gang(), inputs_max_bytes=0) as stack:
        stack.activities.decisions.prime()  # as the worker does once its view has synced
        with LedgerRoundTrips(ledger, stack.activities.decisions.engine) as trips:
            handle = await stack.start_group("ml/train-a", **PRODUCTION)
            result = await handle.result()
        costs = history_costs(await handle.fetch_history())
    print(f"\ngroup preemption, 4 members, 4 victims: {costs}; {trips}: {trips.sent}")
    assert result.outcome == "completed"
    assert sorted(v.pod.key for v in result.victims) == sorted(victims)
    assert {
        "workflow tasks": costs.workflow_tasks,
        "events": costs.events,
        "local activities": costs.by_type["MARKER_RECORDED"],
        "ledger statements": trips.statements,
    } == GANG


# Ledger statements: the decision's three (the lock; one read of the claims and of its own
# runs; one insert of the decision, its victims and its members) and the end's one (the end
# with every victim's fate and the nominations' writes). Before: 13 for a pod, 13 for the gang.
POD = {"workflow tasks": 1, "ledger statements": 4}
GANG = {"workflow tasks": 1, "events": 14, "local activities": 7, "ledger statements": 4}

"""A preemption, end to end, through the real Temporal dev server, the Kubernetes API
emulator and a Postgres ledger.

Scenarios:
- the online/offline example: a high-priority nginx-a asking for 5 CPU preempts batch pods on a
  full node: victims marked then deleted, the preemptor nominated, lower nominations cleared,
  the ledger complete, the preemptor bound;
- a second start for the same pod joins the running preemption;
- the state query reports phase, preempting and the last victim;
- a dry run records the decision and touches nothing;
- a pod that fits, an ineligible pod and a pod no preemption helps each finish with the
  decision recorded and nothing touched.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from tests.workflows.harness import bind_when_room, running_stack
from workflows.preemption import workflow_id_for

pytestmark = pytest.mark.asyncio(loop_scope="session")

SCENARIO = orjson.loads(
    (
        Path(__file__).resolve().parents[2] / "worker" / "scenarios" / "online-offline.json"
    ).read_bytes()
)


async def test_online_offline_example_preempts_batch_pods_and_binds_nginx(client, ledger, emulator):
    async with running_stack(client, ledger, emulator, SCENARIO) as stack:
        handle = await stack.start("default/nginx-a")
        scheduler = asyncio.create_task(
            bind_when_room(
                stack, "default/nginx-a", "node-1", ["default/batch-1a", "default/batch-1b"]
            )
        )
        result = await handle.result()
        await scheduler

    assert result.outcome == "completed"
    assert result.node == "node-1"
    assert sorted(v.pod.name for v in result.victims) == ["batch-1a", "batch-1b"]
    assert all(v.status == "deleted" for v in result.victims)
    assert result.preemptor_node == "node-1"
    assert sorted(stack.deletes()) == ["batch-1a", "batch-1b"]
    assert (emulator.pod("default/report-x") or {})["status"].get("nominatedNodeName") is None
    kinds = stack.ledger_kinds(workflow_id_for(stack.preemptor("default/nginx-a").uid))
    assert kinds[0] == "decision_made"
    assert set(kinds) >= {
        "victim_chosen:batch-1a",
        "victim_chosen:batch-1b",
        "nominated",
        "nomination_cleared",
        "victim_marked:batch-1a",
        "victim_deleted:batch-1a",
        "victim_marked:batch-1b",
        "victim_deleted:batch-1b",
        "preemptor_scheduled",
        "completed",
    }
    assert kinds.index("decision_made") < kinds.index("victim_marked:batch-1a")

"""A preemption, end to end, through the real Temporal dev server, the Kubernetes API
emulator and a Postgres ledger.

Scenarios:
- the online/offline example: a high-priority nginx-a asking for 5 CPU preempts batch pods on a
  full node: victims marked then deleted (each marked before its DELETE), the preemptor
  nominated, lower nominations cleared, the ledger complete; the run ends at the last
  victim's delete (the bind is the scheduler's, recorded by the trigger loop);
- a second start for the same pod joins the running preemption;
- the state query reports phase, preempting and the last victim;
- a dry run records the decision and touches nothing;
- a pod that fits, an ineligible pod and a pod no preemption helps each finish with the
  decision recorded and nothing touched;
- a pod that takes a gang whole (`disruptionMode: all`) tells the gang's PodGroup, once,
  that it took its pods, by namespace/name, how many and where.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from preemptctl.emulator.resources import EVENTS_V1, PODS
from preemptctl.workflows.contract import workflow_id_for
from preemptctl.workflows.preemption import PreemptionWorkflow
from tests.workflows.harness import keep_history, running_stack
from tests.workflows.scenarios import (
    a_gang_in_the_way,
    never_preempts,
    nothing_lower,
    one_full_node,
    spare_room,
)

pytestmark = pytest.mark.asyncio(loop_scope="session")

SCENARIO = orjson.loads(
    (
        Path(__file__).resolve().parents[2] / "worker" / "scenarios" / "online-offline.json"
    ).read_bytes()
)


async def test_online_offline_example_preempts_batch_pods_and_binds_nginx(client, ledger, emulator):
    async with running_stack(client, ledger, emulator, SCENARIO) as stack:
        handle = await stack.start("default/nginx-a")
        result = await handle.result()
        await keep_history(handle, "one-runbook-online-offline-completed")

    assert result.outcome == "completed"
    assert result.node == "node-1"
    assert sorted(v.pod.name for v in result.victims) == ["batch-1a", "batch-1b"]
    assert all(v.fate == "deleted" for v in result.victims)
    assert result.preemptor_node is None  # the run ends at its last victim's delete
    assert sorted(stack.deletes()) == ["batch-1a", "batch-1b"]
    assert (emulator.pod("default/nginx-a") or {})["status"].get("nominatedNodeName") == "node-1"
    assert (emulator.pod("default/report-x") or {})["status"].get("nominatedNodeName") is None
    for victim in ("batch-1a", "batch-1b"):  # marked, then deleted
        requests = [
            (r.verb, r.resource)
            for r in emulator.requests.matching(name=victim)
            if r.verb in ("patch", "delete")
        ]
        assert requests == [("patch", "pods/status"), ("delete", "pods")]
    kinds = stack.ledger_kinds(
        workflow_id_for("default", "nginx-a", stack.preemptor("default/nginx-a").uid)
    )
    assert kinds[0] == "decision_made"
    assert set(kinds) == {
        "decision_made",
        "victim_chosen:batch-1a",
        "victim_chosen:batch-1b",
        "nominated",
        "nomination_cleared",
        "victim_deleted:batch-1a",
        "victim_deleted:batch-1b",
        "completed",
    }
    assert kinds[-1] == "completed"


async def test_a_preemption_is_found_by_node_by_victim_and_by_pod(client, ledger, emulator):
    async with running_stack(client, ledger, emulator, one_full_node()) as stack:
        handle = await stack.start("default/urgent", scheduled_wait_seconds=0.2)
        await handle.result()
        description = await handle.describe()
    uid = stack.preemptor("default/urgent").uid
    queries = [
        f'TargetNode = "node-1" AND PreemptorUid = "{uid}"',
        f'VictimPods = "default/victim-0" AND PreemptorUid = "{uid}"',
        f'PreemptorPod = "default/urgent" AND PreemptionOutcome = "completed" '
        f'AND PreemptorUid = "{uid}"',
    ]
    for query in queries:
        found: list[str] = []
        for _ in range(50):  # visibility trails the workflow by a moment
            found = [execution.id async for execution in client.list_workflows(query)]
            if found:
                break
            await asyncio.sleep(0.1)
        assert found == [handle.id], query
    assert await description.static_summary() == "Preempt for default/urgent (priority 1000000)"


async def test_second_start_for_the_same_pod_joins_the_running_preemption(client, ledger, emulator):
    async with running_stack(client, ledger, emulator, one_full_node()) as stack:
        emulator.faults.delay("patch", "pods/status", 0.5, times=2)
        first = await stack.start("default/urgent")
        second = await stack.start("default/urgent")
        assert second.result_run_id == first.result_run_id
        result = await first.result()
    assert result.outcome == "completed"
    assert sorted(stack.deletes()) == ["victim-0", "victim-1"]


async def test_state_query_tracks_phase_preempting_and_the_last_victim(client, ledger, emulator):
    async with running_stack(client, ledger, emulator, one_full_node()) as stack:
        emulator.faults.delay("delete", "pods", 1.0, name="victim-1")
        handle = await stack.start("default/urgent", scheduled_wait_seconds=0.5)
        state = await handle.query(PreemptionWorkflow.state)
        while state.phase == "selecting":
            await asyncio.sleep(0.05)
            state = await handle.query(PreemptionWorkflow.state)
        assert state.node == "node-1"
        while state.pending_last_victim is None and state.outcome is None:
            await asyncio.sleep(0.05)
            state = await handle.query(PreemptionWorkflow.state)
        assert state.pending_last_victim is not None
        assert state.pending_last_victim.name == "victim-1"
        await handle.result()
        final = await handle.query(PreemptionWorkflow.state)
    assert final.preempting is False
    assert final.phase == "finished"
    assert [v.fate for v in final.victims] == ["deleted", "deleted"]


async def test_dry_run_records_the_decision_and_touches_nothing(client, ledger, emulator):
    async with running_stack(client, ledger, emulator, one_full_node()) as stack:
        handle = await stack.start("default/urgent", dry_run=True)
        result = await handle.result()
        await keep_history(handle, "one-runbook-dry-run")
        kinds = stack.ledger_kinds(handle.id)
    assert result.outcome == "dry-run"
    assert kinds == ["decision_made", "victim_chosen:victim-0", "victim_chosen:victim-1", "dry_run"]
    writes = [r for r in emulator.requests if r.verb in ("patch", "delete", "create")]
    assert writes == []


@pytest.mark.parametrize(
    ("scenario", "outcome", "last_kind"),
    [
        (spare_room, "completed", "completed"),
        (never_preempts, "ineligible", "ineligible"),
        (nothing_lower, "no-candidate", "no_candidate"),
    ],
)
async def test_decisions_without_victims_finish_without_cluster_writes(
    client, ledger, emulator, scenario, outcome, last_kind
):
    async with running_stack(client, ledger, emulator, scenario()) as stack:
        handle = await stack.start("default/urgent")
        result = await handle.result()
        kinds = stack.ledger_kinds(handle.id)
    assert result.outcome == outcome
    assert kinds[-1] == last_kind
    assert [r for r in emulator.requests if r.verb in ("patch", "delete")] == []


async def test_a_pod_that_takes_a_gang_whole_tells_its_pod_group(client, ledger, emulator):
    async with running_stack(client, ledger, emulator, a_gang_in_the_way()) as stack:
        handle = await stack.start("ml/urgent")
        result = await handle.result()
        urgent = stack.preemptor("ml/urgent")
        told = [
            (e["type"], e["note"], e["related"]["kind"], e["related"]["name"])
            for e in emulator.store.objects(EVENTS_V1, "ml")
            if e["regarding"]["kind"] == "PodGroup" and e["reason"] == "Preempted"
        ]
    assert result.outcome == "completed"
    assert told == [
        (
            "Normal",
            f"Preempted by pod ml/urgent (uid {urgent.uid}): 2 of its pods, "
            "train-y-0 on node-1, train-y-1 on node-2",
            "Pod",
            "urgent",
        )
    ]


async def test_a_run_stopped_mid_gang_finishes_the_gang_it_began(client, ledger, emulator):
    async with running_stack(client, ledger, emulator, a_gang_in_the_way()) as stack:
        # Each member's mark is slow: the first is deleted, then the preemptor is deleted
        # while the last one's mark is under way, before its step asks about the room.
        for member in ("train-y-0", "train-y-1"):
            emulator.faults.delay("patch", "pods/status", 1.0, times=1, name=member)
        handle = await stack.start("ml/urgent")
        while not {"train-y-0", "train-y-1"} & set(stack.deletes()):
            await asyncio.sleep(0.02)
        emulator.store.delete(PODS, "ml", "urgent")
        result = await handle.result()
        fates = {row["victim_name"]: row for row in stack.ledger_rows(handle.id, "victim_deleted")}
    assert result.outcome == "aborted"
    assert result.message.endswith(
        "; podGroup ml/train-y finished (begun before: a unit taken whole is never left in part)"
    )
    assert sorted(stack.deletes()) == ["train-y-0", "train-y-1"]
    finished = [row for row in fates.values() if "deleted to finish" in row["payload"]["message"]]
    assert [row["payload"]["message"] for row in finished] == [
        "deleted to finish podGroup ml/train-y: the room was no longer needed, but this run "
        "had deleted other pods of the unit, which goes whole or not at all"
    ]

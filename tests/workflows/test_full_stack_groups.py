"""A group preemption, end to end, through the real Temporal dev server, the Kubernetes API
emulator and a Postgres ledger, on the bundled gang scenario (`dev --scenario gang`).

ml/train-a, a gang of four trainers (minCount 4), is pending; the decision places one
trainer on each of node-1 to node-4 and takes ml/train-b whole (its three pods on node-1,
node-2 and node-5) and the notebook on node-3 (tests/worker/test_dev_scenarios.py holds
that decision).

Scenarios:
- the gang preemption: every trainer nominated to its node, every victim marked then
  deleted once, on every node it was on; the run completes at its last victim's delete
  (the gang's bind is the scheduler's, recorded by the trigger loop); the ledger tells it
  in order (decision, placed members, chosen victims with their units, then with the end:
  nominations, each victim's fate on its own node, completed), with the group in the
  preemptor columns;
- Events: `Preempting` on the PodGroup and on each trainer, `Preempted by podgroup
  ml/train-a (uid <uid>)` on each victim, and `Preempted` on the victim PodGroup ml/train-b
  (by whom, how many of its pods, which, where);
- the run is found in the UI by its group (`PodGroup`, `PreemptorPod`) and by the victim
  group (`VictimGroups`); a second start for the group joins the running one;
- the group deleted after its decision: the deletes stop (aborted), no victim deleted, the
  victims marked unmarked, the last never touched;
- a victim's DELETE refused for good (RBAC): the run fails, saying which victim and why,
  the failure's details carrying the result; each trainer is warned (`PreemptionFailed`),
  as the PodGroup is, and keeps its nomination.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import orjson
import pytest
from temporalio.client import WorkflowFailureError

from preemptctl.emulator.resources import EVENTS_V1, POD_GROUPS
from preemptctl.worker.scenarios import BUNDLED
from preemptctl.workflows.contract import group_result_of_failure, group_workflow_id_for
from tests.workflows.harness import keep_history, running_stack

pytestmark = pytest.mark.asyncio(loop_scope="session")

TRAINERS = [f"ml/train-a-{i}" for i in range(4)]
VICTIMS = ["ml/notebook", "ml/train-b-0", "ml/train-b-1", "ml/train-b-2"]


def gang() -> dict[str, Any]:
    """The bundled scenario with fresh uids, as dev loads it: each test's group is a group
    of its own (its own workflow ID, its own ledger rows)."""
    scenario: dict[str, Any] = orjson.loads(BUNDLED["gang"].read_bytes())
    for item in scenario["items"]:
        if "uid" in item["metadata"]:
            item["metadata"]["uid"] = str(uuid.uuid4())
    return scenario


async def test_a_gang_preemption_runs_end_to_end(client, ledger, emulator):
    async with running_stack(client, ledger, emulator, gang()) as stack:
        handle = await stack.start_group("ml/train-a")
        result = await handle.result()
        await keep_history(handle, "one-runbook-gang-completed")
        nominated = {t: stack.nominated(t) for t in TRAINERS}
        kinds = stack.ledger_kinds(handle.id)
        chosen = stack.ledger_payloads(handle.id, "victim_chosen")
        fates = stack.ledger_rows(handle.id, "victim_deleted")
        group = stack.group("ml/train-a")

    assert handle.id == group_workflow_id_for("ml", "train-a", group.uid)
    assert (result.outcome, result.min_count) == ("completed", 4)
    assert result.message == (
        "4 victim(s) preempted on 4 node(s) for pod group ml/train-a, 4 member(s) nominated "
        "(minCount 4); their binds are the scheduler's, recorded when the watch shows them"
    )
    assert result.retryable is None
    assert nominated == {
        "ml/train-a-0": "node-1",
        "ml/train-a-1": "node-2",
        "ml/train-a-2": "node-3",
        "ml/train-a-3": "node-4",
    }
    assert sorted(stack.deletes()) == ["notebook", "train-b-0", "train-b-1", "train-b-2"]
    assert sorted((v.pod.name, v.node, v.fate) for v in result.victims) == [
        ("notebook", "node-3", "deleted"),
        ("train-b-0", "node-1", "deleted"),
        ("train-b-1", "node-2", "deleted"),
        ("train-b-2", "node-5", "deleted"),
    ]
    # Each victim's fate on its own node, not the preemptor's (issue 25, item 1).
    assert sorted((row["victim_name"], row["node"]) for row in fates) == [
        ("notebook", "node-3"),
        ("train-b-0", "node-1"),
        ("train-b-1", "node-2"),
        ("train-b-2", "node-5"),
    ]
    assert kinds[:5] == ["decision_made", *["member_placed"] * 4]
    assert sorted(kinds[5:9]) == [f"victim_chosen:{v.partition('/')[2]}" for v in VICTIMS]
    assert sorted(c["unit"] for c in chosen) == [
        "pod ml/notebook",
        *["podGroup ml/train-b"] * 3,
    ]
    assert kinds[9:13] == ["member_nominated"] * 4
    assert sorted(kinds[13:17]) == [f"victim_deleted:{v.partition('/')[2]}" for v in VICTIMS]
    assert kinds[17:] == ["completed"]
    for victim in ("notebook", "train-b-0", "train-b-1", "train-b-2"):  # marked, then deleted
        requests = [
            (r.verb, r.resource)
            for r in emulator.requests.matching(name=victim)
            if r.verb in ("patch", "delete")
        ]
        assert requests == [("patch", "pods/status"), ("delete", "pods")]


async def test_the_group_its_members_and_its_victims_are_told(client, ledger, emulator):
    async with running_stack(client, ledger, emulator, gang()) as stack:
        handle = await stack.start_group("ml/train-a")
        await handle.result()
        group = stack.group("ml/train-a")
        events = [
            (e["regarding"]["kind"], e["regarding"]["name"], e["reason"], e["note"])
            for e in emulator.store.objects(EVENTS_V1)
        ]

    on_group = [e for e in events if e[0] == "PodGroup" and e[1] == "train-a"]
    assert [(name, reason) for _, name, reason, _ in on_group] == [("train-a", "Preempting")]
    assert on_group[0][3].startswith(
        "Preempt 4 pod(s) in 2 unit(s) for pod group ml/train-a (priority 100000, minCount 4): "
        "4 member(s) placed on node-1, node-2, node-3, node-4: "
    )
    on_trainers = sorted((name, note) for _, name, reason, note in events if reason == "Preempting")
    assert on_trainers[1:] == [
        (
            f"train-a-{i}",
            f"placed on node-{i + 1} with its pod group ml/train-a: 4 victim(s) on 4 node(s)",
        )
        for i in range(4)
    ]
    preempted = sorted(
        (name, note)
        for kind, name, reason, note in events
        if (kind, reason) == ("Pod", "Preempted")
    )
    assert [name for name, _ in preempted] == ["notebook", "train-b-0", "train-b-1", "train-b-2"]
    assert preempted[0][1] == f"Preempted by podgroup ml/train-a (uid {group.uid}) on node node-3"


async def test_the_victim_gang_is_told_who_took_it_and_how_many(client, ledger, emulator):
    async with running_stack(client, ledger, emulator, gang()) as stack:
        handle = await stack.start_group("ml/train-a")
        await handle.result()
        group = stack.group("ml/train-a")
        told = [
            (e["type"], e["note"], e["related"]["name"])
            for e in emulator.store.objects(EVENTS_V1)
            if e["regarding"]["kind"] == "PodGroup"
            and e["reason"] == "Preempted"
            and e["regarding"]["name"] == "train-b"
        ]
    assert told == [
        (
            "Normal",
            f"Preempted by podgroup ml/train-a (uid {group.uid}): 3 of its pods, "
            "train-b-0 on node-1, train-b-1 on node-2, train-b-2 on node-5",
            "train-a",
        )
    ]


async def test_a_group_preemption_is_found_by_its_group_and_its_victim_groups(
    client, ledger, emulator
):
    async with running_stack(client, ledger, emulator, gang()) as stack:
        handle = await stack.start_group("ml/train-a", scheduled_wait_seconds=0.2)
        again = await stack.start_group("ml/train-a", scheduled_wait_seconds=0.2)
        await handle.result()
        uid = stack.group("ml/train-a").uid
    assert again.result_run_id == handle.result_run_id
    queries = [
        f'PodGroup = "ml/train-a" AND PreemptorUid = "{uid}"',
        f'PreemptorPod = "ml/train-a" AND PreemptionOutcome = "completed" '
        f'AND PreemptorUid = "{uid}"',
        f'VictimGroups = "ml/train-b" AND PreemptorUid = "{uid}"',
    ]
    for query in queries:
        found: list[str] = []
        for _ in range(50):  # visibility trails the workflow by a moment
            found = [execution.id async for execution in client.list_workflows(query)]
            if found:
                break
            await asyncio.sleep(0.1)
        assert found == [handle.id], query


async def test_a_group_deleted_after_its_decision_stops_the_deletes(client, ledger, emulator):
    async with running_stack(client, ledger, emulator, gang()) as stack:
        # The marks are slow: the group is deleted while they are under way.
        emulator.faults.delay("patch", "pods/status", 1.0, times=4)
        handle = await stack.start_group("ml/train-a")
        while not stack.ledger_kinds(handle.id):
            await asyncio.sleep(0.05)
        emulator.store.delete(POD_GROUPS, "ml", "train-a")
        result = await handle.result()
        await keep_history(handle, "one-runbook-gang-group-deleted-aborted")
        kinds = stack.ledger_kinds(handle.id)
    assert (result.outcome, result.message) == ("aborted", "the pod group ml/train-a is gone")
    assert stack.deletes() == []
    unmarked = sorted(k for k in kinds if k.startswith("victim_unmarked:"))
    last = result.victims[-1].pod.name
    assert unmarked == sorted(f"victim_unmarked:{v.pod.name}" for v in result.victims[:-1])
    assert [v.fate for v in result.victims] == ["spared"] * 4
    assert not any(r.name == last for r in emulator.requests.matching("patch", "pods/status"))
    assert kinds[-1] == "preemption_aborted"


async def test_a_victim_refused_its_delete_fails_the_group_preemption(client, ledger, emulator):
    async with running_stack(client, ledger, emulator, gang()) as stack:
        emulator.faults.deny("delete", "pods", name="train-b-2")
        handle = await stack.start_group("ml/train-a")
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
        await keep_history(handle, "one-runbook-gang-rbac-denied-failed")
        kinds = stack.ledger_kinds(handle.id)
    carried = group_result_of_failure(failed.value)
    assert carried is not None
    assert (carried.outcome, carried.retryable) == ("failed", False)
    assert carried.message.startswith("victim ml/train-b-2 could not be preempted: ")
    assert kinds[-1] == "failed"
    assert "victim_failed:train-b-2" in kinds


async def test_a_failed_gang_preemption_warns_each_member(client, ledger, emulator):
    async with running_stack(client, ledger, emulator, gang()) as stack:
        emulator.faults.deny("delete", "pods", name="train-b-2")
        handle = await stack.start_group("ml/train-a")
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        warned = sorted(
            (e["regarding"]["kind"], e["regarding"]["name"], e["type"], e["note"])
            for e in emulator.store.objects(EVENTS_V1)
            if e["reason"] == "PreemptionFailed"
        )
        nominated = [
            (emulator.pod(trainer) or {})["status"].get("nominatedNodeName") for trainer in TRAINERS
        ]
    assert [(kind, name, kind_of) for kind, name, kind_of, _ in warned] == [
        ("Pod", f"train-a-{i}", "Warning") for i in range(4)
    ] + [("PodGroup", "train-a", "Warning")]
    for i, (_, _, _, note) in enumerate(warned[:4]):
        assert note.startswith(
            "The preemption for its pod group ml/train-a failed: "
            "victim ml/train-b-2 could not be preempted: "
        )
        assert f"Its nomination to node-{i + 1} is not cleared" in note
    assert nominated == [f"node-{i + 1}" for i in range(4)]


async def test_a_run_stopped_mid_unit_finishes_the_unit_it_began(client, ledger, emulator):
    async with running_stack(client, ledger, emulator, gang()) as stack:
        # train-b-2's mark is slow: train-b-0 and train-b-1 are deleted, then the group that
        # needed the room is deleted, before train-b-2's step asks whether it still does.
        emulator.faults.delay("patch", "pods/status", 2.0, times=1, name="train-b-2")
        handle = await stack.start_group("ml/train-a")
        while not {"train-b-0", "train-b-1"} <= set(stack.deletes()):
            await asyncio.sleep(0.02)
        emulator.store.delete(POD_GROUPS, "ml", "train-a")
        result = await handle.result()
        fates = {row["victim_name"]: row for row in stack.ledger_rows(handle.id, "victim_deleted")}
        kinds = stack.ledger_kinds(handle.id)
    assert result.outcome == "aborted"
    assert result.message == (
        "the pod group ml/train-a is gone; podGroup ml/train-b finished (begun before: a unit "
        "taken whole is never left in part)"
    )
    assert {"train-b-0", "train-b-1", "train-b-2"} <= set(stack.deletes())
    assert stack.deletes().count("train-b-2") == 1
    assert {"train-b-0", "train-b-1", "train-b-2"} <= set(fates)
    assert fates["train-b-2"]["payload"]["message"].startswith(
        "deleted to finish podGroup ml/train-b: the room was no longer needed"
    )
    assert kinds[-1] == "preemption_aborted"

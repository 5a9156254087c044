"""Gangs named by a pod label (the `pod_group_label` setting, here Kueue's
`kueue.x-k8s.io/pod-group-name`, sized by `pod_group_size_annotation`), end to end: the real
Temporal dev server, the Kubernetes API emulator and a Postgres ledger, wired as production
wires them (`Settings.view_options()` for the view, `preemption_activities` for the
activities, the trigger's `pending_groups` for the group, `group_preemption_request` and
`preemption_request` for the runs).

Each test has a namespace of its own: a label-named group's UID, and so its workflow ID and
its ledger rows, derive from its namespace and name.

Scenarios:
- a pending label-named gang (train-x, 3 pods, size annotation 3) preempts for itself as one
  group: the decision places one member on each of node-1 to node-3, takes the lower gang
  train-y whole (its members on node-1, node-2 and node-4, where the gang needs no room) and
  the notebook on node-3; every member is nominated, every victim deleted exactly once, the
  run completes once the gang is bound; the ledger names the group (preemptor columns, the
  victims' units) and the run is found by its victim group;
- a label-named gang with 2 of the 3 pods its size annotation counts preempts nothing;
- a single pod that needs room where one member of a label-named gang runs takes the gang
  whole, its members on other nodes too;
- a single pod that could take either one member of a label-named gang or a loose pod of
  the same priority takes the loose pod: the gang is never split.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from typing import Any

import pytest
from sqlalchemy import Engine, select
from temporalio.client import Client, WorkflowHandle

from preemptctl.emulator import Emulator
from preemptctl.ledger.models import events as events_table
from preemptctl.preemption.group_decision import GroupRef, label_group_uid
from preemptctl.worker.config import Settings
from preemptctl.worker.starter import (
    group_preemption_request,
    preemption_request,
    start_group_preemption,
    start_preemption,
)
from preemptctl.worker.trigger_rules import pending_groups
from preemptctl.workflows.contract import (
    GroupPreemptionResult,
    PreemptionResult,
    group_workflow_id_for,
)
from preemptctl.workflows.group_preemption import GroupPreemptionWorkflow
from preemptctl.workflows.preemption import PreemptionWorkflow
from tests.support.emulator import as_list, node, pod
from tests.workflows.harness import Stack, bind_when_room, running_stack
from tests.workflows.scenarios import started

pytestmark = pytest.mark.asyncio(loop_scope="session")

GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
SIZE_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
SETTINGS = Settings(pod_group_label=GROUP_LABEL, pod_group_size_annotation=SIZE_ANNOTATION)
HIGH = 1_000_000  # the keepers' and the single preemptor's priority: keepers are never victims


def fresh_namespace() -> str:
    return f"ml-{uuid.uuid4().hex[:8]}"


def member(
    name: str, namespace: str, gang: str, size: int, *, pending: bool = False, **options: Any
) -> dict[str, Any]:
    """A pod of the gang `gang` (the label), sized `size` (the annotation)."""
    obj = pod(name, namespace, labels={GROUP_LABEL: gang}, **options)
    obj["metadata"]["annotations"] = {SIZE_ANNOTATION: str(size)}
    return unschedulable(obj) if pending else obj


def running(
    name: str, namespace: str, size: int, node_name: str, *, priority: int, cpu: str, second: int
) -> dict[str, Any]:
    """A member of train-y (sized `size`) running on `node_name` since `second`."""
    obj = member(name, namespace, "train-y", size, node_name=node_name, priority=priority, cpu=cpu)
    return started(obj, second)


def unschedulable(obj: dict[str, Any]) -> dict[str, Any]:
    """A pending pod as kube-scheduler leaves it when nothing fits: what the trigger reads."""
    obj["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    ]
    return obj


def keeper(name: str, namespace: str, node_name: str, cpu: str) -> dict[str, Any]:
    return pod(name, namespace, node_name=node_name, priority=HIGH, cpu=cpu)


def two_gangs(namespace: str) -> dict[str, Any]:
    """node-1 to node-4, 8 cpu each. train-y (label-named, priority 1000, size 3) runs on
    node-1 and node-2 (4 cpu each) and node-4 (1 cpu); the notebook (priority 100, 4 cpu) on
    node-3; keepers fill the rest (4 cpu on node-1 to node-3, 6 on node-4, so that node-4
    offers a trainer no room even emptied). train-x (label-named, priority 100000, size 3:
    three 4-cpu trainers) is pending."""
    items = [node(f"node-{i}", cpu="8") for i in range(1, 5)]
    items += [
        running("train-y-0", namespace, 3, "node-1", priority=1000, cpu="4", second=5),
        running("train-y-1", namespace, 3, "node-2", priority=1000, cpu="4", second=5),
        running("train-y-2", namespace, 3, "node-4", priority=1000, cpu="1", second=5),
        started(pod("notebook", namespace, node_name="node-3", priority=100, cpu="4"), 9),
        keeper("keeper-1", namespace, "node-1", "4"),
        keeper("keeper-2", namespace, "node-2", "4"),
        keeper("keeper-3", namespace, "node-3", "4"),
        keeper("keeper-4", namespace, "node-4", "6"),
    ]
    items += [
        member(f"train-x-{i}", namespace, "train-x", 3, pending=True, priority=100_000, cpu="4")
        for i in range(3)
    ]
    return as_list(*items)


def gang_not_yet_whole(namespace: str) -> dict[str, Any]:
    """node-1 and node-2 (4 cpu), each full with a loose priority-100 pod; train-x has 2 of
    the 3 pods its size annotation counts, both pending (4 cpu each)."""
    items = [node("node-1", cpu="4"), node("node-2", cpu="4")]
    items += [
        started(pod("batch-1", namespace, node_name="node-1", priority=100, cpu="4"), 1),
        started(pod("batch-2", namespace, node_name="node-2", priority=100, cpu="4"), 1),
    ]
    items += [
        member(f"train-x-{i}", namespace, "train-x", 3, pending=True, priority=100_000, cpu="4")
        for i in range(2)
    ]
    return as_list(*items)


def one_member_in_the_way(namespace: str) -> dict[str, Any]:
    """node-1 to node-3 (4 cpu). train-y (label-named, priority 100, size 3) runs 2 cpu on
    node-1 and 1 cpu on node-2 and node-3; keepers fill the rest. `urgent` (2 cpu) fits only
    on node-1, once train-y-0 is gone."""
    items = [node(f"node-{i}", cpu="4") for i in range(1, 4)]
    items += [
        running("train-y-0", namespace, 3, "node-1", priority=100, cpu="2", second=5),
        running("train-y-1", namespace, 3, "node-2", priority=100, cpu="1", second=5),
        running("train-y-2", namespace, 3, "node-3", priority=100, cpu="1", second=5),
        keeper("keeper-1", namespace, "node-1", "2"),
        keeper("keeper-2", namespace, "node-2", "3"),
        keeper("keeper-3", namespace, "node-3", "3"),
        unschedulable(pod("urgent", namespace, priority=HIGH, cpu="2")),
    ]
    return as_list(*items)


def a_loose_pod_costs_less(namespace: str) -> dict[str, Any]:
    """node-1 to node-3 (4 cpu), each half taken by a keeper. train-y (label-named, priority
    100, size 2) runs 2 cpu on node-1 and node-2, started at second 30; `batch` (loose,
    priority 100, 2 cpu) on node-3, started at second 10. `urgent` (2 cpu) needs one node's
    victims gone: the whole gang (two pods) or the batch pod (one). Were the gang's pods
    loose, node-1's train-y-0 would win (its victim started latest)."""
    items = [node(f"node-{i}", cpu="4") for i in range(1, 4)]
    items += [
        running("train-y-0", namespace, 2, "node-1", priority=100, cpu="2", second=30),
        running("train-y-1", namespace, 2, "node-2", priority=100, cpu="2", second=30),
        started(pod("batch", namespace, node_name="node-3", priority=100, cpu="2"), 10),
        keeper("keeper-1", namespace, "node-1", "2"),
        keeper("keeper-2", namespace, "node-2", "2"),
        keeper("keeper-3", namespace, "node-3", "2"),
        unschedulable(pod("urgent", namespace, priority=HIGH, cpu="2")),
    ]
    return as_list(*items)


def the_pending_group(stack: Stack) -> GroupRef:
    """The one group the trigger's resync finds pending, as it would start its run."""
    with stack.view.read() as snapshot:
        pending = pending_groups(snapshot, SETTINGS)
    assert len(pending) == 1, [p.group.key for p in pending]
    return pending[0].group


async def start_the_group(
    stack: Stack, group: GroupRef
) -> WorkflowHandle[GroupPreemptionWorkflow, GroupPreemptionResult]:
    request = dataclasses.replace(
        group_preemption_request(group, SETTINGS),
        scheduled_wait_seconds=10.0,
        scheduled_poll_seconds=0.2,
    )
    return await start_group_preemption(stack.client, request, task_queue=stack.task_queue)


async def start_the_pod(
    stack: Stack, key: str
) -> WorkflowHandle[PreemptionWorkflow, PreemptionResult]:
    request = preemption_request(stack.preemptor(key), SETTINGS, scheduled_poll_seconds=0.2)
    request.scheduled_wait_seconds = 10.0
    return await start_preemption(stack.client, request, task_queue=stack.task_queue)


def successful_deletes(stack: Stack) -> list[str]:
    """The pods the emulator deleted (2xx), once per delete, in order."""
    return [
        entry.name
        for entry in stack.emulator.requests.matching("delete", "pods")
        if 200 <= entry.code < 300
    ]


def preemptor_columns(stack: Stack, preemption_id: str) -> set[tuple[str, str, str]]:
    with stack.ledger.connect() as connection:
        rows = connection.execute(
            select(
                events_table.c.preemptor_namespace,
                events_table.c.preemptor_name,
                events_table.c.preemptor_uid,
            )
            .where(events_table.c.preemption_id == preemption_id)
            .distinct()
        ).all()
    return {(row[0], row[1], row[2]) for row in rows}


def untouched(stack: Stack, key: str) -> bool:
    """Still there, not terminating, not marked for disruption."""
    obj = stack.emulator.pod(key)
    if obj is None or obj["metadata"].get("deletionTimestamp"):
        return False
    conditions = obj["status"].get("conditions") or []
    return not any(c.get("type") == "DisruptionTarget" for c in conditions)


async def test_a_label_named_gang_preempts_for_itself_and_takes_a_label_named_gang_whole(
    client: Client, ledger: Engine, emulator: Emulator
) -> None:
    ns = fresh_namespace()
    trainers = [f"{ns}/train-x-{i}" for i in range(3)]
    async with running_stack(
        client, ledger, emulator, settings=SETTINGS, scenario=two_gangs(ns)
    ) as stack:
        group = the_pending_group(stack)
        handle = await start_the_group(stack, group)
        result = await handle.result()
        nominated = {t: stack.nominated(t) for t in trainers}
        kinds = stack.ledger_kinds(handle.id)
        chosen = stack.ledger_payloads(handle.id, "victim_chosen")
        preemptors = preemptor_columns(stack, handle.id)
        deletes = successful_deletes(stack)
        delete_requests = stack.deletes()
        keepers = [untouched(stack, f"{ns}/keeper-{i}") for i in range(1, 5)]

    uid = label_group_uid(ns, "train-x")
    assert group == GroupRef(ns, "train-x", uid, 100_000)
    assert handle.id == group_workflow_id_for(ns, "train-x", uid)
    assert (result.outcome, result.min_count) == ("completed", 3)
    assert nominated == {
        f"{ns}/train-x-0": "node-1",
        f"{ns}/train-x-1": "node-2",
        f"{ns}/train-x-2": "node-3",
    }
    # train-y goes whole: train-y-2 too, on node-4, where no trainer needs room.
    assert sorted((v.pod.name, v.node, v.fate) for v in result.victims) == [
        ("notebook", "node-3", "deleted"),
        ("train-y-0", "node-1", "deleted"),
        ("train-y-1", "node-2", "deleted"),
        ("train-y-2", "node-4", "deleted"),
    ]
    # Each victim deleted once, nothing else deleted.
    assert sorted(deletes) == ["notebook", "train-y-0", "train-y-1", "train-y-2"]
    assert sorted(delete_requests) == sorted(deletes)
    assert all(keepers)
    # The ledger names the group: in the preemptor columns, and as the victims' unit.
    assert preemptors == {(ns, "train-x", uid)}
    assert kinds[:4] == ["decision_made", *["member_placed"] * 3]
    assert sorted(kinds[4:8]) == [
        f"victim_chosen:{name}" for name in ("notebook", "train-y-0", "train-y-1", "train-y-2")
    ]
    assert sorted(c["unit"] for c in chosen) == [
        f"labelGroup {ns}/train-y",
        f"labelGroup {ns}/train-y",
        f"labelGroup {ns}/train-y",
        f"pod {ns}/notebook",
    ]
    assert kinds.count("member_nominated") == 3
    for name in ("notebook", "train-y-0", "train-y-1", "train-y-2"):
        assert kinds.count(f"victim_deleted:{name}") == 1
    assert kinds[-1] == "completed"
    # The run is found by the group it took whole.
    query = f'VictimGroups = "{ns}/train-y" AND PodGroup = "{ns}/train-x"'
    found: list[str] = []
    for _ in range(50):  # visibility trails the workflow by a moment
        found = [execution.id async for execution in client.list_workflows(query)]
        if found:
            break
        await asyncio.sleep(0.1)
    assert found == [handle.id]


async def test_a_label_named_gang_short_of_its_size_preempts_nothing(
    client: Client, ledger: Engine, emulator: Emulator
) -> None:
    ns = fresh_namespace()
    async with running_stack(
        client, ledger, emulator, settings=SETTINGS, scenario=gang_not_yet_whole(ns)
    ) as stack:
        group = the_pending_group(stack)
        handle = await start_the_group(stack, group)
        result = await handle.result()
        kinds = stack.ledger_kinds(handle.id)
        batch = [untouched(stack, f"{ns}/batch-{i}") for i in (1, 2)]
        nominated = [stack.nominated(f"{ns}/train-x-{i}") for i in range(2)]

    assert result.outcome == "no-candidate"
    assert "fewer than its minCount 3" in result.message
    assert not list(emulator.requests.matching("delete", "pods"))
    assert all(batch)
    assert nominated == [None, None]
    assert not [k for k in kinds if k.startswith("victim_")]


async def test_a_single_pod_takes_a_label_named_gang_whole(
    client: Client, ledger: Engine, emulator: Emulator
) -> None:
    ns = fresh_namespace()
    async with running_stack(
        client, ledger, emulator, settings=SETTINGS, scenario=one_member_in_the_way(ns)
    ) as stack:
        handle = await start_the_pod(stack, f"{ns}/urgent")
        result = await handle.result()
        kinds = stack.ledger_kinds(handle.id)
        chosen_on = sorted(
            (row["victim_name"], row["node"])
            for row in stack.ledger_rows(handle.id, "victim_chosen")
        )
        deleted_on = sorted(
            (row["victim_name"], row["node"])
            for row in stack.ledger_rows(handle.id, "victim_deleted")
        )
        deletes = successful_deletes(stack)
        delete_requests = stack.deletes()
        keepers = [untouched(stack, f"{ns}/keeper-{i}") for i in range(1, 4)]

    assert (result.outcome, result.node) == ("completed", "node-1")
    # train-y-0 alone would have made room; its gang goes with it, from node-2 and node-3:
    # each victim on its own node, in the result and in the ledger (issue 25, item 1).
    on_their_nodes = [("train-y-0", "node-1"), ("train-y-1", "node-2"), ("train-y-2", "node-3")]
    assert sorted((v.pod.name, v.node, v.fate) for v in result.victims) == [
        (name, node, "deleted") for name, node in on_their_nodes
    ]
    assert chosen_on == deleted_on == on_their_nodes
    assert sorted(deletes) == ["train-y-0", "train-y-1", "train-y-2"]
    assert sorted(delete_requests) == sorted(deletes)
    assert all(keepers)
    assert sorted(k for k in kinds if k.startswith("victim_chosen:")) == [
        "victim_chosen:train-y-0",
        "victim_chosen:train-y-1",
        "victim_chosen:train-y-2",
    ]
    for name in ("train-y-0", "train-y-1", "train-y-2"):
        assert kinds.count(f"victim_deleted:{name}") == 1
    assert kinds[-1] == "completed"


async def test_a_single_pod_does_not_split_a_label_named_gang(
    client: Client, ledger: Engine, emulator: Emulator
) -> None:
    ns = fresh_namespace()
    batch = [f"{ns}/batch"]
    async with running_stack(
        client, ledger, emulator, settings=SETTINGS, scenario=a_loose_pod_costs_less(ns)
    ) as stack:
        handle = await start_the_pod(stack, f"{ns}/urgent")
        scheduler = asyncio.create_task(bind_when_room(stack, f"{ns}/urgent", "node-3", batch))
        result = await handle.result()
        await scheduler
        kinds = stack.ledger_kinds(handle.id)
        deletes = successful_deletes(stack)
        gang = [untouched(stack, f"{ns}/train-y-{i}") for i in range(2)]

    # Taking train-y means both its pods (sum of priorities: two victims against one): the
    # loose pod goes instead, and the gang is left whole.
    assert (result.outcome, result.node) == ("completed", "node-3")
    assert [(v.pod.name, v.fate) for v in result.victims] == [("batch", "deleted")]
    assert deletes == ["batch"]
    assert all(gang)
    assert [k for k in kinds if k.startswith("victim_chosen:")] == ["victim_chosen:batch"]

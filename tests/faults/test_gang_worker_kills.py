"""A gang preemption survives its workers being killed mid-way (issue 19).

Scenario: the bundled gang scenario (`dev --scenario gang`) on the simulated cluster, whose
scheduler binds a gang all or nothing: ml/train-a, four trainers (minCount 4), pending; two
`preemptctl worker` processes. The group preemption is started as the trigger starts it
(one workflow for the group, local activities; the trigger loops leave it alone, so that
nothing else runs). Every worker is SIGKILLed the moment the
API server has carried out a victim's DELETE, before the answer leaves: at the first and
the third successful DELETE. Every killed worker is started again.

After it settles, judged only from the emulator's request log and final state, the ledger
and Temporal:
- only victims of the decision (train-b whole, on three nodes, and the notebook) are
  deleted, none twice, and each DELETE the API server carried out is in the ledger, even
  when its answer was lost with the worker;
- the gang is bound (where the simulated scheduler puts it: it tries the nominated nodes
  first and waits while one is being freed, but with the workers killed the notebook on
  node-3 may not be deleted yet when train-b is gone, and a trainer then binds on node-5);
- the group preemption completed with its four members bound, every victim deleted; or, when
  the gang was bound elsewhere first, it stopped deleting (aborted: the victims not deleted
  yet are spared and still there);
- every invariant of the fault suite holds (no duplicate or missing ledger event, no
  workflow left running, ...).
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from temporalio.client import Client

from preemptctl.emulator.resources import POD_GROUPS, PODS
from preemptctl.preemption.group_decision import GroupRef
from preemptctl.worker.scenarios import BUNDLED
from preemptctl.worker.starter import start_group_preemption
from preemptctl.workflows.contract import GroupPreemptionRequest, GroupPreemptionResult
from tests.faults.test_worker_kills import kill_after_deletes
from tests.support.fault_rig import INVARIANTS, Audit, Rig, fault_rig, is_successful_delete
from tests.support.temporal_server import PersistentTemporal

KILL_AT_DELETES = (1, 3)
# The workers' trigger loops leave the gang alone (its priority is below this), so that the
# test starts its one preemption after the kills are armed, and nothing else runs.
NO_TRIGGER = {"PREEMPT_MIN_PRIORITY": "1000000000"}
TRAINERS = [f"train-a-{i}" for i in range(4)]
VICTIMS = ["notebook", "train-b-0", "train-b-1", "train-b-2"]


def gang() -> dict[str, Any]:
    scenario: dict[str, Any] = orjson.loads(BUNDLED["gang"].read_bytes())
    for item in scenario["items"]:
        if "uid" in item["metadata"]:
            item["metadata"]["uid"] = str(uuid.uuid4())
    return scenario


@dataclass
class Outcome:
    audit: Audit
    deleted: Counter[str]  # pod name -> successful DELETEs
    trainers: dict[str, str | None]  # trainer -> node it is bound to
    still_there: set[str]  # pod names left at the end
    kill_rounds: int  # DELETEs after which every worker was killed
    result: GroupPreemptionResult


def start_the_group_preemption(rig: Rig) -> tuple[str, str]:
    """Start it as the trigger does (one workflow per group, local activities); its ID and
    run."""
    obj = rig.cluster.store.get(POD_GROUPS, "ml", "train-a")
    group = GroupRef("ml", "train-a", obj["metadata"]["uid"], int(obj["spec"]["priority"]))
    request = GroupPreemptionRequest(
        group, local_activities=True, call_timeout_seconds=8.0, scheduled_wait_seconds=60.0
    )

    async def start() -> tuple[str, str]:
        client = await Client.connect(rig.temporal.address)
        handle = await start_group_preemption(client, request, task_queue=rig.task_queue)
        return handle.id, handle.result_run_id or ""

    return asyncio.run(start())


def result_of(rig: Rig, workflow_id: str, run_id: str) -> GroupPreemptionResult:
    async def read() -> GroupPreemptionResult:
        client = await Client.connect(rig.temporal.address)
        handle = client.get_workflow_handle(
            workflow_id, run_id=run_id, result_type=GroupPreemptionResult
        )
        result: GroupPreemptionResult = await handle.result()
        return result

    return asyncio.run(read())


@pytest.fixture(scope="module")
def outcome(
    persistent_temporal: PersistentTemporal, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Outcome]:
    work = tmp_path_factory.mktemp("gang-kills")
    killed = threading.Event()
    with fault_rig(
        persistent_temporal,
        work,
        gang(),
        extra_env=NO_TRIGGER,
        arm=lambda rig: kill_after_deletes(rig, KILL_AT_DELETES, killed),
    ) as rig:
        workflow_id, run_id = start_the_group_preemption(rig)
        rounds = 0
        for _ in KILL_AT_DELETES:
            if not killed.wait(timeout=60.0):
                break
            rounds += 1
            killed.clear()
            for worker in rig.workers:
                rig.ensure_running(worker)
        rig.settle(timeout=120.0)
        pods = {p["metadata"]["name"]: p for p in rig.cluster.store.objects(PODS)}
        deleted = Counter(r.name for r in rig.requests if is_successful_delete(r))
        yield Outcome(
            rig.audit(),
            deleted,
            {t: (pods.get(t) or {}).get("spec", {}).get("nodeName") for t in TRAINERS},
            set(pods),
            rounds,
            result_of(rig, workflow_id, run_id),
        )


def test_the_workers_were_killed_after_deletes(outcome: Outcome) -> None:
    assert outcome.kill_rounds == len(KILL_AT_DELETES)
    assert outcome.audit.injected["worker kills"] >= len(KILL_AT_DELETES)


def test_only_victims_are_deleted_and_none_twice(outcome: Outcome) -> None:
    assert set(outcome.deleted) <= set(VICTIMS)
    assert max(outcome.deleted.values()) == 1


def test_the_gang_is_bound(outcome: Outcome) -> None:
    unbound = [trainer for trainer, node in outcome.trainers.items() if not node]
    assert (len(outcome.trainers), unbound) == (4, [])


def test_the_run_completed_or_stopped_for_a_gang_bound_elsewhere(outcome: Outcome) -> None:
    result = outcome.result
    deleted = sorted(v.pod.name for v in result.victims if v.fate == "deleted")
    assert deleted == sorted(outcome.deleted)
    if result.outcome == "completed":
        assert (result.bound, result.min_count, deleted) == (4, 4, VICTIMS)
    else:
        assert result.outcome == "aborted"
        assert "members of the pod group ml/train-a were bound elsewhere" in result.message
        spared = [v.pod.name for v in result.victims if v.fate == "spared"]
        assert spared and all(name in outcome.still_there for name in spared)


@pytest.mark.parametrize("invariant", INVARIANTS)
def test_invariant_holds_when_workers_are_killed_mid_gang(outcome: Outcome, invariant: str) -> None:
    outcome.audit.assert_holds(invariant)

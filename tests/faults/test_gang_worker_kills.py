"""A gang preemption survives its workers being killed mid-way, with the trigger on (issues
19 and 25).

Scenario: the bundled gang scenario (`dev --scenario gang`) on the simulated cluster, whose
scheduler binds a gang all or nothing: ml/train-a, four trainers (minCount 4), pending; the
room for it is ml/train-b (a `disruptionMode: all` gang on three nodes, node-1, node-2 and
node-5) and the notebook on node-3. Two `preemptctl worker` processes, their trigger loops
on: the workers start the group preemption themselves, as in production. Every worker is
SIGKILLed the moment the API server has carried out a victim's DELETE, before the answer
leaves: at the first and the third successful DELETE (mid-way through the 3-node gang's
deletes). Every killed worker is started again.

After it settles, judged only from the emulator's request log and final state, the ledger
and Temporal:
- only victims of the decision (train-b whole and the notebook) are deleted, none twice;
- the gang is bound whole (where the simulated scheduler puts it: with the workers killed,
  the notebook may not be deleted yet when train-b is gone, and a trainer then binds on
  node-5);
- the group's preemption ended once: completed, or, when the gang was bound elsewhere
  first, aborted with what it had not deleted yet spared and still there;
- every invariant of the fault suite holds, the gang ones included: the gang bound whole or
  not at all, nothing deleted for a gang left unbound, no victim unit split, no DELETE
  answered 2xx twice, each run ended once, every DELETE carried out in the ledger.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from preemptctl.emulator.resources import PODS
from preemptctl.worker.scenarios import BUNDLED
from tests.faults.test_worker_kills import kill_after_deletes
from tests.support.fault_rig import INVARIANTS, Audit, fault_rig, is_successful_delete
from tests.support.temporal_server import PersistentTemporal

KILL_AT_DELETES = (1, 3)
KILLS_WITHIN_SECONDS = 90.0  # a bound on waiting for them, not a claim about speed
TRAINERS = [f"train-a-{i}" for i in range(4)]
VICTIMS = ["notebook", "train-b-0", "train-b-1", "train-b-2"]
ENDS = ("completed", "failed", "preemption_aborted", "no_candidate", "ineligible", "dry_run")


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
    ends: list[tuple[str, dict[str, Any]]]  # the group preemption's ends: (kind, payload)


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
        arm=lambda rig: kill_after_deletes(rig, KILL_AT_DELETES, killed),
    ) as rig:
        rounds = 0
        deadline = time.monotonic() + KILLS_WITHIN_SECONDS
        while rounds < len(KILL_AT_DELETES) and time.monotonic() < deadline:
            # Two kills may come before the first restart (the victims but the last are
            # deleted in parallel): the rounds are counted from the request log.
            if killed.wait(timeout=0.5):
                killed.clear()
                for worker in rig.workers:
                    rig.ensure_running(worker)
            done = sum(1 for r in rig.requests if is_successful_delete(r))
            rounds = sum(1 for at in KILL_AT_DELETES if done >= at)
        for worker in rig.workers:
            rig.ensure_running(worker)
        rig.settle(timeout=120.0)
        pods = {p["metadata"]["name"]: p for p in rig.cluster.store.objects(PODS)}
        deleted = Counter(r.name for r in rig.requests if is_successful_delete(r))
        group_uid = rig.gangs["ml/train-a"].uid
        ends = [
            (row["kind"], dict(row["payload"]))
            for row in rig.ledger_rows()
            if row["kind"] in ENDS and row["preemptor_uid"] == group_uid
        ]
        yield Outcome(
            rig.audit(),
            deleted,
            {t: (pods.get(t) or {}).get("spec", {}).get("nodeName") for t in TRAINERS},
            set(pods),
            rounds,
            ends,
        )


def test_the_workers_were_killed_after_deletes(outcome: Outcome) -> None:
    assert outcome.kill_rounds == len(KILL_AT_DELETES)
    assert outcome.audit.injected["worker kills"] >= len(KILL_AT_DELETES)


def test_the_gangs_were_there_to_judge(outcome: Outcome) -> None:
    """ml/train-a pending; ml/train-b and ml/train-c victim units (disruptionMode all)."""
    assert (outcome.audit.gangs, outcome.audit.units) == ({"ml/train-a": 4}, 2)


def test_only_victims_are_deleted_and_none_twice(outcome: Outcome) -> None:
    assert set(outcome.deleted) <= set(VICTIMS)
    assert max(outcome.deleted.values()) == 1


def test_the_gang_is_bound_whole(outcome: Outcome) -> None:
    unbound = [trainer for trainer, node in outcome.trainers.items() if not node]
    assert (len(outcome.trainers), unbound) == (4, [])


def test_the_group_preemption_ended_once_completed_or_stopped_for_a_gang_bound_elsewhere(
    outcome: Outcome,
) -> None:
    [(kind, payload)] = outcome.ends
    if kind == "completed":
        assert sorted(outcome.deleted) == VICTIMS
    else:
        assert kind == "preemption_aborted", (kind, payload)
        assert set(VICTIMS) - set(outcome.deleted) <= outcome.still_there


@pytest.mark.parametrize("invariant", INVARIANTS)
def test_invariant_holds_when_workers_are_killed_mid_gang(outcome: Outcome, invariant: str) -> None:
    outcome.audit.assert_holds(invariant)

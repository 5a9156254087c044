"""A DELETE answered 2xx is never sent again for that UID (issue 29, item 2), pods and gangs,
counted from outside: by the API server's own log of the DELETEs it carried out.

Every deleted victim stays terminating for seconds, as on a real cluster, where a second
DELETE of a terminating pod is answered 200: a run that deleted a victim twice would show
here (with victims gone in half a second, as in the other fault suites, a second DELETE is
answered 404 and passes unseen: that is how a round's retry deleted victims twice unseen).

Scenarios, each with two `preemptctl worker` processes, their trigger loops on:
- pods: full nodes, each preemptor needing two victims of one node; the first DELETE of one
  victim answered 500 while its preemption's other victim is deleted; another victim's
  DELETE carried out but its answer lost on the way back; a third dropped before it is
  served; and every worker SIGKILLed the moment the API server has carried out the second
  successful DELETE, before its answer leaves;
- gangs: the bundled gang scenario (ml/train-a, four trainers, minCount 4, takes train-b
  whole on three nodes and the notebook): the first DELETE of one train-b member answered
  500 while the others are deleted, another member's answer lost, and every worker killed
  right after the first DELETE the API server carried out.

Judged from the emulator's request log, its final state and the ledger: each victim UID
deleted at most once (2xx), no pod deleted that no decision chose, every preemptor bound
(the gang whole), no train-b member left while another is deleted (a unit taken whole or
not at all), and every invariant of the fault suite.
"""

from __future__ import annotations

import threading
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
from tests.support.fault_rig import (
    INVARIANTS,
    Audit,
    Rig,
    crowded_cluster,
    fault_rig,
    is_successful_delete,
)
from tests.support.temporal_server import PersistentTemporal

# A deleted victim stays terminating this long: any DELETE sent again within it is answered
# 200 and counted. Longer than a lost worker's steps take to run again elsewhere (its
# workflow task's timeout, then a new worker's), so a step run again after the kill that
# sent its DELETE again would be seen (checked: with a victim found terminating deleted
# once more, every case here fails).
TERMINATING_SECONDS = 20.0


@dataclass
class Outcome:
    audit: Audit
    deleted: Counter[str]  # pod name -> DELETEs answered 2xx
    bound: dict[str, str | None]  # watched pod -> the node it is bound to
    left: set[str]  # pod names still there at the end
    injected: dict[str, int]  # rule -> times it fired
    kills: int


def faults_on(rig: Rig, fail: str, lose: str, drop: str | None = None) -> dict[str, Any]:
    """The first DELETE of `fail` answered 500, `lose`'s carried out and its answer lost,
    `drop`'s dropped before it is served."""
    faults = rig.faults
    rules = {
        f"500 on {fail}": faults.fail("delete", "pods", 500, times=1, name=fail),
        f"answer lost for {lose}": faults.lose("delete", "pods", times=1, name=lose),
    }
    if drop is not None:
        rules[f"dropped {drop}"] = faults.drop("delete", "pods", times=1, name=drop)
    return rules


def run(rig: Rig, killed: threading.Event, watched: list[str], rules: dict[str, Any]) -> Outcome:
    kills = 0
    if killed.wait(timeout=60.0):
        kills += 1
        for worker in rig.workers:
            rig.ensure_running(worker)
    rig.settle(timeout=120.0)
    pods = {p["metadata"]["name"]: p for p in rig.cluster.store.objects(PODS)}
    return Outcome(
        rig.audit(),
        Counter(r.name for r in rig.requests if is_successful_delete(r)),
        {name: (pods.get(name) or {}).get("spec", {}).get("nodeName") for name in watched},
        set(pods),
        {name: rule.hits for name, rule in rules.items()},
        kills,
    )


@pytest.fixture(scope="module")
def pods(
    persistent_temporal: PersistentTemporal, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Outcome]:
    killed = threading.Event()
    rules: dict[str, Any] = {}

    def arm(rig: Rig) -> None:
        rules.update(faults_on(rig, fail="batch-0-0", lose="batch-1-1", drop="batch-2-0"))
        kill_after_deletes(rig, (2,), killed)

    with fault_rig(
        persistent_temporal,
        tmp_path_factory.mktemp("exactly-once-pods"),
        crowded_cluster(3, 3, grace_period=30),
        arm=arm,
        max_grace_seconds=TERMINATING_SECONDS,
    ) as rig:
        yield run(rig, killed, [], rules)


def gang() -> dict[str, Any]:
    scenario: dict[str, Any] = orjson.loads(BUNDLED["gang"].read_bytes())
    for item in scenario["items"]:
        if "uid" in item["metadata"]:
            item["metadata"]["uid"] = str(uuid.uuid4())
    return scenario


TRAINERS = [f"train-a-{i}" for i in range(4)]
TRAIN_B = [f"train-b-{i}" for i in range(3)]


@pytest.fixture(scope="module")
def gangs(
    persistent_temporal: PersistentTemporal, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Outcome]:
    killed = threading.Event()
    rules: dict[str, Any] = {}

    def arm(rig: Rig) -> None:
        rules.update(faults_on(rig, fail="train-b-0", lose="train-b-2"))
        kill_after_deletes(rig, (1,), killed)

    with fault_rig(
        persistent_temporal,
        tmp_path_factory.mktemp("exactly-once-gangs"),
        gang(),
        arm=arm,
        max_grace_seconds=TERMINATING_SECONDS,
    ) as rig:
        yield run(rig, killed, TRAINERS, rules)


@pytest.mark.parametrize("case", ["pods", "gangs"])
def test_the_faults_and_the_kill_happened(case: str, request: pytest.FixtureRequest) -> None:
    outcome: Outcome = request.getfixturevalue(case)
    assert all(hits >= 1 for hits in outcome.injected.values()), outcome.injected
    assert outcome.kills == 1


@pytest.mark.parametrize("case", ["pods", "gangs"])
def test_no_delete_answered_2xx_is_sent_again(case: str, request: pytest.FixtureRequest) -> None:
    outcome: Outcome = request.getfixturevalue(case)
    assert outcome.deleted, "no DELETE was carried out"
    assert {name: n for name, n in outcome.deleted.items() if n > 1} == {}


@pytest.mark.parametrize("case", ["pods", "gangs"])
@pytest.mark.parametrize("invariant", INVARIANTS)
def test_invariant_holds(case: str, invariant: str, request: pytest.FixtureRequest) -> None:
    outcome: Outcome = request.getfixturevalue(case)
    outcome.audit.assert_holds(invariant)


def test_the_gang_is_bound_whole_and_train_b_went_whole(gangs: Outcome) -> None:
    assert all(gangs.bound[trainer] for trainer in TRAINERS), gangs.bound
    assert not set(TRAIN_B) & gangs.left  # taken whole: none of it left
    assert all(gangs.deleted[member] == 1 for member in TRAIN_B)

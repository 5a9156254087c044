"""A Temporal restart and a database outage while preemptions run, pods' and gangs'.

Scenario: full nodes of batch pods, two `preemptctl worker` processes, preemptors arriving
in three waves. The first batch pod of the first three nodes are one `disruptionMode: all`
gang (one victim unit on three nodes); a pending gang that cannot fit (each member larger
than a node) is there from the start; the second and the third wave each bring a pending
gang of two (minCount 2) beside their pods. Once the first wave has a decision on record,
the Temporal dev server is
SIGKILLed; the second wave arrives while it is down, and a few seconds later it is started
again on its SQLite file (its workflows survive; the workers must reconnect, and the trigger
loop, which met the outage, must go on). Once it has a
decision on record, every open connection to the ledger's Postgres is reset, and it is cut off
behind its proxy (listener closed) for a few seconds while the third wave arrives, then
restored.

After it settles, judged only from the emulator's request log and final state, the ledger
and Temporal:
- every preemptor is bound, the waves that arrived after each outage included, and every
  gang that fits is bound whole; the gang that cannot fit has none of its members bound and
  nothing deleted for it;
- no victim unit is taken in part;
- no victim UID is deleted twice;
- no pod is deleted that was not a decided victim;
- no victim a completed run decided on is left behind;
- no ledger event is duplicated or missing, and each run ends once;
- no workflow is left running.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.fault_rig import (
    INVARIANTS,
    Audit,
    Rig,
    crowded_cluster,
    fault_rig,
    gang_members,
    pod_group,
    preemptor,
    scale,
)
from tests.support.temporal_server import PersistentTemporal

OUTAGE_SECONDS = 5.0
GANG_PRIORITY = 2000
SPARE_NODES = 3  # beside the preemptors' room: the gangs' and some slack


def wave(rig: Rig, first: int, size: int, gang: str) -> None:
    """`size` preemptors and a pending gang of two 2-CPU members, named `gang`."""
    for k in range(first, first + size):
        rig.add(preemptor(f"urgent-{k}"))
    group = pod_group(gang, min_count=2, priority=GANG_PRIORITY)
    rig.add_gang(group, gang_members(group, cpu="2", nodes=[None, None]))


def with_gangs(scenario: dict[str, Any]) -> dict[str, Any]:
    """The crowded cluster, its first three nodes' first batch pods one victim unit, and a
    pending gang that cannot fit."""
    unit = pod_group("batch-unit", min_count=3, priority=1, disruption_all=True)
    for item in scenario["items"]:
        if item["metadata"]["name"] in {"batch-0-0", "batch-1-0", "batch-2-0"}:
            item["spec"]["schedulingGroup"] = {"podGroupName": "batch-unit"}
    huge = pod_group("huge", min_count=2, priority=GANG_PRIORITY, cannot_fit=True)
    scenario["items"] += [unit, huge, *gang_members(huge, cpu="6", nodes=[None, None])]
    return scenario


@pytest.fixture(scope="module")
def audit(
    persistent_temporal: PersistentTemporal, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Audit]:
    nodes = 3 * scale()
    size = nodes * 2 // 3  # three waves fill these nodes' room for two preemptors
    with fault_rig(
        persistent_temporal,
        tmp_path_factory.mktemp("service-outages"),
        with_gangs(crowded_cluster(nodes + SPARE_NODES * scale(), size)),
    ) as rig:
        rig.wait_for(lambda: rig.ledger_count("decision_made") >= 1, 30.0, "a first decision")
        persistent_temporal.kill()
        wave(rig, size, size, "train-1")  # seen by the trigger while Temporal is down
        time.sleep(OUTAGE_SECONDS)  # the outage's length, not an assertion about time
        persistent_temporal.restart()
        rig.wait_for(
            lambda: rig.ledger_count("decision_made") >= size + 1, 60.0, "a second-wave decision"
        )
        rig.proxy.drop_connections()  # every pooled connection dies at once, a pgbouncer restart
        rig.proxy.cut()
        wave(rig, 2 * size, size, "train-2")
        time.sleep(OUTAGE_SECONDS)  # the outage's length, not an assertion about time
        rig.proxy.restore()
        rig.settle(timeout=120.0 * scale())
        yield rig.audit()


def test_temporal_was_restarted_and_the_database_cut(audit: Audit) -> None:
    """Without the outages the invariants below would prove nothing about them."""
    assert audit.injected["temporal restarts"] == 1
    assert audit.injected["database cuts"] >= 1


def test_the_gangs_were_there_to_judge(audit: Audit) -> None:
    """Without them the gang invariants would hold by having nothing to judge."""
    assert (sorted(audit.gangs), audit.units) == (
        ["default/huge", "default/train-1", "default/train-2"],
        1,
    )
    assert audit.gangs["default/huge"] == 0


@pytest.mark.parametrize("invariant", INVARIANTS)
def test_invariant_holds_across_outages(audit: Audit, invariant: str) -> None:
    audit.assert_holds(invariant)

"""A Temporal restart and a database outage while preemptions run.

Scenario: full nodes of batch pods, two `preemptctl worker` processes, preemptors arriving
in three waves. Once the first wave has a decision on record, the Temporal dev server is
SIGKILLed; the second wave arrives while it is down, and a few seconds later it is started
again on its SQLite file (its workflows survive; the workers must reconnect, and the trigger
loop, which met the outage, must go on). Once it has a
decision on record, every open connection to the ledger's Postgres is reset, and it is cut off
behind its proxy (listener closed) for a few seconds while the third wave arrives, then
restored.

After it settles, judged only from the emulator's request log and the ledger:
- every preemptor is bound, the waves that arrived after each outage included;
- no victim UID is deleted twice;
- no pod is deleted that was not a decided victim;
- no victim a completed run decided on is left behind;
- no ledger event is duplicated or missing;
- no workflow is left running.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.support.fault_rig import (
    INVARIANTS,
    Audit,
    Rig,
    crowded_cluster,
    fault_rig,
    preemptor,
    scale,
)
from tests.support.temporal_server import PersistentTemporal

OUTAGE_SECONDS = 5.0


def wave(rig: Rig, first: int, size: int) -> None:
    for k in range(first, first + size):
        rig.add(preemptor(f"urgent-{k}"))


@pytest.fixture(scope="module")
def audit(
    persistent_temporal: PersistentTemporal, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Audit]:
    nodes = 3 * scale()
    size = nodes * 2 // 3  # three waves fill every node's room for two preemptors
    with fault_rig(
        persistent_temporal,
        tmp_path_factory.mktemp("service-outages"),
        crowded_cluster(nodes, size),
    ) as rig:
        rig.wait_for(lambda: rig.ledger_count("decision_made") >= 1, 30.0, "a first decision")
        persistent_temporal.kill()
        wave(rig, size, size)  # seen by the trigger while Temporal is down
        time.sleep(OUTAGE_SECONDS)  # the outage's length, not an assertion about time
        persistent_temporal.restart()
        rig.wait_for(
            lambda: rig.ledger_count("decision_made") >= size + 1, 60.0, "a second-wave decision"
        )
        rig.proxy.drop_connections()  # every pooled connection dies at once, a pgbouncer restart
        rig.proxy.cut()
        wave(rig, 2 * size, size)
        time.sleep(OUTAGE_SECONDS)  # the outage's length, not an assertion about time
        rig.proxy.restore()
        rig.settle(timeout=120.0 * scale())
        yield rig.audit()


def test_temporal_was_restarted_and_the_database_cut(audit: Audit) -> None:
    assert audit.injected["temporal restarts"] == 1
    assert audit.injected["database cuts"] >= 1


@pytest.mark.parametrize("invariant", INVARIANTS)
def test_invariant_holds_across_outages(audit: Audit, invariant: str) -> None:
    audit.assert_holds(invariant)

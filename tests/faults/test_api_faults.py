"""Random API faults and a hostile object in the watch stream.

Scenario: full nodes of batch pods, as many preemptors pending, two `preemptctl worker`
processes. A random share of the workers' API requests (every verb, watches included) is
answered 500, 503, 429 with Retry-After, or by a dropped connection. A pod whose priority is
text enters the pod stream; then more preemptors arrive, which only a stream that flowed on
past the bad object can serve.

After it settles, judged only from the emulator's request log and the ledger:
- every preemptor is bound;
- no victim UID is deleted twice;
- no pod is deleted that was not a decided victim;
- no victim a completed run decided on is left behind;
- no ledger event is duplicated or missing;
- no workflow is left running.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.fault_rig import (
    INVARIANTS,
    Audit,
    crowded_cluster,
    fault_rig,
    hostile_pod,
    preemptor,
    scale,
)
from tests.support.temporal_server import PersistentTemporal

SHARE = 0.15
ANSWERS = (" 500", " 503", " 429", " drop")


@pytest.fixture(scope="module")
def audit(
    persistent_temporal: PersistentTemporal, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Audit]:
    nodes = 3 * scale()
    with fault_rig(
        persistent_temporal,
        tmp_path_factory.mktemp("api-faults"),
        crowded_cluster(nodes, nodes),
        share=SHARE,
    ) as rig:
        rig.add(hostile_pod())
        for k in range(nodes, nodes + 2 * scale()):
            rig.add(preemptor(f"urgent-{k}"))
        rig.settle(timeout=90.0 * scale())
        rig.faults.enabled.clear()
        yield rig.audit()


def test_faults_were_injected(audit: Audit) -> None:
    """Without injected faults the invariants below would prove nothing about faults."""
    assert (
        sum(count for what, count in audit.injected.items() if " " in what and "kills" not in what)
        > 0
    )


@pytest.mark.parametrize("invariant", INVARIANTS)
def test_invariant_holds_under_api_faults(audit: Audit, invariant: str) -> None:
    audit.assert_holds(invariant)

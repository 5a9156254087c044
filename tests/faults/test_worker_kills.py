"""Workers SIGKILLed at random moments, and right after a DELETE succeeded.

Scenario: full nodes of batch pods, as many preemptors pending, two `preemptctl worker`
processes. Both workers are SIGKILLed the moment the API server has carried out a victim's
DELETE, before the answer leaves (the answer is lost: the pod is gone, and no worker knows
that it was this preemption that removed it); at a larger scale, again at every other
DELETE. Besides, a random worker is SIGKILLed at random moments. Every killed worker is
started again.

After it settles, judged only from the emulator's request log and the ledger:
- every preemptor is bound;
- no victim UID is deleted twice;
- no pod is deleted that was not a decided victim;
- no victim a completed run decided on is left behind;
- no ledger event is duplicated; none is missing: a victim whose DELETE succeeded has its
  `victim_deleted` row even when the answer was lost (issue 12, "Lost answers are
  misattributed");
- no workflow is left running.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from preemptctl.emulator import Request
from tests.support.fault_rig import INVARIANTS, Audit, Rig, crowded_cluster, fault_rig, scale
from tests.support.temporal_server import PersistentTemporal

# Which successful DELETEs kill every worker: the first, then every other one with scale.
KILL_AT_DELETES = tuple(range(1, 2 * scale(), 2))


def kill_after_deletes(rig: Rig, at: tuple[int, ...], killed: threading.Event) -> None:
    """Arm the request log: at the n-th successful DELETE, SIGKILL every worker (whichever
    sent it dies before reading the answer). `killed` is set after each such kill, for the
    test to start the workers again."""
    seen = 0
    lock = threading.Lock()

    def on_deleted(_request: Request) -> None:
        nonlocal seen
        with lock:
            seen += 1
            if seen not in at:
                return
        for worker in rig.workers:
            worker.kill()
        killed.set()

    rig.requests.on_deleted = on_deleted


def chaos(rig: Rig, kills: int, stop: threading.Event) -> None:
    """SIGKILL a random worker after a random pause, start it again, `kills` times."""
    for _ in range(kills):
        if stop.wait(rig.rng.uniform(0.5, 3.0)):
            return
        rig.restart_worker(rig.rng.choice(rig.workers))


@pytest.fixture(scope="module")
def audit(
    persistent_temporal: PersistentTemporal, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Audit]:
    nodes = 3 * scale()
    killed = threading.Event()
    with fault_rig(
        persistent_temporal,
        tmp_path_factory.mktemp("worker-kills"),
        crowded_cluster(nodes, nodes),
        arm=lambda rig: kill_after_deletes(rig, KILL_AT_DELETES, killed),
    ) as rig:
        stop = threading.Event()
        random_kills = threading.Thread(target=chaos, args=(rig, 2 * scale(), stop), daemon=True)
        random_kills.start()
        try:
            for _ in KILL_AT_DELETES:
                if not killed.wait(timeout=30.0 * scale()):
                    break
                killed.clear()
                for worker in rig.workers:
                    rig.ensure_running(worker)
            rig.settle(timeout=90.0 * scale())
        finally:
            stop.set()
            random_kills.join(timeout=120)
        yield rig.audit()


def test_workers_were_killed_after_a_delete(audit: Audit) -> None:
    assert audit.injected["worker kills"] >= len(KILL_AT_DELETES) * 2


@pytest.mark.parametrize("invariant", INVARIANTS)
def test_invariant_holds_when_workers_are_killed(audit: Audit, invariant: str) -> None:
    audit.assert_holds(invariant)

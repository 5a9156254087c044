"""`preemptctl retry` obeys shadow mode (issue 20, finding 4).

Scenario: one acting `preemptctl worker`; a full node of four 1-CPU batch pods and a pending
2-CPU preemptor. The API server refuses the worker's pod DELETEs (RBAC), so the preemption
fails after marking its victims. Then the operator hands preemption back to kube-scheduler:
the worker is stopped, the refusal lifted, and with `PREEMPT_DRY_RUN=true` (shadow mode) the
operator runs `preemptctl retry` on the failed preemption, whose first run was not a dry
run, and starts the worker again in that environment; it runs the retried run.

Judged from outside the worker (the emulator's request log, the cluster, the ledger):
- the acting run sent DELETEs, was refused them and failed; the retry started a new run
  after that failed acting one (else the checks below would judge something else);
- the retried run ended, and from the moment the retry was asked no pod was deleted,
  evicted or patched: no such request reached the API server;
- every batch pod is still there;
- the ledger records no victim deleted by the retried run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from subprocess import CompletedProcess
from typing import Any

import pytest

from preemptctl.emulator import Request
from preemptctl.emulator.resources import PODS
from preemptctl.ledger.kinds import TERMINAL_KINDS
from tests.support.fault_rig import crowded_cluster
from tests.support.hostile_rig import hostile_rig
from tests.support.temporal_server import PersistentTemporal

FAIL_SECONDS = 30.0
RETRIED_RUN_SECONDS = 30.0
POD_WRITES = frozenset({"create", "update", "patch", "delete"})
POD_RESOURCES = frozenset({"pods", "pods/status", "pods/eviction"})


@dataclass
class Outcome:
    failed_run: str | None
    refused_deletes: int  # before the retry: the acting run's DELETEs the API server refused
    retry: CompletedProcess[str]
    retried: dict[str, Any]
    writes_after_retry: list[Request]
    batch_left: list[str]
    retried_run_kinds: list[str]


@pytest.fixture(scope="module")
def outcome(
    persistent_temporal: PersistentTemporal, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Outcome]:
    work = tmp_path_factory.mktemp("retry-shadow")
    with hostile_rig(persistent_temporal, work, crowded_cluster(1, 1), start=False) as rig:
        rig.faults.deny("delete", "pods")
        worker = rig.worker
        worker.start()
        worker.wait_ready()
        rig.wait_bounded(lambda: bool(rig.ledger_rows("failed")), FAIL_SECONDS)
        failed = rig.ledger_rows("failed")
        worker.stop()
        rig.faults.clear()
        # Retried while no worker runs: no trigger can start a run of its own in between,
        # so the retry follows the failed acting run. The worker comes back in shadow mode
        # and runs the retried run.
        asked_at = time.time()
        retry = rig.preemptctl(
            "retry",
            "default/urgent-0",
            "--reason",
            "hostile suite: retry in shadow mode",
            "-o",
            "json",
            env=rig.cli_env(PREEMPT_DRY_RUN="true"),
        )
        retried = json.loads(retry.stdout) if retry.returncode == 0 else {}
        worker.env["PREEMPT_DRY_RUN"] = "true"
        worker.start()
        worker.wait_ready()
        run_id = retried.get("runId")

        def kinds() -> list[str]:
            return [row["kind"] for row in rig.ledger_rows() if row["run_id"] == run_id]

        rig.wait_bounded(lambda: bool(TERMINAL_KINDS & set(kinds())), RETRIED_RUN_SECONDS)
        refused = [
            request
            for request in rig.requests
            if request.received_at < asked_at and request.verb == "delete" and request.code == 403
        ]
        writes = [
            request
            for request in rig.requests
            if request.received_at >= asked_at
            and request.verb in POD_WRITES
            and request.resource in POD_RESOURCES
        ]
        batch = sorted(
            p["metadata"]["name"]
            for p in rig.cluster.store.objects(PODS)
            if p["metadata"]["name"].startswith("batch-")
        )
        yield Outcome(
            failed[0]["run_id"] if failed else None,
            len(refused),
            retry,
            retried,
            writes,
            batch,
            kinds(),
        )


def test_the_acting_run_was_refused_its_deletes_and_failed(outcome: Outcome) -> None:
    assert (outcome.refused_deletes > 0, outcome.failed_run is not None) == (True, True)


def test_the_retry_starts_a_new_run_after_the_failed_acting_one(outcome: Outcome) -> None:
    assert (outcome.retry.returncode, outcome.retry.stderr) == (0, "")
    # The ledger's `failed` run; Temporal may close it completed (its result carries the
    # failure) or failed, whichever the workflow's contract says.
    assert outcome.retried["previousRunId"] == outcome.failed_run, outcome.retried


def test_the_retried_run_ended(outcome: Outcome) -> None:
    assert TERMINAL_KINDS & set(outcome.retried_run_kinds), outcome.retried_run_kinds


def test_no_pod_is_deleted_evicted_or_patched_after_the_retry(outcome: Outcome) -> None:
    written = [f"{r.method} {r.path} -> {r.code}" for r in outcome.writes_after_retry]
    assert written == [], "\n".join(written)


def test_every_batch_pod_is_still_there(outcome: Outcome) -> None:
    assert outcome.batch_left == [f"batch-0-{j}" for j in range(4)]


def test_the_ledger_records_no_victim_deleted_by_the_retried_run(outcome: Outcome) -> None:
    assert "victim_deleted" not in outcome.retried_run_kinds

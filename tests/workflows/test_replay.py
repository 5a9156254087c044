"""Workflow code stays deterministic for the preemptions already recorded.

Histories of real runs (completed, dry run, failed on an RBAC denial, aborted when the
preemptor vanished, a replaced victim) are kept under tests/histories/ and replayed against
today's workflow code: a change that would break a running preemption fails here. An
intended change goes behind `workflow.patched`; then re-record with
`PREEMPT_RECORD_HISTORIES=1 .venv/bin/pytest tests/workflows/test_full_stack_*.py` and keep
the old files too. (They were re-recorded, with no patch kept, when each Kubernetes
activity began appending its own ledger event: no history recorded before the first release
needs the older shape; likewise when aborted and failed runs began removing their spared
victims' DisruptionTarget.) When the workflow became the one writer of an aborted end
(`record_end`, behind the patch `abort-recorded-by-the-workflow`), the aborted run recorded
before it was kept as `preemptor-vanished-aborted-by-the-activity` (no `record_end`: the
delete activity recorded the abort) and re-recorded as `preemptor-vanished-aborted`.
Group preemptions (`GroupPreemption`) have theirs: a gang preemption completed, one aborted
when its group was deleted after the decision, one failed on an RBAC denial
(tests/workflows/test_full_stack_groups.py records them). When a pod preemption began to
take its victims in rounds (behind the patch `victims-in-rounds`), runs from the patch on
were recorded beside the older ones: `two-victims-in-rounds-completed` (test_costs.py) and
`rbac-denied-in-rounds-failed` (test_ui_story.py). Runs of the one runbook (issue 29: each
victim its own step, the select local, the run ending at the last victim's delete) follow it
because their request says so (`runbook` 2), not by a patch: the older runs, whose requests
carry no such field, replay their own runbook. Theirs are recorded beside the others,
`one-runbook-*` (every test that keeps a history records one, as the harness starts runs of
the one runbook).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from preemptctl.worker.temporal_worker import workflow_runner
from preemptctl.workflows.group_preemption import GroupPreemptionWorkflow
from preemptctl.workflows.preemption import PreemptionWorkflow

HISTORIES = sorted((Path(__file__).resolve().parents[1] / "histories").glob("*.json"))


def test_the_recorded_histories_are_there() -> None:
    names = {path.stem for path in HISTORIES}
    assert {"online-offline-completed", "dry-run", "rbac-denied-failed"} <= names
    assert {"preemptor-vanished-aborted", "victim-replaced"} <= names
    assert "preemptor-vanished-aborted-by-the-activity" in names
    assert {"gang-completed", "gang-group-deleted-aborted", "gang-rbac-denied-failed"} <= names
    assert {"two-victims-in-rounds-completed", "rbac-denied-in-rounds-failed"} <= names
    one_runbook = {
        "one-runbook-online-offline-completed",
        "one-runbook-two-victims-completed",
        "one-runbook-dry-run",
        "one-runbook-rbac-denied-failed",
        "one-runbook-preemptor-vanished-aborted",
        "one-runbook-victim-replaced",
        "one-runbook-gang-completed",
        "one-runbook-gang-group-deleted-aborted",
        "one-runbook-gang-rbac-denied-failed",
    }
    assert one_runbook <= names


@pytest.mark.parametrize("path", HISTORIES, ids=[path.stem for path in HISTORIES])
async def test_recorded_history_replays_deterministically(path: Path) -> None:
    history = WorkflowHistory.from_json(f"replay-{path.stem}", path.read_text())
    replayer = Replayer(
        workflows=[PreemptionWorkflow, GroupPreemptionWorkflow], workflow_runner=workflow_runner()
    )
    await replayer.replay_workflow(history)

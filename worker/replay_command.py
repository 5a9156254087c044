"""`preemptctl replay HISTORY.json`: check a recorded preemption against this worker's code.

Export a preemption's history from the Temporal UI (Download) or with
`temporal workflow show --workflow-id preemption-<uid> --output json > history.json`, then
replay it: a clean replay means this version of the worker can resume and finish that
preemption; a non-determinism error names the first step where the code and the history
disagree. (To re-run a failed preemption, reset it in the UI or with
`temporal workflow reset --workflow-id ... --type LastWorkflowTask`; a pod that is still
unschedulable also gets a fresh preemption from the trigger loop.)
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from preemptctl.worker.errors import UsageError
from preemptctl.worker.temporal_worker import workflow_runner
from preemptctl.workflows.preemption import PreemptionWorkflow


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="replay a recorded preemption history against this worker's workflow code",
    )
    parser.add_argument("history", metavar="HISTORY.json", help="a workflow history as JSON")
    parser.set_defaults(handler=run)


async def replay(path: str) -> None:
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror}") from None
    try:
        history = WorkflowHistory.from_json(Path(path).stem, text)
    except Exception as error:
        raise UsageError(f"{path} is not a Temporal workflow history: {error}") from None
    # The SDK's replayer cannot report a history that does not open with the workflow's
    # start (it stops responding), so check that here.
    first = history.events[0] if history.events else None
    if first is None or first.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
        raise UsageError(f"{path} is not a workflow history: it does not begin with its start")
    started = first.workflow_execution_started_event_attributes
    if started.workflow_type.name != "Preemption":
        raise UsageError(
            f"{path} is a history of a {started.workflow_type.name} workflow, not a preemption"
        )
    replayer = Replayer(workflows=[PreemptionWorkflow], workflow_runner=workflow_runner())
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    if result.replay_failure is not None:
        raise UsageError(f"{path} does not replay on this version: {result.replay_failure}")


def run(args: argparse.Namespace) -> int:
    asyncio.run(replay(args.history))
    print(f"{args.history}: replays cleanly on this version")
    return 0

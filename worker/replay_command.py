"""`preemptctl replay HISTORY.json`: check a recorded preemption against this worker's code.

Export a preemption's history from the Temporal UI (Download) or with
`temporal workflow show --workflow-id preemption-<namespace>-<name>-<uid> --output json`
into a file, then replay it: a clean replay means this version of the worker can resume and
finish that preemption; a non-determinism error names the first step where the code and the history
disagree. (To re-run a failed preemption, reset it in the UI or with
`temporal workflow reset --workflow-id ... --type LastWorkflowTask`; a pod that is still
unschedulable also gets a fresh preemption from the trigger loop.)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import stat
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from preemptctl.worker.errors import UsageError
from preemptctl.worker.temporal_worker import workflow_runner
from preemptctl.workflows.preemption import PreemptionWorkflow

# A preemption's history is tens of kilobytes; the biggest real ones stay far below this.
MAX_HISTORY_BYTES = 64 * 1024 * 1024
# The replayer runs the workflow code against recorded events only (no timers fire, no I/O),
# so a real history replays in a second or two; longer means it is waiting for an event the
# history does not have.
REPLAY_TIMEOUT_SECONDS = 60.0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="replay a recorded preemption history against this worker's workflow code",
        description="Check that this version of the workflow code would make the same "
        "decisions as the recorded run (export it from the Temporal UI, or with `temporal "
        "workflow show --output json`). Exit 0: it replays cleanly; exit 2: it does not, or "
        "the file is not a preemption's history.",
    )
    parser.add_argument("history", metavar="HISTORY.json", help="a workflow history as JSON")
    parser.set_defaults(handler=run)


def _read(path: str) -> str:
    """The file's text, if it is a regular file of a history's size, in UTF-8."""
    try:
        with open(path, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise UsageError(f"{path} is not a regular file")
            data = handle.read(MAX_HISTORY_BYTES + 1)
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror}") from None
    if len(data) > MAX_HISTORY_BYTES:
        raise UsageError(f"{path} is larger than {MAX_HISTORY_BYTES // 2**20} MiB")
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not a workflow history: it is not UTF-8 JSON") from None


def _check_shape(path: str, history: WorkflowHistory) -> None:
    """Refuse what the SDK's replayer cannot report: it stops responding on a history that
    does not open with the workflow's start, or that has no workflow task to replay."""
    events = history.events
    first = events[0] if events else None
    if first is None or first.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
        raise UsageError(f"{path} is not a workflow history: it does not begin with its start")
    started = first.workflow_execution_started_event_attributes
    if started.workflow_type.name != "Preemption":
        raise UsageError(
            f"{path} is a history of a {started.workflow_type.name} workflow, not a preemption"
        )
    ids = [event.event_id for event in events]
    if ids != list(range(1, len(ids) + 1)):
        raise UsageError(f"{path} is not a whole history: its event IDs are not 1, 2, 3, ...")
    if not any(e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED for e in events):
        raise UsageError(
            f"{path} has no workflow task yet (the run had only started): nothing to replay"
        )


async def replay(path: str) -> None:
    text = _read(path)
    try:
        history = WorkflowHistory.from_json(os.path.splitext(os.path.basename(path))[0], text)
    except Exception as error:
        reason = str(error).strip().splitlines()[0][:200] if str(error).strip() else "malformed"
        raise UsageError(f"{path} is not a Temporal workflow history: {reason}") from None
    _check_shape(path, history)
    replayer = Replayer(workflows=[PreemptionWorkflow], workflow_runner=workflow_runner())
    try:
        result = await asyncio.wait_for(
            replayer.replay_workflow(history, raise_on_replay_failure=False),
            timeout=REPLAY_TIMEOUT_SECONDS,
        )
    except TimeoutError:
        raise UsageError(
            f"{path} did not finish replaying in {REPLAY_TIMEOUT_SECONDS:g}s: the history is "
            "cut short or corrupted"
        ) from None
    if result.replay_failure is not None:
        failure = str(result.replay_failure).strip().splitlines()
        raise UsageError(
            f"{path} does not replay on this version: {failure[0] if failure else 'failed'}"
        )


def run(args: argparse.Namespace) -> int:
    asyncio.run(replay(args.history))
    print(f"{args.history}: replays cleanly on this version")
    return 0

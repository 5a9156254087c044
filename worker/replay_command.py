"""`preemptctl replay`: a recorded preemption checked against this version, two ways.

`preemptctl replay --decision PREEMPTION-ID|RUN-ID` answers "would this version have evicted
the same pods?": it loads the planner inputs the ledger recorded for that run's decision (or
the preemption's latest decision), a pod's or a pod group's, plans again with this version's
planner, and prints `same decision`, or each difference (verdict, node, victims removed and
added, for a group where a member is placed, the criterion that decided). The recorded
inputs are read as untrusted data: sizes and counts are capped before anything is built, and
what is damaged is one line naming the problem. Exit codes: 0 same decision, 3 a different
decision, 2 no such decision (or bad usage), 1 the ledger unreachable or the inputs not kept
(too large) or unreadable.

`preemptctl replay HISTORY.json` checks workflow determinism only (can this version's
workflow code resume that run?), not the planner's choice. Export a preemption's history
from the Temporal UI (Download) or with
`temporal workflow show --workflow-id preemption-<namespace>-<name>-<uid> --output json`
into a file, then replay it: a clean replay means this version of the worker can resume and
finish that preemption; a non-determinism error names the first step where the code and the
history disagree. (To re-run a failed preemption, reset it in the UI or with
`temporal workflow reset --workflow-id ... --type LastWorkflowTask`; a pod that is still
unschedulable also gets a fresh preemption from the trigger loop.)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import stat
from datetime import datetime
from typing import Any

import orjson
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from preemptctl.ledger.engine import translated_errors
from preemptctl.ledger.errors import LedgerError, LedgerUnavailableError
from preemptctl.ledger.inputs import RECORDING_VERSION, RecordedInputs, latest
from preemptctl.ledger.narrative import format_time
from preemptctl.preemption.decision import Strategy
from preemptctl.preemption.errors import PlannerInputError
from preemptctl.preemption.inputs_replay import Rebuilt, RecordedInputsError, compare, rebuild
from preemptctl.preemption.planner import plan_for, plan_group
from preemptctl.preemption.recorded_inputs import decision_summary, group_decision_summary
from preemptctl.worker.errors import Unavailable, UsageError, add_output_flag
from preemptctl.worker.ledger_commands import READ_DATABASE_HELP, open_ledger
from preemptctl.worker.temporal_worker import workflow_runner
from preemptctl.workflows.preemption import PreemptionWorkflow

# A preemption's history is tens of kilobytes; the biggest real ones stay far below this.
MAX_HISTORY_BYTES = 64 * 1024 * 1024
# The replayer runs the workflow code against recorded events only (no timers fire, no I/O),
# so a real history replays in a second or two; longer means it is waiting for an event the
# history does not have.
REPLAY_TIMEOUT_SECONDS = 60.0
EXIT_SAME = 0
EXIT_DIFFERENT = 3
"""A different decision: not a failure of the command, and not bad usage either."""
MAX_ID_LENGTH = 255
DETERMINISM_ONLY = (
    "this checks workflow determinism only; `preemptctl replay --decision RUN-ID` re-plans "
    "the decision"
)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="re-plan a recorded decision (--decision), or replay a workflow history",
        description="--decision PREEMPTION-ID|RUN-ID: plan the recorded decision again from "
        "its recorded inputs with this version; exit 0 same decision, 3 a different one "
        "(each difference printed), 2 no such decision, 1 the inputs were not kept or the "
        "ledger is unreachable. HISTORY.json: check that this version's workflow code "
        "replays the exported run (workflow determinism only); exit 0 it does, 2 it does "
        "not or the file is not a preemption's history.",
    )
    parser.add_argument(
        "history", metavar="HISTORY.json", nargs="?", help="a workflow history as JSON"
    )
    parser.add_argument(
        "--decision",
        metavar="PREEMPTION-ID|RUN-ID",
        help="a run's decision, or a preemption's latest, as recorded in the ledger",
    )
    add_output_flag(parser, ("text", "json"), default="text")
    parser.add_argument(
        "--database-url",
        metavar="URL",
        help="for --decision: the " + READ_DATABASE_HELP,
    )
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
        async with asyncio.timeout(REPLAY_TIMEOUT_SECONDS):
            result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
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
    if (args.history is None) == (args.decision is None):
        raise UsageError("give either --decision PREEMPTION-ID|RUN-ID or HISTORY.json")
    if args.decision is not None:
        return replay_decision(args)
    if args.output != "text":
        raise UsageError("-o json is for --decision; a history replay prints one line")
    asyncio.run(replay(args.history))
    print(f"{args.history}: replays cleanly on this version ({DETERMINISM_ONLY})")
    return 0


# -- replay --decision ---------------------------------------------------------------------


def _decision_id(text: str) -> str:
    if not text.strip() or len(text) > MAX_ID_LENGTH or not text.isprintable():
        raise UsageError(
            f"--decision {text[:80]!r} is not a preemption or run ID "
            "(see `preemptctl history -o json`)"
        )
    return text


def replay_decision(args: argparse.Namespace) -> int:
    decision = _decision_id(args.decision)
    with open_ledger(args) as engine:
        try:
            with translated_errors(engine):
                recorded = latest(engine, decision)
        except LedgerUnavailableError as error:
            raise Unavailable(str(error)) from None
        except LedgerError as error:
            raise UsageError(str(error)) from None
    if recorded is None:
        raise UsageError(
            f"no recorded decision for {decision!r}: not a preemption or run ID in this "
            "ledger, or its inputs were recorded before this version (or pruned)"
        )
    report = replayed(recorded)
    if args.output == "json":
        print(orjson.dumps(report).decode())
    else:
        print(_text(report))
    return EXIT_SAME if report["same"] else EXIT_DIFFERENT


def replayed(recorded: RecordedInputs) -> dict[str, Any]:
    """The recorded decision planned again: both decisions, and how they differ."""
    try:
        rebuilt = rebuild(*recorded.replayable())
        now = _planned(rebuilt)
    except (ValueError, RecordedInputsError, PlannerInputError, LedgerError) as error:
        raise Unavailable(f"cannot replay the decision of run {recorded.run_id}: {error}") from None
    differences = compare(rebuilt.recorded, now)
    walked = sorted(set(now["evaluated"]) & rebuilt.summarised)
    return {
        "same": not differences,
        "preemptionId": recorded.preemption_id,
        "runId": recorded.run_id,
        "preemptor": recorded.preemptor,
        "recordedAt": recorded.recorded_at.isoformat(),
        "recordedWith": recorded.planner_version,
        "replayedWith": RECORDING_VERSION,
        "claimsRespected": len(rebuilt.claims),
        "recorded": rebuilt.recorded,
        "replayed": now,
        "differences": differences,
        "summarisedNodesWalked": walked,
    }


def _planned(rebuilt: Rebuilt) -> dict[str, Any]:
    """This version's decision over the rebuilt inputs, summarised as the recorded one."""
    if rebuilt.preemptor is None:
        group = plan_group(rebuilt.snapshot, rebuilt.pod_group, rebuilt.args)
        return group_decision_summary(group)
    strategy = Strategy(rebuilt.strategy)
    return decision_summary(plan_for(rebuilt.snapshot, rebuilt.preemptor, strategy, rebuilt.args))


def _outcome(summary: dict[str, Any]) -> str:
    verdict = str(summary["verdict"])
    victims = ", ".join(f"{v['namespace']}/{v['name']}" for v in summary["victims"])
    if summary["node"]:
        verdict += f" on {summary['node']}: {victims or 'no victims'}"
    elif summary.get("nominations"):
        nodes = len(set(summary["nominations"].values()))
        placed = len(summary["nominations"])
        verdict += f": {placed} pod(s) placed on {nodes} node(s), victims {victims or 'none'}"
    if summary["criterion"]:
        verdict += f" (chosen by {summary['criterion']})"
    return verdict


def _text(report: dict[str, Any]) -> str:
    header = (
        f"decision for {report['preemptor']} (preemption {report['preemptionId']}, run "
        f"{report['runId']}), recorded {format_time(_parse(report['recordedAt']))} by "
        f"preemptctl {report['recordedWith']}, replayed by preemptctl {report['replayedWith']}"
    )
    lines = []
    if report["same"]:
        lines.append(f"same decision: {_outcome(report['replayed'])}")
        lines.append(header)
    else:
        lines.append("different decision:")
        lines.extend(f"  {line}" for line in report["differences"])
        lines.append(f"  recorded: {report['recorded']['message']}")
        lines.append(f"  replayed: {report['replayed']['message']}")
        lines.append(header)
    if report["summarisedNodesWalked"]:
        lines.append(
            "note: the replay's dry run judged node(s) whose pods were recorded as totals only "
            f"({', '.join(report['summarisedNodesWalked'][:5])}"
            f"{', ...' if len(report['summarisedNodesWalked']) > 5 else ''}): victims there "
            "are not known, so the difference may come from the recording, not the planner"
        )
    return "\n".join(lines)


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text)

"""The Temporal UI tells a preemption's story without the CLI (issue 21): checked through the
UI server's own HTTP API, the JSON its pages load, not its pixels.

A Temporal dev server with its UI, the emulator and a Postgres ledger; a worker as
production runs it (local activities). On one full node, `urgent` preempts victim-0 and
victim-1; in a second run the API server refuses the DELETE of victim-0 (RBAC).

Scenarios:
- the list finds each run by its preemptor (`PreemptorPod`), its outcome
  (`PreemptionOutcome`) and the pods it took (`VictimPods`);
- the workflow page's summary names the preemptor; its current details (the User Metadata
  tab) tell the decision in Markdown: the node, each victim with its UID, the criterion
  that decided, the `preemptctl explain` command, and how it ended;
- a completed run's result opens on the decision in one line and says nothing of
  retrying;
- every step in the history has a summary, and each victim's step names its pod and UID;
- a failed run's failure says the cause and the fix in one line (the victim, the verb and
  resource to grant), and no stack trace is anywhere in its history; its result, in the
  failure's details, says that retrying cannot help.
- a group run (the bundled gang scenario: ml/train-a takes ml/train-b whole, on three nodes,
  and the notebook) is found by its group, its victim group and a victim pod; its story names
  the members' nodes, each victim with its UID, its own node and its unit, why each unit was
  taken, and how it ended; each victim's step names the victim's own node (issue 25, item 5).
"""

from __future__ import annotations

import asyncio
import base64
import http.cookiejar
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import Engine
from temporalio.client import WorkflowFailureError
from temporalio.testing import WorkflowEnvironment

from preemptctl.emulator import Emulator
from preemptctl.worker.ports import free_port
from preemptctl.workflows import search_attributes
from tests.support.temporal import temporal_cli
from tests.workflows.harness import Stack, keep_history, running_stack
from tests.workflows.scenarios import one_full_node
from tests.workflows.test_full_stack_groups import gang

pytestmark = pytest.mark.asyncio(loop_scope="session")

VICTIMS = ["default/victim-0", "default/victim-1"]
# The bundled gang scenario's decision: its victims, their priorities, nodes and units.
GANG_VICTIM_PLACES = [
    ("ml/train-b-0", 1000, "node-1", "podGroup ml/train-b"),
    ("ml/train-b-1", 1000, "node-2", "podGroup ml/train-b"),
    ("ml/train-b-2", 1000, "node-5", "podGroup ml/train-b"),
    ("ml/notebook", 100, "node-3", "pod ml/notebook"),
]


@dataclass
class UI:
    """The UI server's HTTP API, as its pages call it (a POST carries the CSRF token the UI
    server set in a cookie, as the pages send it)."""

    env: WorkflowEnvironment
    base: str
    cookies: http.cookiejar.CookieJar = field(default_factory=http.cookiejar.CookieJar)

    def _open(self, request: urllib.request.Request) -> Any:
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.cookies))
        with opener.open(request, timeout=10) as answer:
            return json.loads(answer.read())

    def get(self, path: str) -> Any:
        return self._open(urllib.request.Request(self.base + path))

    def post(self, path: str, body: dict[str, Any]) -> Any:
        self.get("/api/v1/settings")  # the UI server sets its CSRF cookie
        token = next(c.value for c in self.cookies if c.name == "_csrf")
        request = urllib.request.Request(
            self.base + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "X-CSRF-TOKEN": token or ""},
            method="POST",
        )
        try:
            return self._open(request)
        except urllib.error.HTTPError as error:
            raise AssertionError(f"{error}: {error.read().decode()}") from None

    def workflow(self, workflow_id: str) -> Any:
        return self.get(f"/api/v1/namespaces/default/workflows/{quoted(workflow_id)}")

    def history(self, workflow_id: str) -> list[dict[str, Any]]:
        path = f"/api/v1/namespaces/default/workflows/{quoted(workflow_id)}/history"
        events: list[dict[str, Any]] = self.get(path + "?maximumPageSize=1000")["history"]["events"]
        return events

    def listed(self, query: str) -> list[str]:
        found = self.get(f"/api/v1/namespaces/default/workflows?query={quoted(query)}")
        return [e["execution"]["workflowId"] for e in found.get("executions") or []]

    def current_details(self, workflow_id: str, run_id: str) -> str:
        path = (
            f"/api/v1/namespaces/default/workflows/{quoted(workflow_id)}"
            "/query/__temporal_workflow_metadata"
        )
        answer = self.post(
            path,
            {
                "execution": {"workflowId": workflow_id, "runId": run_id},
                "query": {"queryType": "__temporal_workflow_metadata"},
            },
        )
        [payload] = answer["queryResult"]["payloads"]
        metadata = decoded(payload)
        details: str = metadata["currentDetails"]
        return details


def stack_traces(found: Any) -> list[str]:
    """Every non-empty stack trace anywhere in a history's JSON (a failure's, its causes',
    a step's)."""
    if isinstance(found, dict):
        own = [found["stackTrace"]] if found.get("stackTrace") else []
        return own + [t for value in found.values() for t in stack_traces(value)]
    if isinstance(found, list):
        return [t for value in found for t in stack_traces(value)]
    return []


def quoted(text: str) -> str:
    return urllib.parse.quote(text, safe="")


def decoded(payload: dict[str, Any]) -> Any:
    """A payload as the UI decodes it (JSON in base64)."""
    return json.loads(base64.b64decode(payload["data"]))


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def ui() -> AsyncIterator[UI]:
    port = free_port()
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_cli(),
        search_attributes=search_attributes.ALL,
        dev_server_log_level="error",
        ui=True,
        ui_port=port,
    )
    try:
        ui = UI(env, f"http://127.0.0.1:{port}")
        for _ in range(200):  # the UI server starts beside the dev server, a moment later
            try:
                ui.listed("WorkflowType = 'Preemption'")
                break
            except (urllib.error.URLError, ConnectionError):
                await asyncio.sleep(0.1)
        yield ui
    finally:
        await env.shutdown()


@dataclass
class Run:
    workflow_id: str
    run_id: str
    stack: Stack


async def visible(ui: UI, query: str) -> list[str]:
    for _ in range(100):  # visibility trails the workflow by a moment
        found = ui.listed(query)
        if found:
            return found
        await asyncio.sleep(0.1)
    return []


@dataclass
class Told:
    """What the UI shows of one finished run: the list's answer to each query, the summary,
    the story (the User Metadata tab), and the history."""

    listed: dict[str, list[str]]
    summary: str
    details: str
    history: list[dict[str, Any]]

    def result(self) -> Any:
        """The run's result, as the UI decodes it."""
        [completed] = [
            e for e in self.history if e["eventType"].endswith("WORKFLOW_EXECUTION_COMPLETED")
        ]
        [result] = completed["workflowExecutionCompletedEventAttributes"]["result"]["payloads"]
        return decoded(result)

    def steps(self) -> list[str]:
        """Each step's summary, in the history's order (a local activity's is its marker's)."""
        return [
            decoded(e["userMetadata"]["summary"])
            for e in self.history
            if e["eventType"].endswith("ACTIVITY_TASK_SCHEDULED")
            or e.get("markerRecordedEventAttributes", {}).get("markerName") == "core_local_activity"
        ]


async def told_by_the_ui(ui: UI, workflow_id: str, uid: str, queries: dict[str, str]) -> Told:
    """What the UI shows of a run, asked while its worker runs (it answers the query for
    the story); `queries` are list queries, each narrowed to the run's `PreemptorUid`."""
    listed = {
        name: await visible(ui, f'{query} AND PreemptorUid = "{uid}"')
        for name, query in queries.items()
    }
    page = ui.workflow(workflow_id)
    run_id = page["workflowExecutionInfo"]["execution"]["runId"]
    # From a thread: the worker answering the query runs on this loop.
    details = await asyncio.to_thread(ui.current_details, workflow_id, run_id)
    summary = decoded(page["executionConfig"]["userMetadata"]["summary"])
    return Told(listed, summary, details, ui.history(workflow_id))


async def test_a_completed_run_tells_its_story(ui: UI, ledger: Engine, emulator: Emulator):
    async with running_stack(ui.env.client, ledger, emulator, one_full_node()) as stack:
        victim_uids = {key: stack.preemptor(key).uid for key in VICTIMS}
        handle = await stack.start("default/urgent", local_activities=True)
        await handle.result()
        uid = stack.preemptor("default/urgent").uid
        told = await told_by_the_ui(
            ui,
            handle.id,
            uid,
            {
                "by preemptor": 'PreemptorPod = "default/urgent"',
                "by outcome": 'PreemptionOutcome = "completed"',
                "by victim": 'VictimPods = "default/victim-1"',
            },
        )
    assert told.listed == {name: [handle.id] for name in told.listed}
    assert told.summary == "Preempt for default/urgent (priority 1000000)"

    details = told.details
    assert details.startswith(
        "**Preempt 2 pod(s) on node-1 for default/urgent (priority 1000000)**\n\n"
        "- default/victim-0 (uid "
    )
    assert "\nWhy: preempt 2 pod(s) on node-1 (0 PDB violation(s)); chosen by " in details
    assert "More: `preemptctl explain default/urgent`" in details
    assert details.endswith(
        "**Ended completed**: 2 victim(s) preempted on node-1 for default/urgent, nominated "
        "there; its bind is the scheduler's, recorded when the watch shows it"
    )

    result = told.result()
    assert sorted(result)[0] == "decision"
    assert result["decision"].startswith(
        "Preempt 2 pod(s) on node-1 for default/urgent (priority 1000000): default/victim-0 (uid "
    )
    assert result["decision"].endswith("More: preemptctl explain default/urgent")
    assert (result["outcome"], result["retryable"]) == ("completed", None)

    steps = told.steps()
    assert all(steps), steps  # every step has its summary
    assert {"select victims for default/urgent", "nominate default/urgent to node-1"} <= set(steps)
    assert steps[-1] == "ledger: completed"
    for victim in VICTIMS:  # one step per victim: mark, then delete
        named = f"{victim} (uid {victim_uids[victim]}) on node-1"
        assert [s for s in steps if named in s] == [f"preempt {named}"]


async def test_a_failed_run_says_its_cause_and_its_fix(ui: UI, ledger: Engine, emulator: Emulator):
    async with running_stack(ui.env.client, ledger, emulator, one_full_node()) as stack:
        emulator.faults.deny("delete", "pods", name="victim-0")
        handle = await stack.start("default/urgent", local_activities=True)
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        await keep_history(handle, "one-runbook-rbac-denied-failed-told")
        history = ui.history(handle.id)

    [failed] = [e for e in history if e["eventType"].endswith("WORKFLOW_EXECUTION_FAILED")]
    failure = failed["workflowExecutionFailedEventAttributes"]["failure"]
    assert failure["message"] == (
        "victim default/victim-0 could not be preempted: delete pods default/victim-0: the "
        'controller is not allowed to delete pods: pods "victim-0" is forbidden: User '
        '"system:serviceaccount:preemptctl:preemptctl" cannot delete resource "pods" in API '
        'group "" in the namespace "default" — grant verb "delete" on resource "pods" in API '
        'group "" to the controller\'s ClusterRole (see deploy/ RBAC)'
    )
    assert "\n" not in failure["message"]
    assert failure.get("stackTrace", "") == ""
    assert "cause" not in failure
    [carried] = failure["applicationFailureInfo"]["details"]["payloads"]
    assert (decoded(carried)["outcome"], decoded(carried)["retryable"]) == ("failed", False)

    assert stack_traces(history) == []


async def test_a_group_run_tells_its_story(ui: UI, ledger: Engine, emulator: Emulator):
    async with running_stack(ui.env.client, ledger, emulator, gang()) as stack:
        victim_uids = {key: stack.preemptor(key).uid for key, *_ in GANG_VICTIM_PLACES}
        handle = await stack.start_group("ml/train-a")
        await handle.result()
        uid = stack.group("ml/train-a").uid
        told = await told_by_the_ui(
            ui,
            handle.id,
            uid,
            {
                "by group": 'PodGroup = "ml/train-a"',
                "by outcome": 'PreemptionOutcome = "completed"',
                "by victim group": 'VictimGroups = "ml/train-b"',
                "by victim": 'VictimPods = "ml/notebook"',
            },
        )
    assert told.listed == {name: [handle.id] for name in told.listed}
    assert told.summary == "Preempt for pod group ml/train-a (priority 100000)"

    details = told.details
    assert details.startswith(
        "**Preempt 4 pod(s) in 2 unit(s) for pod group ml/train-a (priority 100000, minCount 4): "
        "4 member(s) placed on node-1, node-2, node-3, node-4**\n\n"
    )
    lines = [line for line in details.splitlines() if line.startswith("- ")]
    assert sorted(lines) == sorted(  # each victim with its UID, its own node and its unit
        f"- {victim} (uid {victim_uids[victim]}, priority {priority}, on {node}, {unit})"
        for victim, priority, node, unit in GANG_VICTIM_PLACES
    )
    assert "podGroup ml/train-b taken: ml/train-a-0 would not fit on node-1 beside it" in details
    assert "More: `preemptctl explain ml/train-a`" in details
    assert details.endswith(
        "**Ended completed**: 4 victim(s) preempted on 4 node(s) for pod group ml/train-a, "
        "4 member(s) nominated (minCount 4); their binds are the scheduler's, recorded when the "
        "watch shows them"
    )

    result = told.result()
    assert result["decision"].startswith("Preempt 4 pod(s) in 2 unit(s) for pod group ml/train-a")
    assert (result["outcome"], result["retryable"], result["min_count"]) == ("completed", None, 4)
    assert sorted((v["pod"]["name"], v["node"], v["fate"]) for v in result["victims"]) == sorted(
        (victim.partition("/")[2], node, "deleted") for victim, _, node, _ in GANG_VICTIM_PLACES
    )

    steps = told.steps()
    assert all(steps), steps
    assert steps[:2] == [
        "select victims for pod group ml/train-a",
        "nominate 4 member(s) of ml/train-a",
    ]
    assert steps[-1] == "ledger: completed"
    for victim, _, node, _ in GANG_VICTIM_PLACES:  # one step per victim, on its own node
        named = f"{victim} (uid {victim_uids[victim]}) on {node}"
        assert [s for s in steps if named in s] == [f"preempt {named}"]

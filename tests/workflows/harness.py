"""A whole preemption stack for one test: emulator cluster, watch-fed view, Postgres ledger,
and a Temporal worker on a fresh task queue, wired exactly as production wires them."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, select
from temporalio.client import Client, WorkflowHandle

from preemptctl.activities.preemption import PreemptionActivities
from preemptctl.emulator import Emulator
from preemptctl.emulator.resources import POD_GROUPS, PODS
from preemptctl.kube.client import KubeClient, connect
from preemptctl.kube.view import ClusterView
from preemptctl.ledger.models import events as events_table
from preemptctl.preemption.decision import PodRef
from preemptctl.preemption.group_decision import GroupRef
from preemptctl.worker.config import Settings
from preemptctl.worker.starter import start_group_preemption, start_preemption
from preemptctl.worker.temporal_worker import build_worker, preemption_activities
from preemptctl.workflows.contract import (
    RUNBOOK,
    GroupPreemptionRequest,
    GroupPreemptionResult,
    PreemptionRequest,
    PreemptionResult,
)
from preemptctl.workflows.group_preemption import GroupPreemptionWorkflow
from preemptctl.workflows.preemption import PreemptionWorkflow


@dataclass
class Stack:
    emulator: Emulator
    kube: KubeClient
    view: ClusterView
    activities: PreemptionActivities
    client: Client
    ledger: Engine
    task_queue: str

    def preemptor(self, key: str) -> PodRef:
        obj = self.emulator.pod(key)
        assert obj is not None, f"no pod {key} in the emulator"
        return PodRef(
            obj["metadata"]["namespace"],
            obj["metadata"]["name"],
            obj["metadata"]["uid"],
            int(obj["spec"].get("priority") or 0),
        )

    async def start(
        self, key: str, **options: Any
    ) -> WorkflowHandle[PreemptionWorkflow, PreemptionResult]:
        options.setdefault("scheduled_wait_seconds", 10.0)
        options.setdefault("scheduled_poll_seconds", 0.2)
        options.setdefault("runbook", RUNBOOK)  # as the trigger loop starts them
        request = PreemptionRequest(self.preemptor(key), **options)
        return await start_preemption(self.client, request, task_queue=self.task_queue)

    def group(self, key: str) -> GroupRef:
        namespace, _, name = key.partition("/")
        obj = self.emulator.store.get(POD_GROUPS, namespace, name)
        return GroupRef(
            namespace, name, obj["metadata"]["uid"], int(obj["spec"].get("priority") or 0)
        )

    async def start_group(
        self, key: str, **options: Any
    ) -> WorkflowHandle[GroupPreemptionWorkflow, GroupPreemptionResult]:
        options.setdefault("scheduled_wait_seconds", 10.0)
        options.setdefault("scheduled_poll_seconds", 0.2)
        options.setdefault("runbook", RUNBOOK)
        request = GroupPreemptionRequest(self.group(key), **options)
        return await start_group_preemption(self.client, request, task_queue=self.task_queue)

    def nominated(self, key: str) -> str | None:
        """The pod's status.nominatedNodeName."""
        obj = self.emulator.pod(key) or {}
        nominated: str | None = obj.get("status", {}).get("nominatedNodeName")
        return nominated

    def bind(self, key: str, node: str) -> None:
        """What the scheduler does once the preemptor fits: bind it to the node."""
        namespace, _, name = key.partition("/")
        self.emulator.store.patch(
            PODS, namespace, name, "application/merge-patch+json", {"spec": {"nodeName": node}}
        )

    def ledger_kinds(self, preemption_id: str) -> list[str]:
        with self.ledger.connect() as connection:
            rows = connection.execute(
                select(events_table.c.kind, events_table.c.victim_name)
                .where(events_table.c.preemption_id == preemption_id)
                .order_by(events_table.c.id)
            ).all()
        return [f"{kind}:{victim}" if victim else kind for kind, victim in rows]

    def ledger_payloads(self, preemption_id: str, kind: str) -> list[dict[str, Any]]:
        with self.ledger.connect() as connection:
            rows = connection.execute(
                select(events_table.c.payload)
                .where(events_table.c.preemption_id == preemption_id)
                .where(events_table.c.kind == kind)
                .order_by(events_table.c.id)
            ).all()
        return [row.payload for row in rows]

    def ledger_rows(self, preemption_id: str, kind: str) -> list[dict[str, Any]]:
        """The rows of one kind of event of a preemption, every column, in ledger order."""
        with self.ledger.connect() as connection:
            rows = connection.execute(
                select(events_table)
                .where(events_table.c.preemption_id == preemption_id)
                .where(events_table.c.kind == kind)
                .order_by(events_table.c.id)
            ).all()
        return [dict(row._mapping) for row in rows]

    def deletes(self) -> list[str]:
        """The victims the emulator was asked to delete, in order (name only)."""
        return [
            entry.name
            for entry in self.emulator.requests.matching("delete", "pods")
            if entry.code < 300 or entry.code == 404 or entry.code == 409
        ]


HISTORIES = Path(__file__).resolve().parents[1] / "histories"
RECORD_ENV = "PREEMPT_RECORD_HISTORIES"


async def keep_history(handle: WorkflowHandle[Any, Any], name: str) -> None:
    """With PREEMPT_RECORD_HISTORIES=1, save the finished workflow's history under
    tests/histories/, where test_replay replays it on every CI run."""
    if os.environ.get(RECORD_ENV) != "1":
        return
    history = await handle.fetch_history()
    (HISTORIES / f"{name}.json").write_text(history.to_json())


async def bind_when_room(
    stack: Stack, key: str, node: str, victims: list[str], timeout: float = 20.0
) -> None:
    """A stand-in scheduler: bind the preemptor once its victims are gone or terminating."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{key}'s victims were never all deleted: {victims}")
        remaining = [v for v in victims if stack.emulator.pod(v) is not None]
        if all(
            (stack.emulator.pod(v) or {}).get("metadata", {}).get("deletionTimestamp")
            for v in remaining
        ):
            for victim in remaining:
                stack.emulator.finalize(victim)
            stack.bind(key, node)
            return
        await asyncio.sleep(0.05)


async def bind_group_when_room(
    stack: Stack, members: list[str], victims: list[str], timeout: float = 20.0
) -> None:
    """A stand-in gang scheduler: once every victim is gone or terminating, bind every
    member, all or nothing, to the node it is nominated to."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"the victims were never all deleted: {victims}")
        remaining = [v for v in victims if stack.emulator.pod(v) is not None]
        nominated = {m: stack.nominated(m) for m in members}
        if all(nominated.values()) and all(
            (stack.emulator.pod(v) or {}).get("metadata", {}).get("deletionTimestamp")
            for v in remaining
        ):
            for victim in remaining:
                stack.emulator.finalize(victim)
            for member, node in nominated.items():
                assert node is not None
                stack.bind(member, node)
            return
        await asyncio.sleep(0.05)


@asynccontextmanager
async def running_stack(
    client: Client,
    ledger: Engine,
    emulator: Emulator,
    scenario: Mapping[str, Any],
    *,
    with_worker: bool = True,
    settings: Settings | None = None,
    **activity_options: Any,
) -> AsyncIterator[Stack]:
    """The stack; `with_worker=False` leaves the task queue unserved, for a test that runs
    its workers itself. With `settings`, the view and the activities are wired from them as
    `worker.runtime` does (`view_options`, `preemption_activities`)."""
    emulator.load(scenario)
    kube = connect(emulator.kubeconfig_path)
    view = ClusterView(kube, **(settings.view_options() if settings else {}))
    view.start()
    try:
        assert view.wait_ready(10), "the cluster view did not sync"
        activities = (
            preemption_activities(settings, kube, view, ledger)
            if settings
            else PreemptionActivities(kube, view, ledger, **activity_options)
        )
        task_queue = f"preemption-test-{uuid.uuid4()}"
        stack = Stack(emulator, kube, view, activities, client, ledger, task_queue)
        if not with_worker:
            yield stack
            return
        # build_worker encodes failures as production's worker does (classified ones
        # without a stack trace: workflows.failures); test_ui_story checks it.
        async with build_worker(client, activities, task_queue=task_queue):
            yield stack
    finally:
        view.stop()

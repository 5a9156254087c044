"""The one runbook of every preemption (`workflows.runbook`, issue 29), branch by branch,
with stand-in activities on the time-skipping server: no Postgres, no emulator, durable
timers skipped. Each stand-in is registered under the real activity's name and answers as
the test scripts it; every call is logged.

Scenarios (a pod's preemption; a group's follows the same runbook, specified end to end
in tests/workflows/test_full_stack_groups.py):
- a preemption that goes through: select, then the nomination beside the victims' own
  steps, all but the last in parallel, then the last, then the end, which records every
  victim's fate and the nomination's writes; it ends at the last victim's delete;
- each victim is preempted on its own node, for the room on the preemptor's (a gang taken
  whole has members elsewhere);
- the victims but the last run in parallel, at most 16 at once (upstream's parallelizer);
- the last victim is recorded in the `state` query before its step, and the run is out of
  the preempting set by then;
- a victim the decision saw terminating gets no step;
- a victim refused for good (an RBAC denial) fails the preemption: the last is never
  touched, the refused one (marked) unmarked, the failure recorded with every fate,
  retrying cannot help;
- a victim step that says the room is no longer needed (the preemptor moved on) aborts the
  run: the last is never touched, the spared victim unmarked;
- a final verdict, a dry run and a preemptor gone before the decision end at once, the
  first two written ahead by the select (no end step), the abort recorded by the end step;
- a run resumed after it had recorded its own end (its worker lost before the workflow
  closed) ends as recorded at once: no step again, no second end step;
- held back by the eviction budget: a durable sleep, then a fresh decision;
- a nomination that fails for good does not stop the preemption (upstream goes on too).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from preemptctl.activities.contracts import (
    EndInput,
    NominationInput,
    NominationResult,
    PreemptVictimInput,
    SelectInput,
    Selection,
    VictimInput,
    VictimResult,
    Written,
)
from preemptctl.ledger.vocabulary import Fate, Outcome
from preemptctl.preemption.decision import PodRef, Verdict
from preemptctl.worker.temporal_worker import workflow_runner
from preemptctl.workflows.contract import (
    RUNBOOK,
    PreemptionProgress,
    PreemptionRequest,
    PreemptionResult,
    result_of_failure,
)
from preemptctl.workflows.preemption import PreemptionWorkflow
from preemptctl.workflows.runbook import VICTIM_SLOTS

pytestmark = pytest.mark.asyncio(loop_scope="session")

PREEMPTOR = PodRef("default", "urgent", "uid-urgent", 1000)
NODE = "node-1"


def victims(count: int) -> list[PodRef]:
    return [PodRef("default", f"victim-{i}", f"uid-victim-{i}", 1) for i in range(count)]


def decided(verdict: Verdict = Verdict.PREEMPT, count: int = 2, **more: Any) -> Selection:
    chosen = victims(count) if verdict is Verdict.PREEMPT else []
    return Selection(
        PREEMPTOR,
        f"{verdict} for default/urgent",
        verdict=verdict,
        node=NODE if verdict is Verdict.PREEMPT else None,
        victims=chosen,
        **more,
    )


Step = Callable[[VictimInput], Awaitable[VictimResult]]


@dataclass
class Script:
    """What the stand-ins answer; `calls` logs every call, in order."""

    selections: list[Selection] = field(default_factory=lambda: [decided()])
    step: Step | None = None  # a victim's step, by default deleted at once
    nominate_error: ApplicationError | None = None
    calls: list[str] = field(default_factory=list)
    ends: list[EndInput] = field(default_factory=list)
    steps: list[PreemptVictimInput] = field(default_factory=list)
    running: int = 0
    most_at_once: int = 0

    def stand_ins(self) -> list[Callable[..., Any]]:
        @activity.defn(name="select_preemption")
        async def select(request: SelectInput) -> Selection:
            self.calls.append("select")
            return self.selections.pop(0)

        @activity.defn(name="nominate_preemptor")
        async def nominate(request: NominationInput) -> NominationResult:
            self.calls.append(f"nominate:{request.node}:record={request.record}")
            if self.nominate_error is not None:
                raise self.nominate_error
            written = Written("nominated", request.preemptor, request.node, "Done", "nominated")
            return NominationResult("Done", "nominated", writes=[written])

        @activity.defn(name="preempt_victim")
        async def preempt_victim(request: PreemptVictimInput) -> VictimResult:
            victim = request.step.victim
            self.calls.append(f"preempt:{victim.name}")
            self.steps.append(request)
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
            try:
                if self.step is not None:
                    return await self.step(request.step)
                await asyncio.sleep(0.01)
                return VictimResult(Fate.DELETED, "victim deleted", marked=True)
            finally:
                self.running -= 1

        @activity.defn(name="unmark_victim")
        async def unmark(request: VictimInput) -> str:
            self.calls.append(f"unmark:{request.victim.name}")
            return "removed"

        @activity.defn(name="record_end")
        async def record_end(request: EndInput) -> int:
            self.calls.append(f"end:{request.outcome.value}")
            self.ends.append(request)
            return 1

        return [select, nominate, preempt_victim, unmark, record_end]

    def preempted(self) -> list[str]:
        return [c.partition(":")[2] for c in self.calls if c.startswith("preempt:")]


Handle = WorkflowHandle[PreemptionWorkflow, PreemptionResult]
Run = Callable[..., Awaitable[PreemptionResult]]


@pytest.fixture
async def run(time_skipping: WorkflowEnvironment) -> AsyncIterator[Run]:
    async def preempt(
        script: Script,
        on_start: Callable[[Handle], Awaitable[None]] | None = None,
        **options: Any,
    ) -> PreemptionResult:
        options.setdefault("search_attributes", False)  # the test server cannot register them
        options.setdefault("local_activities", True)  # as the trigger starts them
        task_queue = f"one-runbook-{uuid.uuid4()}"
        async with Worker(
            time_skipping.client,
            task_queue=task_queue,
            workflows=[PreemptionWorkflow],
            activities=script.stand_ins(),
            workflow_runner=workflow_runner(),
        ):
            handle = await time_skipping.client.start_workflow(
                PreemptionWorkflow.run,
                PreemptionRequest(PREEMPTOR, runbook=RUNBOOK, **options),
                id=f"preemption-{uuid.uuid4()}",
                task_queue=task_queue,
            )
            if on_start is not None:
                await on_start(handle)
            return await handle.result()

    yield preempt


def refused(message: str = "delete pods default/victim-0: forbidden") -> VictimResult:
    return VictimResult(Fate.FAILED, message, marked=True)


async def test_a_preemption_that_goes_through(run: Run) -> None:
    script = Script()
    result = await run(script)
    assert script.calls[0] == "select"
    assert set(script.calls[1:3]) == {f"nominate:{NODE}:record=False", "preempt:victim-0"}
    assert script.calls[3:] == ["preempt:victim-1", "end:completed"]
    assert (result.outcome, result.node, result.runbook) == (Outcome.COMPLETED, NODE, RUNBOOK)
    assert [v.fate for v in result.victims] == [Fate.DELETED, Fate.DELETED]
    assert result.message.startswith("2 victim(s) preempted on node-1 for default/urgent")
    [end] = script.ends
    assert [(f.pod.name, f.node, f.result.fate) for f in end.victims] == [
        ("victim-0", NODE, Fate.DELETED),
        ("victim-1", NODE, Fate.DELETED),
    ]
    assert [w.kind for w in end.writes] == ["nominated"]


async def test_each_victim_is_preempted_on_its_own_node_for_the_room_on_the_preemptors(
    run: Run,
) -> None:
    """A gang taken whole for one pod has members on other nodes: each victim's step names
    the victim's node, and the room it is for is the preemptor's (a preemptor bound there
    meanwhile does not stop it)."""
    elsewhere = {"uid-victim-0": "node-2", "uid-victim-1": "node-3"}
    script = Script(selections=[decided(victim_nodes=elsewhere)])
    result = await run(script)
    assert sorted((s.step.victim.name, s.step.node, s.room_node) for s in script.steps) == [
        ("victim-0", "node-2", NODE),
        ("victim-1", "node-3", NODE),
    ]
    assert [(v.pod.name, v.node) for v in result.victims] == [
        ("victim-0", "node-2"),
        ("victim-1", "node-3"),
    ]


async def test_the_victims_but_the_last_run_in_parallel_sixteen_at_once(run: Run) -> None:
    full = asyncio.Event()

    async def step(victim: VictimInput) -> VictimResult:
        """Held until sixteen are in flight at once (or a second, if fewer ever are)."""
        if script.running >= VICTIM_SLOTS:
            full.set()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.0):
                await full.wait()
        return VictimResult(Fate.DELETED, "victim deleted", marked=True)

    script = Script(selections=[decided(count=VICTIM_SLOTS + 5)], step=step)
    result = await run(script)
    assert result.outcome is Outcome.COMPLETED
    assert script.most_at_once == VICTIM_SLOTS
    assert script.preempted()[-1] == f"victim-{VICTIM_SLOTS + 4}"  # the last, alone, last


async def test_the_last_victim_is_recorded_before_its_step_out_of_the_preempting_set(
    run: Run,
) -> None:
    seen: list[PreemptionProgress] = []
    last_started = asyncio.Event()
    release = asyncio.Event()

    async def step(victim: VictimInput) -> VictimResult:
        if victim.victim.name == "victim-1":
            last_started.set()
            await release.wait()
        return VictimResult(Fate.DELETED, "victim deleted", marked=True)

    async def watch(handle: Handle) -> None:
        await last_started.wait()
        seen.append(await handle.query(PreemptionWorkflow.state))
        release.set()

    script = Script(step=step)
    await run(script, watch)
    [during] = seen
    assert during.pending_last_victim is not None
    assert during.pending_last_victim.name == "victim-1"
    assert during.preempting is False
    assert [v.fate for v in during.victims] == [Fate.DELETED, Fate.CHOSEN]


async def test_a_victim_seen_terminating_gets_no_step(run: Run) -> None:
    script = Script(selections=[decided(count=3, terminating=["uid-victim-1"])])
    result = await run(script)
    assert sorted(script.preempted()) == ["victim-0", "victim-2"]
    fates = {v.pod.name: v.fate for v in result.victims}
    assert fates == {
        "victim-0": Fate.DELETED,
        "victim-1": Fate.ALREADY_GONE,
        "victim-2": Fate.DELETED,
    }
    [end] = script.ends
    assert {f.pod.name: f.result.terminating for f in end.victims}["victim-1"] is True


async def test_a_victim_refused_for_good_fails_the_preemption(run: Run) -> None:
    async def step(victim: VictimInput) -> VictimResult:
        if victim.victim.name == "victim-0":
            return refused()
        return VictimResult(Fate.DELETED, "victim deleted", marked=True)

    script = Script(selections=[decided(count=3)], step=step)
    with pytest.raises(WorkflowFailureError) as failed:
        await run(script)
    carried = result_of_failure(failed.value)
    assert carried is not None
    assert (carried.outcome, carried.retryable) == (Outcome.FAILED, False)
    assert carried.message == (
        "victim default/victim-0 could not be preempted: delete pods default/victim-0: forbidden"
    )
    assert sorted(script.preempted()) == ["victim-0", "victim-1"]  # victim-2, the last: never
    assert "unmark:victim-0" in script.calls
    [end] = script.ends
    assert end.outcome is Outcome.FAILED and end.failed_victim is not None
    assert {f.pod.name: f.result.fate for f in end.victims} == {
        "victim-0": Fate.FAILED,
        "victim-1": Fate.DELETED,
        "victim-2": Fate.SPARED,
    }


async def test_a_preemptor_that_moved_on_aborts_the_run(run: Run) -> None:
    async def step(victim: VictimInput) -> VictimResult:
        return VictimResult(
            Fate.SPARED,
            "the preemption was stopped before deleting it",
            stopped="the preemptor is gone",
            marked=True,
        )

    script = Script(step=step)
    result = await run(script)
    assert (result.outcome, result.message) == (Outcome.ABORTED, "the preemptor is gone")
    assert script.preempted() == ["victim-0"]
    assert "unmark:victim-0" in script.calls
    assert script.calls[-1] == "end:aborted"
    assert [v.fate for v in result.victims] == [Fate.SPARED, Fate.SPARED]


@pytest.mark.parametrize(
    ("verdict", "end"),
    [
        (Verdict.INELIGIBLE, Outcome.INELIGIBLE),
        (Verdict.UNSCHEDULABLE, Outcome.NO_CANDIDATE),
        (Verdict.FITS_WITHOUT_PREEMPTION, Outcome.COMPLETED),
        (Verdict.UNSUPPORTED, Outcome.UNSUPPORTED),
    ],
)
async def test_a_final_verdict_ends_at_once_written_ahead(
    run: Run, verdict: Verdict, end: Outcome
) -> None:
    script = Script(selections=[decided(verdict)])
    result = await run(script)
    assert script.calls == ["select"]
    assert result.outcome is end
    assert result.retryable is (False if verdict is Verdict.UNSUPPORTED else None)


async def test_a_dry_run_touches_nothing(run: Run) -> None:
    script = Script(selections=[decided(dry_run=True)])
    result = await run(script)
    assert script.calls == ["select"]
    assert result.outcome is Outcome.DRY_RUN


async def test_a_preemptor_gone_before_the_decision_is_aborted_by_the_end_step(run: Run) -> None:
    script = Script(selections=[Selection(PREEMPTOR, "the preemptor is gone")])
    result = await run(script)
    assert script.calls == ["select", "end:aborted"]
    assert result.outcome is Outcome.ABORTED


@pytest.mark.parametrize("ended", [Outcome.COMPLETED, Outcome.ABORTED])
async def test_a_run_resumed_after_its_end_ends_as_recorded_without_a_step(
    run: Run, ended: Outcome
) -> None:
    script = Script(selections=[decided(ended_as=ended)])
    result = await run(script)
    assert script.calls == ["select"]
    assert (result.outcome, result.message) == (
        ended,
        f"this run had already ended {ended.value} (recorded in the ledger): nothing done again",
    )


async def test_a_run_resumed_after_it_failed_fails_again_without_a_step(run: Run) -> None:
    script = Script(selections=[decided(ended_as=Outcome.FAILED)])
    with pytest.raises(WorkflowFailureError) as failure:
        await run(script)
    assert script.calls == ["select"]
    carried = result_of_failure(failure.value)
    assert carried is not None and carried.outcome is Outcome.FAILED


async def test_a_throttled_decision_sleeps_then_decides_afresh(run: Run) -> None:
    held = decided(retry_after_seconds=40.0)
    script = Script(selections=[held, decided()])
    result = await run(script)
    assert script.calls[:2] == ["select", "select"]
    assert (result.outcome, result.throttled) == (Outcome.COMPLETED, 1)


async def test_a_nomination_refused_for_good_does_not_stop_the_preemption(run: Run) -> None:
    script = Script(
        nominate_error=ApplicationError("forbidden", type="Forbidden", non_retryable=True)
    )
    result = await run(script)
    assert result.outcome is Outcome.COMPLETED
    [end] = script.ends
    assert end.writes == []

"""The workflow's runbook, branch by branch, with stand-in activities on the time-skipping
server: no Postgres, no emulator, durable timers skipped.

Each stand-in is registered under the real activity's name (samples-python's
`hello_activity_test.py` shape) and answers as the test scripts it; every call is logged.

Scenarios:
- held back by the eviction budget: recorded by the select activity, a durable sleep, then a
  fresh decision that goes on;
- ineligible, no candidate, fits without preemption: end at once, nothing touched, the end
  recorded by the select activity alone;
- unsupported: ends at once, never a victim touched, and retrying cannot help;
- a run that did not fail says nothing of retrying (`retryable` None): a completed one, a
  final verdict;
- dry run: decided and recorded, nothing touched;
- the preemptor gone or replaced before the decision: aborted, nothing touched, the abort
  recorded by the workflow (`record_end`), the one writer of an abort;
- a preemption that goes through runs six steps whatever its victims, in rounds: select;
  then nominate, and mark every victim (one step); then delete every victim but the last
  (one step); then delete the last; then record the end (the bind told by the trigger's
  signal);
- a victim already gone, already terminating or replaced when marked is never deleted;
- a mark refused for good fails the preemption before any victim is deleted;
- a victim whose delete is refused for good (an RBAC denial) fails the preemption: the last
  victim is never deleted, the failure is recorded with the victim, retrying cannot help;
- the preemptor gone or bound elsewhere at a delete: the preemption is aborted (recorded by
  the workflow) and the last victim is never deleted;
- a victim marked but not deleted (failed, or spared when the run stopped) loses its
  DisruptionTarget condition before the end is recorded; a completed run unmarks nothing;
- once the last victim is deleted, the `state` query no longer shows it pending;
- a preemptor the signal never reports is polled; bound: completed with its node;
- a preemptor not bound in time completes with that reason; one that vanishes while waited
  for completes with that reason;
- with local activities, the same runbook runs the same steps, and a step refused for good
  fails the preemption the same way (a local activity's failure reaches the workflow
  without the `ActivityError` around it).
"""

from __future__ import annotations

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
    PreemptorCheck,
    SelectInput,
    Selection,
    VictimInput,
    VictimResult,
    VictimRound,
)
from preemptctl.ledger.vocabulary import Fate, Outcome
from preemptctl.preemption.decision import PodRef, Verdict
from preemptctl.preemption.standing import PreemptorStanding, Standing
from preemptctl.worker.temporal_worker import workflow_runner
from preemptctl.workflows.contract import (
    PreemptionProgress,
    PreemptionRequest,
    PreemptionResult,
    result_of_failure,
)
from preemptctl.workflows.preemption import PreemptionWorkflow

PREEMPTOR = PodRef("default", "urgent", "uid-urgent", 1000)
VICTIMS = [PodRef("default", f"victim-{i}", f"uid-victim-{i}", 100) for i in range(3)]
NODE = "node-1"


def decided(verdict: Verdict = Verdict.PREEMPT, victims: list[PodRef] | None = None) -> Selection:
    chosen = list(VICTIMS if victims is None else victims) if verdict is Verdict.PREEMPT else []
    return Selection(
        PREEMPTOR,
        f"the planner says {verdict.value}",
        verdict=verdict,
        node=NODE if verdict is Verdict.PREEMPT else None,
        victims=chosen,
    )


Answer = VictimResult | Exception
Run = Callable[..., Awaitable[PreemptionResult]]
Handle = WorkflowHandle[PreemptionWorkflow, PreemptionResult]


@dataclass
class Script:
    """What the stand-ins answer, and what they were asked."""

    selections: list[Selection] = field(default_factory=lambda: [decided()])
    marks: dict[str, Answer] = field(default_factory=dict)
    deletes: dict[str, Answer] = field(default_factory=dict)
    preemptor: list[PreemptorStanding] = field(
        default_factory=lambda: [PreemptorStanding(Standing.PENDING)]
    )
    calls: list[str] = field(default_factory=list)  # each victim's step, round or not
    steps: list[str] = field(default_factory=list)  # each activity, a round as one
    ends: list[EndInput] = field(default_factory=list)

    def stand_ins(self) -> list[Callable[..., object]]:
        @activity.defn(name="select_preemption")
        async def select(request: SelectInput) -> Selection:
            self.calls.append("select")
            self.steps.append("select")
            return self.selections.pop(0) if len(self.selections) > 1 else self.selections[0]

        @activity.defn(name="nominate_preemptor")
        async def nominate(request: NominationInput) -> NominationResult:
            self.calls.append(f"nominate:{request.node}")
            self.steps.append("nominate")
            return NominationResult("Done", "nominated")

        @activity.defn(name="mark_victim")
        async def mark(request: VictimInput) -> VictimResult:
            self.calls.append(f"mark:{request.victim.name}")
            return answer(self.marks.get(request.victim.name, VictimResult(Fate.MARKED)))

        @activity.defn(name="delete_victim")
        async def delete(request: VictimInput) -> VictimResult:
            self.calls.append(f"delete:{request.victim.name}")
            return answer(self.deletes.get(request.victim.name, VictimResult(Fate.DELETED)))

        @activity.defn(name="mark_victims")
        async def mark_round(request: VictimRound) -> list[VictimResult]:
            self.steps.append("marks:" + ",".join(v.pod.name for v in request.victims))
            return [await in_a_round(mark(step)) for step in request.steps()]

        @activity.defn(name="delete_victims")
        async def delete_round(request: VictimRound) -> list[VictimResult]:
            self.steps.append("deletes:" + ",".join(v.pod.name for v in request.victims))
            return [await in_a_round(delete(step)) for step in request.steps()]

        @activity.defn(name="unmark_victim")
        async def unmark(request: VictimInput) -> str:
            self.calls.append(f"unmark:{request.victim.name}")
            return "DisruptionTarget removed"

        @activity.defn(name="check_preemptor")
        async def check(request: PreemptorCheck) -> PreemptorStanding:
            self.calls.append("check")
            return self.preemptor.pop(0) if len(self.preemptor) > 1 else self.preemptor[0]

        @activity.defn(name="record_end")
        async def record_end(request: EndInput) -> int:
            self.calls.append(f"end:{request.outcome.value}")
            self.steps.append(f"end:{request.outcome.value}")
            self.ends.append(request)
            return 1

        async def in_a_round(step: Awaitable[VictimResult]) -> VictimResult:
            """A victim refused for good is FAILED in its round; the others go on."""
            try:
                return await step
            except ApplicationError as error:
                if not error.non_retryable:
                    raise
                return VictimResult(Fate.FAILED, error.message)

        return [
            select,
            nominate,
            mark,
            delete,
            mark_round,
            delete_round,
            unmark,
            check,
            record_end,
        ]

    def touched(self) -> list[str]:
        """The calls that act on the cluster's victims."""
        return [c for c in self.calls if c.startswith(("mark:", "delete:", "unmark:"))]


def answer(given: Answer) -> VictimResult:
    if isinstance(given, Exception):
        raise given
    return given


def rbac_denied() -> ApplicationError:
    return ApplicationError(
        "forbidden: cannot delete pods in default (RBAC: grant delete on pods)",
        type="Forbidden",
        non_retryable=True,
    )


@pytest.fixture
async def run(
    time_skipping: WorkflowEnvironment,
) -> AsyncIterator[Run]:
    async def preempt(
        script: Script,
        on_start: Callable[[Handle], Awaitable[None]] | None = None,
        **options: Any,
    ) -> PreemptionResult:
        options.setdefault("search_attributes", False)  # the test server cannot register them
        task_queue = f"runbook-{uuid.uuid4()}"
        async with Worker(
            time_skipping.client,
            task_queue=task_queue,
            workflows=[PreemptionWorkflow],
            activities=script.stand_ins(),
            workflow_runner=workflow_runner(),
        ):
            handle = await time_skipping.client.start_workflow(
                PreemptionWorkflow.run,
                PreemptionRequest(PREEMPTOR, **options),
                id=f"preemption-{uuid.uuid4()}",
                task_queue=task_queue,
            )
            if on_start is not None:
                await on_start(handle)
            return await handle.result()

    yield preempt


def bound_signal(node: str) -> Callable[[Handle], object]:
    async def send(handle: Handle) -> None:
        await handle.signal(PreemptionWorkflow.preemptor_bound, node)

    return send


async def test_a_throttled_decision_sleeps_then_decides_afresh(run: Run) -> None:
    held = decided()
    held.retry_after_seconds = 40.0
    script = Script(selections=[held, decided()])
    result = await run(script, bound_signal(NODE))
    assert script.calls[:2] == ["select", "select"]
    assert (result.outcome, result.throttled) == (Outcome.COMPLETED, 1)


@pytest.mark.parametrize(
    ("verdict", "end"),
    [
        (Verdict.INELIGIBLE, Outcome.INELIGIBLE),
        (Verdict.UNSCHEDULABLE, Outcome.NO_CANDIDATE),
        (Verdict.FITS_WITHOUT_PREEMPTION, Outcome.COMPLETED),
    ],
)
async def test_a_final_verdict_ends_at_once_recorded_by_the_select_activity(
    run: Run, verdict: Verdict, end: Outcome
) -> None:
    script = Script(selections=[decided(verdict)])
    result = await run(script)
    assert (result.outcome, result.retryable) == (end, None)
    assert script.calls == ["select"]


async def test_a_completed_run_says_nothing_of_retrying(run: Run) -> None:
    result = await run(Script(), bound_signal(NODE))
    assert (result.outcome, result.retryable) == (Outcome.COMPLETED, None)


async def test_unsupported_never_touches_a_pod_and_retrying_cannot_help(run: Run) -> None:
    script = Script(selections=[decided(Verdict.UNSUPPORTED)])
    result = await run(script)
    assert (result.outcome, result.retryable) == (Outcome.UNSUPPORTED, False)
    assert script.calls == ["select"]


async def test_a_dry_run_decides_and_touches_nothing(run: Run) -> None:
    script = Script()
    result = await run(script, dry_run=True)
    assert result.outcome is Outcome.DRY_RUN
    assert result.message == "dry run: the planner says Preempt"
    assert script.calls == ["select"]


async def test_a_preemptor_gone_before_the_decision_aborts_it(run: Run) -> None:
    script = Script(selections=[Selection(PREEMPTOR, "the preemptor is gone")])
    result = await run(script)
    assert (result.outcome, result.message) == (Outcome.ABORTED, "the preemptor is gone")
    assert script.calls == ["select", "end:aborted"]


async def test_a_preemption_runs_six_steps_whatever_its_victims(run: Run) -> None:
    script = Script()
    result = await run(script, bound_signal(NODE))
    assert result.outcome is Outcome.COMPLETED
    assert result.preemptor_node == NODE
    assert [v.fate for v in result.victims] == [Fate.DELETED] * 3
    rounds = [script.steps[:1], script.steps[1:3], script.steps[3:4], script.steps[4:]]
    assert [sorted(r) for r in rounds] == [
        ["select"],
        ["marks:victim-0,victim-1,victim-2", "nominate"],
        ["deletes:victim-0,victim-1"],
        ["deletes:victim-2", "end:completed"],
    ]
    assert script.steps[-1] == "end:completed"
    assert script.ends[0].scheduled_node == NODE


async def test_a_mark_refused_for_good_fails_before_any_victim_is_deleted(run: Run) -> None:
    script = Script(marks={"victim-1": rbac_denied()})
    with pytest.raises(WorkflowFailureError) as failure:
        await run(script)
    result = result_of_failure(failure.value)
    assert result is not None
    assert (result.outcome, result.retryable) == (Outcome.FAILED, False)
    assert [v.fate for v in result.victims] == [Fate.SPARED, Fate.FAILED, Fate.SPARED]
    assert not [c for c in script.calls if c.startswith("delete:")]
    assert sorted(c for c in script.calls if c.startswith("unmark:")) == [
        "unmark:victim-0",
        "unmark:victim-2",
    ]


@pytest.mark.parametrize(
    ("marked", "fate"),
    [
        (VictimResult(Fate.ALREADY_GONE, "victim is already gone"), Fate.ALREADY_GONE),
        (VictimResult(Fate.ALREADY_GONE, "victim is already terminating"), Fate.ALREADY_GONE),
        (VictimResult(Fate.REPLACED, "replaced", replaced_by_uid="uid-new"), Fate.REPLACED),
    ],
    ids=["gone", "terminating", "replaced"],
)
async def test_a_victim_settled_when_marked_is_never_deleted(
    run: Run, marked: VictimResult, fate: Fate
) -> None:
    script = Script(marks={"victim-0": marked})
    result = await run(script, bound_signal(NODE))
    assert result.outcome is Outcome.COMPLETED
    assert result.victims[0].fate is fate
    assert "delete:victim-0" not in script.calls
    assert "delete:victim-2" in script.calls


async def test_a_victim_replaced_at_its_delete_ends_replaced(run: Run) -> None:
    script = Script(deletes={"victim-1": VictimResult(Fate.REPLACED, "replaced")})
    result = await run(script, bound_signal(NODE))
    assert result.outcome is Outcome.COMPLETED
    assert [v.fate for v in result.victims] == [Fate.DELETED, Fate.REPLACED, Fate.DELETED]


@pytest.mark.parametrize("local", [False, True], ids=["activities", "local-activities"])
async def test_a_delete_refused_for_good_fails_and_spares_the_last_victim(
    run: Run, local: bool
) -> None:
    script = Script(deletes={"victim-0": rbac_denied()})
    with pytest.raises(WorkflowFailureError) as failure:
        await run(script, local_activities=local)
    result = result_of_failure(failure.value)
    assert result is not None
    assert (result.outcome, result.retryable) == (Outcome.FAILED, False)
    assert "victim default/victim-0 could not be preempted: forbidden" in result.message
    assert [v.fate for v in result.victims] == [Fate.FAILED, Fate.DELETED, Fate.SPARED]
    assert "delete:victim-2" not in script.calls
    assert [(e.outcome, e.failed_victim) for e in script.ends] == [(Outcome.FAILED, VICTIMS[0])]


async def test_a_failed_victim_loses_its_disruption_target_before_the_end_is_recorded(
    run: Run,
) -> None:
    script = Script(deletes={"victim-0": rbac_denied()})
    with pytest.raises(WorkflowFailureError):
        await run(script)
    # victim-0 failed, victim-2 (the last) was spared; victim-1 was deleted.
    unmarked = sorted(c for c in script.calls if c.startswith("unmark:"))
    assert unmarked == ["unmark:victim-0", "unmark:victim-2"]
    assert max(script.calls.index(c) for c in unmarked) < script.calls.index("end:failed")


async def test_a_victim_spared_after_its_mark_loses_its_disruption_target(run: Run) -> None:
    stopped = VictimResult(Fate.SPARED, "stopped", stopped="the preemptor is gone")
    script = Script(deletes={"victim-0": stopped})
    await run(script)
    # victim-1 was deleted alongside; victim-2, the last, was marked but never deleted.
    unmarked = sorted(c for c in script.calls if c.startswith("unmark:"))
    assert unmarked == ["unmark:victim-0", "unmark:victim-2"]


async def test_a_completed_preemption_unmarks_nothing(run: Run) -> None:
    script = Script()
    await run(script, bound_signal(NODE))
    assert not [c for c in script.calls if c.startswith("unmark:")]


async def test_the_state_shows_no_pending_last_victim_once_it_is_deleted(run: Run) -> None:
    seen: list[PreemptionProgress] = []

    async def bound_then_look(handle: Handle) -> None:
        await handle.signal(PreemptionWorkflow.preemptor_bound, NODE)
        await handle.result()
        seen.append(await handle.query(PreemptionWorkflow.state))

    script = Script()
    await run(script, bound_then_look)
    assert seen[0].victims[-1].fate is Fate.DELETED
    assert seen[0].pending_last_victim is None


@pytest.mark.parametrize(
    "reason",
    ["the preemptor is gone", "the preemptor was bound to node-9, not node-1"],
    ids=["gone", "bound-elsewhere"],
)
async def test_a_preemptor_that_moved_on_aborts_before_the_last_victim(
    run: Run, reason: str
) -> None:
    stopped = VictimResult(Fate.SPARED, "the preemption was stopped", stopped=reason)
    script = Script(deletes={"victim-0": stopped})
    result = await run(script)
    assert (result.outcome, result.message) == (Outcome.ABORTED, reason)
    assert result.victims[2].fate is Fate.SPARED
    assert "delete:victim-2" not in script.calls
    assert [(e.outcome, e.message) for e in script.ends] == [(Outcome.ABORTED, reason)]


async def test_without_a_signal_the_preemptor_is_polled_until_bound(run: Run) -> None:
    script = Script(
        preemptor=[
            PreemptorStanding(Standing.PENDING),
            PreemptorStanding(Standing.BOUND, NODE),
        ]
    )
    result = await run(script, scheduled_poll_seconds=30.0)
    assert (result.outcome, result.preemptor_node) == (Outcome.COMPLETED, NODE)
    assert script.calls.count("check") == 2


async def test_a_preemptor_not_bound_in_time_completes_with_that_reason(run: Run) -> None:
    script = Script()
    result = await run(script, scheduled_wait_seconds=300.0, scheduled_poll_seconds=30.0)
    assert result.outcome is Outcome.COMPLETED
    assert result.message == "the preemptor was not bound within 300s"
    assert result.preemptor_node is None
    assert script.ends[0].scheduled_node is None


async def test_a_preemptor_gone_while_waited_for_completes_with_that_reason(run: Run) -> None:
    script = Script(preemptor=[PreemptorStanding(Standing.GONE)])
    result = await run(script)
    assert (result.outcome, result.message) == (Outcome.COMPLETED, "the preemptor is gone")


async def test_with_local_activities_the_runbook_is_the_same(run: Run) -> None:
    script = Script(deletes={"victim-1": VictimResult(Fate.REPLACED, "replaced")})
    result = await run(script, bound_signal(NODE), local_activities=True)
    assert result.outcome is Outcome.COMPLETED
    assert [v.fate for v in result.victims] == [Fate.DELETED, Fate.REPLACED, Fate.DELETED]
    assert len(script.calls) == 3 + 2 * len(VICTIMS)

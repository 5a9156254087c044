"""The group preemption workflow's runbook, branch by branch, with stand-in activities on the
time-skipping server (as test_runbook.py does for a pod's).

The group `ml/train-a` (minCount 3) has three pending trainers placed on node-1 and node-2;
its victims are the two pods of the lower gang `ml/train-b` (one on each node, taken whole)
and a loose pod on node-2.

Scenarios:
- a group preemption that goes through: select; then every member nominated (one step) and
  every victim marked, on both nodes (one step); then every victim but the last deleted
  (one step); then the last; the trigger's `member_bound` signals bring minCount members and
  the end is recorded: completed, the members bound, nothing said about retrying;
- each delete carries what the group still needing the room means: the group, and each
  placed member's node;
- the state query tells the members, minCount and the pending last victim; once finished,
  which members are bound;
- held back by the eviction budget: a durable sleep, then a fresh decision;
- a decision that ends the run (ineligible, no candidate, fits, unsupported, dry run) ends it
  at once, nothing touched; unsupported cannot be helped by retrying;
- the group gone before the decision: aborted, recorded by the workflow;
- a delete that finds the group's members bound elsewhere stops the run: aborted, the last
  victim spared, the marked victims unmarked, the end recorded with the reason;
- a delete refused for good fails the run: the failure's details carry the result, the
  failed victim recorded with its node, retrying cannot help;
- without signals the group is polled: bound members read from the cluster end the wait;
- fewer than minCount bound by the deadline: completed, saying so; the group deleted
  while waited for: completed, saying so;
- with local activities the same steps run.
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
    DecisionStory,
    Nomination,
    VictimInput,
    VictimResult,
    VictimRound,
)
from preemptctl.activities.group_contracts import (
    GroupCheck,
    GroupEndInput,
    GroupSelection,
    GroupVictimInput,
    GroupVictimRound,
    MembersNominated,
    MembersNomination,
    SelectGroupInput,
    VictimPlacement,
)
from preemptctl.ledger.vocabulary import Fate, Outcome
from preemptctl.preemption.decision import PodRef, Verdict
from preemptctl.preemption.group_decision import GroupRef
from preemptctl.preemption.standing import GroupStanding, Standing
from preemptctl.worker.temporal_worker import workflow_runner
from preemptctl.workflows.contract import (
    GroupPreemptionProgress,
    GroupPreemptionRequest,
    GroupPreemptionResult,
    group_result_of_failure,
)
from preemptctl.workflows.group_preemption import GroupPreemptionWorkflow

GROUP = GroupRef("ml", "train-a", "uid-train-a", 1000)
MEMBERS = [PodRef("ml", f"train-a-{i}", f"uid-train-a-{i}", 1000) for i in range(3)]
PLACED = [Nomination(MEMBERS[0], "node-1"), Nomination(MEMBERS[1], "node-1")]
PLACED.append(Nomination(MEMBERS[2], "node-2"))
TRAIN_B = "podGroup ml/train-b"
VICTIMS = [
    VictimPlacement(PodRef("ml", "train-b-0", "uid-train-b-0", 10), "node-1", TRAIN_B),
    VictimPlacement(PodRef("ml", "train-b-1", "uid-train-b-1", 10), "node-2", TRAIN_B),
    VictimPlacement(PodRef("default", "loose", "uid-loose", 0), "node-2", "pod default/loose"),
]


def decided(verdict: Verdict = Verdict.PREEMPT) -> GroupSelection:
    preempts = verdict is Verdict.PREEMPT
    return GroupSelection(
        GROUP,
        f"the planner says {verdict.value}",
        verdict=verdict,
        placements=list(PLACED) if preempts else [],
        victims=list(VICTIMS) if preempts else [],
        victim_groups=["ml/train-b"] if preempts else [],
        min_count=3,
        story=DecisionStory(f"{verdict} for pod group ml/train-a", why="the planner's words"),
    )


Answer = VictimResult | Exception
Handle = WorkflowHandle[GroupPreemptionWorkflow, GroupPreemptionResult]
Run = Callable[..., Awaitable[GroupPreemptionResult]]


@dataclass
class Script:
    """What the stand-ins answer, and what they were asked."""

    selections: list[GroupSelection] = field(default_factory=lambda: [decided()])
    deletes: dict[str, Answer] = field(default_factory=dict)
    standings: list[GroupStanding] = field(
        default_factory=lambda: [GroupStanding(Standing.PENDING, pending=3)]
    )
    calls: list[str] = field(default_factory=list)  # each victim's step, round or not
    rounds: list[str] = field(default_factory=list)  # each round of victims, as one step
    delete_inputs: list[GroupVictimInput] = field(default_factory=list)
    ends: list[GroupEndInput] = field(default_factory=list)

    def stand_ins(self) -> list[Callable[..., object]]:
        @activity.defn(name="select_group_preemption")
        async def select(request: SelectGroupInput) -> GroupSelection:
            self.calls.append("select")
            return self.selections.pop(0) if len(self.selections) > 1 else self.selections[0]

        @activity.defn(name="nominate_members")
        async def nominate(request: MembersNomination) -> MembersNominated:
            self.calls.append(f"nominate:{len(request.placements)}")
            return MembersNominated(len(request.placements))

        @activity.defn(name="mark_victim")
        async def mark(request: VictimInput) -> VictimResult:
            self.calls.append(f"mark:{request.victim.name}@{request.node}")
            return VictimResult(Fate.MARKED)

        @activity.defn(name="delete_group_victim")
        async def delete(request: GroupVictimInput) -> VictimResult:
            self.calls.append(f"delete:{request.step.victim.name}@{request.step.node}")
            self.delete_inputs.append(request)
            given = self.deletes.get(request.step.victim.name, VictimResult(Fate.DELETED))
            if isinstance(given, Exception):
                raise given
            return given

        @activity.defn(name="mark_victims")
        async def mark_round(request: VictimRound) -> list[VictimResult]:
            self.rounds.append("marks:" + ",".join(v.pod.name for v in request.victims))
            return [await mark(step) for step in request.steps()]

        @activity.defn(name="delete_group_victims")
        async def delete_round(request: GroupVictimRound) -> list[VictimResult]:
            self.rounds.append("deletes:" + ",".join(v.pod.name for v in request.round.victims))
            answers = []
            for step in request.round.steps():
                one = GroupVictimInput(step, request.group, request.placements)
                try:
                    answers.append(await delete(one))
                except ApplicationError as error:  # refused for good: FAILED in its round
                    answers.append(VictimResult(Fate.FAILED, error.message))
            return answers

        @activity.defn(name="unmark_victim")
        async def unmark(request: VictimInput) -> str:
            self.calls.append(f"unmark:{request.victim.name}")
            return "DisruptionTarget removed"

        @activity.defn(name="check_group")
        async def check(request: GroupCheck) -> GroupStanding:
            self.calls.append("check")
            return self.standings.pop(0) if len(self.standings) > 1 else self.standings[0]

        @activity.defn(name="record_group_end")
        async def record_end(request: GroupEndInput) -> int:
            self.calls.append(f"end:{request.outcome.value}")
            self.ends.append(request)
            return 1

        return [select, nominate, mark, delete, mark_round, delete_round, unmark, check, record_end]


@pytest.fixture
async def run(time_skipping: WorkflowEnvironment) -> AsyncIterator[Run]:
    async def preempt(
        script: Script,
        on_start: Callable[[Handle], Awaitable[None]] | None = None,
        **options: Any,
    ) -> GroupPreemptionResult:
        options.setdefault("search_attributes", False)  # the test server cannot register them
        options.setdefault("scheduled_wait_seconds", 300.0)
        task_queue = f"group-runbook-{uuid.uuid4()}"
        async with Worker(
            time_skipping.client,
            task_queue=task_queue,
            workflows=[GroupPreemptionWorkflow],
            activities=script.stand_ins(),
            workflow_runner=workflow_runner(),
        ):
            handle = await time_skipping.client.start_workflow(
                GroupPreemptionWorkflow.run,
                GroupPreemptionRequest(GROUP, **options),
                id=f"group-preemption-{uuid.uuid4()}",
                task_queue=task_queue,
            )
            if on_start is not None:
                await on_start(handle)
            return await handle.result()

    yield preempt


def members_bound(*indexes: int) -> Callable[[Handle], Awaitable[None]]:
    async def send(handle: Handle) -> None:
        for i in indexes:
            await handle.signal(GroupPreemptionWorkflow.member_bound, args=[MEMBERS[i].uid, "n"])

    return send


async def test_a_group_preemption_nominates_marks_then_deletes_in_rounds(run: Run) -> None:
    script = Script()
    result = await run(script, members_bound(0, 1, 2))
    rounds = [script.calls[:1], script.calls[1:5], script.calls[5:7], script.calls[7:]]
    assert [sorted(r) for r in rounds] == [
        ["select"],
        [
            "mark:loose@node-2",
            "mark:train-b-0@node-1",
            "mark:train-b-1@node-2",
            "nominate:3",
        ],
        ["delete:train-b-0@node-1", "delete:train-b-1@node-2"],
        ["delete:loose@node-2", "end:completed"],
    ]
    assert script.rounds == [  # one step per round of victims
        "marks:train-b-0,train-b-1,loose",
        "deletes:train-b-0,train-b-1",
        "deletes:loose",
    ]
    assert (result.outcome, result.bound, result.min_count) == (Outcome.COMPLETED, 3, 3)
    assert result.message == "ml/train-a: 3 member(s) bound (minCount 3)"
    assert result.retryable is None
    assert [v.fate for v in result.victims] == [Fate.DELETED] * 3
    assert [(e.bound, e.min_count) for e in script.ends] == [(3, 3)]


async def test_each_delete_names_the_group_and_where_its_members_are_placed(run: Run) -> None:
    script = Script()
    await run(script, members_bound(0, 1, 2))
    assert {d.group for d in script.delete_inputs} == {GROUP}
    assert all(d.placements == PLACED for d in script.delete_inputs)
    assert {d.step.preemptor for d in script.delete_inputs} == {GROUP.as_preemptor()}


async def test_the_state_query_tells_members_min_count_and_the_last_victim(
    run: Run, time_skipping: WorkflowEnvironment
) -> None:
    seen: list[GroupPreemptionProgress] = []

    async def watch(handle: Handle) -> None:
        state = await handle.query(GroupPreemptionWorkflow.state)
        while state.pending_last_victim is None:
            state = await handle.query(GroupPreemptionWorkflow.state)
        seen.append(state)
        await members_bound(0, 1, 2)(handle)

    script = Script(deletes={"loose": VictimResult(Fate.DELETED)})
    result = await run(script, watch)
    [during] = seen
    assert during.pending_last_victim == VICTIMS[2].pod
    assert (during.min_count, [m.pod for m in during.members]) == (3, MEMBERS)
    assert during.preempting is False
    assert [m.bound_to for m in result.members] == ["n", "n", "n"]


async def test_a_throttled_decision_sleeps_then_decides_afresh(run: Run) -> None:
    held = decided()
    held.retry_after_seconds = 40.0
    script = Script(selections=[held, decided()])
    result = await run(script, members_bound(0, 1, 2))
    assert script.calls[:2] == ["select", "select"]
    assert (result.outcome, result.throttled) == (Outcome.COMPLETED, 1)


@pytest.mark.parametrize(
    ("verdict", "end", "retryable"),
    [
        (Verdict.INELIGIBLE, Outcome.INELIGIBLE, None),
        (Verdict.UNSCHEDULABLE, Outcome.NO_CANDIDATE, None),
        (Verdict.FITS_WITHOUT_PREEMPTION, Outcome.COMPLETED, None),
        (Verdict.UNSUPPORTED, Outcome.UNSUPPORTED, False),
    ],
)
async def test_a_final_verdict_ends_at_once_touching_nothing(
    run: Run, verdict: Verdict, end: Outcome, retryable: bool | None
) -> None:
    script = Script(selections=[decided(verdict)])
    result = await run(script)
    assert (result.outcome, result.retryable) == (end, retryable)
    assert script.calls == ["select"]


async def test_a_dry_run_decides_and_touches_nothing(run: Run) -> None:
    script = Script()
    result = await run(script, dry_run=True)
    assert (result.outcome, result.message) == (
        Outcome.DRY_RUN,
        "dry run: the planner says Preempt",
    )
    assert script.calls == ["select"]


async def test_a_group_gone_before_the_decision_is_aborted(run: Run) -> None:
    script = Script(selections=[GroupSelection(GROUP, "the pod group ml/train-a is gone")])
    result = await run(script)
    assert (result.outcome, result.message) == (
        Outcome.ABORTED,
        "the pod group ml/train-a is gone",
    )
    assert script.calls == ["select", "end:aborted"]


async def test_members_bound_elsewhere_stop_the_deletes(run: Run) -> None:
    elsewhere = "members of the pod group ml/train-a were bound elsewhere: ml/train-a-0 ..."
    spared = VictimResult(Fate.SPARED, "stopped", stopped=elsewhere)
    script = Script(deletes={"train-b-0": spared})
    result = await run(script)
    assert (result.outcome, result.message) == (Outcome.ABORTED, elsewhere)
    assert "delete:loose@node-2" not in script.calls
    assert sorted(c for c in script.calls if c.startswith("unmark:")) == [
        "unmark:loose",
        "unmark:train-b-0",
    ]
    assert script.calls[-1] == "end:aborted"
    assert [v.fate for v in result.victims] == [Fate.SPARED, Fate.DELETED, Fate.SPARED]


async def test_a_delete_refused_for_good_fails_the_run(run: Run) -> None:
    denied = ApplicationError("forbidden: cannot delete pods", type="Forbidden", non_retryable=True)
    script = Script(deletes={"train-b-1": denied})
    with pytest.raises(WorkflowFailureError) as failed:
        await run(script)
    carried = group_result_of_failure(failed.value)
    assert carried is not None
    assert (carried.outcome, carried.retryable) == (Outcome.FAILED, False)
    assert carried.message == (
        "victim ml/train-b-1 could not be preempted: forbidden: cannot delete pods"
    )
    [end] = script.ends
    assert (end.failed_victim, end.failed_victim_node) == (VICTIMS[1].pod, "node-2")
    assert "delete:loose@node-2" not in script.calls


async def test_without_signals_the_group_is_polled_until_min_count_is_bound(run: Run) -> None:
    bound = {m.key: "node-1" for m in MEMBERS}
    script = Script(
        standings=[
            GroupStanding(Standing.PENDING, pending=3),
            GroupStanding(Standing.BOUND, bound=bound),
        ]
    )
    result = await run(script, scheduled_poll_seconds=10.0)
    assert script.calls.count("check") == 2
    assert (result.outcome, result.bound) == (Outcome.COMPLETED, 3)


async def test_fewer_than_min_count_bound_by_the_deadline_completes_saying_so(run: Run) -> None:
    script = Script()
    result = await run(script, members_bound(0), scheduled_wait_seconds=60.0)
    assert result.outcome is Outcome.COMPLETED
    assert result.message == "1 of minCount 3 member(s) of ml/train-a bound within 60s"
    assert [(e.bound, e.seconds_to_schedule) for e in script.ends] == [(1, None)]


async def test_a_group_deleted_while_waited_for_ends_the_wait(run: Run) -> None:
    script = Script(standings=[GroupStanding(Standing.GONE)])
    result = await run(script)
    assert (result.outcome, result.message) == (
        Outcome.COMPLETED,
        "the pod group ml/train-a is gone",
    )


async def test_with_local_activities_the_same_steps_run(run: Run) -> None:
    script = Script()
    result = await run(script, members_bound(0, 1, 2), local_activities=True)
    assert result.outcome is Outcome.COMPLETED
    assert sorted(script.calls) == sorted(
        [
            "select",
            "nominate:3",
            "mark:train-b-0@node-1",
            "mark:train-b-1@node-2",
            "mark:loose@node-2",
            "delete:train-b-0@node-1",
            "delete:train-b-1@node-2",
            "delete:loose@node-2",
            "end:completed",
        ]
    )

"""One group preemption: room for a pending pod group, from decision to its members bound,
as a durable workflow (one per pending group, however many of its members are pending).

A run started now follows the one runbook of every preemption (`workflows.runbook`, issue
29): `GroupRunbook` below says what is a group's own in it (the group decides, every placed
member is nominated, the room is for the group: each victim's step re-checks the group, and
the victims are on many nodes, each recorded on its own). A run started before it
(`GroupPreemptionRequest.runbook` 1) follows the runbook it was recorded with, kept below so
its history replays:

1. Select (`select_group_preemption`): re-read the group, decide for it under the same
   decision lock and claims as pod preemptions, and write the decision ahead (the decision,
   each member it placed, each victim with its unit). A decision that ends the preemption
   (fits, ineligible, no candidate, unsupported, a dry run) ends it here, its end written
   ahead with it; a group that no longer needs room (gone, replaced, no pending member)
   ends it here too (aborted, recorded by `record_group_end`). Held back by the eviction
   budget: sleep, then select again.
2. Nominate and mark, all at once: every placed member's nominatedNodeName
   (`nominate_members`, one step for them all; failures there are recorded, not fatal, as
   upstream), and every victim's DisruptionTarget condition on whatever node it is
   (`mark_victims`, one step for them all).
3. Delete (`delete_group_victims`) every victim but the last, on every node, in one step;
   then the last, recorded in workflow state first. Each delete first re-checks the group
   (`reason_to_stop_group`): gone, replaced, or members bound to other nodes than their
   nominations (placed elsewhere) stops the preemption, aborted, with no pod evicted for
   nothing. Victims marked but not deleted are unmarked before the end is recorded.
   (`workflows.victims`: the same machinery as a pod preemption's.)
4. Wait until minCount members are bound: the trigger loop's `member_bound` signals, or a
   rare poll (`check_group`), until the deadline; a group deleted meanwhile ends the wait.
   Then record the end (`record_group_end`).

The `state` query answers for the group and for any member (`members`): the trigger loop
answers upstream's `IsPodRunningPreemption` for a member from it. The victims go in rounds
(`workflows.victims`), each victim still settled, retried and recorded on its own; the
search attributes change when the decision is made and when the run ends. A worker killed
at any point resumes from the last completed step: no victim is deleted twice.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeUpdate
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from preemptctl.activities.contracts import (
        DecisionStory,
        Nomination,
        PreemptVictimInput,
        RunRef,
        VictimFate,
        VictimInput,
        VictimPodGroup,
        VictimRound,
        VictimTarget,
        Written,
    )
    from preemptctl.activities.group_contracts import (
        GroupCheck,
        GroupEndInput,
        GroupSelection,
        GroupVictimInput,
        GroupVictimRound,
        MembersNomination,
        SelectGroupInput,
    )
    from preemptctl.activities.group_preemption import GroupPreemptionActivities
    from preemptctl.ledger.vocabulary import Fate, Outcome, outcome_of_decision
    from preemptctl.preemption.decision import PodRef, Verdict
    from preemptctl.preemption.standing import Standing, reason_to_stop_group
    from preemptctl.workflows import search_attributes as sa
    from preemptctl.workflows.contract import (
        PREEMPTION_FAILED,
        RUNBOOK,
        GroupPreemptionProgress,
        GroupPreemptionRequest,
        GroupPreemptionResult,
        MemberProgress,
        Phase,
        VictimProgress,
    )
    from preemptctl.workflows.runbook import Runbook, run_ref
    from preemptctl.workflows.steps import (
        KUBE_DEADLINE,
        LEDGER_DEADLINE,
        SELECT_ATTEMPT,
        StepFailed,
        Steps,
        Stop,
        cause,
        ended_in_words,
        signalled_within,
    )
    from preemptctl.workflows.victims import VictimRunbook


@workflow.defn(name="GroupPreemption")
class GroupPreemptionWorkflow:
    @workflow.init
    def __init__(self, request: GroupPreemptionRequest) -> None:
        self._request = request
        self._group = request.group
        self._state = GroupPreemptionProgress()
        self._throttled = 0
        self._scheduler_name = "default-scheduler"
        self._story: DecisionStory | None = None  # the decision in words, for the UI
        self._bound: dict[str, str] = {}  # member UID -> node, as signalled or polled
        self._steps = Steps(
            request.call_timeout_seconds,
            request.local_activities,
            lambda method: method == GroupPreemptionActivities.select_group_preemption,
        )
        self._victims = VictimRunbook(
            self._steps,
            self._state,
            self._victim_input,
            GroupPreemptionActivities.delete_group_victim,
            self._delete_input,
            round_input=self._round_input,
            delete_round=GroupPreemptionActivities.delete_group_victims,
            delete_round_input=self._delete_round_input,
        )
        self._victims.in_rounds = True  # a round of victims per step (workflows.victims)
        self._updates: list[SearchAttributeUpdate[Any]] = []
        self._evaluation_seconds: float | None = None
        self._execution_seconds: float | None = None
        self._runbook = GroupRunbook(
            request,
            self._state,
            Steps(
                request.call_timeout_seconds,
                request.local_activities,
                lambda method: method == GroupPreemptionActivities.select_group_preemption,
                local_select=True,
            ),
        )

    @workflow.query(name="state")
    def state(self) -> GroupPreemptionProgress:
        return self._state

    @workflow.signal(name="member_bound")
    def member_bound(self, uid: str, node: str) -> None:
        """The trigger loop saw the member `uid` bound to `node`."""
        self._bound[uid] = node
        self._note_bound()

    @workflow.run
    async def run(self, request: GroupPreemptionRequest) -> GroupPreemptionResult:
        if request.runbook >= RUNBOOK:
            return await self._runbook.run()
        try:
            return await self._preempt()
        except Stop as stop:
            return await self._finish(stop)

    # -- the runbook of runs started before issue 29 ----------------------------------------

    async def _preempt(self) -> GroupPreemptionResult:
        started = workflow.now()
        selection = await self._select()
        decided = workflow.now()
        self._evaluation_seconds = (decided - started).total_seconds()
        verdict = selection.verdict
        if verdict is None:
            raise Stop(Outcome.ABORTED, selection.message)  # the group moved on
        dry_run = self._request.dry_run or selection.dry_run
        outcome = outcome_of_decision(verdict, dry_run)
        if outcome is Outcome.DRY_RUN:
            raise Stop(outcome, f"dry run: {selection.message}", written_ahead=True)
        if outcome is not None:
            retryable = verdict is not Verdict.UNSUPPORTED
            raise Stop(outcome, selection.message, written_ahead=True, retryable=retryable)

        self._enter(Phase.PREEMPTING)
        await self._victims.preempt(self._state.victims, [self._nominate(selection)])
        self._execution_seconds = (workflow.now() - decided).total_seconds()

        self._enter(Phase.WAITING, searchable=False)
        return await self._wait_for_min_count()

    async def _select(self) -> GroupSelection:
        """Select, sleeping out the eviction budget (recorded each time) until it allows."""
        self._state.preempting = True
        while True:
            selection = await self._steps.call(
                GroupPreemptionActivities.select_group_preemption,
                SelectGroupInput(
                    self._run(),
                    self._group,
                    self._request.dry_run,
                    throttled=self._throttled,
                    started_by=self._request.started_by,
                    retry_reason=self._request.retry_reason,
                ),
                f"select victims for pod group {self._group.key}",
                KUBE_DEADLINE,
                attempt=SELECT_ATTEMPT,
            )
            if not selection.retry_after_seconds:
                break
            self._throttled += 1
            self._state.message = selection.message
            await workflow.sleep(timedelta(seconds=selection.retry_after_seconds))
        state = self._state
        state.members = [MemberProgress(p.pod, p.node) for p in selection.placements]
        state.victims = [VictimProgress(v.pod, node=v.node) for v in selection.victims]
        state.min_count = selection.min_count
        state.message = selection.message
        self._scheduler_name = selection.scheduler_name
        self._note_bound()
        if selection.victims:
            self._updates.append(
                sa.VICTIM_PODS.value_set(sa.within_limit([v.pod.key for v in selection.victims]))
            )
        if selection.victim_groups:
            self._updates.append(
                sa.VICTIM_GROUPS.value_set(sa.within_limit(selection.victim_groups))
            )
        self._story = selection.story
        if self._story is not None:
            workflow.set_current_details(self._story.markdown())
        return selection

    async def _nominate(self, selection: GroupSelection) -> None:
        try:
            await self._steps.call(
                GroupPreemptionActivities.nominate_members,
                MembersNomination(
                    self._run(),
                    self._group,
                    selection.placements,
                    selection.nominations_to_clear,
                ),
                f"nominate {len(selection.placements)} member(s) of {self._group.key}",
                KUBE_DEADLINE,
            )
        except StepFailed as error:
            # Upstream goes on without the nominations too; the victims are what matter.
            workflow.logger.warning(
                "could not nominate the members of %s: %s", self._group.key, cause(error)
            )

    def _victim_input(self, victim: VictimProgress) -> VictimInput:
        return VictimInput(
            self._run(),
            victim.pod,
            self._group.as_preemptor(),
            victim.node or "",
            use_eviction=self._request.use_eviction,
            grace_period_seconds=self._request.grace_period_seconds,
            scheduler_name=self._scheduler_name,
        )

    def _round_input(self, victims: list[VictimProgress]) -> VictimRound:
        return VictimRound(
            self._run(),
            self._group.as_preemptor(),
            [VictimTarget(v.pod, v.node or "") for v in victims],
            use_eviction=self._request.use_eviction,
            grace_period_seconds=self._request.grace_period_seconds,
            scheduler_name=self._scheduler_name,
        )

    def _delete_round_input(self, victims: list[VictimProgress]) -> GroupVictimRound:
        placed = [Nomination(member.pod, member.node) for member in self._state.members]
        return GroupVictimRound(self._round_input(victims), self._group, placed)

    def _delete_input(self, victim: VictimProgress) -> GroupVictimInput:
        placed = [Nomination(member.pod, member.node) for member in self._state.members]
        return GroupVictimInput(self._victim_input(victim), self._group, placed)

    async def _wait_for_min_count(self) -> GroupPreemptionResult:
        """Until minCount members are bound (the trigger's signals, or a poll), the group is
        gone, or the deadline passes; then record the end."""
        started = workflow.now()
        wait = self._request.scheduled_wait_seconds
        deadline = started + timedelta(seconds=wait)
        reason = ""
        while not self._enough_bound():
            remaining = (deadline - workflow.now()).total_seconds()
            poll = min(self._request.scheduled_poll_seconds, max(remaining, 0.0))
            if poll > 0 and await signalled_within(
                self._enough_bound, poll, cancel_the_timer=False
            ):
                break
            standing = await self._steps.call(
                GroupPreemptionActivities.check_group,
                GroupCheck(self._group, [member.pod for member in self._state.members]),
                f"are {self._state.min_count} member(s) of {self._group.key} bound yet",
                KUBE_DEADLINE,
            )
            self._bound_from(standing.bound)
            if self._enough_bound():
                break
            if standing.state in (Standing.GONE, Standing.REPLACED):
                reason = reason_to_stop_group(standing, self._group.key)
                break
            if workflow.now() >= deadline:
                reason = (
                    f"{self._state.bound} of minCount {self._state.min_count} member(s) of "
                    f"{self._group.key} bound within {wait:g}s"
                )
                break
        seconds = (workflow.now() - started).total_seconds()
        state = self._state
        message = reason or (
            f"{self._group.key}: {state.bound} member(s) bound (minCount {state.min_count})"
        )
        await self._record_end(
            Outcome.COMPLETED, message, seconds_to_schedule=None if reason else seconds
        )
        result = self._result(Outcome.COMPLETED, message)
        if not reason:
            result.seconds_to_schedule = seconds
        return result

    def _enough_bound(self) -> bool:
        return self._state.bound >= self._state.min_count

    def _bound_from(self, bound: dict[str, str]) -> None:
        """Members the cluster shows bound ("ns/name" -> node), from a poll."""
        for member in self._state.members:
            node = bound.get(member.pod.key)
            if node:
                self._bound[member.pod.uid] = node
        self._note_bound()

    def _note_bound(self) -> None:
        for member in self._state.members:
            member.bound_to = self._bound.get(member.pod.uid, member.bound_to)

    # -- bookkeeping ------------------------------------------------------------------------

    async def _finish(self, stop: Stop) -> GroupPreemptionResult:
        await self._victims.unmark_spared()
        if not stop.written_ahead:
            await self._record_end(
                stop.outcome,
                stop.message,
                failed_victim=stop.failed_victim,
                retryable=stop.retryable,
            )
        result = self._result(stop.outcome, stop.message, retryable=stop.result_retryable)
        if stop.outcome is Outcome.FAILED:
            raise ApplicationError(
                stop.message, result, type=PREEMPTION_FAILED, non_retryable=True
            ) from None
        return result

    def _result(
        self, outcome: Outcome, message: str, *, retryable: bool | None = None
    ) -> GroupPreemptionResult:
        state = self._state
        state.phase, state.outcome, state.message = Phase.FINISHED, outcome, message
        state.preempting, state.pending_last_victim = False, None
        self._upsert(
            [
                sa.PREEMPTION_PHASE.value_set(Phase.FINISHED.value),
                sa.PREEMPTION_OUTCOME.value_set(outcome.value),
            ]
        )
        workflow.set_current_details(ended_in_words(self._story, outcome, message))
        return GroupPreemptionResult(
            outcome,
            message,
            list(state.members),
            list(state.victims),
            state.min_count,
            state.bound,
            throttled=self._throttled,
            retryable=retryable,
            evaluation_seconds=self._evaluation_seconds,
            execution_seconds=self._execution_seconds,
            decision=self._story.line() if self._story is not None else "",
        )

    async def _record_end(
        self,
        outcome: Outcome,
        message: str,
        *,
        seconds_to_schedule: float | None = None,
        failed_victim: PodRef | None = None,
        retryable: bool = True,
    ) -> None:
        failed_node = next(
            (v.node for v in self._state.victims if failed_victim and v.pod == failed_victim),
            None,
        )
        await self._steps.call(
            GroupPreemptionActivities.record_group_end,
            GroupEndInput(
                self._run(),
                self._group,
                outcome,
                message,
                bound=self._state.bound,
                min_count=self._state.min_count,
                seconds_to_schedule=seconds_to_schedule,
                failed_victim=failed_victim,
                failed_victim_node=failed_node,
                retryable=retryable,
                placements=[Nomination(m.pod, m.node) for m in self._state.members],
            ),
            f"ledger: {outcome.value}",
            LEDGER_DEADLINE,
        )

    def _run(self) -> RunRef:
        info = workflow.info()
        return RunRef(info.workflow_id, info.run_id, workflow.now().isoformat())

    def _enter(self, phase: Phase, *, searchable: bool = True) -> None:
        """The run's phase, in the query; in the search attributes too when `searchable`
        (the wait is not: the attribute goes from `preempting` to `finished`)."""
        self._state.phase = phase
        if searchable:
            self._upsert([sa.PREEMPTION_PHASE.value_set(phase.value)])

    def _upsert(self, updates: list[SearchAttributeUpdate[Any]]) -> None:
        """One command for `updates` and those held back since the last one."""
        updates, self._updates = self._updates + updates, []
        if updates and self._request.search_attributes:
            workflow.upsert_search_attributes(updates)


ALONE = "pod "  # the unit of a victim taken alone, as a decision names it ("pod ml/x")


class GroupRunbook(Runbook[GroupSelection, GroupPreemptionResult]):
    """The one runbook (`workflows.runbook`), for a pod group: the room is for `group`'s
    placed members, each on its node; its victims are on many nodes, each on its own."""

    def __init__(
        self, request: GroupPreemptionRequest, state: GroupPreemptionProgress, steps: Steps
    ) -> None:
        super().__init__(steps, state, dry_run=request.dry_run, search=request.search_attributes)
        self._request = request
        self._progress = state
        self._group = request.group
        self._scheduler_name = "default-scheduler"
        self._victim_pod_groups: list[VictimPodGroup] = []

    async def select(self, throttled: int) -> GroupSelection:
        request = self._request
        return await self.steps.call(
            GroupPreemptionActivities.select_group_preemption,
            SelectGroupInput(
                run_ref(),
                self._group,
                request.dry_run,
                throttled=throttled,
                started_by=request.started_by,
                retry_reason=request.retry_reason,
            ),
            f"select victims for pod group {self._group.key}",
            KUBE_DEADLINE,
            attempt=SELECT_ATTEMPT,
        )

    def take(self, selection: GroupSelection) -> list[SearchAttributeUpdate[Any]]:
        state = self._progress
        state.members = [MemberProgress(p.pod, p.node) for p in selection.placements]
        state.victims = [VictimProgress(v.pod, node=v.node) for v in selection.victims]
        state.min_count = selection.min_count
        self._scheduler_name = selection.scheduler_name
        self._victim_pod_groups = selection.victim_pod_groups
        updates: list[SearchAttributeUpdate[Any]] = []
        if selection.victims:
            updates.append(
                sa.VICTIM_PODS.value_set(sa.within_limit([v.pod.key for v in selection.victims]))
            )
        if selection.victim_groups:
            updates.append(sa.VICTIM_GROUPS.value_set(sa.within_limit(selection.victim_groups)))
        return updates

    async def nominate(self, selection: GroupSelection) -> list[Written]:
        nominated = await self.steps.call(
            GroupPreemptionActivities.nominate_members,
            MembersNomination(
                run_ref(),
                self._group,
                selection.placements,
                selection.nominations_to_clear,
                record=False,
            ),
            f"nominate {len(selection.placements)} member(s) of {self._group.key}",
            KUBE_DEADLINE,
        )
        return nominated.writes

    def victim_input(self, victim: VictimProgress) -> VictimInput:
        request = self._request
        return VictimInput(
            run_ref(),
            victim.pod,
            self._group.as_preemptor(),
            victim.node or "",
            use_eviction=request.use_eviction,
            grace_period_seconds=request.grace_period_seconds,
            scheduler_name=self._scheduler_name,
        )

    def units_taken_whole(self, selection: GroupSelection) -> dict[str, str]:
        return {
            victim.pod.uid: victim.unit
            for victim in selection.victims
            if victim.unit and not victim.unit.startswith(ALONE)
        }

    def victim_step(self, victim: VictimInput) -> PreemptVictimInput:
        placed = [Nomination(member.pod, member.node) for member in self._progress.members]
        return PreemptVictimInput(victim, self._group, placed)

    async def record_end(self, stop: Stop, fates: list[VictimFate], writes: list[Written]) -> None:
        await self.steps.call(
            GroupPreemptionActivities.record_group_end,
            GroupEndInput(
                run_ref(),
                self._group,
                stop.outcome,
                stop.message,
                min_count=self._progress.min_count,
                failed_victim=stop.failed_victim,
                retryable=stop.retryable,
                victims=fates,
                writes=writes,
                runbook=RUNBOOK,
                placements=[Nomination(m.pod, m.node) for m in self._progress.members],
                victim_pod_groups=self._victim_pod_groups,
            ),
            f"ledger: {stop.outcome.value}",
            LEDGER_DEADLINE,
        )

    def completed(self) -> str:
        state = self._progress
        victims = [v for v in state.victims if v.fate is not Fate.SPARED]
        nodes = len({v.node for v in victims if v.node})
        return (
            f"{len(victims)} victim(s) preempted on {nodes} node(s) for pod group "
            f"{self._group.key}, {len(state.members)} member(s) nominated (minCount "
            f"{state.min_count}); their binds are the scheduler's, recorded when the watch "
            "shows them"
        )

    def result(
        self, outcome: Outcome, message: str, retryable: bool | None
    ) -> GroupPreemptionResult:
        self.finished(outcome, message)
        state = self._progress
        return GroupPreemptionResult(
            outcome,
            message,
            list(state.members),
            list(state.victims),
            state.min_count,
            state.bound,
            throttled=self.throttled,
            retryable=retryable,
            evaluation_seconds=self.evaluation_seconds,
            execution_seconds=self.execution_seconds,
            decision=self.story.line() if self.story is not None else "",
            runbook=RUNBOOK,
        )

"""One preemption, from decision to the preemptor's scheduling, as a durable workflow.

A run started now follows the one runbook of every preemption (`workflows.runbook`, issue
29): `PodRunbook` below says what is a pod's own in it (which activities decide, nominate
and record the end, and that the room is for a pod). A run started before it
(`PreemptionRequest.runbook` 1) follows the runbook it was recorded with, kept below so its
history replays:

1. Select (`select_preemption`): re-read the preemptor, decide under the decision lock and
   write the decision ahead. A decision that ends the preemption (`outcome_of_decision`:
   fits, ineligible, no candidate, unsupported, a dry run) ends it here, its end written
   ahead with it; a preemptor that no longer needs room ends it here too (aborted, recorded
   by `record_end`). Held back by the eviction budget: sleep (a durable timer), then select
   again.
2. Nominate and mark, all at once: the preemptor's nomination to the chosen node, clearing
   lower-priority nominations to it (`nominate_preemptor`; failures there are recorded, not
   fatal, as upstream), and every victim's DisruptionTarget condition (`mark_victim`). A
   mark that fails for good fails the preemption before any victim is deleted.
3. Delete (`delete_victim`) every victim but the last, in parallel; then the last, once
   every other victim is out of the way. The last is recorded in workflow state before it
   is deleted (upstream's `lastVictimsPendingPreemption`). Each delete first re-checks the
   preemptor (`reason_to_stop`): gone, replaced or bound elsewhere stops the preemption
   (aborted, recorded by `record_end`) with no pod evicted for nothing. A write that fails
   for good fails the preemption. A victim marked
   but then not deleted (the run aborted or failed) has its DisruptionTarget condition
   removed at once (`unmark_victim`), before the end is recorded.

   (`workflows.victims`: the victim machinery a group preemption shares.)

   Deliberate difference from upstream (`prepareCandidateAsync`, which marks and deletes
   each victim in turn, the last one after the others): the marks all go first, together
   with the nomination, so a preemption takes three rounds of Kubernetes calls after its
   decision (nominate and mark, delete the others, delete the last) instead of five. The
   price is paid only when a run stops early: the last victim, marked, is unmarked.
4. Wait for the bind: the trigger loop's `preemptor_bound` signal, or a rare poll
   (`check_preemptor`), until the deadline. Then record the end (`record_end`).

Each activity appends the ledger events of what it did. The victims go in rounds
(`VICTIMS_IN_ROUNDS`): one step marks them all, one deletes all but the last, one the last,
each victim still settled, retried and recorded on its own within its step, so a preemption
runs six steps whatever its victims (select, nominate, mark, delete the others, delete the
last, record the end), and appends to the ledger once per round (tests/workflows/
test_costs.py counts it). The search attributes change twice in a run that preempts
(decided and preempting; finished: the wait is told by the `state` query alone), once in
one that ends at its decision; a bind signalled while the workflow waits leaves the poll's
timer to lapse rather than cancel it. Runs recorded before the patch took a step per victim
(3 + 2v) and changed the search attributes a third time. A worker killed at any point
resumes from the last completed step: no victim is deleted twice, none is forgotten.

The result says how the preemption ended (its `Outcome`), and, for a run that failed or was
refused as unsupported, whether starting it again can help (`retryable`: False for an
Unsupported verdict and for a write refused for good, such as an RBAC denial; None for any
other end, where there is nothing to retry). A failed preemption fails the workflow (so the
UI shows it failed); the failure's details carry the same `PreemptionResult` (see
`result_of_failure`).
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
        EndInput,
        NominationInput,
        PreemptorCheck,
        PreemptVictimInput,
        RunRef,
        SelectInput,
        Selection,
        VictimFate,
        VictimInput,
        VictimPodGroup,
        VictimRound,
        VictimTarget,
        Written,
    )
    from preemptctl.activities.preemption import PreemptionActivities
    from preemptctl.ledger.vocabulary import Fate, Outcome, outcome_of_decision
    from preemptctl.preemption.decision import PodRef, Verdict
    from preemptctl.preemption.standing import Standing, reason_to_stop
    from preemptctl.workflows import search_attributes as sa
    from preemptctl.workflows.contract import (
        PREEMPTION_FAILED,
        RUNBOOK,
        Phase,
        PreemptionProgress,
        PreemptionRequest,
        PreemptionResult,
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


ABORT_RECORDED_BY_THE_WORKFLOW = "abort-recorded-by-the-workflow"
"""The patch under which the workflow records an aborted end itself (`record_end`). Runs
recorded before it had the activity that saw the preemptor move on record it: replaying
those, `workflow.patched` is false and no `record_end` is scheduled for their abort."""


VICTIMS_IN_ROUNDS = "victims-in-rounds"
"""The patch from which a run takes its victims in rounds (`workflows.victims`: one step for
every mark, one for every delete but the last, one for the last, instead of one per victim)
and does not upsert its `waiting` phase (the `state` query still says it; the search
attribute goes from `preempting` to `finished`): fewer history events, and one ledger
append per round. Runs recorded before it replay without it."""


@workflow.defn(name="Preemption")
class PreemptionWorkflow:
    @workflow.init
    def __init__(self, request: PreemptionRequest) -> None:
        self._request = request
        self._preemptor = request.preemptor
        self._state = PreemptionProgress()
        self._bound_to: str | None = None
        self._throttled = 0
        self._scheduler_name = "default-scheduler"  # the preemptor's, as the decision read it
        self._story: DecisionStory | None = None  # the decision in words, for the UI
        self._steps = Steps(
            request.call_timeout_seconds,
            request.local_activities,
            lambda method: method == PreemptionActivities.select_preemption,
        )
        self._victims = VictimRunbook(
            self._steps,
            self._state,
            self._victim_input,
            PreemptionActivities.delete_victim,
            self._victim_input,
            round_input=self._round_input,
            delete_round=PreemptionActivities.delete_victims,
            delete_round_input=self._round_input,
        )
        # Search attribute changes not sent yet: sent with the next phase's, in one command.
        self._updates: list[SearchAttributeUpdate[Any]] = []
        # Upstream's two preemption timings: choosing the victims, then preempting them.
        self._evaluation_seconds: float | None = None
        self._execution_seconds: float | None = None
        self._runbook = PodRunbook(
            request,
            self._state,
            Steps(
                request.call_timeout_seconds,
                request.local_activities,
                lambda method: method == PreemptionActivities.select_preemption,
                local_select=True,
            ),
        )

    @workflow.query(name="state")
    def state(self) -> PreemptionProgress:
        return self._state

    @workflow.signal(name="preemptor_bound")
    def preemptor_bound(self, node: str) -> None:
        """The trigger loop saw the preemptor bound to `node`: the wait is over."""
        self._bound_to = node

    @workflow.run
    async def run(self, request: PreemptionRequest) -> PreemptionResult:
        if request.runbook >= RUNBOOK:
            return await self._runbook.run()
        try:
            return await self._preempt()
        except Stop as stop:
            return await self._finish(stop)

    # -- the runbook of runs started before issue 29 ----------------------------------------

    async def _preempt(self) -> PreemptionResult:
        started = workflow.now()
        selection = await self._select()
        decided = workflow.now()
        self._evaluation_seconds = (decided - started).total_seconds()
        verdict = selection.verdict
        if verdict is None:
            raise Stop(Outcome.ABORTED, selection.message)  # the preemptor moved on
        outcome = outcome_of_decision(verdict, self._request.dry_run or selection.dry_run)
        if outcome is Outcome.DRY_RUN:
            raise Stop(outcome, _dry_run_message(self._request, selection), written_ahead=True)
        if outcome is not None:
            retryable = verdict is not Verdict.UNSUPPORTED
            raise Stop(outcome, selection.message, written_ahead=True, retryable=retryable)
        assert selection.node is not None

        # Runs from this patch on take their victims in rounds and leave the search
        # attributes alone while they wait (`VICTIMS_IN_ROUNDS`).
        in_rounds = workflow.patched(VICTIMS_IN_ROUNDS)
        self._victims.in_rounds = in_rounds
        self._enter(Phase.PREEMPTING)
        await self._preempt_victims(selection, selection.node)
        self._execution_seconds = (workflow.now() - decided).total_seconds()

        self._enter(Phase.WAITING, searchable=not in_rounds)
        return await self._wait_for_the_bind(selection.node)

    async def _select(self) -> Selection:
        """Select, sleeping out the eviction budget (recorded each time) until it allows."""
        self._state.preempting = True
        while True:
            selection = await self._steps.call(
                PreemptionActivities.select_preemption,
                SelectInput(
                    self._run(),
                    self._preemptor,
                    self._request.strategy,
                    self._request.dry_run,
                    throttled=self._throttled,
                    started_by=self._request.started_by,
                    retry_reason=self._request.retry_reason,
                ),
                f"select victims for {self._preemptor.key}",
                KUBE_DEADLINE,
                attempt=SELECT_ATTEMPT,
            )
            if not selection.retry_after_seconds:
                break
            self._throttled += 1
            self._state.message = selection.message
            await workflow.sleep(timedelta(seconds=selection.retry_after_seconds))
        self._preemptor = selection.preemptor
        self._state.node = selection.node
        self._state.victims = [VictimProgress(v, node=selection.node) for v in selection.victims]
        self._scheduler_name = selection.scheduler_name
        self._state.message = selection.message
        if selection.node:
            self._updates.append(sa.TARGET_NODE.value_set(selection.node))
        if selection.victims:
            self._updates.append(
                sa.VICTIM_PODS.value_set(sa.within_limit([v.key for v in selection.victims]))
            )
        self._story = selection.story
        if self._story is not None:
            workflow.set_current_details(self._story.markdown())
        return selection

    async def _nominate(self, selection: Selection, node: str) -> None:
        try:
            await self._steps.call(
                PreemptionActivities.nominate_preemptor,
                NominationInput(self._run(), self._preemptor, node, selection.nominations_to_clear),
                f"nominate {self._preemptor.key} to {node}",
                KUBE_DEADLINE,
            )
        except StepFailed as error:
            # Upstream goes on without the nomination too; the victims are what matter.
            workflow.logger.warning("could not nominate %s: %s", self._preemptor.key, cause(error))

    async def _preempt_victims(self, selection: Selection, node: str) -> None:
        """2) nominate and mark every victim, all at once; 3) delete all but the last in
        parallel, then the last (`workflows.victims`)."""
        await self._victims.preempt(self._state.victims, [self._nominate(selection, node)])

    def _round_input(self, victims: list[VictimProgress]) -> VictimRound:
        node = self._state.node or ""
        return VictimRound(
            self._run(),
            self._preemptor,
            [VictimTarget(v.pod, v.node or node) for v in victims],
            use_eviction=self._request.use_eviction,
            grace_period_seconds=self._request.grace_period_seconds,
            scheduler_name=self._scheduler_name,
        )

    def _victim_input(self, victim: VictimProgress) -> VictimInput:
        node = victim.node or self._state.node or ""
        return VictimInput(
            self._run(),
            victim.pod,
            self._preemptor,
            node,
            use_eviction=self._request.use_eviction,
            grace_period_seconds=self._request.grace_period_seconds,
            scheduler_name=self._scheduler_name,
        )

    async def _wait_for_the_bind(self, node: str) -> PreemptionResult:
        """Until the preemptor is bound (the trigger's signal, or a poll), is gone, or the
        deadline passes; then record the end."""
        started = workflow.now()
        deadline = started + timedelta(seconds=self._request.scheduled_wait_seconds)
        reason = ""
        while self._bound_to is None:
            remaining = (deadline - workflow.now()).total_seconds()
            poll = min(self._request.scheduled_poll_seconds, max(remaining, 0.0))
            if poll > 0 and await signalled_within(
                lambda: self._bound_to is not None,
                poll,
                cancel_the_timer=not self._victims.in_rounds,
            ):
                break
            standing = await self._steps.call(
                PreemptionActivities.check_preemptor,
                PreemptorCheck(self._preemptor),
                f"is {self._preemptor.key} bound yet",
                KUBE_DEADLINE,
            )
            if standing.state is Standing.BOUND:
                self._bound_to = standing.node
                break
            reason = reason_to_stop(standing)  # gone or replaced: nothing left to wait for
            if reason:
                break
            if workflow.now() >= deadline:
                reason = (
                    f"the preemptor was not bound within {self._request.scheduled_wait_seconds:g}s"
                )
                break
        seconds = (workflow.now() - started).total_seconds()
        bound_to = self._bound_to if not reason else None
        await self._record_end(
            Outcome.COMPLETED,
            reason or f"{self._preemptor.key} bound to {bound_to}",
            scheduled_node=bound_to,
            seconds_to_schedule=seconds if bound_to else None,
        )
        result = self._result(
            Outcome.COMPLETED, reason or f"{self._preemptor.key} bound to {bound_to}"
        )
        if bound_to:
            result.preemptor_node, result.seconds_to_schedule = bound_to, seconds
        return result

    # -- bookkeeping ------------------------------------------------------------------------

    async def _finish(self, stop: Stop) -> PreemptionResult:
        await self._victims.unmark_spared()
        if not stop.written_ahead and self._records_its_own(stop.outcome):
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

    @staticmethod
    def _records_its_own(outcome: Outcome) -> bool:
        """The workflow records every end the write-ahead did not; an abort, only in runs
        from `ABORT_RECORDED_BY_THE_WORKFLOW` on (before it, the activity that saw the
        preemptor move on had recorded it)."""
        return outcome is not Outcome.ABORTED or workflow.patched(ABORT_RECORDED_BY_THE_WORKFLOW)

    def _result(
        self, outcome: Outcome, message: str, *, retryable: bool | None = None
    ) -> PreemptionResult:
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
        return PreemptionResult(
            outcome,
            message,
            state.node,
            list(state.victims),
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
        scheduled_node: str | None = None,
        seconds_to_schedule: float | None = None,
        failed_victim: PodRef | None = None,
        retryable: bool = True,
    ) -> None:
        await self._steps.call(
            PreemptionActivities.record_end,
            EndInput(
                self._run(),
                self._preemptor,
                outcome,
                node=self._state.node,
                message=message,
                scheduled_node=scheduled_node,
                seconds_to_schedule=seconds_to_schedule,
                failed_victim=failed_victim,
                retryable=retryable,
            ),
            f"ledger: {outcome.value}",
            LEDGER_DEADLINE,
        )

    def _run(self) -> RunRef:
        info = workflow.info()
        return RunRef(info.workflow_id, info.run_id, workflow.now().isoformat())

    def _enter(self, phase: Phase, *, searchable: bool = True) -> None:
        """The run's phase, in the query; in the search attributes too when `searchable`
        (held back otherwise: sent with the next change, if any)."""
        self._state.phase = phase
        if searchable:
            self._upsert([sa.PREEMPTION_PHASE.value_set(phase.value)])

    def _upsert(self, updates: list[SearchAttributeUpdate[Any]]) -> None:
        """One command for `updates` and those held back since the last one."""
        updates, self._updates = self._updates + updates, []
        if updates and self._request.search_attributes:
            workflow.upsert_search_attributes(updates)


def _dry_run_message(request: PreemptionRequest, selection: Selection) -> str:
    """Why nothing was touched: the request asked for a dry run, or the worker runs dry
    (shadow mode) whatever the request said."""
    if request.dry_run:
        return f"dry run: {selection.message}"
    return f"dry run (the worker runs dry, PREEMPT_DRY_RUN=true): {selection.message}"


class PodRunbook(Runbook[Selection, PreemptionResult]):
    """The one runbook (`workflows.runbook`), for a pod: the room is for `preemptor`, on the
    one node the decision chose."""

    def __init__(self, request: PreemptionRequest, state: PreemptionProgress, steps: Steps) -> None:
        super().__init__(steps, state, dry_run=request.dry_run, search=request.search_attributes)
        self._request = request
        self._progress = state
        self._preemptor = request.preemptor
        self._scheduler_name = "default-scheduler"  # the preemptor's, as the decision read it
        self._victim_pod_groups: list[VictimPodGroup] = []

    async def select(self, throttled: int) -> Selection:
        request = self._request
        return await self.steps.call(
            PreemptionActivities.select_preemption,
            SelectInput(
                run_ref(),
                self._preemptor,
                request.strategy,
                request.dry_run,
                throttled=throttled,
                started_by=request.started_by,
                retry_reason=request.retry_reason,
            ),
            f"select victims for {self._preemptor.key}",
            KUBE_DEADLINE,
            attempt=SELECT_ATTEMPT,
        )

    def take(self, selection: Selection) -> list[SearchAttributeUpdate[Any]]:
        self._preemptor = selection.preemptor
        self._scheduler_name = selection.scheduler_name
        self._victim_pod_groups = selection.victim_pod_groups
        state = self._progress
        state.node = selection.node
        state.victims = [
            VictimProgress(v, node=selection.victim_nodes.get(v.uid, selection.node))
            for v in selection.victims
        ]
        updates: list[SearchAttributeUpdate[Any]] = []
        if selection.node:
            updates.append(sa.TARGET_NODE.value_set(selection.node))
        if selection.victims:
            updates.append(
                sa.VICTIM_PODS.value_set(sa.within_limit([v.key for v in selection.victims]))
            )
        return updates

    async def nominate(self, selection: Selection) -> list[Written]:
        node = selection.node or ""
        nominated = await self.steps.call(
            PreemptionActivities.nominate_preemptor,
            NominationInput(
                run_ref(),
                self._preemptor,
                node,
                selection.nominations_to_clear,
                record=False,
                seen=selection.nominated_node_seen,
            ),
            f"nominate {self._preemptor.key} to {node}",
            KUBE_DEADLINE,
        )
        return nominated.writes

    def victim_input(self, victim: VictimProgress) -> VictimInput:
        request = self._request
        return VictimInput(
            run_ref(),
            victim.pod,
            self._preemptor,
            victim.node or self._progress.node or "",
            use_eviction=request.use_eviction,
            grace_period_seconds=request.grace_period_seconds,
            scheduler_name=self._scheduler_name,
        )

    def units_taken_whole(self, selection: Selection) -> dict[str, str]:
        return dict(selection.victim_units)

    def victim_step(self, victim: VictimInput) -> PreemptVictimInput:
        return PreemptVictimInput(victim, room_node=self._progress.node or "")

    async def record_end(self, stop: Stop, fates: list[VictimFate], writes: list[Written]) -> None:
        await self.steps.call(
            PreemptionActivities.record_end,
            EndInput(
                run_ref(),
                self._preemptor,
                stop.outcome,
                node=self._progress.node,
                message=stop.message,
                failed_victim=stop.failed_victim,
                retryable=stop.retryable,
                victims=fates,
                writes=writes,
                runbook=RUNBOOK,
                victim_pod_groups=self._victim_pod_groups,
            ),
            f"ledger: {stop.outcome.value}",
            LEDGER_DEADLINE,
        )

    def completed(self) -> str:
        victims = sum(1 for v in self._progress.victims if v.fate is not Fate.SPARED)
        return (
            f"{victims} victim(s) preempted on {self._progress.node} for {self._preemptor.key}, "
            "nominated there; its bind is the scheduler's, recorded when the watch shows it"
        )

    def result(self, outcome: Outcome, message: str, retryable: bool | None) -> PreemptionResult:
        self.finished(outcome, message)
        state = self._progress
        return PreemptionResult(
            outcome,
            message,
            state.node,
            list(state.victims),
            throttled=self.throttled,
            retryable=retryable,
            evaluation_seconds=self.evaluation_seconds,
            execution_seconds=self.execution_seconds,
            decision=self.story.line() if self.story is not None else "",
            runbook=RUNBOOK,
        )

"""The one runbook of every preemption, a pod's or a pod group's (issue 29).

Upstream's asynchronous preemption (`prepareCandidateAsync`), made durable:

1. Select (one activity): decide under the decision lock and write the decision ahead,
   every victim it chose included: that write is the intent to delete them. A decision that
   ends the run (fits, ineligible, no candidate, unsupported, a dry run) ends it here, its
   end written ahead with it; a preemptor that no longer needs room ends it here too
   (aborted). Held back by the eviction budget: sleep (a durable timer), select again.
2. Preempt: the nomination (the preemptor's, or every placed member's, clearing the
   lower-priority nominations to those nodes) beside the victims; each victim is one retried
   activity of its own (`preempt_victim`: mark, then delete with the UID precondition, as
   upstream's `PreemptPod`), all but the last in parallel, at most `VICTIM_SLOTS` at once
   (upstream's parallelizer's 16); then the last, recorded in workflow state first
   (`pending_last_victim`, upstream's `lastVictimsPendingPreemption`), the preempting flag
   cleared before it as upstream clears its `preempting` set. A victim the decision saw
   terminating gets no call (upstream skips it too). Each victim's step asks whether the
   room is still needed before its DELETE: a preemptor gone, replaced or bound elsewhere
   stops the run (aborted), with no pod evicted for nothing. A victim refused for good
   fails the run; the last is then not touched. A run that stops after its steps deleted
   some pods of a unit taken whole (a gang with `disruptionMode: all`) deletes the rest of
   that unit (`_finish_units_begun`, behind the patch `FINISH_UNITS_BEGUN`): a unit goes
   whole or not at all, decided from the workflow's state once the parallel steps are done.
3. End: at the last victim's delete, as upstream's goroutine ends there. One step records
   the end with every victim's fate and the nomination's writes, in one ledger statement;
   the preemptor's bind is the scheduler's, recorded from the watch (the trigger loop). A
   victim marked but spared (the run stopped) has its DisruptionTarget removed first.

A run whose worker was lost after its end step and before the workflow closed is asked to
select again; the select answers how the run ended on record (`Selection.ended_as`), and
the run ends so at once: no step again, no second end in the ledger.

So a preemption of v victims is one workflow task (its start eager where it can be), with
1 + 1 + v + 1 local activities (select, nominate, each victim, the end) and two search
attribute changes (preempting, finished); tests/workflows/test_costs.py counts it.

A run started before this runbook replays its own (`PreemptionRequest.runbook` absent: 1);
whoever starts a run now asks for this one (`RUNBOOK`).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from datetime import timedelta
from typing import Any, Generic, Protocol, TypeVar

from temporalio import workflow
from temporalio.common import SearchAttributeUpdate
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from preemptctl.activities.contracts import (
        DecisionStory,
        PreemptVictimInput,
        RunRef,
        VictimFate,
        VictimInput,
        VictimResult,
        Written,
    )
    from preemptctl.activities.preemption import PreemptionActivities
    from preemptctl.activities.resumed import already_ended
    from preemptctl.ledger.vocabulary import Fate, Outcome, outcome_of_decision
    from preemptctl.preemption.decision import PodRef, Verdict
    from preemptctl.workflows import search_attributes as sa
    from preemptctl.workflows.contract import PREEMPTION_FAILED, Phase, VictimProgress
    from preemptctl.workflows.steps import (
        KUBE_DEADLINE,
        UNMARK_DEADLINE,
        StepFailed,
        Steps,
        Stop,
        cause,
        ended_in_words,
        retryable,
    )

VICTIM_SLOTS = 16

FINISH_UNITS_BEGUN = "finish-units-begun"
"""`workflow.patched` id: a run that stops (the room no longer needed) after deleting some
pods of a unit taken whole deletes the rest of that unit. Runs recorded before it ended
with such a unit in part; on replay they do again exactly what they did."""
"""Victim steps at once, as upstream's parallelizer runs its `preemptPod` calls."""


class Selected(Protocol):
    """What the runbook reads of a selection, a pod's (`Selection`) or a group's."""

    message: str
    verdict: Verdict | None
    retry_after_seconds: float
    dry_run: bool
    story: DecisionStory | None
    terminating: list[str]
    ended_as: Outcome | None


class Progress(Protocol):
    """The part of a workflow's query answer the runbook keeps current."""

    phase: Phase
    preempting: bool
    pending_last_victim: PodRef | None
    victims: list[VictimProgress]
    outcome: Outcome | None
    message: str


SelectionT = TypeVar("SelectionT", bound=Selected)
ResultT = TypeVar("ResultT")


class Runbook(ABC, Generic[SelectionT, ResultT]):
    """One run, in the runbook's order; what differs between a pod's and a group's
    preemption is behind the abstract methods (which activity decides, nominates and
    records the end, what the room is for, what the result says)."""

    def __init__(self, steps: Steps, state: Progress, *, dry_run: bool, search: bool) -> None:
        self.steps = steps
        self.state = state
        self.throttled = 0
        self.story: DecisionStory | None = None
        self.evaluation_seconds: float | None = None
        self.execution_seconds: float | None = None
        self._dry_run = dry_run
        self._search = search
        self._updates: list[SearchAttributeUpdate[Any]] = []
        self._results: dict[str, VictimResult] = {}
        self._failures: list[tuple[VictimProgress, bool]] = []  # (victim, retrying can help)
        self._stopped = ""  # why a victim's step left it alone: the room is no longer needed
        self._nomination: asyncio.Task[list[Written]] | None = None
        self._units: dict[str, str] = {}  # victim UID -> the unit taken whole it goes with
        self._finished_units: list[str] = []  # units begun, finished after the run stopped

    # -- what differs ---------------------------------------------------------------------

    @abstractmethod
    async def select(self, throttled: int) -> SelectionT:
        """Decide (one activity), the `throttled`-th time the budget held this run back."""

    @abstractmethod
    def take(self, selection: SelectionT) -> list[SearchAttributeUpdate[Any]]:
        """Keep what the decision says in the state (its victims, each on its node); the
        search attributes it sets."""

    @abstractmethod
    async def nominate(self, selection: SelectionT) -> list[Written]:
        """The nomination step; its writes, for the end to record."""

    @abstractmethod
    def units_taken_whole(self, selection: SelectionT) -> dict[str, str]:
        """The unit of several pods each victim goes with, by UID ("podGroup ml/train-b");
        a victim taken alone is not in it."""

    @abstractmethod
    def victim_step(self, victim: VictimInput) -> PreemptVictimInput:
        """A victim's step, with what the room is for."""

    @abstractmethod
    def victim_input(self, victim: VictimProgress) -> VictimInput:
        """A victim, as its steps take it (run, preemptor, node, options)."""

    @abstractmethod
    async def record_end(self, stop: Stop, fates: list[VictimFate], writes: list[Written]) -> None:
        """The end step: the end, every victim's fate and the writes, in one append."""

    @abstractmethod
    def completed(self) -> str:
        """How a run that preempted every victim ends, in words."""

    @abstractmethod
    def result(self, outcome: Outcome, message: str, retryable: bool | None) -> ResultT:
        """The workflow's result."""

    # -- the runbook ----------------------------------------------------------------------

    async def run(self) -> ResultT:
        try:
            end = await self._preempt()
        except Stop as stop:
            end = stop
        return await self._finish(end)

    async def _preempt(self) -> Stop:
        started = workflow.now()
        selection = await self._select()
        decided = workflow.now()
        self.evaluation_seconds = (decided - started).total_seconds()
        if selection.ended_as is not None:  # ended before its worker was lost: on record
            return Stop(selection.ended_as, already_ended(selection.ended_as), written_ahead=True)
        verdict = selection.verdict
        if verdict is None:
            return Stop(Outcome.ABORTED, selection.message)  # the preemptor moved on
        outcome = outcome_of_decision(verdict, self._dry_run or selection.dry_run)
        if outcome is Outcome.DRY_RUN:
            return Stop(outcome, self.dry_run_message(selection), written_ahead=True)
        if outcome is not None:
            unsupported = verdict is Verdict.UNSUPPORTED
            return Stop(outcome, selection.message, written_ahead=True, retryable=not unsupported)
        self._enter(Phase.PREEMPTING)
        await self._preempt_victims(selection)
        self.execution_seconds = (workflow.now() - decided).total_seconds()
        return Stop(Outcome.COMPLETED, self.completed())

    def dry_run_message(self, selection: SelectionT) -> str:
        """Why nothing was touched: the request asked for a dry run, or the worker runs
        dry (shadow mode) whatever the request said."""
        if self._dry_run:
            return f"dry run: {selection.message}"
        return f"dry run (the worker runs dry, PREEMPT_DRY_RUN=true): {selection.message}"

    async def _select(self) -> SelectionT:
        """1) Select, sleeping out the eviction budget (recorded each time) until it allows."""
        self.state.preempting = True
        while True:
            selection = await self.select(self.throttled)
            if not selection.retry_after_seconds:
                break
            self.throttled += 1
            self.state.message = selection.message
            await workflow.sleep(timedelta(seconds=selection.retry_after_seconds))
        self.state.message = selection.message
        self._updates += self.take(selection)
        self._units = self.units_taken_whole(selection)
        self.story = selection.story
        if self.story is not None:
            workflow.set_current_details(self.story.markdown())
        return selection

    async def _preempt_victims(self, selection: SelectionT) -> None:
        """2) The nomination beside the victims: all but the last in parallel (at most
        `VICTIM_SLOTS` at once), then the last, recorded first."""
        self._nomination = asyncio.ensure_future(self.nominate(selection))
        terminating = set(selection.terminating)
        for victim in self.state.victims:
            if victim.pod.uid in terminating:
                victim.fate = Fate.ALREADY_GONE
                victim.message = "already terminating when decided: no call sent"
                self._results[victim.pod.uid] = VictimResult(
                    victim.fate, victim.message, terminating=True
                )
        todo = [victim for victim in self.state.victims if victim.fate is Fate.CHOSEN]
        if not todo:
            self.state.preempting = False
            return
        *others, last = todo
        slots = asyncio.Semaphore(VICTIM_SLOTS)
        await asyncio.gather(*(self._preempt_one(victim, slots) for victim in others))
        await self._finish_units_begun(slots)
        self._stop_if_any_victim_failed_or_the_room_is_not_needed(last)
        self.state.pending_last_victim = last.pod
        self.state.preempting = False  # upstream: out of the preempting set before the last
        await self._preempt_one(last, slots)
        self.state.pending_last_victim = None
        await self._finish_units_begun(slots)
        self._stop_if_any_victim_failed_or_the_room_is_not_needed(None)

    async def _finish_units_begun(self, slots: asyncio.Semaphore) -> None:
        """A run that stopped because the room is no longer needed, after its steps had
        deleted some pods of a unit taken whole (a gang with `disruptionMode: all`), deletes
        the rest of that unit: the unit goes whole or not at all, as upstream takes it, and a
        gang left in part is broken for nothing. The workflow decides it from its own state
        once the parallel steps are done, so no race between them can leave a unit in part.
        Only the units begun: a unit none of whose pods were deleted is spared whole."""
        if not self._stopped or self._failures or not self._units:
            return
        begun = {
            self._units[victim.pod.uid]
            for victim in self.state.victims
            if victim.pod.uid in self._units and victim.fate is Fate.DELETED
        }
        left = [
            victim
            for victim in self.state.victims
            if self._units.get(victim.pod.uid) in begun
            and victim.fate in (Fate.CHOSEN, Fate.SPARED)
        ]
        if not left or not workflow.patched(FINISH_UNITS_BEGUN):
            return
        self._finished_units += sorted({self._units[victim.pod.uid] for victim in left})
        await asyncio.gather(
            *(
                self._preempt_one(victim, slots, finishing=self._units[victim.pod.uid])
                for victim in left
            )
        )

    async def _preempt_one(
        self, victim: VictimProgress, slots: asyncio.Semaphore, *, finishing: str = ""
    ) -> None:
        pod = victim.pod
        step = self.victim_step(self.victim_input(victim))
        summary = f"preempt {pod.key} (uid {pod.uid}) on {victim.node}"
        if finishing:
            step.finishing = finishing
            summary = f"{summary}, finishing {finishing}"
        async with slots:
            try:
                result = await self.steps.call(
                    PreemptionActivities.preempt_victim, step, summary, KUBE_DEADLINE
                )
            except StepFailed as error:
                victim.fate, victim.message = Fate.FAILED, cause(error)
                self._results[pod.uid] = VictimResult(Fate.FAILED, victim.message)
                self._failures.append((victim, retryable(error)))
                return
        if finishing and result.fate is Fate.DELETED:
            result.message = (
                f"deleted to finish {finishing}: the room was no longer needed, but this run "
                "had deleted other pods of the unit, which goes whole or not at all"
            )
        victim.fate, victim.message = result.fate, result.message
        self._results[pod.uid] = result
        if result.fate is Fate.FAILED:
            self._failures.append((victim, False))
        if result.stopped and not self._stopped:
            self._stopped = result.stopped

    def _stop_if_any_victim_failed_or_the_room_is_not_needed(
        self, last: VictimProgress | None
    ) -> None:
        if not self._failures and not self._stopped:
            return
        if last is not None and last.fate is Fate.CHOSEN:
            last.fate, last.message = Fate.SPARED, "an earlier victim was not preempted"
        if self._failures:
            failed, _ = self._failures[0]
            raise Stop(
                Outcome.FAILED,
                f"victim {failed.pod.key} could not be preempted: {failed.message}",
                retryable=all(ok for _, ok in self._failures),
                failed_victim=failed.pod,
            )
        if self._finished_units:
            finished = ", ".join(self._finished_units)
            raise Stop(
                Outcome.ABORTED,
                f"{self._stopped}; {finished} finished (begun before: a unit taken whole is "
                "never left in part)",
            )
        raise Stop(Outcome.ABORTED, self._stopped)

    # -- 3) the end -----------------------------------------------------------------------

    async def _finish(self, stop: Stop) -> ResultT:
        await self._unmark_spared()
        if not stop.written_ahead:
            await self.record_end(stop, self._fates(), await self._writes())
        result = self.result(stop.outcome, stop.message, stop.result_retryable)
        if stop.outcome is Outcome.FAILED:
            raise ApplicationError(
                stop.message, result, type=PREEMPTION_FAILED, non_retryable=True
            ) from None
        return result

    async def _writes(self) -> list[Written]:
        """The nomination's writes (waited for: it may still run when a victim failed)."""
        if self._nomination is None:
            return []
        try:
            return await self._nomination
        except StepFailed as error:
            # Upstream goes on without the nomination too; the victims are what matter.
            workflow.logger.warning("could not nominate: %s", cause(error))
            return []

    def _fates(self) -> list[VictimFate]:
        """Every victim's fate, for the end to record; spared ones have no event."""
        fates: list[VictimFate] = []
        for victim in self.state.victims:
            result = self._results.get(victim.pod.uid)
            if result is None:
                result = VictimResult(victim.fate, victim.message)
            fates.append(VictimFate(victim.pod, victim.node or "", result))
        return fates

    async def _unmark_spared(self) -> None:
        """A victim marked but not deleted (spared when the run stopped, or failed after
        its mark) loses its DisruptionTarget condition now rather than in two minutes. A
        removal that fails is logged; the condition then lapses on its own."""
        marked = [
            victim
            for victim in self.state.victims
            if (result := self._results.get(victim.pod.uid)) is not None
            and result.marked
            and victim.fate in (Fate.SPARED, Fate.FAILED)
        ]

        async def unmark(victim: VictimProgress) -> None:
            pod = victim.pod
            try:
                await self.steps.call(
                    PreemptionActivities.unmark_victim,
                    self.victim_input(victim),
                    f"remove DisruptionTarget from {pod.key} (uid {pod.uid})",
                    UNMARK_DEADLINE,
                )
            except StepFailed as error:
                workflow.logger.warning(
                    "could not remove DisruptionTarget from %s: %s", pod.key, cause(error)
                )

        await asyncio.gather(*(unmark(victim) for victim in marked))

    def finished(self, outcome: Outcome, message: str) -> None:
        """The state and the search attributes of a run that ended."""
        state = self.state
        state.phase, state.outcome, state.message = Phase.FINISHED, outcome, message
        state.preempting, state.pending_last_victim = False, None
        self._upsert(
            [
                sa.PREEMPTION_PHASE.value_set(Phase.FINISHED.value),
                sa.PREEMPTION_OUTCOME.value_set(outcome.value),
            ]
        )
        workflow.set_current_details(ended_in_words(self.story, outcome, message))

    # -- bookkeeping ----------------------------------------------------------------------

    def _enter(self, phase: Phase) -> None:
        self.state.phase = phase
        self._upsert([sa.PREEMPTION_PHASE.value_set(phase.value)])

    def _upsert(self, updates: list[SearchAttributeUpdate[Any]]) -> None:
        """One command for `updates` and those held back since the last one."""
        updates, self._updates = self._updates + updates, []
        if updates and self._search:
            workflow.upsert_search_attributes(updates)


def run_ref() -> RunRef:
    """The current run, at the workflow's clock."""
    info = workflow.info()
    return RunRef(info.workflow_id, info.run_id, workflow.now().isoformat())

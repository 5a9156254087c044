"""What a preemption does to its victims, wherever they are: shared by the pod and the group
preemption workflows.

The runbook (upstream's `prepareCandidateAsync`, with the marks first):

2. mark every victim (`mark_victim`: its DisruptionTarget condition), together with what the
   workflow does alongside (the nominations); a mark that fails for good fails the
   preemption before any victim is deleted;
3. delete every victim but the last, in parallel; then the last, once every other victim is
   out of the way, recorded in workflow state first (upstream's
   `lastVictimsPendingPreemption`). Each delete first re-checks whether the preemptor still
   needs the room: a delete that finds it does not leaves its victim alone and says why
   (`VictimResult.stopped`): the preemption is then aborted with no pod evicted for nothing.
   A write that fails for good fails the preemption.

A victim marked but then not deleted (the run aborted or failed) has its DisruptionTarget
condition removed at once (`unmark_spared`), before the end is recorded.

In rounds (`in_rounds`): one step per round instead of one per victim (every mark; every
delete but the last; the last), each victim still settled, retried and recorded on its own
inside its round (`mark_victims`, `delete_victims`): a preemption of v victims records three
steps instead of 2v, and its ledger appends per round, not per victim. A run decides at its
start which it does (the pod workflow behind a patch, for the runs recorded before).

Each victim's node is its own (`VictimProgress.node`): a pod preemption's victims share one
node, a group preemption's are on many. Which delete activity re-checks which preemptor is
the workflow's choice (`delete` and `delete_input`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from preemptctl.activities.contracts import VictimInput, VictimResult, VictimRound
    from preemptctl.activities.preemption import PreemptionActivities
    from preemptctl.ledger.vocabulary import Fate, Outcome
    from preemptctl.preemption.decision import PodRef
    from preemptctl.workflows.contract import VictimProgress
    from preemptctl.workflows.steps import (
        KUBE_DEADLINE,
        UNMARK_DEADLINE,
        StepFailed,
        Steps,
        Stop,
        cause,
        retryable,
    )


class Preempting(Protocol):
    """The part of a workflow's query answer the victim runbook keeps current."""

    preempting: bool
    pending_last_victim: PodRef | None


class VictimRunbook:
    """The victims of one run: marking, deleting, unmarking, and why the run stops."""

    def __init__(
        self,
        steps: Steps,
        progress: Preempting,
        victim_input: Callable[[VictimProgress], VictimInput],
        delete: Callable[[Any, Any], VictimResult],
        delete_input: Callable[[VictimProgress], object],
        *,
        round_input: Callable[[list[VictimProgress]], VictimRound],
        delete_round: Callable[[Any, Any], list[VictimResult]],
        delete_round_input: Callable[[list[VictimProgress]], object],
    ) -> None:
        self._steps = steps
        self._progress = progress
        self._victim_input = victim_input
        self._delete_method = delete
        self._delete_input = delete_input
        self._round_input = round_input
        self._delete_round_method = delete_round
        self._delete_round_input = delete_round_input
        self.in_rounds = False  # one step per round of victims, not per victim
        self.stopped = ""  # why a delete left its victim alone: the preemptor moved on
        self.failures: list[tuple[VictimProgress, bool]] = []  # (victim, retrying can help)
        self.marked: list[VictimProgress] = []  # victims given the DisruptionTarget condition

    async def preempt(
        self, victims: list[VictimProgress], alongside: list[Awaitable[None]]
    ) -> None:
        """2) mark every victim, with `alongside`, all at once; 3) delete all but the last
        in parallel, then the last. Each step records the victim's fate in the ledger."""
        if self.in_rounds:
            await self._preempt_in_rounds(victims, alongside)
            return
        await asyncio.gather(*alongside, *(self._mark(v) for v in victims))
        if not victims:
            self._progress.preempting = False
            return
        *others, last = victims
        self.stop_if_any_victim_failed_or_the_preemption_stopped(last)
        await asyncio.gather(*(self._delete(v) for v in others))
        self.stop_if_any_victim_failed_or_the_preemption_stopped(last)
        self._progress.pending_last_victim = last.pod
        self._progress.preempting = False  # upstream: out of the preempting set before the last
        await self._delete(last)
        self._progress.pending_last_victim = None  # settled: no longer pending
        self.stop_if_any_victim_failed_or_the_preemption_stopped(None)

    async def _preempt_in_rounds(
        self, victims: list[VictimProgress], alongside: list[Awaitable[None]]
    ) -> None:
        await asyncio.gather(*alongside, self._mark_round(victims))
        if not victims:
            self._progress.preempting = False
            return
        *others, last = victims
        self.stop_if_any_victim_failed_or_the_preemption_stopped(last)
        await self._delete_round(others)
        self.stop_if_any_victim_failed_or_the_preemption_stopped(last)
        self._progress.pending_last_victim = last.pod
        self._progress.preempting = False  # upstream: out of the preempting set before the last
        await self._delete_round([last])
        self._progress.pending_last_victim = None
        self.stop_if_any_victim_failed_or_the_preemption_stopped(None)

    async def _mark_round(self, victims: list[VictimProgress]) -> None:
        if not victims:
            return
        await self._round_step(
            victims,
            PreemptionActivities.mark_victims,
            self._round_input(victims),
            "mark " + _named(victims),
        )
        self.marked += [v for v in victims if v.fate is Fate.MARKED]

    async def _delete_round(self, victims: list[VictimProgress]) -> None:
        """Delete the marked victims of a round (one gone, replaced or terminating needs
        nothing more)."""
        marked = [v for v in victims if v.fate is Fate.MARKED]
        if not marked:
            return
        await self._round_step(
            marked,
            self._delete_round_method,
            self._delete_round_input(marked),
            "delete " + _named(marked),
        )

    async def _round_step(
        self,
        victims: list[VictimProgress],
        method: Callable[[Any, Any], list[VictimResult]],
        step: object,
        summary: str,
    ) -> None:
        """One step for a round; each victim's fate from its own answer. A victim refused
        for good is FAILED (retrying cannot help); the whole step failing (its deadline
        passed) fails each of its victims, as retrying may."""
        try:
            results = await self._steps.call(method, step, summary, KUBE_DEADLINE)
        except StepFailed as error:
            for victim in victims:
                victim.fate, victim.message = Fate.FAILED, cause(error)
                self.failures.append((victim, retryable(error)))
            return
        for victim, result in zip(victims, results, strict=True):
            victim.fate, victim.message = result.fate, result.message
            if result.fate is Fate.FAILED:
                self.failures.append((victim, False))
            if result.stopped and not self.stopped:
                self.stopped = result.stopped

    async def _mark(self, victim: VictimProgress) -> None:
        pod = victim.pod
        marked = await self._victim_step(
            victim,
            PreemptionActivities.mark_victim,
            self._victim_input(victim),
            f"mark {pod.key} (uid {pod.uid})",
        )
        if marked is not None and marked.fate is Fate.MARKED:
            self.marked.append(victim)

    async def _delete(self, victim: VictimProgress) -> None:
        """Delete a marked victim (one gone, replaced or terminating needs nothing more)."""
        if victim.fate is not Fate.MARKED:
            return
        pod = victim.pod
        await self._victim_step(
            victim,
            self._delete_method,
            self._delete_input(victim),
            f"delete {pod.key} (uid {pod.uid})",
        )

    async def _victim_step(
        self,
        victim: VictimProgress,
        method: Callable[[Any, Any], VictimResult],
        step: object,
        summary: str,
    ) -> VictimResult | None:
        try:
            result = await self._steps.call(method, step, summary, KUBE_DEADLINE)
        except StepFailed as error:
            victim.fate, victim.message = Fate.FAILED, cause(error)
            self.failures.append((victim, retryable(error)))
            return None
        victim.fate, victim.message = result.fate, result.message
        if result.stopped and not self.stopped:
            self.stopped = result.stopped
        return result

    def stop_if_any_victim_failed_or_the_preemption_stopped(
        self, last: VictimProgress | None
    ) -> None:
        if not self.failures and not self.stopped:
            return
        if last is not None and last.fate in (Fate.CHOSEN, Fate.MARKED):
            last.fate, last.message = Fate.SPARED, "an earlier victim was not preempted"
        if self.failures:
            failed, _ = self.failures[0]
            raise Stop(
                Outcome.FAILED,
                f"victim {failed.pod.key} could not be preempted: {failed.message}",
                retryable=all(ok for _, ok in self.failures),
                failed_victim=failed.pod,
            )
        raise Stop(Outcome.ABORTED, self.stopped)

    async def unmark_spared(self) -> None:
        """A victim marked but not deleted (spared when the run stopped, or failed) loses
        its DisruptionTarget condition now rather than in two minutes: it is no longer
        about to be disrupted. A removal that fails is logged; the condition then lapses."""
        left = [v for v in self.marked if v.fate in (Fate.MARKED, Fate.SPARED, Fate.FAILED)]
        if not left:
            return

        async def unmark(victim: VictimProgress) -> None:
            pod = victim.pod
            if victim.fate is Fate.MARKED:
                victim.fate, victim.message = Fate.SPARED, "the preemption stopped before it"
            try:
                await self._steps.call(
                    PreemptionActivities.unmark_victim,
                    self._victim_input(victim),
                    f"remove DisruptionTarget from {pod.key} (uid {pod.uid})",
                    UNMARK_DEADLINE,
                )
            except StepFailed as error:
                workflow.logger.warning(
                    "could not remove DisruptionTarget from %s: %s", pod.key, cause(error)
                )

        await asyncio.gather(*(unmark(v) for v in left))


def _named(victims: list[VictimProgress]) -> str:
    """Each victim of a round by name and UID, for the step's summary."""
    return ", ".join(f"{v.pod.key} (uid {v.pod.uid})" for v in victims)

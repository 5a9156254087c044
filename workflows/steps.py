"""How a workflow runs one step, and how a step's failure reads: shared by the pod and the
group preemption workflows.

A step is one activity: attempts of the request's `call_timeout_seconds`, retried with a
short backoff until its deadline. With `local_activities`, every step runs as a local
activity (executed by the worker running the workflow, recorded as a marker), the decision
too in the one runbook (`local_select`: the worker hands it to the process that holds the
view, `activities.view_channel`); in the runbook of runs started before it, the decision
stays a regular activity, heartbeating while it waits its turn, so a worker that dies is
noticed by the missing heartbeat and the decision moves to another worker.

A run that cannot go on raises `Stop` (how it ends, and whether the decision's write-ahead
recorded that end already); each workflow turns it into its result.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.exceptions import TimeoutError as StepTimeout

with workflow.unsafe.imports_passed_through():
    from preemptctl.activities.contracts import DecisionStory
    from preemptctl.ledger.vocabulary import Outcome
    from preemptctl.preemption.decision import PodRef

ArgT = TypeVar("ArgT")
ResultT = TypeVar("ResultT")

# Kubernetes calls: short attempts (`call_timeout_seconds`), quick retries with backoff,
# bounded; RBAC denials and invalid requests fail at once (the activities mark them
# non-retryable).
KUBE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    # An API server's transient errors (5xx, dropped connections) pass in seconds; a longer
    # wait only delays the preemptor. A 429's Retry-After still sets its own delay.
    maximum_interval=timedelta(seconds=5),
)
KUBE_DEADLINE = timedelta(minutes=5)
# The ledger: the preemption waits for it rather than lose an event.
LEDGER_DEADLINE = timedelta(days=1)
# A select attempt may wait its turn to decide (queued behind other decisions) for up to a
# minute, heartbeating every second while it waits: a worker that dies is noticed by the
# missing heartbeat, not by the attempt's end, and the select moves to another worker.
SELECT_ATTEMPT = timedelta(seconds=90)
SELECT_HEARTBEAT = timedelta(seconds=8)
# Removing a spared victim's DisruptionTarget: kube-controller-manager clears it after two
# minutes anyway, so the run does not wait longer than that for the API server.
UNMARK_DEADLINE = timedelta(minutes=1)
# How a step that failed reaches the workflow: an activity's failure as an `ActivityError`
# around its cause; a local activity's as the cause itself (the activity's own
# `ApplicationError`, or the `TimeoutError` of its schedule-to-close deadline).
StepFailed = (ActivityError, ApplicationError, StepTimeout)


class Stop(Exception):
    """The preemption cannot go on: how it ends, and whether the decision's write-ahead
    recorded that end already (`written_ahead`); else the workflow records it."""

    def __init__(
        self,
        outcome: Outcome,
        message: str,
        *,
        written_ahead: bool = False,
        retryable: bool = True,
        failed_victim: PodRef | None = None,
    ) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.message = message
        self.written_ahead = written_ahead
        self.retryable = retryable
        self.failed_victim = failed_victim

    @property
    def result_retryable(self) -> bool | None:
        """What the result says of retrying: whether starting the preemption again can help
        for a run that did not do what it was for (failed, or refused as unsupported); None
        for every other end, where there is nothing to retry."""
        if self.outcome in (Outcome.FAILED, Outcome.UNSUPPORTED):
            return self.retryable
        return None


class Steps:
    """Runs a workflow's steps as its request says (attempt length, local or not)."""

    def __init__(
        self,
        call_timeout_seconds: float,
        local_activities: bool,
        deciding: Callable[[Any], bool],
        *,
        local_select: bool = False,
    ) -> None:
        self._call_timeout = timedelta(seconds=call_timeout_seconds)
        self._local = local_activities
        self._deciding = deciding
        self._local_select = local_select

    async def call(
        self,
        method: Callable[[Any, ArgT], ResultT],
        argument: ArgT,
        summary: str,
        deadline: timedelta,
        *,
        attempt: timedelta = timedelta(0),
    ) -> ResultT:
        """One activity: attempts of `call_timeout_seconds` (at least `attempt`), retried
        until `deadline`; a local activity unless the request runs every step as a regular
        activity, or it decides (`deciding(method)`) and the select is not local."""
        per_attempt = max(self._call_timeout, attempt)
        deciding = self._deciding(method)
        if self._local and (self._local_select or not deciding):
            return await workflow.execute_local_activity_method(
                method,
                argument,
                summary=summary,
                start_to_close_timeout=per_attempt,
                schedule_to_close_timeout=deadline,
                retry_policy=KUBE_RETRY,
            )
        return await workflow.execute_activity_method(
            method,
            argument,
            summary=summary,
            start_to_close_timeout=per_attempt,
            schedule_to_close_timeout=deadline,
            heartbeat_timeout=SELECT_HEARTBEAT if deciding else None,
            retry_policy=KUBE_RETRY,
        )


async def signalled_within(
    condition: Callable[[], bool], seconds: float, *, cancel_the_timer: bool
) -> bool:
    """Whether `condition` (set by a signal) held within `seconds` (a durable timer).

    Without `cancel_the_timer` the timer of a wait that the signal ended is left to lapse:
    a run that ends with a timer pending loses nothing, while cancelling it is one more
    history event. (Runs recorded before the `victims-in-rounds` patch cancelled it.)"""
    if cancel_the_timer:
        try:
            await workflow.wait_condition(condition, timeout=timedelta(seconds=seconds))
        except TimeoutError:
            return False
        return True
    timer = asyncio.ensure_future(workflow.sleep(seconds))
    await workflow.wait_condition(lambda: condition() or timer.done())
    return condition()


def ended_in_words(story: DecisionStory | None, outcome: Outcome, message: str) -> str:
    """The workflow's details once it ended (Markdown): its decision, then how it ended."""
    ended = f"**Ended {outcome.value}**: {message}"
    return ended if story is None else f"{story.markdown()}\n\n{ended}"


def cause(error: BaseException) -> str:
    """The innermost failure's message: what a person needs to read."""
    inner: BaseException = error
    while inner.__cause__ is not None:
        inner = inner.__cause__
    return inner.message if isinstance(inner, ApplicationError) else str(inner)


def retryable(error: BaseException) -> bool:
    """False when the activity failed for good (RBAC, a rejected request): retrying the whole
    preemption cannot help until a person changes something."""
    inner = error.cause if isinstance(error, ActivityError) else error
    return not (isinstance(inner, ApplicationError) and inner.non_retryable)

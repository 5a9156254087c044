"""The preemption workflows' contracts: their inputs, results, query answers and IDs.

Plain dataclasses of strings, numbers, enums and lists, like the activities' contracts
(`activities.contracts`): Temporal stores each in the workflow's history, where the UI shows
it and a replay reads it back, so they must stay readable JSON and stay compatible (add
fields with defaults; never rename one). Whoever starts a preemption (the trigger loop, a
person's `preemptctl retry`, the tests and benchmarks) builds a `PreemptionRequest` from
here, and reads the `PreemptionResult` and the `state` query's `PreemptionProgress` from
here; `Phase` values name where a run is, in the query and the `PreemptionPhase` search
attribute. A group preemption (one workflow per pending pod group, `GroupPreemption`) has
its own beside it: `GroupPreemptionRequest`, `GroupPreemptionResult`,
`GroupPreemptionProgress`, `group_workflow_id_for`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TypeVar

from temporalio.client import WorkflowFailureError
from temporalio.converter import value_to_type
from temporalio.exceptions import ApplicationError

from preemptctl.ledger.vocabulary import Fate, Outcome
from preemptctl.preemption.decision import PodRef, Strategy
from preemptctl.preemption.group_decision import GroupRef

ResultT = TypeVar("ResultT")

RUNBOOK = 2
"""The runbook a run started now follows (`PreemptionRequest.runbook`): the one runbook of
`workflows.runbook`."""


@dataclass
class PreemptionRequest:
    """The workflow's input: which pod needs room, and how this preemption should behave."""

    preemptor: PodRef
    reason: str = "Unschedulable"
    strategy: Strategy = Strategy.DEFAULT
    dry_run: bool = False
    use_eviction: bool = False
    grace_period_seconds: int | None = None
    scheduled_wait_seconds: float = 300.0
    # How often the workflow asks the API server whether the preemptor is bound, when the
    # trigger loop's `preemptor_bound` signal has not told it first.
    scheduled_poll_seconds: float = 30.0
    # How long one attempt of a Kubernetes or ledger call may take before Temporal retries it
    # (also how soon a call lost with a crashed worker is retried by another).
    call_timeout_seconds: float = 30.0
    # Run every step but the decision as a local activity: executed by the worker running
    # the workflow, recorded as a marker in the history instead of three events and a
    # workflow task each. Several times cheaper for the Temporal server and the worker; the
    # UI then shows those steps as markers (no pending attempt, no heartbeat details) and
    # a step running when its worker dies is re-run by the worker that takes the workflow.
    local_activities: bool = False
    # The custom search attributes (workflows.search_attributes) are registered on the
    # namespace; false for a namespace where they cannot be (the UI then filters by ID only).
    search_attributes: bool = True
    # Who started this run, for the `retried` event a run after the first appends:
    # "trigger" (the worker's trigger loop) or "person" (`preemptctl retry`), and why.
    started_by: str = "trigger"
    retry_reason: str = ""
    # Which runbook the run follows: 1, the victims in rounds and a wait for the bind (runs
    # started before issue 29, which carry no such field); 2, the one runbook
    # (`workflows.runbook`). Whoever starts a run asks for the newest (`RUNBOOK`); a run
    # keeps its own for its whole life, so its history replays as it was recorded.
    runbook: int = 1


def workflow_id_for(namespace: str, name: str, uid: str) -> str:
    """`preemption-<namespace>-<name>-<uid>`: one preemption per pod at a time, since the
    UID is in it (a pod recreated under the same name is another preemption), and the UI's
    list and its filters name the pod (`WorkflowId STARTS_WITH "preemption-default-web-"`).
    Namespaces and names are DNS labels or subdomains, so the ID needs no escaping."""
    return f"preemption-{namespace}-{name}-{uid}"


class Phase(StrEnum):
    """Where a running preemption is (the `PreemptionPhase` search attribute)."""

    SELECTING = "selecting"
    PREEMPTING = "preempting"  # nominating, marking and deleting the victims
    WAITING = "waiting"
    FINISHED = "finished"


@dataclass
class VictimProgress:
    """One victim's fate so far, as the workflow knows it, and the node it is on."""

    pod: PodRef
    fate: Fate = Fate.CHOSEN
    message: str = ""
    node: str | None = None


@dataclass
class PreemptionProgress:
    """What the `state` query returns: how far the preemption has come. The trigger loop
    answers upstream's `IsPodRunningPreemption` from `preempting` and
    `pending_last_victim`."""

    phase: Phase = Phase.SELECTING
    preempting: bool = False
    node: str | None = None
    pending_last_victim: PodRef | None = None
    victims: list[VictimProgress] = field(default_factory=list)
    outcome: Outcome | None = None
    message: str = ""


@dataclass
class PreemptionResult:
    """How the preemption ended (the workflow's result, and its failure's details)."""

    outcome: Outcome
    message: str
    node: str | None = None
    victims: list[VictimProgress] = field(default_factory=list)
    preemptor_node: str | None = None
    seconds_to_schedule: float | None = None
    throttled: int = 0  # times the eviction budget held this preemption back
    # For a run that failed or was refused as Unsupported: whether starting it again can
    # help (False: not until something changes, such as an RBAC denial; the trigger parks
    # the pod instead of backing off). None for every other end: nothing to retry. (Runs
    # recorded before said True for those.)
    retryable: bool | None = None
    # From the start to the decision (upstream's preemption evaluation), and from the
    # decision to the last victim handled (its execution); None for a step not reached.
    evaluation_seconds: float | None = None
    execution_seconds: float | None = None
    # The decision in words, one line (`DecisionStory.line`: what, to whom, why, and the
    # command that tells the rest); "" when the run ended before deciding.
    decision: str = ""
    # The runbook the run followed (`PreemptionRequest.runbook`): from 2 on, a completed
    # run ends at its last victim's delete, and the preemptor's bind is recorded by whoever
    # sees it (the trigger loop), not by the run.
    runbook: int = 1


PREEMPTION_FAILED = "PreemptionFailed"
"""The type of a failed preemption's workflow failure (pod or group): its details carry the
run's result."""


def result_of_failure(error: WorkflowFailureError) -> PreemptionResult | None:
    """The `PreemptionResult` a failed preemption carries in its failure's details."""
    return _carried(error, PreemptionResult)


def _carried(error: WorkflowFailureError, result_type: type[ResultT]) -> ResultT | None:
    cause = error.cause
    if not isinstance(cause, ApplicationError) or cause.type != PREEMPTION_FAILED:
        return None
    if not cause.details:
        return None
    result: ResultT = value_to_type(result_type, cause.details[0])
    return result


# -- a group preemption (one workflow per pending pod group) ---------------------------------


@dataclass
class GroupPreemptionRequest:
    """The group workflow's input: which pod group needs room, and how this preemption
    should behave (each field as in `PreemptionRequest`)."""

    group: GroupRef
    reason: str = "Unschedulable"
    dry_run: bool = False
    use_eviction: bool = False
    grace_period_seconds: int | None = None
    scheduled_wait_seconds: float = 300.0
    scheduled_poll_seconds: float = 30.0
    call_timeout_seconds: float = 30.0
    local_activities: bool = False
    search_attributes: bool = True
    started_by: str = "trigger"
    retry_reason: str = ""
    runbook: int = 1  # as `PreemptionRequest.runbook`


def group_workflow_id_for(namespace: str, name: str, uid: str) -> str:
    """`group-preemption-<namespace>-<name>-<uid>`: one preemption per pod group at a time
    (the group's UID, or a label-named group's stable synthetic one, is in it), however many
    of its members are pending; the UI's list and filters name the group."""
    return f"group-preemption-{namespace}-{name}-{uid}"


@dataclass
class MemberProgress:
    """A member of the group the decision placed: where it is nominated, where it is bound."""

    pod: PodRef
    node: str
    bound_to: str | None = None


@dataclass
class GroupPreemptionProgress:
    """What the group workflow's `state` query returns. The trigger loop answers upstream's
    `IsPodRunningPreemption` for any member from `preempting` and `members`."""

    phase: Phase = Phase.SELECTING
    preempting: bool = False
    members: list[MemberProgress] = field(default_factory=list)
    min_count: int = 1
    pending_last_victim: PodRef | None = None
    victims: list[VictimProgress] = field(default_factory=list)
    outcome: Outcome | None = None
    message: str = ""

    @property
    def bound(self) -> int:
        """How many placed members are bound (to any node)."""
        return sum(1 for member in self.members if member.bound_to)


@dataclass
class GroupPreemptionResult:
    """How the group preemption ended (the result, and its failure's details). `bound`:
    members bound when it ended, of `min_count` needed; `retryable` as in `PreemptionResult`
    (None when the run did not fail: there is nothing to retry)."""

    outcome: Outcome
    message: str
    members: list[MemberProgress] = field(default_factory=list)
    victims: list[VictimProgress] = field(default_factory=list)
    min_count: int = 1
    bound: int = 0
    seconds_to_schedule: float | None = None
    throttled: int = 0
    retryable: bool | None = None
    evaluation_seconds: float | None = None
    execution_seconds: float | None = None
    decision: str = ""  # the decision in words, as in `PreemptionResult.decision`
    runbook: int = 1  # as `PreemptionResult.runbook`


def group_result_of_failure(error: WorkflowFailureError) -> GroupPreemptionResult | None:
    """The `GroupPreemptionResult` a failed group preemption carries in its failure's
    details."""
    return _carried(error, GroupPreemptionResult)

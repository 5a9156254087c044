"""The trigger loop against a stand-in Temporal client and view, on a fake clock.

Scenarios:
- nothing is asked of Temporal before a start (no describe, issue 29);
- a failed start_workflow (Temporal unavailable) does not end the loop either;
- losing track of a running preemption (its result unreadable while Temporal is
  unavailable) is not counted as an attempt, and the loop follows it again after 1 s;
- a preemption that ends with its pod still pending is retried after 10 s, then 20 s;
  meanwhile the pod counts in preemptctl_backoff_pods;
- a non-retryable end parks the pod: listed by parked() with its reason, counted in
  preemptctl_parked_pods, never started again while unchanged, started again once its
  labels change, or when a person retries it in-process;
- a run a person started for a parked pod (`preemptctl retry`) is found by the next re-check,
  reported `retried` (who and why, from its request) and followed to its end, not started
  again;
- housekeeping never holds up a start (issue 20, finding 7): with 20 parked pods whose
  re-checks Temporal never answers, or a bound preemptor's signal unanswered, a new pod's
  preemption still starts; at most RECHECK_SLOTS describes are in flight;
- a re-check pass that runs out of its time budget stops, and the next pass begins with
  the parked pods it did not reach;
- a preemption that FAILED on an RBAC denial (the workflow fails, its result in the
  failure's details) parks its pod as well, instead of backing off; a failure that carries
  no result still backs off;
- a Failed critical pod gets one critical-admission preemption per admission failure,
  however often it is seen again afterwards;
- a deleted pod is forgotten: the loop keeps no state for it;
- a preemption is started eagerly (the worker runs beside the loop), every step but the
  decision a local activity;
- a parked pod bound after a person's retry: the loop signals that run `preemptor_bound`
  at once, as it signals its own runs, so the retried run does not wait for its poll (and
  reports and follows it, if no re-check found it first);
- a pending pod group gets one group preemption however many of its members pend (its ID
  from the group's UID, the request naming the group), and no member a preemption of its
  own; the start is reported with the members, the group named as preemptor and
  `podGroup`, as its end is;
- a member the scheduler just marked, its group not yet looked at, keeps the loop from being
  caught up (dev --once would otherwise end before the gang's preemption started);
- a group preemption that completed while the view still shows its members pending and
  nominated (their binds not yet seen) is not started again: not within the backoff, a
  resync meanwhile included, nor after it once the view shows them bound; and the loop is
  caught up;
- with a ledger, a run's end is read from it (one look per tick for every run followed),
  never from a long poll on Temporal; a run with no end on record past ASK_TEMPORAL_AFTER
  is asked of Temporal;
- a run of the one runbook (issue 29) ends at its last victim's delete: the loop follows it on
  until the watch shows its preemptor bound (a group: minCount of its placed members), then
  records the bind in the ledger (`preemptor_scheduled`, for that run) and reports it, and no
  signal is sent to the ended run; one never bound within scheduled_wait_seconds is reported
  so;
- a pod whose preemption found no candidate only because a running preemption's claim held
  the room (`claimsInTheWay` in its no_candidate row) is tried again as soon as that run's
  end is read from the ledger, not after the 10 s backoff: the new run's request says why
  (its `retried` event's reason), and the wake is counted in
  preemptctl_retries_woken_total; a gang blocked by another gang's claim on its members'
  room is woken by that group run's end likewise;
- a group preemption that ends non-retryable parks the group (listed by parked() under its
  key) until what it asks changes (another member pending); one that ends retryable backs
  off 10 s;
- `running_preemption` answers upstream's IsPodRunningPreemption from the workflow's state
  query: a pod's own preemption, a member its group's preemption placed (or has not decided
  for yet), not a member it left out, and no run at all is False;
- a cancellation that lands as the loop is woken (a watch event as the controller stops)
  ends the loop: Python 3.11's wait_for lost it, and the controller's exit hung (CI did).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowFailureError, WorkflowHistory
from temporalio.converter import DataConverter
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from preemptctl import migrations
from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.ledger.events import LedgerEvent, decision_events, group_decision_events
from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.payloads import Terminal
from preemptctl.ledger.queries import events_of
from preemptctl.ledger.vocabulary import Fate, Outcome
from preemptctl.ledger.writer import append_batch
from preemptctl.preemption.decision import Decision, PodRef, Rationale, Strategy, Verdict
from preemptctl.preemption.group_decision import GroupDecision, GroupRef
from preemptctl.preemption.objects import Pod
from preemptctl.preemption.snapshot import ClusterSnapshot
from preemptctl.worker.config import Settings
from preemptctl.worker.metrics import Metrics
from preemptctl.worker.trigger import TriggerLoop
from preemptctl.workflows.contract import (
    RUNBOOK,
    GroupPreemptionProgress,
    GroupPreemptionRequest,
    GroupPreemptionResult,
    MemberProgress,
    PreemptionProgress,
    PreemptionRequest,
    PreemptionResult,
    VictimProgress,
)
from tests.ledger.builders import (
    T0,
    TRAIN_A,
    TRAIN_A_MEMBERS,
    failed_attempt,
    group_preemption,
    one_runbook_completed,
)
from tests.preemption.builders import pod_group

SETTINGS = Settings(min_priority=0, retry_backoff_max_seconds=300)


def pending_pod(name: str = "web", uid: str = "uid-1", **labels: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": uid,
            "resourceVersion": "1",
            "labels": labels,
        },
        "spec": {
            "priority": 1000,
            "schedulerName": "default-scheduler",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
        },
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }


def refused_critical_pod(uid: str = "uid-crit") -> dict[str, Any]:
    pod = pending_pod("kube-proxy", uid)
    pod["spec"].update(priority=2_000_001_000, nodeName="node-1")
    pod["status"] = {"phase": "Failed", "reason": "OutOfcpu"}
    return pod


class FakeView:
    """The view's read()/subscribe() over a snapshot a test feeds watch events; it hands
    listeners each pod as the snapshot keeps it (decoded, a member at its group's
    priority), as the view does."""

    def __init__(self) -> None:
        self.snapshot = ClusterSnapshot()
        self.listeners: list[Callable[[str, str, Pod | None], None]] = []

    @contextmanager
    def read(self) -> Iterator[ClusterSnapshot]:
        yield self.snapshot

    def subscribe(self, listener: Callable[[str, str, Pod | None], None]) -> None:
        self.listeners.append(listener)

    def event(self, event_type: str, obj: dict[str, Any]) -> None:
        uid = obj["metadata"]["uid"]
        if event_type == "DELETED":
            self.snapshot.remove("Pod", uid)
        else:
            self.snapshot.apply("Pod", obj)
        for listener in self.listeners:
            listener(event_type, uid, self.snapshot.pods.get(uid))

    def group(self, obj: dict[str, Any]) -> None:
        """A PodGroup added (the view tells the trigger of pods only)."""
        self.snapshot.apply("PodGroup", obj)


@dataclass
class FakeHandle:
    id: str
    outcome: asyncio.Future[Any]
    result_run_id: str = "run-1"
    results_asked: int = 0  # long polls for the result
    closed_at: datetime | None = None
    signals: list[tuple[str, Any]] = field(default_factory=list)
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    async def result(self) -> Any:
        self.results_asked += 1
        return await self.outcome

    async def signal(self, signal: Any, arg: Any = None, *, args: Any = (), **kwargs: Any) -> None:
        self.signals.append((self.id, list(args) if args else arg))
        self.wake.set()


@dataclass
class Description:
    close_time: datetime | None
    start_time: datetime
    run_id: str = "run-1"


@dataclass
class PersonRun:
    """A run of a preemption's workflow a person started (`preemptctl retry`)."""

    start_time: datetime
    request: PreemptionRequest
    run_id: str = "run-2"
    outcome: asyncio.Future[PreemptionResult] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


@dataclass
class FakeClient:
    """Answers describe() and start_workflow() as a test scripts them."""

    describe_errors: list[Exception] = field(default_factory=list)
    start_errors: list[Exception] = field(default_factory=list)
    started: list[FakeHandle] = field(default_factory=list)
    options: list[dict[str, Any]] = field(default_factory=list)  # each start's arguments
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    runs: dict[str, PersonRun] = field(default_factory=dict)  # a person's runs, by ID
    closed: dict[str, datetime] = field(default_factory=dict)  # ended runs: start, by ID
    signals: list[tuple[str, Any]] = field(default_factory=list)  # (workflow ID, argument)
    states: dict[str, Any] = field(default_factory=dict)  # the state query's answer, by ID
    # A Temporal as slow as a test wants: describes of these workflow IDs, and signals,
    # wait until `answer` is set. `describing` lists the describes asked, in order.
    slow: set[str] = field(default_factory=set)
    slow_signals: bool = False
    answer: asyncio.Event = field(default_factory=asyncio.Event)
    describing: list[str] = field(default_factory=list)
    data_converter: DataConverter = DataConverter.default

    def get_workflow_handle(self, workflow_id: str, **kwargs: Any) -> Any:
        client = self

        class Handle:
            id = workflow_id
            result_run_id = kwargs.get("run_id")

            async def describe(self, **kwargs: Any) -> Description:
                client.describing.append(workflow_id)
                client.wake.set()
                if workflow_id in client.slow:
                    await client.answer.wait()
                if client.describe_errors:
                    raise client.describe_errors.pop(0)
                if workflow_id in client.runs:
                    run = client.runs[workflow_id]
                    return Description(None, run.start_time, run.run_id)
                if workflow_id in client.closed:
                    start = client.closed[workflow_id]
                    return Description(start + timedelta(seconds=1), start)
                raise RPCError("not found", RPCStatusCode.NOT_FOUND, b"")

            async def signal(self, signal: Any, argument: Any, **kwargs: Any) -> None:
                if client.slow_signals:
                    await client.answer.wait()
                client.signals.append((workflow_id, argument))
                client.wake.set()

            async def result(self) -> PreemptionResult:
                return await client.runs[workflow_id].outcome

            async def query(self, query: Any, **kwargs: Any) -> Any:
                if workflow_id not in client.states:
                    raise RPCError("not found", RPCStatusCode.NOT_FOUND, b"")
                return client.states[workflow_id]

            async def fetch_history(self) -> WorkflowHistory:
                """The run's start event, carrying its request as the client encodes it."""
                started = HistoryEvent(
                    event_id=1, event_type=EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED
                )
                payloads = await client.data_converter.encode([client.runs[workflow_id].request])
                started.workflow_execution_started_event_attributes.input.payloads.extend(payloads)
                return WorkflowHistory(workflow_id, [started])

        return Handle()

    async def start_workflow(self, *args: Any, id: str, **kwargs: Any) -> FakeHandle:
        if self.start_errors:
            raise self.start_errors.pop(0)
        loop = asyncio.get_running_loop()
        handle = FakeHandle(id, loop.create_future(), signals=self.signals, wake=self.wake)
        self.started.append(handle)
        self.options.append({"args": args, **kwargs})
        self.wake.set()
        return handle

    async def next_start(self, count: int) -> FakeHandle:
        """Wait (bounded) until `count` starts happened; the latest."""
        await self.until(lambda: len(self.started) >= count)
        return self.started[count - 1]

    async def until(self, condition: Callable[[], bool]) -> None:
        """Wait (bounded) until `condition` holds after a call to this client."""
        async with asyncio.timeout(5):
            while not condition():
                self.wake.clear()
                await self.wake.wait()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Harness:
    view: FakeView
    client: FakeClient
    clock: Clock
    metrics: Metrics
    trigger: TriggerLoop
    reports: list[tuple[str, dict[str, Any]]]

    def advance(self, seconds: float) -> None:
        self.clock.now += seconds

    def gauge(self, name: str) -> float | None:
        return self.metrics.registry.get_sample_value(name)

    async def ended(
        self, handle: FakeHandle, result: PreemptionResult | GroupPreemptionResult
    ) -> None:
        """End `handle`'s preemption and wait until the loop has booked it."""
        before = len(self.trigger.finished)
        handle.outcome.set_result(result)
        async with asyncio.timeout(5):
            while len(self.trigger.finished) == before:
                await asyncio.sleep(0)

    async def failed(self, handle: FakeHandle, cause: Exception) -> None:
        """Fail `handle`'s workflow with `cause`, as `handle.result()` raises it, and wait
        until the loop has booked it."""
        before = len(self.trigger.finished)
        handle.outcome.set_exception(WorkflowFailureError(cause=cause))
        async with asyncio.timeout(5):
            while len(self.trigger.finished) == before:
                await asyncio.sleep(0)


def failure_carrying(result: PreemptionResult) -> ApplicationError:
    """The failure a failed preemption ends with, its details as the client decodes them
    (plain JSON values, not the dataclass)."""
    details = json.loads(json.dumps(dataclasses.asdict(result)))
    return ApplicationError(result.message, details, type="PreemptionFailed", non_retryable=True)


@pytest.fixture
async def harness() -> Any:
    view, client, clock, metrics = FakeView(), FakeClient(), Clock(), Metrics()
    reports: list[tuple[str, dict[str, Any]]] = []
    # Stand-ins for the cluster view and the Temporal client: the loop uses only their
    # reading and starting methods, which FakeView and FakeClient implement.
    trigger = TriggerLoop(
        view,  # type: ignore[arg-type]
        client,  # type: ignore[arg-type]
        SETTINGS,
        metrics,
        clock=clock,
        tick=0.005,
        report=lambda event, fields: reports.append((event, fields)),
    )
    made = Harness(view, client, clock, metrics, trigger, reports)
    yield made
    await trigger.stop(drain=False)


def unavailable() -> RPCError:
    return RPCError("frontend restarting", RPCStatusCode.UNAVAILABLE, b"")


async def test_nothing_is_asked_of_temporal_before_a_start(harness: Harness) -> None:
    harness.client.describe_errors.append(unavailable())
    harness.view.event("ADDED", pending_pod())
    harness.trigger.start()
    await harness.client.next_start(1)
    assert harness.client.describing == []


async def test_failed_start_does_not_end_the_loop(harness: Harness) -> None:
    harness.client.start_errors.append(unavailable())
    harness.view.event("ADDED", pending_pod())
    harness.trigger.start()
    async with asyncio.timeout(5):
        while not harness.trigger._book.uids():
            await asyncio.sleep(0)
    harness.advance(1.0)
    handle = await harness.client.next_start(1)
    assert handle.id.endswith("uid-1") or "uid-1" in handle.id


async def test_ended_preemption_is_retried_after_a_doubling_backoff(harness: Harness) -> None:
    harness.view.event("ADDED", pending_pod())
    harness.trigger.start()
    first = await harness.client.next_start(1)
    await harness.ended(first, PreemptionResult(Outcome.ABORTED, "preemptor vanished"))
    book, now = harness.trigger._book, harness.clock.now
    assert not book.due("uid-1", now + 9.9) and book.due("uid-1", now + 10)
    harness.trigger.resync()
    assert harness.gauge("preemptctl_backoff_pods") == 1
    harness.advance(10)
    second = await harness.client.next_start(2)
    await harness.ended(second, PreemptionResult(Outcome.NO_CANDIDATE, "no node helps"))
    now = harness.clock.now
    assert not book.due("uid-1", now + 19.9) and book.due("uid-1", now + 20)
    assert harness.trigger.caught_up()


async def test_non_retryable_end_parks_the_pod_until_it_changes(harness: Harness) -> None:
    harness.view.event("ADDED", pending_pod())
    harness.trigger.start()
    first = await harness.client.next_start(1)
    denied = PreemptionResult(Outcome.FAILED, "RBAC denied delete on pods", retryable=False)
    await harness.ended(first, denied)
    [parked] = harness.trigger.parked()
    assert (parked.pod, parked.reason) == ("default/web", "RBAC denied delete on pods")
    assert harness.gauge("preemptctl_parked_pods") == 1
    harness.advance(10**6)
    harness.view.event("MODIFIED", pending_pod())  # status churn: still parked
    assert not harness.trigger._book.due("uid-1", harness.clock.now)
    harness.view.event("MODIFIED", pending_pod(team="fixed"))
    await harness.client.next_start(2)
    assert harness.trigger.parked() == []


async def test_rbac_denial_that_fails_the_workflow_parks_the_pod(harness: Harness) -> None:
    harness.view.event("ADDED", pending_pod())
    harness.trigger.start()
    first = await harness.client.next_start(1)
    denied = PreemptionResult(Outcome.FAILED, "RBAC denied delete on pods", retryable=False)
    await harness.failed(first, failure_carrying(denied))
    [parked] = harness.trigger.parked()
    assert (parked.pod, parked.reason) == ("default/web", "RBAC denied delete on pods")
    assert harness.gauge("preemptctl_parked_pods") == 1
    harness.advance(10**6)
    assert not harness.trigger._book.due("uid-1", harness.clock.now)


async def test_failure_without_a_result_backs_off(harness: Harness) -> None:
    harness.view.event("ADDED", pending_pod())
    harness.trigger.start()
    first = await harness.client.next_start(1)
    await harness.failed(first, ApplicationError("workflow task failed", type="Panic"))
    assert harness.trigger.parked() == []
    book, now = harness.trigger._book, harness.clock.now
    assert not book.due("uid-1", now + 9.9) and book.due("uid-1", now + 10)


async def test_person_retry_unparks_the_pod(harness: Harness) -> None:
    harness.view.event("ADDED", pending_pod())
    harness.trigger.start()
    first = await harness.client.next_start(1)
    await harness.ended(
        first, PreemptionResult(Outcome.FAILED, "Unsupported: DRA", retryable=False)
    )
    assert harness.trigger.retry("default/web")
    await harness.client.next_start(2)
    assert not harness.trigger.retry("default/nobody")


async def test_failed_critical_pod_gets_one_preemption_per_admission_failure(
    harness: Harness,
) -> None:
    harness.view.event("ADDED", refused_critical_pod())
    harness.trigger.start()
    first = await harness.client.next_start(1)
    await harness.ended(first, PreemptionResult(Outcome.COMPLETED, "made room"))
    harness.advance(10**6)
    harness.view.event("MODIFIED", refused_critical_pod())
    harness.trigger.resync()
    assert harness.trigger.idle
    assert len(harness.client.started) == 1


async def test_deleted_pod_is_forgotten(harness: Harness) -> None:
    harness.view.event("ADDED", pending_pod())
    harness.view.event("ADDED", refused_critical_pod())
    harness.trigger.start()
    first = await harness.client.next_start(1)
    second = await harness.client.next_start(2)
    await harness.ended(first, PreemptionResult(Outcome.ABORTED, "x"))
    await harness.ended(second, PreemptionResult(Outcome.COMPLETED, "y"))
    assert harness.trigger.tracked() == 2
    harness.view.event("DELETED", pending_pod())
    harness.view.event("DELETED", refused_critical_pod())
    assert harness.trigger.tracked() == 0
    assert harness.trigger.idle


async def test_lost_track_is_not_an_attempt_and_is_followed_again(harness: Harness) -> None:
    harness.view.event("ADDED", pending_pod())
    harness.trigger.start()
    first = await harness.client.next_start(1)
    before = len(harness.trigger.finished)
    first.outcome.set_exception(unavailable())
    async with asyncio.timeout(5):
        while len(harness.trigger.finished) == before:
            await asyncio.sleep(0)
    assert harness.trigger.finished[-1]["outcome"] == "unknown"
    counted = [
        sample
        for family in harness.metrics.registry.collect()
        for sample in family.samples
        if sample.labels.get("outcome") == "unknown"
    ]
    assert counted == []
    harness.advance(1.0)
    await harness.client.next_start(2)


def persons_retry(pod: str = "web", uid: str = "uid-1") -> PersonRun:
    """A run `preemptctl retry default/<pod> --reason 'granted delete'` started just now."""
    request = PreemptionRequest(
        PodRef("default", pod, uid), started_by="person", retry_reason="granted delete"
    )
    return PersonRun(datetime.now(UTC), request)


async def park(harness: Harness, *names: str) -> list[FakeHandle]:
    """Start and end non-retryable the preemption of a pending pod per name (uid
    `uid-<name>`), so each is parked; their handles."""
    handles = []
    for name in names:
        harness.view.event("ADDED", pending_pod(name, f"uid-{name}"))
    harness.trigger.start()
    for count in range(1, len(names) + 1):
        handles.append(await harness.client.next_start(count))
    for handle in handles:
        await harness.ended(
            handle, PreemptionResult(Outcome.FAILED, "RBAC denied", retryable=False)
        )
    assert len(harness.trigger.parked()) == len(names)
    harness.client.describing.clear()  # the starts' own describes
    return handles


async def test_run_started_by_a_person_is_reported_and_followed(harness: Harness) -> None:
    [first] = await park(harness, "web")
    harness.client.runs[first.id] = persons_retry("web", "uid-web")
    harness.advance(31)  # past the re-check interval
    await harness.client.until(lambda: any(e == "retried" for e, _ in harness.reports))
    assert harness.reports[-1] == (
        "retried",
        {
            "workflowId": first.id,
            "runId": "run-2",
            "preemptor": "default/web",
            "startedBy": "person",
            "reason": "granted delete",
        },
    )
    assert harness.trigger.parked() == []
    assert harness.trigger.in_flight == 1
    harness.client.runs[first.id].outcome.set_result(
        PreemptionResult(Outcome.COMPLETED, "made room", node="node-1")
    )
    async with asyncio.timeout(5):
        while harness.trigger.in_flight:
            await asyncio.sleep(0)
    event, fields = harness.reports[-1]
    assert (event, fields["workflowId"], fields["outcome"]) == ("finished", first.id, "completed")
    assert len(harness.client.started) == 1  # followed, never started again by the loop


async def test_parked_pods_being_rechecked_do_not_hold_up_a_start(harness: Harness) -> None:
    names = [f"parked-{i}" for i in range(20)]
    handles = await park(harness, *names)
    harness.client.slow = {handle.id for handle in handles}  # a Temporal that never answers
    harness.advance(31)
    await harness.client.until(lambda: len(harness.client.describing) >= 4)
    harness.view.event("ADDED", pending_pod("new", "uid-new"))
    started = await harness.client.next_start(21)
    assert started.id == "preemption-default-new-uid-new"
    assert len(harness.client.describing) == 4  # re-checks in flight: RECHECK_SLOTS


async def test_signalling_a_bound_preemptor_does_not_hold_up_a_start(harness: Harness) -> None:
    [first] = await park(harness, "web")
    harness.client.slow_signals = True
    bound = pending_pod("web", "uid-web")
    bound["spec"]["nodeName"] = "node-1"
    harness.view.event("MODIFIED", bound)
    await harness.client.until(lambda: first.id in harness.client.describing)
    harness.view.event("ADDED", pending_pod("new", "uid-new"))
    await harness.client.next_start(2)
    assert harness.client.signals == []  # still waiting for its answer
    harness.client.answer.set()
    await harness.client.until(lambda: harness.client.signals == [(first.id, "node-1")])


async def test_a_recheck_pass_that_runs_out_of_time_goes_on_where_it_stopped() -> None:
    view, client, clock = FakeView(), FakeClient(), Clock()
    trigger = TriggerLoop(
        view,  # type: ignore[arg-type]
        client,  # type: ignore[arg-type]
        SETTINGS,
        Metrics(),
        clock=clock,
        tick=0.005,
        recheck_budget=0.05,
    )
    harness = Harness(view, client, clock, Metrics(), trigger, [])
    try:
        handles = await park(harness, *(f"parked-{i}" for i in range(6)))
        client.slow = {handle.id for handle in handles}
        harness.advance(31)
        await client.until(lambda: len(client.describing) >= 4)
        harness.advance(31)  # the next pass, once this one has run out of time
        await client.until(lambda: len(client.describing) >= 8)
        ids = [handle.id for handle in handles]
        assert client.describing[:4] == ids[:4]  # oldest parked first
        assert client.describing[4:8] == [ids[4], ids[5], ids[0], ids[1]]
    finally:
        await trigger.stop(drain=False)


async def test_a_preemption_starts_eagerly_with_local_activities(harness: Harness) -> None:
    harness.view.event("ADDED", pending_pod())
    harness.trigger.start()
    await harness.client.next_start(1)
    options = harness.client.options[0]
    _, request = options["args"]
    assert options["request_eager_start"] is True
    assert request.local_activities is True


async def test_a_parked_pod_bound_after_a_persons_retry_signals_that_run(
    harness: Harness,
) -> None:
    [first] = await park(harness, "web")
    harness.client.runs[first.id] = persons_retry("web", "uid-web")
    bound = pending_pod("web", "uid-web")
    bound["spec"]["nodeName"] = "node-1"  # the run `preemptctl retry` started made room
    harness.view.event("MODIFIED", bound)
    await harness.client.until(lambda: bool(harness.client.signals))
    assert harness.client.signals == [(first.id, "node-1")]
    assert [e for e, _ in harness.reports if e == "retried"] == ["retried"]
    assert harness.trigger.in_flight == 1  # and followed to its end


async def test_a_parked_pod_bound_with_no_run_waiting_is_recorded_bound(
    tmp_path: Path,
) -> None:
    """The scheduler placed a parked pod on its own: the ledger says so (history and
    explain stop offering a retry that would only refuse), and no run is signalled."""
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    migrations.upgrade(url)
    ledger = create_ledger_engine(url)
    view, client, clock = FakeView(), FakeClient(), Clock()
    trigger = TriggerLoop(
        view,  # type: ignore[arg-type]
        client,  # type: ignore[arg-type]
        SETTINGS,
        Metrics(),
        clock=clock,
        tick=0.005,
        ledger=ledger,
    )
    try:
        view.event("ADDED", pending_pod("web", "uid-web"))
        trigger.start()
        first = await client.next_start(1)
        web = PodRef("default", "web", "uid-web")
        append_batch(ledger, failed_attempt(first.id, preemptor=web, start=datetime.now(UTC)))
        async with asyncio.timeout(5):  # its end, read from the ledger, parks it
            while not trigger.parked():
                await asyncio.sleep(0.01)
        client.closed[first.id] = datetime.now(UTC) - timedelta(minutes=1)
        bound = pending_pod("web", "uid-web")
        bound["spec"]["nodeName"] = "node-2"
        view.event("MODIFIED", bound)

        def scheduled() -> list[str | None]:
            with ledger.connect() as connection:
                return [
                    e.node
                    for e in events_of(connection, [first.id])
                    if e.kind is EventKind.PREEMPTOR_SCHEDULED
                ]

        async with asyncio.timeout(5):
            while not scheduled():
                await asyncio.sleep(0.01)
        assert scheduled() == ["node-2"]
        assert client.signals == []
    finally:
        await trigger.stop(drain=False)
        ledger.dispose()


async def test_a_cancellation_landing_as_the_loop_wakes_ends_it() -> None:
    # A tick long enough that the loop is waiting on its wake-up event, not between ticks.
    trigger = TriggerLoop(FakeView(), FakeClient(), SETTINGS, Metrics(), tick=0.25)  # type: ignore[arg-type]
    for _ in range(20):
        task = asyncio.create_task(trigger.run())
        await asyncio.sleep(0.01)
        trigger._wake.set()  # white box: a watch event, in the same loop pass as the stop
        task.cancel()
        await asyncio.wait([task], timeout=1.0)
        assert task.cancelled()


# -- groups --------------------------------------------------------------------------------------


def member(name: str, group: str = "train", **changes: Any) -> dict[str, Any]:
    """A pending unschedulable pod naming PodGroup `group`."""
    pod = pending_pod(name, f"uid-{name}", **changes)
    pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return pod


def train_group(harness: Harness) -> GroupRef:
    harness.view.group(pod_group("train", priority=1000, min_count=2))
    return GroupRef("default", "train", "pg-train", 1000)


async def test_a_pending_group_gets_one_group_preemption(harness: Harness) -> None:
    group = train_group(harness)
    for name in ("train-0", "train-1", "train-2"):
        harness.view.event("ADDED", member(name))
    harness.trigger.start()
    handle = await harness.client.next_start(1)
    await asyncio.sleep(0.05)  # ticks enough for a second start, if any would come
    assert [h.id for h in harness.client.started] == ["group-preemption-default-train-pg-train"]
    _, request = harness.client.options[0]["args"]
    assert isinstance(request, GroupPreemptionRequest)
    assert request.group == group
    assert request.reason == "Unschedulable: 3 of 3 member(s) pending"
    assert harness.reports[0] == (
        "started",
        {
            "workflowId": handle.id,
            "preemptor": "default/train",
            "podGroup": "default/train",
            "members": ["default/train-0", "default/train-1", "default/train-2"],
        },
    )


async def test_a_member_marked_before_its_group_is_looked_at_is_not_caught_up(
    harness: Harness,
) -> None:
    train_group(harness)
    harness.trigger.start()
    assert harness.trigger.caught_up()  # nothing pending yet
    # The watch hands the loop the member; its group is looked at on the loop's next turn.
    harness.view.event("ADDED", member("train-0"))
    assert not harness.trigger.caught_up()
    await harness.client.next_start(1)
    assert not harness.trigger.caught_up()  # in flight


def nominated(name: str, node: str) -> dict[str, Any]:
    """A member the group preemption nominated, still pending and unschedulable."""
    pod = member(name)
    pod["status"]["nominatedNodeName"] = node
    return pod


def bound(name: str, node: str) -> dict[str, Any]:
    pod = member(name)
    pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": "Pending", "conditions": []}
    return pod


async def test_a_group_preemption_completed_before_its_binds_are_seen_is_not_run_again(
    harness: Harness,
) -> None:
    train_group(harness)
    harness.view.event("ADDED", member("train-0"))
    harness.view.event("ADDED", member("train-1"))
    harness.trigger.start()
    first = await harness.client.next_start(1)
    harness.view.event("MODIFIED", nominated("train-0", "node-1"))
    harness.view.event("MODIFIED", nominated("train-1", "node-2"))
    # The run saw its members bound (its poll asks the API server) before the view did.
    done = GroupPreemptionResult(Outcome.COMPLETED, "default/train: 2 member(s) bound", bound=2)
    await harness.ended(first, done)
    assert harness.trigger.finished[-1]["podGroup"] == "default/train"
    harness.trigger.resync()  # the view still shows both pending
    harness.advance(9.9)
    await asyncio.sleep(0.05)  # ticks enough for a second start, if any would come
    assert len(harness.client.started) == 1
    assert harness.trigger.caught_up()
    harness.view.event("MODIFIED", bound("train-0", "node-1"))
    harness.view.event("MODIFIED", bound("train-1", "node-2"))
    harness.advance(100)
    await asyncio.sleep(0.05)
    harness.trigger.resync()
    await asyncio.sleep(0.05)
    assert len(harness.client.started) == 1
    assert harness.trigger.caught_up()


def one_runbook_result(victims: int = 2) -> PreemptionResult:
    deleted = [
        VictimProgress(PodRef("default", f"batch-{i}", f"uid-batch-{i}"), Fate.DELETED, node="n1")
        for i in range(victims)
    ]
    return PreemptionResult(Outcome.COMPLETED, "preempted", "node-2", deleted, runbook=RUNBOOK)


@contextmanager
def sqlite_ledger(tmp_path: Path) -> Iterator[Engine]:
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    migrations.upgrade(url)
    ledger = create_ledger_engine(url)
    try:
        yield ledger
    finally:
        ledger.dispose()


def scheduled_rows(ledger: Engine, preemption_id: str) -> list[tuple[str, str | None, Any]]:
    with ledger.connect() as connection:
        return [
            (e.run_id, e.node, e.payload)
            for e in events_of(connection, [preemption_id])
            if e.kind is EventKind.PREEMPTOR_SCHEDULED
        ]


async def test_a_completed_run_is_followed_until_its_preemptor_is_bound(tmp_path: Path) -> None:
    with sqlite_ledger(tmp_path) as ledger:
        view, client, clock = FakeView(), FakeClient(), Clock()
        reports: list[tuple[str, dict[str, Any]]] = []
        trigger = TriggerLoop(
            view,  # type: ignore[arg-type]
            client,  # type: ignore[arg-type]
            SETTINGS,
            Metrics(),
            clock=clock,
            tick=0.005,
            ledger=ledger,
            report=lambda event, fields: reports.append((event, fields)),
        )
        try:
            view.event("ADDED", pending_pod())
            trigger.start()
            handle = await client.next_start(1)
            web = PodRef("default", "web", "uid-1", 1000)
            batch = [PodRef("default", f"batch-{i}", f"uid-batch-{i}", 1) for i in range(2)]
            ended = one_runbook_completed(handle.id, preemptor=web, victims=batch, node="node-2")
            append_batch(ledger, ended)  # the run's end, as its last step records it
            await asyncio.sleep(0.1)
            assert trigger.in_flight == 1 and trigger.finished == []  # waiting for the bind
            bound = pending_pod()
            bound["spec"]["nodeName"] = "node-2"
            view.event("MODIFIED", bound)
            async with asyncio.timeout(5):
                while not trigger.finished:
                    await asyncio.sleep(0.01)
            [record] = trigger.finished
            assert (record["outcome"], record["message"]) == (
                "completed",
                "default/web bound to node-2",
            )
            assert record["victims"] == ["default/batch-0", "default/batch-1"]
            [(run_id, node, _)] = scheduled_rows(ledger, handle.id)
            assert (run_id, node) == ("run-1", "node-2")
            assert client.signals == []  # the run ended: nothing to tell it
        finally:
            await trigger.stop(drain=False)


async def test_a_completed_run_whose_preemptor_is_never_bound_is_reported_so(
    harness: Harness,
) -> None:
    harness.view.event("ADDED", pending_pod())
    harness.trigger.start()
    handle = await harness.client.next_start(1)
    handle.outcome.set_result(one_runbook_result())
    await asyncio.sleep(0.05)
    assert harness.trigger.finished == []
    harness.advance(SETTINGS.scheduled_wait_seconds)
    async with asyncio.timeout(5):
        while not harness.trigger.finished:
            await asyncio.sleep(0.01)
    assert harness.trigger.finished[0]["message"] == "default/web was not bound within 300s"


def train_a_member(index: int, node: str | None = None) -> dict[str, Any]:
    """ml/train-a's member `index` (the ledger builders' gang), pending or bound to `node`."""
    pod = member(f"train-a-{index}", "train-a")
    pod["metadata"].update(namespace="ml", uid=TRAIN_A_MEMBERS[index].uid)
    if node is not None:
        pod["spec"]["nodeName"] = node
    return pod


async def test_a_group_run_is_followed_until_min_count_members_are_bound(
    tmp_path: Path,
) -> None:
    with sqlite_ledger(tmp_path) as ledger:
        view, client, clock = FakeView(), FakeClient(), Clock()
        trigger = TriggerLoop(
            view,  # type: ignore[arg-type]
            client,  # type: ignore[arg-type]
            SETTINGS,
            Metrics(),
            clock=clock,
            tick=0.005,
            ledger=ledger,
        )
        try:
            view.group(
                pod_group("train-a", namespace="ml", priority=1000, min_count=4, uid=TRAIN_A.uid)
            )
            for i in range(4):
                view.event("ADDED", train_a_member(i))
            trigger.start()
            handle = await client.next_start(1)
            story = group_preemption(handle.id, end=None)
            story.append(
                LedgerEvent(
                    handle.id,
                    "run-1",
                    EventKind.COMPLETED,
                    TRAIN_A.as_preemptor(),
                    payload=Terminal("4 victim(s) preempted on 3 node(s)").to_json(),
                    occurred_at=datetime.now(UTC),
                )
            )
            append_batch(ledger, story)
            for i, node in enumerate(("node-1", "node-1", "node-2", "node-2")):
                await asyncio.sleep(0.02)
                assert trigger.finished == []  # minCount 4: not yet
                view.event("MODIFIED", train_a_member(i, node))
            async with asyncio.timeout(5):
                while not trigger.finished:
                    await asyncio.sleep(0.01)
            [record] = trigger.finished
            assert (record["bound"], record["message"]) == (
                4,
                "ml/train-a: 4 member(s) bound (minCount 4)",
            )
            [(run_id, node, payload)] = scheduled_rows(ledger, handle.id)
            assert (run_id, node, payload["membersBound"]) == ("run-1", None, 4)
            assert client.signals == [] and handle.results_asked == 0
        finally:
            await trigger.stop(drain=False)


async def test_a_group_preemption_ended_non_retryable_parks_the_group(harness: Harness) -> None:
    train_group(harness)
    harness.view.event("ADDED", member("train-0"))
    harness.trigger.start()
    first = await harness.client.next_start(1)
    refused = GroupPreemptionResult(Outcome.FAILED, "Unsupported: topology", retryable=False)
    await harness.ended(first, refused)
    [parked] = harness.trigger.parked()
    assert (parked.uid, parked.pod, parked.reason) == (
        "pg-train",
        "default/train",
        "Unsupported: topology",
    )
    harness.advance(10**6)
    harness.view.event("MODIFIED", member("train-0"))  # status churn: still parked
    await asyncio.sleep(0.05)
    assert len(harness.client.started) == 1
    harness.view.event("ADDED", member("train-1"))  # the group asks for more
    await harness.client.next_start(2)
    assert harness.trigger.parked() == []


async def test_a_group_preemption_ended_retryable_backs_off(harness: Harness) -> None:
    train_group(harness)
    harness.view.event("ADDED", member("train-0"))
    harness.trigger.start()
    first = await harness.client.next_start(1)
    await harness.ended(first, GroupPreemptionResult(Outcome.NO_CANDIDATE, "no room"))
    book, now = harness.trigger._book, harness.clock.now
    assert not book.due("pg-train", now + 9.9) and book.due("pg-train", now + 10)
    assert harness.trigger.finished[-1]["preemptor"] == "default/train"


async def test_running_preemption_answers_from_the_workflows_state(harness: Harness) -> None:
    train_group(harness)
    harness.view.event("ADDED", member("train-0"))
    harness.view.event("ADDED", member("train-1"))
    harness.view.event("ADDED", pending_pod("web", "uid-web"))
    harness.trigger.start()
    await harness.client.next_start(2)
    snapshot = harness.view.snapshot
    web, train_0, train_1 = (snapshot.pods[u] for u in ("uid-web", "uid-train-0", "uid-train-1"))
    assert not await harness.trigger.running_preemption(web)  # no state answered yet
    harness.client.states["preemption-default-web-uid-web"] = PreemptionProgress(preempting=True)
    assert await harness.trigger.running_preemption(web)
    group_id = "group-preemption-default-train-pg-train"
    harness.client.states[group_id] = GroupPreemptionProgress(preempting=True)
    assert await harness.trigger.running_preemption(train_1)  # not decided yet: all of it
    placed = [MemberProgress(PodRef("default", "train-0", "uid-train-0"), "node-1")]
    harness.client.states[group_id] = GroupPreemptionProgress(preempting=True, members=placed)
    assert await harness.trigger.running_preemption(train_0)
    assert not await harness.trigger.running_preemption(train_1)


# -- woken when the claim in its way ends ------------------------------------------------------


def ledger_trigger(ledger: Engine) -> tuple[FakeView, FakeClient, Clock, Metrics, TriggerLoop]:
    view, client, clock, metrics = FakeView(), FakeClient(), Clock(), Metrics()
    trigger = TriggerLoop(
        view,  # type: ignore[arg-type]
        client,  # type: ignore[arg-type]
        SETTINGS,
        metrics,
        clock=clock,
        tick=0.005,
        ledger=ledger,
    )
    return view, client, clock, metrics, trigger


def started_for(client: FakeClient, name: str) -> list[FakeHandle]:
    return [h for h in client.started if f"-{name}-" in h.id]


async def booked(trigger: TriggerLoop, count: int) -> None:
    """Wait (bounded) until the loop has booked `count` ends."""
    async with asyncio.timeout(5):
        while len(trigger.finished) < count:
            await asyncio.sleep(0.01)


async def test_a_pod_blocked_only_by_a_running_claim_is_retried_when_its_run_ends(
    tmp_path: Path,
) -> None:
    with sqlite_ledger(tmp_path) as ledger:
        view, client, clock, metrics, trigger = ledger_trigger(ledger)
        try:
            view.event("ADDED", pending_pod("db", "uid-db"))
            view.event("ADDED", pending_pod("web", "uid-web"))
            trigger.start()
            await client.next_start(2)
            [db_run], [web_run] = started_for(client, "db"), started_for(client, "web")
            # web's decision: no candidate, db's claim (its run still going) holds node-1.
            web = PodRef("default", "web", "uid-web", 1000)
            in_the_way = {"claimsInTheWay": {"node-1": ["default/db"]}}
            blocked = Decision(
                web,
                Verdict.UNSCHEDULABLE,
                "0/1 nodes are available: 1 Insufficient cpu.",
                Rationale(Strategy.DEFAULT, nodes_total=1, details=in_the_way),
            )
            append_batch(ledger, decision_events(web_run.id, "run-1", web, blocked, T0))
            await booked(trigger, 1)
            clock.now += 3  # a blind backoff would wait until 10 s
            await asyncio.sleep(0.05)
            assert len(started_for(client, "web")) == 1
            db = PodRef("default", "db", "uid-db", 1000)
            batch = [PodRef("default", "batch-0", "uid-batch-0", 1)]
            append_batch(ledger, one_runbook_completed(db_run.id, preemptor=db, victims=batch))
            await client.until(lambda: len(started_for(client, "web")) == 2)
            _, request = client.options[-1]["args"]
            assert isinstance(request, PreemptionRequest) and request.preemptor.name == "web"
            assert request.retry_reason == (
                "woken: the room claimed by default/db was freed: its preemption's run ended "
                "completed; the last run found no candidate while that claim held it"
            )
            woken = metrics.registry.get_sample_value(
                "preemptctl_retries_woken_total", {"kind": "pod"}
            )
            assert woken == 1
        finally:
            await trigger.stop(drain=False)


async def test_a_gang_blocked_by_another_gangs_claim_is_woken_when_that_group_run_ends(
    tmp_path: Path,
) -> None:
    with sqlite_ledger(tmp_path) as ledger:
        view, client, clock, metrics, trigger = ledger_trigger(ledger)
        try:
            view.group(
                pod_group("train-a", namespace="ml", priority=1000, min_count=4, uid=TRAIN_A.uid)
            )
            for i in range(4):
                view.event("ADDED", train_a_member(i))
            view.group(pod_group("train", priority=1000, min_count=2))
            view.event("ADDED", member("train-0"))
            trigger.start()
            await client.next_start(2)
            [holder] = [h for h in client.started if "train-a" in h.id]
            [gang] = [h for h in client.started if "default-train" in h.id]
            # default/train: no candidate, ml/train-a's claim placed its member train-a-2
            # in the room it lacked on node-2.
            train = GroupRef("default", "train", "pg-train", 1000)
            blocked = GroupDecision(
                train.key,
                train.uid,
                Verdict.UNSCHEDULABLE,
                "even with every lower-priority victim gone only 1 of 2 pending pod(s) can be "
                "placed",
                rationale={"claimsInTheWay": {"node-2": ["ml/train-a-2"]}},
            )
            append_batch(ledger, group_decision_events(gang.id, "run-1", train, blocked, T0))
            await booked(trigger, 1)
            clock.now += 3
            await asyncio.sleep(0.05)
            assert len([h for h in client.started if "default-train" in h.id]) == 1
            story = group_preemption(holder.id, end=EventKind.PREEMPTION_ABORTED)
            append_batch(ledger, story)
            await client.until(
                lambda: len([h for h in client.started if "default-train" in h.id]) == 2
            )
            _, request = client.options[-1]["args"]
            assert isinstance(request, GroupPreemptionRequest) and request.group == train
            assert request.retry_reason.startswith(
                "woken: the room claimed by ml/train-a (its member ml/train-a-2) was freed: "
                "its preemption's run ended aborted;"
            )
            woken = metrics.registry.get_sample_value(
                "preemptctl_retries_woken_total", {"kind": "group"}
            )
            assert woken == 1
        finally:
            await trigger.stop(drain=False)

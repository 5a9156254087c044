"""The trigger loop against a stand-in Temporal client and view, on a fake clock.

Scenarios:
- an UNAVAILABLE answer to the pre-start describe() does not end the loop: the pod waits
  out a 1 s backoff and its preemption starts after it;
- a failed start_workflow (Temporal unavailable) does not end the loop either;
- losing track of a running preemption (its result unreadable while Temporal is
  unavailable) is not counted as an attempt, and the loop follows it again after 1 s;
- a preemption that ends with its pod still pending is retried after 10 s, then 20 s;
  meanwhile the pod counts in preemptctl_backoff_pods;
- a non-retryable end parks the pod: listed by parked() with its reason, counted in
  preemptctl_parked_pods, never started again while unchanged, started again once its
  labels change, or when a person retries it (in-process, or by running its workflow
  again from the CLI, seen at the next resync);
- a preemption that FAILED on an RBAC denial (the workflow fails, its result in the
  failure's details) parks its pod as well, instead of backing off; a failure that carries
  no result still backs off;
- a Failed critical pod gets one critical-admission preemption per admission failure,
  however often it is seen again afterwards;
- a deleted pod is forgotten: the loop keeps no state for it;
- a preemption is started eagerly (the worker runs beside the loop), every step but the
  decision a local activity;
- a parked pod bound after a person's retry: the loop signals that run `preemptor_bound`
  at once, as it signals its own runs, so the retried run does not wait for its poll;
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
from datetime import UTC, datetime
from typing import Any

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from preemptctl.ledger.vocabulary import Outcome
from preemptctl.preemption.decode import decode_pod
from preemptctl.preemption.objects import Pod
from preemptctl.worker.config import Settings
from preemptctl.worker.metrics import Metrics
from preemptctl.worker.trigger import TriggerLoop
from preemptctl.workflows.contract import PreemptionResult

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
    """The view's read()/subscribe() over a dict of pods a test edits; it hands listeners
    each pod decoded, as the view does."""

    def __init__(self) -> None:
        self.pods: dict[str, Any] = {}
        self.listeners: list[Callable[[str, str, Pod | None], None]] = []

    @contextmanager
    def read(self) -> Iterator[Any]:
        @dataclass
        class Snapshot:
            pods: dict[str, Any]

        yield Snapshot({uid: decode_pod(obj) for uid, obj in self.pods.items()})

    def subscribe(self, listener: Callable[[str, str, Pod | None], None]) -> None:
        self.listeners.append(listener)

    def event(self, event_type: str, obj: dict[str, Any]) -> None:
        uid = obj["metadata"]["uid"]
        decoded = None
        if event_type == "DELETED":
            self.pods.pop(uid, None)
        else:
            self.pods[uid] = obj
            decoded = decode_pod(obj)
        for listener in self.listeners:
            listener(event_type, uid, decoded)


@dataclass
class FakeHandle:
    id: str
    outcome: asyncio.Future[PreemptionResult]
    closed_at: datetime | None = None

    async def result(self) -> PreemptionResult:
        return await self.outcome

    async def signal(self, *args: Any, **kwargs: Any) -> None:
        return None


@dataclass
class Description:
    close_time: datetime | None
    start_time: datetime


@dataclass
class FakeClient:
    """Answers describe() and start_workflow() as a test scripts them."""

    describe_errors: list[Exception] = field(default_factory=list)
    start_errors: list[Exception] = field(default_factory=list)
    started: list[FakeHandle] = field(default_factory=list)
    options: list[dict[str, Any]] = field(default_factory=list)  # each start's arguments
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    runs: dict[str, datetime] = field(default_factory=dict)  # a person's runs, by start
    signals: list[tuple[str, Any]] = field(default_factory=list)  # (workflow ID, argument)

    def get_workflow_handle(self, workflow_id: str) -> Any:
        client = self

        class Handle:
            async def describe(self, **kwargs: Any) -> Description:
                if client.describe_errors:
                    raise client.describe_errors.pop(0)
                if workflow_id in client.runs:
                    return Description(None, client.runs[workflow_id])
                raise RPCError("not found", RPCStatusCode.NOT_FOUND, b"")

            async def signal(self, signal: Any, argument: Any, **kwargs: Any) -> None:
                client.signals.append((workflow_id, argument))
                client.wake.set()

        return Handle()

    async def start_workflow(self, *args: Any, id: str, **kwargs: Any) -> FakeHandle:
        if self.start_errors:
            raise self.start_errors.pop(0)
        handle = FakeHandle(id, asyncio.get_running_loop().create_future())
        self.started.append(handle)
        self.options.append({"args": args, **kwargs})
        self.wake.set()
        return handle

    async def next_start(self, count: int) -> FakeHandle:
        """Wait (bounded) until `count` starts happened; the latest."""
        async with asyncio.timeout(5):
            while len(self.started) < count:
                self.wake.clear()
                await self.wake.wait()
        return self.started[count - 1]


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

    def advance(self, seconds: float) -> None:
        self.clock.now += seconds

    def gauge(self, name: str) -> float | None:
        return self.metrics.registry.get_sample_value(name)

    async def ended(self, handle: FakeHandle, result: PreemptionResult) -> None:
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
    # Stand-ins for the cluster view and the Temporal client: the loop uses only their
    # reading and starting methods, which FakeView and FakeClient implement.
    trigger = TriggerLoop(view, client, SETTINGS, metrics, clock=clock, tick=0.005)  # type: ignore[arg-type]
    made = Harness(view, client, clock, metrics, trigger)
    yield made
    await trigger.stop(drain=False)


def unavailable() -> RPCError:
    return RPCError("frontend restarting", RPCStatusCode.UNAVAILABLE, b"")


async def test_unavailable_describe_does_not_end_the_loop(harness: Harness) -> None:
    harness.client.describe_errors.append(unavailable())
    harness.view.event("ADDED", pending_pod())
    harness.trigger.start()
    async with asyncio.timeout(5):
        while not harness.trigger._book.uids():
            await asyncio.sleep(0)
    assert not harness.trigger._book.due("uid-1", harness.clock.now + 0.9)
    harness.advance(1.0)
    await harness.client.next_start(1)
    assert harness.trigger._task is not None and not harness.trigger._task.done()


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


async def test_run_started_by_a_person_unparks_the_pod(harness: Harness) -> None:
    harness.view.event("ADDED", pending_pod())
    harness.trigger.start()
    first = await harness.client.next_start(1)
    await harness.ended(first, PreemptionResult(Outcome.FAILED, "RBAC denied", retryable=False))
    harness.client.runs[first.id] = datetime.now(UTC)  # preemptctl retry, elsewhere
    harness.advance(31)  # past the resync interval
    await harness.client.next_start(2)
    assert harness.trigger.parked() == []


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
    harness.view.event("ADDED", pending_pod())
    harness.trigger.start()
    first = await harness.client.next_start(1)
    await harness.ended(first, PreemptionResult(Outcome.FAILED, "RBAC denied", retryable=False))
    bound = pending_pod()
    bound["spec"]["nodeName"] = "node-1"  # the run `preemptctl retry` started made room
    harness.view.event("MODIFIED", bound)
    async with asyncio.timeout(5):
        while not harness.client.signals:
            harness.client.wake.clear()
            await harness.client.wake.wait()
    assert harness.client.signals == [(first.id, "node-1")]


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

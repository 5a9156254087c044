"""Which pods trigger a preemption, and when they are tried again.

Scenarios (one trigger condition each):
- a pending pod marked Unschedulable by a served scheduler triggers the default strategy;
- a pod not marked Unschedulable (yet) does not;
- a pod of another scheduler does not;
- a pod below the minimum priority does not;
- a pod with preemptionPolicy Never does not;
- a terminating pod does not;
- a bound, running pod does not;
- a critical pod the kubelet refused for lack of resources triggers critical-admission,
  a non-critical one does not;
- a failed start waits 1 s, doubling, at most 10 s;
- an ended preemption waits 10 s, doubling, up to the retry cap; forgetting a pod starts
  its backoff over;
- a parked pod is never due until unparked;
- a parked pod's signature sees its spec and labels, not its status.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime

from preemptctl.preemption.decision import Strategy
from preemptctl.preemption.objects import Pod, Resources
from preemptctl.worker.config import Settings
from preemptctl.worker.trigger_rules import Parked, RetryBook, pod_signature, trigger_reason

SETTINGS = Settings(min_priority=100, scheduler_names=("default-scheduler", "batch-scheduler"))


def pending(**fields: object) -> Pod:
    pod = Pod(
        "default", "web", "uid-1", priority=1000, requests=Resources(1000), unschedulable=True
    )
    return dataclasses.replace(pod, **fields)


def test_unschedulable_pod_of_a_served_scheduler_triggers_default_preemption() -> None:
    assert trigger_reason(pending(), SETTINGS) == ("Unschedulable", Strategy.DEFAULT)
    assert trigger_reason(pending(scheduler_name="batch-scheduler"), SETTINGS) is not None


def test_pod_not_yet_marked_unschedulable_does_not_trigger() -> None:
    assert trigger_reason(pending(unschedulable=False), SETTINGS) is None


def test_pod_of_another_scheduler_does_not_trigger() -> None:
    assert trigger_reason(pending(scheduler_name="volcano"), SETTINGS) is None


def test_pod_below_the_minimum_priority_does_not_trigger() -> None:
    assert trigger_reason(pending(priority=99), SETTINGS) is None
    assert trigger_reason(pending(priority=100), SETTINGS) is not None


def test_pod_that_never_preempts_does_not_trigger() -> None:
    assert trigger_reason(pending(preemption_policy="Never"), SETTINGS) is None


def test_terminating_pod_does_not_trigger() -> None:
    assert trigger_reason(pending(terminating=True), SETTINGS) is None


def test_bound_running_pod_does_not_trigger() -> None:
    assert trigger_reason(pending(node_name="node-1", phase="Running"), SETTINGS) is None


def test_critical_pod_refused_by_the_kubelet_triggers_critical_admission() -> None:
    refused = pending(
        node_name="node-1", phase="Failed", status_reason="OutOfcpu", priority=2_000_000_000
    )
    assert trigger_reason(refused, SETTINGS) == (
        "admission failed (OutOfcpu)",
        Strategy.CRITICAL_ADMISSION,
    )
    not_critical = dataclasses.replace(refused, priority=1000)
    assert trigger_reason(not_critical, SETTINGS) is None


def waits(book: RetryBook, record: Callable[[RetryBook, float], object], times: int) -> list[float]:
    """The waits `book` imposes after `record` is applied `times` times, each once the
    previous wait is over (on a fake clock, in half-second steps)."""
    found, now = [], 0.0
    for _ in range(times):
        record(book, now)
        wait = 0.0
        while not book.due("uid-1", now + wait):
            wait += 0.5
        found.append(wait)
        now += wait
    return found


def test_failed_start_waits_one_second_doubling_up_to_ten() -> None:
    book = RetryBook(maximum=300)
    assert waits(book, lambda b, now: b.start_failed("uid-1", now), 6) == [1, 2, 4, 8, 10, 10]


def test_ended_preemption_waits_ten_seconds_doubling_up_to_the_cap() -> None:
    book = RetryBook(maximum=300)
    found = waits(book, lambda b, now: b.ended("uid-1", now), 7)
    assert found == [10, 20, 40, 80, 160, 300, 300]


def test_forgetting_a_pod_starts_its_backoff_over() -> None:
    book = RetryBook(maximum=300)
    for now in (0.0, 100.0, 200.0):
        book.ended("uid-1", now)
    book.forget("uid-1")
    assert book.due("uid-1", 0.0)
    book.ended("uid-1", 0.0)
    assert book.due("uid-1", 10.0)


def test_parked_pod_is_never_due_until_unparked() -> None:
    book = RetryBook(maximum=300)
    book.park(Parked("uid-1", "default/web", "RBAC denied", datetime.now(UTC), "sig"))
    assert not book.due("uid-1", 10**9)
    assert [p.pod for p in book.all_parked()] == ["default/web"]
    book.unpark("uid-1")
    assert book.due("uid-1", 0.0)
    assert book.all_parked() == []


def test_pod_signature_ignores_status_and_sees_spec_and_labels() -> None:
    pod = pending()
    assert pod_signature(pod) == pod_signature(
        dataclasses.replace(pod, resource_version="99", unschedulable=False)
    )
    assert pod_signature(pod) != pod_signature(dataclasses.replace(pod, labels={"a": "b"}))
    assert pod_signature(pod) != pod_signature(dataclasses.replace(pod, priority=5000))

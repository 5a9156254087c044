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
- backoff: 1 s, doubling, at most 10 s; forgetting a pod starts it over.
"""

from __future__ import annotations

import dataclasses

from preemptctl.preemption.decision import Strategy
from preemptctl.preemption.objects import Pod, Resources
from preemptctl.worker.config import Settings
from preemptctl.worker.trigger import Backoff, trigger_reason

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


def test_backoff_starts_at_one_second_doubles_and_caps_at_ten() -> None:
    backoff = Backoff()
    waits = []
    now = 0.0
    for _ in range(6):
        backoff.tried("uid-1", now)
        wait = 0.0
        while not backoff.due("uid-1", now + wait):
            wait += 0.5
        waits.append(wait)
        now += wait
    assert waits == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    backoff.forget("uid-1")
    backoff.tried("uid-1", now)
    assert backoff.due("uid-1", now + 1.0)

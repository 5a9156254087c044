"""Which pods trigger a preemption, and when they are tried again.

Scenarios (one trigger condition each):
- a pending pod marked Unschedulable by a served scheduler triggers the default strategy;
- a pod not marked Unschedulable (yet) does not;
- a pod of another scheduler does not: it is left to that scheduler, counted (by
  schedulerName) and logged once however often it is judged; a pod that would not trigger
  anyway (served, not unschedulable, bound, below the minimum, Never, terminating) is not
  "left"; the worker says at start which names it serves;
- a pod below the minimum priority does not;
- a pod with preemptionPolicy Never does not;
- a terminating pod does not;
- a bound, running pod does not;
- a critical pod the kubelet refused for lack of resources triggers critical-admission,
  a non-critical one does not;
- a failed start waits 1 s, doubling, at most 10 s;
- an ended preemption waits 10 s, doubling, up to the retry cap; forgetting a pod starts
  its backoff over;
- a preemption that found no candidate while claims of running preemptions held its room
  is woken when one of their runs ends (a group's run frees its members' room), not before
  a 1 s floor after its own end; an end of another preemption wakes nothing, and the
  backoff stays the ceiling; a holder that ended between the run's start and its end being
  booked wakes it at once (an older end does not); the run a wake started does not double
  the backoff when it ends; the wake says who freed the room;
- a parked pod is never due until unparked;
- a parked pod's signature sees its spec and labels, not its status.

Groups:
- a pod that belongs to a group (a PodGroup it names, or the gang label's group) never gets
  a pod preemption, pending or refused by the kubelet;
- a PodGroup with a pending unschedulable member is pending, named by its UID and priority,
  with its waiting members in name order; a label-named group likewise, under its synthetic
  UID and its most important member's priority;
- a group is not pending: when its PodGroup is not in the view, when no member waits (bound,
  not yet unschedulable, terminating, or another scheduler's), below the minimum priority,
  with preemptionPolicy Never on the group, or (the group setting none) on any member; the
  group's own policy wins over its members';
- a pod naming a PodGroup is not in the label's group, even with the label;
- every pending group of the view at once, in key order, each once.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from preemptctl.preemption.decision import Strategy
from preemptctl.preemption.decode import decode_pod_group
from preemptctl.preemption.group_decision import GroupRef, label_group_uid
from preemptctl.preemption.objects import Pod, Resources
from preemptctl.preemption.snapshot import ClusterSnapshot
from preemptctl.worker.config import Settings
from preemptctl.worker.metrics import Metrics
from preemptctl.worker.trigger_rules import (
    GroupKey,
    Parked,
    RetryBook,
    Woken,
    group_of,
    left_to_another_scheduler,
    note_left_to_another_scheduler,
    pending_group,
    pending_groups,
    pod_signature,
    serving_line,
    trigger_reason,
    woken_reason,
)
from tests.preemption.builders import pod_group

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


def test_a_pod_left_to_another_scheduler_is_counted_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = Metrics()
    tally = metrics.left_to_other_schedulers
    left = pending(scheduler_name="preemptctl-scheduler")
    with caplog.at_level(logging.WARNING, logger="preemptctl.worker.trigger_rules"):
        for _ in range(3):  # every watch event and resync judges it again
            note_left_to_another_scheduler(left, SETTINGS, tally)
        note_left_to_another_scheduler(
            pending(uid="uid-2", scheduler_name="volcano"), SETTINGS, tally
        )
    assert [record.getMessage() for record in caplog.records] == [
        "default/web is pending and unschedulable, but its schedulerName 'preemptctl-scheduler' "
        "is not one this controller serves (default-scheduler, batch-scheduler): left to that "
        "scheduler; PREEMPT_SCHEDULER_NAMES names the ones served",
        "default/web is pending and unschedulable, but its schedulerName 'volcano' is not one "
        "this controller serves (default-scheduler, batch-scheduler): left to that scheduler; "
        "PREEMPT_SCHEDULER_NAMES names the ones served",
    ]
    counted = metrics.registry.get_sample_value
    name = "preemptctl_pods_left_to_other_schedulers_total"
    assert counted(name, {"scheduler_name": "preemptctl-scheduler"}) == 1
    assert counted(name, {"scheduler_name": "volcano"}) == 1


@pytest.mark.parametrize(
    "pod",
    [
        pending(),  # served
        pending(scheduler_name="volcano", unschedulable=False),  # not judged yet
        pending(scheduler_name="volcano", node_name="node-1", phase="Running"),
        pending(scheduler_name="volcano", priority=99),  # below the minimum anyway
        pending(scheduler_name="volcano", preemption_policy="Never"),
        pending(scheduler_name="volcano", terminating=True),
    ],
)
def test_a_pod_that_would_not_trigger_anyway_is_not_left_to_another_scheduler(pod: Pod) -> None:
    assert left_to_another_scheduler(pod, SETTINGS) is None


def test_the_worker_says_which_scheduler_names_it_serves() -> None:
    assert serving_line(SETTINGS) == (
        "serving pods of schedulerName default-scheduler, batch-scheduler "
        "(PREEMPT_SCHEDULER_NAMES); a pending pod of another scheduler is left to it, logged "
        "once and counted in preemptctl_pods_left_to_other_schedulers_total"
    )


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


def test_an_end_blocked_by_claims_is_woken_when_one_of_their_runs_ends() -> None:
    book = RetryBook(maximum=300)
    assert book.ended("uid-1", 0.0, blocked_by={"default/a", "default/b"}) == 10
    assert not book.due("uid-1", 3.0)
    woken = book.freed("default/b", {"default/b"}, 3.0, "completed")
    assert woken == [Woken("uid-1", "default/b", "default/b", "completed", 3.0)]
    assert book.due("uid-1", 3.0)
    assert book.woken("uid-1") == woken[0]


def test_a_groups_run_frees_the_room_its_members_were_placed_in() -> None:
    book = RetryBook(maximum=300)
    book.ended("uid-1", 0.0, blocked_by={"ml/train-b-1"})
    placed = {"ml/train-b", "ml/train-b-0", "ml/train-b-1"}
    [woken] = book.freed("ml/train-b", placed, 4.0, "completed")
    assert (woken.holder, woken.claimed) == ("ml/train-b", "ml/train-b-1")
    assert book.due("uid-1", 4.0)


def test_a_wake_waits_for_the_floor_after_the_blocked_end() -> None:
    book = RetryBook(maximum=300)
    book.ended("uid-1", 0.0, blocked_by={"default/a"})
    [woken] = book.freed("default/a", {"default/a"}, 0.2)
    assert woken.at == 1.0
    assert not book.due("uid-1", 0.9) and book.due("uid-1", 1.0)


def test_another_preemptions_end_wakes_nothing_and_the_backoff_stays_the_ceiling() -> None:
    book = RetryBook(maximum=300)
    book.ended("uid-1", 0.0, blocked_by={"default/a"})
    book.ended("uid-2", 0.0)  # no candidate, no claim in its way
    assert book.freed("default/b", {"default/b"}, 2.0) == []
    assert book.freed("default/a", {"default/a"}, 3.0) == [
        Woken("uid-1", "default/a", "default/a", "", 3.0)
    ]
    assert not book.due("uid-2", 9.9) and book.due("uid-2", 10.0)


def test_a_holder_that_ended_before_the_blocked_end_was_booked_wakes_it_at_once() -> None:
    book = RetryBook(maximum=300)
    book.freed("default/a", {"default/a"}, 3.0, "completed")  # its end was read first
    book.ended("uid-1", 3.1, blocked_by={"default/a"}, since=2.5)  # this run began at 2.5
    assert book.woken("uid-1") == Woken("uid-1", "default/a", "default/a", "completed", 4.1)
    assert not book.due("uid-1", 4.0) and book.due("uid-1", 4.1)
    book.ended("uid-2", 3.2, blocked_by={"default/a"}, since=3.05)  # began after that end
    assert book.woken("uid-2") is None
    assert not book.due("uid-2", 13.1)


def test_the_run_a_wake_started_does_not_double_the_backoff() -> None:
    book = RetryBook(maximum=300)
    book.ended("uid-1", 0.0, blocked_by={"default/a"})
    book.freed("default/a", {"default/a"}, 2.0)
    book.started("uid-1")
    assert book.ended("uid-1", 3.0) == 10  # the woken run found nothing either
    assert book.woken("uid-1") is None
    book.started("uid-1")
    assert book.ended("uid-1", 13.0) == 20  # a blind retry's end doubles as before


def test_a_wake_says_who_freed_the_room() -> None:
    pod = Woken("uid-1", "default/a", "default/a", "completed", 3.0)
    member = Woken("uid-1", "ml/train-b", "ml/train-b-1", "aborted", 3.0)
    assert woken_reason(pod) == (
        "woken: the room claimed by default/a was freed: its preemption's run ended "
        "completed; the last run found no candidate while that claim held it"
    )
    assert woken_reason(member).startswith(
        "woken: the room claimed by ml/train-b (its member ml/train-b-1) was freed: its "
        "preemption's run ended aborted;"
    )


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


# -- groups -------------------------------------------------------------------------------------

KUEUE = "kueue.x-k8s.io/pod-group-name"
GANGS = dataclasses.replace(SETTINGS, pod_group_label=KUEUE)
TRAIN = GroupKey("ml", "train", False)
JOB = GroupKey("ml", "job", True)


def member(name: str, **fields: object) -> Pod:
    return dataclasses.replace(
        pending(), namespace="ml", name=name, uid=f"uid-{name}", group="train", **fields
    )


def labelled(name: str, **fields: object) -> Pod:
    return dataclasses.replace(
        pending(), namespace="ml", name=name, uid=f"uid-{name}", labels={KUEUE: "job"}, **fields
    )


def cluster(*pods: Pod, **group: object) -> ClusterSnapshot:
    snapshot = ClusterSnapshot.from_objects([], pods)
    if group.pop("present", True):
        options = {"priority": 1000, "min_count": 2, **group}
        made = pod_group("train", namespace="ml", **options)  # type: ignore[arg-type]
        snapshot.upsert_pod_group(decode_pod_group(made))
    return snapshot


def test_a_pod_of_a_group_never_gets_a_pod_preemption() -> None:
    assert trigger_reason(member("train-0"), SETTINGS) is None
    assert trigger_reason(labelled("job-0"), GANGS) is None
    assert trigger_reason(labelled("job-0"), SETTINGS) is not None  # the label is not set
    refused = member(
        "train-0", node_name="n", phase="Failed", status_reason="OutOfcpu", priority=2_000_000_000
    )
    assert trigger_reason(refused, SETTINGS) is None
    assert group_of(member("train-0"), SETTINGS) == TRAIN
    assert group_of(labelled("job-0"), GANGS) == JOB


def test_a_podgroup_with_a_waiting_member_is_pending() -> None:
    snapshot = cluster(member("train-1"), member("train-0"), member("train-2", node_name="n"))
    found = pending_group(snapshot, TRAIN, SETTINGS)
    assert found is not None
    assert found.group == GroupRef("ml", "train", "pg-train", 1000)
    assert [p.name for p in found.members] == ["train-0", "train-1"]
    assert found.reason == "Unschedulable: 2 of 3 member(s) pending"


def test_a_label_named_group_is_pending_under_its_synthetic_uid() -> None:
    snapshot = cluster(labelled("job-0", priority=500), labelled("job-1"), present=False)
    found = pending_group(snapshot, JOB, GANGS)
    assert found is not None
    assert found.group == GroupRef("ml", "job", label_group_uid("ml", "job"), 1000)
    assert [p.name for p in found.members] == ["job-0", "job-1"]


@pytest.mark.parametrize(
    ("pods", "group"),
    [
        ([member("train-0")], {"present": False}),
        ([member("train-0", node_name="n", phase="Running")], {}),
        ([member("train-0", unschedulable=False)], {}),
        ([member("train-0", terminating=True)], {}),
        ([member("train-0", scheduler_name="volcano")], {}),
        ([member("train-0")], {"priority": 99}),
        ([member("train-0")], {"preemption_policy": "Never"}),
        ([member("train-0"), member("train-1", preemption_policy="Never")], {}),
    ],
    ids=[
        "no-podgroup",
        "bound",
        "not-yet-unschedulable",
        "terminating",
        "other-scheduler",
        "below-min-priority",
        "group-never",
        "a-member-never",
    ],
)
def test_a_group_is_not_pending(pods: list[Pod], group: dict[str, object]) -> None:
    assert pending_group(cluster(*pods, **group), TRAIN, SETTINGS) is None


def test_the_groups_own_policy_wins_over_its_members() -> None:
    snapshot = cluster(
        member("train-0", preemption_policy="Never"), preemption_policy="PreemptLowerPriority"
    )
    assert pending_group(snapshot, TRAIN, SETTINGS) is not None


def test_a_pod_naming_a_podgroup_is_not_in_the_labels_group() -> None:
    snapshot = cluster(labelled("job-0", group="train"), present=False)
    assert pending_group(snapshot, JOB, GANGS) is None


def test_every_pending_group_of_the_view_once_in_key_order() -> None:
    snapshot = cluster(
        member("train-0"),
        member("train-1"),
        labelled("job-0"),
        labelled("job-1"),
        pending(),  # a pod of no group
    )
    found = pending_groups(snapshot, GANGS)
    assert [(g.group.key, len(g.members)) for g in found] == [("ml/job", 2), ("ml/train", 2)]

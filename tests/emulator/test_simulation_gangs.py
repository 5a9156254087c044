"""The simulated scheduler and pod groups: gangs placed all-or-nothing, as kube-scheduler 1.37
places them with the GenericWorkload gate, and preempted for as its PodGroupPostFilter does.

Scenarios (one pass at a time, on the store, no server):
- a gang whose members all fit is bound whole, in one pass;
- a gang of which only some fit binds none: each placed member carries the GangScheduling
  plugin's `minCount (N) cannot be satisfied: S scheduled, R remaining`, the member that fit
  nowhere its own FitError;
- the cycle stops as soon as minCount is out of reach: the members never tried carry the
  group's message;
- members already bound count toward minCount;
- a gang's minCount below its size binds the members that fit once minCount is met;
- a `basic` group binds what fits, the rest carry their own FitError;
- a pod without a group is scheduled as before, and the room a failing gang tried is still
  free for it (the gang's tentative placement is undone);
- a gang with fewer members than minCount, and a pod naming a PodGroup that does not exist,
  wait outside the queue: nothing is written on them, the log says why once, in upstream's
  PreEnqueue words;
- a member's nominated node is where it goes when it fits there;
- a gang a group preemption nominated lands on its nominations, each member on its own,
  where the first-fitting-node rule would have put the members elsewhere (kube-scheduler
  evaluates a nominated pod's node first); a member whose nominated node no longer fits
  goes where it fits, its siblings still on theirs;
- while a victim is still leaving a member's nominated node, the gang waits for that room
  (nothing written) even though another victim, gone first, freed room elsewhere; once the
  victim is gone the gang binds on its nominations (a deliberate difference: upstream may
  take the room elsewhere, and a dev run would depend on which victim ended first); room
  elsewhere while the nominated node is not being freed is taken as upstream takes it;
- pods named by the configured group label are a gang sized by the size annotation;
  without the setting they are pods of their own;
- upstream-preemption mode, for a PodGroup that does not fit: the planner's victims are
  marked DisruptionTarget (`preempting to accommodate a higher priority podgroup`),
  deleted, and carry `Preempted by podgroup <uid> on node cluster`, related to the
  PodGroup; every placed member is nominated to its node; the next pass preempts nothing
  more, and once the victims are gone the gang is bound on its nominated nodes;
- with a preemption delay, the group is preempted for only once the delay is over;
- a group named by a label is not preempted for (kube-scheduler does not know it).
(The bundled gang scenario on the running cluster: tests/worker/test_dev_scenarios.py.)
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from preemptctl.emulator import Emulator
from preemptctl.emulator.resources import EVENTS, PODS
from preemptctl.emulator.simulation import SimulatedScheduler
from tests.support.emulator import as_list, node, pod

GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
SIZE_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"


def pod_group(
    name: str,
    *,
    min_count: int | None = 3,
    priority: int = 0,
    disruption_all: bool = False,
    uid: str | None = None,
) -> dict[str, Any]:
    """A PodGroup: a gang of `min_count`, or `basic` when None."""
    policy: dict[str, Any] = (
        {"basic": {}} if min_count is None else {"gang": {"minCount": min_count}}
    )
    built: dict[str, Any] = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}"},
        "spec": {
            "schedulingPolicy": policy,
            "disruptionMode": {"all": {}} if disruption_all else {"single": {}},
            "priority": priority,
        },
    }
    return built


def member(name: str, group: str, **options: Any) -> dict[str, Any]:
    built = pod(name, uid=f"uid-{name}", **options)
    built["spec"]["schedulingGroup"] = {"podGroupName": group}
    return built


def labelled(name: str, group: str, size: int, **options: Any) -> dict[str, Any]:
    built = pod(name, uid=f"uid-{name}", labels={GROUP_LABEL: group}, **options)
    built["metadata"]["annotations"] = {SIZE_ANNOTATION: str(size)}
    return built


def _scheduler(*objects: dict[str, Any], **options: Any) -> tuple[Emulator, SimulatedScheduler]:
    emulator = Emulator()
    emulator.load(as_list(*objects))
    return emulator, SimulatedScheduler(emulator.store, **options)


def _stored(emulator: Emulator, name: str) -> dict[str, Any]:
    found = emulator.pod(f"default/{name}")
    assert found is not None, name
    return found


def _node_of(emulator: Emulator, name: str) -> str | None:
    found: str | None = _stored(emulator, name)["spec"].get("nodeName")
    return found


def _condition(emulator: Emulator, name: str, kind: str = "PodScheduled") -> dict[str, Any] | None:
    for condition in _stored(emulator, name)["status"].get("conditions") or ():
        if condition["type"] == kind:
            found: dict[str, Any] = condition
            return found
    return None


def _unschedulable(emulator: Emulator, name: str) -> str:
    """The Unschedulable message on the pod (fails when it has none)."""
    condition = _condition(emulator, name)
    assert condition is not None, name
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable"), name
    message: str = condition["message"]
    return message


# -- all-or-nothing ------------------------------------------------------------------------------


def test_a_gang_whose_members_all_fit_is_bound_whole_in_one_pass() -> None:
    emulator, scheduler = _scheduler(
        node("n1", cpu="2"),
        node("n2", cpu="2"),
        pod_group("train"),
        *(member(f"train-{i}", "train", cpu="1") for i in range(3)),
    )
    assert scheduler.schedule_pass() == 3
    assert [_node_of(emulator, f"train-{i}") for i in range(3)] == ["n1", "n1", "n2"]


def test_a_gang_of_which_only_some_fit_binds_none_and_marks_each_unschedulable() -> None:
    emulator, scheduler = _scheduler(
        node("n1", cpu="2"),
        pod_group("train"),
        *(member(f"train-{i}", "train", cpu="1") for i in range(3)),
    )
    assert scheduler.schedule_pass() == 3
    assert [_node_of(emulator, f"train-{i}") for i in range(3)] == [None, None, None]
    assert {name: _unschedulable(emulator, name) for name in ("train-0", "train-1", "train-2")} == {
        "train-0": "minCount (3) cannot be satisfied: 2 scheduled, 0 remaining",
        "train-1": "minCount (3) cannot be satisfied: 2 scheduled, 0 remaining",
        "train-2": "0/1 nodes are available: 1 Insufficient cpu.",
    }


def test_the_cycle_stops_once_min_count_is_out_of_reach() -> None:
    emulator, scheduler = _scheduler(
        node("n1", cpu="1"),
        pod_group("train"),
        member("train-0", "train", cpu="2"),
        member("train-1", "train", cpu="1"),
        member("train-2", "train", cpu="1"),
    )
    scheduler.schedule_pass()
    assert {name: _unschedulable(emulator, name) for name in ("train-0", "train-1", "train-2")} == {
        "train-0": "0/1 nodes are available: 1 Insufficient cpu.",
        "train-1": "minCount (3) cannot be satisfied: 0 scheduled, 2 remaining",
        "train-2": "minCount (3) cannot be satisfied: 0 scheduled, 2 remaining",
    }


def test_members_already_bound_count_toward_min_count() -> None:
    emulator, scheduler = _scheduler(
        node("n1", cpu="3"),
        pod_group("train"),
        member("train-0", "train", cpu="1", node_name="n1"),
        member("train-1", "train", cpu="1"),
        member("train-2", "train", cpu="1"),
    )
    assert scheduler.schedule_pass() == 2
    assert [_node_of(emulator, "train-1"), _node_of(emulator, "train-2")] == ["n1", "n1"]


def test_a_gang_whose_min_count_is_met_binds_the_members_that_fit() -> None:
    emulator, scheduler = _scheduler(
        node("n1", cpu="2"),
        pod_group("train", min_count=2),
        *(member(f"train-{i}", "train", cpu="1") for i in range(3)),
    )
    scheduler.schedule_pass()
    assert [_node_of(emulator, f"train-{i}") for i in range(3)] == ["n1", "n1", None]
    assert _unschedulable(emulator, "train-2") == "0/1 nodes are available: 1 Insufficient cpu."


def test_a_basic_group_binds_what_fits() -> None:
    emulator, scheduler = _scheduler(
        node("n1", cpu="2"),
        pod_group("jobs", min_count=None),
        *(member(f"job-{i}", "jobs", cpu="1") for i in range(3)),
    )
    scheduler.schedule_pass()
    assert [_node_of(emulator, f"job-{i}") for i in range(3)] == ["n1", "n1", None]
    assert _unschedulable(emulator, "job-2") == "0/1 nodes are available: 1 Insufficient cpu."


def test_a_pod_without_a_group_takes_the_room_a_failing_gang_tried() -> None:
    emulator, scheduler = _scheduler(
        node("n1", cpu="2"),
        pod_group("train", priority=1000),
        *(member(f"train-{i}", "train", cpu="1", priority=1000) for i in range(3)),
        pod("loose", cpu="2", priority=10),
    )
    scheduler.schedule_pass()
    assert _node_of(emulator, "loose") == "n1"
    assert [_node_of(emulator, f"train-{i}") for i in range(3)] == [None, None, None]


def test_a_pod_without_a_group_is_scheduled_as_before() -> None:
    emulator, scheduler = _scheduler(
        node("n1", cpu="1"),
        pod("web", cpu="1"),
        pod("db", cpu="1"),
    )
    scheduler.schedule_pass()
    assert _node_of(emulator, "db") == "n1"
    assert _unschedulable(emulator, "web") == "0/1 nodes are available: 1 Insufficient cpu."


def _waiting_said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "waits" in r.getMessage()]


def test_a_gang_with_fewer_members_than_min_count_waits_outside_the_queue(
    caplog: pytest.LogCaptureFixture,
) -> None:
    emulator, scheduler = _scheduler(
        node("n1", cpu="4"),
        pod_group("train", min_count=4),
        *(member(f"train-{i}", "train", cpu="1") for i in range(3)),
    )
    with caplog.at_level(logging.WARNING):
        assert scheduler.schedule_pass() == 0
        assert scheduler.schedule_pass() == 0
    assert [_node_of(emulator, f"train-{i}") for i in range(3)] == [None, None, None]
    assert [_condition(emulator, f"train-{i}") for i in range(3)] == [None, None, None]
    assert _waiting_said(caplog) == [
        "simulated scheduler: pod group default/train waits: "
        "waiting for minCount pods from a gang to appear in scheduling queue"
    ]


def test_a_pod_naming_a_pod_group_that_does_not_exist_waits_outside_the_queue(
    caplog: pytest.LogCaptureFixture,
) -> None:
    emulator, scheduler = _scheduler(node("n1", cpu="4"), member("orphan", "missing"))
    with caplog.at_level(logging.WARNING):
        assert scheduler.schedule_pass() == 0
    assert _node_of(emulator, "orphan") is None
    assert _condition(emulator, "orphan") is None
    assert _waiting_said(caplog) == [
        "simulated scheduler: pod group default/missing waits: "
        'waiting for pod\'s pod group "missing" to appear in scheduling queue'
    ]


def test_a_member_goes_to_its_nominated_node_when_it_fits_there() -> None:
    emulator, scheduler = _scheduler(
        node("n1", cpu="2"),
        node("n2", cpu="2"),
        pod_group("train", min_count=2),
        member("train-0", "train", cpu="1", nominated_node="n2"),
        member("train-1", "train", cpu="1"),
    )
    scheduler.schedule_pass()
    assert [_node_of(emulator, "train-0"), _node_of(emulator, "train-1")] == ["n2", "n1"]


def test_a_gang_lands_on_the_nodes_its_group_preemption_nominated() -> None:
    """Each 1-cpu member would fit on n1 (the first node by name, 4 cpu free); the
    nominations, crossing the name order, say where room was made for each."""
    emulator, scheduler = _scheduler(
        node("n1", cpu="4"),
        node("n2", cpu="4"),
        node("n3", cpu="4"),
        pod_group("train", min_count=3),
        member("train-0", "train", cpu="1", nominated_node="n3"),
        member("train-1", "train", cpu="1", nominated_node="n2"),
        member("train-2", "train", cpu="1", nominated_node="n1"),
    )
    scheduler.schedule_pass()
    placed = [_node_of(emulator, f"train-{i}") for i in range(3)]
    assert placed == ["n3", "n2", "n1"]


def test_a_member_whose_nominated_node_no_longer_fits_goes_where_it_fits() -> None:
    emulator, scheduler = _scheduler(
        node("n1", cpu="2"),
        node("n2", cpu="2"),
        node("n3", cpu="2"),
        pod("intruder", cpu="2", node_name="n3"),
        pod_group("train", min_count=2),
        member("train-0", "train", cpu="2", nominated_node="n3"),
        member("train-1", "train", cpu="2", nominated_node="n1"),
    )
    scheduler.schedule_pass()
    assert [_node_of(emulator, "train-0"), _node_of(emulator, "train-1")] == ["n2", "n1"]


def _victims_leaving(*leaving: str) -> tuple[Emulator, SimulatedScheduler]:
    """n1 and n2 held by victims of train's group preemption (those named in `leaving`
    deleted, terminating for 30 s), n3 free; train-0 nominated to n1, train-1 to n2."""
    emulator, scheduler = _scheduler(
        node("n1", cpu="2"),
        node("n2", cpu="2"),
        node("n3", cpu="2"),
        pod("victim-1", cpu="2", node_name="n1", grace_period=30),
        pod("victim-2", cpu="2", node_name="n2", grace_period=30),
        pod_group("train", min_count=2, priority=1000),
        member("train-0", "train", cpu="2", nominated_node="n1"),
        member("train-1", "train", cpu="2", nominated_node="n2"),
    )
    for victim in leaving:
        emulator.store.delete(PODS, "default", victim)
    return emulator, scheduler


def test_the_gang_waits_for_the_room_being_made_on_its_nominated_nodes() -> None:
    emulator, scheduler = _victims_leaving("victim-1", "victim-2")
    emulator.finalize("default/victim-2")  # gone first: n2 free, n1 still being freed
    before = {name: _stored(emulator, name) for name in ("train-0", "train-1")}
    scheduler.schedule_pass()
    assert {name: _stored(emulator, name) for name in before} == before  # nothing written
    emulator.finalize("default/victim-1")
    scheduler.schedule_pass()
    assert [_node_of(emulator, "train-0"), _node_of(emulator, "train-1")] == ["n1", "n2"]


def test_room_elsewhere_is_taken_while_the_nominated_node_is_not_being_freed() -> None:
    emulator, scheduler = _victims_leaving("victim-2")
    emulator.finalize("default/victim-2")  # victim-1 not deleted (yet): n1 is not being freed
    scheduler.schedule_pass()
    assert [_node_of(emulator, "train-0"), _node_of(emulator, "train-1")] == ["n3", "n2"]


def test_label_named_pods_are_a_gang_when_the_label_is_configured() -> None:
    pods = [labelled(f"etl-{i}", "etl", size=3, cpu="1") for i in range(3)]
    emulator, scheduler = _scheduler(
        node("n1", cpu="2"),
        *pods,
        pod_group_label=GROUP_LABEL,
        pod_group_size_annotation=SIZE_ANNOTATION,
    )
    scheduler.schedule_pass()
    assert [_node_of(emulator, f"etl-{i}") for i in range(3)] == [None, None, None]
    assert _unschedulable(emulator, "etl-0") == (
        "minCount (3) cannot be satisfied: 2 scheduled, 0 remaining"
    )


def test_without_the_setting_label_named_pods_are_pods_of_their_own() -> None:
    pods = [labelled(f"etl-{i}", "etl", size=3, cpu="1") for i in range(3)]
    emulator, scheduler = _scheduler(node("n1", cpu="2"), *pods)
    scheduler.schedule_pass()
    assert [_node_of(emulator, f"etl-{i}") for i in range(3)] == ["n1", "n1", None]


# -- upstream-preemption mode -----------------------------------------------------------------


def _full_cluster(**options: Any) -> tuple[Emulator, SimulatedScheduler]:
    """Two nodes full of low-priority pods: a loose one on n1, a gang taken whole (`all`)
    across both; a pending gang of two that needs both nodes."""
    return _scheduler(
        node("n1", cpu="2"),
        node("n2", cpu="2"),
        pod_group("batch", min_count=2, priority=10, disruption_all=True),
        member("batch-0", "batch", cpu="1", node_name="n1", priority=10),
        member("batch-1", "batch", cpu="2", node_name="n2", priority=10),
        pod("loose", cpu="1", node_name="n1", priority=5, uid="uid-loose"),
        pod_group("train", min_count=2, priority=1000, uid="uid-train"),
        *(member(f"train-{i}", "train", cpu="2", priority=1000) for i in range(2)),
        preemption=True,
        **options,
    )


def test_upstream_mode_preempts_for_a_pod_group_as_pod_group_post_filter_does() -> None:
    emulator, scheduler = _full_cluster()
    scheduler.schedule_pass()
    for victim in ("batch-0", "batch-1", "loose"):
        assert _stored(emulator, victim)["metadata"].get("deletionTimestamp"), victim
        target = _condition(emulator, victim, "DisruptionTarget")
        assert target is not None
        assert (target["reason"], target["message"]) == (
            "PreemptionByScheduler",
            "default-scheduler: preempting to accommodate a higher priority podgroup",
        )
    events = sorted(emulator.store.objects(EVENTS), key=lambda e: e["involvedObject"]["name"])
    assert [
        (
            e["involvedObject"]["name"],
            e["reason"],
            e["type"],
            e["reportingComponent"],
            e["message"],
            e["related"],
        )
        for e in events
    ] == [
        (
            name,
            "Preempted",
            "Normal",
            "default-scheduler",
            "Preempted by podgroup uid-train on node cluster",
            {
                "apiVersion": "scheduling.k8s.io/v1beta1",
                "kind": "PodGroup",
                "namespace": "default",
                "name": "train",
                "uid": "uid-train",
            },
        )
        for name in ("batch-0", "batch-1", "loose")
    ]
    nominated = {
        name: _stored(emulator, name)["status"].get("nominatedNodeName")
        for name in ("train-0", "train-1")
    }
    assert nominated == {"train-0": "n1", "train-1": "n2"}
    assert [_unschedulable(emulator, "train-0"), _unschedulable(emulator, "train-1")] == [
        "0/2 nodes are available: 2 Insufficient cpu.",
        "minCount (2) cannot be satisfied: 0 scheduled, 1 remaining",
    ]


def test_the_next_pass_waits_for_the_victims_then_binds_the_gang_where_it_was_nominated() -> None:
    emulator, scheduler = _full_cluster()
    scheduler.schedule_pass()
    scheduler.schedule_pass()
    assert len(emulator.store.objects(EVENTS)) == 3
    for victim in ("batch-0", "batch-1", "loose"):
        emulator.finalize(f"default/{victim}")
    scheduler.schedule_pass()
    assert [_node_of(emulator, "train-0"), _node_of(emulator, "train-1")] == ["n1", "n2"]
    assert len(emulator.store.objects(EVENTS)) == 3


def test_with_a_delay_the_group_is_preempted_for_once_the_delay_is_over() -> None:
    now = [100.0]
    emulator, scheduler = _full_cluster(preemption_delay=5.0, clock=lambda: now[0])
    scheduler.schedule_pass()
    assert emulator.store.objects(EVENTS) == []
    assert _unschedulable(emulator, "train-1")
    now[0] += 5.0
    scheduler.schedule_pass()
    assert len(emulator.store.objects(EVENTS)) == 3


def test_a_group_named_by_a_label_is_not_preempted_for() -> None:
    emulator, scheduler = _scheduler(
        node("n1", cpu="2"),
        pod("low", cpu="2", node_name="n1", priority=1),
        *(labelled(f"etl-{i}", "etl", size=2, cpu="1", priority=1000) for i in range(2)),
        preemption=True,
        pod_group_label=GROUP_LABEL,
        pod_group_size_annotation=SIZE_ANNOTATION,
    )
    scheduler.schedule_pass()
    assert emulator.store.objects(EVENTS) == []
    assert not _stored(emulator, "low")["metadata"].get("deletionTimestamp")
    assert [_unschedulable(emulator, "etl-0"), _unschedulable(emulator, "etl-1")] == [
        "0/1 nodes are available: 1 Insufficient cpu.",
        "minCount (2) cannot be satisfied: 0 scheduled, 1 remaining",
    ]

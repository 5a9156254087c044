"""The simulated scheduler's upstream-preemption mode: kube-scheduler's DefaultPreemption, for
shadow mode to compare with.

Scenarios (one pass at a time, on the store, no server):
- off by default: a pod that fits nowhere is only marked Unschedulable, nothing is deleted
  and no Event written;
- on: the planner's victims are marked DisruptionTarget (PreemptionByScheduler) and deleted
  gracefully, the preemptor is nominated to the planner's node and marked Unschedulable,
  and each victim carries upstream's core/v1 `Preempted` Event (type Normal, reporting
  component default-scheduler, `Preempted by pod <uid> on node <node>`, related to the
  preemptor), exactly one per victim;
- the next pass preempts nothing more (the victims terminating on the nominated node make
  it ineligible), and once they are gone the preemptor is bound to that node;
- with a preemption delay, the first pass only marks the pod Unschedulable, and a pass
  after the delay preempts.
"""

from __future__ import annotations

from typing import Any

from preemptctl.emulator import Emulator
from preemptctl.emulator.resources import EVENTS
from preemptctl.emulator.simulation import SimulatedScheduler
from tests.support.emulator import as_list, node, pod


def _cluster(**options: Any) -> tuple[Emulator, SimulatedScheduler]:
    emulator = Emulator()
    emulator.load(
        as_list(
            node("n1", cpu="1"),
            pod("low-a", node_name="n1", cpu="500m", priority=10, uid="uid-low-a"),
            pod("low-b", node_name="n1", cpu="500m", priority=20, uid="uid-low-b"),
            pod("urgent", cpu="1", priority=1000, uid="uid-urgent"),
        )
    )
    return emulator, SimulatedScheduler(emulator.store, **options)


def _stored(emulator: Emulator, key: str) -> dict[str, Any]:
    found = emulator.pod(key)
    assert found is not None, key
    return found


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for condition in obj["status"].get("conditions") or ():
        if condition["type"] == kind:
            found: dict[str, Any] = condition
            return found
    return None


def test_by_default_the_scheduler_never_preempts() -> None:
    emulator, scheduler = _cluster()
    scheduler.schedule_pass()
    assert not _stored(emulator, "default/low-a")["metadata"].get("deletionTimestamp")
    assert emulator.store.objects(EVENTS) == []
    assert _condition(_stored(emulator, "default/urgent"), "PodScheduled") is not None


def test_upstream_mode_marks_deletes_nominates_and_records_as_upstream() -> None:
    emulator, scheduler = _cluster(preemption=True)
    scheduler.schedule_pass()
    for victim in ("low-a", "low-b"):
        stored = _stored(emulator, f"default/{victim}")
        assert stored["metadata"].get("deletionTimestamp")
        target = _condition(stored, "DisruptionTarget")
        assert target is not None
        assert (target["status"], target["reason"]) == ("True", "PreemptionByScheduler")
    urgent = _stored(emulator, "default/urgent")
    assert urgent["status"]["nominatedNodeName"] == "n1"
    scheduled = _condition(urgent, "PodScheduled")
    assert scheduled is not None and scheduled["reason"] == "Unschedulable"
    events = sorted(emulator.store.objects(EVENTS), key=lambda e: e["involvedObject"]["name"])
    assert [
        (
            e["involvedObject"]["name"],
            e["involvedObject"]["uid"],
            e["reason"],
            e["type"],
            e["reportingComponent"],
            e["message"],
            e["related"]["uid"],
        )
        for e in events
    ] == [
        (
            "low-a",
            "uid-low-a",
            "Preempted",
            "Normal",
            "default-scheduler",
            "Preempted by pod uid-urgent on node n1",
            "uid-urgent",
        ),
        (
            "low-b",
            "uid-low-b",
            "Preempted",
            "Normal",
            "default-scheduler",
            "Preempted by pod uid-urgent on node n1",
            "uid-urgent",
        ),
    ]


def test_the_next_pass_waits_for_the_victims_then_binds_to_the_nominated_node() -> None:
    emulator, scheduler = _cluster(preemption=True)
    scheduler.schedule_pass()
    scheduler.schedule_pass()
    assert len(emulator.store.objects(EVENTS)) == 2
    emulator.finalize("default/low-a")
    emulator.finalize("default/low-b")
    scheduler.schedule_pass()
    assert _stored(emulator, "default/urgent")["spec"]["nodeName"] == "n1"
    assert len(emulator.store.objects(EVENTS)) == 2


def test_with_a_delay_the_first_pass_only_marks_the_pod_unschedulable() -> None:
    now = [100.0]
    emulator, scheduler = _cluster(preemption=True, preemption_delay=5.0, clock=lambda: now[0])
    scheduler.schedule_pass()
    assert emulator.store.objects(EVENTS) == []
    assert not _stored(emulator, "default/low-a")["metadata"].get("deletionTimestamp")
    assert "nominatedNodeName" not in _stored(emulator, "default/urgent")["status"]
    now[0] += 5.0
    scheduler.schedule_pass()
    assert len(emulator.store.objects(EVENTS)) == 2
    assert _stored(emulator, "default/urgent")["status"]["nominatedNodeName"] == "n1"

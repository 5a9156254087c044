"""The Preempted event on a victim, and on a victim PodGroup.

Scenarios:
- the event is an events.k8s.io/v1 Event with upstream's reason, action, type and note
  (the preemptor named by namespace/name before its UID, where upstream names the UID
  alone), regarding the victim and related to the preemptor, reported by preemptctl and
  the worker;
- its eventTime has microseconds, as the API's MicroTime requires;
- a retried call that already recorded it is unchanged, and one event exists;
- any event about a pod is recorded once per key: a Warning by default, a Normal one when
  asked, a new key a new event;
- an event about a PodGroup regards the PodGroup (scheduling.k8s.io/v1beta1), once per key;
- a group preemption's victim is told in upstream's workload-aware words ("Preempted by
  podgroup <ns>/<name> (uid <uid>) on node <node>"), related to the PodGroup; a group a
  label names has no object, and its victims' events relate to nothing;
- a victim PodGroup's note names its preemptor (a pod or a pod group) by namespace/name and
  UID, counts the group's pods preempted and names the first ten, each on its node.
"""

from __future__ import annotations

import re

from preemptctl.emulator import Emulator
from preemptctl.emulator.resources import EVENTS_V1
from preemptctl.kube.client import KubeClient
from preemptctl.kube.events import (
    ObjectRef,
    pod_group_preempted_note,
    record_event,
    record_pod_event,
    record_preempted,
    record_preempted_by_group,
)
from preemptctl.kube.results import WriteEffect
from preemptctl.preemption.decision import PodRef
from preemptctl.preemption.group_decision import GroupRef, label_group_uid

VICTIM = PodRef("default", "web-1", "victim-uid")
PREEMPTOR = PodRef("batch", "urgent", "preemptor-uid")


def test_event_is_recorded_as_upstream_records_it(kube: KubeClient, emulator: Emulator) -> None:
    outcome = record_preempted(kube, VICTIM, PREEMPTOR, "n1", "worker-7")
    assert outcome.effect is WriteEffect.DONE
    [event] = emulator.store.objects(EVENTS_V1, "default")
    assert {
        key: event[key]
        for key in ("reason", "action", "type", "note", "reportingController", "reportingInstance")
    } == {
        "reason": "Preempted",
        "action": "Preempting",
        "type": "Normal",
        "note": "Preempted by pod batch/urgent (uid preemptor-uid) on node n1",
        "reportingController": "preemptctl",
        "reportingInstance": "worker-7",
    }
    assert event["regarding"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "default",
        "name": "web-1",
        "uid": "victim-uid",
    }
    assert event["related"]["uid"] == "preemptor-uid"


def test_event_time_has_microseconds(kube: KubeClient, emulator: Emulator) -> None:
    record_preempted(kube, VICTIM, PREEMPTOR, "n1", "worker-7")
    [event] = emulator.store.objects(EVENTS_V1, "default")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", event["eventTime"])


def test_retried_recording_is_unchanged(kube: KubeClient, emulator: Emulator) -> None:
    record_preempted(kube, VICTIM, PREEMPTOR, "n1", "worker-7")
    again = record_preempted(kube, VICTIM, PREEMPTOR, "n1", "worker-8")
    assert again.effect is WriteEffect.UNCHANGED
    assert len(emulator.store.objects(EVENTS_V1, "default")) == 1


def test_an_event_about_a_pod_is_recorded_once_per_key(
    kube: KubeClient, emulator: Emulator
) -> None:
    failed = ("PreemptionFailed", "run-1")
    first = record_pod_event(kube, PREEMPTOR, "PreemptionFailed", "why", "w", key=failed)
    again = record_pod_event(kube, PREEMPTOR, "PreemptionFailed", "why", "w", key=failed)
    other = record_pod_event(
        kube, PREEMPTOR, "Preempting", "2 pod(s)", "w", key=("Preempting", "run-1"), normal=True
    )
    assert [r.effect for r in (first, again, other)] == [
        WriteEffect.DONE,
        WriteEffect.UNCHANGED,
        WriteEffect.DONE,
    ]
    events = sorted(emulator.store.objects(EVENTS_V1, "batch"), key=lambda e: e["reason"])
    assert [(e["reason"], e["type"], e["note"]) for e in events] == [
        ("Preempting", "Normal", "2 pod(s)"),
        ("PreemptionFailed", "Warning", "why"),
    ]
    assert "related" not in events[1]


TRAIN_A = GroupRef("ml", "train-a", "group-uid", 1000)


def test_an_event_about_a_pod_group_regards_the_pod_group(
    kube: KubeClient, emulator: Emulator
) -> None:
    key = ("Preempting", "run-1")
    regarding = ObjectRef.pod_group(TRAIN_A)
    first = record_event(kube, regarding, "Preempting", "6 victims", "w", key=key, normal=True)
    again = record_event(kube, regarding, "Preempting", "6 victims", "w", key=key, normal=True)
    assert [first.effect, again.effect] == [WriteEffect.DONE, WriteEffect.UNCHANGED]
    [event] = emulator.store.objects(EVENTS_V1, "ml")
    assert event["regarding"] == {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "namespace": "ml",
        "name": "train-a",
        "uid": "group-uid",
    }
    assert (event["type"], event["note"]) == ("Normal", "6 victims")


def test_a_group_preemptions_victim_is_told_as_upstream_tells_it(
    kube: KubeClient, emulator: Emulator
) -> None:
    victim = PodRef("ml", "train-b-0", "victim-uid")
    record_preempted_by_group(kube, victim, TRAIN_A, "n1", "worker-7")
    [event] = emulator.store.objects(EVENTS_V1, "ml")
    assert (event["reason"], event["note"]) == (
        "Preempted",
        "Preempted by podgroup ml/train-a (uid group-uid) on node n1",
    )
    assert event["regarding"]["uid"] == "victim-uid"
    assert (event["related"]["kind"], event["related"]["uid"]) == ("PodGroup", "group-uid")


def test_a_label_named_groups_victim_event_relates_to_nothing(
    kube: KubeClient, emulator: Emulator
) -> None:
    group = GroupRef("ml", "job-7", label_group_uid("ml", "job-7"))
    record_preempted_by_group(kube, PodRef("ml", "web-1", "victim-uid"), group, "n1", "w")
    [event] = emulator.store.objects(EVENTS_V1, "ml")
    assert "related" not in event


def test_a_victim_pod_groups_note_names_its_preemptor_and_counts_its_pods() -> None:
    taken = [(PodRef("ml", f"train-b-{i}", f"uid-{i}"), f"node-{i}") for i in range(12)]
    by_pod = pod_group_preempted_note(ObjectRef.pod(PREEMPTOR), taken[:2])
    by_group = pod_group_preempted_note(ObjectRef.pod_group(TRAIN_A), taken)
    assert by_pod == (
        "Preempted by pod batch/urgent (uid preemptor-uid): 2 of its pods, "
        "train-b-0 on node-0, train-b-1 on node-1"
    )
    assert by_group == (
        "Preempted by podgroup ml/train-a (uid group-uid): 12 of its pods, "
        + ", ".join(f"train-b-{i} on node-{i}" for i in range(10))
        + " and 2 more"
    )

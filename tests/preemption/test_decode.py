"""Decoding a pod: each field of the manifest lands in the field of `Pod` that names it.

`decode_pod` builds `Pod` positionally (a microsecond a pod at 150,000 pods), so a field
added to `Pod` out of order, or two fields of one type swapped, would type-check and decode
wrongly. Every field here has a value of its own, so a swap shows.

Scenarios:
- a pod with every field set decodes each into its own named field (its pod group and the
  annotations a setting asks for included);
- only the annotations a setting reads are kept, none by default;
- each of the flags (terminating, disrupted by the scheduler, unschedulable, static or
  mirror) is set alone by its own part of the manifest;
- `Pod` has the fields `decode_pod` passes, in that order (a new field fails here until the
  decoder passes it too).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from preemptctl.preemption.decode import decode_pod
from preemptctl.preemption.objects import Pod

MANIFEST = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "namespace": "ns-a",
        "name": "pod-b",
        "uid": "uid-c",
        "resourceVersion": "rv-d",
        "labels": {"app": "e"},
        "deletionTimestamp": "2026-11-24T10:00:00Z",
        "annotations": {"kubernetes.io/config.source": "file", "example.com/size": "n"},
    },
    "spec": {
        "priority": 7,
        "priorityClassName": "class-f",
        "preemptionPolicy": "Never",
        "schedulerName": "scheduler-g",
        "nodeName": "node-h",
        "nodeSelector": {"zone": "i"},
        "containers": [
            {
                "name": "c",
                "resources": {"requests": {"cpu": "250m"}, "limits": {"cpu": "500m"}},
                "ports": [{"containerPort": 80, "hostPort": 8080}],
            }
        ],
        "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
        "schedulingGroup": {"podGroupName": "group-m"},
    },
    "status": {
        "phase": "Running",
        "reason": "reason-j",
        "nominatedNodeName": "node-k",
        "startTime": "2026-11-24T09:00:00Z",
        "conditions": [
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"},
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "message-l",
            },
        ],
    },
}

DECODED_IN_ORDER = (
    "namespace",
    "name",
    "uid",
    "priority",
    "requests",
    "node_name",
    "nominated_node_name",
    "start_time",
    "labels",
    "host_ports",
    "preemption_policy",
    "scheduler_name",
    "phase",
    "status_reason",
    "terminating",
    "disrupted_by_scheduler",
    "unschedulable",
    "qos_class",
    "static_or_mirror",
    "tolerations",
    "node_selector",
    "required_affinity",
    "priority_class_name",
    "resource_version",
    "pod_affinity",
    "pod_anti_affinity",
    "spread_constraints",
    "unsupported",
    "scheduler_message",
    "claims",
    "inline_csi",
    "group",
    "spec_priority",
    "annotations",
    "over_cap",
)


def test_every_field_lands_in_the_field_that_names_it() -> None:
    pod = decode_pod(MANIFEST, kept_annotations=("example.com/size",))
    assert (pod.namespace, pod.name, pod.uid, pod.resource_version) == (
        "ns-a",
        "pod-b",
        "uid-c",
        "rv-d",
    )
    assert (pod.priority, pod.priority_class_name, pod.preemption_policy) == (
        7,
        "class-f",
        "Never",
    )
    assert (pod.scheduler_name, pod.node_name, pod.nominated_node_name) == (
        "scheduler-g",
        "node-h",
        "node-k",
    )
    assert (pod.phase, pod.status_reason, pod.scheduler_message) == (
        "Running",
        "reason-j",
        "message-l",
    )
    assert dict(pod.labels) == {"app": "e"}
    assert pod.node_selector == (("zone", "i"),)
    assert (pod.terminating, pod.disrupted_by_scheduler, pod.unschedulable) == (True, True, True)
    assert pod.static_or_mirror is True
    assert pod.qos_class == "Burstable"
    assert pod.start_time is not None
    assert [port.port for port in pod.host_ports] == [8080]
    assert [toleration.key for toleration in pod.tolerations] == ["k"]
    assert pod.requests.milli_cpu == 250
    assert (pod.group, pod.spec_priority, dict(pod.annotations)) == (
        "group-m",
        None,
        {"example.com/size": "n"},
    )


def test_only_the_annotations_a_setting_reads_are_kept() -> None:
    assert dict(decode_pod(MANIFEST).annotations) == {}


def _only(flag: str) -> dict[str, Any]:
    manifest = copy.deepcopy(MANIFEST)
    meta, status = manifest["metadata"], manifest["status"]
    if flag != "terminating":
        del meta["deletionTimestamp"]
    if flag != "static_or_mirror":
        del meta["annotations"]
    status["conditions"] = [
        condition
        for condition in status["conditions"]
        if (condition["type"], flag)
        in {("DisruptionTarget", "disrupted_by_scheduler"), ("PodScheduled", "unschedulable")}
    ]
    return manifest


@pytest.mark.parametrize(
    "flag", ["terminating", "disrupted_by_scheduler", "unschedulable", "static_or_mirror"]
)
def test_each_flag_is_set_alone_by_its_own_part_of_the_manifest(flag: str) -> None:
    pod = decode_pod(_only(flag))
    flags = ("terminating", "disrupted_by_scheduler", "unschedulable", "static_or_mirror")
    assert {name: getattr(pod, name) for name in flags} == {name: name == flag for name in flags}


def test_pod_has_the_fields_the_decoder_passes_in_that_order() -> None:
    assert tuple(field.name for field in dataclasses.fields(Pod)) == DECODED_IN_ORDER

"""Decoding PodGroups and CompositePodGroups in each shape a served API version gives them.

Scenarios:
- a `v1beta1` PodGroup (Kubernetes 1.37): `disruptionMode` `{all: {}}` or `{single: {}}`
  (absent: single), its preemption policy and its parent CompositePodGroup;
- a `v1alpha2` PodGroup (Kubernetes 1.36) as its API server returns it (here as a real
  kube-apiserver v1.36.2 answered a list: no kind or apiVersion on the item,
  `podGroupTemplateRef: null`, `disruptionMode: "Pod"` by default): `"PodGroup"` is all,
  `"Pod"` single, any other string an error naming the object;
- a `v1alpha3` CompositePodGroup: priority, disruption mode and parent; a string
  `disruptionMode` (a v1alpha2 PodGroup's form) is an error there;
- a parent whose name the API server would refuse is an input error naming the object.
"""

from __future__ import annotations

from typing import Any

import pytest

from preemptctl.preemption.decode import decode_composite_pod_group, decode_pod_group
from preemptctl.preemption.errors import PlannerInputError
from preemptctl.preemption.snapshot import ClusterSnapshot
from tests.preemption.builders import composite_pod_group, listing, pod_group

Json = dict[str, Any]


def v1alpha2(spec: Json) -> Json:
    """A PodGroup item of a `scheduling.k8s.io/v1alpha2` list, as kube-apiserver v1.36.2
    returns it (no kind or apiVersion on list items)."""
    return {
        "metadata": {"name": "g1", "namespace": "default", "uid": "u-1", "resourceVersion": "7"},
        "spec": {"podGroupTemplateRef": None, **spec},
        "status": {},
    }


@pytest.mark.parametrize(
    ("mode", "want"), [({"all": {}}, True), ({"single": {}}, False), (None, False)]
)
def test_a_v1beta1_disruption_mode_is_an_object(mode: Json | None, want: bool) -> None:
    made = pod_group("g1", priority=5, min_count=2)
    if mode is None:
        del made["spec"]["disruptionMode"]
    else:
        made["spec"]["disruptionMode"] = mode
    assert decode_pod_group(made).disruption_all is want


def test_a_v1beta1_pod_group_names_its_parent_and_policy() -> None:
    group = decode_pod_group(pod_group("g1", parent="train", preemption_policy="Never"))
    assert (group.parent, group.preemption_policy) == ("train", "Never")


@pytest.mark.parametrize(("mode", "want"), [("PodGroup", True), ("Pod", False)])
def test_a_v1alpha2_disruption_mode_is_a_string(mode: str, want: bool) -> None:
    group = decode_pod_group(
        v1alpha2(
            {"schedulingPolicy": {"gang": {"minCount": 2}}, "disruptionMode": mode, "priority": 7}
        )
    )
    assert (group.disruption_all, group.gang, group.min_count, group.priority) == (
        want,
        True,
        2,
        7,
    )
    assert (group.parent, group.preemption_policy) == ("", "")


def test_a_v1alpha2_list_reads_into_a_snapshot() -> None:
    document = {
        "kind": "PodGroupList",
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "metadata": {"resourceVersion": "9"},
        "items": [v1alpha2({"schedulingPolicy": {"basic": {}}, "disruptionMode": "PodGroup"})],
    }
    built = ClusterSnapshot.from_list(document)
    assert built.pod_groups["default/g1"].disruption_all is True


def test_an_unknown_v1alpha2_disruption_mode_names_the_group() -> None:
    with pytest.raises(PlannerInputError, match=r"podgroup default/g1: spec\.disruptionMode must"):
        decode_pod_group(v1alpha2({"schedulingPolicy": {"basic": {}}, "disruptionMode": "All"}))


def test_a_composite_pod_group_reads_priority_mode_and_parent() -> None:
    group = decode_composite_pod_group(
        composite_pod_group("mid", priority=40, disruption="all", parent="root")
    )
    assert (group.key, group.priority, group.disruption_all, group.parent) == (
        "default/mid",
        40,
        True,
        "root",
    )


def test_a_composite_pod_group_has_no_string_disruption_mode() -> None:
    made = composite_pod_group("mid")
    made["spec"]["disruptionMode"] = "PodGroup"
    with pytest.raises(PlannerInputError, match=r"compositepodgroup default/mid: spec\.disruption"):
        decode_composite_pod_group(made)


@pytest.mark.parametrize("kind", ["PodGroup", "CompositePodGroup"])
def test_a_parent_the_api_server_would_refuse_is_an_input_error(kind: str) -> None:
    made = pod_group("g1", parent="..") if kind == "PodGroup" else composite_pod_group("g1")
    made["spec"]["parentCompositePodGroupName"] = ".."
    with pytest.raises(PlannerInputError, match=r"parentCompositePodGroupName: pod group name"):
        ClusterSnapshot.from_list(listing(made))

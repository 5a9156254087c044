"""Patches: strategic merge, JSON merge and JSON patch, on pods and their status.

Scenarios:
- a strategic merge patch of status.conditions adds a condition and keeps the others;
- a strategic merge patch of a condition of an existing type replaces that one in place;
- `$patch: delete` removes one condition by type;
- a JSON merge patch replaces the conditions list wholesale;
- a JSON merge patch with null removes a label; a strategic one merges labels;
- a JSON patch (RFC 6902) applies its operations, and a failed `test` is a 422;
- a patch carrying a stale metadata.resourceVersion is a 409 Conflict.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from preemptctl.emulator import Emulator
from tests.support.emulator import pod

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


@pytest.fixture
def ready_pod(emulator: Emulator) -> dict[str, Any]:
    loaded = pod("web", node_name="n1", labels={"app": "web", "tier": "front"})
    loaded["status"]["conditions"] = [
        {"type": "Ready", "status": "True"},
        {"type": "PodScheduled", "status": "True"},
    ]
    emulator.load(loaded)
    stored = emulator.pod("default/web")
    assert stored is not None
    return stored


def _conditions(emulator: Emulator) -> list[dict[str, Any]]:
    stored = emulator.pod("default/web")
    assert stored is not None
    conditions: list[dict[str, Any]] = stored["status"]["conditions"]
    return conditions


@pytest.mark.usefixtures("ready_pod")
def test_strategic_patch_adds_a_condition_and_keeps_the_others(
    core: Any, emulator: Emulator
) -> None:
    core.patch_namespaced_pod_status(
        "web",
        "default",
        {"status": {"conditions": [{"type": "DisruptionTarget", "status": "True"}]}},
        _content_type=STRATEGIC,
    )
    assert [c["type"] for c in _conditions(emulator)] == [
        "Ready",
        "PodScheduled",
        "DisruptionTarget",
    ]


@pytest.mark.usefixtures("ready_pod")
def test_strategic_patch_merges_a_condition_by_type(core: Any, emulator: Emulator) -> None:
    core.patch_namespaced_pod_status(
        "web",
        "default",
        {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Probe"}]}},
        _content_type=STRATEGIC,
    )
    assert _conditions(emulator)[0] == {"type": "Ready", "status": "False", "reason": "Probe"}
    assert len(_conditions(emulator)) == 2


@pytest.mark.usefixtures("ready_pod")
def test_strategic_patch_delete_directive_removes_by_type(core: Any, emulator: Emulator) -> None:
    core.patch_namespaced_pod_status(
        "web",
        "default",
        {"status": {"conditions": [{"type": "Ready", "$patch": "delete"}]}},
        _content_type=STRATEGIC,
    )
    assert [c["type"] for c in _conditions(emulator)] == ["PodScheduled"]


@pytest.mark.usefixtures("ready_pod")
def test_merge_patch_replaces_the_conditions_list(core: Any, emulator: Emulator) -> None:
    core.patch_namespaced_pod_status(
        "web",
        "default",
        {"status": {"conditions": [{"type": "X", "status": "True"}]}},
        _content_type=MERGE,
    )
    assert _conditions(emulator) == [{"type": "X", "status": "True"}]


@pytest.mark.usefixtures("ready_pod")
def test_merge_patch_null_removes_a_label(core: Any) -> None:
    patched = core.patch_namespaced_pod(
        "web", "default", {"metadata": {"labels": {"tier": None}}}, _content_type=MERGE
    )
    assert patched.metadata.labels == {"app": "web"}


@pytest.mark.usefixtures("ready_pod")
def test_strategic_patch_merges_labels(core: Any) -> None:
    patched = core.patch_namespaced_pod("web", "default", {"metadata": {"labels": {"x": "y"}}})
    assert patched.metadata.labels == {"app": "web", "tier": "front", "x": "y"}


@pytest.mark.usefixtures("ready_pod")
def test_json_patch_applies_operations(core: Any) -> None:
    patched = core.patch_namespaced_pod(
        "web",
        "default",
        [
            {"op": "add", "path": "/metadata/labels/x", "value": "y"},
            {"op": "remove", "path": "/metadata/labels/tier"},
        ],
    )
    assert patched.metadata.labels == {"app": "web", "x": "y"}


@pytest.mark.usefixtures("ready_pod")
def test_json_patch_failed_test_is_invalid(core: Any) -> None:
    with pytest.raises(ApiException) as raised:
        core.patch_namespaced_pod(
            "web", "default", [{"op": "test", "path": "/metadata/labels/app", "value": "db"}]
        )
    assert raised.value.status == 422


def test_patch_with_stale_resource_version_conflicts(
    core: Any, emulator: Emulator, ready_pod: dict[str, Any]
) -> None:
    stale = ready_pod["metadata"]["resourceVersion"]
    core.patch_namespaced_pod("web", "default", {"metadata": {"labels": {"x": "1"}}})
    with pytest.raises(ApiException) as raised:
        core.patch_namespaced_pod_status(
            "web",
            "default",
            {"metadata": {"resourceVersion": stale}, "status": {"nominatedNodeName": "n2"}},
            _content_type=MERGE,
        )
    assert raised.value.status == 409
    assert "the object has been modified" in raised.value.body

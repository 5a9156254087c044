"""Objects and resourceVersion, through the official client.

Scenarios:
- a created pod gets a uid, a creation timestamp, a resourceVersion and phase Pending;
- every write raises the object's resourceVersion, and a list carries the current one;
- a missing pod is a 404 NotFound worded as the API server words it;
- creating a pod whose name is taken is a 409 AlreadyExists;
- an update carrying a stale resourceVersion is a 409 Conflict ("the object has been modified");
- the status subresource changes status only, and the main resource cannot change status;
- nodes, namespaces, core/v1 events, events.k8s.io/v1 events and policy/v1 PDBs are served;
- a path the emulator does not serve is a 404 with a Status body.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from preemptctl.emulator import Emulator
from tests.support.emulator import node, pdb, pod


def _status(error: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(error.body)
    return body


def test_created_pod_gets_identity_and_pending_phase(core: Any) -> None:
    created = core.create_namespaced_pod(
        "default", {"metadata": {"name": "web"}, "spec": {"containers": [{"name": "c"}]}}
    )
    assert created.metadata.uid
    assert created.metadata.creation_timestamp is not None
    assert int(created.metadata.resource_version) > 0
    assert created.status.phase == "Pending"


def test_every_write_raises_the_resource_version(core: Any, emulator: Emulator) -> None:
    emulator.load(pod("web"))
    first = core.read_namespaced_pod("web", "default").metadata.resource_version
    core.patch_namespaced_pod("web", "default", {"metadata": {"labels": {"a": "b"}}})
    second = core.read_namespaced_pod("web", "default").metadata.resource_version
    listed = core.list_namespaced_pod("default").metadata.resource_version
    assert int(first) < int(second) == int(listed)


def test_missing_pod_is_not_found(core: Any) -> None:
    with pytest.raises(ApiException) as raised:
        core.read_namespaced_pod("ghost", "default")
    assert raised.value.status == 404
    assert _status(raised.value)["message"] == 'pods "ghost" not found'
    assert _status(raised.value)["reason"] == "NotFound"


def test_creating_a_taken_name_is_already_exists(core: Any, emulator: Emulator) -> None:
    emulator.load(pod("web"))
    with pytest.raises(ApiException) as raised:
        core.create_namespaced_pod("default", {"metadata": {"name": "web"}})
    assert raised.value.status == 409
    assert _status(raised.value)["reason"] == "AlreadyExists"
    assert _status(raised.value)["message"] == 'pods "web" already exists'


def test_update_with_stale_resource_version_conflicts(core: Any, emulator: Emulator) -> None:
    emulator.load(pod("web"))
    stale = core.read_namespaced_pod("web", "default")
    core.patch_namespaced_pod("web", "default", {"metadata": {"labels": {"a": "b"}}})
    with pytest.raises(ApiException) as raised:
        core.replace_namespaced_pod("web", "default", stale)
    assert raised.value.status == 409
    assert _status(raised.value)["message"] == (
        'Operation cannot be fulfilled on pods "web": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )


def test_status_subresource_changes_only_status(core: Any, emulator: Emulator) -> None:
    emulator.load(pod("web", labels={"app": "a"}))
    core.patch_namespaced_pod_status(
        "web",
        "default",
        {"metadata": {"labels": {"app": "changed"}}, "status": {"phase": "Running"}},
    )
    stored = emulator.pod("default/web")
    assert stored is not None
    assert stored["status"]["phase"] == "Running"
    assert stored["metadata"]["labels"] == {"app": "a"}


def test_main_resource_cannot_change_status(core: Any, emulator: Emulator) -> None:
    emulator.load(pod("web", phase="Pending"))
    core.patch_namespaced_pod("web", "default", {"status": {"phase": "Failed"}})
    stored = emulator.pod("default/web")
    assert stored is not None
    assert stored["status"]["phase"] == "Pending"


def test_nodes_namespaces_and_pdbs_are_served(core: Any, policy: Any, emulator: Emulator) -> None:
    emulator.load(node("n1"))
    emulator.load(pdb("budget", match_labels={"app": "a"}, disruptions_allowed=1))
    core.create_namespace({"metadata": {"name": "team-a"}})
    assert [n.metadata.name for n in core.list_node().items] == ["n1"]
    assert core.read_namespace("team-a").metadata.name == "team-a"
    budget = policy.read_namespaced_pod_disruption_budget("budget", "default")
    assert budget.status.disruptions_allowed == 1


def test_core_and_events_api_events_are_served(core: Any, api_client: Any) -> None:
    core.create_namespaced_event(
        "default",
        {
            "metadata": {"name": "e1"},
            "involvedObject": {"kind": "Pod", "name": "web"},
            "reason": "Started",
        },
    )
    events = client.EventsV1Api(api_client)
    events.create_namespaced_event(
        "default",
        {
            "metadata": {"name": "e2"},
            "eventTime": "2026-01-01T00:00:00.000001Z",
            "reportingController": "x",
            "reportingInstance": "y",
            "action": "A",
            "reason": "R",
            "type": "Normal",
        },
    )
    # One storage, as on a real server: an events.k8s.io Event is listed by core/v1 as well
    # (converted: `note` is `message`, `regarding` is `involvedObject`).
    assert [e.metadata.name for e in core.list_namespaced_event("default").items] == ["e1", "e2"]
    assert [e.metadata.name for e in events.list_namespaced_event("default").items] == ["e2"]
    twin = core.read_namespaced_event("e2", "default")
    assert (twin.reason, twin.source.component, twin.count) == ("R", "x", 1)


def test_unserved_path_is_not_found_with_status_body(api_client: Any) -> None:
    with pytest.raises(ApiException) as raised:
        client.AppsV1Api(api_client).list_namespaced_deployment("default")
    assert raised.value.status == 404
    assert _status(raised.value)["kind"] == "Status"

"""The `pods/binding` subresource, over HTTP with the official client.

Scenarios:
- a binding sets spec.nodeName and PodScheduled=True (a failure's reason and message go)
  and answers 201 with a Success Status;
- it changes nothing else: the nomination and the other conditions stay;
- it is one change, seen by a watch as one MODIFIED event;
- binding a pod already assigned is a 409 Conflict worded as the API server's `assignPod`;
- binding a pod that does not exist is a 404;
- a Binding whose name is not the URL's is a 400;
- the request is `create` on `pods/binding`, in the request log and for fault rules;
- any other verb on the subresource is a 405.

The client's `create_namespaced_pod_binding` cannot deserialize the server's answer (a
`Status`, not a `Binding`; kubernetes-client/python#547), so these calls ask for the raw
response with `_preload_content=False`, as client code that binds has to.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from preemptctl.emulator import Emulator
from preemptctl.emulator.resources import PODS
from tests.support.emulator import as_list, node, pod


def _binding(name: str, node_name: str) -> Any:
    return client.V1Binding(
        metadata=client.V1ObjectMeta(name=name),
        target=client.V1ObjectReference(api_version="v1", kind="Node", name=node_name),
    )


def _bind(core: Any, name: str, node_name: str) -> Any:
    return core.create_namespaced_pod_binding(
        name, "default", _binding(name, node_name), _preload_content=False
    )


def _unschedulable_pod(name: str, **options: Any) -> dict[str, Any]:
    pending = pod(name, **options)
    pending["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/1 nodes are available: 1 Insufficient cpu.",
        },
        {"type": "Example", "status": "True"},
    ]
    return pending


def test_binding_sets_node_name_and_pod_scheduled(core: Any, emulator: Emulator) -> None:
    emulator.load(as_list(node("n1"), _unschedulable_pod("web")))
    answer = _bind(core, "web", "n1")
    assert answer.status == 201
    assert json.loads(answer.data)["status"] == "Success"
    stored = emulator.pod("default/web")
    assert stored is not None
    assert stored["spec"]["nodeName"] == "n1"
    scheduled = [c for c in stored["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert len(scheduled) == 1
    assert scheduled[0]["status"] == "True"
    assert "reason" not in scheduled[0] and "message" not in scheduled[0]


def test_binding_changes_nothing_else(core: Any, emulator: Emulator) -> None:
    emulator.load(as_list(node("n1"), _unschedulable_pod("web", nominated_node="n1")))
    before = emulator.pod("default/web")
    assert before is not None
    _bind(core, "web", "n1")
    after = emulator.pod("default/web")
    assert after is not None
    assert after["status"]["nominatedNodeName"] == "n1"
    assert after["status"]["phase"] == "Pending"
    assert {"type": "Example", "status": "True"} in after["status"]["conditions"]
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert {k: v for k, v in after["spec"].items() if k != "nodeName"} == before["spec"]


def test_binding_is_one_modified_event(core: Any, emulator: Emulator) -> None:
    emulator.load(as_list(node("n1"), pod("web")))
    since = emulator.store.revision
    _bind(core, "web", "n1")
    watcher, backlog = emulator.store.watch(PODS, since)
    emulator.store.unwatch(watcher)
    assert [(event.type, event.obj["spec"].get("nodeName")) for event in backlog] == [
        ("MODIFIED", "n1")
    ]


def test_binding_an_assigned_pod_is_a_conflict(core: Any, emulator: Emulator) -> None:
    emulator.load(as_list(node("n1"), node("n2"), pod("web")))
    _bind(core, "web", "n1")
    with pytest.raises(ApiException) as raised:
        _bind(core, "web", "n2")
    assert raised.value.status == 409
    body = json.loads(raised.value.body or "null")
    assert body["reason"] == "Conflict"
    assert body["message"] == (
        'Operation cannot be fulfilled on pods/binding "web": '
        'pod web is already assigned to node "n1"'
    )
    stored = emulator.pod("default/web")
    assert stored is not None and stored["spec"]["nodeName"] == "n1"


def test_binding_a_missing_pod_is_not_found(core: Any, emulator: Emulator) -> None:
    emulator.load(as_list(node("n1")))
    with pytest.raises(ApiException) as raised:
        _bind(core, "ghost", "n1")
    assert raised.value.status == 404
    assert json.loads(raised.value.body or "null")["message"] == 'pods "ghost" not found'


def test_binding_named_for_another_pod_is_a_bad_request(core: Any, emulator: Emulator) -> None:
    emulator.load(as_list(node("n1"), pod("web"), pod("db")))
    with pytest.raises(ApiException) as raised:
        core.create_namespaced_pod_binding(
            "web", "default", _binding("db", "n1"), _preload_content=False
        )
    assert raised.value.status == 400
    stored = emulator.pod("default/web")
    assert stored is not None and "nodeName" not in stored["spec"]


def test_binding_is_create_on_pods_binding(core: Any, emulator: Emulator) -> None:
    emulator.load(as_list(node("n1"), pod("web")))
    emulator.faults.fail("create", "pods/binding", 503, times=1)
    with pytest.raises(ApiException) as raised:
        _bind(core, "web", "n1")
    assert raised.value.status == 503
    _bind(core, "web", "n1")
    assert [r.code for r in emulator.requests.matching("create", "pods/binding", "web")] == [
        503,
        201,
    ]


def test_other_verbs_on_binding_are_not_allowed(emulator: Emulator) -> None:
    emulator.load(as_list(node("n1"), pod("web")))
    url = f"{emulator.base_url}/api/v1/namespaces/default/pods/web/binding"
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(url, timeout=5)
    assert raised.value.code == 405
    raised.value.close()

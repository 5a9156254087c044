"""Server-side apply (`application/apply-patch+yaml`) on a pod's status subresource.

Scenarios:
- an apply adds a condition, keeps the others, and records managedFields for its manager
  (operation Apply, subresource status, the condition owned by its key);
- a YAML body is accepted as well as JSON;
- an apply without a fieldManager is a 400;
- another manager applying a different value to an owned field is a 409 Conflict naming
  the owner; with force=true it takes the field over;
- a manager that stops applying a condition removes it; one still owned by another manager
  stays;
- an apply that changes nothing stores nothing: the same resourceVersion, no watch event (as
  kube-apiserver; a merge patch likewise);
- an applied object naming another UID is refused as kube-apiserver refuses it: 422 Invalid,
  `metadata.uid` immutable (not the 409 of a delete precondition).
"""

from __future__ import annotations

from typing import Any

import pytest

from preemptctl.emulator import Emulator
from preemptctl.emulator.resources import PODS
from preemptctl.emulator.status import ApiError
from tests.support.emulator import pod

APPLY = "application/apply-patch+yaml"


@pytest.fixture
def uid(emulator: Emulator) -> str:
    loaded = pod("web", node_name="n1")
    loaded["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    emulator.load(loaded)
    stored = emulator.pod("default/web")
    assert stored is not None
    return str(stored["metadata"]["uid"])


def condition(reason: str, message: str = "m") -> dict[str, Any]:
    return {"type": "DisruptionTarget", "status": "True", "reason": reason, "message": message}


def apply(
    emulator: Emulator,
    conditions: list[dict[str, Any]],
    manager: str = "preemptctl",
    force: bool = True,
    uid: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "web", "namespace": "default"}
    if uid:
        meta["uid"] = uid
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "status": {"conditions": conditions},
    }
    result: dict[str, Any] = emulator.store.patch(
        PODS, "default", "web", APPLY, body, "status", field_manager=manager, force=force
    )
    return result


def conditions_of(emulator: Emulator) -> list[str]:
    stored = emulator.pod("default/web")
    assert stored is not None
    return [f"{c['type']}:{c.get('reason', '')}" for c in stored["status"]["conditions"]]


def managers(emulator: Emulator) -> dict[str, Any]:
    stored = emulator.pod("default/web")
    assert stored is not None
    return {e["manager"]: e for e in stored["metadata"].get("managedFields") or []}


def test_apply_adds_a_condition_and_records_its_manager(emulator: Emulator, uid: str) -> None:
    apply(emulator, [condition("PreemptionByScheduler")])
    assert conditions_of(emulator) == ["Ready:", "DisruptionTarget:PreemptionByScheduler"]
    entry = managers(emulator)["preemptctl"]
    assert (entry["operation"], entry["subresource"], entry["fieldsType"]) == (
        "Apply",
        "status",
        "FieldsV1",
    )
    owned = entry["fieldsV1"]["f:status"]["f:conditions"]['k:{"type":"DisruptionTarget"}']
    assert set(owned) == {".", "f:type", "f:status", "f:reason", "f:message"}


def test_yaml_body_is_accepted_over_http(emulator: Emulator, api_client: Any, uid: str) -> None:
    body = (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: default}\n"
        "status:\n  conditions:\n  - {type: DisruptionTarget, status: 'True', reason: X}\n"
    )
    response = api_client.call_api(
        "PATCH",
        f"{api_client.configuration.host}/api/v1/namespaces/default/pods/web/status"
        "?fieldManager=tester&force=true",
        header_params={"Content-Type": APPLY, "Accept": "application/json"},
        body=body,
    )
    response.read()
    assert response.status == 200
    assert conditions_of(emulator) == ["Ready:", "DisruptionTarget:X"]


def test_apply_without_field_manager_is_bad_request(emulator: Emulator, uid: str) -> None:
    with pytest.raises(ApiError) as raised:
        apply(emulator, [condition("X")], manager="")
    assert raised.value.code == 400
    assert "fieldManager" in raised.value.body["message"]


def test_conflict_names_the_owner_and_force_takes_over(emulator: Emulator, uid: str) -> None:
    apply(emulator, [condition("First")], manager="one")
    with pytest.raises(ApiError) as raised:
        apply(emulator, [condition("Second")], manager="two", force=False)
    assert raised.value.code == 409
    assert 'conflict with "one"' in raised.value.body["message"]
    apply(emulator, [condition("Second")], manager="two", force=True)
    assert conditions_of(emulator) == ["Ready:", "DisruptionTarget:Second"]
    owned_by_one = managers(emulator).get("one")
    assert owned_by_one is None or "f:reason" not in str(owned_by_one["fieldsV1"])


def test_condition_no_longer_applied_is_removed_unless_another_owns_it(
    emulator: Emulator, uid: str
) -> None:
    apply(emulator, [condition("PreemptionByScheduler")])
    apply(emulator, [])
    assert conditions_of(emulator) == ["Ready:"]
    apply(emulator, [condition("Same", "same")], manager="one")
    apply(emulator, [condition("Same", "same")], manager="two")
    apply(emulator, [], manager="one")
    assert conditions_of(emulator) == ["Ready:", "DisruptionTarget:Same"]


def test_apply_naming_another_uid_is_invalid(emulator: Emulator, uid: str) -> None:
    with pytest.raises(ApiError) as raised:
        apply(emulator, [condition("X")], uid="someone-else")
    assert (raised.value.code, raised.value.body["reason"]) == (422, "Invalid")
    assert raised.value.body["message"] == (
        'Pod "web" is invalid: metadata.uid: Invalid value: "someone-else": field is immutable'
    )
    assert conditions_of(emulator) == ["Ready:"]


def test_an_apply_that_changes_nothing_stores_nothing(emulator: Emulator, uid: str) -> None:
    first = apply(emulator, [condition("PreemptionByScheduler")])
    revision = emulator.store.revision
    again = apply(emulator, [condition("PreemptionByScheduler")])
    assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert emulator.store.revision == revision
    same = emulator.store.patch(
        PODS,
        "default",
        "web",
        "application/merge-patch+json",
        {"status": {"phase": first["status"]["phase"]}},
        "status",
    )
    assert (same["metadata"]["resourceVersion"], emulator.store.revision) == (
        first["metadata"]["resourceVersion"],
        revision,
    )

"""Lists: pagination and selectors.

Scenarios:
- `limit` cuts a list into pages joined by `continue`, each page at the first page's revision;
- objects created after the first page do not appear in later pages (a consistent snapshot);
- a continue token from a compacted snapshot is 410 Expired, worded as kube-apiserver words it;
- label selectors: equality, inequality, set-based `in`/`notin`, existence;
- field selectors: spec.nodeName, status.phase, metadata.name, metadata.namespace, and `!=`;
- an unsupported field selector is a 400, as on a real server;
- a namespaced list sees only its namespace.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from preemptctl.emulator import Emulator
from preemptctl.emulator.store import CONTINUE_EXPIRED
from tests.support.emulator import as_list, pod


def _names(pod_list: Any) -> list[str]:
    return [item.metadata.name for item in pod_list.items]


@pytest.fixture
def five_pods(emulator: Emulator) -> None:
    emulator.load(as_list(*(pod(f"p{i}", node_name="n1" if i % 2 else None) for i in range(5))))


@pytest.mark.usefixtures("five_pods")
def test_limit_and_continue_page_through_everything(core: Any) -> None:
    first = core.list_pod_for_all_namespaces(limit=2)
    second = core.list_pod_for_all_namespaces(limit=2, _continue=first.metadata._continue)
    third = core.list_pod_for_all_namespaces(limit=2, _continue=second.metadata._continue)
    assert _names(first) + _names(second) + _names(third) == ["p0", "p1", "p2", "p3", "p4"]
    assert first.metadata.remaining_item_count == 3
    assert third.metadata._continue is None
    assert first.metadata.resource_version == third.metadata.resource_version


@pytest.mark.usefixtures("five_pods")
def test_later_pages_come_from_the_first_pages_snapshot(core: Any, emulator: Emulator) -> None:
    first = core.list_pod_for_all_namespaces(limit=3)
    emulator.load(pod("p9"))
    rest = core.list_pod_for_all_namespaces(limit=3, _continue=first.metadata._continue)
    assert _names(rest) == ["p3", "p4"]


@pytest.mark.usefixtures("five_pods")
def test_continue_from_compacted_snapshot_is_expired(core: Any, emulator: Emulator) -> None:
    first = core.list_pod_for_all_namespaces(limit=2)
    emulator.store.compact()
    with pytest.raises(ApiException) as raised:
        core.list_pod_for_all_namespaces(limit=2, _continue=first.metadata._continue)
    assert raised.value.status == 410
    refusal = json.loads(raised.value.body)
    assert (refusal["reason"], refusal["message"]) == ("Expired", CONTINUE_EXPIRED)


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=web", ["a"]),
        ("app!=web", ["b", "c"]),
        ("tier in (front,back)", ["a", "b"]),
        ("tier notin (front)", ["b", "c"]),
        ("tier", ["a", "b"]),
        ("!tier", ["c"]),
        ("app=web,tier=front", ["a"]),
    ],
)
def test_label_selectors(core: Any, emulator: Emulator, selector: str, expected: list[str]) -> None:
    emulator.load(
        as_list(
            pod("a", labels={"app": "web", "tier": "front"}),
            pod("b", labels={"app": "db", "tier": "back"}),
            pod("c", labels={"app": "batch"}),
        )
    )
    assert _names(core.list_namespaced_pod("default", label_selector=selector)) == expected


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("spec.nodeName=n1", ["bound"]),
        ("spec.nodeName=", ["pending", "done"]),
        ("status.phase=Succeeded", ["done"]),
        ("status.phase!=Succeeded", ["bound", "pending"]),
        ("metadata.name=pending", ["pending"]),
        ("metadata.namespace=default,spec.nodeName!=n1", ["pending", "done"]),
    ],
)
def test_field_selectors(core: Any, emulator: Emulator, selector: str, expected: list[str]) -> None:
    emulator.load(
        as_list(
            pod("bound", node_name="n1"),
            pod("pending"),
            pod("done", phase="Succeeded"),
        )
    )
    found = core.list_pod_for_all_namespaces(field_selector=selector)
    assert sorted(_names(found)) == sorted(expected)


def test_unsupported_field_selector_is_bad_request(core: Any) -> None:
    with pytest.raises(ApiException) as raised:
        core.list_pod_for_all_namespaces(field_selector="spec.priority=5")
    assert raised.value.status == 400
    assert "field label not supported: spec.priority" in raised.value.body


def test_namespaced_list_sees_only_its_namespace(core: Any, emulator: Emulator) -> None:
    emulator.load(as_list(pod("a", "team-a"), pod("b", "team-b")))
    assert _names(core.list_namespaced_pod("team-b")) == ["b"]

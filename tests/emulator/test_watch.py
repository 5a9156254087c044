"""Watches, read as the client reads them (raw lines of a chunked stream).

Scenarios:
- a watch from a list's resourceVersion gets ADDED, MODIFIED and DELETED in order;
- a watch without a resourceVersion starts with the current objects as ADDED;
- bookmarks come only when allowed, and carry a resourceVersion no older than the events sent;
- a watch from a compacted resourceVersion gets HTTP 200 and one ERROR event with a 410
  "too old resource version" Status, as the API server sends it;
- an object that stops matching the selector is seen as DELETED, one that starts as ADDED;
- timeoutSeconds ends the stream;
- `end_watches` cuts open streams (a server restart), and the client can resume from the last
  resourceVersion it saw without losing events.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from preemptctl.emulator import Emulator
from tests.support.emulator import pod


def _events(core: Any, **options: Any) -> list[dict[str, Any]]:
    options.setdefault("timeout_seconds", 1)
    stream = core.list_pod_for_all_namespaces(watch=True, _preload_content=False, **options)
    return [json.loads(line) for line in stream if line.strip()]


def _list_rv(core: Any) -> str:
    rv: str = core.list_pod_for_all_namespaces().metadata.resource_version
    return rv


def test_watch_from_list_rv_sees_changes_in_order(core: Any, emulator: Emulator) -> None:
    emulator.load(pod("web"))
    since = _list_rv(core)
    core.create_namespaced_pod("default", {"metadata": {"name": "new"}})
    core.patch_namespaced_pod("web", "default", {"metadata": {"labels": {"a": "b"}}})
    core.delete_namespaced_pod("new", "default")
    seen = [
        (e["type"], e["object"]["metadata"]["name"]) for e in _events(core, resource_version=since)
    ]
    assert seen == [("ADDED", "new"), ("MODIFIED", "web"), ("DELETED", "new")]


def test_watch_without_rv_starts_with_current_objects(core: Any, emulator: Emulator) -> None:
    emulator.load(pod("a"))
    emulator.load(pod("b"))
    seen = [(e["type"], e["object"]["metadata"]["name"]) for e in _events(core)]
    assert seen == [("ADDED", "a"), ("ADDED", "b")]


def test_bookmarks_only_when_allowed(core: Any, emulator: Emulator) -> None:
    emulator.load(pod("a"))
    since = _list_rv(core)
    without = _events(core, resource_version=since)
    allowed = _events(core, resource_version=since, allow_watch_bookmarks=True)
    assert without == []
    assert {e["type"] for e in allowed} == {"BOOKMARK"}
    assert all(int(e["object"]["metadata"]["resourceVersion"]) >= int(since) for e in allowed)


def test_compacted_rv_gets_an_error_event_with_410(core: Any, emulator: Emulator) -> None:
    emulator.load(pod("a"))
    since = _list_rv(core)
    emulator.load(pod("b"))
    emulator.store.compact()
    events = _events(core, resource_version=since)
    assert len(events) == 1
    assert events[0]["type"] == "ERROR"
    assert events[0]["object"]["code"] == 410
    assert events[0]["object"]["reason"] == "Expired"
    assert events[0]["object"]["message"] == f"too old resource version: {since} (2)"


def test_selector_transitions_are_added_and_deleted(core: Any, emulator: Emulator) -> None:
    emulator.load(pod("web", labels={"app": "web"}))
    since = _list_rv(core)
    core.patch_namespaced_pod("web", "default", {"metadata": {"labels": {"app": "other"}}})
    core.patch_namespaced_pod("web", "default", {"metadata": {"labels": {"app": "web"}}})
    seen = [e["type"] for e in _events(core, resource_version=since, label_selector="app=web")]
    assert seen == ["DELETED", "ADDED"]


def test_timeout_seconds_ends_the_stream(core: Any, emulator: Emulator) -> None:
    finished = threading.Event()

    def watch() -> None:
        _events(core, resource_version=_list_rv(core), timeout_seconds=1)
        finished.set()

    threading.Thread(target=watch, daemon=True).start()
    assert finished.wait(3)


def test_client_resumes_after_end_watches_without_losing_events(
    core: Any, emulator: Emulator
) -> None:
    since = _list_rv(core)
    stream = core.list_pod_for_all_namespaces(
        watch=True, resource_version=since, _preload_content=False, timeout_seconds=5
    )
    core.create_namespaced_pod("default", {"metadata": {"name": "first"}})
    first = json.loads(next(line for line in stream if line.strip()))
    emulator.end_watches()
    remaining = [line for line in stream if line.strip()]
    core.create_namespaced_pod("default", {"metadata": {"name": "second"}})
    resumed = _events(core, resource_version=first["object"]["metadata"]["resourceVersion"])
    assert remaining == []
    assert [e["object"]["metadata"]["name"] for e in resumed] == ["second"]

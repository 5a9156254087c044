"""Scenarios: a `v1 List` of Nodes, Pods and PodDisruptionBudgets in JSON or YAML.

The same format as `kubectl get nodes,pods,pdb -A -o json` and the planner's snapshot, so
one file seeds the tests, the benchmarks and the simulated cluster alike.

Loading keeps the uids a file or a test gives (a test pins them to check what a client
sends). A cluster a person starts from a file is another matter: a real API server gives
every object it creates a uid of its own, and the audit ledger tells preemptions apart by
the preemptor's uid, so `with_fresh_uids` gives each load new ones (consistently: an owner
reference, a claim reference or an Event's object keeps naming the same object; and in the
order of the old ones, so that ties the planner breaks by uid fall alike on every load).
Its times likewise: a file's `creationTimestamp`s are fixed, so `with_times_from` moves them
all, keeping their intervals, to end at the moment of the load.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import yaml

from preemptctl.emulator.resources import BY_API, BY_KIND, Resource


class ScenarioError(ValueError):
    """A scenario file the emulator cannot load; the message names the file and the item."""


def read_document(source: str | Path | Mapping[str, Any]) -> Mapping[str, Any]:
    """The List from a path (`.json`, `.yaml`, `.yml`) or an already-parsed document."""
    if isinstance(source, Mapping):
        return source
    path = Path(source)
    try:
        text = path.read_bytes()
    except OSError as error:
        raise ScenarioError(f"cannot read scenario {path}: {error.strerror}") from None
    try:
        document = orjson.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (orjson.JSONDecodeError, yaml.YAMLError) as error:
        raise ScenarioError(f"scenario {path} is not valid JSON or YAML: {error}") from None
    if not isinstance(document, Mapping):
        raise ScenarioError(f"scenario {path} must be a v1 List object")
    return document


def iter_objects(document: Mapping[str, Any]) -> Iterator[tuple[Resource, Mapping[str, Any]]]:
    """Each item with the resource it belongs to; a single object is a List of one."""
    items = (
        document.get("items")
        if document.get("kind") == "List" or "items" in document
        else [document]
    )
    if not isinstance(items, list):
        raise ScenarioError("a List's items must be an array")
    for index, item in enumerate(items):
        kind = item.get("kind") if isinstance(item, Mapping) else None
        api_version = item.get("apiVersion") if isinstance(item, Mapping) else None
        resource = BY_API.get((str(api_version), str(kind))) or BY_KIND.get(kind or "")
        if resource is None:
            raise ScenarioError(f"item {index}: unsupported kind {kind!r}")
        if not (item.get("metadata") or {}).get("name"):
            raise ScenarioError(f"item {index}: a {kind} has no metadata.name")
        yield resource, item


def with_fresh_uids(document: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the List in which every item has a new uid, and every `uid` field anywhere
    in it that named an item's old uid (ownerReferences, claimRef, involvedObject,
    regarding) names the new one: what creating the same objects on a new server gives.

    The new uids are random, but sorted as the old ones were: the planner breaks its last
    ties by uid (upstream's `MoreImportantPod` ends there), so a scenario is decided alike
    on every load, with the victims in the order `preemptctl plan` gives on the file."""
    fresh = copy.deepcopy(dict(document))
    listed = fresh.get("items")
    items: list[Any] = listed if isinstance(listed, list) else [fresh]
    metas = [
        item["metadata"]
        for item in items
        if isinstance(item, dict) and isinstance(item.get("metadata"), dict)
    ]
    old = sorted({m["uid"] for m in metas if isinstance(m.get("uid"), str) and m["uid"]})
    new = sorted(str(uuid.uuid4()) for _ in old)
    renamed = dict(zip(old, new, strict=True))
    for meta in metas:
        given = meta.get("uid")
        meta["uid"] = renamed.get(given, "") if isinstance(given, str) else ""
        meta["uid"] = meta["uid"] or str(uuid.uuid4())
    _rename_uids(fresh, renamed)
    return fresh


TIME_FIELDS = frozenset(
    {
        "creationTimestamp",
        "deletionTimestamp",
        "startTime",
        "startedAt",
        "finishedAt",
        "lastTransitionTime",
        "lastProbeTime",
        "lastHeartbeatTime",
        "eventTime",
        "firstTimestamp",
        "lastTimestamp",
    }
)
"""The fields of the kinds a scenario holds that carry a moment (RFC 3339)."""


def with_times_from(document: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """A copy of the List in which every moment (`TIME_FIELDS`) is moved by one amount, so
    that its newest `creationTimestamp` is `now`: the scenario as if its last object had
    just been created, its ages (`kubectl get pods`' AGE) and every interval between its
    times as the file tells them. A List without creation times is returned unchanged."""
    moved = copy.deepcopy(dict(document))
    created = [
        moment for key, moment in _times(moved) if key == "creationTimestamp" and moment is not None
    ]
    if not created:
        return moved
    shift = now.replace(microsecond=0) - max(created)
    _move_times(moved, shift)
    return moved


def _parse_time(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _times(node: Any) -> Iterator[tuple[str, datetime | None]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in TIME_FIELDS:
                yield key, _parse_time(value)
            else:
                yield from _times(value)
    elif isinstance(node, list):
        for value in node:
            yield from _times(value)


def _move_times(node: Any, shift: timedelta) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            moment = _parse_time(value) if key in TIME_FIELDS else None
            if moment is not None:
                node[key] = (moment + shift).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            else:
                _move_times(value, shift)
    elif isinstance(node, list):
        for value in node:
            _move_times(value, shift)


def _rename_uids(node: Any, renamed: Mapping[str, str]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "uid" and isinstance(value, str) and value in renamed:
                node[key] = renamed[value]
            else:
                _rename_uids(value, renamed)
    elif isinstance(node, list):
        for value in node:
            _rename_uids(value, renamed)

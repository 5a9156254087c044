"""Scenarios: a `v1 List` of Nodes, Pods and PodDisruptionBudgets in JSON or YAML.

The same format as `kubectl get nodes,pods,pdb -A -o json` and the planner's snapshot, so
one file seeds the tests, the benchmarks and the simulated cluster alike.

Loading keeps the uids a file or a test gives (a test pins them to check what a client
sends). A cluster a person starts from a file is another matter: a real API server gives
every object it creates a uid of its own, and the audit ledger tells preemptions apart by
the preemptor's uid, so `with_fresh_uids` gives each load new ones (consistently: an owner
reference, a claim reference or an Event's object keeps naming the same object).
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator, Mapping
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
    regarding) names the new one: what creating the same objects on a new server gives."""
    fresh = copy.deepcopy(dict(document))
    listed = fresh.get("items")
    items: list[Any] = listed if isinstance(listed, list) else [fresh]
    renamed: dict[str, str] = {}
    for item in items:
        meta = item.get("metadata") if isinstance(item, dict) else None
        if isinstance(meta, dict):
            old = meta.get("uid")
            new = str(uuid.uuid4())
            if isinstance(old, str) and old:
                renamed[old] = new
            meta["uid"] = new
    _rename_uids(fresh, renamed)
    return fresh


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

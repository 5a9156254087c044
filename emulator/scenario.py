"""Scenarios: a `v1 List` of Nodes, Pods and PodDisruptionBudgets in JSON or YAML.

The same format as `kubectl get nodes,pods,pdb -A -o json` and the planner's snapshot, so
one file seeds the tests, the benchmarks and the simulated cluster alike.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson
import yaml

from preemptctl.emulator.resources import BY_KIND, Resource


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
        resource = BY_KIND.get(kind or "")
        if resource is None:
            raise ScenarioError(f"item {index}: unsupported kind {kind!r}")
        if not (item.get("metadata") or {}).get("name"):
            raise ScenarioError(f"item {index}: a {kind} has no metadata.name")
        yield resource, item

"""The three patch flavours the API server accepts for built-in kinds.

Strategic merge patch is the one that matters: it is what `kubectl` and the Python client
send for a dict body, and it merges lists such as `status.conditions` by their merge key
(`type`) instead of replacing them, which is how a scheduler adds `DisruptionTarget`
without erasing the kubelet's conditions. Only the merge keys of the kinds served here are
known; an unknown list is replaced, as for a JSON merge patch.
"""

from __future__ import annotations

import copy
from typing import Any

from preemptctl.emulator.status import ApiError, bad_request, status_body

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

# List fields merged by key (the `patchMergeKey` tags of k8s.io/api/core/v1 and policy/v1).
MERGE_KEYS = {
    "conditions": "type",
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "volumes": "name",
    "env": "name",
    "ports": "containerPort",
    "ownerReferences": "uid",
    "imagePullSecrets": "name",
    "taints": "key",
    "addresses": "type",
    "readinessGates": "conditionType",
    "resourceClaims": "name",
}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge, `null` deletes, everything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """A strategic merge patch: a merge patch whose keyed lists merge item by item.

    Supports `$patch: delete` on a keyed list item and `$patch: replace` on a map or list,
    the directives a controller plausibly sends."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and key in MERGE_KEYS:
            current = result.get(key)
            result[key] = _merge_list(current if isinstance(current, list) else [], value, key)
        else:
            result[key] = strategic_merge_patch(result.get(key), value)
    return result


def _merge_list(current: list[Any], patch: list[Any], field: str) -> list[Any]:
    merge_key = MERGE_KEYS[field]
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [copy.deepcopy(i) for i in patch if not (isinstance(i, dict) and "$patch" in i)]
    merged = list(current)
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise bad_request(f"map: {item!r} does not contain declared merge key: {merge_key}")
        position = next(
            (
                i
                for i, old in enumerate(merged)
                if isinstance(old, dict) and old.get(merge_key) == item[merge_key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if position is not None:
                del merged[position]
        elif position is None:
            merged.append(strategic_merge_patch({}, item))
        else:
            merged[position] = strategic_merge_patch(merged[position], item)
    return merged


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 JSON patch (add, remove, replace, test, copy, move)."""
    if not isinstance(operations, list):
        raise bad_request("json patch must be a list of operations")
    document = copy.deepcopy(target)
    for operation in operations:
        op = operation.get("op")
        path = _pointer(operation.get("path", ""))
        if op == "add":
            document = _add(document, path, copy.deepcopy(operation.get("value")))
        elif op == "remove":
            _remove(document, path)
        elif op == "replace":
            _remove(document, path)
            document = _add(document, path, copy.deepcopy(operation.get("value")))
        elif op == "test":
            if _get(document, path) != operation.get("value"):
                raise _invalid_patch(f"testing value {operation.get('path')} failed")
        elif op in ("copy", "move"):
            source = _pointer(operation.get("from", ""))
            value = copy.deepcopy(_get(document, source))
            if op == "move":
                _remove(document, source)
            document = _add(document, path, value)
        else:
            raise bad_request(f"Unexpected kind: {op}")
    return document


def _invalid_patch(message: str) -> ApiError:
    return ApiError(422, status_body(422, "Invalid", message))


def _pointer(text: str) -> list[str]:
    if not text:
        return []
    return [part.replace("~1", "/").replace("~0", "~") for part in text.lstrip("/").split("/")]


def _parent(document: Any, path: list[str]) -> Any:
    node = document
    for part in path[:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def _get(document: Any, path: list[str]) -> Any:
    try:
        node = document
        for part in path:
            node = node[int(part)] if isinstance(node, list) else node[part]
        return node
    except (KeyError, IndexError, ValueError, TypeError):
        raise _invalid_patch(f"path /{'/'.join(path)} does not exist") from None


def _add(document: Any, path: list[str], value: Any) -> Any:
    if not path:
        return value
    try:
        parent = _parent(document, path)
    except (KeyError, IndexError, ValueError, TypeError):
        raise _invalid_patch(f"path /{'/'.join(path)} has a missing parent") from None
    if isinstance(parent, list):
        index = len(parent) if path[-1] == "-" else int(path[-1])
        parent.insert(index, value)
    else:
        parent[path[-1]] = value
    return document


def _remove(document: Any, path: list[str]) -> None:
    _get(document, path)
    parent = _parent(document, path)
    if isinstance(parent, list):
        del parent[int(path[-1])]
    else:
        del parent[path[-1]]


def apply_patch(content_type: str, target: dict[str, Any], body: Any) -> dict[str, Any]:
    """Apply a PATCH body by its Content-Type (the server's `patchResource` dispatch)."""
    media = content_type.split(";")[0].strip()
    if media == STRATEGIC_MERGE_PATCH:
        result = strategic_merge_patch(target, body)
    elif media == MERGE_PATCH:
        result = merge_patch(target, body)
    elif media == JSON_PATCH:
        result = json_patch(target, body)
    else:
        raise ApiError(
            415,
            status_body(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an "
                f"unknown format - accepted media types include: {JSON_PATCH}, "
                f"{MERGE_PATCH}, {STRATEGIC_MERGE_PATCH}",
            ),
        )
    if not isinstance(result, dict):
        raise bad_request("the patch does not produce an object")
    return result

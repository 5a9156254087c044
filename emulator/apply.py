"""Server-side apply (`application/apply-patch+yaml`), enough of it for a controller that
marks pods the way kube-scheduler does (`ApplyStatus` with a field manager and force).

What is kept of the real semantics:
- each field manager owns the fields it applied, recorded in `metadata.managedFields`
  (`operation: Apply`, `fieldsType: FieldsV1`, `subresource` for the status subresource),
  with list-map items such as `status.conditions` owned per key (`k:{"type":...}`);
- applying a different value to a field another Apply manager owns is a 409 Conflict that
  names the manager, unless `force=true`, which takes the field over;
- a field this manager applied before and leaves out now is removed, unless another manager
  owns it too (how an applier removes a condition);
- on the status subresource only `status` is applied; on the main resource everything but
  `status`.

Left out: Update managers' ownership (their writes are not tracked), type-aware atomic
lists beyond the merge keys in `emulator.patch`, and YAML anchors (bodies are JSON or plain
YAML).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

from preemptctl.emulator.patch import MERGE_KEYS, strategic_merge_patch
from preemptctl.emulator.status import ApiError, bad_request, status_body

Segment = tuple[str, ...]  # ("f", name) or ("k", merge key, value)
Path = tuple[Segment, ...]
Obj = dict[str, Any]

IDENTITY = {"name", "namespace", "uid", "resourceVersion", "managedFields"}


def _keyed(field: str, value: Any) -> str | None:
    """The merge key of a list that is a map, if every item carries it."""
    key = MERGE_KEYS.get(field)
    if key and isinstance(value, list) and all(isinstance(i, dict) and key in i for i in value):
        return key
    return None


def field_paths(obj: Any, prefix: Path = ()) -> Iterator[Path]:
    """Every field `obj` sets, as paths; a list-map item is a path of its own too."""
    if not isinstance(obj, dict):
        return
    for name, value in obj.items():
        path = (*prefix, ("f", name))
        merge_key = _keyed(name, value)
        if merge_key is not None:
            for item in value:
                item_path = (*path, ("k", merge_key, json.dumps(item[merge_key])))
                yield item_path
                yield from field_paths(item, item_path)
        elif isinstance(value, dict) and value:
            yield from field_paths(value, path)
        else:
            yield path


def applied_paths(body: Obj, subresource: str) -> set[Path]:
    if subresource == "status":
        return set(field_paths({"status": body.get("status") or {}}))
    trimmed = {k: v for k, v in body.items() if k not in ("apiVersion", "kind", "status")}
    meta = {k: v for k, v in (trimmed.get("metadata") or {}).items() if k not in IDENTITY}
    trimmed["metadata"] = meta
    return {p for p in field_paths(trimmed) if p != (("f", "metadata"),)}


def encode(paths: set[Path]) -> Obj:
    """FieldsV1: `{"f:status": {"f:conditions": {"k:{\\"type\\":\\"X\\"}": {".": {}}}}}`."""
    root: Obj = {}
    for path in sorted(paths):
        node = root
        for segment in path:
            node = node.setdefault(_segment_key(segment), {})
        if path and path[-1][0] == "k":
            node.setdefault(".", {})
    return root


def _segment_key(segment: Segment) -> str:
    if segment[0] == "f":
        return f"f:{segment[1]}"
    return "k:" + json.dumps({segment[1]: json.loads(segment[2])}, separators=(",", ":"))


def decode(fields: Any, prefix: Path = ()) -> set[Path]:
    found: set[Path] = set()
    if not isinstance(fields, dict):
        return found
    for key, child in fields.items():
        if key == ".":
            found.add(prefix)
            continue
        if key.startswith("f:"):
            segment: Segment = ("f", key[2:])
        elif key.startswith("k:"):
            [(merge_key, value)] = json.loads(key[2:]).items()
            segment = ("k", merge_key, json.dumps(value))
        else:
            continue
        path = (*prefix, segment)
        if child:
            found |= decode(child, path)
        else:
            found.add(path)
    return found


def _step(node: Any, segment: Segment) -> tuple[Any, Any]:
    """The child of `node` at `segment` and how to find it again (a key or an index)."""
    if segment[0] == "f":
        if isinstance(node, dict) and segment[1] in node:
            return node[segment[1]], segment[1]
        return None, None
    if isinstance(node, list):
        wanted = json.loads(segment[2])
        for index, item in enumerate(node):
            if isinstance(item, dict) and item.get(segment[1]) == wanted:
                return item, index
    return None, None


def value_at(obj: Any, path: Path) -> Any:
    node = obj
    for segment in path:
        node, where = _step(node, segment)
        if where is None:
            return None
    return node


def remove_at(obj: Any, path: Path) -> None:
    node = obj
    for segment in path[:-1]:
        node, where = _step(node, segment)
        if where is None:
            return
    _, where = _step(node, path[-1])
    if where is not None:
        del node[where]


def server_side_apply(
    current: Obj, body: Any, manager: str, force: bool, subresource: str, now: str
) -> Obj:
    """The object after `manager` applies `body`; raises `ApiError` (409) on a conflict."""
    if not manager:
        raise bad_request("PATCH with apply requires a fieldManager (a query parameter)")
    if not isinstance(body, dict):
        raise bad_request("the apply body must be an object")
    wanted = applied_paths(body, subresource)
    managed: list[Obj] = copy.deepcopy(current["metadata"].get("managedFields") or [])
    mine_before: set[Path] = set()
    others: list[tuple[Obj, set[Path]]] = []
    for entry in managed:
        owned = decode(entry.get("fieldsV1"))
        same = entry.get("manager") == manager and entry.get("subresource", "") == subresource
        if same and entry.get("operation") == "Apply":
            mine_before = owned
        elif entry.get("operation") == "Apply":
            others.append((entry, owned))
    conflicts = [
        (entry["manager"], path)
        for entry, owned in others
        for path in wanted & owned
        if path[-1][0] != "k" and value_at(current, path) != value_at(body, path)
    ]
    if conflicts and not force:
        manager_name, path = conflicts[0]
        shown = ".".join(_segment_key(s) for s in path)
        raise ApiError(
            409,
            status_body(
                409,
                "Conflict",
                f'Apply failed with {len(conflicts)} conflict(s): conflict with "{manager_name}"'
                f": {shown}",
            ),
        )
    patch = (
        {"status": body.get("status") or {}}
        if subresource == "status"
        else {k: v for k, v in body.items() if k not in ("status", "apiVersion", "kind")}
    )
    if "metadata" in patch:
        patch["metadata"] = {k: v for k, v in patch["metadata"].items() if k not in IDENTITY}
    result: Obj = strategic_merge_patch(current, patch)
    still_owned = set().union(*(owned for _, owned in others)) if others else set()
    removed: list[Path] = []
    for path in sorted(mine_before - wanted, key=len):  # a list item before its fields
        if any(path[: len(r)] == r for r in removed):
            continue
        if path not in still_owned and not any(p[: len(path)] == path for p in wanted):
            remove_at(result, path)
            removed.append(path)
    kept: list[Obj] = []
    for entry, owned in others:
        if force:
            owned = owned - wanted
        if owned:
            kept.append(dict(entry, fieldsV1=encode(owned)))
    for entry in managed:
        if entry.get("operation") != "Apply":
            kept.append(entry)
    if wanted:
        record: Obj = {
            "manager": manager,
            "operation": "Apply",
            "apiVersion": current.get("apiVersion", "v1"),
            "time": now,
            "fieldsType": "FieldsV1",
            "fieldsV1": encode(wanted),
        }
        if subresource:
            record["subresource"] = subresource
        kept.append(record)
    result["metadata"] = dict(result["metadata"], managedFields=kept)
    return result

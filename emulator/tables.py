"""Server-side printing (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`), so
`kubectl get` shows the columns it shows against a real cluster: for pods NAME, READY,
STATUS, RESTARTS, AGE (and IP, NODE, NOMINATED NODE with `-o wide`), for nodes NAME,
STATUS, ROLES, AGE, VERSION, for the rest NAME and AGE."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson

from preemptctl.emulator.resources import NODES, PODS, Resource

Obj = dict[str, Any]


def wants_table(accept: str) -> bool:
    return "as=Table" in accept


def _column(name: str, kind: str = "string", priority: int = 0, fmt: str = "") -> Obj:
    return {"name": name, "type": kind, "format": fmt, "description": "", "priority": priority}


def age(created: Any, now: datetime | None = None) -> str:
    """kubectl's short duration: 45s, 3m2s, 5h, 4d."""
    try:
        began = datetime.strptime(str(created), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return "<unknown>"
    seconds = max(int(((now or datetime.now(UTC)) - began).total_seconds()), 0)
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    return f"{hours}h" if hours < 48 else f"{hours // 24}d"


def _pod_cells(pod: Obj) -> list[Any]:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    containers = spec.get("containers") or []
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for s in statuses if s.get("ready"))
    restarts = sum(int(s.get("restartCount") or 0) for s in statuses)
    shown = status.get("reason") or status.get("phase") or "Unknown"
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        shown = "Terminating"
    return [
        pod["metadata"].get("name", ""),
        f"{ready}/{len(containers)}",
        shown,
        restarts,
        age(pod["metadata"].get("creationTimestamp")),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
    ]


def _node_cells(node: Obj) -> list[Any]:
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    state = "Ready" if ready is None or ready.get("status") == "True" else "NotReady"
    if (node.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    info = (node.get("status") or {}).get("nodeInfo") or {}
    return [
        node["metadata"].get("name", ""),
        state,
        "<none>",
        age(node["metadata"].get("creationTimestamp")),
        info.get("kubeletVersion") or "",
    ]


def _layout(resource: Resource) -> tuple[list[Obj], Callable[[Obj], list[Any]]]:
    if resource is PODS:
        columns = [
            _column("Name", fmt="name"),
            _column("Ready"),
            _column("Status"),
            _column("Restarts", "integer"),
            _column("Age"),
            _column("IP", priority=1),
            _column("Node", priority=1),
            _column("Nominated Node", priority=1),
        ]
        return columns, _pod_cells
    if resource is NODES:
        columns = [
            _column("Name", fmt="name"),
            _column("Status"),
            _column("Roles"),
            _column("Age"),
            _column("Version"),
        ]
        return columns, _node_cells
    return [_column("Name", fmt="name"), _column("Age")], lambda obj: [
        obj["metadata"].get("name", ""),
        age(obj["metadata"].get("creationTimestamp")),
    ]


def table(resource: Resource, objects: list[Obj], metadata: Obj) -> Obj:
    columns, cells = _layout(resource)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": columns,
        "rows": [{"cells": cells(obj), "object": obj} for obj in objects],
    }


def as_table(resource: Resource, body: Any) -> Any:
    """A list or a single object as a Table (a Status or anything else as is)."""
    if not isinstance(body, dict):
        return body
    if body.get("kind", "").endswith("List") and "items" in body:
        return table(resource, body["items"], body.get("metadata") or {})
    if body.get("kind") == resource.kind:
        return table(resource, [body], {"resourceVersion": body["metadata"].get("resourceVersion")})
    return body


def table_events(resource: Resource, write: Callable[[bytes], None]) -> Callable[[bytes], None]:
    """`write` for a watch whose client asked for Tables: each event's object becomes a
    one-row Table (bookmarks and errors pass as they are)."""

    def rewrite(chunk: bytes) -> None:
        if not chunk:
            write(chunk)
            return
        out = bytearray()
        for line in chunk.splitlines():
            if not line.strip():
                continue
            event = orjson.loads(line)
            if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                event["object"] = as_table(resource, event["object"])
            out += orjson.dumps(event) + b"\n"
        write(bytes(out))

    return rewrite

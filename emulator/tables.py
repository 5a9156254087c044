"""Server-side printing (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`), so
`kubectl get` shows what it shows against a real cluster.

A real API server renders these rows itself (kubernetes `pkg/printers/internalversion`,
always with its wide cells; kubectl hides the columns of priority 1 unless `-o wide`). The
cells here follow those printers for the kinds a preemption touches: pods (`printPod`: READY
counted from the container statuses, STATUS from the phase, the pod's reason, its init and
app containers' states and its deletion, RESTARTS with the last restart's age), events
(`printEvent`, for core/v1 and for events.k8s.io/v1, which the server converts to the same
Event first), nodes, namespaces and PodDisruptionBudgets. Every other kind shows NAME and
AGE, as a CustomResource without printer columns does. Ages are apimachinery's
`HumanDuration`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import orjson

from preemptctl.emulator.resources import EVENTS, EVENTS_V1, NAMESPACES, NODES, PDBS, PODS, Resource
from preemptctl.emulator.store import core_event

Obj = dict[str, Any]
Cells = Callable[[Obj], list[Any]]

NONE = "<none>"
UNKNOWN = "<unknown>"
ROLE_PREFIX = "node-role.kubernetes.io/"


def wants_table(accept: str) -> bool:
    return "as=Table" in accept


def _column(name: str, kind: str = "string", priority: int = 0, fmt: str = "") -> Obj:
    return {"name": name, "type": kind, "format": fmt, "description": "", "priority": priority}


# -- durations ----------------------------------------------------------------------------------


def human_duration(seconds: float) -> str:
    """apimachinery's `duration.HumanDuration`: exact while short, coarser as it grows (45s,
    3m2s, 2h5m, 3d4h, 30d, 2y10d, 9y)."""
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        rest = whole % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def _moment(text: Any) -> datetime | None:
    """An RFC 3339 Time or MicroTime (`...Z`, with or without fractions); None if absent."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return None


def since(moment: Any, now: datetime | None = None) -> str:
    """`translateTimestampSince`: the age of a timestamp, `<unknown>` when there is none."""
    began = moment if isinstance(moment, datetime) else _moment(moment)
    if began is None:
        return UNKNOWN
    return human_duration(((now or datetime.now(UTC)) - began).total_seconds())


def age(created: Any, now: datetime | None = None) -> str:
    """An object's AGE column."""
    return since(created, now)


# -- pods ---------------------------------------------------------------------------------------


def _restartable(container: Mapping[str, Any] | None) -> bool:
    """A sidecar: an init container with `restartPolicy: Always` runs beside the app."""
    return bool(container) and (container or {}).get("restartPolicy") == "Always"


def _state(status: Mapping[str, Any], which: str) -> Mapping[str, Any] | None:
    state = (status.get("state") or {}).get(which)
    return state if isinstance(state, Mapping) else None


def _terminated_reason(terminated: Mapping[str, Any], prefix: str = "") -> str:
    if terminated.get("reason"):
        return prefix + str(terminated["reason"])
    if terminated.get("signal"):
        return f"{prefix}Signal:{terminated['signal']}"
    return f"{prefix}ExitCode:{terminated.get('exitCode', 0)}"


def _finished(status: Mapping[str, Any]) -> datetime | None:
    last = ((status.get("lastState") or {}).get("terminated")) or {}
    return _moment(last.get("finishedAt")) if isinstance(last, Mapping) else None


def _condition_true(pod_status: Mapping[str, Any], kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in pod_status.get("conditions") or ()
        if isinstance(c, Mapping)
    )


def pod_cells(pod: Obj, now: datetime | None = None) -> list[Any]:
    """`printPod`, wide: NAME, READY, STATUS, RESTARTS, AGE, IP, NODE, NOMINATED NODE,
    READINESS GATES."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    phase = status.get("phase") or ""
    reason = status.get("reason") or phase
    for condition in status.get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"
    init_specs = {c.get("name"): c for c in spec.get("initContainers") or ()}
    total = len(spec.get("containers") or ()) + sum(map(_restartable, init_specs.values()))
    ready = restarts = sidecar_restarts = 0
    last_restart = last_sidecar_restart = None

    initializing = False
    init_statuses = status.get("initContainerStatuses") or []
    for index, container in enumerate(init_statuses):
        restarts += int(container.get("restartCount") or 0)
        last_restart = max(filter(None, (last_restart, _finished(container))), default=None)
        sidecar = _restartable(init_specs.get(container.get("name")))
        if sidecar:
            sidecar_restarts += int(container.get("restartCount") or 0)
            last_sidecar_restart = max(
                filter(None, (last_sidecar_restart, _finished(container))), default=None
            )
        terminated, waiting = _state(container, "terminated"), _state(container, "waiting")
        if terminated is not None and int(terminated.get("exitCode") or 0) == 0:
            continue
        if sidecar and container.get("started"):
            ready += bool(container.get("ready"))
            continue
        if terminated is not None:
            reason = _terminated_reason(terminated, "Init:")
        elif waiting and waiting.get("reason") and waiting.get("reason") != "PodInitializing":
            reason = f"Init:{waiting['reason']}"
        else:
            reason = f"Init:{index}/{len(init_specs)}"
        initializing = True
        break

    if not initializing or _condition_true(status, "Initialized"):
        restarts, last_restart = sidecar_restarts, last_sidecar_restart
        running = False
        for container in reversed(status.get("containerStatuses") or []):
            restarts += int(container.get("restartCount") or 0)
            last_restart = max(filter(None, (last_restart, _finished(container))), default=None)
            terminated, waiting = _state(container, "terminated"), _state(container, "waiting")
            if waiting and waiting.get("reason"):
                reason = str(waiting["reason"])
            elif terminated is not None:
                reason = _terminated_reason(terminated)
            elif container.get("ready") and _state(container, "running") is not None:
                running = True
                ready += 1
        if reason == "Completed" and running:
            reason = "Running" if _condition_true(status, "Ready") else "NotReady"

    if meta.get("deletionTimestamp") and status.get("reason") == "NodeLost":
        reason = "Unknown"
    elif meta.get("deletionTimestamp") and phase not in ("Succeeded", "Failed"):
        reason = "Terminating"

    shown_restarts = str(restarts)
    if restarts and last_restart is not None:
        shown_restarts = f"{restarts} ({since(last_restart, now)} ago)"
    ips = status.get("podIPs") or []
    ip = (ips[0].get("ip") if ips and isinstance(ips[0], Mapping) else "") or status.get("podIP")
    gates = [g.get("conditionType") for g in spec.get("readinessGates") or ()]
    gated = NONE
    if gates:
        true = {c.get("type") for c in status.get("conditions") or () if c.get("status") == "True"}
        gated = f"{sum(gate in true for gate in gates)}/{len(gates)}"
    return [
        meta.get("name", ""),
        f"{ready}/{total}",
        reason,
        shown_restarts,
        age(meta.get("creationTimestamp"), now),
        ip or NONE,
        spec.get("nodeName") or NONE,
        status.get("nominatedNodeName") or NONE,
        gated,
    ]


POD_COLUMNS = [
    _column("Name", fmt="name"),
    _column("Ready"),
    _column("Status"),
    _column("Restarts"),
    _column("Age"),
    _column("IP", priority=1),
    _column("Node", priority=1),
    _column("Nominated Node", priority=1),
    _column("Readiness Gates", priority=1),
]


# -- events -------------------------------------------------------------------------------------


def event_cells(event: Obj, now: datetime | None = None) -> list[Any]:
    """`printEvent`, wide, for a core/v1 Event: LAST SEEN, TYPE, REASON, OBJECT, SUBOBJECT,
    SOURCE, MESSAGE, FIRST SEEN, COUNT, NAME."""
    first = since(event.get("firstTimestamp"), now)
    if not event.get("firstTimestamp"):
        first = since(event.get("eventTime"), now)
    last = since(event.get("lastTimestamp"), now) if event.get("lastTimestamp") else first
    count = int(event.get("count") or 0)
    series = event.get("series")
    if isinstance(series, Mapping):
        last = since(series.get("lastObservedTime"), now)
        count = int(series.get("count") or 0)
    elif count == 0:
        count = 1  # a singleton event of the new API has no count
    involved = event.get("involvedObject") or {}
    kind = str(involved.get("kind") or "").lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    source = event.get("source") or {}
    component = source.get("component") or event.get("reportingComponent") or ""
    host = source.get("host") or event.get("reportingInstance") or ""
    return [
        last,
        event.get("type", ""),
        event.get("reason", ""),
        target,
        involved.get("fieldPath", ""),
        f"{component}, {host}" if host else component,
        str(event.get("message") or "").strip(),
        first,
        count,
        (event.get("metadata") or {}).get("name", ""),
    ]


EVENT_COLUMNS = [
    _column("Last Seen"),
    _column("Type"),
    _column("Reason"),
    _column("Object"),
    _column("Subobject", priority=1),
    _column("Source", priority=1),
    _column("Message"),
    _column("First Seen", priority=1),
    _column("Count", priority=1),
    _column("Name", priority=1, fmt="name"),
]


# -- the rest -----------------------------------------------------------------------------------


def node_cells(node: Obj, now: datetime | None = None) -> list[Any]:
    """`printNode`: NAME, STATUS, ROLES, AGE, VERSION (the node's own columns; the wide ones
    name addresses and images the emulator's nodes rarely carry)."""
    meta, status = node.get("metadata") or {}, node.get("status") or {}
    ready = next((c for c in status.get("conditions") or () if c.get("type") == "Ready"), None)
    state = "Unknown" if ready is None else "Ready" if ready.get("status") == "True" else "NotReady"
    if (node.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = meta.get("labels") or {}
    roles = {key.removeprefix(ROLE_PREFIX) for key in labels if key.startswith(ROLE_PREFIX)}
    roles.add(str(labels.get("kubernetes.io/role") or ""))
    roles.discard("")
    return [
        meta.get("name", ""),
        state,
        ",".join(sorted(roles)) or NONE,
        age(meta.get("creationTimestamp"), now),
        (status.get("nodeInfo") or {}).get("kubeletVersion") or "",
    ]


NODE_COLUMNS = [
    _column("Name", fmt="name"),
    _column("Status"),
    _column("Roles"),
    _column("Age"),
    _column("Version"),
]


def pdb_cells(pdb: Obj, now: datetime | None = None) -> list[Any]:
    """`printPodDisruptionBudget`: NAME, MIN AVAILABLE, MAX UNAVAILABLE, ALLOWED DISRUPTIONS,
    AGE."""
    meta, spec = pdb.get("metadata") or {}, pdb.get("spec") or {}
    least, most = spec.get("minAvailable"), spec.get("maxUnavailable")
    return [
        meta.get("name", ""),
        "N/A" if least is None else str(least),
        "N/A" if most is None else str(most),
        int((pdb.get("status") or {}).get("disruptionsAllowed") or 0),
        age(meta.get("creationTimestamp"), now),
    ]


PDB_COLUMNS = [
    _column("Name", fmt="name"),
    _column("Min Available"),
    _column("Max Unavailable"),
    _column("Allowed Disruptions", "integer"),
    _column("Age"),
]


def namespace_cells(namespace: Obj, now: datetime | None = None) -> list[Any]:
    meta = namespace.get("metadata") or {}
    return [
        meta.get("name", ""),
        (namespace.get("status") or {}).get("phase") or "Active",
        age(meta.get("creationTimestamp"), now),
    ]


NAMESPACE_COLUMNS = [_column("Name", fmt="name"), _column("Status"), _column("Age")]


def _named_cells(obj: Obj, now: datetime | None = None) -> list[Any]:
    meta = obj.get("metadata") or {}
    return [meta.get("name", ""), age(meta.get("creationTimestamp"), now)]


def _layout(resource: Resource) -> tuple[list[Obj], Cells]:
    if resource is PODS:
        return POD_COLUMNS, pod_cells
    if resource is EVENTS:
        return EVENT_COLUMNS, event_cells
    if resource is EVENTS_V1:  # the server prints an events.k8s.io Event as core/v1's
        return EVENT_COLUMNS, lambda event: event_cells(core_event(event))
    if resource is NODES:
        return NODE_COLUMNS, node_cells
    if resource is PDBS:
        return PDB_COLUMNS, pdb_cells
    if resource is NAMESPACES:
        return NAMESPACE_COLUMNS, namespace_cells
    return [_column("Name", fmt="name"), _column("Age")], _named_cells


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

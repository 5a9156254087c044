"""The emulator's storage: objects, one global resourceVersion, and the event history watches read.

It plays etcd plus the generic registry: every write bumps the one global revision (as etcd's
does) and becomes the object's `metadata.resourceVersion`; every change is appended to a
bounded history, so a watch can resume from any revision still in it and gets 410 Gone for
one compacted away. Stored objects are never mutated, only replaced, so a list or a watch
can hand out references without copying under the lock.

Pod deletion is graceful as on a real cluster: a pod bound to a node is only marked
(`deletionTimestamp`, `deletionGracePeriodSeconds`) and disappears when its grace period
ends (the kubelet's part, played by `reap`) or a test calls `finalize`.

An Event created through events.k8s.io/v1 is also stored, converted, as its core/v1 twin (the
real server keeps one storage and converts), so `kubectl describe pod` and `kubectl get
events` show what the controller recorded. Only creation is mirrored: later changes to
either twin stay with it.
"""

from __future__ import annotations

import base64
import itertools
import queue
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from preemptctl.emulator import status
from preemptctl.emulator.apply import server_side_apply
from preemptctl.emulator.patch import APPLY_PATCH, apply_patch
from preemptctl.emulator.resources import BY_KEY, EVENTS, EVENTS_V1, PODS, Resource
from preemptctl.emulator.status import ApiError

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"
DEFAULT_GRACE_SECONDS = 30
_LIST_SNAPSHOTS = 64
# kube-apiserver's words (`storage.NewResourceExpired` in etcd3's continue handling), which
# go on to offer a continue token for an inconsistent rest of the list; the emulator offers
# none (tests/real_api/emulator names that).
CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted between "
    "the time the first chunk was returned and now may show up in the list."
)


def now_rfc3339(offset: float = 0.0) -> str:
    moment = datetime.fromtimestamp(time.time() + offset, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _copy(obj: Mapping[str, Any]) -> Obj:
    copied: Obj = orjson.loads(orjson.dumps(obj))
    return copied


@dataclass(frozen=True, slots=True)
class WatchEvent:
    rv: int
    type: str
    resource: str
    obj: Obj
    previous: Obj | None = None


@dataclass(eq=False)
class Watcher:
    """One open watch: the store pushes its resource's events here, the HTTP layer drains."""

    resource: str
    events: queue.SimpleQueue[WatchEvent | None] = field(default_factory=queue.SimpleQueue)
    closed: bool = False

    def close(self) -> None:
        self.closed = True
        self.events.put(None)


@dataclass(frozen=True, slots=True)
class Page:
    items: list[Obj]
    resource_version: int
    continue_token: str | None
    remaining: int | None


class Store:
    """Thread-safe; every public method is atomic with respect to the others."""

    def __init__(self, history_limit: int = 200_000) -> None:
        self.lock = threading.RLock()
        self._objects: dict[str, dict[Key, Obj]] = {key: {} for key in BY_KEY}
        self._revision = 0
        self._history: deque[WatchEvent] = deque()
        self._history_limit = history_limit
        self._compacted = 0  # a watch may start from any revision >= this
        self._watchers: set[Watcher] = set()
        self._snapshots: OrderedDict[int, tuple[int, list[Obj]]] = OrderedDict()
        self._snapshot_ids = itertools.count(1)
        # terminating pods -> (monotonic start of termination, grace period in seconds)
        self._deadlines: dict[Key, tuple[float, float]] = {}

    # -- reading ----------------------------------------------------------------------------

    @property
    def revision(self) -> int:
        return self._revision

    def get(self, resource: Resource, namespace: str, name: str) -> Obj:
        obj = self._objects[resource.key].get((namespace, name))
        if obj is None:
            raise status.not_found(resource, name)
        return obj

    def find(self, resource: Resource, namespace: str, name: str) -> Obj | None:
        return self._objects[resource.key].get((namespace, name))

    def objects(self, resource: Resource, namespace: str = "") -> list[Obj]:
        """Current objects of a resource (all namespaces when `namespace` is empty), by key."""
        with self.lock:
            return [
                obj
                for key, obj in sorted(self._objects[resource.key].items())
                if not namespace or key[0] == namespace
            ]

    def list_page(
        self,
        resource: Resource,
        namespace: str,
        predicate: Callable[[Obj], bool],
        limit: int = 0,
        continue_token: str | None = None,
    ) -> Page:
        """A consistent list: later pages come from the snapshot the first page was cut from,
        as etcd serves them at the first page's revision; an evicted snapshot is 410 Gone."""
        with self.lock:
            if continue_token:
                snapshot_id, offset = _decode_continue(continue_token)
                snapshot = self._snapshots.get(snapshot_id)
                if snapshot is None:
                    raise status.gone(CONTINUE_EXPIRED)
                revision, items = snapshot
            else:
                offset = 0
                revision = self._revision
                items = [
                    obj
                    for key, obj in sorted(self._objects[resource.key].items())
                    if (not namespace or key[0] == namespace) and predicate(obj)
                ]
                snapshot_id = 0
            end = offset + limit if limit > 0 else len(items)
            if end >= len(items):
                if snapshot_id:
                    self._snapshots.pop(snapshot_id, None)
                return Page(items[offset:], revision, None, None)
            if not snapshot_id:
                snapshot_id = next(self._snapshot_ids)
                self._snapshots[snapshot_id] = (revision, items)
                while len(self._snapshots) > _LIST_SNAPSHOTS:
                    self._snapshots.popitem(last=False)
            return Page(
                items[offset:end], revision, _encode_continue(snapshot_id, end), len(items) - end
            )

    # -- writing ----------------------------------------------------------------------------

    def create(self, resource: Resource, namespace: str, body: Mapping[str, Any]) -> Obj:
        obj = _copy(body)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{uuid.uuid4().hex[:5]}"
        name = meta.get("name")
        if not name:
            raise status.invalid(
                resource.kind,
                "",
                "metadata.name",
                "Required value: name or generateName is required",
            )
        with self.lock:
            objects = self._objects[resource.key]
            key = (namespace if resource.namespaced else "", name)
            if key in objects:
                raise status.already_exists(resource, name)
            if resource.namespaced:
                meta["namespace"] = namespace
            else:
                meta.pop("namespace", None)
            meta["uid"] = str(uuid.uuid4())
            meta.setdefault("creationTimestamp", now_rfc3339())
            meta.pop("deletionTimestamp", None)
            obj.setdefault("apiVersion", resource.api_version)
            obj.setdefault("kind", resource.kind)
            if resource is PODS:
                obj.setdefault("status", {}).setdefault("phase", "Pending")
            created = self._commit(resource, key, obj, ADDED)
            twins = self._objects[EVENTS.key]
            if resource is EVENTS_V1 and key not in twins:
                self._commit(EVENTS, key, core_event(created), ADDED)
            return created

    def load(self, resource: Resource, body: Mapping[str, Any]) -> Obj:
        """Put an object as given (keeping its uid), replacing any with the same name: how a
        scenario file seeds the cluster. A bound pod loaded terminating gets its
        `deletionGracePeriodSeconds` from now on, so it ends like one deleted here."""
        obj = _copy(body)
        meta = obj.setdefault("metadata", {})
        namespace = (meta.get("namespace") or "default") if resource.namespaced else ""
        if resource.namespaced:
            meta["namespace"] = namespace
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", now_rfc3339())
        obj.setdefault("apiVersion", resource.api_version)
        obj.setdefault("kind", resource.kind)
        with self.lock:
            key = (namespace, meta["name"])
            kind = MODIFIED if key in self._objects[resource.key] else ADDED
            if resource is PODS:
                self._deadlines.pop(key, None)
            if resource is PODS and meta.get("deletionTimestamp") and _bound(obj):
                grace = meta.get("deletionGracePeriodSeconds")
                self._deadlines[key] = (
                    time.monotonic(),
                    float(grace if grace is not None else DEFAULT_GRACE_SECONDS),
                )
            return self._commit(resource, key, obj, kind)

    def inject(self, resource: Resource, obj: Mapping[str, Any], name: str) -> Obj:
        """Store `obj` exactly as given (no uid, namespace or kind filled in) under `name`,
        and publish it to watches: a hostile object no real API server would hold, for
        tests of a client's defences."""
        stored = _copy(obj)
        if not isinstance(stored.get("metadata"), dict):
            stored["metadata"] = {}
        with self.lock:
            key = ("default" if resource.namespaced else "", name)
            kind = MODIFIED if key in self._objects[resource.key] else ADDED
            return self._commit(resource, key, stored, kind)

    def update(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        body: Mapping[str, Any],
        subresource: str = "",
    ) -> Obj:
        """PUT: optimistic concurrency on `metadata.resourceVersion` when the body carries one;
        the main resource cannot change status, the status subresource only changes status."""
        with self.lock:
            current = self.get(resource, namespace, name)
            wanted_rv = (body.get("metadata") or {}).get("resourceVersion")
            if wanted_rv and wanted_rv != current["metadata"]["resourceVersion"]:
                raise status.conflict(resource, name, status.MODIFIED)
            return self._replace(resource, current, _copy(body), subresource)

    def patch(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        content_type: str,
        body: Any,
        subresource: str = "",
        *,
        field_manager: str = "",
        force: bool = False,
    ) -> Obj:
        with self.lock:
            current = self.get(resource, namespace, name)
            if content_type.split(";")[0].strip() == APPLY_PATCH:
                return self._apply(resource, current, body, field_manager, force, subresource)
            patched = apply_patch(content_type, current, body)
            wanted_rv = (patched.get("metadata") or {}).get("resourceVersion")
            if wanted_rv and wanted_rv != current["metadata"]["resourceVersion"]:
                raise status.conflict(resource, name, status.MODIFIED)
            wanted_uid = (patched.get("metadata") or {}).get("uid")
            if wanted_uid and wanted_uid != current["metadata"]["uid"]:
                raise status.invalid(
                    resource.kind,
                    name,
                    "metadata.uid",
                    f'Invalid value: "{wanted_uid}": field is immutable',
                )
            return self._replace(resource, current, patched, subresource)

    def _apply(
        self,
        resource: Resource,
        current: Obj,
        body: Any,
        field_manager: str,
        force: bool,
        subresource: str,
    ) -> Obj:
        """Server-side apply (see `emulator.apply`); a body naming another uid is refused as
        kube-apiserver refuses it, and a patch naming one: 422, `metadata.uid` is immutable
        (checked against kube-apiserver 1.36 by tests/real_api/emulator)."""
        meta = (body.get("metadata") if isinstance(body, dict) else None) or {}
        wanted_uid = meta.get("uid")
        if wanted_uid and wanted_uid != current["metadata"]["uid"]:
            raise status.invalid(
                resource.kind,
                current["metadata"]["name"],
                "metadata.uid",
                f'Invalid value: "{wanted_uid}": field is immutable',
            )
        applied = server_side_apply(current, body, field_manager, force, subresource, now_rfc3339())
        return self._replace(resource, current, applied, subresource)

    def guaranteed_update(
        self, resource: Resource, namespace: str, name: str, change: Callable[[Obj], Obj]
    ) -> Obj:
        """One read-modify-write committed as one change (the registry's `GuaranteedUpdate`):
        `change` gets a copy of the current object and returns the new one, or raises
        `ApiError` to refuse. Spec and status may both change, as registry-internal updates
        such as a binding do; identity metadata is kept."""
        with self.lock:
            current = self.get(resource, namespace, name)
            new = change(_copy(current))
            meta = new.setdefault("metadata", {})
            for kept in ("uid", "creationTimestamp", "namespace", "name"):
                if kept in current["metadata"]:
                    meta[kept] = current["metadata"][kept]
            key = (current["metadata"].get("namespace", ""), name)
            return self._commit(resource, key, new, MODIFIED, previous=current)

    def _replace(self, resource: Resource, current: Obj, new: Obj, subresource: str) -> Obj:
        meta = dict(current["metadata"])
        if subresource == "status":
            merged = dict(current)
            merged["status"] = new.get("status", {})
            managed = (new.get("metadata") or {}).get("managedFields")
            if managed is not None:
                meta["managedFields"] = managed
        else:
            merged = new
            for immutable in (
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "namespace",
                "name",
                "deletionGracePeriodSeconds",
            ):
                new_meta = merged.setdefault("metadata", {})
                if immutable in meta:
                    new_meta[immutable] = meta[immutable]
            meta = merged["metadata"]
            if "status" in resource.subresources:
                merged["status"] = current.get("status", {})
        merged["metadata"] = meta
        if _unchanged(current, merged):
            return current  # a no-op: kube-apiserver stores nothing, so no version, no event
        key = (meta.get("namespace", ""), meta["name"])
        updated = self._commit(resource, key, merged, MODIFIED, previous=current)
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and (resource is not PODS or key not in self._deadlines)
        ):
            self._remove(resource, key)
        return updated

    def delete(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        grace_period: int | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> Obj:
        """DELETE with preconditions; a pod bound to a node terminates gracefully."""
        with self.lock:
            current = self.get(resource, namespace, name)
            meta = current["metadata"]
            if uid is not None and uid != meta["uid"]:
                raise status.precondition_failed(resource, name, "UID", uid, meta["uid"])
            if resource_version is not None and resource_version != meta["resourceVersion"]:
                raise status.precondition_failed(
                    resource, name, "ResourceVersion", resource_version, meta["resourceVersion"]
                )
            key = (meta.get("namespace", ""), name)
            if resource is PODS and grace_period == 0 and meta.get("deletionGracePeriodSeconds"):
                # `rest.BeforeDelete` cutting a pending graceful deletion short: the pod is
                # written with its grace period at 0 (MODIFIED), then removed (DELETED).
                self._mark_deleting(PODS, key, current, 0)
                return self._remove(PODS, key)
            if resource is PODS and self._graceful(current, grace_period):
                return self._terminate(key, current, grace_period)
            if meta.get("finalizers"):
                return self._mark_deleting(resource, key, current, 0)
            return self._remove(resource, key)

    @staticmethod
    def _graceful(pod: Obj, grace_period: int | None) -> bool:
        """`podStrategy.CheckGracefulDelete`: only a scheduled, non-terminal pod with a
        positive grace period terminates; anything else is deleted at once."""
        if grace_period == 0:
            return False
        if not _bound(pod):
            return False
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            return False
        if grace_period is None:
            grace_period = (pod.get("spec") or {}).get(
                "terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS
            )
        return bool(grace_period and grace_period > 0)

    def _terminate(self, key: Key, pod: Obj, grace_period: int | None) -> Obj:
        meta = pod["metadata"]
        if grace_period is None:
            grace_period = (pod.get("spec") or {}).get(
                "terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS
            )
        assert grace_period is not None
        current_grace = meta.get("deletionGracePeriodSeconds")
        if current_grace is not None and current_grace <= grace_period:
            return pod  # already terminating at least as fast: a repeated delete is a no-op
        self._deadlines[key] = (time.monotonic(), float(grace_period))
        return self._mark_deleting(PODS, key, pod, grace_period)

    def _mark_deleting(self, resource: Resource, key: Key, obj: Obj, grace: int) -> Obj:
        marked = dict(obj)
        marked["metadata"] = dict(obj["metadata"])
        marked["metadata"]["deletionTimestamp"] = now_rfc3339(grace)
        marked["metadata"]["deletionGracePeriodSeconds"] = grace
        return self._commit(resource, key, marked, MODIFIED, previous=obj)

    def finalize(self, namespace: str, name: str) -> Obj:
        """End a terminating pod now (the kubelet confirming its containers stopped)."""
        with self.lock:
            self.get(PODS, namespace, name)  # 404 when there is nothing to finalize
            return self._remove(PODS, (namespace, name))

    def reap(self, max_grace: float | None = None) -> int:
        """Delete the terminating pods whose grace period is over, counting a grace period
        longer than `max_grace` seconds as `max_grace` (None: no cap); how many went."""
        moment = time.monotonic()
        cap = float("inf") if max_grace is None else max_grace
        with self.lock:
            due = [
                key
                for key, (started, grace) in self._deadlines.items()
                if started + min(grace, cap) <= moment
            ]
            for key in due:
                if key in self._objects[PODS.key]:
                    self._remove(PODS, key)
                self._deadlines.pop(key, None)
            return len(due)

    def _remove(self, resource: Resource, key: Key) -> Obj:
        current = self._objects[resource.key][key]
        if resource is PODS:
            self._deadlines.pop(key, None)
        self._revision += 1
        gone = dict(current)
        gone["metadata"] = dict(current["metadata"], resourceVersion=str(self._revision))
        del self._objects[resource.key][key]
        self._publish(WatchEvent(self._revision, DELETED, resource.key, gone, current))
        return gone

    def _commit(
        self, resource: Resource, key: Key, obj: Obj, kind: str, previous: Obj | None = None
    ) -> Obj:
        self._revision += 1
        obj["metadata"]["resourceVersion"] = str(self._revision)
        self._objects[resource.key][key] = obj
        self._publish(WatchEvent(self._revision, kind, resource.key, obj, previous))
        return obj

    # -- history and watches ----------------------------------------------------------------

    def _publish(self, event: WatchEvent) -> None:
        if len(self._history) >= self._history_limit:
            self._compacted = self._history.popleft().rv
        self._history.append(event)
        for watcher in self._watchers:
            if watcher.resource == event.resource:
                watcher.events.put(event)

    def compact(self) -> int:
        """Forget all history (etcd compaction): every watch from an older revision gets 410."""
        with self.lock:
            self._history.clear()
            self._compacted = self._revision
            self._snapshots.clear()
            return self._revision

    def watch(self, resource: Resource, since: int | None) -> tuple[Watcher, list[WatchEvent]]:
        """Open a watch from `since` (None: from now, preceded by the current objects as ADDED).

        Returns the watcher and the events to replay first. Raises Expired (410 body in
        `ApiError`) when `since` is older than the retained history."""
        with self.lock:
            watcher = Watcher(resource.key)
            if since is None:
                backlog = [
                    WatchEvent(self._revision, ADDED, resource.key, obj)
                    for _, obj in sorted(self._objects[resource.key].items())
                ]
            else:
                if since < self._compacted:
                    raise ApiError(410, status.too_old_resource_version(since, self._compacted))
                backlog = [
                    event
                    for event in self._history
                    if event.rv > since and event.resource == resource.key
                ]
            self._watchers.add(watcher)
            return watcher, backlog

    @property
    def open_watches(self) -> int:
        with self.lock:
            return len(self._watchers)

    def unwatch(self, watcher: Watcher) -> None:
        with self.lock:
            self._watchers.discard(watcher)

    def close_watches(self) -> None:
        with self.lock:
            for watcher in self._watchers:
                watcher.close()
            self._watchers.clear()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Hold the store still across several calls (an eviction reads a PDB and a pod)."""
        with self.lock:
            yield


def _unchanged(current: Obj, new: Obj) -> bool:
    """Whether `new` is `current` but for its resourceVersion and the times its field managers
    were recorded at: a write kube-apiserver answers with the object as it was, storing
    nothing (an apply or patch that changes no field)."""
    return _comparable(current) == _comparable(new)


def _comparable(obj: Obj) -> Obj:
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "resourceVersion"}
    if isinstance(meta.get("managedFields"), list):
        meta["managedFields"] = [
            {k: v for k, v in entry.items() if k != "time"} if isinstance(entry, dict) else entry
            for entry in meta["managedFields"]
        ]
    return {**obj, "metadata": meta}


def _bound(pod: Obj) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName"))


def _encode_continue(snapshot_id: int, offset: int) -> str:
    raw = orjson.dumps({"s": snapshot_id, "o": offset})
    return base64.urlsafe_b64encode(raw).decode()


def _decode_continue(token: str) -> tuple[int, int]:
    try:
        data = orjson.loads(base64.urlsafe_b64decode(token.encode()))
        return int(data["s"]), int(data["o"])
    except (ValueError, KeyError, TypeError):
        raise status.bad_request(f"invalid continue token: {token!r}") from None


def core_event(event: Mapping[str, Any]) -> Obj:
    """An events.k8s.io/v1 Event as core/v1 shows it (the API server's conversion: `regarding`
    is `involvedObject`, `note` is `message`, the reporting controller is the source)."""
    meta = event.get("metadata") or {}
    when = event.get("eventTime") or meta.get("creationTimestamp")
    series = event.get("series") or {}
    twin: Obj = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            key: meta[key]
            for key in ("name", "namespace", "uid", "creationTimestamp")
            if key in meta
        },
        "involvedObject": dict(event.get("regarding") or {}),
        "related": event.get("related"),
        "reason": event.get("reason", ""),
        "message": event.get("note", ""),
        "type": event.get("type", ""),
        "action": event.get("action", ""),
        "source": {"component": event.get("reportingController", "")},
        "reportingComponent": event.get("reportingController", ""),
        "reportingInstance": event.get("reportingInstance", ""),
        "eventTime": event.get("eventTime"),
        "firstTimestamp": _seconds(when),
        "lastTimestamp": _seconds(series.get("lastObservedTime") or when),
        "count": int(series.get("count") or 1),
    }
    return {key: value for key, value in twin.items() if value is not None}


def _seconds(moment: Any) -> Any:
    """A MicroTime as the second-precision Time core/v1's timestamps are."""
    if isinstance(moment, str) and "." in moment:
        return moment.split(".", 1)[0] + "Z"
    return moment

"""Serving one watch: replay from the requested revision, then follow the store live.

Selectors apply to transitions as on the real server: an object that stops matching is
sent as DELETED, one that starts matching as ADDED. A revision compacted away is answered
like the API server answers it: HTTP 200 and one ERROR event carrying a 410 `Status`, which
is what a reflector must recognise to relist. Bookmarks carry only a resourceVersion that
every event already sent is at or below.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from preemptctl.emulator.resources import Resource
from preemptctl.emulator.status import ApiError
from preemptctl.emulator.store import ADDED, DELETED, MODIFIED, Obj, Store, Watcher, WatchEvent


@dataclass(frozen=True)
class WatchRequest:
    resource: Resource
    namespace: str
    predicate: Callable[[Obj], bool]
    since: int | None
    bookmarks: bool
    bookmark_interval: float
    timeout: float | None


def _visible(request: WatchRequest, obj: Obj | None) -> bool:
    if obj is None:
        return False
    if request.namespace and obj["metadata"].get("namespace") != request.namespace:
        return False
    return request.predicate(obj)


def translate(request: WatchRequest, event: WatchEvent) -> tuple[str, Obj] | None:
    """The event this watcher sees, if any (selector transitions included)."""
    if event.type == DELETED:
        shown = event.previous if event.previous is not None else event.obj
        return (DELETED, event.obj) if _visible(request, shown) else None
    now = _visible(request, event.obj)
    before = event.type == MODIFIED and _visible(request, event.previous)
    if event.type == ADDED:
        return (ADDED, event.obj) if now else None
    if now and before:
        return MODIFIED, event.obj
    if now:
        return ADDED, event.obj
    if before:
        return DELETED, event.obj
    return None


def _encode(kind: str, obj: Obj) -> bytes:
    return orjson.dumps({"type": kind, "object": obj}) + b"\n"


def serve_watch(
    store: Store,
    request: WatchRequest,
    write: Callable[[bytes], None],
    stopping: threading.Event,
) -> None:
    """Stream events through `write` until timeout, server stop, or the client goes away
    (`write` raising OSError)."""
    try:
        watcher, backlog = store.watch(request.resource, request.since)
    except ApiError as error:
        write(_encode("ERROR", error.body))
        return
    deadline = time.monotonic() + request.timeout if request.timeout else None
    last_rv = request.since or 0
    next_bookmark = time.monotonic() + request.bookmark_interval
    try:
        for event in backlog:
            last_rv = max(last_rv, event.rv)
            seen = translate(request, event)
            if seen is not None:
                write(_encode(*seen))
        while not stopping.is_set() and not watcher.closed:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return
            wait = min(0.25, next_bookmark - now) if request.bookmarks else 0.25
            if deadline is not None:
                wait = min(wait, deadline - now)
            batch = _drain(watcher, max(wait, 0.0))
            if batch is None:
                return
            chunk = bytearray()
            for event in batch:
                last_rv = event.rv
                seen = translate(request, event)
                if seen is not None:
                    chunk += _encode(*seen)
            if chunk:
                write(bytes(chunk))
            if request.bookmarks and time.monotonic() >= next_bookmark:
                write(_bookmark(store, watcher, request.resource, last_rv))
                next_bookmark = time.monotonic() + request.bookmark_interval
    finally:
        store.unwatch(watcher)


def _drain(watcher: Watcher, wait: float) -> list[WatchEvent] | None:
    """The events waiting (blocking up to `wait` for the first); None once closed."""
    batch: list[WatchEvent] = []
    try:
        first = watcher.events.get(timeout=wait) if wait > 0 else watcher.events.get_nowait()
    except queue.Empty:
        return batch
    if first is None:
        return None
    batch.append(first)
    while len(batch) < 1000:
        try:
            event = watcher.events.get_nowait()
        except queue.Empty:
            break
        if event is None:
            return None
        batch.append(event)
    return batch


def _bookmark(store: Store, watcher: Watcher, resource: Resource, last_rv: int) -> bytes:
    with store.lock:
        # With nothing queued for this watcher, every change up to the store's revision has
        # been sent (or did not concern it), so the bookmark may jump ahead to it.
        revision = store.revision if watcher.events.empty() else last_rv
    obj = {
        "kind": resource.kind,
        "apiVersion": resource.api_version,
        "metadata": {"resourceVersion": str(revision)},
    }
    return _encode("BOOKMARK", obj)

"""One kind's list-then-watch loop (client-go's Reflector), feeding the cluster view.

Lists in pages (limit/continue), watches from the list's resourceVersion with bookmarks,
resumes a dropped watch from the last resourceVersion it saw, relists when the API server
answers 410 Gone (HTTP 410, or an ERROR event with code 410, which is how a real server
says it mid-stream), and backs off exponentially while the API server is unreachable.

Objects are read as raw JSON with orjson: the planner's model decodes the fields it needs
from the camelCase dict directly, and building the client's generated models for 150,000
pods would cost more than everything else together.
"""

from __future__ import annotations

import gc
import logging
import random
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import orjson
from kubernetes.client.exceptions import ApiException

from preemptctl.kube.classify import ApiStatus, Call, api_status, classify, classify_status
from preemptctl.kube.client import KubeClient
from preemptctl.kube.outcomes import KubeCallError

log = logging.getLogger(__name__)

Obj = dict[str, Any]


@dataclass(frozen=True)
class Kind:
    """How one kind is listed, keyed and removed from the snapshot."""

    name: str  # "Pod", "Node", "PodDisruptionBudget"
    path: str  # the all-namespaces list path
    rbac: str  # resource as RBAC names it, for messages
    group: str = ""

    def key(self, obj: Obj) -> str:
        meta = obj["metadata"]
        if self.name == "Pod":
            return str(meta["uid"])
        if self.name == "Node":
            return str(meta["name"])
        return f"{meta.get('namespace') or 'default'}/{meta['name']}"


POD = Kind("Pod", "/api/v1/pods", "pods")
NODE = Kind("Node", "/api/v1/nodes", "nodes")
PDB = Kind(
    "PodDisruptionBudget", "/apis/policy/v1/poddisruptionbudgets", "poddisruptionbudgets", "policy"
)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector around one list page.

    Parsing and decoding a page of 500 pods creates some 100,000 containers that all stay
    alive until the page is done, and the collector rescans them over and over: measured,
    it made parsing six times slower. Nothing here creates reference cycles, so pausing it
    for a page (tens of milliseconds) defers no garbage that matters; it is process-wide, so
    it is re-enabled only if it was enabled before."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class Expired(Exception):
    """The resourceVersion to resume from is gone (410): only a relist can recover."""


@dataclass
class Backoff:
    """Exponential backoff with jitter, reset after a healthy watch."""

    initial: float = 0.2
    maximum: float = 30.0
    factor: float = 2.0
    _next: float = 0.0

    def delay(self) -> float:
        self._next = self.initial if not self._next else min(self._next * self.factor, self.maximum)
        return self._next * random.uniform(0.8, 1.2)

    def reset(self) -> None:
        self._next = 0.0


class Sink:
    """What a reflector feeds: the view implements these, applying each batch atomically."""

    def replace_page(self, kind: Kind, objects: list[Obj]) -> None:
        raise NotImplementedError

    def finish_relist(self, kind: Kind, seen: set[str]) -> None:
        raise NotImplementedError

    def apply_event(self, kind: Kind, event_type: str, obj: Obj) -> None:
        raise NotImplementedError

    def known_version(self, kind: Kind, key: str) -> str | None:
        raise NotImplementedError


@dataclass
class ReflectorStats:
    lists: int = 0
    relists_after_gone: int = 0
    reconnects: int = 0
    events: int = 0
    bookmarks: int = 0
    errors: int = 0
    last_error: str = ""


class Reflector:
    def __init__(
        self,
        kube: KubeClient,
        kind: Kind,
        sink: Sink,
        *,
        page_size: int = 500,
        watch_timeout: int = 300,
        backoff: Backoff | None = None,
        on_synced: Callable[[Kind], None] = lambda kind: None,
    ) -> None:
        self.kube = kube
        self.kind = kind
        self.sink = sink
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.backoff = backoff or Backoff()
        self.on_synced = on_synced
        self.stats = ReflectorStats()
        self.resource_version: str | None = None
        self._stopping = threading.Event()
        self._response: Any = None

    def stop(self) -> None:
        self._stopping.set()
        response = self._response
        if response is not None:
            try:
                response.shutdown()  # urllib3 2.3+: unblocks a read in another thread
            except Exception:  # older urllib3, or already closed
                try:
                    response.release_conn()
                except Exception:
                    log.debug("could not interrupt the %s watch", self.kind.name)

    def run(self) -> None:
        while not self._stopping.is_set():
            try:
                if self.resource_version is None:
                    self.resource_version = self._relist()
                    self.on_synced(self.kind)
                self._watch(self.resource_version)
                if not self._stopping.is_set():
                    self.stats.reconnects += 1
            except Expired:
                self.stats.relists_after_gone += 1
                log.info("%s watch expired at %s; relisting", self.kind.name, self.resource_version)
                self.resource_version = None
            except Exception as error:
                if self._stopping.is_set():
                    return
                self._failed(error)

    def _failed(self, error: Exception) -> None:
        self.stats.errors += 1
        try:
            call = Call("watch", self.kind.rbac, "all namespaces", self.kind.group)
            self.stats.last_error = classify(error, call).message
        except Exception:  # not an API or transport failure: still keep the loop alive
            self.stats.last_error = f"{type(error).__name__}: {error}"
        delay = self.backoff.delay()
        log.warning(
            "%s reflector: %s; retrying in %.1fs", self.kind.name, self.stats.last_error, delay
        )
        self._stopping.wait(delay)

    # -- list -------------------------------------------------------------------------------

    def _relist(self) -> str:
        """List every object in pages; apply page by page; returns the list's RV."""
        seen: set[str] = set()
        continue_token = ""
        resource_version = ""
        while True:
            query = {"limit": str(self.page_size)}
            if continue_token:
                query["continue"] = continue_token
            with collector_paused():
                try:
                    page = self.kube.send("GET", self.kind.path, query=query)
                except ApiException as error:
                    if error.status == 410 and continue_token:
                        raise Expired() from None
                    raise
            meta = page.get("metadata") or {}
            if not resource_version:
                resource_version = str(meta.get("resourceVersion") or "")
            items: list[Obj] = page.get("items") or []
            changed = []
            for obj in items:
                key = self.kind.key(obj)
                seen.add(key)
                if self.sink.known_version(self.kind, key) != obj["metadata"].get(
                    "resourceVersion"
                ):
                    changed.append(obj)
            if changed:
                with collector_paused():
                    self.sink.replace_page(self.kind, changed)
            continue_token = meta.get("continue") or ""
            if not continue_token:
                break
        self.sink.finish_relist(self.kind, seen)
        self.stats.lists += 1
        self.backoff.reset()
        return resource_version

    # -- watch ------------------------------------------------------------------------------

    def _watch(self, resource_version: str) -> None:
        query = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(self.watch_timeout),
        }
        try:
            response = self.kube.stream(self.kind.path, query, self.watch_timeout + 15)
        except ApiException as error:
            if api_status(error).code == 410:
                raise Expired() from None
            raise
        self._response = response
        try:
            for line in _lines(response):
                if self._stopping.is_set():
                    return
                self._handle(orjson.loads(line))
        finally:
            self._response = None
            response.release_conn()

    def _handle(self, event: Obj) -> None:
        event_type = event.get("type")
        obj = event.get("object") or {}
        if event_type == "ERROR":
            if obj.get("code") == 410:
                raise Expired()
            raise _error_event(obj, self.kind)
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if event_type == "BOOKMARK":
            self.stats.bookmarks += 1
        else:
            self.sink.apply_event(self.kind, str(event_type), obj)
            self.stats.events += 1
        if rv:
            self.resource_version = str(rv)
        self.backoff.reset()


def _error_event(status: Obj, kind: Kind) -> KubeCallError:
    """A watch ERROR event other than 410, as the error it stands for."""
    return classify_status(
        ApiStatus(
            int(status.get("code") or 500),
            str(status.get("reason") or ""),
            str(status.get("message") or ""),
            None,
        ),
        Call("watch", kind.rbac, "all namespaces", kind.group),
    )


def _lines(response: Any) -> Iterator[bytes]:
    """Whole lines of a watch stream (urllib3 yields them as it decodes the chunks)."""
    for line in response:
        line = line.strip()
        if line:
            yield line

"""One kind's list-then-watch loop (client-go's Reflector), feeding the cluster view.

`ListWatch` is the loop, for any collection (a kind, narrowed by a field selector if need
be): `Reflector` mirrors a kind into the cluster view with it, and
`kube.upstream_events.UpstreamRecorder` records kube-scheduler's `Preempted` Events.
Lists in pages (limit/continue), watches from the list's resourceVersion with bookmarks,
resumes a dropped watch from the last resourceVersion it saw, relists when the API server
answers 410 Gone (HTTP 410, or an ERROR event with code 410, which is how a real server
says it mid-stream), and backs off exponentially while the API server is unreachable.

One bad object (no uid or name, a field of the wrong type, a value the planner rejects, a
line that is not JSON) is handed to the sink's `reject` and skipped: the stream goes on
from the next event, so a hostile object can neither stall a kind nor make the watch replay
the same resourceVersion forever.

A list page is bounded in bytes as well as in objects (`PageSize`): the API server's
`limit` counts objects, a tenant decides how large each one is (a pod of 1.35 MB is
valid), and 500 of them would be 650 MB of JSON parsed at once. Each page asks for as many
objects as the pages before it say fit in `PAGE_BYTES`, never more than `page_size`, and is
dropped unread past `MAX_PAGE_BYTES` and asked for again with fewer.

Objects are read as raw JSON with orjson: the planner's model decodes the fields it needs
from the camelCase dict directly, and building the client's generated models for 150,000
pods would cost more than everything else together.
"""

from __future__ import annotations

import gc
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

import orjson
from kubernetes.client.exceptions import ApiException

from preemptctl.kube.classify import ApiStatus, Call, api_status, classify, classify_status
from preemptctl.kube.client import KubeClient, ListPage, PageTooLarge
from preemptctl.kube.discovery import (
    COMPOSITE_POD_GROUP_VERSIONS,
    POD_GROUP_RELATED,
    POD_GROUP_VERSIONS,
    SCHEDULING,
    Served,
    discover,
)
from preemptctl.kube.results import KubeCallError

log = logging.getLogger(__name__)

Obj = dict[str, Any]


@dataclass(frozen=True)
class Kind:
    """How one kind is listed, keyed and removed from the snapshot. A kind with `versions`
    (the versions of its API group whose shape the planner reads, newest first) is optional:
    the newest one the cluster serves is watched (`at`), and a cluster serving none of them
    is watched without it (`Reflector.run`)."""

    name: str  # "Pod", "Node", "PodDisruptionBudget"
    path: str  # the all-namespaces list path
    rbac: str  # resource as RBAC names it, for messages
    group: str = ""

    namespaced: bool = True
    versions: tuple[str, ...] = ()  # for a kind not every cluster serves, newest first
    related: frozenset[str] = frozenset()  # resources of an older shape of it, to name

    def at(self, version: str) -> Kind:
        """The kind listed and watched at `version` of its group."""
        return replace(self, path=f"/apis/{self.group}/{version}/{self.rbac}")

    def key(self, obj: Obj) -> str:
        """The snapshot's key: a Pod's uid, a cluster-scoped object's name, else ns/name.
        Raises `KeyError` when the object lacks it (a hostile or broken object)."""
        found = self.key_or_none(obj)
        if found is None:
            raise KeyError(
                f"{self.name} without metadata.{'uid' if self.name == 'Pod' else 'name'}"
            )
        return found

    def key_or_none(self, obj: Any) -> str | None:
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if not isinstance(meta, dict):
            return None
        field = meta.get("uid" if self.name == "Pod" else "name")
        if not isinstance(field, str) or not field:
            return None
        if self.name == "Pod" or not self.namespaced:
            return field
        namespace = meta.get("namespace")
        return f"{namespace if isinstance(namespace, str) and namespace else 'default'}/{field}"


def describe(obj: Any) -> str:
    """An object's namespace/name (and uid) for a log line, whatever shape it has."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return "(an object without metadata)"
    parts = [meta.get("namespace"), meta.get("name")]
    name = "/".join(str(p)[:253] for p in parts if p) or "(unnamed)"
    uid = meta.get("uid")
    return f"{name} uid {str(uid)[:64]}" if uid else name


POD = Kind("Pod", "/api/v1/pods", "pods")
NODE = Kind("Node", "/api/v1/nodes", "nodes", namespaced=False)
PDB = Kind(
    "PodDisruptionBudget", "/apis/policy/v1/poddisruptionbudgets", "poddisruptionbudgets", "policy"
)
EVENT = Kind("Event", "/api/v1/events", "events")  # core/v1, read by the upstream recorder
NAMESPACE = Kind("Namespace", "/api/v1/namespaces", "namespaces", namespaced=False)
PVC = Kind("PersistentVolumeClaim", "/api/v1/persistentvolumeclaims", "persistentvolumeclaims")
PV = Kind("PersistentVolume", "/api/v1/persistentvolumes", "persistentvolumes", namespaced=False)
STORAGE_CLASS = Kind(
    "StorageClass",
    "/apis/storage.k8s.io/v1/storageclasses",
    "storageclasses",
    "storage.k8s.io",
    namespaced=False,
)
CSI_NODE = Kind(
    "CSINode", "/apis/storage.k8s.io/v1/csinodes", "csinodes", "storage.k8s.io", namespaced=False
)
VOLUME_ATTACHMENT = Kind(
    "VolumeAttachment",
    "/apis/storage.k8s.io/v1/volumeattachments",
    "volumeattachments",
    "storage.k8s.io",
    namespaced=False,
)
POD_GROUP = Kind(
    "PodGroup",
    f"/apis/{SCHEDULING}/{POD_GROUP_VERSIONS[0]}/podgroups",
    "podgroups",
    SCHEDULING,
    versions=POD_GROUP_VERSIONS,
    related=POD_GROUP_RELATED,
)
"""kube-scheduler's workload API (the `GenericWorkload` gate): served by some clusters only,
at `v1beta1` (Kubernetes 1.37) or `v1alpha2` (1.36)."""
COMPOSITE_POD_GROUP = Kind(
    "CompositePodGroup",
    f"/apis/{SCHEDULING}/{COMPOSITE_POD_GROUP_VERSIONS[0]}/compositepodgroups",
    "compositepodgroups",
    SCHEDULING,
    versions=COMPOSITE_POD_GROUP_VERSIONS,
)
"""KEP-6012's CompositePodGroups (`v1alpha3`, the `CompositePodGroup` gate, 1.37 on)."""


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector around one list page (read, parsed, handed
    on, let go).

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


PAGE_BYTES = 8 << 20
"""What a list page aims at, in bytes of JSON: 500 ordinary pods (4 to 15 KiB each with
their managed fields) fit, so a cluster of ordinary pods is listed in pages of 500 as
before; pods of a megabyte are listed a few at a time."""

MAX_PAGE_BYTES = 32 << 20
"""The most of a list page's body that is ever read: a page past it (objects larger than
the pages before them said) is dropped and asked for again with fewer objects. With the
parsed objects, about four times this is what one page can cost the process at most."""

REFUSED_PAGE_SHRINK = 8
"""How much smaller a page asks after one that was too large, when the API server did not
say the page's length (a streamed answer: only that it passed `MAX_PAGE_BYTES`)."""


@dataclass
class PageSize:
    """How many objects the next list page asks for (its `limit`), sized by the bytes the
    pages before it took: as many as fit in `target_bytes` at the last page's bytes per
    object, at most twice the last limit (one page of small objects does not vouch for the
    next), at most `most`, at least one. A page refused for its size shrinks the limit to
    what its declared length says fits, else by `REFUSED_PAGE_SHRINK`; at most half.

    It starts at `most` (a cluster of ordinary objects never asks twice) and lives as long
    as its list-watch loop: a relist starts from what the last list learned."""

    most: int = 500
    target_bytes: int = PAGE_BYTES
    max_bytes: int = MAX_PAGE_BYTES
    limit: int = 0  # 0: `most`

    def __post_init__(self) -> None:
        if self.most < 1:
            raise ValueError(f"a list page must ask for at least one object, not {self.most}")
        self.limit = min(self.limit or self.most, self.most)

    @property
    def byte_limit(self) -> int | None:
        """The most of the next page's body to read; None for a page of one object, which is
        read whole (the API server caps one object's size; refusing it would stall the list
        forever)."""
        return None if self.limit == 1 else self.max_bytes

    def read(self, objects: int, size: int) -> None:
        """A page of `objects` objects in `size` bytes of JSON was read."""
        if objects <= 0:
            return  # an empty page says nothing about the next one
        fits = int(self.target_bytes * objects // max(size, 1))
        self.limit = max(1, min(self.most, 2 * self.limit, fits))

    def refused(self, too_large: PageTooLarge) -> None:
        """The page asked for with the current limit was longer than `max_bytes`."""
        if too_large.declared:
            fits = int(self.target_bytes * self.limit // too_large.declared)
        else:
            fits = self.limit // REFUSED_PAGE_SHRINK
        self.limit = max(1, min(fits, self.limit // 2))


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

    def reject(self, kind: Kind, obj: Any, error: Exception) -> None:
        """`obj` could not be read: leave it out, say so, and go on with the next one."""
        raise NotImplementedError


@dataclass
class ListWatchStats:
    """What every list+watch loop counts."""

    lists: int = 0
    relists_after_gone: int = 0
    pages_too_large: int = 0  # list pages dropped for their size and asked for with fewer
    reconnects: int = 0
    errors: int = 0
    last_error: str = ""


@dataclass
class ReflectorStats(ListWatchStats):
    events: int = 0
    bookmarks: int = 0
    rejected: int = 0
    listed: int = 0  # objects seen by the latest (or current) list
    list_seconds: float = 0.0  # how long the latest complete list took
    synced: bool = False
    absent: bool = False  # an optional kind this cluster does not serve: never listed
    version: str = ""  # an optional kind's group version watched ("scheduling.k8s.io/v1beta1")


StatsT = TypeVar("StatsT", bound=ListWatchStats)


class ListWatch(Generic[StatsT]):
    """The list-then-watch loop itself, for one kind's collection (optionally narrowed by a
    field selector): what to do with a list's pages and a watch's events is the subclass's
    (`_list_page`, `_apply`, `_unreadable`, and the `_list_began`/`_list_ended`/`_listed`
    hooks). `run` blocks until `stop`.

    The loop keeps the resourceVersion to resume from: a watch event moves it only after
    `_apply` returns, so an `_apply` that raises ends the stream before that event and the
    retry (after a backoff) starts again from it."""

    _log = log  # a subclass logs its loop's lines under its own module's name

    stats: StatsT  # the subclass's, set in its __init__

    def __init__(
        self,
        kube: KubeClient,
        kind: Kind,
        *,
        field_selector: str = "",
        what: str = "",
        label: str = "",
        page_size: int = 500,
        watch_timeout: int = 300,
        backoff: Backoff | None = None,
    ) -> None:
        self.kube = kube
        self.kind = kind
        self.field_selector = field_selector
        self.what = what or kind.name  # "<what> watch expired", for log lines
        self.label = label or f"{kind.name} reflector"  # "<label>: <error>; retrying"
        self.call = Call("watch", kind.rbac, "all namespaces", kind.group)  # for failures
        self.page_size = PageSize(page_size)
        self.watch_timeout = watch_timeout
        self.backoff = backoff or Backoff()
        self.resource_version: str | None = None
        self._stopping = threading.Event()
        self._response: Any = None

    # -- what a subclass does with what the loop reads ---------------------------------------

    def _list_began(self) -> None:
        """A (re)list starts."""

    def _list_page(self, items: list[Obj]) -> None:
        """One page of a list's objects."""
        raise NotImplementedError

    def _list_ended(self) -> None:
        """Every page of the list was handed to `_list_page`."""

    def _listed(self, seconds: float) -> None:
        """The list is done (it took `seconds`); the watch starts next."""

    def _apply(self, event_type: Any, obj: Any) -> None:
        """One watch event other than an ERROR (the loop handles those); raising ends the
        stream before this event's resourceVersion is taken."""
        raise NotImplementedError

    def _unreadable(self, obj: Any, error: Exception) -> None:
        """A watch line that is not JSON (`obj` is `{}`), or an event that is not an object."""
        raise NotImplementedError

    # -- the loop ---------------------------------------------------------------------------

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
                    self._log.debug("could not interrupt the %s watch", self.what)

    def run(self) -> None:
        while not self._stopping.is_set():
            try:
                if self.resource_version is None:
                    began = time.monotonic()
                    self.resource_version = self._relist()
                    self._listed(time.monotonic() - began)
                self._watch(self.resource_version)
                if not self._stopping.is_set():
                    self.stats.reconnects += 1
            except Expired:
                self.stats.relists_after_gone += 1
                self._log.info(
                    "%s watch expired at %s; relisting", self.what, self.resource_version
                )
                self.resource_version = None
            except Exception as error:
                if self._stopping.is_set():
                    return
                self._failed(error)

    def _failed(self, error: Exception) -> None:
        self.stats.errors += 1
        try:
            self.stats.last_error = classify(error, self.call).message
        except Exception:  # not an API or transport failure: still keep the loop alive
            self.stats.last_error = f"{type(error).__name__}: {error}"
        delay = self.backoff.delay()
        self._log.warning("%s: %s; retrying in %.1fs", self.label, self.stats.last_error, delay)
        self._stopping.wait(delay)

    def _query(self, **query: str) -> dict[str, str]:
        if self.field_selector:
            query["fieldSelector"] = self.field_selector
        return query

    # -- list -------------------------------------------------------------------------------

    def _relist(self) -> str:
        """List every object in pages, handing each page on; returns the list's RV.

        A page's objects are let go before the next page is read (at most one page is held
        at a time), and a page refused for its size is asked for again, with fewer objects,
        from the same continue token.

        Each page is read, parsed, handed on and let go under one pause of the cyclic
        collector (`collector_paused`): its objects are born and freed inside it, so they
        leave nothing to count towards the next collection. A pause that ended with them
        alive would be followed at once by a collection scanning every one of them (the
        collector counts allocations net of frees, and frees before the parse cannot be
        offset against it): measured, a fifth more CPU per list."""
        self._list_began()
        continue_token = ""
        resource_version = ""
        while True:
            query = self._query(limit=str(self.page_size.limit))
            if continue_token:
                query["continue"] = continue_token
            with collector_paused():
                page = self._read_page(query, continue_token)
                if page is None:
                    continue
                body = page.body
                meta = body.get("metadata") if isinstance(body, dict) else None
                meta = meta or {}
                if not isinstance(body, dict) or not isinstance(meta, dict):
                    raise ValueError(f"a {self.what} list page that is not a list object")
                if not resource_version:
                    resource_version = str(meta.get("resourceVersion") or "")
                continue_token = str(meta.get("continue") or "")
                items = body.get("items") or []
                self.page_size.read(len(items), page.size)
                del page, body, meta
                self._list_page(items)
                del items
            if not continue_token:
                break
        self._list_ended()
        self.stats.lists += 1
        self.backoff.reset()
        return resource_version

    def _read_page(self, query: dict[str, str], continue_token: str) -> ListPage | None:
        """One page, parsed; None when it was too large (the page size is smaller now)."""
        try:
            return self.kube.read_list(self.kind.path, query, max_bytes=self.page_size.byte_limit)
        except PageTooLarge as too_large:
            asked = self.page_size.limit
            self.page_size.refused(too_large)
            self.stats.pages_too_large += 1
            self._log.info(
                "%s list: %s for %d objects; asking for %d at a time",
                self.what,
                too_large,
                asked,
                self.page_size.limit,
            )
            return None
        except ApiException as error:
            if error.status == 410 and continue_token:
                raise Expired() from None
            raise

    # -- watch ------------------------------------------------------------------------------

    def _watch(self, resource_version: str) -> None:
        query = self._query(
            watch="true",
            resourceVersion=resource_version,
            allowWatchBookmarks="true",
            timeoutSeconds=str(self.watch_timeout),
        )
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
                try:
                    event = orjson.loads(line)
                except orjson.JSONDecodeError as error:
                    self._unreadable({}, error)
                    continue
                self._handle(event)
        finally:
            self._response = None
            response.release_conn()

    def _handle(self, event: Any) -> None:
        """One watch event: an ERROR ends the stream (410: relist), any other is `_apply`'d
        and then its resourceVersion taken."""
        if not isinstance(event, dict):
            self._unreadable(event, TypeError("a watch event that is not an object"))
            return
        event_type = event.get("type")
        obj = event.get("object") or {}
        if event_type == "ERROR" and isinstance(obj, dict):
            if obj.get("code") == 410:
                raise Expired()
            raise _error_event(obj, self.call)
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
        self._apply(event_type, obj)
        if isinstance(rv, str) and rv:
            self.resource_version = rv
        self.backoff.reset()


class Reflector(ListWatch[ReflectorStats]):
    """One kind, mirrored into a `Sink` (the cluster view)."""

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
        super().__init__(
            kube, kind, page_size=page_size, watch_timeout=watch_timeout, backoff=backoff
        )
        self.stats = ReflectorStats()
        self.sink = sink
        self.on_synced = on_synced
        self._seen: set[str] = set()  # the keys the current list has seen

    def run(self) -> None:
        """List and watch; for an optional kind, first ask the API server which version of
        it, if any, it serves (`kube.discovery.discover`: the newest the planner reads;
        retried with backoff while the server does not answer), said in one log line. A
        cluster serving none: one log line (naming an older alpha shape it serves, if any),
        the kind counts as synced with nothing in it (`stats.absent`), and the thread waits
        for `stop` (nothing to retry, nothing to restart). A cluster that starts serving it
        later is seen after a restart."""
        if self.kind.versions:
            served = self._served()
            if served is None:  # stopped while asking
                return
            if not served.version:
                self._absent(served)
                return
            self.kind = self.kind.at(served.version)
            self.stats.version = served.api_version
            log.info("cluster view: watching %s at %s", self.kind.rbac, served.api_version)
        super().run()

    def _served(self) -> Served | None:
        """Where the API server serves this kind (None: stopped before it could tell)."""
        kind = self.kind
        while not self._stopping.is_set():
            try:
                return discover(self.kube, kind.group, kind.rbac, kind.versions, kind.related)
            except Exception as error:
                if self._stopping.is_set():
                    return None
                self._failed(error)
        return None

    def _absent(self, served: Served) -> None:
        self.stats.absent = True
        self.stats.synced = True
        self.stats.last_error = ""
        log.info("cluster view: %s; they are not watched", served.absent())
        self.on_synced(self.kind)
        self._stopping.wait()

    # -- list -------------------------------------------------------------------------------

    def _list_began(self) -> None:
        self._seen = set()
        self.stats.listed = 0

    def _list_page(self, items: list[Obj]) -> None:
        """Apply the page's objects whose resourceVersion the sink does not have yet."""
        changed = []
        for obj in items:
            key = self.kind.key_or_none(obj)
            if key is None:
                self._reject(obj, KeyError("no key"))
                continue
            self._seen.add(key)
            if self.sink.known_version(self.kind, key) != obj["metadata"].get("resourceVersion"):
                changed.append(obj)
        self.stats.listed += len(items)
        if changed:
            with collector_paused():
                self.sink.replace_page(self.kind, changed)

    def _list_ended(self) -> None:
        seen, self._seen = self._seen, set()
        self.sink.finish_relist(self.kind, seen)

    def _listed(self, seconds: float) -> None:
        self.stats.list_seconds = seconds
        if not self.stats.synced:
            log.info(
                "cluster view: listed %d %s in %.1fs",
                self.stats.listed,
                self.kind.name,
                self.stats.list_seconds,
            )
        self.stats.synced = True
        self.on_synced(self.kind)

    # -- watch ------------------------------------------------------------------------------

    def _apply(self, event_type: Any, obj: Any) -> None:
        """A bad object is rejected and skipped, never retried: the watch goes on from the
        event after it (re-watching from before it would replay it forever)."""
        if event_type == "BOOKMARK":
            self.stats.bookmarks += 1
        elif event_type not in ("ADDED", "MODIFIED", "DELETED"):
            self._reject(obj, ValueError(f"unknown watch event type {str(event_type)[:40]!r}"))
        elif self.kind.key_or_none(obj) is None:
            self._reject(obj, KeyError("no uid" if self.kind.name == "Pod" else "no name"))
        else:
            try:
                self.sink.apply_event(self.kind, str(event_type), obj)
            except Exception as error:
                self._reject(obj, error)
            else:
                self.stats.events += 1

    def _unreadable(self, obj: Any, error: Exception) -> None:
        self._reject(obj, error)

    def _reject(self, obj: Any, error: Exception) -> None:
        self.stats.rejected += 1
        try:
            self.sink.reject(self.kind, obj, error)
        except Exception:
            log.exception("cluster view could not record a rejected %s", self.kind.name)


def _error_event(status: Obj, call: Call) -> KubeCallError:
    """A watch ERROR event other than 410, as the error it stands for."""
    return classify_status(
        ApiStatus(
            int(status.get("code") or 500),
            str(status.get("reason") or ""),
            str(status.get("message") or ""),
            None,
        ),
        call,
    )


def _lines(response: Any) -> Iterator[bytes]:
    """Whole lines of a watch stream (urllib3 yields them as it decodes the chunks)."""
    for line in response:
        line = line.strip()
        if line:
            yield line

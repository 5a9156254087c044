"""What kube-scheduler preempted, read from its `Preempted` Events (shadow mode's other half).

Upstream's `prepareCandidate` records, on each victim, `Eventf(victim, preemptor, Normal,
"Preempted", "Preempting", "Preempted by pod %v on node %v", preemptor.UID, nodeName)`
(`pkg/scheduler/framework/preemption`); releases before the UID form wrote
`"Preempted by %v/%v on node %v"` with the preemptor's namespace and name. Both are parsed
(`parse_preempted`); the raw message is always kept.

`UpstreamRecorder` list+watches core/v1 Events with `fieldSelector=reason=Preempted` (an
indexed field on every API server, and on the emulator), resumes a dropped watch from the
last resourceVersion it handled, relists on 410 Gone (an HTTP 410 or a watch ERROR event
with code 410), and hands each parsed preemption to its sink (the ledger's idempotent append,
keyed by the Event's UID, so a relist, a restarted worker or a second replica records each
Event once). An Event that is not an upstream preemption (another reporter, another kind of
object, a message in neither form, a field of the wrong type) is skipped, counted and logged
once, never a crash: the watch goes on from the event after it. A sink that fails (the ledger
unreachable) stops the stream before that event's resourceVersion is taken, so the retry,
after a backoff, starts again from the first event not yet recorded.

`UpstreamIndex` remembers, in memory and bounded, which victims upstream preempted for which
preemptor, so that a dry-run decision made after upstream acted is made on the cluster as it
was before (`ShadowView`).

Why: kube-scheduler preempts in the same scheduling cycle that marks the pod Unschedulable
(which is what starts our dry run), so our decision usually comes after its victims are
already terminating (with DisruptionTarget/PreemptionByScheduler) on the node it nominated.
Planned on that cluster, the answer would be "Ineligible: a terminating pod on the nominated
node", exactly because upstream acted first, and nothing could be compared. A worker in
shadow mode therefore reads the cluster through `ShadowView`, which shows the victims named
by upstream's `Preempted` Events as not yet terminating. A victim already gone cannot be
shown; `preemptctl compare` reports such a late decision as "after-upstream", apart from
the disagreements.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import orjson

from preemptctl.kube.client import KubeClient
from preemptctl.kube.events import REPORTING_CONTROLLER
from preemptctl.kube.reflector import EVENT, Backoff, ListWatch, ListWatchStats
from preemptctl.kube.view import ClusterView
from preemptctl.preemption.objects import Pod
from preemptctl.preemption.snapshot import ClusterSnapshot
from preemptctl.preemption.upstream import UpstreamPreemption

log = logging.getLogger(__name__)

REASON = "Preempted"
FIELD_SELECTOR = f"reason={REASON}"

_BY_UID = re.compile(r"^Preempted by pod (?P<uid>[^\s/]+) on node (?P<node>\S+?)\.?$")
_BY_NAME = re.compile(
    r"^Preempted by (?P<namespace>[a-z0-9]([-a-z0-9]*[a-z0-9])?)/(?P<name>[^\s/]+)"
    r" on node (?P<node>\S+?)\.?$"
)
_MAX_NAME = 253
_MAX_UID = 64
_MAX_MESSAGE = 4096


class NotUpstreamPreemption(ValueError):
    """The Event is not one of kube-scheduler's `Preempted` Events, or cannot be read; the
    message says why."""


@dataclass(frozen=True, slots=True)
class PreemptedMessage:
    """What the message says: the preemptor (by UID, or by namespace and name) and node."""

    preemptor_uid: str | None
    preemptor_namespace: str | None
    preemptor_name: str | None
    node: str


def parse_message(message: str) -> PreemptedMessage | None:
    """`Preempted by pod <uid> on node <node>` or `Preempted by <ns>/<name> on node <node>`;
    None for anything else."""
    text = message.strip()
    found = _BY_UID.match(text)
    if found:
        return PreemptedMessage(found["uid"], None, None, found["node"])
    found = _BY_NAME.match(text)
    if found:
        return PreemptedMessage(None, found["namespace"], found["name"], found["node"])
    return None


def _text(obj: Any, *path: str) -> str | None:
    """A string field (None when missing); a present field of another type is refused."""
    value: Any = obj
    for part in path:
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise NotUpstreamPreemption(f"{'.'.join(path)} is a {type(value).__name__}, not text")
    return value.replace("\x00", "")


def _bounded(value: str | None, limit: int, what: str) -> str | None:
    if value is not None and len(value) > limit:
        raise NotUpstreamPreemption(f"{what} is longer than {limit} characters")
    return value


def _moment(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise NotUpstreamPreemption(f"unreadable time {text[:40]!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def parse_preempted(
    event: Any,
    *,
    observed_at: datetime,
    name_of: Callable[[str], tuple[str, str] | None] = lambda uid: None,
    uid_of: Callable[[str, str], str | None] = lambda namespace, name: None,
) -> UpstreamPreemption:
    """A core/v1 Event as the preemption it records; raises `NotUpstreamPreemption` for any
    other Event (or one preemptctl itself reported). `name_of(uid)` resolves a preemptor's
    namespace and name from the cluster view, `uid_of(ns, name)` the old form's UID."""
    if not isinstance(event, dict):
        raise NotUpstreamPreemption("not an object")
    if _text(event, "reason") != REASON:
        raise NotUpstreamPreemption(f"reason is {_text(event, 'reason')!r}, not {REASON!r}")
    reporter = _text(event, "reportingComponent") or _text(event, "source", "component")
    if reporter == REPORTING_CONTROLLER:
        raise NotUpstreamPreemption("reported by preemptctl, not by kube-scheduler")
    event_uid = _bounded(_text(event, "metadata", "uid"), _MAX_UID, "metadata.uid")
    if event_uid is None:
        raise NotUpstreamPreemption("no metadata.uid")
    involved = event.get("involvedObject")
    if not isinstance(involved, dict) or _text(involved, "kind") != "Pod":
        raise NotUpstreamPreemption("involvedObject is not a Pod")
    victim_name = _bounded(_text(involved, "name"), _MAX_NAME, "involvedObject.name")
    if victim_name is None:
        raise NotUpstreamPreemption("involvedObject has no name")
    victim_namespace = _bounded(
        _text(involved, "namespace") or _text(event, "metadata", "namespace") or "default",
        _MAX_NAME,
        "involvedObject.namespace",
    )
    assert victim_namespace is not None
    victim_uid = _bounded(_text(involved, "uid"), _MAX_UID, "involvedObject.uid")
    raw = _text(event, "message") or _text(event, "note")
    if raw is None:
        raise NotUpstreamPreemption("no message")
    said = parse_message(raw)
    if said is None:
        raise NotUpstreamPreemption(f"message in neither known form: {raw[:120]!r}")
    node = _bounded(said.node, _MAX_NAME, "node")
    related = event.get("related") if isinstance(event.get("related"), dict) else {}
    preemptor_uid = said.preemptor_uid or _text(related, "uid")
    namespace, name = said.preemptor_namespace, said.preemptor_name
    if preemptor_uid is not None and namespace is None:
        resolved = name_of(preemptor_uid)
        if resolved is not None:
            namespace, name = resolved
        elif _text(related, "uid") == preemptor_uid:
            namespace, name = _text(related, "namespace"), _text(related, "name")
    if preemptor_uid is None and namespace is not None and name is not None:
        preemptor_uid = uid_of(namespace, name)
    occurred = (
        _moment(_text(event, "eventTime"))
        or _moment(_text(event, "lastTimestamp"))
        or _moment(_text(event, "firstTimestamp"))
        or _moment(_text(event, "metadata", "creationTimestamp"))
        or observed_at
    )
    return UpstreamPreemption(
        event_uid=event_uid,
        occurred_at=occurred,
        victim_namespace=victim_namespace,
        victim_name=victim_name,
        victim_uid=victim_uid,
        preemptor_uid=_bounded(preemptor_uid, _MAX_UID, "preemptor uid") or "",
        preemptor_namespace=_bounded(namespace, _MAX_NAME, "preemptor namespace"),
        preemptor_name=_bounded(name, _MAX_NAME, "preemptor name"),
        node=node,
        message=raw[:_MAX_MESSAGE],
    )


# -- the index the dry-run planner reads ---------------------------------------------------------


class UpstreamIndex:
    """Which victims (by UID) upstream preempted, for the latest `capacity` preemptors;
    thread-safe (the recorder adds, the dry run's reads read)."""

    def __init__(self, capacity: int = 2_000) -> None:
        self._capacity = capacity
        # preemptor uid -> its victims' uids, the least recently added preemptor first
        self._by_preemptor: OrderedDict[str, set[str]] = OrderedDict()
        self._victims: set[str] = set()
        self._lock = threading.Lock()

    def add(self, preemption: UpstreamPreemption) -> None:
        if not preemption.preemptor_uid or not preemption.victim_uid:
            return
        with self._lock:
            victims = self._by_preemptor.pop(preemption.preemptor_uid, set())
            victims.add(preemption.victim_uid)
            self._by_preemptor[preemption.preemptor_uid] = victims
            self._victims.add(preemption.victim_uid)
            while len(self._by_preemptor) > self._capacity:
                _, forgotten = self._by_preemptor.popitem(last=False)
                self._victims.difference_update(forgotten)

    def victims(self) -> list[str]:
        """Every victim's UID, of every preemptor remembered."""
        with self._lock:
            return list(self._victims)

    def forget_victims(self, uids: Sequence[str]) -> None:
        """Stop showing these victims (gone from the cluster: nothing left to undo)."""
        with self._lock:
            self._victims.difference_update(uids)


def undoing_all_upstream(snapshot: ClusterSnapshot, index: UpstreamIndex) -> list[Pod]:
    """Show every victim upstream is preempting (by the index) as not terminating; returns
    the pods replaced, for `snapshot.upsert_pod` to put back. Victims no longer in the
    snapshot are forgotten, so the work per read stays with the victims still terminating."""
    changed = []
    gone = []
    for uid in index.victims():
        pod = snapshot.pods.get(uid)
        if pod is None:
            gone.append(uid)
        elif pod.terminating:
            changed.append(pod)
            snapshot.upsert_pod(replace(pod, terminating=False, disrupted_by_scheduler=False))
    if gone:
        index.forget_victims(gone)
    return changed


class ShadowView(ClusterView):
    """The cluster view of a worker in shadow mode: every read shows the victims kube-scheduler
    is preempting (named by its `Preempted` Events, gathered in `upstream`) as still running,
    so that our dry run decides as if it had been first. The view's own state is unchanged:
    the victims are put back as they are when the read ends."""

    def __init__(self, kube: KubeClient, upstream: UpstreamIndex, **options: Any) -> None:
        super().__init__(kube, **options)
        self.upstream = upstream

    @contextmanager
    def read(self) -> Iterator[ClusterSnapshot]:
        with super().read() as snapshot:
            changed = undoing_all_upstream(snapshot, self.upstream)
            try:
                yield snapshot
            finally:
                for pod in changed:
                    snapshot.upsert_pod(pod)


# -- the recorder ---------------------------------------------------------------------------------

Sink = Callable[[Sequence[UpstreamPreemption]], int]


@dataclass
class RecorderStats(ListWatchStats):
    seen: int = 0
    recorded: int = 0  # new rows the sink reported
    skipped: int = 0


class UpstreamRecorder(ListWatch[RecorderStats]):
    """List+watch `Preempted` Events and hand each upstream preemption to `sink` (which
    returns how many were new). `run` blocks until `stop`; run it in a thread of its own
    (a supervisor's `spawn_thread`). The loop is the reflector's (`ListWatch`): a sink that
    raises ends the stream before the event's resourceVersion is taken."""

    _log = log

    def __init__(
        self,
        kube: KubeClient,
        sink: Sink,
        *,
        name_of: Callable[[str], tuple[str, str] | None] = lambda uid: None,
        uid_of: Callable[[str, str], str | None] = lambda namespace, name: None,
        index: UpstreamIndex | None = None,
        page_size: int = 500,
        watch_timeout: int = 300,
        backoff: Backoff | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        super().__init__(
            kube,
            EVENT,
            field_selector=FIELD_SELECTOR,
            what="Preempted events",
            label="upstream preemption recorder",
            page_size=page_size,
            watch_timeout=watch_timeout,
            backoff=backoff,
        )
        self.stats = RecorderStats()
        self.sink = sink
        self.name_of = name_of
        self.uid_of = uid_of
        self.index = index
        self.clock = clock
        self._said: set[str] = set()  # skip reasons already logged at warning level

    def _list_page(self, items: list[Any]) -> None:
        self._record([p for p in map(self._parse, items) if p is not None])

    def _apply(self, event_type: Any, obj: Any) -> None:
        if event_type in ("ADDED", "MODIFIED"):
            found = self._parse(obj)
            if found is not None:
                self._record([found])  # raises before the RV moves: resumed from here
        elif event_type not in ("DELETED", "BOOKMARK"):
            self._skip(f"unknown watch event type {str(event_type)[:40]!r}", obj)

    def _unreadable(self, obj: Any, error: Exception) -> None:
        not_json = isinstance(error, orjson.JSONDecodeError)
        self._skip("a watch line that is not JSON" if not_json else str(error), obj)

    def _parse(self, obj: Any) -> UpstreamPreemption | None:
        self.stats.seen += 1
        try:
            return parse_preempted(
                obj, observed_at=self.clock(), name_of=self.name_of, uid_of=self.uid_of
            )
        except NotUpstreamPreemption as why:
            self._skip(str(why), obj)
            return None

    def _record(self, found: Sequence[UpstreamPreemption]) -> None:
        if not found:
            return
        self.stats.recorded += self.sink(found)
        if self.index is not None:
            for preemption in found:
                self.index.add(preemption)

    def _skip(self, why: str, obj: Any = None) -> None:
        self.stats.skipped += 1
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        name = meta.get("name") if isinstance(meta, dict) else None
        level = logging.DEBUG if why in self._said else logging.WARNING
        if len(self._said) < 1000:
            self._said.add(why)
        log.log(level, "skipping Event %s: %s", str(name)[:253] if name else "(unnamed)", why)

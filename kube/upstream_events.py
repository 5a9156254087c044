"""What kube-scheduler preempted, read from its `Preempted` Events (shadow mode's other half).

Upstream's `PreemptPod` (`pkg/scheduler/framework/preemption/executor.go`) marks each victim
`DisruptionTarget` (reason `PreemptionByScheduler`, through pods/status), deletes it, then
records on it `Eventf(victim, preemptor.Obj(), Normal, "Preempted", "Preempting", "Preempted
by %s %v on node %v", preemptor.Type(), preemptor.UID(), candidate.Name())` with the recorder
of the scheduler profile that preempted: the Event's reporting controller (core/v1
`reportingComponent`; `source.component` from the legacy recorder) is the profile's scheduler
name. The type is `pod`, or `podgroup` when workload-aware preemption (KEP-5710,
`PodGroupPostFilter`) preempted for a PodGroup: then the related object is the PodGroup and
the "node" is the domain the whole group was placed in, `cluster` (its victims are on any
node; the row keeps no node). Releases before the UID form wrote `"Preempted by %v/%v on
node %v"` with the preemptor's namespace and name. All three are parsed (`parse_preempted`);
the raw message is always kept, and says the preemptor's type (`preempted_by_group`).

Who may be believed. Anyone who may create Events in a namespace can write one that says
`Preempted`, with any reporter and any text, so an Event is taken as kube-scheduler's only
when all of this holds (each refusal is counted by its `Skip` reason, never a crash):

- it is reported by one of the configured scheduler names (`reporters`, the worker's
  `scheduler_names`), and not by preemptctl;
- it lives in its victim's namespace (upstream records it on the victim), so a tenant's
  Event can name only that tenant's pods;
- its names are names Kubernetes accepts (DNS-1123, `preemption.names`), its times
  readable; a pod group's Event is related to a PodGroup, if to anything;
- the cluster bears it out: the victim, by name, is the pod with the Event's victim UID, is
  bound to the Event's node (for a pod group's, to some node) and carries
  `DisruptionTarget=True` with reason `PreemptionByScheduler`, a condition written through
  pods/status, which tenants cannot write (`corroboration`). A victim already gone when the
  Event is read is confirmed by the `DisruptionWitness`, when the cluster view's pod watch
  saw it so marked before it went (it is marked before it is deleted); otherwise the Event
  cannot be confirmed and is counted `unconfirmed`, not recorded;
- its victim was not already recorded from another Event (upstream reports a victim once):
  a second Event on a victim is counted `victim-known` (here for the victims recorded since
  the recorder started, and by the ledger's write for those recorded before);
- the victim's namespace has not used its rows for the hour (the ledger's write enforces
  the cap; what is over it is counted `over-cap`).

What stays possible: a tenant whose own pod kube-scheduler really preempted can race the
scheduler's Event with one naming another preemptor; it is then that pod's one row, in that
tenant's namespace.

`UpstreamRecorder` list+watches core/v1 Events with `fieldSelector=reason=Preempted` (an
indexed field on every API server, and on the emulator), resumes a dropped watch from the
last resourceVersion it handled, relists on 410 Gone (an HTTP 410 or a watch ERROR event
with code 410), and hands each confirmed preemption to its sink (the ledger's idempotent
append, keyed by the Event's UID, so a relist, a restarted worker or a second replica
records each Event once). Any failure to read an Event (a field of the wrong type, a time
out of range, whatever the parser raises) skips that Event, counted and logged once per
reason: the watch goes on from the event after it. A sink that fails (the ledger
unreachable), or an API server that does not answer the victim's look-up, stops the stream
before that event's resourceVersion is taken, so the retry, after a backoff, starts again
from the first event not yet recorded.

`UpstreamIndex` remembers, in memory and bounded, which victims upstream preempted for which
preemptor, so that a dry-run decision made after upstream acted is made on the cluster as it
was before (`ShadowView`). Only confirmed victims enter it (as soon as they are confirmed,
before the ledger's write), so no Event can make a running pod read as running forever.

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
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

import orjson

from preemptctl.kube.client import KubeClient
from preemptctl.kube.conditions import DISRUPTION_TARGET, PREEMPTION_BY_SCHEDULER
from preemptctl.kube.events import REPORTING_CONTROLLER
from preemptctl.kube.pods import Presence, get_pod
from preemptctl.kube.reflector import EVENT, POD, Backoff, ListWatch, ListWatchStats
from preemptctl.kube.results import KubeCallError
from preemptctl.kube.view import ClusterView
from preemptctl.preemption.decision import PodRef
from preemptctl.preemption.names import NameKind, shown
from preemptctl.preemption.objects import Pod
from preemptctl.preemption.snapshot import ClusterSnapshot
from preemptctl.preemption.upstream import UpstreamPreemption

log = logging.getLogger(__name__)

REASON = "Preempted"
FIELD_SELECTOR = f"reason={REASON}"
DEFAULT_SCHEDULER = "default-scheduler"

BY_POD = "pod"  # upstream's `ExecutorPreemptor.Type()` for a pod
BY_POD_GROUP = "podgroup"  # ... and for a PodGroup (workload-aware preemption)
POD_GROUP_KIND = "PodGroup"

_UID = re.compile(r"[A-Za-z0-9][-A-Za-z0-9_.:]{0,63}")
_BY_UID = re.compile(
    r"^Preempted by (?P<type>pod|podgroup) (?P<uid>[^\s/]+) on node (?P<node>\S+?)\.?$"
)
_BY_NAME = re.compile(
    r"^Preempted by (?P<namespace>[a-z0-9]([-a-z0-9]*[a-z0-9])?)/(?P<name>[^\s/]+)"
    r" on node (?P<node>\S+?)\.?$"
)
_MAX_MESSAGE = 4096


class Skip(StrEnum):
    """Why an Event was left out; the recorder counts each (`RecorderStats.skipped_by`)."""

    UNREADABLE = "unreadable"  # not an upstream preemption we can read, or a parse failure
    OURS = "ours"  # reported by preemptctl itself
    UNTRUSTED_REPORTER = "untrusted-reporter"  # reported by no configured scheduler name
    OTHER_NAMESPACE = "other-namespace"  # the Event is not in its victim's namespace
    REFUTED = "refuted"  # the victim is there, and not marked by the scheduler on that node
    UNCONFIRMED = "unconfirmed"  # the victim is gone and was never seen marked
    VICTIM_KNOWN = "victim-known"  # another Event already recorded this victim
    OVER_CAP = "over-cap"  # the victim's namespace has used its rows for the hour


class NotUpstreamPreemption(ValueError):
    """The Event is not one of kube-scheduler's `Preempted` Events, or cannot be read; the
    message says why, `skip` files it."""

    def __init__(self, message: str, skip: Skip = Skip.UNREADABLE) -> None:
        super().__init__(message)
        self.skip = skip


@dataclass(frozen=True, slots=True)
class PreemptedMessage:
    """What the message says: the preemptor (by UID, or by namespace and name), its type
    (`pod` or `podgroup`) and where: a node, or for a pod group the domain it was placed
    in (`cluster`)."""

    preemptor_uid: str | None
    preemptor_namespace: str | None
    preemptor_name: str | None
    node: str
    preemptor_type: str = BY_POD

    @property
    def by_group(self) -> bool:
        return self.preemptor_type == BY_POD_GROUP


def parse_message(message: str) -> PreemptedMessage | None:
    """`Preempted by pod <uid> on node <node>`, `Preempted by podgroup <uid> on node
    <domain>` or `Preempted by <ns>/<name> on node <node>`; None for anything else."""
    text = message.strip()
    found = _BY_UID.match(text)
    if found:
        return PreemptedMessage(found["uid"], None, None, found["node"], found["type"])
    found = _BY_NAME.match(text)
    if found:
        return PreemptedMessage(None, found["namespace"], found["name"], found["node"])
    return None


def preempted_by_group(message: str) -> bool:
    """Whether a recorded Event's message (`UpstreamPreemption.message`) tells a pod group's
    preemption: the row keeps the message whole, and its form says the preemptor's type."""
    said = parse_message(message)
    return said is not None and said.by_group


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


def _named(value: str | None, kind: NameKind, what: str) -> str | None:
    """`value` when Kubernetes would accept it as a `kind` (`preemption.names`: DNS-1123,
    upstream's rules and limits); None stays None."""
    if value is None:
        return None
    errors = kind.errors(value)
    if errors:
        raise NotUpstreamPreemption(f"{what} {shown(value)} is not a valid name: {errors[0]}")
    return value


def _namespace(value: str | None, what: str) -> str | None:
    return _named(value, NameKind.NAMESPACE, what)


def _name(value: str | None, what: str, kind: NameKind = NameKind.POD) -> str | None:
    return _named(value, kind, what)


def _uid(value: str | None, what: str) -> str | None:
    """A UID as the Event names one: up to 64 characters of what a UID is made of."""
    if value is None:
        return None
    if not _UID.fullmatch(value):
        raise NotUpstreamPreemption(f"{what} {shown(value)} is not a valid uid")
    return value


def _moment(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.astimezone(UTC)
    except (ValueError, OverflowError):  # e.g. year 1 with a positive UTC offset
        raise NotUpstreamPreemption(f"unreadable time {text[:40]!r}") from None


def _reporter(event: dict[str, Any], reporters: Collection[str]) -> str:
    """The scheduler name that reported the Event; refused unless it is one of `reporters`.
    The events.k8s.io recorder fills `reportingComponent`, the legacy one `source.component`;
    when both are given they must agree."""
    named = {
        name
        for name in (_text(event, "reportingComponent"), _text(event, "source", "component"))
        if name is not None
    }
    if REPORTING_CONTROLLER in named:
        raise NotUpstreamPreemption("reported by preemptctl, not by kube-scheduler", Skip.OURS)
    if len(named) != 1 or not named <= set(reporters):
        shown = ", ".join(sorted(repr(n[:80]) for n in named)) or "no reporter"
        raise NotUpstreamPreemption(
            f"reported by {shown}, not by a configured scheduler ({', '.join(reporters)})",
            Skip.UNTRUSTED_REPORTER,
        )
    return named.pop()


def parse_preempted(
    event: Any,
    *,
    observed_at: datetime,
    reporters: Collection[str] = (DEFAULT_SCHEDULER,),
    name_of: Callable[[str], tuple[str, str] | None] = lambda uid: None,
    uid_of: Callable[[str, str], str | None] = lambda namespace, name: None,
) -> UpstreamPreemption:
    """A core/v1 Event as the preemption it claims; raises `NotUpstreamPreemption` for any
    Event that is not one a scheduler named in `reporters` could have written. What it cannot
    check, whether the cluster bears the Event out, is `corroboration`'s. `name_of(uid)`
    resolves a preemptor's namespace and name from the cluster view, `uid_of(ns, name)` the
    old form's UID. An Event said to occur after `observed_at` is taken at `observed_at`."""
    if not isinstance(event, dict):
        raise NotUpstreamPreemption("not an object")
    if _text(event, "reason") != REASON:
        raise NotUpstreamPreemption(f"reason is {_text(event, 'reason')!r}, not {REASON!r}")
    _reporter(event, reporters)
    event_uid = _uid(_text(event, "metadata", "uid"), "metadata.uid")
    if event_uid is None:
        raise NotUpstreamPreemption("no metadata.uid")
    involved = event.get("involvedObject")
    if not isinstance(involved, dict) or _text(involved, "kind") != "Pod":
        raise NotUpstreamPreemption("involvedObject is not a Pod")
    victim_name = _name(_text(involved, "name"), "involvedObject.name")
    if victim_name is None:
        raise NotUpstreamPreemption("involvedObject has no name")
    event_namespace = _namespace(_text(event, "metadata", "namespace"), "metadata.namespace")
    if event_namespace is None:
        raise NotUpstreamPreemption("no metadata.namespace")
    victim_namespace = _namespace(_text(involved, "namespace"), "involvedObject.namespace")
    if victim_namespace is not None and victim_namespace != event_namespace:
        raise NotUpstreamPreemption(
            f"an Event in namespace {event_namespace!r} about a pod in {victim_namespace!r}",
            Skip.OTHER_NAMESPACE,
        )
    victim_uid = _uid(_text(involved, "uid"), "involvedObject.uid")
    if victim_uid is None:
        raise NotUpstreamPreemption("involvedObject has no uid")
    raw = _text(event, "message") or _text(event, "note")
    if raw is None:
        raise NotUpstreamPreemption("no message")
    said = parse_message(raw)
    if said is None:
        raise NotUpstreamPreemption(f"message in neither known form: {raw[:120]!r}")
    related = event.get("related") if isinstance(event.get("related"), dict) else {}
    if said.by_group:
        # Placed over a domain ("cluster"), its victims on any node: no node to record.
        _name(said.node, "domain", NameKind.NODE)
        node = None
        related_kind = _text(related, "kind")
        if related_kind not in (None, POD_GROUP_KIND):
            raise NotUpstreamPreemption(
                f"a pod group's preemption related to a {shown(related_kind)}, not a PodGroup"
            )
    else:
        node = _name(said.node, "node", NameKind.NODE)
    related_uid = _uid(_text(related, "uid"), "related.uid")
    if said.preemptor_uid is not None and related_uid not in (None, said.preemptor_uid):
        raise NotUpstreamPreemption("related.uid is not the preemptor the message names")
    preemptor_uid = _uid(said.preemptor_uid or related_uid, "preemptor uid")
    namespace, name = said.preemptor_namespace, said.preemptor_name
    if preemptor_uid is not None and namespace is None:
        resolved = None if said.by_group else name_of(preemptor_uid)
        if resolved is not None:
            namespace, name = resolved
        elif related_uid == preemptor_uid:
            namespace, name = _text(related, "namespace"), _text(related, "name")
    namespace = _namespace(namespace, "preemptor namespace")
    name = _name(name, "preemptor name", NameKind.POD_GROUP if said.by_group else NameKind.POD)
    if preemptor_uid is None and namespace is not None and name is not None:
        preemptor_uid = _uid(uid_of(namespace, name), "preemptor uid")
    occurred = (
        _moment(_text(event, "eventTime"))
        or _moment(_text(event, "lastTimestamp"))
        or _moment(_text(event, "firstTimestamp"))
        or _moment(_text(event, "metadata", "creationTimestamp"))
        or observed_at
    )
    return UpstreamPreemption(
        event_uid=event_uid,
        occurred_at=min(occurred, observed_at),
        victim_namespace=event_namespace,
        victim_name=victim_name,
        victim_uid=victim_uid,
        preemptor_uid=preemptor_uid or "",
        preemptor_namespace=namespace,
        preemptor_name=name,
        node=node,
        message=raw[:_MAX_MESSAGE],
    )


# -- corroboration: does the cluster bear the Event out? ------------------------------------------


@dataclass(frozen=True, slots=True)
class VictimSeen:
    """A pod as the cluster showed it, as far as an Event about it can be checked."""

    namespace: str
    name: str
    uid: str
    node: str
    marked: bool  # DisruptionTarget=True, reason PreemptionByScheduler (pods/status only)


def victim_seen(pod: Any) -> VictimSeen | None:
    """What `pod` (a core/v1 Pod as JSON) shows; None when it is not readable as a pod."""
    if not isinstance(pod, dict):
        return None
    meta, spec, status = (pod.get(part) for part in ("metadata", "spec", "status"))
    if not isinstance(meta, dict):
        return None
    uid, namespace, name = meta.get("uid"), meta.get("namespace"), meta.get("name")
    if not (isinstance(uid, str) and isinstance(namespace, str) and isinstance(name, str)):
        return None
    node = spec.get("nodeName") if isinstance(spec, dict) else None
    conditions = status.get("conditions") if isinstance(status, dict) else None
    marked = isinstance(conditions, list) and any(
        isinstance(condition, dict)
        and condition.get("type") == DISRUPTION_TARGET
        and condition.get("status") == "True"
        and condition.get("reason") == PREEMPTION_BY_SCHEDULER
        for condition in conditions
    )
    return VictimSeen(namespace, name, uid, node if isinstance(node, str) else "", marked)


def corroboration(found: UpstreamPreemption, seen: VictimSeen | None) -> tuple[Skip, str] | None:
    """Why the cluster does not bear `found` out, given the pod now under the victim's name
    (or as the witness last saw it); None when it does."""
    if seen is None:
        return Skip.UNCONFIRMED, "the victim is gone and was not seen marked by the scheduler"
    if seen.uid != found.victim_uid or (seen.namespace, seen.name) != (
        found.victim_namespace,
        found.victim_name,
    ):
        return Skip.UNCONFIRMED, "the victim's name now holds another pod"
    if not seen.marked:
        return (
            Skip.REFUTED,
            "the victim carries no DisruptionTarget of reason PreemptionByScheduler",
        )
    if found.node is None:  # a pod group's: its victims may be on any node, but on one
        if not seen.node:
            return Skip.REFUTED, "the victim is bound to no node"
    elif seen.node != found.node:
        return Skip.REFUTED, "the victim is not bound to the Event's node"
    return None


class DisruptionWitness:
    """The latest `capacity` pods the cluster view's pod watch showed marked
    `DisruptionTarget`/`PreemptionByScheduler`, by UID: the scheduler marks a victim before it
    deletes it, so an Event read after its victim is gone can still be confirmed. `saw` is a
    view listener (`ClusterView.subscribe`); thread-safe."""

    def __init__(self, capacity: int = 10_000) -> None:
        self._capacity = capacity
        self._seen: OrderedDict[str, VictimSeen] = OrderedDict()
        self._lock = threading.Lock()

    def saw(self, event_type: str, kind: str, obj: Any) -> None:
        if kind != POD.name:
            return
        seen = victim_seen(obj)
        if seen is None or not seen.marked:
            return
        with self._lock:
            self._seen.pop(seen.uid, None)
            self._seen[seen.uid] = seen
            while len(self._seen) > self._capacity:
                self._seen.popitem(last=False)

    def get(self, uid: str) -> VictimSeen | None:
        with self._lock:
            return self._seen.get(uid)


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


class Appended(Protocol):
    """What the sink did with a batch: how many rows were new, and which Events (by UID) it
    left out, and why (`ledger.upstream.append_upstream` answers this)."""

    @property
    def recorded(self) -> int: ...

    @property
    def over_cap(self) -> Collection[str]: ...

    @property
    def victim_known(self) -> Collection[str]: ...


Sink = Callable[[Sequence[UpstreamPreemption]], Appended]


@dataclass
class RecorderStats(ListWatchStats):
    seen: int = 0
    recorded: int = 0  # new rows the sink reported
    skipped: int = 0  # left out, for any reason: the sum of `skipped_by`
    skipped_by: dict[str, int] = field(default_factory=lambda: dict.fromkeys(Skip, 0))


class UpstreamRecorder(ListWatch[RecorderStats]):
    """List+watch `Preempted` Events, believe only those `parse_preempted` and
    `corroboration` accept, and hand each to `sink`. `run` blocks until `stop`; run it in a
    thread of its own (a supervisor's `spawn_thread`). The loop is the reflector's
    (`ListWatch`): a sink that raises, or a victim look-up the API server fails (retryably),
    ends the stream before the event's resourceVersion is taken.

    `reporters` are the scheduler names whose Events are believed (the worker's
    `scheduler_names`); `witness` remembers victims the view saw marked (without one, a
    victim gone before its Event is read cannot be confirmed)."""

    _log = log

    def __init__(
        self,
        kube: KubeClient,
        sink: Sink,
        *,
        reporters: Collection[str] = (DEFAULT_SCHEDULER,),
        name_of: Callable[[str], tuple[str, str] | None] = lambda uid: None,
        uid_of: Callable[[str, str], str | None] = lambda namespace, name: None,
        index: UpstreamIndex | None = None,
        witness: DisruptionWitness | None = None,
        victims_remembered: int = 10_000,
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
        self.reporters = tuple(reporters)
        self.name_of = name_of
        self.uid_of = uid_of
        self.index = index
        self.witness = witness
        self.clock = clock
        # victim uid -> the Event UID recorded for it, the least recently recorded first
        self._victims: OrderedDict[str, str] = OrderedDict()
        self._victims_remembered = victims_remembered
        self._said: set[str] = set()  # skip reasons already logged at warning level

    def _list_page(self, items: list[Any]) -> None:
        self._record([p for p in map(self._admit, items) if p is not None])

    def _apply(self, event_type: Any, obj: Any) -> None:
        if event_type in ("ADDED", "MODIFIED"):
            found = self._admit(obj)
            if found is not None:
                self._record([found])  # raises before the RV moves: resumed from here
        elif event_type not in ("DELETED", "BOOKMARK"):
            self._skip(Skip.UNREADABLE, f"unknown watch event type {str(event_type)[:40]!r}", obj)

    def _unreadable(self, obj: Any, error: Exception) -> None:
        not_json = isinstance(error, orjson.JSONDecodeError)
        self._skip(
            Skip.UNREADABLE, "a watch line that is not JSON" if not_json else str(error), obj
        )

    def _admit(self, obj: Any) -> UpstreamPreemption | None:
        """The preemption `obj` records, if it is to be believed; else None, counted."""
        self.stats.seen += 1
        try:
            found = parse_preempted(
                obj,
                observed_at=self.clock(),
                reporters=self.reporters,
                name_of=self.name_of,
                uid_of=self.uid_of,
            )
        except NotUpstreamPreemption as why:
            self._skip(why.skip, str(why), obj)
            return None
        except Exception as error:  # any parse failure: this Event is skipped, never retried
            self._skip(Skip.UNREADABLE, f"unreadable ({type(error).__name__}): {error}", obj)
            return None
        assert found.victim_uid is not None  # the parser refuses an Event without it
        recorded = self._victims.get(found.victim_uid)
        if recorded is not None and recorded != found.event_uid:
            self._skip(Skip.VICTIM_KNOWN, "its victim was recorded from another Event", obj)
            return None
        refused = self._corroborate(found)
        if refused is not None:
            self._skip(*refused, obj)
            return None
        if self.index is not None:
            # Now, not once the ledger has the row: the dry run reads the cluster as it was
            # from this moment on, and the ledger's write (and its cap) is about rows only.
            self.index.add(found)
        return found

    def _corroborate(self, found: UpstreamPreemption) -> tuple[Skip, str] | None:
        """`corroboration` against what the witness saw, else against the pod the API server
        has now under the victim's name. A look-up that may succeed later raises (the stream
        is retried from this Event); one that cannot (RBAC) leaves the Event unconfirmed."""
        assert found.victim_uid is not None
        witnessed = self.witness.get(found.victim_uid) if self.witness is not None else None
        if witnessed is not None and corroboration(found, witnessed) is None:
            return None
        ref = PodRef(found.victim_namespace, found.victim_name, found.victim_uid)
        try:
            lookup = get_pod(self.kube, ref)
        except KubeCallError as error:
            if error.retryable:
                raise
            return Skip.UNCONFIRMED, f"the victim could not be read: {error.message}"
        seen = victim_seen(lookup.pod) if lookup.presence is not Presence.GONE else None
        return corroboration(found, seen)

    def _record(self, found: Sequence[UpstreamPreemption]) -> None:
        if not found:
            return
        appended = self.sink(found)
        self.stats.recorded += appended.recorded
        for preemption in found:
            if preemption.event_uid in appended.over_cap:
                self._skip(Skip.OVER_CAP, "its namespace has used its rows for the hour")
            elif preemption.event_uid in appended.victim_known:
                self._skip(Skip.VICTIM_KNOWN, "its victim was recorded from another Event")
            else:
                self._remember(preemption)

    def _remember(self, preemption: UpstreamPreemption) -> None:
        if preemption.victim_uid is not None:
            self._victims.pop(preemption.victim_uid, None)
            self._victims[preemption.victim_uid] = preemption.event_uid
            while len(self._victims) > self._victims_remembered:
                self._victims.popitem(last=False)

    def _skip(self, skip: Skip, why: str, obj: Any = None) -> None:
        self.stats.skipped += 1
        self.stats.skipped_by[skip] += 1
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        name = meta.get("name") if isinstance(meta, dict) else None
        namespace = meta.get("namespace") if isinstance(meta, dict) else None
        level = logging.DEBUG if why in self._said else logging.WARNING
        if len(self._said) < 1000:
            self._said.add(why)
        # repr: the name and the reason may carry a tenant's text; never a raw control byte
        shown = f"{str(namespace)[:63]}/{str(name)[:253]}" if name else "(unnamed)"
        log.log(level, "skipping Event %r (%s): %r", shown, skip, why[:300])

"""kube-scheduler's `Preempted` Events, parsed and recorded (shadow mode).

Scenarios, the parser:
- `Preempted by pod <uid> on node <node>` gives the preemptor's UID and the node; its
  namespace and name come from the cluster view when it knows the UID;
- the older `Preempted by <ns>/<name> on node <node>` gives namespace and name; the UID comes
  from the view when it knows the pod, else stays "";
- the Event's time is its eventTime, else lastTimestamp, else when it was observed; the raw
  message is kept;
- junk is refused with a reason: another reason, another message, an Event on a Node, no
  uid, a field of the wrong type, an over-long name, an Event preemptctl itself reported.

The index and the dry-run snapshot:
- the index gathers the victims of the latest `capacity` preemptors, forgets the oldest
  preemptor's past it, and forgets victims gone from the cluster;
- a `ShadowView` over the emulator shows every victim upstream's Events name as still
  running, in each read, while its own state keeps them terminating; a victim gone from
  the cluster is forgotten.

The recorder, against the emulator over HTTP:
- it lists the Events already there, then records new ones from its watch, skipping hand
  made junk without stopping;
- idempotent across a watch restart and across a relist after 410 Gone: the sink is offered
  an Event again, and the ledger's key keeps one row (here: the set of UIDs);
- a sink that fails is retried from the same Event, which is then recorded.

The recorder, against a scripted API server:
- it lists in pages and watches, both narrowed to `reason=Preempted`, and resumes from the
  last event's resourceVersion;
- junk on the watch (a line that is not JSON, an event that is not an object, an unknown
  event type, a message in neither form) is skipped and counted, each reason warned of once;
- a watch ERROR other than 410 is counted as an error, with the API server's message.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from preemptctl.emulator import Emulator
from preemptctl.emulator.resources import EVENTS
from preemptctl.kube.client import KubeClient
from preemptctl.kube.reflector import Backoff
from preemptctl.kube.upstream_events import (
    NotUpstreamPreemption,
    ShadowView,
    UpstreamIndex,
    UpstreamPreemption,
    UpstreamRecorder,
    parse_preempted,
)
from preemptctl.kube.view import ClusterView
from tests.support.emulator import as_list, node, pod

OBSERVED = datetime(2026, 11, 24, 7, 0, tzinfo=UTC)


def _event(
    message: str = "Preempted by pod uid-urgent on node n1",
    *,
    victim: str = "low-a",
    uid: str = "event-1",
    **fields: Any,
) -> dict[str, Any]:
    event: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{victim}.abc", "namespace": "default", "uid": uid},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": "default",
            "name": victim,
            "uid": f"uid-{victim}",
        },
        "reason": "Preempted",
        "type": "Normal",
        "message": message,
        "reportingComponent": "default-scheduler",
        "eventTime": "2026-11-24T06:59:58.123456Z",
    }
    event.update(fields)
    return event


# -- the parser -----------------------------------------------------------------------------------


def test_the_uid_form_names_preemptor_and_node_and_the_view_names_the_pod() -> None:
    parsed = parse_preempted(
        _event(),
        observed_at=OBSERVED,
        name_of=lambda uid: ("prod", "urgent") if uid == "uid-urgent" else None,
    )
    assert parsed == UpstreamPreemption(
        event_uid="event-1",
        occurred_at=datetime(2026, 11, 24, 6, 59, 58, 123456, tzinfo=UTC),
        victim_namespace="default",
        victim_name="low-a",
        victim_uid="uid-low-a",
        preemptor_uid="uid-urgent",
        preemptor_namespace="prod",
        preemptor_name="urgent",
        node="n1",
        message="Preempted by pod uid-urgent on node n1",
    )


def test_the_uid_form_falls_back_to_the_related_object_for_the_name() -> None:
    related = {"kind": "Pod", "namespace": "prod", "name": "urgent", "uid": "uid-urgent"}
    parsed = parse_preempted(_event(related=related), observed_at=OBSERVED)
    assert (parsed.preemptor_namespace, parsed.preemptor_name) == ("prod", "urgent")


def test_an_unknown_preemptor_keeps_its_uid_and_no_name() -> None:
    parsed = parse_preempted(_event(), observed_at=OBSERVED)
    assert (parsed.preemptor_uid, parsed.preemptor_key) == ("uid-urgent", None)


def test_the_older_form_names_the_preemptor_and_the_view_gives_its_uid() -> None:
    parsed = parse_preempted(
        _event("Preempted by prod/urgent on node n2"),
        observed_at=OBSERVED,
        uid_of=lambda ns, name: "uid-urgent" if (ns, name) == ("prod", "urgent") else None,
    )
    assert (parsed.preemptor_uid, parsed.preemptor_key, parsed.node) == (
        "uid-urgent",
        "prod/urgent",
        "n2",
    )


def test_the_older_form_for_a_pod_the_view_does_not_know_keeps_an_empty_uid() -> None:
    parsed = parse_preempted(_event("Preempted by prod/urgent on node n2"), observed_at=OBSERVED)
    assert (parsed.preemptor_uid, parsed.preemptor_key) == ("", "prod/urgent")


def test_the_time_is_the_last_timestamp_without_an_event_time_else_the_observation() -> None:
    older = _event(eventTime=None, lastTimestamp="2026-11-24T06:00:00Z")
    assert parse_preempted(older, observed_at=OBSERVED).occurred_at == datetime(
        2026, 11, 24, 6, 0, tzinfo=UTC
    )
    bare = _event(eventTime=None)
    assert parse_preempted(bare, observed_at=OBSERVED).occurred_at == OBSERVED


@pytest.mark.parametrize(
    ("event", "why"),
    [
        (_event(reason="Killing"), "reason"),
        (_event("Preempted because the node is full"), "neither known form"),
        (_event("Preempted by pod  on node n1"), "neither known form"),
        (_event(involvedObject={"kind": "Node", "name": "n1"}), "not a Pod"),
        (_event(metadata={"name": "x", "namespace": "default"}), "no metadata.uid"),
        (_event(type="Normal", reportingComponent=7), "not text"),
        (_event(involvedObject={"kind": "Pod", "name": "x" * 300}), "longer than"),
        (_event(reportingComponent="preemptctl"), "preemptctl"),
        (_event(eventTime="yesterday"), "unreadable time"),
        ("not an event", "not an object"),
    ],
)
def test_junk_is_refused_with_a_reason(event: Any, why: str) -> None:
    with pytest.raises(NotUpstreamPreemption, match=why):
        parse_preempted(event, observed_at=OBSERVED)


# -- the index and the dry-run snapshot ------------------------------------------------------------


def _upstream(victim: str, event_uid: str) -> UpstreamPreemption:
    return parse_preempted(_event(victim=victim, uid=event_uid), observed_at=OBSERVED)


def test_the_index_gathers_the_victims_of_the_latest_preemptors() -> None:
    index = UpstreamIndex(capacity=1)
    index.add(_upstream("low-a", "e1"))
    index.add(_upstream("low-b", "e2"))
    assert sorted(index.victims()) == ["uid-low-a", "uid-low-b"]
    other = parse_preempted(
        _event("Preempted by pod uid-other on node n2", victim="low-c", uid="e3"),
        observed_at=OBSERVED,
    )
    index.add(other)  # past capacity: the first preemptor's victims are forgotten
    assert index.victims() == ["uid-low-c"]
    index.forget_victims(["uid-low-c"])
    assert index.victims() == []


def _terminating(name: str) -> dict[str, Any]:
    built = pod(name, node_name="n1", priority=10, uid=f"uid-{name}")
    built["metadata"]["deletionTimestamp"] = "2026-11-24T07:00:30Z"
    built["status"]["conditions"] = [
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    ]
    return built


def test_a_shadow_view_reads_upstreams_victims_as_running(
    emulator: Emulator, kube: KubeClient
) -> None:
    emulator.load(as_list(node("n1"), _terminating("low-a"), _terminating("other")))
    index = UpstreamIndex()
    view = ShadowView(kube, index)
    view.start()
    try:
        assert view.wait_ready(5)
        with view.read() as snapshot:
            assert snapshot.pods["uid-low-a"].terminating  # nothing recorded yet
        index.add(_upstream("low-a", "e1"))
        with view.read() as snapshot:
            assert not snapshot.pods["uid-low-a"].terminating
            assert snapshot.pods["uid-other"].terminating
        with ClusterView.read(view) as snapshot:
            assert snapshot.pods["uid-low-a"].terminating
        emulator.finalize("default/low-a")
        deadline = time.monotonic() + 5
        while index.victims():  # gone from the view: forgotten by the next read
            assert time.monotonic() < deadline
            with view.read():
                time.sleep(0.02)
    finally:
        view.stop()


# -- the recorder ---------------------------------------------------------------------------------


class _Ledger:
    """The sink: keeps one entry per Event UID, as the ledger's unique key does."""

    def __init__(self) -> None:
        self.rows: dict[str, UpstreamPreemption] = {}
        self.offered = 0
        self.fail_next = 0

    def __call__(self, found: Sequence[UpstreamPreemption]) -> int:
        if self.fail_next:
            self.fail_next -= 1
            raise ConnectionError("ledger down")
        self.offered += len(found)
        new = [p for p in found if p.event_uid not in self.rows]
        self.rows.update((p.event_uid, p) for p in new)
        return len(new)


def _wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture
def ledger() -> _Ledger:
    return _Ledger()


@pytest.fixture
def recorder(kube: KubeClient, ledger: _Ledger) -> Iterator[UpstreamRecorder]:
    running = UpstreamRecorder(
        kube, ledger, watch_timeout=5, backoff=Backoff(initial=0.01, maximum=0.05)
    )
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    yield running
    running.stop()
    thread.join(5)


def _create(emulator: Emulator, event: dict[str, Any]) -> None:
    emulator.store.create(EVENTS, "default", event)


def test_listed_then_watched_and_junk_skipped(
    emulator: Emulator, kube: KubeClient, ledger: _Ledger
) -> None:
    _create(emulator, _event(victim="low-a"))
    running = UpstreamRecorder(kube, ledger, watch_timeout=5)
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    try:
        _wait_for(lambda: len(ledger.rows) == 1)
        assert emulator.wait_for_watches(1)
        _create(emulator, _event("Preempted, sort of", victim="odd"))
        _create(emulator, _event(victim="low-b"))
        _create(emulator, _event(reason="Killing", victim="killed"))  # the selector filters it
        _wait_for(lambda: len(ledger.rows) == 2)
    finally:
        running.stop()
        thread.join(5)
    assert sorted(p.victim_name for p in ledger.rows.values()) == ["low-a", "low-b"]
    assert running.stats.skipped == 1
    assert running.stats.recorded == 2


def test_a_watch_restart_resumes_without_a_second_row(
    emulator: Emulator, recorder: UpstreamRecorder, ledger: _Ledger
) -> None:
    _create(emulator, _event(victim="low-a"))
    _wait_for(lambda: len(ledger.rows) == 1)
    assert emulator.wait_for_watches(1)
    emulator.end_watches()
    _create(emulator, _event(victim="low-b"))
    _wait_for(lambda: len(ledger.rows) == 2)
    assert recorder.stats.reconnects >= 1
    assert ledger.offered == 2  # resumed from its resourceVersion: nothing offered twice


def test_a_relist_after_gone_offers_events_again_and_records_them_once(
    emulator: Emulator, recorder: UpstreamRecorder, ledger: _Ledger
) -> None:
    _create(emulator, _event(victim="low-a"))
    _wait_for(lambda: len(ledger.rows) == 1)
    assert emulator.wait_for_watches(1)
    emulator.faults.fail("watch", None, 503, times=None)  # keep the watch from coming back
    emulator.end_watches()
    _create(emulator, _event(victim="low-b"))
    emulator.store.compact()  # ... until the history it would resume from is gone
    emulator.faults.clear()
    _wait_for(lambda: recorder.stats.relists_after_gone >= 1 and len(ledger.rows) == 2)
    assert ledger.offered >= 3  # low-a offered again by the relist
    assert sorted(p.victim_name for p in ledger.rows.values()) == ["low-a", "low-b"]


def test_a_failing_sink_is_retried_from_the_same_event(
    emulator: Emulator, recorder: UpstreamRecorder, ledger: _Ledger
) -> None:
    _wait_for(lambda: recorder.stats.lists == 1)
    assert emulator.wait_for_watches(1)
    ledger.fail_next = 2
    _create(emulator, _event(victim="low-a"))
    _wait_for(lambda: len(ledger.rows) == 1)
    assert recorder.stats.errors == 2


# -- the recorder, against a scripted API server ------------------------------------------------


class _Stream:
    """A watch response: its lines, then the end of the stream."""

    def __init__(self, lines: list[bytes]) -> None:
        self.lines = lines

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.lines)

    def release_conn(self) -> None:
        pass

    def shutdown(self) -> None:
        pass


class _ScriptedKube:
    """Answers the lists with `pages` and the watches with `watches`, in order; stops the
    recorder when it asks for more watches than there are."""

    def __init__(self, pages: list[Any], watches: list[list[bytes]]) -> None:
        self.pages = pages
        self.watches = watches
        self.requests: list[dict[str, str]] = []
        self.recorder: UpstreamRecorder | None = None

    def send(self, method: str, path: str, *, query: dict[str, str]) -> Any:
        assert (method, path) == ("GET", "/api/v1/events")
        self.requests.append(dict(query))
        return self.pages.pop(0)

    def stream(self, path: str, query: dict[str, str], read_timeout: float) -> _Stream:
        assert path == "/api/v1/events"
        self.requests.append(dict(query))
        if not self.watches:
            assert self.recorder is not None
            self.recorder.stop()
            return _Stream([])
        return _Stream(self.watches.pop(0))


def _line(event_type: str, obj: Any) -> bytes:
    return json.dumps({"type": event_type, "object": obj}).encode()


def _scripted(kube: _ScriptedKube, ledger: _Ledger) -> UpstreamRecorder:
    recorder = UpstreamRecorder(cast(KubeClient, kube), ledger, backoff=Backoff(0.001, 0.001))
    kube.recorder = recorder
    return recorder


def test_lists_in_pages_and_watches_narrowed_to_preempted_and_resumes(ledger: _Ledger) -> None:
    first = _event(victim="low-a", uid="e1")
    second = _event(victim="low-b", uid="e2")
    third = _event(victim="low-c", uid="e3")
    third["metadata"]["resourceVersion"] = "12"
    kube = _ScriptedKube(
        pages=[
            {"metadata": {"resourceVersion": "10", "continue": "more"}, "items": [first]},
            {"metadata": {"resourceVersion": "11"}, "items": [second]},
        ],
        watches=[[_line("ADDED", third)]],
    )
    recorder = _scripted(kube, ledger)
    recorder.run()
    lists, watches = kube.requests[:2], kube.requests[2:]
    assert lists == [
        {"limit": "500", "fieldSelector": "reason=Preempted"},
        {"limit": "500", "fieldSelector": "reason=Preempted", "continue": "more"},
    ]
    assert [w["resourceVersion"] for w in watches] == ["10", "12"]
    assert all(w["fieldSelector"] == "reason=Preempted" for w in watches)
    assert sorted(ledger.rows) == ["e1", "e2", "e3"]
    assert (recorder.stats.lists, recorder.stats.seen, recorder.stats.recorded) == (1, 3, 3)


def test_junk_on_the_watch_is_skipped_and_each_reason_warned_of_once(
    ledger: _Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    odd = [_event("Preempted, sort of", victim=v, uid=f"odd-{v}") for v in ("x", "y")]
    good = _event(victim="low-a", uid="e1")
    good["metadata"]["resourceVersion"] = "20"
    kube = _ScriptedKube(
        pages=[{"metadata": {"resourceVersion": "10"}, "items": []}],
        watches=[
            [
                b"not json",
                b"{also not json",
                b"[1, 2]",
                _line("WEIRD", _event(uid="w")),
                _line("ADDED", odd[0]),
                _line("MODIFIED", odd[1]),
                _line("DELETED", _event(uid="gone")),
                _line("ADDED", good),
            ]
        ],
    )
    recorder = _scripted(kube, ledger)
    with caplog.at_level(logging.DEBUG, logger="preemptctl.kube.upstream_events"):
        recorder.run()
    assert sorted(ledger.rows) == ["e1"]
    assert recorder.stats.skipped == 6
    assert recorder.stats.errors == 0
    assert kube.requests[-1]["resourceVersion"] == "20"
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 4
    for why in ("not JSON", "not an object", "unknown watch event type 'WEIRD'", "neither"):
        assert sum(why in line for line in warned) == 1, why


def test_a_watch_error_other_than_gone_is_an_error_and_the_watch_resumes(
    ledger: _Ledger,
) -> None:
    status = {"kind": "Status", "code": 500, "reason": "InternalError", "message": "etcd hiccup"}
    kube = _ScriptedKube(
        pages=[{"metadata": {"resourceVersion": "10"}, "items": []}],
        watches=[[_line("ERROR", status)], [_line("ADDED", _event(uid="e1"))]],
    )
    recorder = _scripted(kube, ledger)
    recorder.run()
    assert recorder.stats.errors == 1
    assert "etcd hiccup" in recorder.stats.last_error
    assert (recorder.stats.lists, recorder.stats.relists_after_gone) == (1, 0)
    assert sorted(ledger.rows) == ["e1"]

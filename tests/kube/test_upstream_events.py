"""kube-scheduler's `Preempted` Events, parsed, checked against the cluster and recorded
(shadow mode).

Scenarios, the parser:
- `Preempted by pod <uid> on node <node>` gives the preemptor's UID and the node; its
  namespace and name come from the cluster view when it knows the UID;
- the older `Preempted by <ns>/<name> on node <node>` gives namespace and name; the UID comes
  from the view when it knows the pod, else stays "";
- the Event's time is its eventTime, else lastTimestamp, else when it was observed, and never
  later than when it was observed; the raw message is kept;
- junk is refused with a reason: another reason, another message, an Event on a Node, no
  uid, a field of the wrong type, an over-long or invalid name (ESC in a node name), a time
  out of range (year 1 with a UTC offset), a `related` preemptor the message contradicts;
- only a configured scheduler name is believed as the reporter (`reportingComponent`, or the
  legacy `source.component`): another component, none, two that disagree, preemptctl itself
  are refused, each with its own `Skip`; other scheduler names can be configured;
- an Event in one namespace about a pod in another is refused (`other-namespace`);
- a pod group's `Preempted by podgroup <uid> on node cluster` (workload-aware preemption)
  names the group by its UID and, from its related PodGroup, by namespace and name, and no
  node ("cluster" is the domain the whole group was placed in); its message says a group
  preempted (`preempted_by_group`); related to anything but a PodGroup, or to another
  UID, it is refused.

Corroboration (pure):
- the victim, by name, with the Event's UID, on its node, marked DisruptionTarget/
  PreemptionByScheduler: believed; unmarked or on another node: refuted; gone, or its name
  now another pod's: unconfirmed;
- the witness remembers pods the view's watch showed marked (and only those, only pods, the
  latest `capacity`);
- a pod group's preemption names no node: its victim, marked, is believed on any node it
  is bound to; unmarked, or bound to none, refuted.

The index and the dry-run snapshot:
- the index gathers the victims of the latest `capacity` preemptors, forgets the oldest
  preemptor's past it, and forgets victims gone from the cluster;
- a `ShadowView` over the emulator shows every victim upstream's Events name as still
  running, in each read, while its own state keeps them terminating; a victim gone from
  the cluster is forgotten.

The recorder, against the emulator over HTTP (victims marked as the scheduler marks them):
- it lists the Events already there, then records new ones from its watch, skipping hand
  made junk without stopping;
- forged Events are counted, not recorded, and never reach the index (so no running pod
  reads as running forever): an unmarked running pod, an Event naming another namespace's
  pod, another reporter, a second Event on a victim already recorded;
- a victim already gone is believed when the witness saw it marked, else counted
  unconfirmed;
- the victim's look-up: a 503 is retried from the same Event (then recorded); a 403
  leaves the Event unconfirmed and the watch goes on;
- idempotent across a watch restart and across a relist after 410 Gone: the sink is offered
  an Event again, and the ledger's key keeps one row (here: the set of UIDs);
- a sink that fails is retried from the same Event, which is then recorded; what the sink
  left out (over its namespace's cap, or a victim it already has) is counted; a confirmed
  victim over the cap still reads as running to the dry run (the cap bounds rows only).

The recorder, against the simulated kube-scheduler preempting for a gang (the bundled gang
scenario, upstream-preemption mode, victims kept terminating): the Events it writes for
ml/train-a are all recorded, each naming the PodGroup by UID and name, no node; the index
holds the four victims under the group's UID, and a `ShadowView` reads them as running.

The recorder, against a scripted API server:
- it lists in pages and watches, both narrowed to `reason=Preempted`, and resumes from the
  last event's resourceVersion;
- junk on the watch (a line that is not JSON, an event that is not an object, an unknown
  event type, a message in neither form) is skipped and counted, each reason warned of once;
- an Event whose parsing raises anything (an OverflowError from its time, an error from the
  view's name look-up) is skipped and counted, and the Events after it are recorded;
- a watch ERROR other than 410 is counted as an error, with the API server's message.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from kubernetes.client.exceptions import ApiException

from preemptctl.emulator import Emulator, SimulatedCluster
from preemptctl.emulator.resources import EVENTS, POD_GROUPS
from preemptctl.kube.client import KubeClient, ListPage, connect
from preemptctl.kube.reflector import Backoff
from preemptctl.kube.upstream_events import (
    DisruptionWitness,
    NotUpstreamPreemption,
    PreemptedMessage,
    ShadowView,
    Skip,
    UpstreamIndex,
    UpstreamPreemption,
    UpstreamRecorder,
    VictimSeen,
    corroboration,
    parse_message,
    parse_preempted,
    preempted_by_group,
    victim_seen,
)
from preemptctl.kube.view import ClusterView
from preemptctl.worker.scenarios import BUNDLED
from tests.support.emulator import as_list, node, pod

OBSERVED = datetime(2026, 11, 24, 7, 0, tzinfo=UTC)


def _event(
    message: str = "Preempted by pod uid-urgent on node n1",
    *,
    victim: str = "low-a",
    uid: str = "event-1",
    namespace: str = "default",
    **fields: Any,
) -> dict[str, Any]:
    event: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{victim}.abc", "namespace": namespace, "uid": uid},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": namespace,
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


def test_an_event_time_after_the_observation_is_taken_at_the_observation() -> None:
    future = _event(eventTime="2099-01-01T00:00:00Z")
    assert parse_preempted(future, observed_at=OBSERVED).occurred_at == OBSERVED


@pytest.mark.parametrize(
    ("event", "why"),
    [
        (_event(reason="Killing"), "reason"),
        (_event("Preempted because the node is full"), "neither known form"),
        (_event("Preempted by pod  on node n1"), "neither known form"),
        (_event(involvedObject={"kind": "Node", "name": "n1"}), "not a Pod"),
        (_event(metadata={"name": "x", "namespace": "default"}), "no metadata.uid"),
        (_event(metadata={"name": "x", "uid": "e"}), "no metadata.namespace"),
        (_event(type="Normal", reportingComponent=7), "not text"),
        (_event(involvedObject={"kind": "Pod", "name": "x" * 300}), "no more than 253 characters"),
        (_event(involvedObject={"kind": "Pod", "name": "low-a"}), "no uid"),
        (_event("Preempted by pod u on node n1\x1b]0;owned\x07"), "not a valid name"),
        (_event(victim="Low_A"), "not a valid name"),
        (_event(eventTime="yesterday"), "unreadable time"),
        (_event(eventTime="0001-01-01T00:00:00+05:00"), "unreadable time"),
        (_event(related={"kind": "Pod", "uid": "uid-other"}), "related.uid"),
        ("not an event", "not an object"),
    ],
)
def test_junk_is_refused_as_unreadable_with_a_reason(event: Any, why: str) -> None:
    with pytest.raises(NotUpstreamPreemption, match=why) as refused:
        parse_preempted(event, observed_at=OBSERVED)
    assert refused.value.skip is Skip.UNREADABLE


@pytest.mark.parametrize(
    ("fields", "skip", "why"),
    [
        ({"reportingComponent": "kubelet"}, Skip.UNTRUSTED_REPORTER, "'kubelet', not by a"),
        ({"reportingComponent": None}, Skip.UNTRUSTED_REPORTER, "no reporter"),
        (
            {"source": {"component": "tenant-bot"}},
            Skip.UNTRUSTED_REPORTER,
            "'default-scheduler', 'tenant-bot'",
        ),
        ({"reportingComponent": "preemptctl"}, Skip.OURS, "preemptctl"),
    ],
)
def test_only_a_configured_scheduler_is_believed_as_the_reporter(
    fields: dict[str, Any], skip: Skip, why: str
) -> None:
    with pytest.raises(NotUpstreamPreemption, match=why) as refused:
        parse_preempted(_event(**fields), observed_at=OBSERVED)
    assert refused.value.skip is skip


def test_the_legacy_source_component_names_the_reporter() -> None:
    legacy = _event(reportingComponent=None, source={"component": "default-scheduler"})
    assert parse_preempted(legacy, observed_at=OBSERVED).victim_key == "default/low-a"


def test_other_scheduler_names_can_be_believed() -> None:
    mine = _event(reportingComponent="gpu-scheduler")
    parsed = parse_preempted(mine, observed_at=OBSERVED, reporters=("gpu-scheduler",))
    assert parsed.event_uid == "event-1"
    with pytest.raises(NotUpstreamPreemption, match="not by a configured scheduler"):
        parse_preempted(_event(), observed_at=OBSERVED, reporters=("gpu-scheduler",))


def test_an_event_about_a_pod_of_another_namespace_is_refused() -> None:
    forged = _event(namespace="tenant")
    forged["involvedObject"]["namespace"] = "prod"
    with pytest.raises(NotUpstreamPreemption, match="in namespace 'tenant' about") as refused:
        parse_preempted(forged, observed_at=OBSERVED)
    assert refused.value.skip is Skip.OTHER_NAMESPACE


def test_a_victim_without_a_namespace_is_in_the_events_namespace() -> None:
    bare = _event(namespace="tenant")
    del bare["involvedObject"]["namespace"]
    assert parse_preempted(bare, observed_at=OBSERVED).victim_key == "tenant/low-a"


TRAIN_A = {
    "apiVersion": "scheduling.k8s.io/v1beta1",
    "kind": "PodGroup",
    "namespace": "ml",
    "name": "train-a",
    "uid": "uid-train-a",
}


def _group_event(**fields: Any) -> dict[str, Any]:
    """A victim's Event as kube-scheduler writes it when it preempted for the PodGroup."""
    return _event(
        "Preempted by podgroup uid-train-a on node cluster",
        victim="train-b-0",
        namespace="ml",
        **{"related": TRAIN_A, **fields},
    )


def test_a_pod_groups_event_names_the_group_and_no_node() -> None:
    parsed = parse_preempted(_group_event(), observed_at=OBSERVED)
    assert parsed == UpstreamPreemption(
        event_uid="event-1",
        occurred_at=datetime(2026, 11, 24, 6, 59, 58, 123456, tzinfo=UTC),
        victim_namespace="ml",
        victim_name="train-b-0",
        victim_uid="uid-train-b-0",
        preemptor_uid="uid-train-a",
        preemptor_namespace="ml",
        preemptor_name="train-a",
        node=None,
        message="Preempted by podgroup uid-train-a on node cluster",
    )
    assert preempted_by_group(parsed.message)
    assert not preempted_by_group("Preempted by pod uid-urgent on node n1")
    assert not preempted_by_group("Preempted by prod/urgent on node n1")


def test_the_three_message_forms_say_the_preemptors_type() -> None:
    assert parse_message("Preempted by pod uid-urgent on node n1") == PreemptedMessage(
        "uid-urgent", None, None, "n1", "pod"
    )
    assert parse_message("Preempted by podgroup uid-train-a on node cluster") == PreemptedMessage(
        "uid-train-a", None, None, "cluster", "podgroup"
    )
    assert parse_message("Preempted by prod/urgent on node n1") == PreemptedMessage(
        None, "prod", "urgent", "n1", "pod"
    )
    assert parse_message("Preempted by pods uid-urgent on node n1") is None


def test_a_pod_groups_event_without_a_related_object_keeps_the_groups_uid() -> None:
    parsed = parse_preempted(_group_event(related=None), observed_at=OBSERVED)
    assert (parsed.preemptor_uid, parsed.preemptor_key, parsed.node) == ("uid-train-a", None, None)


def test_a_pod_groups_event_is_not_named_from_the_views_pods() -> None:
    parsed = parse_preempted(
        _group_event(), observed_at=OBSERVED, name_of=lambda uid: ("ml", "a-pod-of-that-uid")
    )
    assert parsed.preemptor_key == "ml/train-a"


@pytest.mark.parametrize(
    ("related", "why"),
    [
        ({**TRAIN_A, "kind": "Pod"}, "related to a 'Pod', not a PodGroup"),
        ({**TRAIN_A, "uid": "uid-train-z"}, "related.uid is not the preemptor"),
        ({**TRAIN_A, "name": "Train_A"}, "preemptor name 'Train_A' is not a valid name"),
    ],
)
def test_a_pod_groups_event_related_to_anything_else_is_refused(
    related: dict[str, Any], why: str
) -> None:
    with pytest.raises(NotUpstreamPreemption, match=why) as refused:
        parse_preempted(_group_event(related=related), observed_at=OBSERVED)
    assert refused.value.skip is Skip.UNREADABLE


# -- corroboration -------------------------------------------------------------------------------


def _claimed(victim: str = "low-a", node_name: str = "n1") -> UpstreamPreemption:
    return parse_preempted(
        _event(f"Preempted by pod uid-urgent on node {node_name}", victim=victim),
        observed_at=OBSERVED,
    )


def _seen(marked: bool = True, node_name: str = "n1", uid: str = "uid-low-a") -> VictimSeen:
    return VictimSeen("default", "low-a", uid, node_name, marked)


def test_a_victim_marked_by_the_scheduler_on_the_events_node_bears_the_event_out() -> None:
    assert corroboration(_claimed(), _seen()) is None


@pytest.mark.parametrize(
    ("seen", "skip", "why"),
    [
        (None, Skip.UNCONFIRMED, "gone"),
        (_seen(uid="uid-new"), Skip.UNCONFIRMED, "another pod"),
        (_seen(marked=False), Skip.REFUTED, "no DisruptionTarget"),
        (_seen(node_name="n2"), Skip.REFUTED, "not bound to the Event's node"),
    ],
)
def test_what_the_cluster_does_not_bear_out_is_refused(
    seen: VictimSeen | None, skip: Skip, why: str
) -> None:
    refused = corroboration(_claimed(), seen)
    assert refused is not None
    assert refused[0] is skip and why in refused[1]


def test_a_pod_groups_victim_marked_on_any_node_bears_the_event_out() -> None:
    claimed = parse_preempted(_group_event(), observed_at=OBSERVED)
    seen = VictimSeen("ml", "train-b-0", "uid-train-b-0", "node-5", True)
    assert corroboration(claimed, seen) is None
    unmarked = corroboration(claimed, VictimSeen("ml", "train-b-0", "uid-train-b-0", "n5", False))
    assert unmarked is not None and unmarked[0] is Skip.REFUTED
    unbound = corroboration(claimed, VictimSeen("ml", "train-b-0", "uid-train-b-0", "", True))
    assert unbound == (Skip.REFUTED, "the victim is bound to no node")


def _marked(name: str, *, node_name: str = "n1", reason: str = "PreemptionByScheduler") -> Any:
    built = pod(name, node_name=node_name, priority=10, uid=f"uid-{name}")
    built["status"]["conditions"] = [
        {"type": "DisruptionTarget", "status": "True", "reason": reason}
    ]
    return built


def test_a_pod_is_seen_marked_only_with_the_schedulers_reason() -> None:
    assert victim_seen(_marked("low-a")) == VictimSeen("default", "low-a", "uid-low-a", "n1", True)
    assert victim_seen(_marked("low-a", reason="EvictionByEvictionAPI")).marked is False
    assert victim_seen(pod("low-a", uid="uid-low-a")) == VictimSeen(
        "default", "low-a", "uid-low-a", "", False
    )
    assert victim_seen({"metadata": {"name": 3}}) is None


def test_the_witness_remembers_the_latest_pods_seen_marked() -> None:
    witness = DisruptionWitness(capacity=2)
    witness.saw("MODIFIED", "Pod", pod("running", node_name="n1", uid="uid-running"))
    witness.saw("MODIFIED", "Node", _marked("not-a-pod"))
    for name in ("low-a", "low-b", "low-c"):
        witness.saw("DELETED", "Pod", _marked(name))
    assert witness.get("uid-running") is None
    assert witness.get("uid-not-a-pod") is None
    assert witness.get("uid-low-a") is None  # past capacity
    assert witness.get("uid-low-c") == VictimSeen("default", "low-c", "uid-low-c", "n1", True)


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
    built = _marked(name)
    built["metadata"]["deletionTimestamp"] = "2026-11-24T07:00:30Z"
    return cast(dict[str, Any], built)


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


@dataclass(frozen=True)
class _Appended:
    recorded: int
    over_cap: Collection[str] = ()
    victim_known: Collection[str] = ()


class _Ledger:
    """The sink: keeps one entry per Event UID, as the ledger's unique key does; leaves out
    Events whose victim is in `over_cap`, as the ledger does past a namespace's cap. (The
    emulator gives each Event a UID of its own: tests name Events by their victims.)"""

    def __init__(self) -> None:
        self.rows: dict[str, UpstreamPreemption] = {}
        self.offered = 0
        self.fail_next = 0
        self.over_cap: set[str] = set()  # victim names

    def __call__(self, found: Sequence[UpstreamPreemption]) -> _Appended:
        if self.fail_next:
            self.fail_next -= 1
            raise ConnectionError("ledger down")
        self.offered += len(found)
        capped = {p.event_uid for p in found if p.victim_name in self.over_cap}
        new = [p for p in found if p.event_uid not in {*self.rows, *capped}]
        self.rows.update((p.event_uid, p) for p in new)
        return _Appended(len(new), capped)

    @property
    def victims(self) -> list[str]:
        return sorted(p.victim_name for p in self.rows.values())


def _wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture
def ledger() -> _Ledger:
    return _Ledger()


@pytest.fixture
def index() -> UpstreamIndex:
    return UpstreamIndex()


@pytest.fixture
def witness() -> DisruptionWitness:
    return DisruptionWitness()


@pytest.fixture
def recorder(
    emulator: Emulator,
    kube: KubeClient,
    ledger: _Ledger,
    index: UpstreamIndex,
    witness: DisruptionWitness,
) -> Iterator[UpstreamRecorder]:
    emulator.load(as_list(node("n1"), *(_marked(f"low-{x}") for x in "abc")))
    running = UpstreamRecorder(
        kube,
        ledger,
        index=index,
        witness=witness,
        watch_timeout=5,
        backoff=Backoff(initial=0.01, maximum=0.05),
    )
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    _wait_for(lambda: running.stats.lists == 1)
    assert emulator.wait_for_watches(1)
    yield running
    running.stop()
    thread.join(5)


def _create(emulator: Emulator, event: dict[str, Any], namespace: str = "default") -> None:
    emulator.store.create(EVENTS, namespace, event)


def test_listed_then_watched_and_junk_skipped(
    emulator: Emulator, kube: KubeClient, ledger: _Ledger
) -> None:
    emulator.load(as_list(node("n1"), _marked("low-a"), _marked("low-b")))
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
    assert running.stats.skipped_by[Skip.UNREADABLE] == 1
    assert running.stats.recorded == 2


def _recorded_after(
    emulator: Emulator, recorder: UpstreamRecorder, ledger: _Ledger, *forged: dict[str, Any]
) -> list[str]:
    """Create the `forged` Events, then a genuine one on low-c (after them in the watch):
    once it is recorded, every forged one has been judged. The victims recorded."""
    for event in forged:
        _create(emulator, event, event["metadata"]["namespace"])
    _create(emulator, _event(victim="low-c"))
    _wait_for(lambda: "low-c" in ledger.victims)
    return ledger.victims


def test_an_event_on_a_running_pod_the_scheduler_never_marked_is_refuted(
    emulator: Emulator, recorder: UpstreamRecorder, ledger: _Ledger, index: UpstreamIndex
) -> None:
    emulator.load(as_list(pod("web", node_name="n1", uid="uid-web")))
    forged = _event(victim="web")
    assert _recorded_after(emulator, recorder, ledger, forged) == ["low-c"]
    assert recorder.stats.skipped_by[Skip.REFUTED] == 1
    assert index.victims() == ["uid-low-c"]  # never shown as running by the shadow view


def test_an_event_naming_a_pod_of_another_namespace_is_not_recorded(
    emulator: Emulator, recorder: UpstreamRecorder, ledger: _Ledger, index: UpstreamIndex
) -> None:
    forged = _event(victim="low-a", namespace="tenant")
    forged["involvedObject"]["namespace"] = "default"
    assert _recorded_after(emulator, recorder, ledger, forged) == ["low-c"]
    assert recorder.stats.skipped_by[Skip.OTHER_NAMESPACE] == 1
    assert index.victims() == ["uid-low-c"]


def test_an_event_from_another_reporter_is_not_recorded(
    emulator: Emulator, recorder: UpstreamRecorder, ledger: _Ledger
) -> None:
    forged = _event(victim="low-a", reportingComponent="tenant-bot")
    assert _recorded_after(emulator, recorder, ledger, forged) == ["low-c"]
    assert recorder.stats.skipped_by[Skip.UNTRUSTED_REPORTER] == 1


def test_a_second_event_on_a_recorded_victim_is_not_recorded(
    emulator: Emulator, recorder: UpstreamRecorder, ledger: _Ledger
) -> None:
    _create(emulator, _event(victim="low-a"))
    _wait_for(lambda: ledger.victims == ["low-a"])
    again = _event("Preempted by pod uid-someone-else on node n1", victim="low-a")
    again["metadata"]["name"] = "low-a.again"
    assert _recorded_after(emulator, recorder, ledger, again) == ["low-a", "low-c"]
    assert {p.preemptor_uid for p in ledger.rows.values()} == {"uid-urgent"}
    assert recorder.stats.skipped_by[Skip.VICTIM_KNOWN] == 1


def test_a_victim_already_gone_is_believed_when_the_witness_saw_it_marked(
    emulator: Emulator, recorder: UpstreamRecorder, ledger: _Ledger, witness: DisruptionWitness
) -> None:
    witness.saw("DELETED", "Pod", _marked("gone-seen"))
    seen = _event(victim="gone-seen")
    unseen = _event(victim="gone-unseen")
    assert _recorded_after(emulator, recorder, ledger, seen, unseen) == ["gone-seen", "low-c"]
    assert recorder.stats.skipped_by[Skip.UNCONFIRMED] == 1


def test_a_victim_look_up_the_api_server_fails_is_retried_from_that_event(
    emulator: Emulator, recorder: UpstreamRecorder, ledger: _Ledger
) -> None:
    emulator.faults.fail("get", "pods", 503, times=2)
    _create(emulator, _event(victim="low-a"))
    _wait_for(lambda: ledger.victims == ["low-a"])
    assert recorder.stats.errors == 2


def test_a_victim_look_up_rbac_forbids_leaves_the_event_unconfirmed(
    emulator: Emulator, recorder: UpstreamRecorder, ledger: _Ledger
) -> None:
    emulator.faults.fail("get", "pods", 403, times=1)
    assert _recorded_after(emulator, recorder, ledger, _event(victim="low-a")) == ["low-c"]
    assert recorder.stats.skipped_by[Skip.UNCONFIRMED] == 1
    assert recorder.stats.errors == 0


def test_a_watch_restart_resumes_without_a_second_row(
    emulator: Emulator, recorder: UpstreamRecorder, ledger: _Ledger
) -> None:
    _create(emulator, _event(victim="low-a"))
    _wait_for(lambda: len(ledger.rows) == 1)
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
    emulator.faults.fail("watch", None, 503, times=None)  # keep the watch from coming back
    emulator.end_watches()
    _create(emulator, _event(victim="low-b"))
    emulator.store.compact()  # ... until the history it would resume from is gone
    emulator.faults.clear()
    _wait_for(lambda: recorder.stats.relists_after_gone >= 1 and len(ledger.rows) == 2)
    assert ledger.offered >= 3  # low-a offered again by the relist
    assert sorted(p.victim_name for p in ledger.rows.values()) == ["low-a", "low-b"]
    assert recorder.stats.skipped_by[Skip.VICTIM_KNOWN] == 0  # the same Event, not another


def test_a_failing_sink_is_retried_from_the_same_event(
    emulator: Emulator, recorder: UpstreamRecorder, ledger: _Ledger
) -> None:
    ledger.fail_next = 2
    _create(emulator, _event(victim="low-a"))
    _wait_for(lambda: len(ledger.rows) == 1)
    assert recorder.stats.errors == 2


def test_what_the_sink_leaves_out_over_its_cap_is_counted(
    emulator: Emulator, recorder: UpstreamRecorder, ledger: _Ledger, index: UpstreamIndex
) -> None:
    ledger.over_cap.add("low-a")
    assert _recorded_after(emulator, recorder, ledger, _event(victim="low-a")) == ["low-c"]
    assert recorder.stats.skipped_by[Skip.OVER_CAP] == 1
    assert recorder.stats.recorded == 1
    assert sorted(index.victims()) == ["uid-low-a", "uid-low-c"]  # true, only not a row


# -- the recorder, against the simulated kube-scheduler preempting for a gang --------------------


def test_the_simulated_schedulers_group_preemption_is_recorded_and_undone_for_the_dry_run(
    ledger: _Ledger, index: UpstreamIndex
) -> None:
    with SimulatedCluster(
        max_grace_seconds=60.0, start_delay=0.05, interval=0.02, upstream_preemption=True
    ) as cluster:
        cluster.load(BUNDLED["gang"])
        _wait_for(lambda: len(cluster.store.objects(EVENTS)) == 4, timeout=15)
        group = cluster.store.find(POD_GROUPS, "ml", "train-a")
        assert group is not None
        kube = connect(cluster.kubeconfig_path, connect_timeout=1, read_timeout=5)
        recorder = UpstreamRecorder(kube, ledger, index=index, watch_timeout=5)
        thread = threading.Thread(target=recorder.run, daemon=True)
        thread.start()
        view = ShadowView(kube, index)
        view.start()
        try:
            _wait_for(lambda: len(ledger.rows) == 4)
            assert view.wait_ready(5)
            with view.read() as snapshot:
                shown = {
                    p.name: p.terminating for p in snapshot.pods.values() if p.namespace == "ml"
                }
            with ClusterView.read(view) as snapshot:
                really = {
                    p.name: p.terminating for p in snapshot.pods.values() if p.namespace == "ml"
                }
        finally:
            view.stop()
            recorder.stop()
            thread.join(5)
            kube.api.close()
    victims = ["notebook", "train-b-0", "train-b-1", "train-b-2"]
    rows = sorted(ledger.rows.values(), key=lambda p: p.victim_name)
    assert [p.victim_name for p in rows] == victims
    assert {(p.preemptor_uid, p.preemptor_key, p.node) for p in rows} == {
        (group["metadata"]["uid"], "ml/train-a", None)
    }
    assert all(
        p.message == f"Preempted by podgroup {group['metadata']['uid']} on node cluster"
        for p in rows
    )
    assert recorder.stats.skipped == 0
    assert sorted(index.victims()) == sorted(str(p.victim_uid) for p in rows)
    assert [name for name in victims if really[name]] == victims  # terminating, in truth
    assert [name for name in victims if shown[name]] == []  # as before upstream, to the dry run


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
    recorder when it asks for more watches than there are. Every victim asked for is there,
    marked by the scheduler on n1."""

    def __init__(self, pages: list[Any], watches: list[list[bytes]]) -> None:
        self.pages = pages
        self.watches = watches
        self.requests: list[dict[str, str]] = []
        self.recorder: UpstreamRecorder | None = None

    def read_list(self, path: str, query: dict[str, str], *, max_bytes: int | None) -> ListPage:
        assert path == "/api/v1/events"
        self.requests.append(dict(query))
        return ListPage(self.pages.pop(0), 0)

    def request(self, method: str, path: str, call: Any, **_: Any) -> Any:
        prefix = "/api/v1/namespaces/default/pods/"
        if method != "GET" or not path.startswith(prefix):
            raise ApiException(status=404, reason="Not Found")
        return _marked(path.removeprefix(prefix))

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


def _scripted(kube: _ScriptedKube, ledger: _Ledger, **options: Any) -> UpstreamRecorder:
    recorder = UpstreamRecorder(
        cast(KubeClient, kube), ledger, backoff=Backoff(0.001, 0.001), **options
    )
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
    assert recorder.stats.skipped == recorder.stats.skipped_by[Skip.UNREADABLE] == 6
    assert recorder.stats.errors == 0
    assert kube.requests[-1]["resourceVersion"] == "20"
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 4
    for why in ("not JSON", "not an object", "unknown watch event type 'WEIRD'", "neither"):
        assert sum(why in line for line in warned) == 1, why


def test_an_event_that_fails_to_parse_in_any_way_is_skipped_and_the_next_recorded(
    ledger: _Ledger,
) -> None:
    overflowing = _event(victim="low-a", uid="e1", eventTime="0001-01-01T00:00:00+05:00")
    unnamed = _event("Preempted by pod uid-broken on node n1", victim="low-b", uid="e2")
    good = _event(victim="low-c", uid="e3")
    for rv, event in enumerate((overflowing, unnamed, good), start=11):
        event["metadata"]["resourceVersion"] = str(rv)

    def name_of(uid: str) -> tuple[str, str] | None:
        if uid == "uid-broken":
            raise RuntimeError("view lookup failed")
        return None

    kube = _ScriptedKube(
        pages=[{"metadata": {"resourceVersion": "10"}, "items": []}],
        watches=[[_line("ADDED", e) for e in (overflowing, unnamed, good)]],
    )
    recorder = _scripted(kube, ledger, name_of=name_of)
    recorder.run()
    assert sorted(ledger.rows) == ["e3"]
    assert recorder.stats.skipped_by[Skip.UNREADABLE] == 2
    assert recorder.stats.errors == 0
    assert [r.get("resourceVersion") for r in kube.requests[1:]] == ["10", "13"]


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

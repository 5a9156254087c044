"""The decision path alone (no Temporal, no API server): a SQLite ledger, an in-memory view,
and the preemptor read from the view's objects as the API server would return it.

Scenarios:
- requests queued while the lock is taken are decided in one acquisition, and decide exactly
  as one-by-one decisions would: no victim in two decisions, each decision's claim respected
  by the next, one write-ahead each;
- a retried run (its preemptor already holds a claim) decides again without meeting its own
  claim, and chooses the victims its claim holds;
- a batch is planned ahead, outside the lock, against the claims known: once, when nothing
  changed meanwhile; planned again under the lock when another replica decided between the
  plan and the lock, whose claim it then respects;
- a run decides once: asked again, it resumes from its decision on record, even when its
  preemptor has been bound since (in the room its deletes made);
- a preemptor that finds no candidate only because running preemptions claim the room says
  so in its ledger row: the claims in its way, by node (`claimsInTheWay`), beside every claim
  it respected (`context.claims`);
- 1) a preemptor gone, replaced or already bound stops the decision before the lock, with
  its reason and nothing written; a critical-admission preemptor bound to its node is
  planned; before the view's first sync, nothing is decided (decide again later);
- a preemptor the planner cannot read fails alone, as it is read; the rest of its batch is
  decided;
- a request waiting its turn heartbeats (so a dead worker's select is noticed at once);
- each decision of a batch records its planner inputs once, after the commit, in the
  background; rebuilt, each gives the same decision, the claims of the earlier decisions in
  the batch included;
- a decision that finds the recorder's backlog full is recorded as a marker saying so;
- a retried request (same run, same step) records its inputs once;
- inputs over the size limit are recorded as a "too large" marker; a limit of 0 records none;
- a ledger that refuses the inputs (no decision_inputs table) leaves the decision standing;
- closing the recorder (shutdown) records what is queued without waiting for the decision
  path, then stops its thread; past its deadline, what is still queued is dropped and
  counted; a decision after it gets a "shutting down" marker; a recorder never started, or
  none at all (recording off), closes at once.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select, text

from preemptctl import migrations
from preemptctl.deciding.path import (
    Decided,
    DecisionPath,
    DecisionRequest,
    Resumed,
    Stopped,
    ViewNotReadyError,
)
from preemptctl.kube.pods import PodLookup, Presence
from preemptctl.ledger import inputs_recorder
from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.ledger.inputs import latest
from preemptctl.ledger.models import decision_inputs, events
from preemptctl.preemption.decision import PodRef, Strategy, Verdict
from preemptctl.preemption.errors import PlannerInputError
from preemptctl.preemption.inputs_replay import compare, rebuild
from preemptctl.preemption.planner import plan
from preemptctl.preemption.recorded_inputs import decision_summary
from preemptctl.preemption.snapshot import ClusterSnapshot
from tests.support.emulator import as_list, node, pod

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Engine]:
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    migrations.upgrade(url)
    engine = create_ledger_engine(url)
    yield engine
    engine.dispose()


class View:
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = {item["metadata"]["name"]: item for item in items if item["kind"] == "Pod"}
        self.snapshot = ClusterSnapshot.from_list(as_list(*items))
        self.lock = threading.Lock()

    @contextmanager
    def read(self) -> Iterator[ClusterSnapshot]:
        with self.lock:
            yield self.snapshot

    def wait_ready(self, timeout: float | None = None) -> bool:
        return True

    def lookup(self, ref: PodRef) -> PodLookup:
        """The pod as the API server would return it: its object, as the test left it."""
        return PodLookup(Presence.FOUND, self.items[ref.name])

    def path(self, ledger: Engine, **options: Any) -> DecisionPath:
        return DecisionPath(ledger, self, self.lookup, **options)

    def request(self, name: str, run: str = "run-1") -> DecisionRequest:
        obj = self.items[name]
        meta = obj["metadata"]
        ref = PodRef(meta["namespace"], meta["name"], meta["uid"], obj["spec"]["priority"])
        return DecisionRequest(f"p-{name}", run, NOW, ref)


def rows_of(ledger: Engine) -> list[Any]:
    with ledger.connect() as connection:
        return list(connection.execute(select(events.c.kind)))


def three_full_nodes() -> View:
    """Three 4-cpu nodes full of 1-cpu priority-100 pods; six pending 2-cpu preemptors."""
    items = []
    for n in range(3):
        items.append(node(f"node-{n}", cpu="4"))
        items += [
            pod(f"low-{n}-{i}", node_name=f"node-{n}", priority=100, cpu="1") for i in range(4)
        ]
    items += [pod(f"urgent-{i}", priority=1000, cpu="2") for i in range(6)]
    return View(items)


def decide_while_the_lock_is_taken(
    path: DecisionPath, view: View, requests: list[DecisionRequest], queued: int | None = None
) -> list[Decided | BaseException]:
    """Queue every request while this test holds the process's decision lock, then let go:
    the first thread to take it decides the whole queue. `queued`: how many reach the queue
    (a preemptor the planner cannot read fails before it, as it is read)."""
    path.queue.turn.acquire()  # white box: the lock the batch's leader takes
    try:
        with ThreadPoolExecutor(max_workers=len(requests)) as pool:
            futures = [pool.submit(path.decide, request) for request in requests]
            deadline = time.monotonic() + 10
            while len(path.queue) < (len(requests) if queued is None else queued):
                assert time.monotonic() < deadline, "the requests never queued"
                time.sleep(0.01)
            path.queue.turn.release()
            return [f.exception() or f.result() for f in futures]
    finally:
        if path.queue.turn.locked():
            path.queue.turn.release()


def test_queued_requests_are_decided_in_one_acquisition_as_one_by_one(ledger: Engine) -> None:
    view = three_full_nodes()
    path = view.path(ledger)
    requests = [view.request(f"urgent-{i}") for i in range(6)]
    answers = decide_while_the_lock_is_taken(path, view, requests)
    decisions = [a.decision for a in answers if isinstance(a, Decided)]
    victims = [v.uid for d in decisions for v in d.victims]
    assert [d.verdict for d in decisions] == [Verdict.PREEMPT] * 6
    assert len(victims) == len(set(victims)) == 12
    assert [made for _, made in path.holds] == [6]
    with ledger.connect() as connection:
        written = connection.execute(
            select(func.count()).select_from(events).where(events.c.kind == "decision_made")
        ).scalar_one()
    assert written == 6


def test_a_retried_run_does_not_meet_its_own_claim(ledger: Engine) -> None:
    view = three_full_nodes()
    path = view.path(ledger)
    first = path.decide(view.request("urgent-0"))
    again = path.decide(view.request("urgent-0", run="run-2"))
    assert isinstance(first, Decided) and isinstance(again, Decided)
    assert again.decision.verdict is Verdict.PREEMPT
    assert [v.uid for v in again.decision.victims] == [v.uid for v in first.decision.victims]


def test_a_decision_blocked_by_claims_names_them_in_its_ledger_row(ledger: Engine) -> None:
    items = [node("node-0", cpu="4")]
    items += [pod(f"low-{i}", node_name="node-0", priority=100, cpu="1") for i in range(4)]
    items += [pod(f"urgent-{i}", priority=1000, cpu="2") for i in range(3)]
    view = View(items)
    path = view.path(ledger)
    for name in ("urgent-0", "urgent-1"):  # their runs go on: their claims hold node-0
        claimed = path.decide(view.request(name))
        assert isinstance(claimed, Decided) and claimed.decision.verdict is Verdict.PREEMPT
    blocked = path.decide(view.request("urgent-2"))
    assert isinstance(blocked, Decided) and blocked.decision.verdict is Verdict.UNSCHEDULABLE
    with ledger.connect() as connection:
        [payload] = connection.execute(
            select(events.c.payload).where(events.c.kind == "no_candidate")
        ).scalars()
    assert payload["rationale"]["claimsInTheWay"] == {
        "node-0": ["default/urgent-0", "default/urgent-1"]
    }
    assert sorted(payload["context"]["claims"]) == ["default/urgent-0", "default/urgent-1"]


def test_a_retried_run_appends_retried_with_its_decision(ledger: Engine) -> None:
    view = three_full_nodes()
    path = view.path(ledger)
    path.decide(view.request("urgent-0"))
    path.decide(view.request("urgent-0", run="run-2"))
    with ledger.connect() as connection:
        kinds = [
            (row.run_id, row.kind)
            for row in connection.execute(
                select(events.c.run_id, events.c.kind)
                .where(events.c.kind.in_(["retried", "decision_made"]))
                .order_by(events.c.id)
            )
        ]
    assert kinds == [
        ("run-1", "decision_made"),
        ("run-2", "retried"),
        ("run-2", "decision_made"),
    ]


def test_a_run_asked_again_is_answered_from_its_decision_on_record(ledger: Engine) -> None:
    """A run decides once: its select asked again (its worker lost after the write-ahead)
    is told to resume, and nothing more is written, though the cluster changed."""
    view = three_full_nodes()
    path = view.path(ledger)
    first = path.decide(view.request("urgent-0"))
    assert isinstance(first, Decided) and first.decision.verdict is Verdict.PREEMPT
    before = len(rows_of(ledger))
    again = path.decide(view.request("urgent-0"))
    assert again == Resumed("p-urgent-0", "run-1")
    assert len(rows_of(ledger)) == before


def test_a_run_asked_again_after_its_preemptor_was_bound_resumes(ledger: Engine) -> None:
    """A run whose worker was lost after its deletes: the scheduler bound the preemptor in
    the room they made. Asked again, the run resumes from its decision (its victims' steps
    find them gone and record them deleted by it) instead of stopping with them unrecorded."""
    view = three_full_nodes()
    path = view.path(ledger)
    first = path.decide(view.request("urgent-0"))
    assert isinstance(first, Decided) and first.decision.verdict is Verdict.PREEMPT
    view.items["urgent-0"]["spec"]["nodeName"] = first.decision.nominated_node
    assert path.decide(view.request("urgent-0")) == Resumed("p-urgent-0", "run-1")
    assert isinstance(path.decide(view.request("urgent-0", run="run-2")), Stopped)


def test_an_unreadable_request_fails_alone(ledger: Engine) -> None:
    view = three_full_nodes()
    path = view.path(ledger)
    unreadable = view.request("urgent-5")
    resources = view.items["urgent-5"]["spec"]["containers"][0]["resources"]
    resources["requests"]["cpu"] = "two cpus"
    answers = decide_while_the_lock_is_taken(
        path, view, [view.request("urgent-0"), unreadable, view.request("urgent-1")], queued=2
    )
    assert isinstance(answers[1], PlannerInputError)
    assert all(isinstance(a, Decided) for a in (answers[0], answers[2]))


def test_a_request_waiting_its_turn_heartbeats(ledger: Engine) -> None:
    view = three_full_nodes()
    path = view.path(ledger)
    beaten = threading.Event()
    path.queue.turn.acquire()  # white box: another batch is deciding
    try:
        with ThreadPoolExecutor(max_workers=1) as pool:
            future = pool.submit(path.decide, view.request("urgent-0"), beaten.set)
            assert beaten.wait(timeout=10)
            path.queue.turn.release()
            assert future.result().decision.verdict is Verdict.PREEMPT
    finally:
        if path.queue.turn.locked():
            path.queue.turn.release()


def recorded(path: DecisionPath) -> None:
    """Wait for the background recorder to append what it was given."""
    assert path.inputs is not None
    path.inputs.wait()


def _inputs_rows(ledger: Engine) -> list[tuple[str, str, str | None]]:
    with ledger.connect() as connection:
        rows = connection.execute(
            select(
                decision_inputs.c.run_id, decision_inputs.c.encoding, decision_inputs.c.omitted
            ).order_by(decision_inputs.c.id)
        )
        return [(row.run_id, row.encoding, row.omitted) for row in rows]


def test_each_decision_of_a_batch_records_inputs_that_replay_it(ledger: Engine) -> None:
    view = three_full_nodes()
    path = view.path(ledger)
    requests = [view.request(f"urgent-{i}", run=f"run-{i}") for i in range(4)]
    answers = decide_while_the_lock_is_taken(path, view, requests)
    recorded(path)
    assert len(_inputs_rows(ledger)) == 4
    for request, answer in zip(requests, answers, strict=True):
        assert isinstance(answer, Decided)
        stored = latest(ledger, request.run_id)
        assert stored is not None
        rebuilt = rebuild(stored.document())
        again = plan(rebuilt.snapshot, rebuilt.preemptor.key, rebuilt.strategy, rebuilt.args)
        assert compare(decision_summary(answer.decision), decision_summary(again)) == []
    # the last decision of the batch respected the three before it
    last = latest(ledger, "run-3")
    assert last is not None and len(last.document()["claims"]) == 3


def test_a_retried_request_records_its_inputs_once(ledger: Engine) -> None:
    view = three_full_nodes()
    path = view.path(ledger)
    path.decide(view.request("urgent-0"))
    path.decide(view.request("urgent-0"))
    recorded(path)
    assert _inputs_rows(ledger) == [("run-1", "json+zlib", None)]


def test_inputs_over_the_limit_are_recorded_as_too_large(ledger: Engine) -> None:
    view = three_full_nodes()
    path = view.path(ledger, inputs_max_bytes=100)
    path.decide(view.request("urgent-0"))
    recorded(path)
    [(run, encoding, omitted)] = _inputs_rows(ledger)
    assert (run, encoding) == ("run-1", "omitted")
    assert omitted is not None and omitted.startswith("too large: ")
    assert omitted.endswith(" bytes compressed, over the limit of 100")


def test_a_limit_of_zero_records_no_inputs(ledger: Engine) -> None:
    view = three_full_nodes()
    path = view.path(ledger, inputs_max_bytes=0)
    path.decide(view.request("urgent-0"))
    assert path.inputs is None
    assert _inputs_rows(ledger) == []


def test_a_full_backlog_records_a_marker_instead(ledger: Engine) -> None:
    """The marker is written by the recorder's thread, not by the deciding one."""
    view = three_full_nodes()
    path = view.path(ledger, inputs_backlog=1)
    assert path.inputs is not None
    path.inputs._thread = threading.current_thread()  # white box: the recorder is stuck
    path.decide(view.request("urgent-0", run="run-1"))
    path.decide(view.request("urgent-1", run="run-2"))
    assert _inputs_rows(ledger) == []  # the deciding thread wrote nothing
    assert path.inputs.skipped == 1
    path.inputs._thread = None  # unstuck: the recorder starts on the next call
    assert path.inputs._started()
    recorded(path)
    assert sorted(_inputs_rows(ledger)) == [
        ("run-1", "json+zlib", None),
        ("run-2", "omitted", "not recorded: the recorder was 1 decisions behind"),
    ]


def test_the_recorder_waits_while_a_decision_is_queued_or_under_way(ledger: Engine) -> None:
    view = three_full_nodes()
    path = view.path(ledger)
    assert path.inputs is not None and not path.queue.busy()
    path.queue.turn.acquire()  # white box: a decision under way in this process
    assert path.queue.busy()
    path.queue.turn.release()
    polls = threading.Semaphore(0)
    busy = threading.Event()

    def asked() -> bool:
        polls.release()
        return busy.is_set()

    path.inputs._busy = asked  # white box: the decision path's own check, observed
    busy.set()
    path.decide(view.request("urgent-0"))
    for _ in range(3):  # the recorder has the inputs and keeps asking
        assert polls.acquire(timeout=10)
    assert _inputs_rows(ledger) == []
    busy.clear()
    recorded(path)
    assert _inputs_rows(ledger) == [("run-1", "json+zlib", None)]


def test_the_recorder_waits_a_bounded_time_for_an_idle_path(
    ledger: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inputs_recorder, "YIELD_SECONDS", 0.05)
    view = three_full_nodes()
    path = view.path(ledger)
    assert path.inputs is not None
    path.inputs._busy = lambda: True  # white box: decisions without end
    path.decide(view.request("urgent-0"))
    recorded(path)
    assert _inputs_rows(ledger) == [("run-1", "json+zlib", None)]


def test_a_ledger_refusing_the_inputs_leaves_the_decision_standing(
    ledger: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    with ledger.begin() as connection:
        connection.execute(text("DROP TABLE decision_inputs"))
    view = three_full_nodes()
    path = view.path(ledger)
    decided = path.decide(view.request("urgent-0"))
    recorded(path)
    assert decided.decision.verdict is Verdict.PREEMPT
    assert "were not recorded" in caplog.text


def test_closing_records_what_is_queued_then_stops_the_thread(ledger: Engine) -> None:
    view = three_full_nodes()
    path = view.path(ledger)
    assert path.inputs is not None
    path.inputs._busy = lambda: True  # white box: decisions without end; closing stops waiting
    path.decide(view.request("urgent-0", run="run-1"))
    path.decide(view.request("urgent-1", run="run-2"))
    thread = path.inputs._thread
    assert thread is not None
    assert path.close() == 0
    assert not thread.is_alive()
    assert _inputs_rows(ledger) == [("run-1", "json+zlib", None), ("run-2", "json+zlib", None)]


def test_closing_past_its_deadline_drops_and_counts_what_is_still_queued(
    ledger: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    stuck, release = threading.Event(), threading.Event()
    encode = inputs_recorder.shared_form

    def slow_dumps(*args: Any) -> Any:
        stuck.set()
        release.wait(10)
        return encode(*args)

    monkeypatch.setattr(inputs_recorder, "shared_form", slow_dumps)
    view = three_full_nodes()
    path = view.path(ledger)
    assert path.inputs is not None
    for i in range(3):
        path.decide(view.request(f"urgent-{i}", run=f"run-{i}"))
    assert stuck.wait(10)  # the first is being recorded; two are queued
    thread = path.inputs._thread
    assert thread is not None
    assert path.close(timeout=0.01) == 2
    release.set()
    thread.join(10)
    assert not thread.is_alive()
    assert _inputs_rows(ledger) == [("run-0", "json+zlib", None)]


def test_a_decision_after_closing_is_recorded_as_a_shutdown_marker(ledger: Engine) -> None:
    view = three_full_nodes()
    path = view.path(ledger)
    path.decide(view.request("urgent-0", run="run-1"))
    path.close()
    path.decide(view.request("urgent-1", run="run-2"))
    assert _inputs_rows(ledger) == [
        ("run-1", "json+zlib", None),
        ("run-2", "omitted", "not recorded: the worker was shutting down"),
    ]


def test_a_recorder_never_started_or_recording_off_closes_at_once(ledger: Engine) -> None:
    view = three_full_nodes()
    path = view.path(ledger)
    assert path.close() == 0
    assert path.inputs is not None and path.inputs._thread is None
    assert view.path(ledger, inputs_max_bytes=0).close() == 0


@pytest.mark.parametrize(
    ("found", "reason"),
    [
        (PodLookup(Presence.GONE, None), "the preemptor is gone"),
        (
            PodLookup(Presence.REPLACED, {"metadata": {"uid": "other"}}),
            "the preemptor was replaced by a pod with another UID",
        ),
        (
            PodLookup(Presence.FOUND, {"metadata": {"uid": "u"}, "spec": {"nodeName": "node-2"}}),
            "the preemptor is already bound to node-2",
        ),
    ],
    ids=["gone", "replaced", "bound"],
)
def test_a_preemptor_that_no_longer_needs_room_stops_the_decision(
    ledger: Engine, found: PodLookup, reason: str
) -> None:
    view = three_full_nodes()
    path = DecisionPath(ledger, view, lambda ref: found)
    assert path.decide(view.request("urgent-0")) == Stopped(reason)
    assert path.holds == deque()
    with ledger.connect() as connection:
        assert connection.execute(select(func.count()).select_from(events)).scalar_one() == 0


def test_a_critical_admission_preemptor_bound_to_its_node_is_planned(ledger: Engine) -> None:
    view = three_full_nodes()
    view.items["urgent-0"]["spec"]["nodeName"] = "node-1"
    path = view.path(ledger)
    request = dataclasses.replace(view.request("urgent-0"), strategy=Strategy.CRITICAL_ADMISSION)
    decided = path.decide(request)
    assert isinstance(decided, Decided)  # the kubelet's planner judged it (not critical)
    assert decided.decision.verdict is Verdict.INELIGIBLE
    assert "the kubelet preempts only for critical pods" in decided.decision.message


def test_nothing_is_decided_before_the_views_first_sync(ledger: Engine) -> None:
    view = three_full_nodes()
    view.wait_ready = lambda timeout=None: False  # type: ignore[method-assign]
    with pytest.raises(ViewNotReadyError):
        view.path(ledger, view_ready_timeout=0.01).decide(view.request("urgent-0"))


def sequences(ledger: Engine) -> list[int]:
    """Each decision's sequence in its worker (one per planner run), in ledger order."""
    with ledger.connect() as connection:
        payloads = connection.execute(
            select(events.c.payload).where(events.c.kind == "decision_made").order_by(events.c.id)
        )
        return [payload["context"]["sequence"] for (payload,) in payloads]


def test_a_batch_planned_ahead_is_planned_once(ledger: Engine) -> None:
    view = three_full_nodes()
    path = view.path(ledger)
    path.prime()
    path.decide(view.request("urgent-0"))
    answers = decide_while_the_lock_is_taken(
        path, view, [view.request(f"urgent-{i}") for i in (1, 2, 3)]
    )
    assert all(isinstance(a, Decided) for a in answers)
    assert sequences(ledger) == [1, 2, 3, 4]


def test_a_decision_made_by_another_replica_between_plan_and_lock_is_respected(
    ledger: Engine,
) -> None:
    """Replica A plans urgent-0 ahead; before it takes the lock, replica B decides urgent-1
    and commits. A's plan did not know B's claim: A plans again under the lock, and its
    victims are not B's."""
    view = three_full_nodes()
    a, b = view.path(ledger, identity="replica-a"), view.path(ledger, identity="replica-b")
    a.prime()
    planned_ahead = a._plan_ahead  # white box: the moment between the plan and the lock
    decided_by_b: list[Decided] = []

    def plan_then_let_b_decide(batch: Any) -> Any:
        ahead = planned_ahead(batch)
        b_decided = b.decide(view.request("urgent-1"))
        assert isinstance(b_decided, Decided)
        decided_by_b.append(b_decided)
        return ahead

    a._plan_ahead = plan_then_let_b_decide  # type: ignore[method-assign]
    by_a = a.decide(view.request("urgent-0"))
    assert isinstance(by_a, Decided) and by_a.decision.verdict is Verdict.PREEMPT
    [by_b] = decided_by_b
    assert not {v.uid for v in by_a.decision.victims} & {v.uid for v in by_b.decision.victims}
    assert by_a.claims == ["default/urgent-1"]

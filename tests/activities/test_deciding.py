"""The decision path alone (no Temporal, no API server): a SQLite ledger and an in-memory view.

Scenarios:
- requests queued while the lock is taken are decided in one acquisition, and decide exactly
  as one-by-one decisions would: no victim in two decisions, each decision's claim respected
  by the next, one write-ahead each;
- a retried run (its preemptor already holds a claim) decides again without meeting its own
  claim, and chooses the victims its claim holds;
- a preemptor the planner cannot read fails alone; the rest of its batch is decided;
- a request waiting its turn heartbeats (so a dead worker's select is noticed at once).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select

from preemptctl import migrations
from preemptctl.activities.deciding import Decided, DecisionPath, DecisionRequest
from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.ledger.models import events
from preemptctl.preemption.decision import PodRef, Verdict
from preemptctl.preemption.errors import PlannerInputError
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

    def request(self, name: str, run: str = "run-1") -> DecisionRequest:
        obj = self.items[name]
        meta = obj["metadata"]
        ref = PodRef(meta["namespace"], meta["name"], meta["uid"], obj["spec"]["priority"])
        return DecisionRequest(f"p-{name}", run, NOW, ref, obj)


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
    path: DecisionPath, view: View, requests: list[DecisionRequest]
) -> list[Decided | BaseException]:
    """Queue every request while this test holds the process's decision lock, then let go:
    the first thread to take it decides the whole queue."""
    path._local.acquire()  # white box: the lock the batch's leader takes
    try:
        with ThreadPoolExecutor(max_workers=len(requests)) as pool:
            futures = [pool.submit(path.decide, request, view.read) for request in requests]
            deadline = time.monotonic() + 10
            while len(path._queue) < len(requests):
                assert time.monotonic() < deadline, "the requests never queued"
                time.sleep(0.01)
            path._local.release()
            return [f.exception() or f.result() for f in futures]
    finally:
        if path._local.locked():
            path._local.release()


def test_queued_requests_are_decided_in_one_acquisition_as_one_by_one(ledger: Engine) -> None:
    view, path = three_full_nodes(), DecisionPath(ledger)
    requests = [view.request(f"urgent-{i}") for i in range(6)]
    answers = decide_while_the_lock_is_taken(path, view, requests)
    decisions = [a.decision for a in answers if isinstance(a, Decided)]
    victims = [v.uid for d in decisions for v in d.victims]
    assert [d.status for d in decisions] == [Verdict.PREEMPT] * 6
    assert len(victims) == len(set(victims)) == 12
    assert [made for _, made in path.holds] == [6]
    with ledger.connect() as connection:
        written = connection.execute(
            select(func.count()).select_from(events).where(events.c.kind == "decision_made")
        ).scalar_one()
    assert written == 6


def test_a_retried_run_does_not_meet_its_own_claim(ledger: Engine) -> None:
    view, path = three_full_nodes(), DecisionPath(ledger)
    first = path.decide(view.request("urgent-0"), view.read)
    again = path.decide(view.request("urgent-0"), view.read)
    assert again.decision.status is Verdict.PREEMPT
    assert [v.uid for v in again.decision.victims] == [v.uid for v in first.decision.victims]


def test_an_unreadable_request_fails_alone(ledger: Engine) -> None:
    view, path = three_full_nodes(), DecisionPath(ledger)
    unreadable = view.request("urgent-5")
    resources = unreadable.preemptor_obj["spec"]["containers"][0]["resources"]
    resources["requests"]["cpu"] = "two cpus"
    answers = decide_while_the_lock_is_taken(
        path, view, [view.request("urgent-0"), unreadable, view.request("urgent-1")]
    )
    assert isinstance(answers[1], PlannerInputError)
    assert all(isinstance(a, Decided) for a in (answers[0], answers[2]))


def test_a_request_waiting_its_turn_heartbeats(ledger: Engine) -> None:
    view, path = three_full_nodes(), DecisionPath(ledger)
    beaten = threading.Event()
    path._local.acquire()  # white box: another batch is deciding
    try:
        with ThreadPoolExecutor(max_workers=1) as pool:
            future = pool.submit(path.decide, view.request("urgent-0"), view.read, beaten.set)
            assert beaten.wait(timeout=10)
            path._local.release()
            assert future.result().decision.status is Verdict.PREEMPT
    finally:
        if path._local.locked():
            path._local.release()

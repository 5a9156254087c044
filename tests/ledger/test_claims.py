"""Claims: the ledger's in-flight preemptions, and the lock that serializes decisions.

Scenarios:
- a decision written ahead is a claim on its node and victims: the domain's `Claim`, naming
  the run that holds it; on the decision's node even where its victims' rows name their
  own (a gang taken whole, on other nodes);
- a run that has ended (completed, failed, aborted, dry run) claims nothing;
- a retried run's claim is its own: ending run-1 leaves run-2's claim open;
- a run that waits for hours still claims: claims end with their run, never by age;
- the decision lock lets one holder in at a time, on Postgres and on SQLite;
- a decision that cannot get the lock within its wait gives up as "ledger unavailable"
  (its activity is retried) instead of waiting forever;
- the lock's transaction commits what it wrote;
- the incremental reader agrees with the full read: it sees decisions made since its last
  read (by any worker) and forgets runs that ended, whenever their end was written;
- a group decision written ahead is a claim on its victims (on every node) and on each
  member it placed, on that member's node; the incremental reader reads it the same.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from sqlalchemy import Engine, func, select

from preemptctl.ledger.claims import ClaimReader, decision_lock, open_claims
from preemptctl.ledger.errors import LedgerUnavailableError
from preemptctl.ledger.events import decision_events
from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.models import events
from preemptctl.ledger.writer import append_batch, append_batch_on
from preemptctl.preemption.claims import Claim
from tests.ledger.builders import (
    API,
    BATCH_1,
    BATCH_7,
    BATCH_8,
    T0,
    TRAIN_A,
    TRAIN_A_MEMBERS,
    TRAIN_B,
    event,
    four_candidate,
    group_preemption,
)


def decide(engine: Engine, preemption_id: str = "p-1", run_id: str = "run-1") -> None:
    append_batch(
        engine,
        decision_events(preemption_id, run_id, API, four_candidate(), T0),
    )


def claims(engine: Engine) -> list[Claim]:
    with engine.connect() as connection:
        return open_claims(connection)


def test_a_decision_written_ahead_claims_its_node_and_victims(sqlite_engine: Engine) -> None:
    decide(sqlite_engine)
    [claim] = claims(sqlite_engine)
    assert claim == Claim(
        API.uid, "node-3", frozenset({BATCH_7.uid, BATCH_8.uid}), "p-1", "run-1", holder=API.key
    )


def test_a_claim_is_on_its_decisions_node_whatever_its_victims_nodes(
    sqlite_engine: Engine,
) -> None:
    elsewhere = {BATCH_7.uid: "node-1", BATCH_8.uid: "node-2"}
    append_batch(
        sqlite_engine,
        decision_events("p-1", "run-1", API, four_candidate(), T0, victim_nodes=elsewhere),
    )
    reader = ClaimReader()
    with sqlite_engine.connect() as connection:
        assert [c.node for c in open_claims(connection)] == ["node-3"]
        assert [c.node for c in reader.read(connection)[0]] == ["node-3"]


@pytest.mark.parametrize(
    "kind",
    [EventKind.COMPLETED, EventKind.FAILED, EventKind.PREEMPTION_ABORTED, EventKind.DRY_RUN],
)
def test_an_ended_run_claims_nothing(sqlite_engine: Engine, kind: EventKind) -> None:
    decide(sqlite_engine)
    append_batch(sqlite_engine, [event("p-1", kind, T0 + timedelta(seconds=5))])
    assert claims(sqlite_engine) == []


def test_a_retried_runs_claim_is_its_own(sqlite_engine: Engine) -> None:
    decide(sqlite_engine, run_id="run-1")
    append_batch(sqlite_engine, [event("p-1", EventKind.FAILED, T0)])
    decide(sqlite_engine, run_id="run-2")
    assert [claim.run_id for claim in claims(sqlite_engine)] == ["run-2"]


def test_a_run_that_waits_for_hours_still_claims(sqlite_engine: Engine) -> None:
    decide(sqlite_engine)
    append_batch(sqlite_engine, [event("p-1", EventKind.NOMINATED, T0 + timedelta(hours=3))])
    assert [claim.run_id for claim in claims(sqlite_engine)] == ["run-1"]


@pytest.mark.parametrize("engine_fixture", ["sqlite_engine", "pg_engine"])
def test_the_decision_lock_admits_one_holder_at_a_time(
    engine_fixture: str, request: pytest.FixtureRequest
) -> None:
    engine: Engine = request.getfixturevalue(engine_fixture)
    inside, overlaps = [0], []

    def hold() -> None:
        with decision_lock(engine):
            inside[0] += 1
            overlaps.append(inside[0])
            time.sleep(0.05)
            inside[0] -= 1

    threads = [threading.Thread(target=hold) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert overlaps == [1, 1, 1, 1]


def test_a_decision_gives_up_when_the_lock_stays_taken(pg_engine: Engine) -> None:
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with decision_lock(pg_engine):
            taken.set()
            release.wait(timeout=30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert taken.wait(timeout=30)
        with pytest.raises(LedgerUnavailableError), decision_lock(pg_engine, lock_wait_seconds=0.1):
            pass
    finally:
        release.set()
        holder.join()


def test_what_the_lock_holder_writes_is_committed(pg_engine: Engine) -> None:
    with decision_lock(pg_engine) as connection:
        append_batch_on(connection, decision_events("p-9", "run-1", API, four_candidate(), T0))
    with pg_engine.connect() as connection:
        count = connection.execute(select(func.count()).select_from(events)).scalar_one()
    assert count == 3


def test_the_incremental_reader_agrees_with_the_full_read(sqlite_engine: Engine) -> None:
    reader = ClaimReader()
    decide(sqlite_engine, "p-1")
    with sqlite_engine.connect() as connection:
        assert [c.preemption_id for c in reader.read(connection)[0]] == ["p-1"]
    decide(sqlite_engine, "p-2")
    append_batch(sqlite_engine, [event("p-1", EventKind.COMPLETED, T0 + timedelta(seconds=5))])
    decide(sqlite_engine, "p-3")
    with sqlite_engine.connect() as connection:
        incremental = sorted(c.preemption_id for c in reader.read(connection)[0])
        full = sorted(c.preemption_id for c in open_claims(connection))
    assert incremental == full == ["p-2", "p-3"]


def test_a_group_decision_claims_its_victims_and_its_members_room(sqlite_engine: Engine) -> None:
    reader = ClaimReader()
    with sqlite_engine.connect() as connection:
        assert reader.read(connection)[0] == []
    append_batch(sqlite_engine, group_preemption("g-1", end=None)[:9])  # the write-ahead
    expected = Claim(
        TRAIN_A.uid,
        "",
        frozenset(v.uid for v in (*TRAIN_B, BATCH_1)),
        "g-1",
        "run-1",
        members=(
            (TRAIN_A_MEMBERS[0].uid, "node-1"),
            (TRAIN_A_MEMBERS[1].uid, "node-1"),
            (TRAIN_A_MEMBERS[2].uid, "node-2"),
            (TRAIN_A_MEMBERS[3].uid, "node-2"),
        ),
        holder="ml/train-a",
    )
    assert claims(sqlite_engine) == [expected]
    with sqlite_engine.connect() as connection:
        assert reader.read(connection)[0] == [expected]

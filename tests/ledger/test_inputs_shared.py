"""Decision inputs stored once per object, in the ledger: the recorder's rows and packs, read
back under caps, pruned by retention (issues 22 item 3, 20 findings 10 and 11).

Scenarios (on Postgres and on SQLite):
- a decision recorded with its packs reads back whole and replays the same decision; what
  `record` says it appended is what the tables hold
- a retried append keeps one row, and the packs it carried are kept for later decisions
- the recorder: a second decision over an unchanged view appends its row and no pack; a
  decision after the view changed appends a few KiB; both replay the same decision
- after the ledger refused an append, the recorder's next decision stores every object
  again (what it believed stored may not be), and replays
- a row referencing a pack that is gone is "incomplete", not a traceback; a pack that
  inflates past its cap, or is cut short, is refused as damaged
- a row that inflates past its cap (a zlib bomb) is refused before it is inflated whole
- pruning on SQLite keeps the ledger's minimum retention, and removes the packs past their
  last reference
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, func, insert, select, text, update

from preemptctl.ledger import inputs, inputs_recorder
from preemptctl.ledger.errors import LedgerUnavailableError
from preemptctl.ledger.inputs import InputsRow, latest, prune, record
from preemptctl.ledger.inputs_recorder import InputsRecorder
from preemptctl.ledger.models import (
    decision_input_packs,
    decision_inputs,
    decision_inputs_retention,
)
from preemptctl.preemption.decision import PodRef, Strategy
from preemptctl.preemption.inputs_replay import RecordedInputsError, compare, rebuild
from preemptctl.preemption.planner import plan
from preemptctl.preemption.recorded_inputs import Captured, capture, decision_summary
from preemptctl.preemption.shared_inputs import Pack
from preemptctl.preemption.snapshot import ClusterSnapshot
from tests.preemption.builders import node, pod, snapshot

NOW = datetime.now(UTC).replace(microsecond=0)
PREEMPTOR = PodRef("default", "p", "uid-default-p", 100)
MiB = 1 << 20


@pytest.fixture(params=["postgres", "sqlite"])
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    name = "pg_engine" if request.param == "postgres" else "sqlite_engine"
    yield request.getfixturevalue(name)


def view() -> ClusterSnapshot:
    items: list[dict[str, Any]] = []
    for n in range(4):
        items.append(node(f"n{n}", cpu="4"))
        items += [pod(f"low-{n}-{i}", node=f"n{n}", priority=10, cpu="1") for i in range(4)]
    items.append(pod("p", priority=100, cpu="2"))
    return snapshot(*items)


def captured(made: ClusterSnapshot) -> tuple[Captured, Any]:
    preemptor = made.pod_by_key("default/p")
    assert preemptor is not None
    decision = plan(made, preemptor.key)
    return capture(made, preemptor, Strategy.DEFAULT, None, decision), decision


def row(run: str, recorded_at: datetime = NOW) -> InputsRow:
    return InputsRow("p-1", run, PREEMPTOR, recorded_at)


def replays_the_same(engine: Engine, run: str, decision: Any) -> bool:
    found = latest(engine, run)
    assert found is not None
    rebuilt = rebuild(*found.replayable())
    assert rebuilt.preemptor is not None
    again = plan(rebuilt.snapshot, rebuilt.preemptor.key, Strategy.DEFAULT, rebuilt.args)
    return compare(decision_summary(decision), decision_summary(again)) == []


def count(engine: Engine, table: Any) -> int:
    with engine.connect() as connection:
        return int(connection.execute(select(func.count()).select_from(table)).scalar_one())


def recorder_of(engine: Engine) -> InputsRecorder:
    return InputsRecorder(engine, max_bytes=1 << 20)


def test_a_decision_with_its_packs_reads_back_and_replays(engine: Engine) -> None:
    recorder = recorder_of(engine)
    made, decision = captured(view())
    recorder.submit(row("run-1"), made)
    recorder.wait()
    [appended] = recorder.appended
    with engine.connect() as connection:
        stored = connection.execute(
            select(func.sum(decision_input_packs.c.stored_bytes))
        ).scalar_one()
    assert (appended.appended, appended.pack_bytes) == (True, stored)
    assert replays_the_same(engine, "run-1", decision)
    found = latest(engine, "run-1")
    assert found is not None and len(found.document()["pods"]) == 16
    recorder.close()


def test_a_retried_append_keeps_one_row_and_its_packs(engine: Engine) -> None:
    body = [Pack(11, leaf=True, blobs=[b"{}"], referenced_until=NOW.timestamp())]
    again = [Pack(12, leaf=True, blobs=[b"{}"], referenced_until=NOW.timestamp())]
    first = record(engine, dataclasses.replace(row("run-1"), raw=b"{}"), max_bytes=0, packs=body)
    second = record(engine, dataclasses.replace(row("run-1"), raw=b"{}"), max_bytes=0, packs=again)
    assert (bool(first), bool(second), second.pack_bytes > 0) == (True, False, True)
    assert (count(engine, decision_inputs), count(engine, decision_input_packs)) == (1, 2)


def test_the_recorder_appends_only_what_changed(engine: Engine) -> None:
    recorder = recorder_of(engine)
    made = view()
    first, decision = captured(made)
    recorder.submit(row("run-1"), first)
    recorder.wait()
    same, _ = captured(made)
    recorder.submit(row("run-2"), same)
    recorder.wait()
    victim = made.pods["uid-default-low-2-1"]
    made.upsert_pod(dataclasses.replace(victim, priority=5))
    changed, changed_decision = captured(made)
    recorder.submit(row("run-3"), changed)
    recorder.wait()
    one, two, three = recorder.appended
    assert (two.pack_bytes, 0 < three.pack_bytes < one.pack_bytes) == (0, True)
    assert replays_the_same(engine, "run-2", decision)
    assert replays_the_same(engine, "run-3", changed_decision)
    recorder.close()


def test_after_a_refused_append_the_next_decision_stores_everything(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise LedgerUnavailableError("the ledger went away")

    appends = iter([record, refuse, record])

    monkeypatch.setattr(
        inputs_recorder, "record", lambda *args, **kwargs: next(appends)(*args, **kwargs)
    )
    recorder = recorder_of(engine)
    made = view()
    first, decision = captured(made)
    for run in ("run-1", "run-2", "run-3"):
        recorder.submit(row(run), captured(made)[0] if run != "run-1" else first)
        recorder.wait()
    assert [a.pack_bytes > 0 for a in recorder.appended] == [True, True]
    assert latest(engine, "run-2") is None
    assert replays_the_same(engine, "run-3", decision)
    recorder.close()


def behind_the_triggers(engine: Engine, statement: Any) -> None:
    """Change the packs behind the append-only triggers' back (a person with the owner's
    rights, or a damaged backup)."""
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text("ALTER TABLE decision_input_packs DISABLE TRIGGER USER"))
        else:
            connection.execute(text("DROP TRIGGER decision_input_packs_no_update"))
        connection.execute(statement)


def test_a_row_whose_pack_is_gone_is_incomplete(engine: Engine) -> None:
    recorder = recorder_of(engine)
    recorder.submit(row("run-1"), captured(view())[0])
    recorder.wait()
    recorder.close()
    behind_the_triggers(engine, text("DELETE FROM decision_input_packs"))
    found = latest(engine, "run-1")
    assert found is not None
    with pytest.raises(RecordedInputsError, match=r"incomplete: pack\(s\) .* not found"):
        found.document()


def _bomb(size: int) -> bytes:
    return zlib.compress(b" " * size, 9)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (_bomb(20 * MiB), "inflate to more than 16 MiB; refused as damaged"),
        (zlib.compress(b"[" + b"{}," * 100 + b"{}]")[:-6], "the compressed data is cut short"),
        (zlib.compress(b'{"a": 1}'), "not a JSON array"),
    ],
    ids=["a zlib bomb", "cut short", "not an array"],
)
def test_a_damaged_pack_is_refused(engine: Engine, body: bytes, message: str) -> None:
    recorder = recorder_of(engine)
    recorder.submit(row("run-1"), captured(view())[0])
    recorder.wait()
    recorder.close()
    behind_the_triggers(engine, update(decision_input_packs).values(body=body))
    found = latest(engine, "run-1")
    assert found is not None
    with pytest.raises(RecordedInputsError, match=message):
        found.document()


def test_a_row_inflating_past_its_cap_is_refused(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inputs, "MAX_DOCUMENT_BYTES", 4 * MiB)
    values = {
        "preemption_id": "p-1",
        "run_id": "run-bomb",
        "recorded_at": NOW,
        "preemptor_namespace": "default",
        "preemptor_name": "p",
        "preemptor_uid": "uid-default-p",
        "planner_version": "x",
        "encoding": "json+zlib",
        "raw_bytes": 10,
        "stored_bytes": 10,
        "inputs": _bomb(8 * MiB),
        "omitted": None,
        "idempotency_key": "bomb",
    }
    with engine.begin() as connection:
        connection.execute(insert(decision_inputs), values)
    found = latest(engine, "run-bomb")
    assert found is not None
    with pytest.raises(RecordedInputsError, match="inputs inflate to more than 4 MiB"):
        found.root()


def test_sqlite_pruning_keeps_the_minimum_and_removes_unreferenced_packs(
    sqlite_engine: Engine,
) -> None:
    def pack(pack_id: int, age: timedelta) -> Pack:
        return Pack(pack_id, leaf=True, blobs=[b"{}"], referenced_until=(NOW - age).timestamp())

    for run, age in (("two-days", timedelta(days=2)), ("forty-days", timedelta(days=40))):
        made = dataclasses.replace(row(run, NOW - age), raw=b"{}")
        record(sqlite_engine, made, max_bytes=0, packs=[pack(age.days, age)])
    assert prune(sqlite_engine, 1, now=NOW) == 1
    with sqlite_engine.connect() as connection:
        packs = sorted(connection.execute(select(decision_input_packs.c.id)).scalars())
    assert ([latest(sqlite_engine, r) is not None for r in ("two-days", "forty-days")], packs) == (
        [True, False],
        [2],
    )
    with sqlite_engine.begin() as connection:
        connection.execute(update(decision_inputs_retention).values(minimum_days=1))
    assert prune(sqlite_engine, 1, now=NOW) == 1

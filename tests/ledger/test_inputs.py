"""Decision inputs in the ledger: appended once, compressed, found by run or preemption, pruned.

Scenarios (on Postgres and on SQLite):
- recorded inputs come back as they were given, with their raw and stored sizes
- appending the same decision's inputs twice (a retried activity) keeps one row
- inputs over the size limit leave a marker row saying "too large: N bytes", and reading
  them says why they cannot be read
- `latest` finds a run's decision by run ID, else a preemption's newest decision by
  preemption ID, else nothing
- pruning deletes exactly the inputs older than the retention, and refuses less than a day
- damaged inputs are reported, not raised as a decompression error
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, insert

from preemptctl.ledger.inputs import (
    InputsRow,
    RecordedInputs,
    latest,
    prune,
    record,
    serialise,
)
from preemptctl.ledger.models import decision_inputs
from preemptctl.preemption.decision import PodRef

NOW = datetime.now(UTC).replace(microsecond=0)
PREEMPTOR = PodRef("web", "api-1", "uid-api-1", 1000)
DOCUMENT: dict[str, Any] = {"format": 1, "nodes": [{"name": f"n{i}"} for i in range(50)]}


@pytest.fixture(params=["postgres", "sqlite"])
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    name = "pg_engine" if request.param == "postgres" else "sqlite_engine"
    yield request.getfixturevalue(name)


def row(run: str = "run-1", preemption: str = "p-1", step: str | int = "", **kw: Any) -> InputsRow:
    values: dict[str, Any] = {
        "preemption_id": preemption,
        "run_id": run,
        "preemptor": PREEMPTOR,
        "recorded_at": NOW,
        "planner_version": "9.9 planner 1",
        "raw": serialise(DOCUMENT),
        "step": step,
    }
    if "document" in kw:
        kw["raw"] = serialise(kw.pop("document"))
    values.update(kw)
    return InputsRow(**values)


def test_recorded_inputs_come_back_as_given(engine: Engine) -> None:
    assert record(engine, row(), max_bytes=1 << 20)
    found = latest(engine, "run-1")
    assert found is not None
    assert found.document() == DOCUMENT
    assert (found.preemptor, found.planner_version, found.encoding) == (
        "web/api-1",
        "9.9 planner 1",
        "json+zlib",
    )
    assert found.recorded_at == NOW
    assert found.stored_bytes < found.raw_bytes


def test_a_retried_append_keeps_one_row(engine: Engine) -> None:
    assert record(engine, row(), max_bytes=1 << 20)
    assert not record(engine, row(document={"format": 1, "other": True}), max_bytes=1 << 20)
    found = latest(engine, "run-1")
    assert found is not None and found.document() == DOCUMENT


def test_inputs_over_the_limit_leave_a_marker_that_says_why(engine: Engine) -> None:
    record(engine, row(), max_bytes=20)
    found = latest(engine, "run-1")
    assert found is not None
    assert (found.encoding, found.inputs) == ("omitted", None)
    reason = f"too large: {found.stored_bytes} bytes compressed, over the limit of 20"
    assert found.omitted == reason
    with pytest.raises(ValueError, match=reason):
        found.document()


def test_latest_finds_a_run_else_a_preemptions_newest_decision(engine: Engine) -> None:
    record(engine, row("run-1", "p-1"), max_bytes=0)
    record(engine, row("run-2", "p-1", document={"format": 1, "second": True}), max_bytes=0)
    record(engine, row("run-2", "p-1", step=1, document={"format": 1, "third": 1}), max_bytes=0)
    by_run = latest(engine, "run-1")
    by_preemption = latest(engine, "p-1")
    assert by_run is not None and by_run.run_id == "run-1"
    assert by_preemption is not None and by_preemption.document() == {"format": 1, "third": 1}
    assert latest(engine, "p-404") is None


def test_pruning_deletes_exactly_the_inputs_older_than_the_retention(engine: Engine) -> None:
    record(engine, row("old", recorded_at=NOW - timedelta(days=31)), max_bytes=0)
    record(engine, row("recent", recorded_at=NOW - timedelta(days=29)), max_bytes=0)
    record(engine, row("new"), max_bytes=0)
    assert prune(engine, 30) == 1
    assert [latest(engine, run) is not None for run in ("old", "recent", "new")] == [
        False,
        True,
        True,
    ]
    with pytest.raises(ValueError, match="at least 1"):
        prune(engine, 0)


def test_damaged_inputs_are_reported(engine: Engine) -> None:
    with engine.begin() as connection:
        connection.execute(
            insert(decision_inputs),
            {
                "preemption_id": "p-1",
                "run_id": "run-1",
                "recorded_at": NOW,
                "preemptor_namespace": "web",
                "preemptor_name": "api-1",
                "preemptor_uid": "uid-api-1",
                "planner_version": "x",
                "encoding": "json+zlib",
                "raw_bytes": 10,
                "stored_bytes": 5,
                "inputs": b"not zlib",
                "omitted": None,
                "idempotency_key": "k",
            },
        )
    found = latest(engine, "run-1")
    assert isinstance(found, RecordedInputs)
    with pytest.raises(ValueError, match="inputs damaged"):
        found.document()

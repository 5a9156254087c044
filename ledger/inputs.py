"""Decision inputs: what the planner was given, compressed, in `decision_inputs`.

One row per decision (see `preemption.recorded_inputs` for what is kept), written after the
deciding transaction commits, outside the decision lock: serialising and compressing a
decision's inputs costs far more than the decision's own rows, and the lock hold is the
decisions' throughput ceiling. The insert ignores a duplicate idempotency key, so a retried
activity records its decision's inputs once.

Inputs larger than the configured limit (compressed) are not kept: a marker row says
"too large: N bytes", so `preemptctl replay --decision` can say why it cannot replay.
Rows are deleted only by retention (`prune`): on Postgres through the SECURITY DEFINER
function `prune_decision_inputs(days)` that migration 0003 grants to the ledger's writers,
on SQLite by a plain DELETE.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from sqlalchemy import Engine, delete, select, text

import preemptctl
from preemptctl.ledger.engine import translated_errors
from preemptctl.ledger.models import decision_inputs
from preemptctl.ledger.writer import insert_ignoring_duplicates
from preemptctl.preemption.decision import PLANNER_VERSION, PodRef

ENCODING = "json+zlib"
"""How `inputs` is stored: UTF-8 JSON, zlib-compressed."""
OMITTED = "omitted"
"""The encoding of a marker row: no inputs, `omitted` says why."""
RECORDING_VERSION = f"{preemptctl.__version__} planner {PLANNER_VERSION}"[:64]
"""Which version recorded a decision's inputs (its `planner_version` column), and which one
replays them (`preemptctl replay --decision` prints both)."""
COMPRESSION_LEVEL = 1
"""zlib's fastest level: on the synthetic 5,000-node cluster it takes ~3.5x less CPU than
the default (6) for ~20% more bytes, and the recorder shares the cores with the decision
path (benchmarks/decision_inputs.py). Rows written at any level decompress the same."""


def serialise(document: dict[str, Any]) -> bytes:
    """The inputs as compact UTF-8 JSON."""
    return orjson.dumps(document)


def compress(raw: bytes) -> bytes:
    return zlib.compress(raw, COMPRESSION_LEVEL)


def inputs_key(preemption_id: str, run_id: str, step: str | int = "") -> str:
    """One decision's key: its run and, for a run the budget held back, which attempt."""
    return f"{preemption_id}/{run_id}/decision_inputs/{step}"


@dataclass(frozen=True, slots=True)
class InputsRow:
    """A decision's inputs to append: who decided, for which run, and the inputs themselves."""

    preemption_id: str
    run_id: str
    preemptor: PodRef
    recorded_at: datetime
    raw: bytes = b""
    """The inputs as UTF-8 JSON (`serialise`, or `preemption.recorded_inputs.dumps`)."""
    step: str | int = ""
    omitted: str | None = None
    """Why the inputs were not recorded: a marker row, with no inputs, is appended."""
    planner_version: str = RECORDING_VERSION


def record(engine: Engine, row: InputsRow, *, max_bytes: int) -> bool:
    """Append one decision's inputs (or a marker when larger than `max_bytes` compressed);
    False when the key was already there (a retry). Raises `LedgerError` as the writer does."""
    raw = row.raw
    stored = compress(raw) if row.omitted is None else b""
    values: dict[str, Any] = {
        "preemption_id": row.preemption_id,
        "run_id": row.run_id,
        "recorded_at": row.recorded_at,
        "preemptor_namespace": row.preemptor.namespace,
        "preemptor_name": row.preemptor.name,
        "preemptor_uid": row.preemptor.uid,
        "planner_version": row.planner_version,
        "encoding": ENCODING,
        "raw_bytes": len(raw),
        "stored_bytes": len(stored),
        "inputs": stored,
        "omitted": None,
        "idempotency_key": inputs_key(row.preemption_id, row.run_id, row.step),
    }
    if row.omitted is not None:
        values.update(encoding=OMITTED, inputs=None, omitted=row.omitted)
    elif max_bytes and len(stored) > max_bytes:
        values.update(
            encoding=OMITTED,
            inputs=None,
            omitted=f"too large: {len(stored)} bytes compressed, over the limit of {max_bytes}",
        )
    with translated_errors(engine), engine.begin() as connection:
        statement = insert_ignoring_duplicates(connection.dialect.name, decision_inputs)
        return connection.execute(statement, values).first() is not None


@dataclass(frozen=True, slots=True)
class RecordedInputs:
    """One stored row: `document()` gives the inputs back, unless they were omitted."""

    id: int
    preemption_id: str
    run_id: str
    recorded_at: datetime
    preemptor: str
    planner_version: str
    encoding: str
    raw_bytes: int
    stored_bytes: int
    inputs: bytes | None
    omitted: str | None

    def document(self) -> dict[str, Any]:
        """The inputs as recorded; `ValueError` when they were not kept or cannot be read."""
        if self.inputs is None or self.encoding != ENCODING:
            raise ValueError(self.omitted or f"inputs stored as {self.encoding!r}, not readable")
        try:
            loaded = orjson.loads(zlib.decompress(self.inputs))
        except (zlib.error, orjson.JSONDecodeError) as error:
            raise ValueError(f"inputs damaged: {error}") from None
        if not isinstance(loaded, dict):
            raise ValueError("inputs damaged: not a JSON object")
        return loaded


def latest(engine: Engine, decision: str) -> RecordedInputs | None:
    """The inputs of run `decision`'s latest decision, or else of preemption `decision`'s
    latest one; None when neither recorded any."""
    table = decision_inputs
    with translated_errors(engine), engine.connect() as connection:
        for column in (table.c.run_id, table.c.preemption_id):
            found = connection.execute(
                select(table).where(column == decision).order_by(table.c.id.desc()).limit(1)
            ).first()
            if found is not None:
                return RecordedInputs(
                    id=found.id,
                    preemption_id=found.preemption_id,
                    run_id=found.run_id,
                    recorded_at=found.recorded_at,
                    preemptor=f"{found.preemptor_namespace}/{found.preemptor_name}",
                    planner_version=found.planner_version,
                    encoding=found.encoding,
                    raw_bytes=found.raw_bytes,
                    stored_bytes=found.stored_bytes,
                    inputs=found.inputs,
                    omitted=found.omitted,
                )
    return None


def prune(engine: Engine, retention_days: int, *, now: datetime | None = None) -> int:
    """Delete the inputs recorded more than `retention_days` (at least 1) days ago; how many.
    On Postgres the database's clock decides (`now` is for SQLite tests only)."""
    if retention_days < 1:
        raise ValueError(f"retention_days must be at least 1, not {retention_days}")
    with translated_errors(engine), engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            pruned = connection.execute(
                text("SELECT prune_decision_inputs(:days)"), {"days": retention_days}
            ).scalar_one()
            return int(pruned)
        cutoff = (now or datetime.now(UTC)) - timedelta(days=retention_days)
        result = connection.execute(
            delete(decision_inputs).where(decision_inputs.c.recorded_at < cutoff)
        )
        return int(result.rowcount)

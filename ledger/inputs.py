"""Decision inputs: what the planner was given, compressed, in `decision_inputs` and
`decision_input_packs`.

One row per decision in `decision_inputs` (see `preemption.recorded_inputs` for what is
kept), written after the deciding transaction commits, outside the decision lock. The worker
writes what is the decision's own there (the preemptor, the planner's arguments, the claims,
the decision) with references to the objects it read, each of which is stored once, in packs
(`decision_input_packs`), by the first decision that read it (`preemption.shared_inputs`);
the decision's row and its new packs are appended in one transaction. A row may also hold
the inputs whole (older versions, tests, a row edited by hand). The insert ignores a
duplicate idempotency key, so a retried activity records its decision's inputs once.

A decision whose own part is larger than the configured limit (compressed) is not kept: a
marker row says "too large: N bytes", so `preemptctl replay --decision` can say why it
cannot replay. Rows and packs are deleted only by retention (`prune`): on Postgres through
the SECURITY DEFINER function `prune_decision_inputs(days)`, which keeps at least the
ledger's `decision_inputs_retention.minimum_days` whatever it is asked; on SQLite by plain
DELETEs under the same rule.

Reading trusts nothing it reads: every blob is inflated with a size cap, every reference and
count checked (`preemption.inputs_replay`, `preemption.shared_inputs`); what fails is a
`RecordedInputsError` (a `ValueError`) naming the problem.
"""

from __future__ import annotations

import secrets
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from sqlalchemy import Engine, delete, insert, select, text

import preemptctl
from preemptctl.ledger.engine import translated_errors
from preemptctl.ledger.models import (
    decision_input_packs,
    decision_inputs,
    decision_inputs_retention,
)
from preemptctl.ledger.writer import insert_ignoring_duplicates
from preemptctl.preemption.decision import PLANNER_VERSION, PodRef
from preemptctl.preemption.inputs_replay import RecordedInputsError, inline_objects
from preemptctl.preemption.shared_inputs import (
    MAX_PACK_BYTES,
    Pack,
    PackLoader,
    is_shared,
    resolve,
)

ENCODING = "json+zlib"
"""How `inputs` and a pack's `body` are stored: UTF-8 JSON, zlib-compressed."""
OMITTED = "omitted"
"""The encoding of a marker row: no inputs, `omitted` says why."""
RECORDING_VERSION = f"{preemptctl.__version__} planner {PLANNER_VERSION}"[:64]
"""Which version recorded a decision's inputs (its `planner_version` column), and which one
replays them (`preemptctl replay --decision` prints both)."""
COMPRESSION_LEVEL = 1
"""zlib's fastest level: about a third of the CPU of the default (6) for about 20% more
bytes (benchmarks/decision_inputs.py). Rows written at any level decompress the same."""
MAX_DOCUMENT_BYTES = 64 * 1024 * 1024
"""A decision's row inflates to at most this (rows written whole by older versions stayed
under 40 MiB); past it, the row is refused as damaged rather than inflated further."""
PACKS_PER_QUERY = 16
"""Packs fetched per query when reading (at most 4 MiB of JSON each, compressed ~10:1)."""
PRUNE_SLACK = timedelta(hours=1)
"""Packs are pruned this long after the retention allows: a margin for the clock of the
Temporal server (a decision's `recorded_at`) running ahead of the recorder's."""
DEFAULT_MINIMUM_RETENTION_DAYS = 30
"""The ledger's minimum retention as migrated (the worker's default retention)."""


def serialise(document: dict[str, Any]) -> bytes:
    """The inputs as compact UTF-8 JSON."""
    return orjson.dumps(document)


def compress(raw: bytes) -> bytes:
    return zlib.compress(raw, COMPRESSION_LEVEL)


def inflate(stored: bytes, cap: int, what: str) -> bytes:
    """`stored` decompressed, refusing more than `cap` bytes of output (a few bytes of zlib
    can claim gigabytes) and truncated or damaged data: `RecordedInputsError`."""
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(stored, cap + 1)
    except zlib.error as error:
        raise RecordedInputsError(f"{what} damaged: {error}") from None
    if len(raw) > cap:
        raise RecordedInputsError(
            f"{what} inflate to more than {cap // (1024 * 1024)} MiB; refused as damaged"
        )
    if not inflater.eof:
        raise RecordedInputsError(f"{what} damaged: the compressed data is cut short")
    return raw


def new_pack_id() -> int:
    """A pack's id: 63 random bits (each recorder names its own packs, without a round trip
    or a shared sequence)."""
    return secrets.randbits(63) or 1


def inputs_key(preemption_id: str, run_id: str, step: str | int = "") -> str:
    """One decision's key: its run and, for a run the budget held back, which attempt."""
    return f"{preemption_id}/{run_id}/decision_inputs/{step}"


@dataclass(frozen=True, slots=True)
class InputsRow:
    """A decision's inputs to append: who decided, for which run, and the inputs themselves.

    A group decision names its group as the preemptor (namespace, name, UID), as its
    ledger events do."""

    preemption_id: str
    run_id: str
    preemptor: PodRef
    recorded_at: datetime
    raw: bytes = b""
    """The inputs as UTF-8 JSON: whole, or the decision's own part with its references."""
    step: str | int = ""
    omitted: str | None = None
    """Why the inputs were not recorded: a marker row, with no inputs, is appended."""
    planner_version: str = RECORDING_VERSION


@dataclass(frozen=True, slots=True)
class Appended:
    """What `record` appended: whether the row is new (False: a retry found its key), and
    the bytes stored: the row's, and the packs' appended with it."""

    appended: bool
    row_bytes: int = 0
    pack_bytes: int = 0

    def __bool__(self) -> bool:
        return self.appended


def record(
    engine: Engine, row: InputsRow, *, max_bytes: int, packs: Sequence[Pack] = ()
) -> Appended:
    """Append one decision's inputs (or a marker when its row is larger than `max_bytes`
    compressed) with the `packs` of objects it is the first to reference, in one
    transaction. The packs are appended even when the row is a retry's or a marker: later
    decisions reference them. Raises `LedgerError` as the writer does."""
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
    pack_rows = [_pack_row(pack) for pack in packs]
    with translated_errors(engine), engine.begin() as connection:
        if pack_rows:
            connection.execute(insert(decision_input_packs), pack_rows)
        statement = insert_ignoring_duplicates(connection.dialect.name, decision_inputs)
        appended = connection.execute(statement, values).first() is not None
    return Appended(
        appended,
        len(values["inputs"] or b"") if appended else 0,
        sum(len(pack["body"]) for pack in pack_rows),
    )


def _pack_row(pack: Pack) -> dict[str, Any]:
    raw = pack.body()
    body = compress(raw)
    return {
        "id": pack.id,
        "referenced_until": datetime.fromtimestamp(pack.referenced_until, UTC),
        "objects": len(pack.blobs),
        "encoding": ENCODING,
        "raw_bytes": len(raw),
        "stored_bytes": len(body),
        "body": body,
    }


# -- reading ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecordedInputs:
    """One stored row: `document()` gives the inputs back whole, unless they were omitted;
    `replayable()` gives them for `inputs_replay.rebuild` without holding every object."""

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
    load_packs: PackLoader | None = field(default=None, compare=False, repr=False)
    """Reads the packs a row written for the shared layout references (`latest` sets it)."""

    def root(self) -> dict[str, Any]:
        """The row's own JSON object (whole inputs, or the decision's part with references);
        `ValueError` (`RecordedInputsError`) when not kept or not readable."""
        if self.inputs is None or self.encoding != ENCODING:
            raise RecordedInputsError(
                self.omitted or f"inputs stored as {self.encoding!r:.40}, not readable"
            )
        raw = inflate(self.inputs, MAX_DOCUMENT_BYTES, "inputs")
        try:
            loaded = orjson.loads(raw)
        except orjson.JSONDecodeError as error:
            raise RecordedInputsError(f"inputs damaged: {error}") from None
        if not isinstance(loaded, dict):
            raise RecordedInputsError("inputs damaged: not a JSON object")
        return loaded

    def replayable(self) -> tuple[dict[str, Any], Iterator[tuple[str, Any]] | None]:
        """The row's JSON and, for a row written for the shared layout, the objects it
        references as a stream (each pack read once, none held after it is used)."""
        root = self.root()
        if not is_shared(root):
            return root, None
        if self.load_packs is None:
            raise RecordedInputsError("inputs reference stored objects, and no ledger was given")
        return root, resolve(root, self.load_packs)

    def document(self) -> dict[str, Any]:
        """The inputs whole (objects resolved into the inline form's lists)."""
        root, objects = self.replayable()
        if objects is None:
            return root
        whole = {key: value for key, value in root.items() if key != "objects"}
        lists: dict[str, list[Any]] = {
            tag: [] for tag in ("nodes", "pods", "pdbs", "namespaces", "podGroups")
        }
        storage: dict[str, list[Any]] = {}
        for tag, raw in objects:
            (lists[tag] if tag in lists else storage.setdefault(tag, [])).append(raw)
        whole.update(lists, storage=storage)
        list(inline_objects(whole))  # the same checks as a whole row gets
        return whole


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
                    load_packs=pack_loader(engine),
                )
    return None


def pack_loader(engine: Engine) -> PackLoader:
    """Reads packs from `engine`, a few per query, each inflated under a cap and checked to
    be a JSON array; `RecordedInputsError` for one that is not."""

    def load(ids: Iterable[int]) -> Iterator[tuple[int, Sequence[Any]]]:
        wanted = list(ids)
        table = decision_input_packs
        for start in range(0, len(wanted), PACKS_PER_QUERY):
            chunk = wanted[start : start + PACKS_PER_QUERY]
            with translated_errors(engine), engine.connect() as connection:
                rows = connection.execute(
                    select(table.c.id, table.c.encoding, table.c.body).where(table.c.id.in_(chunk))
                ).all()
            for row in sorted(rows, key=lambda found: int(found.id)):
                yield row.id, _blobs_of(row.id, row.encoding, row.body)

    return load


def _blobs_of(pack_id: int, encoding: str, body: bytes) -> list[Any]:
    what = f"inputs pack {pack_id}"
    if encoding != ENCODING:
        raise RecordedInputsError(f"{what} is stored as {encoding!r:.40}, not readable")
    try:
        blobs = orjson.loads(inflate(body, MAX_PACK_BYTES, what))
    except orjson.JSONDecodeError as error:
        raise RecordedInputsError(f"{what} damaged: {error}") from None
    if not isinstance(blobs, list):
        raise RecordedInputsError(f"{what} damaged: not a JSON array")
    return blobs


# -- retention -----------------------------------------------------------------------------------


def minimum_retention_days(engine: Engine) -> int:
    """The fewest days the ledger keeps decision inputs, whatever a worker asks."""
    with translated_errors(engine), engine.connect() as connection:
        found = connection.execute(select(decision_inputs_retention.c.minimum_days)).scalar()
    return int(found) if found is not None else DEFAULT_MINIMUM_RETENTION_DAYS


def prune(engine: Engine, retention_days: int, *, now: datetime | None = None) -> int:
    """Delete the inputs recorded more than `retention_days` (at least 1, and at least the
    ledger's minimum) days ago, and the packs no decision kept references; how many
    decisions' inputs. On Postgres the database's clock decides (`now` is for SQLite)."""
    if retention_days < 1:
        raise ValueError(f"retention_days must be at least 1, not {retention_days}")
    with translated_errors(engine), engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            pruned = connection.execute(
                text("SELECT prune_decision_inputs(:days)"), {"days": retention_days}
            ).scalar_one()
            return int(pruned)
        floor = connection.execute(select(decision_inputs_retention.c.minimum_days)).scalar()
        days = max(retention_days, int(floor or DEFAULT_MINIMUM_RETENTION_DAYS))
        cutoff = (now or datetime.now(UTC)) - timedelta(days=days)
        result = connection.execute(
            delete(decision_inputs).where(decision_inputs.c.recorded_at < cutoff)
        )
        connection.execute(
            delete(decision_input_packs).where(
                decision_input_packs.c.referenced_until < cutoff - PRUNE_SLACK
            )
        )
        return int(result.rowcount)

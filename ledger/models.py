"""The ledger's tables, as SQLAlchemy 2 typed declarative models.

This is what the migrations must produce (a test compares them); it is not how the schema
changes. The column set is flat rather than normalised because every question the ledger
answers filters on the preemptor, the victim, the node or the time, and each of those has
an index here.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    DateTime,
    Dialect,
    Identity,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

EVENTS_TABLE = "preemption_events"
UPSTREAM_TABLE = "upstream_preemptions"
INPUTS_TABLE = "decision_inputs"
PACKS_TABLE = "decision_input_packs"
RETENTION_TABLE = "decision_inputs_retention"


class UTCDateTime(TypeDecorator[datetime]):
    """`timestamptz` on Postgres; on SQLite, which has no zone, UTC stored and UTC read back.

    Without this, SQLite hands back naive datetimes and comparisons with aware ones fail.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("ledger times must be timezone-aware")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


Payload = JSON().with_variant(JSONB(), "postgresql")
"""JSONB on Postgres (indexable, compact), JSON text on SQLite."""

EventId = BigInteger().with_variant(Integer(), "sqlite")
"""SQLite only makes `INTEGER PRIMARY KEY` an auto-incrementing rowid."""


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class PreemptionEvent(Base):
    """One row per event; never updated, never deleted (the database refuses)."""

    __tablename__ = EVENTS_TABLE

    id: Mapped[int] = mapped_column(EventId, Identity(always=True), primary_key=True)
    preemption_id: Mapped[str] = mapped_column(String(255))
    run_id: Mapped[str] = mapped_column(String(255))
    kind: Mapped[str] = mapped_column(String(40))
    occurred_at: Mapped[datetime] = mapped_column(UTCDateTime())
    preemptor_namespace: Mapped[str] = mapped_column(String(253))
    preemptor_name: Mapped[str] = mapped_column(String(253))
    preemptor_uid: Mapped[str] = mapped_column(String(64))
    preemptor_priority: Mapped[int] = mapped_column(Integer)
    node: Mapped[str | None] = mapped_column(String(253))
    victim_namespace: Mapped[str | None] = mapped_column(String(253))
    victim_name: Mapped[str | None] = mapped_column(String(253))
    victim_uid: Mapped[str | None] = mapped_column(String(64))
    victim_priority: Mapped[int | None] = mapped_column(Integer)
    payload: Mapped[dict[str, Any]] = mapped_column(Payload)
    idempotency_key: Mapped[str] = mapped_column(Text)

    __table_args__ = (
        UniqueConstraint("idempotency_key"),
        # Explicit names: the convention's would pass Postgres's 63-character limit.
        Index(
            "ix_preemption_events_preemptor", "preemptor_namespace", "preemptor_name", "occurred_at"
        ),
        Index("ix_preemption_events_victim", "victim_namespace", "victim_name", "occurred_at"),
        Index("ix_preemption_events_node", "node", "occurred_at"),
        Index("ix_preemption_events_occurred_at", "occurred_at"),
        Index("ix_preemption_events_kind", "kind", "occurred_at"),
        Index("ix_preemption_events_preemption", "preemption_id", "id"),
    )


class DecisionLock(Base):
    """One row; the deciding transaction locks it (`FOR UPDATE`), which needs the UPDATE
    privilege that only the ledger's writers hold (see `ledger.claims.decision_lock`)."""

    __tablename__ = "decision_lock"

    id: Mapped[int] = mapped_column(SmallInteger, primary_key=True)

    __table_args__ = (CheckConstraint("id = 1", name="one_row"),)


class UpstreamPreemption(Base):
    """One preemption kube-scheduler made (its `Preempted` Event), as shadow mode observed it;
    append-only. `event_uid` (the Event's UID) makes a watch restart or a second replica
    record it once."""

    __tablename__ = UPSTREAM_TABLE

    id: Mapped[int] = mapped_column(EventId, Identity(always=True), primary_key=True)
    observed_at: Mapped[datetime] = mapped_column(UTCDateTime())
    occurred_at: Mapped[datetime] = mapped_column(UTCDateTime())
    event_uid: Mapped[str] = mapped_column(String(64))
    victim_namespace: Mapped[str] = mapped_column(String(253))
    victim_name: Mapped[str] = mapped_column(String(253))
    victim_uid: Mapped[str | None] = mapped_column(String(64))
    preemptor_uid: Mapped[str] = mapped_column(String(64))
    preemptor_namespace: Mapped[str | None] = mapped_column(String(253))
    preemptor_name: Mapped[str | None] = mapped_column(String(253))
    node: Mapped[str | None] = mapped_column(String(253))
    message: Mapped[str] = mapped_column(Text)

    __table_args__ = (
        UniqueConstraint("event_uid"),
        Index("ix_upstream_preemptions_occurred_at", "occurred_at"),
        Index("ix_upstream_preemptions_preemptor_uid", "preemptor_uid"),
        # The shadow recorder's look-ups at scale: is this victim known, and the rows per
        # namespace in the last hour (its cap).
        Index("ix_upstream_preemptions_victim_uid", "victim_uid"),
        Index("ix_upstream_preemptions_victim", "victim_namespace", "observed_at"),
    )


class DecisionInput(Base):
    """What the planner was given for one decision, compressed, so that `preemptctl replay
    --decision` can plan it again: whole, or what is the decision's own with references to
    objects in `decision_input_packs`. Never updated; deleted only by retention pruning
    (`prune_decision_inputs`). A row whose inputs were not kept keeps `inputs` NULL and says
    why in `omitted`."""

    __tablename__ = INPUTS_TABLE

    id: Mapped[int] = mapped_column(EventId, Identity(always=True), primary_key=True)
    preemption_id: Mapped[str] = mapped_column(String(255))
    run_id: Mapped[str] = mapped_column(String(255))
    recorded_at: Mapped[datetime] = mapped_column(UTCDateTime())
    preemptor_namespace: Mapped[str] = mapped_column(String(253))
    preemptor_name: Mapped[str] = mapped_column(String(253))
    preemptor_uid: Mapped[str] = mapped_column(String(64))
    planner_version: Mapped[str] = mapped_column(String(64))
    encoding: Mapped[str] = mapped_column(String(32))
    raw_bytes: Mapped[int] = mapped_column(BigInteger)
    stored_bytes: Mapped[int] = mapped_column(BigInteger)
    inputs: Mapped[bytes | None] = mapped_column(LargeBinary)
    omitted: Mapped[str | None] = mapped_column(Text)
    idempotency_key: Mapped[str] = mapped_column(Text)

    __table_args__ = (
        UniqueConstraint("idempotency_key"),
        Index("ix_decision_inputs_preemption", "preemption_id", "id"),
        Index("ix_decision_inputs_run_id", "run_id"),
        Index("ix_decision_inputs_recorded_at", "recorded_at"),
    )


class DecisionInputPack(Base):
    """Objects decisions read (pods, nodes, ...) and the tree of references over them, each
    stored once and referenced by the decisions that read it (`preemption.shared_inputs`):
    a compressed JSON array. `id` is chosen by the recorder that appends it; no decision
    recorded after `referenced_until` references it. Never updated; deleted only by
    retention pruning (`prune_decision_inputs`)."""

    __tablename__ = PACKS_TABLE

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    referenced_until: Mapped[datetime] = mapped_column(UTCDateTime())
    objects: Mapped[int] = mapped_column(Integer)
    encoding: Mapped[str] = mapped_column(String(32))
    raw_bytes: Mapped[int] = mapped_column(BigInteger)
    stored_bytes: Mapped[int] = mapped_column(BigInteger)
    body: Mapped[bytes] = mapped_column(LargeBinary)

    __table_args__ = (Index("ix_decision_input_packs_referenced_until", "referenced_until"),)


class DecisionInputsRetention(Base):
    """One row: the fewest days decision inputs are kept, whatever a worker asks
    (`prune_decision_inputs` keeps at least this). Only the ledger's owner may change it."""

    __tablename__ = RETENTION_TABLE

    id: Mapped[int] = mapped_column(SmallInteger, primary_key=True, autoincrement=False)
    minimum_days: Mapped[int] = mapped_column(Integer)

    __table_args__ = (
        CheckConstraint("id = 1", name="one_row"),
        CheckConstraint("minimum_days >= 1", name="at_least_a_day"),
    )


events: Table = Base.metadata.tables[EVENTS_TABLE]
"""The table, for Core statements (inserts, keyset scans) where the ORM adds nothing."""
upstream_preemptions: Table = Base.metadata.tables[UPSTREAM_TABLE]
decision_inputs: Table = Base.metadata.tables[INPUTS_TABLE]
decision_input_packs: Table = Base.metadata.tables[PACKS_TABLE]
decision_inputs_retention: Table = Base.metadata.tables[RETENTION_TABLE]

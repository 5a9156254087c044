"""The append-only preemption_events table, its indexes, and the triggers that keep it so.

Revision ID: 0001
Revises:
Create Date: 2026-11-21

Written out in full rather than importing `ledger.models`: a migration is a fixed point in
history and must not change when the models do.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "preemption_events"

POSTGRES_REFUSE_FUNCTION = """
CREATE FUNCTION preemption_events_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'preemption_events is append-only: % refused', TG_OP
        USING ERRCODE = 'integrity_constraint_violation',
              HINT = 'ledger events are never changed; append a new event instead';
END;
$$
"""

POSTGRES_TRIGGERS = (
    """
    CREATE TRIGGER preemption_events_append_only
    BEFORE UPDATE OR DELETE ON preemption_events
    FOR EACH ROW EXECUTE FUNCTION preemption_events_refuse_change()
    """,
    # Row triggers do not see TRUNCATE; a statement trigger does.
    """
    CREATE TRIGGER preemption_events_no_truncate
    BEFORE TRUNCATE ON preemption_events
    FOR EACH STATEMENT EXECUTE FUNCTION preemption_events_refuse_change()
    """,
)

SQLITE_TRIGGERS = (
    """
    CREATE TRIGGER preemption_events_no_update BEFORE UPDATE ON preemption_events
    BEGIN SELECT RAISE(ABORT, 'preemption_events is append-only: UPDATE refused'); END
    """,
    """
    CREATE TRIGGER preemption_events_no_delete BEFORE DELETE ON preemption_events
    BEGIN SELECT RAISE(ABORT, 'preemption_events is append-only: DELETE refused'); END
    """,
)


def upgrade() -> None:
    op.create_table(
        TABLE,
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            sa.Identity(always=True),
            nullable=False,
        ),
        sa.Column("preemption_id", sa.String(255), nullable=False),
        sa.Column("run_id", sa.String(255), nullable=False),
        sa.Column("kind", sa.String(40), nullable=False),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("preemptor_namespace", sa.String(253), nullable=False),
        sa.Column("preemptor_name", sa.String(253), nullable=False),
        sa.Column("preemptor_uid", sa.String(64), nullable=False),
        sa.Column("preemptor_priority", sa.Integer(), nullable=False),
        sa.Column("node", sa.String(253), nullable=True),
        sa.Column("victim_namespace", sa.String(253), nullable=True),
        sa.Column("victim_name", sa.String(253), nullable=True),
        sa.Column("victim_uid", sa.String(64), nullable=True),
        sa.Column("victim_priority", sa.Integer(), nullable=True),
        sa.Column(
            "payload",
            sa.JSON().with_variant(postgresql.JSONB(), "postgresql"),
            nullable=False,
        ),
        sa.Column("idempotency_key", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_preemption_events"),
        sa.UniqueConstraint("idempotency_key", name="uq_preemption_events_idempotency_key"),
    )
    indexes = {
        "ix_preemption_events_preemptor": ["preemptor_namespace", "preemptor_name", "occurred_at"],
        "ix_preemption_events_victim": ["victim_namespace", "victim_name", "occurred_at"],
        "ix_preemption_events_node": ["node", "occurred_at"],
        "ix_preemption_events_occurred_at": ["occurred_at"],
        "ix_preemption_events_kind": ["kind", "occurred_at"],
        "ix_preemption_events_preemption": ["preemption_id", "id"],
    }
    for name, columns in indexes.items():
        op.create_index(name, TABLE, columns)

    if op.get_bind().dialect.name == "postgresql":
        op.execute(POSTGRES_REFUSE_FUNCTION)
        for trigger in POSTGRES_TRIGGERS:
            op.execute(trigger)
    else:
        for trigger in SQLITE_TRIGGERS:
            op.execute(trigger)


def downgrade() -> None:
    # Dropping the table drops its triggers; the function is Postgres's own object.
    op.drop_table(TABLE)
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION preemption_events_refuse_change()")

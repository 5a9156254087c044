"""The append-only upstream_preemptions table: what kube-scheduler preempted, seen in shadow mode.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24

One row per `Preempted` Event kube-scheduler emitted, as the shadow-mode watcher observed it,
to compare with the decisions this controller would have made. The Event's UID is unique, so
a watch restart or a second replica records each Event once. Append-only like
preemption_events (UPDATE, DELETE and TRUNCATE refused). The roles that may append to
preemption_events may append to and read this table; those that may read it may read this.
Expand-only: the previous release never touches it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "upstream_preemptions"

POSTGRES_REFUSE_FUNCTION = """
CREATE FUNCTION upstream_preemptions_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'upstream_preemptions is append-only: % refused', TG_OP
        USING ERRCODE = 'integrity_constraint_violation',
              HINT = 'observed preemptions are never changed';
END;
$$
"""

POSTGRES_TRIGGERS = (
    """
    CREATE TRIGGER upstream_preemptions_append_only
    BEFORE UPDATE OR DELETE ON upstream_preemptions
    FOR EACH ROW EXECUTE FUNCTION upstream_preemptions_refuse_change()
    """,
    """
    CREATE TRIGGER upstream_preemptions_no_truncate
    BEFORE TRUNCATE ON upstream_preemptions
    FOR EACH STATEMENT EXECUTE FUNCTION upstream_preemptions_refuse_change()
    """,
)

SQLITE_TRIGGERS = (
    """
    CREATE TRIGGER upstream_preemptions_no_update BEFORE UPDATE ON upstream_preemptions
    BEGIN SELECT RAISE(ABORT, 'upstream_preemptions is append-only: UPDATE refused'); END
    """,
    """
    CREATE TRIGGER upstream_preemptions_no_delete BEFORE DELETE ON upstream_preemptions
    BEGIN SELECT RAISE(ABORT, 'upstream_preemptions is append-only: DELETE refused'); END
    """,
)

# Writers (INSERT on preemption_events) append and read; readers (SELECT on it) read.
GRANTS = """
DO $$
DECLARE grant_row record;
BEGIN
    FOR grant_row IN
        SELECT DISTINCT grantee, privilege_type FROM information_schema.role_table_grants
        WHERE table_name = 'preemption_events' AND privilege_type IN ('INSERT', 'SELECT')
          AND table_schema = current_schema() AND grantee <> current_user
    LOOP
        IF grant_row.privilege_type = 'INSERT' THEN
            EXECUTE format('GRANT SELECT, INSERT ON upstream_preemptions TO %I', grant_row.grantee);
        ELSE
            EXECUTE format('GRANT SELECT ON upstream_preemptions TO %I', grant_row.grantee);
        END IF;
    END LOOP;
END
$$
"""


def upgrade() -> None:
    op.create_table(
        TABLE,
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            sa.Identity(always=True),
            nullable=False,
        ),
        sa.Column("observed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("event_uid", sa.String(64), nullable=False),
        sa.Column("victim_namespace", sa.String(253), nullable=False),
        sa.Column("victim_name", sa.String(253), nullable=False),
        sa.Column("victim_uid", sa.String(64), nullable=True),
        sa.Column("preemptor_uid", sa.String(64), nullable=False),
        sa.Column("preemptor_namespace", sa.String(253), nullable=True),
        sa.Column("preemptor_name", sa.String(253), nullable=True),
        sa.Column("node", sa.String(253), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_upstream_preemptions"),
        sa.UniqueConstraint("event_uid", name="uq_upstream_preemptions_event_uid"),
    )
    op.create_index("ix_upstream_preemptions_occurred_at", TABLE, ["occurred_at"])
    op.create_index("ix_upstream_preemptions_preemptor_uid", TABLE, ["preemptor_uid"])

    if op.get_bind().dialect.name == "postgresql":
        op.execute(POSTGRES_REFUSE_FUNCTION)
        for trigger in POSTGRES_TRIGGERS:
            op.execute(trigger)
        op.execute(GRANTS)
    else:
        for trigger in SQLITE_TRIGGERS:
            op.execute(trigger)


def downgrade() -> None:
    op.drop_table(TABLE)
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION upstream_preemptions_refuse_change()")

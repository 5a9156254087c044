"""The decision lock: one row only the ledger's writers may lock.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-24

Decisions are serialized across every worker replica by locking this row (`SELECT ... FOR
UPDATE`) for the deciding transaction. A Postgres advisory lock served before, but any role,
the read-only reader included, could take it and hold every decision up; locking a row needs
the UPDATE privilege on its table, which this migration grants exactly to the roles that may
append to the ledger (those with INSERT on preemption_events). Expand-only: the previous
release, which takes the advisory lock, runs on this schema too.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "decision_lock"

GRANT_TO_WRITERS = """
DO $$
DECLARE writer record;
BEGIN
    FOR writer IN
        SELECT DISTINCT grantee FROM information_schema.role_table_grants
        WHERE table_name = 'preemption_events' AND privilege_type = 'INSERT'
          AND table_schema = current_schema() AND grantee <> current_user
    LOOP
        EXECUTE format('GRANT SELECT, UPDATE ON decision_lock TO %I', writer.grantee);
    END LOOP;
END
$$
"""


def upgrade() -> None:
    op.create_table(
        TABLE,
        sa.Column("id", sa.SmallInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_decision_lock"),
        sa.CheckConstraint("id = 1", name="ck_decision_lock_one_row"),
    )
    op.execute(sa.text("INSERT INTO decision_lock (id) VALUES (1)"))
    if op.get_bind().dialect.name == "postgresql":
        op.execute(GRANT_TO_WRITERS)


def downgrade() -> None:
    op.drop_table(TABLE)

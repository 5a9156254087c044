"""Two append-only audit tables: upstream_preemptions (shadow mode), decision_inputs (replay).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24

One migration, not two, so that this release stays within the one-migration rollback window
(`schema_problem`: a release runs on its own revision and the next): after `migrate`,
`kubectl rollout undo` to the release before still starts. Both tables are expand-only: the
previous release never touches them.

**upstream_preemptions**: one row per `Preempted` Event kube-scheduler emitted, as the
shadow-mode watcher observed it, to compare with the decisions this controller would have
made. The Event's UID is unique, so a watch restart or a second replica records each Event
once. Append-only like preemption_events (UPDATE, DELETE and TRUNCATE refused). The roles
that may append to preemption_events may append to and read this table; those that may read
it may read this.

**decision_inputs**: one row per decision (a `decide` activity that reached the planner): the
planner's inputs, serialised and compressed, which `preemptctl replay --decision` plans again.
Rows are never updated and never truncated. Unlike preemption_events they are deleted, but
only by retention: `prune_decision_inputs(retention_days)` is a SECURITY DEFINER function
owned by the table's owner that deletes rows older than `retention_days` (at least 1) days,
setting a transaction-local flag the refusing trigger honours. No login holds DELETE on the
table; the writers (INSERT on preemption_events) may EXECUTE the function, nobody else. So a
writer can prune old inputs but never erase a fresh one, and an UPDATE or an ad-hoc DELETE is
refused even to the owner. On SQLite (one machine, one user) UPDATE is refused and DELETE
allowed.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# -- upstream_preemptions ----------------------------------------------------------------------

UPSTREAM_TABLE = "upstream_preemptions"

UPSTREAM_POSTGRES_REFUSE_FUNCTION = """
CREATE FUNCTION upstream_preemptions_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'upstream_preemptions is append-only: % refused', TG_OP
        USING ERRCODE = 'integrity_constraint_violation',
              HINT = 'observed preemptions are never changed';
END;
$$
"""

UPSTREAM_POSTGRES_TRIGGERS = (
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

UPSTREAM_SQLITE_TRIGGERS = (
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
UPSTREAM_GRANTS = """
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


def _upgrade_upstream_preemptions() -> None:
    op.create_table(
        UPSTREAM_TABLE,
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
    op.create_index("ix_upstream_preemptions_occurred_at", UPSTREAM_TABLE, ["occurred_at"])
    op.create_index("ix_upstream_preemptions_preemptor_uid", UPSTREAM_TABLE, ["preemptor_uid"])

    if op.get_bind().dialect.name == "postgresql":
        op.execute(UPSTREAM_POSTGRES_REFUSE_FUNCTION)
        for trigger in UPSTREAM_POSTGRES_TRIGGERS:
            op.execute(trigger)
        op.execute(UPSTREAM_GRANTS)
    else:
        for trigger in UPSTREAM_SQLITE_TRIGGERS:
            op.execute(trigger)


def _downgrade_upstream_preemptions() -> None:
    op.drop_table(UPSTREAM_TABLE)
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION upstream_preemptions_refuse_change()")


# -- decision_inputs ---------------------------------------------------------------------------

INPUTS_TABLE = "decision_inputs"
INPUTS_PRUNING_FLAG = "preemptctl.pruning_decision_inputs"

INPUTS_POSTGRES_REFUSE_FUNCTION = f"""
CREATE FUNCTION decision_inputs_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('{INPUTS_PRUNING_FLAG}', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'decision_inputs is append-only: % refused', TG_OP
        USING ERRCODE = 'integrity_constraint_violation',
              HINT = 'recorded inputs are only removed by prune_decision_inputs(retention_days)';
END;
$$
"""

INPUTS_POSTGRES_TRIGGERS = (
    """
    CREATE TRIGGER decision_inputs_append_only
    BEFORE UPDATE OR DELETE ON decision_inputs
    FOR EACH ROW EXECUTE FUNCTION decision_inputs_refuse_change()
    """,
    """
    CREATE TRIGGER decision_inputs_no_truncate
    BEFORE TRUNCATE ON decision_inputs
    FOR EACH STATEMENT EXECUTE FUNCTION decision_inputs_refuse_change()
    """,
)

# `{table}` is the schema-qualified table: the function's search_path is pg_catalog only,
# so a login cannot redirect it to a table of its own.
INPUTS_POSTGRES_PRUNE_FUNCTION = f"""
CREATE FUNCTION prune_decision_inputs(retention_days integer) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE pruned bigint;
BEGIN
    IF retention_days IS NULL OR retention_days < 1 THEN
        RAISE EXCEPTION 'prune_decision_inputs: retention_days must be at least 1, not %',
            retention_days USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM set_config('{INPUTS_PRUNING_FLAG}', 'on', true);
    DELETE FROM {{table}} WHERE recorded_at < now() - make_interval(days => retention_days);
    GET DIAGNOSTICS pruned = ROW_COUNT;
    PERFORM set_config('{INPUTS_PRUNING_FLAG}', 'off', true);
    RETURN pruned;
END;
$$
"""

# Writers (INSERT on preemption_events) append, read and prune; readers (SELECT) read.
INPUTS_GRANTS = """
DO $$
DECLARE grant_row record;
BEGIN
    REVOKE ALL ON FUNCTION prune_decision_inputs(integer) FROM PUBLIC;
    FOR grant_row IN
        SELECT DISTINCT grantee, privilege_type FROM information_schema.role_table_grants
        WHERE table_name = 'preemption_events' AND privilege_type IN ('INSERT', 'SELECT')
          AND table_schema = current_schema() AND grantee <> current_user
    LOOP
        IF grant_row.privilege_type = 'INSERT' THEN
            EXECUTE format('GRANT SELECT, INSERT ON decision_inputs TO %I', grant_row.grantee);
            EXECUTE format(
                'GRANT EXECUTE ON FUNCTION prune_decision_inputs(integer) TO %I',
                grant_row.grantee
            );
        ELSE
            EXECUTE format('GRANT SELECT ON decision_inputs TO %I', grant_row.grantee);
        END IF;
    END LOOP;
END
$$
"""

INPUTS_SQLITE_TRIGGERS = (
    """
    CREATE TRIGGER decision_inputs_no_update BEFORE UPDATE ON decision_inputs
    BEGIN SELECT RAISE(ABORT, 'decision_inputs is append-only: UPDATE refused'); END
    """,
)


def _upgrade_decision_inputs() -> None:
    op.create_table(
        INPUTS_TABLE,
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            sa.Identity(always=True),
            nullable=False,
        ),
        sa.Column("preemption_id", sa.String(255), nullable=False),
        sa.Column("run_id", sa.String(255), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("preemptor_namespace", sa.String(253), nullable=False),
        sa.Column("preemptor_name", sa.String(253), nullable=False),
        sa.Column("preemptor_uid", sa.String(64), nullable=False),
        sa.Column("planner_version", sa.String(64), nullable=False),
        sa.Column("encoding", sa.String(32), nullable=False),
        sa.Column("raw_bytes", sa.BigInteger(), nullable=False),
        sa.Column("stored_bytes", sa.BigInteger(), nullable=False),
        sa.Column("inputs", sa.LargeBinary(), nullable=True),
        sa.Column("omitted", sa.Text(), nullable=True),
        sa.Column("idempotency_key", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_decision_inputs"),
        sa.UniqueConstraint("idempotency_key", name="uq_decision_inputs_idempotency_key"),
    )
    op.create_index("ix_decision_inputs_preemption", INPUTS_TABLE, ["preemption_id", "id"])
    op.create_index("ix_decision_inputs_run_id", INPUTS_TABLE, ["run_id"])
    op.create_index("ix_decision_inputs_recorded_at", INPUTS_TABLE, ["recorded_at"])

    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        schema = bind.execute(sa.text("SELECT current_schema()")).scalar_one()
        quote = bind.dialect.identifier_preparer.quote_identifier
        op.execute(INPUTS_POSTGRES_REFUSE_FUNCTION)
        for trigger in INPUTS_POSTGRES_TRIGGERS:
            op.execute(trigger)
        op.execute(
            INPUTS_POSTGRES_PRUNE_FUNCTION.replace(
                "{table}", f"{quote(schema)}.{quote(INPUTS_TABLE)}"
            )
        )
        op.execute(INPUTS_GRANTS)
    else:
        for trigger in INPUTS_SQLITE_TRIGGERS:
            op.execute(trigger)


def _downgrade_decision_inputs() -> None:
    op.drop_table(INPUTS_TABLE)
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION prune_decision_inputs(integer)")
        op.execute("DROP FUNCTION decision_inputs_refuse_change()")


def upgrade() -> None:
    _upgrade_upstream_preemptions()
    _upgrade_decision_inputs()


def downgrade() -> None:
    _downgrade_decision_inputs()
    _downgrade_upstream_preemptions()

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

**decision_inputs** and **decision_input_packs**: one row per decision (a `decide` activity
that reached the planner) in decision_inputs: what is the decision's own (the preemptor, the
planner's arguments, the claims, the decision) with references to the objects it read,
which `preemptctl replay --decision` plans again; each object (pod, node, PDB, ...) is stored
once, in a pack of decision_input_packs, by the first decision that read it. Rows are never
updated and never truncated. Unlike preemption_events they are deleted, but only by
retention: `prune_decision_inputs(retention_days)` is a SECURITY DEFINER function owned by
the tables' owner that deletes the decisions older than `retention_days` days (at least 1,
and at least `decision_inputs_retention.minimum_days`, 30 as migrated, a one-row table only
the owner may change) and the packs no kept decision can reference. The refusing trigger
lets a DELETE through only when it is that function's own statement running as the owner
(the current user and the call stack, which no session can forge; no setting a session could
set). No login holds DELETE on the tables; the writers (INSERT on preemption_events) may
EXECUTE the function, nobody else. So a writer can prune old inputs but never erase a fresh
one, and an UPDATE or an ad-hoc DELETE is refused even to the owner. On SQLite (one machine,
one user) UPDATE is refused and DELETE allowed.

**Indexes for the shadow recorder** at scale: upstream_preemptions by `victim_uid` (is this
victim already known?) and by `(victim_namespace, observed_at)` (rows per namespace in the
last hour).
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
    op.create_index("ix_upstream_preemptions_victim_uid", UPSTREAM_TABLE, ["victim_uid"])
    op.create_index(
        "ix_upstream_preemptions_victim", UPSTREAM_TABLE, ["victim_namespace", "observed_at"]
    )

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


# -- decision_inputs, decision_input_packs, decision_inputs_retention -----------------------------

INPUTS_TABLE = "decision_inputs"
PACKS_TABLE = "decision_input_packs"
RETENTION_TABLE = "decision_inputs_retention"
MINIMUM_RETENTION_DAYS = 30
PACK_SLACK = "1 hour"

# A DELETE passes only as the tables' owner (the SECURITY DEFINER function runs as it) and
# only as the statement of prune_decision_inputs itself: the third line of the call stack
# (after this function and the DELETE's text) is that function. Neither can a session set.
INPUTS_POSTGRES_REFUSE_FUNCTION = """
CREATE FUNCTION decision_inputs_refuse_change() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    stack text;
    caller text;
    pruner text := 'PL/pgSQL function ' || quote_ident(TG_TABLE_SCHEMA)
        || '.prune_decision_inputs(integer) line ';
BEGIN
    IF TG_OP = 'DELETE' AND current_user = (
        SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = TG_RELID
    ) THEN
        GET DIAGNOSTICS stack = PG_CONTEXT;
        caller := split_part(stack, E'\\n', 3);
        IF left(caller, length(pruner)) = pruner AND right(caller, 17) = ' at SQL statement'
        THEN
            RETURN OLD;
        END IF;
    END IF;
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'integrity_constraint_violation',
              HINT = 'recorded inputs are only removed by prune_decision_inputs(retention_days)';
END;
$$
"""

INPUTS_POSTGRES_TRIGGERS = tuple(
    trigger
    for table in (INPUTS_TABLE, PACKS_TABLE)
    for trigger in (
        f"""
        CREATE TRIGGER {table}_append_only
        BEFORE UPDATE OR DELETE ON {table}
        FOR EACH ROW EXECUTE FUNCTION decision_inputs_refuse_change()
        """,
        f"""
        CREATE TRIGGER {table}_no_truncate
        BEFORE TRUNCATE ON {table}
        FOR EACH STATEMENT EXECUTE FUNCTION decision_inputs_refuse_change()
        """,
    )
)

# `{inputs}`, `{packs}`, `{retention}` are the schema-qualified tables: the function's
# search_path is pg_catalog only, so a login cannot redirect it to tables of its own. Each
# DELETE on one line: the refusing trigger reads the call stack line by line.
INPUTS_POSTGRES_PRUNE_FUNCTION = f"""
CREATE FUNCTION prune_decision_inputs(retention_days integer) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    pruned bigint;
    kept integer;
    cutoff timestamptz;
BEGIN
    IF retention_days IS NULL OR retention_days < 1 THEN
        RAISE EXCEPTION 'prune_decision_inputs: retention_days must be at least 1, not %',
            retention_days USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT minimum_days INTO kept FROM {{retention}} WHERE id = 1;
    kept := greatest(retention_days, coalesce(kept, {MINIMUM_RETENTION_DAYS}));
    cutoff := now() - make_interval(days => kept);
    DELETE FROM {{inputs}} WHERE recorded_at < cutoff;
    GET DIAGNOSTICS pruned = ROW_COUNT;
    DELETE FROM {{packs}} WHERE referenced_until < cutoff - interval '{PACK_SLACK}';
    RETURN pruned;
END;
$$
"""

# Writers (INSERT on preemption_events) append, read and prune; readers (SELECT) read; both
# read the minimum retention, which nobody but the owner may change (the default privileges
# of docs/ledger.md would give the worker INSERT on it: taken back).
INPUTS_GRANTS = f"""
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
            EXECUTE format('GRANT SELECT, INSERT ON {INPUTS_TABLE} TO %I', grant_row.grantee);
            EXECUTE format('GRANT SELECT, INSERT ON {PACKS_TABLE} TO %I', grant_row.grantee);
            EXECUTE format(
                'GRANT EXECUTE ON FUNCTION prune_decision_inputs(integer) TO %I',
                grant_row.grantee
            );
        ELSE
            EXECUTE format('GRANT SELECT ON {INPUTS_TABLE} TO %I', grant_row.grantee);
            EXECUTE format('GRANT SELECT ON {PACKS_TABLE} TO %I', grant_row.grantee);
        END IF;
        EXECUTE format('GRANT SELECT ON {RETENTION_TABLE} TO %I', grant_row.grantee);
    END LOOP;
    FOR grant_row IN
        SELECT DISTINCT grantee FROM information_schema.role_table_grants
        WHERE table_name = '{RETENTION_TABLE}' AND privilege_type <> 'SELECT'
          AND table_schema = current_schema() AND grantee <> current_user
    LOOP
        EXECUTE format(
            'REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON {RETENTION_TABLE} FROM %I',
            grant_row.grantee
        );
    END LOOP;
END
$$
"""

INPUTS_SQLITE_TRIGGERS = tuple(
    f"""
    CREATE TRIGGER {table}_no_update BEFORE UPDATE ON {table}
    BEGIN SELECT RAISE(ABORT, '{table} is append-only: UPDATE refused'); END
    """
    for table in (INPUTS_TABLE, PACKS_TABLE)
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
    op.create_table(
        PACKS_TABLE,
        sa.Column("id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("referenced_until", sa.DateTime(timezone=True), nullable=False),
        sa.Column("objects", sa.Integer(), nullable=False),
        sa.Column("encoding", sa.String(32), nullable=False),
        sa.Column("raw_bytes", sa.BigInteger(), nullable=False),
        sa.Column("stored_bytes", sa.BigInteger(), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_decision_input_packs"),
    )
    op.create_index("ix_decision_input_packs_referenced_until", PACKS_TABLE, ["referenced_until"])
    op.create_table(
        RETENTION_TABLE,
        sa.Column("id", sa.SmallInteger(), autoincrement=False, nullable=False),
        sa.Column("minimum_days", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_decision_inputs_retention"),
        sa.CheckConstraint("id = 1", name="ck_decision_inputs_retention_one_row"),
        sa.CheckConstraint("minimum_days >= 1", name="ck_decision_inputs_retention_at_least_a_day"),
    )
    op.execute(
        sa.text(
            f"INSERT INTO {RETENTION_TABLE} (id, minimum_days) VALUES (1, {MINIMUM_RETENTION_DAYS})"
        )
    )

    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        schema = bind.execute(sa.text("SELECT current_schema()")).scalar_one()
        quote = bind.dialect.identifier_preparer.quote_identifier
        op.execute(INPUTS_POSTGRES_REFUSE_FUNCTION)
        for trigger in INPUTS_POSTGRES_TRIGGERS:
            op.execute(trigger)
        prune = INPUTS_POSTGRES_PRUNE_FUNCTION
        for placeholder, table in (
            ("{inputs}", INPUTS_TABLE),
            ("{packs}", PACKS_TABLE),
            ("{retention}", RETENTION_TABLE),
        ):
            prune = prune.replace(placeholder, f"{quote(schema)}.{quote(table)}")
        op.execute(prune)
        op.execute(INPUTS_GRANTS)
    else:
        for trigger in INPUTS_SQLITE_TRIGGERS:
            op.execute(trigger)


def _downgrade_decision_inputs() -> None:
    op.drop_table(RETENTION_TABLE)
    op.drop_table(PACKS_TABLE)
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

"""Decision inputs stored once per object, a pruning guard no session can forge, and the
shadow recorder's indexes.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-27

0003 shipped with the last release, so what this release changes in its tables is a
migration of its own (editing 0003 would leave every ledger already at 0003 without it).
Expand-only, so the last release (head 0003) still runs against it, as the support window
promises (`preemptctl.migrations.schema_problem`):

**decision_input_packs**: each object a decision read (pod, node, PDB, ...) is stored once,
in a pack, by the first decision that read it; decision_inputs rows written by this release
hold the decision's own part with references into packs. Rows written whole by the last
release stay readable as they are. Append-only like decision_inputs, pruned with it.

**decision_inputs_retention**: one row, `minimum_days` (30 as migrated), the fewest days
`prune_decision_inputs` keeps whatever its caller asks; only the tables' owner may change it.

**The pruning guard.** 0003's refusing trigger let a DELETE through when the session setting
`preemptctl.pruning_decision_inputs` was on, which any session can set. Now a DELETE passes
only as the tables' owner (the SECURITY DEFINER function runs as it) and only as the
statement of `prune_decision_inputs` itself, read from the call stack: neither can a session
forge. The function keeps its signature, so the last release's worker prunes through it
unchanged, now within the minimum retention, and also removes the packs no kept decision
can reference.

**Indexes for the shadow recorder** at scale: upstream_preemptions by `victim_uid` (is this
victim already known?) and by `(victim_namespace, observed_at)` (rows per namespace in the
last hour).

On SQLite (one machine, one user) decision_input_packs refuses UPDATE and allows DELETE, as
decision_inputs does.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

import sqlalchemy as sa
from alembic import op
from alembic.script import ScriptDirectory

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UPSTREAM_TABLE = "upstream_preemptions"
INPUTS_TABLE = "decision_inputs"
PACKS_TABLE = "decision_input_packs"
RETENTION_TABLE = "decision_inputs_retention"
MINIMUM_RETENTION_DAYS = 30
PACK_SLACK = "1 hour"

# Replaces 0003's function of the same name; its triggers on decision_inputs call it by name.
# A DELETE passes only as the tables' owner (the SECURITY DEFINER function runs as it) and
# only as the statement of prune_decision_inputs itself: the third line of the call stack
# (after this function and the DELETE's text) is that function. Neither can a session set.
REFUSE_FUNCTION = """
CREATE OR REPLACE FUNCTION decision_inputs_refuse_change() RETURNS trigger
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

PACKS_TRIGGERS = (
    f"""
    CREATE TRIGGER {PACKS_TABLE}_append_only
    BEFORE UPDATE OR DELETE ON {PACKS_TABLE}
    FOR EACH ROW EXECUTE FUNCTION decision_inputs_refuse_change()
    """,
    f"""
    CREATE TRIGGER {PACKS_TABLE}_no_truncate
    BEFORE TRUNCATE ON {PACKS_TABLE}
    FOR EACH STATEMENT EXECUTE FUNCTION decision_inputs_refuse_change()
    """,
)

# `{inputs}`, `{packs}`, `{retention}` are the schema-qualified tables: the function's
# search_path is pg_catalog only, so a login cannot redirect it to tables of its own. Each
# DELETE on one line: the refusing trigger reads the call stack line by line. Same signature
# and result as 0003's, so its grants (EXECUTE to the writers only) carry over.
PRUNE_FUNCTION = f"""
CREATE OR REPLACE FUNCTION prune_decision_inputs(retention_days integer) RETURNS bigint
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

# Writers (INSERT on preemption_events) append to and read the packs; readers (SELECT) read
# them; both read the minimum retention, which nobody but the owner may change (the default
# privileges of docs/ledger.md would give the worker INSERT on it: taken back).
GRANTS = f"""
DO $$
DECLARE grant_row record;
BEGIN
    FOR grant_row IN
        SELECT DISTINCT grantee, privilege_type FROM information_schema.role_table_grants
        WHERE table_name = 'preemption_events' AND privilege_type IN ('INSERT', 'SELECT')
          AND table_schema = current_schema() AND grantee <> current_user
    LOOP
        IF grant_row.privilege_type = 'INSERT' THEN
            EXECUTE format('GRANT SELECT, INSERT ON {PACKS_TABLE} TO %I', grant_row.grantee);
        ELSE
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

PACKS_SQLITE_TRIGGER = f"""
CREATE TRIGGER {PACKS_TABLE}_no_update BEFORE UPDATE ON {PACKS_TABLE}
BEGIN SELECT RAISE(ABORT, '{PACKS_TABLE} is append-only: UPDATE refused'); END
"""


def upgrade() -> None:
    op.create_index("ix_upstream_preemptions_victim_uid", UPSTREAM_TABLE, ["victim_uid"])
    op.create_index(
        "ix_upstream_preemptions_victim", UPSTREAM_TABLE, ["victim_namespace", "observed_at"]
    )
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
    if op.get_bind().dialect.name == "postgresql":
        op.execute(REFUSE_FUNCTION)
        for trigger in PACKS_TRIGGERS:
            op.execute(trigger)
        op.execute(_qualified(PRUNE_FUNCTION))
        op.execute(GRANTS)
    else:
        op.execute(PACKS_SQLITE_TRIGGER)


def downgrade() -> None:
    """Back to 0003 as released: its guard and its pruning function, in their own words."""
    if op.get_bind().dialect.name == "postgresql":
        released = _revision_0003()
        op.execute(
            released.INPUTS_POSTGRES_REFUSE_FUNCTION.replace(
                "CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1
            )
        )
        op.execute(
            released.INPUTS_POSTGRES_PRUNE_FUNCTION.replace(
                "CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1
            ).replace("{table}", _qualified("{inputs}"))
        )
    op.drop_table(RETENTION_TABLE)
    op.drop_table(PACKS_TABLE)
    op.drop_index("ix_upstream_preemptions_victim", table_name=UPSTREAM_TABLE)
    op.drop_index("ix_upstream_preemptions_victim_uid", table_name=UPSTREAM_TABLE)


def _qualified(sql: str) -> str:
    """`sql` with each `{table}` placeholder replaced by the table in the current schema."""
    bind = op.get_bind()
    schema = bind.execute(sa.text("SELECT current_schema()")).scalar_one()
    quote = bind.dialect.identifier_preparer.quote_identifier
    for placeholder, table in (
        ("{inputs}", INPUTS_TABLE),
        ("{packs}", PACKS_TABLE),
        ("{retention}", RETENTION_TABLE),
    ):
        sql = sql.replace(placeholder, f"{quote(schema)}.{quote(table)}")
    return sql


def _revision_0003() -> ModuleType:
    """0003's module, as alembic loads it: its SQL is what downgrading restores."""
    from preemptctl.migrations import alembic_config

    script = ScriptDirectory.from_config(alembic_config()).get_revision("0003")
    assert script is not None and script.module is not None
    return script.module

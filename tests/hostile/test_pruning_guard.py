"""The ledger's append-only guard holds against the roles that write it (issue 20, finding 11).

Scenario: a ledger set up with docs/ledger.md's least-privilege roles, verbatim (a NOLOGIN
owner, the migrator, the worker's login, the reader), migrated as documented. Through the
worker's login it holds a decision's inputs recorded 2 days ago, others recorded 40 days
ago, a ledger event and an upstream preemption. The default retention of decision inputs
is 30 days (`decision_inputs_retention_days`).

The guard on `decision_inputs` lets a DELETE through while the session setting
`preemptctl.pruning_decision_inputs` is `on`, which `prune_decision_inputs` sets; any session
can set it too. Judged from outside (the database's answers and rows):
- the worker's login, with that setting on, is refused a DELETE on each append-only table
  (`preemption_events`, `upstream_preemptions`, `decision_inputs`), and the rows stay;
- the tables' owner, with that setting on, is refused an ad-hoc DELETE on
  `decision_inputs` too ("refused even to the owner", docs/ledger.md), and the row stays;
- `prune_decision_inputs(30)` from the worker's login removes the inputs older than 30 days
  and keeps the 2-day-old ones (pruning works);
- `prune_decision_inputs(1)` from the worker's login does not remove the 2-day-old inputs:
  the worker cannot prune below the minimum retention, refused or held to it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, insert, select, text
from sqlalchemy.exc import DBAPIError

from preemptctl.ledger.inputs import ENCODING, RECORDING_VERSION
from preemptctl.ledger.models import decision_inputs, upstream_preemptions
from preemptctl.ledger.models import events as preemption_events
from tests.support.ledger_roles import documented_roles

GUARD_SETTING = "preemptctl.pruning_decision_inputs"
TABLES = ("preemption_events", "upstream_preemptions", "decision_inputs")


def inputs_row(key: str, age: timedelta) -> dict[str, Any]:
    return {
        "preemption_id": f"preemption-{key}",
        "run_id": key,
        "recorded_at": datetime.now(UTC) - age,
        "preemptor_namespace": "default",
        "preemptor_name": "urgent",
        "preemptor_uid": "uid-urgent",
        "planner_version": RECORDING_VERSION,
        "encoding": ENCODING,
        "raw_bytes": 2,
        "stored_bytes": 10,
        "inputs": b"x\x9c\xab\xae\x05\x00\x01u\x00\xf9",  # zlib of {}
        "omitted": None,
        "idempotency_key": key,
    }


def seed(worker: Engine) -> None:
    now = datetime.now(UTC)
    with worker.begin() as connection:
        connection.execute(
            insert(decision_inputs),
            [
                inputs_row("two-days-old", timedelta(days=2)),
                inputs_row("two-days-old-owner", timedelta(days=2)),
                inputs_row("forty-days-old", timedelta(days=40)),
            ],
        )
        connection.execute(
            insert(preemption_events).values(
                preemption_id="preemption-1",
                run_id="run-1",
                kind="completed",
                occurred_at=now,
                preemptor_namespace="default",
                preemptor_name="urgent",
                preemptor_uid="uid-urgent",
                preemptor_priority=1000,
                payload={},
                idempotency_key="run-1/completed",
            )
        )
        connection.execute(
            insert(upstream_preemptions).values(
                observed_at=now,
                occurred_at=now,
                event_uid="event-1",
                victim_namespace="default",
                victim_name="victim",
                victim_uid="uid-victim",
                preemptor_uid="uid-urgent",
                node="node-0",
                message="Preempted by pod uid-urgent on node node-0",
            )
        )


def refused(engine: Engine, *statements: str) -> str | None:
    """Run `statements` in one transaction; the database's refusal (its first line), or
    None when it let them through."""
    try:
        with engine.begin() as connection:
            for statement in statements:
                connection.execute(text(statement))
    except DBAPIError as error:
        return str(error.orig).splitlines()[0]
    return None


def count(engine: Engine, table: str) -> int:
    with engine.connect() as connection:
        return int(connection.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())


def inputs_keys(engine: Engine) -> list[str]:
    with engine.connect() as connection:
        return sorted(connection.scalars(select(decision_inputs.c.idempotency_key)))


@dataclass
class Outcome:
    worker_deletes: dict[str, tuple[str | None, int]]  # table -> (refusal, rows after)
    owner_delete: str | None
    after_owner: list[str]
    prune_30: str | None
    after_30: list[str]
    prune_1: str | None
    after_1: list[str]


@pytest.fixture(scope="module")
def outcome() -> Iterator[Outcome]:
    with documented_roles() as ledger:
        worker = create_engine(ledger.urls["worker"])
        admin = create_engine(ledger.database.render_as_string(hide_password=False))
        try:
            seed(worker)
            worker_deletes = {
                table: (
                    refused(worker, f"SET {GUARD_SETTING} = 'on'", f"DELETE FROM {table}"),
                    count(worker, table),
                )
                for table in TABLES
            }
            owner_delete = refused(
                admin,
                ledger.renamed("SET ROLE preemptctl_owner"),
                f"SET {GUARD_SETTING} = 'on'",
                "DELETE FROM ledger.decision_inputs WHERE idempotency_key = 'two-days-old-owner'",
            )
            after_owner = inputs_keys(worker)
            prune_30 = refused(worker, "SELECT prune_decision_inputs(30)")
            after_30 = inputs_keys(worker)
            prune_1 = refused(worker, "SELECT prune_decision_inputs(1)")
            yield Outcome(
                worker_deletes,
                owner_delete,
                after_owner,
                prune_30,
                after_30,
                prune_1,
                inputs_keys(worker),
            )
        finally:
            worker.dispose()
            admin.dispose()


@pytest.mark.parametrize("table", TABLES)
def test_the_workers_login_is_refused_a_delete_with_the_guard_setting_on(
    outcome: Outcome, table: str
) -> None:
    refusal, rows = outcome.worker_deletes[table]
    assert (refusal is not None, rows) == (True, 3 if table == "decision_inputs" else 1), refusal


def test_the_owner_is_refused_an_ad_hoc_delete_with_the_guard_setting_on(outcome: Outcome) -> None:
    assert (outcome.owner_delete is not None, "two-days-old-owner" in outcome.after_owner) == (
        True,
        True,
    )


def test_pruning_at_30_days_removes_only_the_older_inputs(outcome: Outcome) -> None:
    kept = {key: key in outcome.after_30 for key in ("two-days-old", "forty-days-old")}
    assert (outcome.prune_30, kept) == (None, {"two-days-old": True, "forty-days-old": False})


def test_the_worker_cannot_prune_below_the_minimum_retention(outcome: Outcome) -> None:
    assert "two-days-old" in outcome.after_1, f"prune_decision_inputs(1): {outcome.prune_1}"

"""Forged `Preempted` Events are not believed, not printed raw, and do not stop the recorder
(issue 20, findings 5, 8 and 9).

Scenario: one `preemptctl worker` in shadow mode (`PREEMPT_DRY_RUN=true`), which records
kube-scheduler's `Preempted` Events for `preemptctl compare` and plans through the shadow
index (victims kube-scheduler preempted shown as still running). On node-a, pod `x` is
terminating, marked `DisruptionTarget`/`PreemptionByScheduler` (kube-scheduler preempted it;
no Event says so yet), and pod `y` runs unmarked; on node-b, pod `w` is likewise marked and
terminating, and pod `v` too. Once the worker is ready, Events arrive in this order, each
flawed in one way only:

1. about `x`, reported by `tenant-scheduler`, not a configured scheduler name;
2. about `x`, reported by default-scheduler, but written in namespace `tenant`;
3. about `y`, reported by default-scheduler, but `y` carries no DisruptionTarget;
4. about `v`, its node name carrying ESC and OSC sequences (a terminal title change);
5. about `v`, valid but for an `eventTime` of year 1 with a +01:00 offset (out of range
   once converted to UTC);

then a valid one (6), about `w`. Once it is recorded, a preemptor nominated to node-a
arrives.

Judged from outside the worker (the ledger, `preemptctl compare`'s output):
- the ledger's `upstream_preemptions` holds the valid Event's row alone: no forged one;
- a valid Event after the year-1 one is still recorded (the recorder did not stop);
- `compare` reports only the valid Event's victim from kube-scheduler (table and JSON);
- the shadow index does not hold `x`: the preemptor's dry run finds `x` terminating by
  preemption on its nominated node and is Ineligible (had a forged Event put `x` in the
  index, `x` would read as running and the dry run would preempt it);
- what the cluster wrote is never printed raw: a row already in the ledger with ESC, OSC,
  CSI and BEL in its names (as a recorder before the fix could have written it) comes out
  of `compare` escaped, in the table and in the JSON, and the JSON reads back the same
  values.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import create_engine

from preemptctl.emulator.resources import EVENTS
from preemptctl.ledger.kinds import DECISION_KINDS
from preemptctl.ledger.upstream import append_upstream
from preemptctl.preemption.upstream import UpstreamPreemption
from tests.support.emulator import as_list, node, pod
from tests.support.fault_rig import PREEMPTOR_PRIORITY
from tests.support.hostile_rig import HostileRig, hostile_rig
from tests.support.temporal_server import PersistentTemporal
from tests.support.tenant_objects import marked_by_scheduler, preempted_event, victim

RECORD_SECONDS = 20.0  # the valid Event reaches the ledger well within this
DECIDE_SECONDS = 20.0
CONTROL = ("\x1b", "\x07", "\x9b")  # ESC, BEL, CSI: what may never reach a terminal raw
HOSTILE_TEXT = "evil\x1b]0;owned\x07\x1b[2J\x9b31m"


def terminating(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` deleted with an hour's grace: it stays terminating for the whole module."""
    obj["metadata"]["deletionTimestamp"] = datetime.now(UTC).isoformat(timespec="seconds")
    obj["metadata"]["deletionGracePeriodSeconds"] = 3600
    return obj


def scenario() -> dict[str, Any]:
    return as_list(
        node("node-a", cpu="4"),
        node("node-b", cpu="4"),
        terminating(marked_by_scheduler(victim("x", "node-a"))),
        victim("y", "node-a"),
        terminating(marked_by_scheduler(victim("w", "node-b"))),
        terminating(marked_by_scheduler(victim("v", "node-b"))),
        pod("winner", node_name="node-b", priority=PREEMPTOR_PRIORITY, cpu="100m"),
    )


@dataclass
class Outcome:
    events: dict[str, str]  # what each Event was -> its UID
    rows: list[dict[str, Any]]
    compare_json: dict[str, Any]
    preemptor_decisions: list[str]  # the kinds of the preemptor's decisions, in order
    hostile_json_stdout: str
    hostile_table: str
    hostile_json: dict[str, Any]


def create_event(rig: HostileRig, event: dict[str, Any]) -> str:
    created = rig.cluster.store.create(EVENTS, event["metadata"]["namespace"], event)
    return str(created["metadata"]["uid"])


def stored(rig: HostileRig, name: str) -> dict[str, Any]:
    found = rig.cluster.emulator.pod(f"default/{name}")
    assert found is not None, name
    return found


def compare(rig: HostileRig, *flags: str) -> str:
    done = rig.preemptctl("compare", "--since", "1h", "--database-url", rig.database_url, *flags)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    return done.stdout


def hostile_row() -> UpstreamPreemption:
    """What a recorder before the fix could have written from a forged Event."""
    return UpstreamPreemption(
        event_uid=str(uuid.uuid4()),
        occurred_at=datetime.now(UTC),
        victim_namespace="default",
        victim_name=f"victim-{HOSTILE_TEXT}",
        victim_uid=str(uuid.uuid4()),
        preemptor_uid=str(uuid.uuid4()),
        preemptor_namespace="default",
        preemptor_name=f"preemptor-{HOSTILE_TEXT}",
        node=f"node-{HOSTILE_TEXT}",
        message=f"Preempted by pod x on node {HOSTILE_TEXT}",
    )


@pytest.fixture(scope="module")
def outcome(
    persistent_temporal: PersistentTemporal, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Outcome]:
    work = tmp_path_factory.mktemp("forged-events")
    with hostile_rig(
        persistent_temporal,
        work,
        scenario(),
        env={"PREEMPT_DRY_RUN": "true"},
        max_grace_seconds=None,
    ) as rig:
        x, y, v, w = (stored(rig, name) for name in ("x", "y", "v", "w"))
        winner = stored(rig, "winner")["metadata"]["uid"]
        events = {
            "untrusted reporter": preempted_event(x, winner, "node-a", reporter="tenant-scheduler"),
            "other namespace": preempted_event(x, winner, "node-a", namespace="tenant"),
            "no DisruptionTarget": preempted_event(y, winner, "node-a"),
            "escape sequences": preempted_event(v, winner, f"node-b{HOSTILE_TEXT}"),
            "year 1": preempted_event(v, winner, "node-b", event_time="0001-01-01T00:30:00+01:00"),
            "valid": preempted_event(w, winner, "node-b"),
        }
        uids = {what: create_event(rig, event) for what, event in events.items()}
        rig.wait_bounded(lambda: len(rig.upstream_rows()) >= 1, RECORD_SECONDS)
        rows = rig.upstream_rows()
        preemptor = pod("urgent", priority=PREEMPTOR_PRIORITY, cpu="4", nominated_node="node-a")
        rig.add(preemptor)

        def decisions() -> list[str]:
            return [
                row["kind"]
                for row in rig.ledger_rows()
                if row["kind"] in DECISION_KINDS and row["preemptor_name"] == "urgent"
            ]

        rig.wait_bounded(lambda: bool(decisions()), DECIDE_SECONDS)
        compare_json = json.loads(compare(rig, "-o", "json"))
        append_hostile_row(rig)
        hostile_stdout = compare(rig, "-o", "json")
        yield Outcome(
            uids,
            rows,
            compare_json,
            decisions(),
            hostile_stdout,
            compare(rig),
            json.loads(hostile_stdout),
        )


def append_hostile_row(rig: HostileRig) -> None:
    engine = create_engine(rig.database_url)
    try:
        append_upstream(engine, [hostile_row()])
    finally:
        engine.dispose()


def upstream_victims(document: dict[str, Any]) -> list[str]:
    return sorted(
        victim_key
        for compared in document["preemptors"]
        if compared["upstream"] is not None
        for victim_key in compared["upstream"]["victims"]
    )


def test_only_the_valid_event_is_recorded(outcome: Outcome) -> None:
    recorded = {row["event_uid"] for row in outcome.rows}
    believed = sorted(what for what, uid in outcome.events.items() if uid in recorded)
    assert believed == ["valid"]


def test_an_event_after_a_year_1_event_time_is_still_recorded(outcome: Outcome) -> None:
    assert [(row["victim_name"], row["node"]) for row in outcome.rows] == [("w", "node-b")]


def test_compare_reports_only_the_valid_events_victim(outcome: Outcome) -> None:
    document = outcome.compare_json
    assert (upstream_victims(document), document["totals"]["upstreamEvents"]) == (
        ["default/w"],
        1,
    )


def test_compares_table_names_no_forged_victim(outcome: Outcome) -> None:
    table = outcome.hostile_table  # the valid Event's row and the hostile row only
    named = [n for n in ("default/x", "default/y", "default/v") if re.search(rf"{n}\b", table)]
    assert (named, "default/w" in table) == ([], True)


def test_the_shadow_index_does_not_hold_a_forged_victim(outcome: Outcome) -> None:
    """`x` still reads as terminating by preemption on the nominated node: Ineligible."""
    assert outcome.preemptor_decisions[:1] == ["ineligible"]


def test_compares_table_prints_no_control_character(outcome: Outcome) -> None:
    raw = [repr(c) for c in CONTROL if c in outcome.hostile_table]
    assert (raw, "node-evil\\x1b]0;owned\\x07" in outcome.hostile_table) == ([], True)


def test_compares_json_prints_no_control_character_and_reads_back_the_same(
    outcome: Outcome,
) -> None:
    raw = [repr(c) for c in CONTROL if c in outcome.hostile_json_stdout]
    victims = upstream_victims(outcome.hostile_json)
    assert (raw, f"default/victim-{HOSTILE_TEXT}" in victims) == ([], True)

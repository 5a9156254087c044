"""A round of victims in one step (`mark_victims`, `delete_victims`; issue 22): each victim
settled and recorded on its own, the ledger appended once per round.

Scenarios (the activities outside any workflow, the API emulator, a SQLite ledger; one full
node, `urgent` preempting victim-0 and victim-1):
- a mark round marks each victim and appends their fates in one statement;
- a victim whose mark is refused for good is FAILED in its round; the others are marked;
- a delete round appends every intent in one statement before the first DELETE, then every
  fate in one, and tells each victim `Preempted`;
- a delete round retried after its DELETEs went out (the answers lost with the worker) finds
  the victims gone and records them deleted by this preemption, not gone by someone else's
  hand;
- a delete round for a preemptor bound elsewhere leaves every victim alone, says why and
  records nothing;
- a delete round retried after its DELETEs went out, when the preemptor has meanwhile been
  bound elsewhere, still records the victims it deleted (read, not deleted again), and
  spares only those its DELETE never reached; so does the one-victim delete.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine
from temporalio.testing import ActivityEnvironment

from preemptctl import migrations
from preemptctl.activities.contracts import VictimResult, VictimRound, VictimTarget
from preemptctl.emulator.resources import EVENTS_V1, PODS
from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.ledger.vocabulary import Fate
from tests.activities.test_preemption_activities import (
    RUN,
    Cluster,
    started,
    until_the_view_shows,
)
from tests.support.emulator import running_emulator
from tests.workflows.counting import LedgerRoundTrips
from tests.workflows.scenarios import one_full_node

VICTIMS = ["default/victim-0", "default/victim-1"]


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Engine]:
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    migrations.upgrade(url)
    engine = create_ledger_engine(url)
    yield engine
    engine.dispose()


@pytest.fixture
def cluster(ledger: Engine) -> Iterator[Cluster]:
    with running_emulator() as emulator, started(emulator, ledger, one_full_node()) as running:
        yield running


def victim_round(cluster: Cluster) -> VictimRound:
    targets = [VictimTarget(cluster.ref(v), "node-1") for v in VICTIMS]
    return VictimRound(RUN, cluster.ref("default/urgent"), targets)


def fates(results: list[VictimResult]) -> list[Fate]:
    return [result.fate for result in results]


def test_a_mark_round_appends_every_fate_in_one_statement(cluster: Cluster) -> None:
    with LedgerRoundTrips(cluster.ledger) as trips:
        results = ActivityEnvironment().run(cluster.activities.mark_victims, victim_round(cluster))
    assert fates(results) == [Fate.MARKED, Fate.MARKED]
    assert cluster.kinds() == ["victim_marked:victim-0", "victim_marked:victim-1"]
    assert trips.statements == 1


def test_a_mark_refused_for_good_fails_its_victim_alone(cluster: Cluster) -> None:
    cluster.emulator.faults.deny("patch", "pods/status", name="victim-1")
    results = ActivityEnvironment().run(cluster.activities.mark_victims, victim_round(cluster))
    assert fates(results) == [Fate.MARKED, Fate.FAILED]
    assert 'grant verb "patch"' in results[1].message
    assert cluster.kinds() == ["victim_marked:victim-0", "victim_failed:victim-1"]


def test_a_delete_round_appends_intents_then_fates_once_each(cluster: Cluster) -> None:
    with LedgerRoundTrips(cluster.ledger) as trips:
        results = ActivityEnvironment().run(
            cluster.activities.delete_victims, victim_round(cluster)
        )
    told = sorted(
        e["regarding"]["name"]
        for e in cluster.emulator.store.objects(EVENTS_V1)
        if e["reason"] == "Preempted"
    )
    assert fates(results) == [Fate.DELETED, Fate.DELETED]
    assert cluster.kinds() == [
        "victim_delete_sent:victim-0",
        "victim_delete_sent:victim-1",
        "victim_deleted:victim-0",
        "victim_deleted:victim-1",
    ]
    assert trips.statements == 2
    assert told == ["victim-0", "victim-1"]


def test_a_delete_round_retried_after_its_deletes_records_them_as_its_own(
    cluster: Cluster,
) -> None:
    first = victim_round(cluster)
    env = ActivityEnvironment()
    env.run(cluster.activities.delete_victims, first)  # its answers lost with the worker
    for victim in VICTIMS:
        cluster.emulator.finalize(victim)
    again = env.run(cluster.activities.delete_victims, first)
    assert fates(again) == [Fate.DELETED, Fate.DELETED]
    assert all(result.answer_lost for result in again)
    assert "victim_already_gone:victim-0" not in cluster.kinds()


def test_a_preemptor_bound_elsewhere_stops_the_round(cluster: Cluster) -> None:
    cluster.emulator.store.patch(
        PODS, "default", "urgent", "application/merge-patch+json", {"spec": {"nodeName": "n9"}}
    )
    preemptor = cluster.ref("default/urgent")
    until_the_view_shows(cluster, lambda: cluster.view_node_of(preemptor) == "n9")
    results = ActivityEnvironment().run(cluster.activities.delete_victims, victim_round(cluster))
    assert fates(results) == [Fate.SPARED, Fate.SPARED]
    assert {result.stopped for result in results} == {"the preemptor was bound to n9, not node-1"}
    assert cluster.kinds() == []
    assert all(cluster.emulator.pod(v) is not None for v in VICTIMS)


def bind_the_preemptor_elsewhere(cluster: Cluster) -> None:
    cluster.emulator.store.patch(
        PODS, "default", "urgent", "application/merge-patch+json", {"spec": {"nodeName": "n9"}}
    )
    preemptor = cluster.ref("default/urgent")
    until_the_view_shows(cluster, lambda: cluster.view_node_of(preemptor) == "n9")


def test_a_round_stopped_after_its_deletes_went_out_records_them(cluster: Cluster) -> None:
    first = victim_round(cluster)
    env = ActivityEnvironment()
    cluster.emulator.faults.deny("delete", "pods", name="victim-1")  # this one never went out
    env.run(cluster.activities.delete_victims, first)  # its answers lost with the worker
    cluster.emulator.faults.clear()
    bind_the_preemptor_elsewhere(cluster)
    again = env.run(cluster.activities.delete_victims, first)
    assert [(r.fate, r.answer_lost, r.stopped) for r in again] == [
        (Fate.DELETED, True, ""),
        (Fate.SPARED, False, "the preemptor was bound to n9, not node-1"),
    ]
    assert cluster.emulator.pod("default/victim-1") is not None
    assert len([r for r in cluster.emulator.requests.matching("delete", "pods")]) == 2


def test_a_delete_stopped_after_it_went_out_records_it(cluster: Cluster) -> None:
    step = cluster.victim_step("default/victim-0")
    env = ActivityEnvironment()
    env.run(cluster.activities.delete_victim, step)  # its answer lost with the worker
    bind_the_preemptor_elsewhere(cluster)
    again = ActivityEnvironment().run(cluster.activities.delete_victim, step)
    assert (again.fate, again.answer_lost, again.stopped) == (Fate.DELETED, True, "")

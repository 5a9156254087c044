"""The group preemption's activities one by one, outside any workflow, against the API
emulator (serving PodGroups) and a SQLite ledger, on the bundled gang scenario: ml/train-a,
four pending trainers (minCount 4), placed one on each of node-1..node-4 by taking
ml/train-b whole and the notebook.

Scenarios:
- select decides for the group and says it in the workflow's terms: each placed member by
  UID and node, each victim by UID with its node and unit, the pod groups it hits, minCount,
  the decision in words; the PodGroup and each trainer are told (`Preempting`);
- select asked again for a run that decided (its worker lost) resumes from the decision on
  record, writing nothing; after its own end step recorded completed, failed or aborted, it
  says how it ended (`ended_as`), also when every member has been bound since;
- a worker that runs dry decides a request to act as a dry run and tells nobody;
- nominate_members nominates each trainer to its node and records `member_nominated` for
  each, in one append;
- a delete for a group whose member was bound to another node than its nomination leaves
  the victim alone and says why, recording nothing; one for a group that still needs the
  room deletes it and tells it in upstream's workload-aware words;
- a worker without a cluster view (a workflow process) reads the group's standing from the
  API server: the PodGroup, then each placed member; so check_group and the delete's check
  see members bound, and a deleted PodGroup as gone;
- select names the PodGroups its victims belong to (ml/train-b, taken whole), with the UIDs
  of its victims, for the run's end;
- a failed run's end warns each placed member (`PreemptionFailed`: the group's failure, why,
  what to do), beside the PodGroup's warning, and leaves the members' nominations as they
  are (kube-scheduler keeps a nomination after a failed preemption too); its end retried
  warns nobody twice;
- the end tells each victim PodGroup that lost pods (`Preempted`, Normal) who took them,
  by namespace/name, and how many, which, on which node; once per run, however often the
  end is retried; only the pods the run deleted count (not those spared or failed).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlalchemy import Engine, select
from temporalio.testing import ActivityEnvironment

from preemptctl import migrations
from preemptctl.activities.contracts import (
    RunRef,
    VictimFate,
    VictimInput,
    VictimResult,
)
from preemptctl.activities.group_contracts import (
    GroupCheck,
    GroupEndInput,
    GroupSelection,
    GroupVictimInput,
    MembersNomination,
    Nomination,
    SelectGroupInput,
)
from preemptctl.activities.preemption import PreemptionActivities
from preemptctl.emulator import Emulator
from preemptctl.emulator.resources import EVENTS_V1, POD_GROUPS, PODS
from preemptctl.kube.client import connect
from preemptctl.kube.view import ClusterView
from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.ledger.models import events as events_table
from preemptctl.ledger.vocabulary import Fate, Outcome
from preemptctl.preemption.decision import PodRef
from preemptctl.preemption.group_decision import GroupRef
from preemptctl.preemption.standing import Standing
from preemptctl.worker.scenarios import BUNDLED
from tests.support.emulator import running_emulator

RUN = RunRef("g-1", "run-1", datetime(2026, 11, 26, 12, 0, tzinfo=UTC).isoformat())
TRAINERS = [f"ml/train-a-{i}" for i in range(4)]


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Engine]:
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    migrations.upgrade(url)
    engine = create_ledger_engine(url)
    yield engine
    engine.dispose()


class Gang:
    def __init__(
        self,
        emulator: Emulator,
        activities: PreemptionActivities,
        ledger: Engine,
        view: ClusterView,
    ) -> None:
        self.emulator = emulator
        self.activities = activities
        self.ledger = ledger
        self.view = view

    def nominated(self, key: str) -> str | None:
        found: str | None = (self.emulator.pod(key) or {})["status"].get("nominatedNodeName")
        return found

    def view_shows_bound(self, key: str) -> bool:
        with self.view.read() as snapshot:
            pod = snapshot.pod_by_key(key)
            return pod is not None and bool(pod.node_name)

    @property
    def group(self) -> GroupRef:
        obj = self.emulator.store.get(POD_GROUPS, "ml", "train-a")
        return GroupRef("ml", "train-a", obj["metadata"]["uid"], 100000)

    def ref(self, key: str) -> PodRef:
        obj = self.emulator.pod(key)
        assert obj is not None
        meta = obj["metadata"]
        return PodRef(meta["namespace"], meta["name"], meta["uid"], int(obj["spec"]["priority"]))

    def select(self, dry_run: bool = False) -> GroupSelection:
        request = SelectGroupInput(RUN, self.group, dry_run=dry_run)
        result: GroupSelection = ActivityEnvironment().run(
            self.activities.groups.select_group_preemption, request
        )
        return result

    def kinds(self) -> list[str]:
        with self.ledger.connect() as connection:
            rows = connection.execute(select(events_table.c.kind).order_by(events_table.c.id)).all()
        return [kind for (kind,) in rows]

    def events(self) -> list[tuple[str, str, str]]:
        return sorted(
            (e["regarding"]["kind"], e["regarding"]["name"], e["reason"])
            for e in self.emulator.store.objects(EVENTS_V1)
        )

    def placements(self) -> list[Nomination]:
        return [Nomination(self.ref(t), f"node-{i + 1}") for i, t in enumerate(TRAINERS)]

    def delete(self, victim: str, node: str) -> Any:
        step = VictimInput(RUN, self.ref(victim), self.group.as_preemptor(), node)
        request = GroupVictimInput(step, self.group, self.placements())
        return ActivityEnvironment().run(self.activities.groups.delete_group_victim, request)

    def end(self, outcome: Outcome, message: str = "", **more: Any) -> int:
        request = GroupEndInput(RUN, self.group, outcome, message, runbook=2, **more)
        told: int = ActivityEnvironment().run(self.activities.groups.record_group_end, request)
        return told

    def told(self, kind: str, reason: str) -> list[dict[str, Any]]:
        """The Events about objects of `kind` with `reason`, by the name of their object."""
        return sorted(
            (
                e
                for e in self.emulator.store.objects(EVENTS_V1)
                if e["regarding"]["kind"] == kind and e["reason"] == reason
            ),
            key=lambda e: str(e["regarding"]["name"]),
        )

    def bind(self, key: str, node: str) -> None:
        namespace, _, name = key.partition("/")
        self.emulator.store.patch(
            PODS, namespace, name, "application/merge-patch+json", {"spec": {"nodeName": node}}
        )


def gang_scenario() -> dict[str, Any]:
    scenario: dict[str, Any] = orjson.loads(BUNDLED["gang"].read_bytes())
    for item in scenario["items"]:
        if "uid" in item["metadata"]:
            item["metadata"]["uid"] = str(uuid.uuid4())
    return scenario


@contextmanager
def gang(ledger: Engine, *, view_started: bool = True, dry_run: bool = False) -> Iterator[Gang]:
    with running_emulator() as emulator:
        emulator.load(gang_scenario())
        kube = connect(emulator.kubeconfig_path)
        view = ClusterView(kube)
        if view_started:
            view.start()
        try:
            assert not view_started or view.wait_ready(10)
            activities = PreemptionActivities(kube, view, ledger, identity="test", dry_run=dry_run)
            yield Gang(emulator, activities, ledger, view)
        finally:
            if view_started:
                view.stop()


def until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.01)


def test_select_says_the_decision_in_the_workflows_terms(ledger: Engine) -> None:
    with gang(ledger) as g:
        selection = g.select()
        placed = {(p.pod.key, p.node) for p in selection.placements}
        uids = {p.pod.uid for p in selection.placements}
        expected_uids = {g.ref(t).uid for t in TRAINERS}
        events = g.events()
    assert placed == {(t, f"node-{i + 1}") for i, t in enumerate(TRAINERS)}
    assert uids == expected_uids
    assert sorted((v.pod.name, v.node, v.unit) for v in selection.victims) == [
        ("notebook", "node-3", "pod ml/notebook"),
        ("train-b-0", "node-1", "podGroup ml/train-b"),
        ("train-b-1", "node-2", "podGroup ml/train-b"),
        ("train-b-2", "node-5", "podGroup ml/train-b"),
    ]
    assert (selection.victim_groups, selection.min_count, selection.dry_run) == (
        ["ml/train-b"],
        4,
        False,
    )
    assert selection.story is not None
    assert selection.story.headline == (
        "Preempt 4 pod(s) in 2 unit(s) for pod group ml/train-a (priority 100000, minCount 4): "
        "4 member(s) placed on node-1, node-2, node-3, node-4"
    )
    notebook = g.ref("ml/notebook")
    assert (
        f"ml/notebook (uid {notebook.uid}, priority 100, on node-3, pod ml/notebook)"
        in selection.story.victims
    )
    assert "podGroup ml/train-b taken: " in selection.story.why
    assert selection.story.explain == "preemptctl explain ml/train-a"
    assert events == [("Pod", f"train-a-{i}", "Preempting") for i in range(4)] + [
        ("PodGroup", "train-a", "Preempting")
    ]


def test_select_asked_again_resumes_an_open_group_run(ledger: Engine) -> None:
    with gang(ledger) as g:
        first = g.select()
        kinds = g.kinds()
        again = g.select()
        assert g.kinds() == kinds
    assert sorted(v.pod.uid for v in again.victims) == sorted(v.pod.uid for v in first.victims)
    assert again.ended_as is None


@pytest.mark.parametrize("ended", [Outcome.COMPLETED, Outcome.FAILED, Outcome.ABORTED])
def test_select_asked_again_after_the_group_runs_end_says_how_it_ended(
    ledger: Engine, ended: Outcome
) -> None:
    with gang(ledger) as g:
        first = g.select()
        g.end(ended, f"ended {ended.value}", placements=g.placements())
        for i, trainer in enumerate(TRAINERS):
            g.bind(trainer, f"node-{i + 1}")
        until(lambda: all(g.view_shows_bound(t) for t in TRAINERS))
        kinds = g.kinds()
        again = g.select()
        assert g.kinds() == kinds
    assert again.ended_as is ended
    assert sorted(v.pod.uid for v in again.victims) == sorted(v.pod.uid for v in first.victims)


def test_a_dry_worker_decides_a_request_to_act_as_a_dry_run_and_tells_nobody(
    ledger: Engine,
) -> None:
    with gang(ledger, dry_run=True) as g:
        selection = g.select(dry_run=False)
        kinds, events = g.kinds(), g.events()
    assert selection.dry_run is True
    assert kinds[-1] == "dry_run"
    assert events == []


def test_nominate_members_nominates_each_and_records_each(ledger: Engine) -> None:
    with gang(ledger) as g:
        request = MembersNomination(RUN, g.group, g.placements())
        result = ActivityEnvironment().run(g.activities.groups.nominate_members, request)
        nominated = {
            t: (g.emulator.pod(t) or {})["status"].get("nominatedNodeName") for t in TRAINERS
        }
        kinds = g.kinds()
    assert (result.nominated, result.errors) == (4, [])
    assert nominated == {t: f"node-{i + 1}" for i, t in enumerate(TRAINERS)}
    assert kinds == ["member_nominated"] * 4


def test_a_member_bound_elsewhere_stops_the_delete(ledger: Engine) -> None:
    with gang(ledger) as g:
        g.bind("ml/train-a-2", "node-5")
        until(lambda: g.view_shows_bound("ml/train-a-2"))
        result = g.delete("ml/notebook", "node-3")
        still_there = g.emulator.pod("ml/notebook") is not None
        kinds = g.kinds()
    assert result.stopped == (
        "members of the pod group ml/train-a were bound elsewhere: "
        "ml/train-a-2 to node-5, not node-3"
    )
    assert (still_there, kinds) == (True, [])


def test_a_delete_for_a_group_that_needs_the_room_deletes_and_tells(ledger: Engine) -> None:
    with gang(ledger) as g:
        result = g.delete("ml/notebook", "node-3")
        preempted = [
            e["note"] for e in g.emulator.store.objects(EVENTS_V1) if e["reason"] == "Preempted"
        ]
        uid = g.group.uid
        kinds = g.kinds()
    assert result.fate == "deleted"
    assert preempted == [f"Preempted by podgroup ml/train-a (uid {uid}) on node node-3"]
    assert kinds == ["victim_delete_sent", "victim_deleted"]


def test_without_a_view_the_group_is_read_from_the_api_server(ledger: Engine) -> None:
    with gang(ledger, view_started=False) as g:
        members = [g.ref(t) for t in TRAINERS]
        check = GroupCheck(g.group, members)
        before = ActivityEnvironment().run(g.activities.groups.check_group, check)
        for i, trainer in enumerate(TRAINERS):
            g.bind(trainer, f"node-{i + 1}")
        after = ActivityEnvironment().run(g.activities.groups.check_group, check)
        g.emulator.store.delete(POD_GROUPS, "ml", "train-a")
        gone = ActivityEnvironment().run(g.activities.groups.check_group, check)
    assert (before.state, before.pending, before.bound) == (Standing.PENDING, 4, {})
    assert (after.state, after.bound) == (
        Standing.BOUND,
        {t: f"node-{i + 1}" for i, t in enumerate(TRAINERS)},
    )
    assert gone.state is Standing.GONE


def test_select_names_the_pod_groups_its_victims_belong_to(ledger: Engine) -> None:
    with gang(ledger) as g:
        selection = g.select()
        train_b = g.emulator.store.get(POD_GROUPS, "ml", "train-b")["metadata"]["uid"]
        members = {g.ref(f"ml/train-b-{i}").uid for i in range(3)}
    [found] = selection.victim_pod_groups
    assert found.group == GroupRef("ml", "train-b", train_b, 1000)
    assert sorted(found.victims) == sorted(members)


FAILED = 'victim ml/train-b-2 could not be preempted: pods "train-b-2" is forbidden'


def test_a_failed_runs_end_warns_each_placed_member(ledger: Engine) -> None:
    with gang(ledger) as g:
        nominate = MembersNomination(RUN, g.group, g.placements())
        ActivityEnvironment().run(g.activities.groups.nominate_members, nominate)
        g.end(Outcome.FAILED, FAILED, retryable=False, placements=g.placements())
        warned = g.told("Pod", "PreemptionFailed")
        on_group = g.told("PodGroup", "PreemptionFailed")
        nominated = [g.nominated(t) for t in TRAINERS]
        group_uid = g.group.uid
    assert [e["regarding"]["name"] for e in warned] == [f"train-a-{i}" for i in range(4)]
    for i, told in enumerate(warned):
        assert told["type"] == "Warning"
        assert told["note"] == (
            f"The preemption for its pod group ml/train-a failed: {FAILED}. Retrying cannot "
            "help until this is fixed (grant the permission named, or correct the request); "
            f"the pod is tried again once it changes. Its nomination to node-{i + 1} is not "
            "cleared (kube-scheduler keeps a nomination after a failed preemption too), so "
            "the room already made stays the group's."
        )
        assert (told["related"]["kind"], told["related"]["uid"]) == ("PodGroup", group_uid)
    assert [e["note"] for e in on_group] == [
        f"{FAILED}. Retrying cannot help until this is fixed (grant the permission named, or "
        "correct the request); the pod is tried again once it changes."
    ]
    assert nominated == [f"node-{i + 1}" for i in range(4)]


def test_a_failed_runs_end_retried_warns_each_member_once(ledger: Engine) -> None:
    with gang(ledger) as g:
        g.end(Outcome.FAILED, FAILED, placements=g.placements())
        g.end(Outcome.FAILED, FAILED, placements=g.placements())
        warned = [e["regarding"]["name"] for e in g.told("Pod", "PreemptionFailed")]
    assert warned == [f"train-a-{i}" for i in range(4)]


def deleted_fates(g: Gang, victims: list[tuple[str, str]]) -> list[VictimFate]:
    fates = []
    for victim, node in victims:
        pod = g.ref(victim)
        result = g.delete(victim, node)
        assert result.fate is Fate.DELETED
        fates.append(VictimFate(pod, node, result))
    return fates


VICTIMS = [
    ("ml/train-b-0", "node-1"),
    ("ml/train-b-1", "node-2"),
    ("ml/train-b-2", "node-5"),
    ("ml/notebook", "node-3"),
]


def test_the_end_tells_each_victim_pod_group_who_took_its_pods(ledger: Engine) -> None:
    with gang(ledger) as g:
        groups = g.select().victim_pod_groups
        fates = deleted_fates(g, VICTIMS)
        g.end(Outcome.COMPLETED, victims=fates, victim_pod_groups=groups)
        told = g.told("PodGroup", "Preempted")
        uid = g.group.uid
    [on_train_b] = told
    assert on_train_b["regarding"]["name"] == "train-b"
    assert on_train_b["type"] == "Normal"
    assert on_train_b["note"] == (
        f"Preempted by podgroup ml/train-a (uid {uid}): 3 of its pods, "
        "train-b-0 on node-1, train-b-1 on node-2, train-b-2 on node-5"
    )
    assert (on_train_b["related"]["kind"], on_train_b["related"]["name"]) == (
        "PodGroup",
        "train-a",
    )


def test_a_victim_pod_group_is_told_once_per_run(ledger: Engine) -> None:
    with gang(ledger) as g:
        groups = g.select().victim_pod_groups
        fates = deleted_fates(g, VICTIMS)
        g.end(Outcome.COMPLETED, victims=fates, victim_pod_groups=groups)
        g.end(Outcome.COMPLETED, victims=fates, victim_pod_groups=groups)
        told = [e["regarding"]["name"] for e in g.told("PodGroup", "Preempted")]
    assert told == ["train-b"]


def test_a_victim_pod_group_is_told_of_the_pods_deleted_only(ledger: Engine) -> None:
    with gang(ledger) as g:
        groups = g.select().victim_pod_groups
        fates = deleted_fates(g, VICTIMS[:1])
        fates += [
            VictimFate(g.ref("ml/train-b-1"), "node-2", VictimResult(Fate.SPARED)),
            VictimFate(g.ref("ml/train-b-2"), "node-5", VictimResult(Fate.FAILED, "forbidden")),
        ]
        g.end(Outcome.FAILED, FAILED, victims=fates, victim_pod_groups=groups)
        told = [e["note"] for e in g.told("PodGroup", "Preempted")]
        uid = g.group.uid
    assert told == [
        f"Preempted by podgroup ml/train-a (uid {uid}): 1 of its pods, train-b-0 on node-1"
    ]

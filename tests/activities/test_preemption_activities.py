"""The activities one by one, outside any workflow (Temporal's `ActivityEnvironment`), against
the API emulator and a SQLite ledger: each records in the ledger what it did.

Scenarios:
- select writes the decision ahead with one `victim_chosen` per victim, and its context
  names the claims it respected;
- a second preemptor's decision never takes a victim an open claim holds;
- a decision to preempt tells the preemptor (`Preempting`: how many pods, on which node,
  which); a dry run tells it nothing;
- a failed run tells the preemptor (`PreemptionFailed`, Warning) its cause and what to do;
- select for a preemptor that fits records the decision and its end (completed) at once;
- select for a preemptor that is gone reports why (no verdict) and records nothing: the
  workflow records the abort (`record_end`), which records it with its reason;
- a dry run records the decision and its end (dry_run);
- select asked again for a run that decided (its worker lost) resumes from the decision on
  record, writing nothing: still open, it goes on (`ended_as` None); after its own end step
  recorded completed, failed or aborted, it says so (`ended_as`), also when the preemptor has
  been bound since;
- a second run of a preemption appends `retried` before its decision: by whom, why, after
  which run and how that run ended; a first run appends none;
- mark records `victim_marked`; mark of a replaced victim records the replacement's UID;
- delete records its intent (`victim_delete_sent`) before the call, then `victim_deleted`
  and the `Preempted` event on the victim;
- a delete retried after an earlier attempt recorded its intent and lost the answer (the
  worker killed, the connection dropped) finds the victim gone and records it deleted by
  this preemption (`answerLost`), with its `Preempted` event, never `victim_already_gone`;
- a mark re-run after this run's own delete (a local activity re-run by the worker that
  took the workflow over) finds the victim gone, yet records nothing gone: the victim was
  marked, and the delete that follows records it deleted by this preemption;
- a victim already gone when the run's first attempt sends its DELETE is
  `victim_already_gone`: someone else removed it;
- delete for a preemptor bound to another node leaves the victim alone and reports why,
  recording nothing (the workflow records the abort);
- a delete retried after its first attempt got an answer records that answer, without
  asking the API server again;
- a delete refused for good (RBAC) records the victim as failed and is not retried;
- unmark removes the DisruptionTarget condition mark set and records `victim_unmarked`;
  a removal RBAC refuses is recorded with its error, not raised;
- a pod's decision that takes a gang whole (`disruptionMode: all`) names its PodGroup with
  its victims, and the run's end tells that PodGroup (`Preempted`) that the pod, by
  namespace/name, took its pods, how many, which, on which node; each victim's own
  `Preempted` names the pod by namespace/name too.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from preemptctl import migrations
from preemptctl.activities.contracts import (
    EndInput,
    PreemptVictimInput,
    RunRef,
    SelectInput,
    Selection,
    VictimFate,
    VictimInput,
    VictimResult,
)
from preemptctl.activities.preemption import PreemptionActivities
from preemptctl.emulator import Emulator
from preemptctl.emulator.resources import EVENTS_V1, POD_GROUPS, PODS
from preemptctl.kube.client import connect
from preemptctl.kube.view import ClusterView
from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.ledger.events import LedgerEvent
from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.models import events as events_table
from preemptctl.ledger.payloads import DeleteSent
from preemptctl.ledger.vocabulary import Fate, Outcome
from preemptctl.ledger.writer import append
from preemptctl.preemption.decision import PodRef, Verdict
from tests.support.emulator import as_list, node, pod, running_emulator
from tests.workflows.scenarios import a_gang_in_the_way, one_full_node, spare_room


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Engine]:
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    migrations.upgrade(url)
    engine = create_ledger_engine(url)
    yield engine
    engine.dispose()


@dataclasses.dataclass
class Cluster:
    emulator: Emulator
    activities: PreemptionActivities
    ledger: Engine
    view: ClusterView

    def ref(self, key: str) -> PodRef:
        obj = self.emulator.pod(key)
        assert obj is not None
        meta = obj["metadata"]
        return PodRef(meta["namespace"], meta["name"], meta["uid"], int(obj["spec"]["priority"]))

    def kinds(self, preemption_id: str = "p-1") -> list[str]:
        with self.ledger.connect() as connection:
            rows = connection.execute(
                select(events_table.c.kind, events_table.c.victim_name)
                .where(events_table.c.preemption_id == preemption_id)
                .order_by(events_table.c.id)
            ).all()
        return [f"{kind}:{victim}" if victim else kind for kind, victim in rows]

    def payloads(self, kind: str) -> list[dict[str, Any]]:
        with self.ledger.connect() as connection:
            rows = connection.execute(
                select(events_table.c.payload).where(events_table.c.kind == kind)
            ).all()
        return [row.payload for row in rows]

    def select(
        self, key: str, run: RunRef | None = None, dry_run: bool = False, **more: Any
    ) -> Selection:
        request = SelectInput(run or RUN, self.ref(key), dry_run=dry_run, **more)
        result: Selection = ActivityEnvironment().run(self.activities.select_preemption, request)
        return result

    def view_node_of(self, ref: PodRef) -> str:
        with self.view.read() as snapshot:
            found = snapshot.pods.get(ref.uid)
            return found.node_name if found is not None else ""

    def victim_step(self, victim: str, node_name: str = "node-1") -> VictimInput:
        return VictimInput(RUN, self.ref(victim), self.ref("default/urgent"), node_name)


RUN = RunRef("p-1", "run-1", datetime(2026, 11, 24, 12, 0, tzinfo=UTC).isoformat())


@pytest.fixture
def cluster(ledger: Engine) -> Iterator[Cluster]:
    with running_emulator() as emulator, started(emulator, ledger, one_full_node()) as running:
        yield running


@contextmanager
def started(emulator: Emulator, ledger: Engine, scenario: dict[str, object]) -> Iterator[Cluster]:
    emulator.load(scenario)
    kube = connect(emulator.kubeconfig_path)
    view = ClusterView(kube)
    view.start()
    try:
        assert view.wait_ready(10)
        activities = PreemptionActivities(kube, view, ledger, identity="test")
        yield Cluster(emulator, activities, ledger, view)
    finally:
        view.stop()


def until_the_view_shows(cluster: Cluster, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "the view never showed it"
        time.sleep(0.01)


def test_select_writes_the_decision_ahead(cluster: Cluster) -> None:
    selection = cluster.select("default/urgent")
    assert selection.verdict is Verdict.PREEMPT
    assert [v.name for v in selection.victims] == ["victim-0", "victim-1"]
    assert cluster.kinds() == [
        "decision_made",
        "victim_chosen:victim-0",
        "victim_chosen:victim-1",
    ]
    [decision] = cluster.payloads("decision_made")
    assert decision["context"] == {
        "worker": "test",
        "sequence": 1,
        "claims": [],
        "schedulerName": "default-scheduler",
    }


def test_a_later_decision_respects_an_open_claim(ledger: Engine) -> None:
    scenario = as_list(
        node("node-1", cpu="2"),
        pod("victim-0", node_name="node-1", priority=100, cpu="1"),
        pod("victim-1", node_name="node-1", priority=100, cpu="1"),
        pod("urgent", priority=1000, cpu="1"),
        pod("second", priority=1000, cpu="1"),
    )
    with running_emulator() as emulator, started(emulator, ledger, scenario) as cluster:
        first = cluster.select("default/urgent")
        second = cluster.select("default/second", RunRef("p-2", "run-1", RUN.occurred_at))
    assert not {v.uid for v in first.victims} & {v.uid for v in second.victims}
    assert cluster.payloads("decision_made")[1]["context"]["claims"] == ["default/urgent"]


def test_a_preemptor_that_fits_is_recorded_as_completed_at_once(ledger: Engine) -> None:
    with running_emulator() as emulator, started(emulator, ledger, spare_room()) as cluster:
        selection = cluster.select("default/urgent")
    assert selection.verdict is Verdict.FITS_WITHOUT_PREEMPTION
    assert cluster.kinds() == ["decision_made", "completed"]


def test_a_preemptor_that_is_gone_is_reported_for_the_workflow_to_abort(
    cluster: Cluster,
) -> None:
    request = SelectInput(RUN, cluster.ref("default/urgent"))
    cluster.emulator.store.delete(PODS, "default", "urgent", grace_period=0)
    selection = ActivityEnvironment().run(cluster.activities.select_preemption, request)
    assert (selection.verdict, selection.message) == (None, "the preemptor is gone")
    assert cluster.kinds() == []
    end = EndInput(RUN, request.preemptor, Outcome.ABORTED, message=selection.message)
    ActivityEnvironment().run(cluster.activities.record_end, end)
    assert cluster.kinds() == ["preemption_aborted"]
    assert cluster.payloads("preemption_aborted") == [{"reason": "the preemptor is gone"}]


def test_a_dry_run_records_the_decision_and_its_end(cluster: Cluster) -> None:
    cluster.select("default/urgent", dry_run=True)
    assert cluster.kinds()[0] == "decision_made"
    assert cluster.kinds()[-1] == "dry_run"


def test_select_asked_again_resumes_an_open_run_from_its_decision(cluster: Cluster) -> None:
    first = cluster.select("default/urgent")
    again = cluster.select("default/urgent")
    assert (again.verdict, again.node, again.victims) == (first.verdict, first.node, first.victims)
    assert again.ended_as is None
    assert cluster.kinds() == ["decision_made", "victim_chosen:victim-0", "victim_chosen:victim-1"]


@pytest.mark.parametrize("ended", [Outcome.COMPLETED, Outcome.FAILED, Outcome.ABORTED])
def test_select_asked_again_after_the_runs_end_says_how_it_ended(
    cluster: Cluster, ended: Outcome
) -> None:
    first = cluster.select("default/urgent")
    end = EndInput(RUN, first.preemptor, ended, first.node, f"ended {ended.value}")
    ActivityEnvironment().run(cluster.activities.record_end, end)
    before = cluster.kinds()
    bound = {"spec": {"nodeName": "node-1"}}
    cluster.emulator.store.patch(PODS, "default", "urgent", "application/merge-patch+json", bound)
    again = cluster.select("default/urgent")
    assert (again.ended_as, again.victims) == (ended, first.victims)
    assert cluster.kinds() == before


def test_mark_records_the_marked_victim(cluster: Cluster) -> None:
    result = ActivityEnvironment().run(
        cluster.activities.mark_victim, cluster.victim_step("default/victim-0")
    )
    assert result.fate is Fate.MARKED
    assert cluster.kinds() == ["victim_marked:victim-0"]


def test_mark_of_a_replaced_victim_records_the_replacements_uid(cluster: Cluster) -> None:
    step = cluster.victim_step("default/victim-0")
    cluster.emulator.store.delete(PODS, "default", "victim-0", grace_period=0)
    cluster.emulator.store.create(
        PODS, "default", pod("victim-0", node_name="node-1", priority=100, cpu="1")
    )
    new_uid = cluster.ref("default/victim-0").uid
    result = ActivityEnvironment().run(cluster.activities.mark_victim, step)
    assert (result.fate, result.replaced_by_uid) == (Fate.REPLACED, new_uid)
    assert cluster.payloads("victim_replaced")[0]["replacedByUid"] == new_uid


def test_delete_records_the_deletion_and_the_preempted_event(cluster: Cluster) -> None:
    result = ActivityEnvironment().run(
        cluster.activities.delete_victim, cluster.victim_step("default/victim-0")
    )
    assert result.fate is Fate.DELETED
    assert cluster.kinds() == ["victim_delete_sent:victim-0", "victim_deleted:victim-0"]
    assert len(cluster.emulator.requests.matching("create", "events")) == 1


def first_attempt_lost_its_answer(cluster: Cluster, step: VictimInput) -> None:
    """What a first attempt killed right after its DELETE leaves behind: its intent in the
    ledger, the victim gone, no answer and no heartbeat."""
    append(
        cluster.ledger,
        LedgerEvent(
            RUN.preemption_id,
            RUN.run_id,
            EventKind.VICTIM_DELETE_SENT,
            step.preemptor,
            node=step.node,
            victim=step.victim,
            payload=DeleteSent().to_json(),
        ),
    )
    cluster.emulator.store.delete(
        PODS, step.victim.namespace, step.victim.name, grace_period=0, uid=step.victim.uid
    )


def test_a_delete_whose_answer_was_lost_is_recorded_as_this_preemptions(
    cluster: Cluster,
) -> None:
    step = cluster.victim_step("default/victim-0")
    first_attempt_lost_its_answer(cluster, step)
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=2)
    result: VictimResult = env.run(cluster.activities.delete_victim, step)
    assert (result.fate, result.answer_lost) == (Fate.DELETED, True)
    assert cluster.kinds() == ["victim_delete_sent:victim-0", "victim_deleted:victim-0"]
    assert cluster.payloads("victim_deleted")[0]["answerLost"] is True
    assert len(cluster.emulator.requests.matching("create", "events")) == 1


def test_a_mark_re_run_after_this_runs_delete_leaves_the_victim_to_the_delete(
    cluster: Cluster,
) -> None:
    step = cluster.victim_step("default/victim-0")
    ActivityEnvironment().run(cluster.activities.mark_victim, step)
    first_attempt_lost_its_answer(cluster, step)
    marked: VictimResult = ActivityEnvironment().run(cluster.activities.mark_victim, step)
    deleted: VictimResult = ActivityEnvironment().run(cluster.activities.delete_victim, step)
    assert marked.fate is Fate.MARKED
    assert (deleted.fate, deleted.answer_lost) == (Fate.DELETED, True)
    assert cluster.kinds() == [
        "victim_marked:victim-0",
        "victim_delete_sent:victim-0",
        "victim_deleted:victim-0",
    ]


def test_a_victim_gone_before_this_run_sent_anything_is_already_gone(cluster: Cluster) -> None:
    step = cluster.victim_step("default/victim-0")
    cluster.emulator.store.delete(
        PODS, step.victim.namespace, step.victim.name, grace_period=0, uid=step.victim.uid
    )
    result = ActivityEnvironment().run(cluster.activities.delete_victim, step)
    assert result.fate is Fate.ALREADY_GONE
    assert cluster.kinds() == ["victim_delete_sent:victim-0", "victim_already_gone:victim-0"]
    assert cluster.emulator.requests.matching("create", "events") == []


def test_delete_for_a_preemptor_bound_elsewhere_leaves_the_victim_alone(cluster: Cluster) -> None:
    step = cluster.victim_step("default/victim-0", node_name="node-9")
    cluster.emulator.store.patch(
        PODS, "default", "urgent", "application/merge-patch+json", {"spec": {"nodeName": "node-1"}}
    )
    until_the_view_shows(cluster, lambda: cluster.view_node_of(step.preemptor) == "node-1")
    result = ActivityEnvironment().run(cluster.activities.delete_victim, step)
    assert result.stopped == "the preemptor was bound to node-1, not node-9"
    assert cluster.emulator.requests.matching("delete", "pods") == []
    assert cluster.kinds() == []


def test_a_retried_delete_records_the_first_attempts_answer(cluster: Cluster) -> None:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info, attempt=2, heartbeat_details=["deleted", "victim deleted", ""]
    )
    result: VictimResult = env.run(
        cluster.activities.delete_victim, cluster.victim_step("default/victim-0")
    )
    assert result.fate is Fate.DELETED
    assert cluster.emulator.requests.matching("delete", "pods") == []
    assert cluster.kinds() == ["victim_deleted:victim-0"]


def test_a_delete_refused_for_good_records_the_victim_as_failed(cluster: Cluster) -> None:
    cluster.emulator.faults.fail("delete", "pods", 403, name="victim-0")
    with pytest.raises(ApplicationError) as refused:
        ActivityEnvironment().run(
            cluster.activities.delete_victim, cluster.victim_step("default/victim-0")
        )
    assert refused.value.non_retryable
    assert cluster.kinds() == ["victim_delete_sent:victim-0", "victim_failed:victim-0"]


def disruption_target_of(cluster: Cluster, key: str) -> list[dict[str, Any]]:
    obj = cluster.emulator.pod(key)
    assert obj is not None
    conditions = obj.get("status", {}).get("conditions") or []
    return [c for c in conditions if c.get("type") == "DisruptionTarget"]


def test_unmark_removes_the_condition_and_records_it(cluster: Cluster) -> None:
    step = cluster.victim_step("default/victim-0")
    ActivityEnvironment().run(cluster.activities.mark_victim, step)
    assert disruption_target_of(cluster, "default/victim-0")
    ActivityEnvironment().run(cluster.activities.unmark_victim, step)
    assert disruption_target_of(cluster, "default/victim-0") == []
    assert cluster.kinds() == ["victim_marked:victim-0", "victim_unmarked:victim-0"]


def test_an_unmark_refused_for_good_is_recorded_not_raised(cluster: Cluster) -> None:
    step = cluster.victim_step("default/victim-0")
    ActivityEnvironment().run(cluster.activities.mark_victim, step)
    cluster.emulator.faults.deny("patch", "pods/status")
    message = ActivityEnvironment().run(cluster.activities.unmark_victim, step)
    assert "forbidden" in message.lower()
    assert "error" in cluster.payloads("victim_unmarked")[0]


def events_on(cluster: Cluster, pod: str, reason: str) -> list[dict[str, Any]]:
    """The events.k8s.io events recorded about `pod` with `reason`."""
    return [
        r.body
        for r in cluster.emulator.requests.matching("create", "events")
        if r.body["regarding"]["name"] == pod and r.body["reason"] == reason
    ]


def test_a_decision_to_preempt_tells_the_preemptor(cluster: Cluster) -> None:
    cluster.select("default/urgent")
    [told] = events_on(cluster, "urgent", "Preempting")
    assert told["type"] == "Normal"
    assert told["note"] == "2 pod(s) on node-1: default/victim-0, default/victim-1"


def test_a_dry_run_tells_the_preemptor_nothing(cluster: Cluster) -> None:
    cluster.select("default/urgent", dry_run=True)
    assert events_on(cluster, "urgent", "Preempting") == []


def test_a_failed_run_tells_the_preemptor_its_cause_and_what_to_do(cluster: Cluster) -> None:
    cause = "victim default/victim-0 could not be preempted: forbidden"
    end = EndInput(RUN, cluster.ref("default/urgent"), Outcome.FAILED, "node-1", cause)
    end.retryable = False
    ActivityEnvironment().run(cluster.activities.record_end, end)
    [told] = events_on(cluster, "urgent", "PreemptionFailed")
    assert told["type"] == "Warning"
    assert told["note"].startswith(cause + ". Retrying cannot help until this is fixed")


def test_a_second_run_records_that_it_retries_the_first(cluster: Cluster) -> None:
    cluster.select("default/urgent", dry_run=True)
    assert "retried" not in cluster.kinds()
    second = RunRef("p-1", "run-2", RUN.occurred_at)
    cluster.select("default/urgent", second, started_by="person", retry_reason="RBAC fixed")
    kinds = cluster.kinds()
    assert kinds.index("retried") == kinds.index("dry_run") + 1
    assert kinds.index("retried") < len(kinds) - 1 - kinds[::-1].index("decision_made")
    assert cluster.payloads("retried") == [
        {
            "newRunId": "run-2",
            "previousRunId": "run-1",
            "previousOutcome": "dry-run",
            "by": "person",
            "reason": "RBAC fixed",
        }
    ]


def test_the_triggers_retry_says_why_by_itself(cluster: Cluster) -> None:
    cluster.select("default/urgent")
    cluster.select("default/urgent", RunRef("p-1", "run-2", RUN.occurred_at))
    [retried] = cluster.payloads("retried")
    assert (retried["by"], retried["previousOutcome"]) == ("trigger", None)
    assert retried["reason"] == (
        "default/urgent still needed room after run run-1 ended without recording an end"
    )


def test_a_pods_run_that_takes_a_gang_whole_tells_its_pod_group(ledger: Engine) -> None:
    with running_emulator() as emulator, started(emulator, ledger, a_gang_in_the_way()) as cluster:
        selection = cluster.select("ml/urgent")
        urgent = cluster.ref("ml/urgent")
        fates = []
        for victim in selection.victims:
            on = selection.victim_nodes.get(victim.uid, selection.node or "")
            step = PreemptVictimInput(VictimInput(RUN, victim, urgent, on))
            result = ActivityEnvironment().run(cluster.activities.preempt_victim, step)
            fates.append(VictimFate(victim, on, result))
        end = EndInput(RUN, urgent, Outcome.COMPLETED, selection.node, runbook=2, victims=fates)
        end.victim_pod_groups = selection.victim_pod_groups
        ActivityEnvironment().run(cluster.activities.record_end, end)
        told = {
            (e["regarding"]["kind"], e["regarding"]["name"]): e
            for e in emulator.store.objects(EVENTS_V1, "ml")
            if e["reason"] == "Preempted"
        }
        group_uid = emulator.store.get(POD_GROUPS, "ml", "train-y")["metadata"]["uid"]
    assert sorted(v.name for v in selection.victims) == ["train-y-0", "train-y-1"]
    assert [(g.group.key, g.group.uid) for g in selection.victim_pod_groups] == [
        ("ml/train-y", group_uid)
    ]
    assert sorted(told) == [("Pod", "train-y-0"), ("Pod", "train-y-1"), ("PodGroup", "train-y")]
    on_group = told[("PodGroup", "train-y")]
    assert on_group["type"] == "Normal"
    assert on_group["note"] == (
        f"Preempted by pod ml/urgent (uid {urgent.uid}): 2 of its pods, "
        "train-y-0 on node-1, train-y-1 on node-2"
    )
    assert (on_group["related"]["kind"], on_group["related"]["name"]) == ("Pod", "urgent")
    assert told[("Pod", "train-y-1")]["note"] == (
        f"Preempted by pod ml/urgent (uid {urgent.uid}) on node node-2"
    )

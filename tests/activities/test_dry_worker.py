"""A worker that runs dry writes nothing to the cluster, whatever the request says (issue 20,
finding 4: a request to act reaches a worker whose operator handed preemption back to
kube-scheduler, e.g. a retried run, or a run decided by a worker that acted).

Scenarios (the activities outside any workflow, the API emulator, a SQLite ledger):
- the select step decides a request to act as a dry run: says so (`Selection.dry_run`),
  records the decision and its end as a dry run, holds no claim, tells the preemptor nothing;
- nominate, mark, delete and unmark each refuse for good (`WorkerRunsDry`, non-retryable),
  saying what they refused, why and what to do, and send nothing to the API server;
- an acting worker's select of the same request goes on to preempt (the default is to act).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from preemptctl import migrations
from preemptctl.activities.contracts import NominationInput, SelectInput, Selection
from preemptctl.kube.client import connect
from preemptctl.ledger.claims import open_claims
from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.worker.config import load_settings
from preemptctl.worker.temporal_worker import preemption_activities
from tests.activities.test_preemption_activities import RUN, Cluster, started
from tests.support.emulator import running_emulator
from tests.workflows.scenarios import one_full_node

WRITES = ("create", "update", "patch", "delete")


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Engine]:
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    migrations.upgrade(url)
    engine = create_ledger_engine(url)
    yield engine
    engine.dispose()


@pytest.fixture
def dry(ledger: Engine) -> Iterator[Cluster]:
    """one_full_node, served by a worker that runs dry: its activities built from the
    operator's settings (PREEMPT_DRY_RUN=true) as `preemptctl worker` builds them."""
    settings = load_settings(environ={"PREEMPT_DRY_RUN": "true"})
    with running_emulator() as emulator, started(emulator, ledger, one_full_node()) as cluster:
        kube = connect(emulator.kubeconfig_path)
        dry_activities = preemption_activities(settings, kube, cluster.view, ledger)
        yield dataclasses.replace(cluster, activities=dry_activities)


def writes(cluster: Cluster) -> list[str]:
    return [
        f"{r.verb} {r.resource} {r.name}" for r in cluster.emulator.requests if r.verb in WRITES
    ]


def select_to_act(cluster: Cluster) -> Selection:
    request = SelectInput(RUN, cluster.ref("default/urgent"), dry_run=False)
    result: Selection = ActivityEnvironment().run(cluster.activities.select_preemption, request)
    return result


def test_select_decides_a_request_to_act_as_a_dry_run(dry: Cluster) -> None:
    selection = select_to_act(dry)
    assert (selection.verdict, selection.dry_run) == ("Preempt", True)
    assert dry.kinds() == [
        "decision_made",
        "victim_chosen:victim-0",
        "victim_chosen:victim-1",
        "dry_run",
    ]
    with dry.ledger.connect() as db:
        assert open_claims(db) == []
    assert writes(dry) == []


def test_an_acting_workers_select_goes_on_to_preempt(ledger: Engine) -> None:
    with running_emulator() as emulator, started(emulator, ledger, one_full_node()) as cluster:
        selection = select_to_act(cluster)
    assert (selection.verdict, selection.dry_run) == ("Preempt", False)
    assert cluster.kinds()[-1] == "victim_chosen:victim-1"


def refusal(step: Callable[[], Any]) -> ApplicationError:
    with pytest.raises(ApplicationError) as raised:
        step()
    return raised.value


@pytest.mark.parametrize(
    ("activity", "verb", "pod"),
    [
        ("mark_victim", "mark", "default/victim-0"),
        ("delete_victim", "delete", "default/victim-0"),
        ("unmark_victim", "unmark", "default/victim-0"),
        ("nominate_preemptor", "nominate", "default/urgent to node-1"),
    ],
)
def test_every_write_step_refuses_for_good(
    dry: Cluster, activity: str, verb: str, pod: str
) -> None:
    if activity == "nominate_preemptor":
        argument: Any = NominationInput(RUN, dry.ref("default/urgent"), "node-1")
    else:
        argument = dry.victim_step("default/victim-0")
    error = refusal(lambda: ActivityEnvironment().run(getattr(dry.activities, activity), argument))
    assert (error.type, error.non_retryable) == ("WorkerRunsDry", True)
    assert error.message == (
        f"refused to {verb} {pod}: this worker runs dry (PREEMPT_DRY_RUN=true) and writes "
        "nothing to the cluster; to act, set PREEMPT_DRY_RUN=false and retry"
    )
    assert writes(dry) == []

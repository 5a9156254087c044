"""The bundled gang scenario (`preemptctl dev --scenario gang`): the story it tells, held still.

Five 8-cpu nodes. ml/train-a, a PodGroup of four 4-cpu trainers (gang, minCount 4,
disruptionMode all, priority 100000), is pending: only node-4 has room, for one of them.
Below it run two gangs taken whole (`disruptionMode: all`, priority 1000): ml/train-c, four
4-cpu pods, one on each of node-1 to node-4, and ml/train-b, three 4-cpu pods on node-1,
node-2 and node-5; and a loose notebook pod (priority 100, 4 cpu) on node-3. default/web-1
(priority 1000000) shares node-5 with train-b.

Scenarios:
- the planner's decision for ml/train-a (`preemptctl plan --pod-group ml/train-a` on the
  file): place one trainer on each of node-1 to node-4, and take two units: train-b whole,
  its pod on node-5 too (train-a needs nothing there), and the notebook; keep train-c,
  which shares every node with train-a: a pod of each of train-b and train-c on node-1 and
  node-2 would free as much, but would kill two jobs where one does. train-c is kept
  because at equal priority the larger gang is the more important unit;
- the same decision on the scenario with fresh uids, as dev loads it: the story does not
  hang on the file's uids; the victims come in the file's order on every load (train-b's
  pods tie but for their uids, which dev's fresh ones sort alike);
- on the running simulated cluster with no controller, train-a stays pending whole, though
  one trainer would fit alone on node-4: each trainer is Unschedulable, with the gang's
  `minCount (4) cannot be satisfied` or its own FitError;
- in upstream-preemption mode (what `dev --shadow` compares with), the simulated
  kube-scheduler takes the same victims and binds train-a on node-1 to node-4;
- `preemptctl dev --scenario gang` loads it: its PodGroups and pods are served, with new
  uids and times moved to the load (the trainers just created, train-b a day older, as in
  the file), and train-a's trainers are pending, marked by the simulated scheduler;
- `preemptctl dev --once --scenario gang` waits for the group preemption and reports it
  (exit 0): one preemption, the group's workflow, ml/train-a its preemptor and `podGroup`
  (as `history --json` names it), train-b whole and the notebook its victims, train-c
  kept, its four trainers placed on node-1 to node-4 and bound;
- while `dev --scenario gang` runs, each trainer is bound on the node the group preemption
  nominated it to (the simulated scheduler tries a nominated node first).
Every bundled scenario:
- its pods are read by the official client (each container status has its imageID).
"""

from __future__ import annotations

import json
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client import V1Pod

from preemptctl.emulator import SimulatedCluster
from preemptctl.emulator.resources import EVENTS
from preemptctl.emulator.scenario import read_document, with_fresh_uids
from preemptctl.worker.cli import main
from preemptctl.worker.scenarios import BUNDLED, bundled_or_file
from tests.worker.test_dev_command import dev_once, dev_running, preemptctl

GANG = BUNDLED["gang"]
TRAIN_A = [f"train-a-{i}" for i in range(4)]

STORY_UNITS = [
    {
        "unit": "podGroup ml/train-b",
        "whole": True,
        "priority": 1000,
        "pods": ["ml/train-b-0", "ml/train-b-1", "ml/train-b-2"],
        "nodes": ["node-1", "node-2", "node-5"],
        "pdbViolations": 0,
        "reason": "ml/train-a-0 would not fit on node-1 beside it (Insufficient cpu)",
    },
    {
        "unit": "pod ml/notebook",
        "whole": False,
        "priority": 100,
        "pods": ["ml/notebook"],
        "nodes": ["node-3"],
        "pdbViolations": 0,
        "reason": "ml/train-a-2 would not fit on node-3 beside it (Insufficient cpu)",
    },
]
STORY_NOMINATIONS = {
    "ml/train-a-0": "node-1",
    "ml/train-a-1": "node-2",
    "ml/train-a-2": "node-3",
    "ml/train-a-3": "node-4",
}


def plan_pod_group(capsys: pytest.CaptureFixture[str], snapshot: Path) -> dict[str, Any]:
    """`preemptctl plan --snapshot <snapshot> --pod-group ml/train-a`, its JSON."""
    code = main(["plan", "--snapshot", str(snapshot), "--pod-group", "ml/train-a"])
    captured = capsys.readouterr()
    assert (code, captured.err) == (0, "")
    decided: dict[str, Any] = json.loads(captured.out)
    return decided


def story(decided: dict[str, Any]) -> dict[str, Any]:
    """The parts of a decision that tell the story, each unit's pods in name order."""
    units = [{**unit, "pods": sorted(unit["pods"])} for unit in decided["rationale"]["units"]]
    return {
        "status": decided["status"],
        "nominations": decided["nominations"],
        "victims": sorted(f"{v['namespace']}/{v['name']}" for v in decided["victims"]),
        "units": units,
        "numPDBViolations": decided["numPDBViolations"],
        "message": decided["message"],
        "unitsConsidered": decided["rationale"]["unitsConsidered"],
        "unitsReprieved": decided["rationale"]["unitsReprieved"],
    }


STORY = {
    "status": "Preempt",
    "nominations": STORY_NOMINATIONS,
    "victims": ["ml/notebook", "ml/train-b-0", "ml/train-b-1", "ml/train-b-2"],
    "units": STORY_UNITS,
    "numPDBViolations": 0,
    "message": (
        "preempt 4 pod(s) in 2 unit(s) on 4 node(s) to place 4 of 4 pending pod(s) on 4 "
        "node(s) (minCount 4; 0 PDB violation(s))"
    ),
    "unitsConsidered": 3,
    "unitsReprieved": 1,
}


def test_the_planner_takes_train_b_whole_and_the_notebook_and_keeps_train_c(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert bundled_or_file("gang") == GANG
    assert story(plan_pod_group(capsys, GANG)) == STORY


def test_the_story_holds_with_the_fresh_uids_dev_gives(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fresh = tmp_path / "gang.json"
    fresh.write_text(json.dumps(with_fresh_uids(read_document(GANG))))
    assert story(plan_pod_group(capsys, fresh)) == STORY


def _victim_order(decided: dict[str, Any]) -> list[str]:
    return [f"{v['namespace']}/{v['name']}" for v in decided["victims"]]


def test_the_victims_come_in_one_order_on_every_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """train-b's three pods tie on everything but their uids (upstream's last tie-break):
    each load's fresh uids keep the file's order, so every dev run lists them alike."""
    on_the_file = _victim_order(plan_pod_group(capsys, GANG))
    assert on_the_file == ["ml/train-b-1", "ml/train-b-2", "ml/train-b-0", "ml/notebook"]
    for load in range(4):
        fresh = tmp_path / f"gang-{load}.json"
        fresh.write_text(json.dumps(with_fresh_uids(read_document(GANG))))
        assert _victim_order(plan_pod_group(capsys, fresh)) == on_the_file


def _cluster(**options: Any) -> SimulatedCluster:
    return SimulatedCluster(max_grace_seconds=0.3, start_delay=0.05, interval=0.02, **options)


def _ml(cluster: SimulatedCluster, name: str) -> dict[str, Any]:
    found = cluster.emulator.pod(f"ml/{name}")
    assert found is not None, name
    return found


def _scheduled_message(pod: dict[str, Any]) -> str:
    message: str = next(
        c["message"] for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"
    )
    return message


def test_without_a_controller_the_training_gang_stays_pending_whole() -> None:
    with _cluster() as cluster:
        cluster.load(GANG)
        assert cluster.wait_until_quiet(timeout=10)
        members = {name: _ml(cluster, name) for name in TRAIN_A}
    assert [obj["spec"].get("nodeName") for obj in members.values()] == [None] * 4
    # train-a-0 alone would fit on node-4: the gang of four cannot.
    assert {name: _scheduled_message(obj) for name, obj in members.items()} == {
        "train-a-0": "minCount (4) cannot be satisfied: 1 scheduled, 2 remaining",
        "train-a-1": "0/5 nodes are available: 5 Insufficient cpu.",
        "train-a-2": "minCount (4) cannot be satisfied: 1 scheduled, 2 remaining",
        "train-a-3": "minCount (4) cannot be satisfied: 1 scheduled, 2 remaining",
    }


def test_in_upstream_mode_the_scheduler_takes_the_same_victims_and_binds_the_gang() -> None:
    with _cluster(upstream_preemption=True) as cluster:
        cluster.load(GANG)
        assert cluster.wait_until_quiet(timeout=15)
        names = (
            "train-b-0",
            "train-b-1",
            "train-b-2",
            "notebook",
            *(f"train-c-{i}" for i in range(4)),
        )
        left = sorted(name for name in names if cluster.emulator.pod(f"ml/{name}") is not None)
        placed = {f"ml/{name}": _ml(cluster, name)["spec"].get("nodeName") for name in TRAIN_A}
        preempted = sorted(e["involvedObject"]["name"] for e in cluster.store.objects(EVENTS))
    assert left == [f"train-c-{i}" for i in range(4)]
    assert preempted == ["notebook", "train-b-0", "train-b-1", "train-b-2"]
    assert placed == STORY_NOMINATIONS


def test_dev_loads_the_gang_scenario(tmp_path: Path) -> None:
    seen: list[str] = []
    file_uids = {item["metadata"]["uid"] for item in read_document(GANG)["items"]}
    with dev_running(tmp_path, "--no-worker", "--scenario", "gang") as process:
        assert process.stderr is not None
        for line in process.stderr:
            seen.append(line)
            if line.startswith("running; Ctrl-C stops"):
                break
        kubeconfig = next(line.split()[1] for line in seen if line.startswith("kubeconfig"))
        api = config.new_client_from_config(config_file=kubeconfig)
        with api:
            pods = client.CoreV1Api(api).list_namespaced_pod("ml").items
            groups = client.CustomObjectsApi(api).list_namespaced_custom_object(
                "scheduling.k8s.io", "v1beta1", "ml", "podgroups"
            )["items"]
    assert process.returncode == 0
    assert any(
        line.startswith("cluster       simulated, 22 objects from gang.json") for line in seen
    )
    assert sorted(g["metadata"]["name"] for g in groups) == ["train-a", "train-b", "train-c"]
    assert len(pods) == 12
    assert not {p.metadata.uid for p in pods} & file_uids
    # Ages read from the load, the trainers (the newest objects) created as it began.
    created = {p.metadata.name: p.metadata.creation_timestamp for p in pods}
    assert all(datetime.now(UTC) - created[name] < timedelta(minutes=2) for name in TRAIN_A)
    assert created["train-a-0"] - created["train-b-0"] == timedelta(days=1, hours=3)
    trainers = {p.metadata.name: p for p in pods if p.metadata.name in TRAIN_A}
    assert [trainers[name].spec.node_name for name in TRAIN_A] == [None] * 4
    assert all(
        any(
            c.type == "PodScheduled" and c.reason == "Unschedulable"
            for c in p.status.conditions or ()
        )
        for p in trainers.values()
    )


def test_dev_once_reports_the_gangs_group_preemption(tmp_path: Path) -> None:
    report = dev_once(tmp_path, "--scenario", "gang")
    [train_a] = report["preemptions"]
    assert train_a["workflowId"].startswith("group-preemption-ml-train-a-")
    assert (train_a["preemptor"], train_a["podGroup"]) == ("ml/train-a", "ml/train-a")
    assert train_a["outcome"] == "completed"
    assert sorted(train_a["victims"]) == STORY["victims"]
    assert train_a["members"] == STORY_NOMINATIONS
    assert (train_a["bound"], train_a["minCount"]) == (4, 4)
    assert (
        "preemption started   pod group ml/train-a  (group-preemption-ml-train-a-"
        in (report["stderr"])
    )
    assert (
        "query=WorkflowType%3D%22Preemption%22%20OR%20WorkflowType%3D%22GroupPreemption%22"
        in (report["stderr"])
    )
    [row] = [json.loads(line) for line in preemptctl(tmp_path, "history", "--json").splitlines()]
    assert (row["preemptionId"], row["podGroup"]) == (train_a["workflowId"], "ml/train-a")


def _ml_pods(kubeconfig: str) -> dict[str, dict[str, Any]]:
    """The ml namespace's pods by name, listed from the API server the kubeconfig names."""
    document = yaml.safe_load(Path(kubeconfig).read_text())
    server = document["clusters"][0]["cluster"]["server"]
    token = document["users"][0]["user"]["token"]
    request = urllib.request.Request(
        f"{server}/api/v1/namespaces/ml/pods", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        items: list[dict[str, Any]] = json.load(answer)["items"]
    return {item["metadata"]["name"]: item for item in items}


def test_while_dev_runs_the_trainers_are_bound_where_they_were_nominated(tmp_path: Path) -> None:
    seen: list[str] = []
    with dev_running(tmp_path, "--scenario", "gang") as process:
        assert process.stderr is not None
        for line in process.stderr:
            seen.append(line)
            if line.startswith("preemption completed  pod group ml/train-a"):
                break
        kubeconfig = next(line.split()[1] for line in seen if line.startswith("kubeconfig"))
        pods = _ml_pods(kubeconfig)
    placed = {f"ml/{name}": pods[name]["spec"].get("nodeName") for name in TRAIN_A}
    assert placed == STORY_NOMINATIONS
    assert sorted(name for name in pods if name.startswith("train-c")) == [
        f"train-c-{i}" for i in range(4)
    ]
    assert len([line for line in seen if line.startswith("preemption started")]) == 1


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_every_bundled_scenarios_pods_are_read_by_the_official_client(name: str) -> None:
    pods = [i for i in read_document(BUNDLED[name])["items"] if i["kind"] == "Pod"]
    read = [V1Pod.from_dict(item) for item in pods]
    assert len(read) == len(pods) > 0

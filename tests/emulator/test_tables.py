"""The rows the emulator prints for `kubectl get`, cell by cell, as a real API server's
printers (kubernetes pkg/printers/internalversion) render them, at a fixed moment.

Scenarios:
- ages read as apimachinery's HumanDuration reads them, at each of its steps (whole seconds,
  truncated);
- a pod's READY counts its ready, running containers (a Ready condition alone counts none),
  and a sidecar (an init container that always restarts) counts as one of its containers;
- STATUS: the phase; a container waiting with a reason (CrashLoopBackOff) or terminated
  (Completed, or the exit code); an init container not done (Init:0/2) or failing
  (Init:Error); scheduling gates; a pod being deleted is Terminating unless it has finished;
- RESTARTS adds every container's restarts and says how long ago the last one ended;
- the wide cells: the first pod IP, the node, the nominated node, the readiness gates;
- an Event (core/v1) shows LAST SEEN, TYPE, REASON, OBJECT, MESSAGE, with SUBOBJECT,
  SOURCE, FIRST SEEN, COUNT and NAME for -o wide; a singleton counts 1; a series shows its
  own count and last time;
- an events.k8s.io/v1 Event prints as the core Event it converts to;
- a node's roles come from its node-role labels; a PDB shows its budget; other kinds show
  NAME and AGE.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from preemptctl.emulator.resources import EVENTS, EVENTS_V1, PDBS, STORAGE_CLASSES
from preemptctl.emulator.tables import (
    as_table,
    event_cells,
    human_duration,
    node_cells,
    pod_cells,
)

NOW = datetime(2026, 11, 26, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (-5, "<invalid>"),
        (-1, "0s"),
        (0, "0s"),
        (119, "119s"),
        (120, "2m"),
        (185, "3m5s"),
        (600, "10m"),
        (179 * 60, "179m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 25 * 60, "3h25m"),
        (8 * 3600 + 59, "8h"),
        (47 * 3600, "47h"),
        (2 * 86400, "2d"),
        (5 * 86400 + 3 * 3600, "5d3h"),
        (30 * 86400, "30d"),
        (2 * 365 * 86400 + 10 * 86400, "2y10d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_ages_read_as_human_duration(seconds: int, shown: str) -> None:
    assert human_duration(seconds) == shown


def running(name: str = "main", *, ready: bool = True, restarts: int = 0) -> dict[str, Any]:
    return {
        "name": name,
        "ready": ready,
        "started": True,
        "restartCount": restarts,
        "state": {"running": {"startedAt": "2026-11-26T11:00:00Z"}},
    }


def a_pod(
    *,
    containers: int = 1,
    statuses: list[dict[str, Any]] | None = None,
    phase: str = "Running",
    **status: Any,
) -> dict[str, Any]:
    return {
        "metadata": {"name": "web", "creationTimestamp": "2026-11-26T11:58:00Z"},
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": f"c{i}"} for i in range(containers)],
        },
        "status": {"phase": phase, "containerStatuses": statuses or [], **status},
    }


def test_ready_counts_ready_running_containers() -> None:
    pod = a_pod(containers=2, statuses=[running("c0"), running("c1", ready=False)])
    assert pod_cells(pod, NOW)[:5] == ["web", "1/2", "Running", "0", "2m"]


def test_a_ready_condition_without_container_statuses_counts_no_container() -> None:
    pod = a_pod(conditions=[{"type": "Ready", "status": "True"}])
    assert pod_cells(pod, NOW)[1:3] == ["0/1", "Running"]


def test_a_sidecar_counts_as_a_container() -> None:
    pod = a_pod(statuses=[running("c0")])
    pod["spec"]["initContainers"] = [{"name": "proxy", "restartPolicy": "Always"}]
    pod["status"]["initContainerStatuses"] = [running("proxy")]
    assert pod_cells(pod, NOW)[1] == "2/2"


def test_a_waiting_container_names_its_reason() -> None:
    waiting = {"name": "c0", "ready": False, "restartCount": 4}
    waiting["state"] = {"waiting": {"reason": "CrashLoopBackOff"}}
    waiting["lastState"] = {"terminated": {"exitCode": 1, "finishedAt": "2026-11-26T11:57:30Z"}}
    assert pod_cells(a_pod(statuses=[waiting]), NOW)[1:4] == [
        "0/1",
        "CrashLoopBackOff",
        "4 (2m30s ago)",
    ]


@pytest.mark.parametrize(
    ("terminated", "shown"),
    [
        ({"exitCode": 0, "reason": "Completed"}, "Completed"),
        ({"exitCode": 137}, "ExitCode:137"),
        ({"exitCode": 0, "signal": 9}, "Signal:9"),
    ],
)
def test_a_terminated_container_names_how_it_ended(terminated: dict[str, Any], shown: str) -> None:
    ended = {"name": "c0", "ready": False, "state": {"terminated": terminated}}
    assert pod_cells(a_pod(statuses=[ended], phase="Succeeded"), NOW)[2] == shown


def test_an_init_container_not_done_shows_the_init_step() -> None:
    pod = a_pod(phase="Pending")
    pod["spec"]["initContainers"] = [{"name": "a"}, {"name": "b"}]
    pod["status"]["initContainerStatuses"] = [
        {"name": "a", "state": {"waiting": {"reason": "PodInitializing"}}},
        {"name": "b", "state": {"waiting": {}}},
    ]
    assert pod_cells(pod, NOW)[1:3] == ["0/1", "Init:0/2"]


def test_a_failing_init_container_shows_its_reason() -> None:
    pod = a_pod(phase="Pending")
    pod["spec"]["initContainers"] = [{"name": "a"}]
    pod["status"]["initContainerStatuses"] = [
        {"name": "a", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}
    ]
    assert pod_cells(pod, NOW)[2] == "Init:Error"


def test_a_gated_pod_says_scheduling_gated() -> None:
    pod = a_pod(phase="Pending")
    pod["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}
    ]
    assert pod_cells(pod, NOW)[2] == "SchedulingGated"


def test_a_pod_being_deleted_is_terminating_until_it_has_finished() -> None:
    pod = a_pod(statuses=[running()])
    pod["metadata"]["deletionTimestamp"] = "2026-11-26T11:59:50Z"
    assert pod_cells(pod, NOW)[2] == "Terminating"
    pod["status"]["phase"] = "Succeeded"
    assert pod_cells(pod, NOW)[2] == "Succeeded"


def test_the_wide_cells_name_ip_node_nomination_and_gates() -> None:
    pod = a_pod(
        statuses=[running()],
        podIPs=[{"ip": "10.0.0.7"}, {"ip": "fd00::7"}],
        nominatedNodeName="n2",
        conditions=[{"type": "example.com/lb", "status": "True"}],
    )
    pod["spec"]["readinessGates"] = [
        {"conditionType": "example.com/lb"},
        {"conditionType": "example.com/dns"},
    ]
    assert pod_cells(pod, NOW)[5:] == ["10.0.0.7", "n1", "n2", "1/2"]
    bare = a_pod(phase="Pending")
    del bare["spec"]["nodeName"]
    assert pod_cells(bare, NOW)[5:] == ["<none>", "<none>", "<none>", "<none>"]


def an_event(**fields: Any) -> dict[str, Any]:
    return {
        "kind": "Event",
        "metadata": {"name": "web.1", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": "web", "fieldPath": "spec.containers{c0}"},
        "reason": "Preempted",
        "type": "Normal",
        "message": "Preempted by pod u1 on node n1 ",
        "source": {"component": "default-scheduler"},
        "firstTimestamp": "2026-11-26T11:50:00Z",
        "lastTimestamp": "2026-11-26T11:59:00Z",
        "count": 3,
        **fields,
    }


def test_an_event_shows_when_what_and_on_which_object() -> None:
    assert event_cells(an_event(), NOW) == [
        "60s",
        "Normal",
        "Preempted",
        "pod/web",
        "spec.containers{c0}",
        "default-scheduler",
        "Preempted by pod u1 on node n1",
        "10m",
        3,
        "web.1",
    ]


def test_a_singleton_event_counts_one_and_a_series_shows_its_own_count() -> None:
    single = an_event(count=0, lastTimestamp=None, firstTimestamp=None)
    single["eventTime"] = "2026-11-26T11:59:30.123456Z"
    assert [event_cells(single, NOW)[i] for i in (0, 7, 8)] == ["29s", "29s", 1]
    series = an_event(series={"count": 7, "lastObservedTime": "2026-11-26T11:59:58.5Z"})
    assert [event_cells(series, NOW)[i] for i in (0, 8)] == ["1s", 7]


def test_the_source_names_the_reporting_instance() -> None:
    event = an_event(source={}, reportingComponent="preemptctl", reportingInstance="w-1")
    assert event_cells(event, NOW)[5] == "preemptctl, w-1"


def test_an_events_k8s_io_event_prints_as_the_core_event_it_converts_to() -> None:
    event = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "web.2", "namespace": "default"},
        "eventTime": "2026-11-24T07:50:00.123456Z",
        "reportingController": "preemptctl.io/controller",
        "reportingInstance": "worker-1",
        "reason": "Preempting",
        "type": "Normal",
        "note": "2 pod(s) on n1",
        "regarding": {"kind": "Pod", "namespace": "default", "name": "web"},
    }
    row = as_table(EVENTS_V1, event)["rows"][0]["cells"]
    assert row[1:7] == [
        "Normal",
        "Preempting",
        "pod/web",
        "",
        "preemptctl.io/controller, worker-1",
        "2 pod(s) on n1",
    ]
    assert row[0] == row[7] and row[8:] == [1, "web.2"]
    names = [c["name"] for c in as_table(EVENTS, an_event())["columnDefinitions"]]
    shown = [
        c["name"] for c in as_table(EVENTS, an_event())["columnDefinitions"] if c["priority"] == 0
    ]
    assert shown == ["Last Seen", "Type", "Reason", "Object", "Message"]
    assert len(names) == 10


def test_node_roles_come_from_its_labels() -> None:
    node = {
        "metadata": {
            "name": "cp-1",
            "creationTimestamp": "2026-11-24T12:00:00Z",
            "labels": {
                "node-role.kubernetes.io/control-plane": "",
                "node-role.kubernetes.io/": "",
                "kubernetes.io/role": "master",
            },
        },
        "spec": {"unschedulable": True},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "nodeInfo": {"kubeletVersion": "v1.34.0"},
        },
    }
    assert node_cells(node, NOW) == [
        "cp-1",
        "Ready,SchedulingDisabled",
        "control-plane,master",
        "2d",
        "v1.34.0",
    ]


def test_a_pdb_shows_its_budget_and_other_kinds_their_name_and_age() -> None:
    pdb = {
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "etl", "resourceVersion": "5"},
        "spec": {"minAvailable": 1},
        "status": {"disruptionsAllowed": 1},
    }
    assert as_table(PDBS, pdb)["rows"][0]["cells"] == ["etl", "1", "N/A", 1, "<unknown>"]
    storage = {"kind": "StorageClass", "metadata": {"name": "fast", "resourceVersion": "6"}}
    assert as_table(STORAGE_CLASSES, storage)["rows"][0]["cells"] == ["fast", "<unknown>"]

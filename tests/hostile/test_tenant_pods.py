"""Pods a tenant creates neither steer a preemption nor turn its writes elsewhere (issue 20,
findings 1 and 12).

Scenario: one acting `preemptctl worker`, talking to the API through a wire log (every
request line it sends, whether the emulator can route it or not). Two zones alike, each two
2-CPU nodes full with one 2-CPU pod (priority 1 on node 1, 2 on node 2) and one pending
2-CPU preemptor kept to its zone: in zone `hostile` a tenant's Failed pod is bound to node 1
with two containers each asking `ephemeral-storage: 5E` (each value valid for the API
server, their sum beyond int64); zone `calm` has none. Two more nodes each hold one pod a
tenant named `..` and `.` (names no API server accepts, but a broken admission path or an
older store may hold), each the only victim for a preemptor kept to its node.

Judged from outside the worker (the emulator's request log, the wire log, the ledger):
- with the hostile pod present, the preemptor in its zone is decided on the node and with
  the victims its twin in the calm zone got without it (node 1, its priority-1 pod), in the
  ledger's decision and in the DELETEs the API server carried out;
- no DELETE the worker sends has a path other than a pod's (`.../pods/NAME` with NAME a
  DNS-1123 name): a pod named `..` never becomes `DELETE /api/v1/namespaces/tenant/`
  (urllib3 removes dot segments), nor `.` a DELETE of the whole collection;
- no other request it sends about a namespaced object (a read included) leaves that
  object's path: `GET .../pods/..` is not sent as `GET /api/v1/namespaces/tenant/` (the
  namespace), nor `GET .../pods/.` as a list of the namespace's pods;
- the ledger records no victim fate the cluster contradicts: no victim is said to be
  already gone, or replaced by another pod, while the API server still holds it, same UID.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from preemptctl.emulator.resources import PODS
from tests.support.emulator import as_list, pod
from tests.support.hostile_rig import hostile_rig
from tests.support.temporal_server import PersistentTemporal
from tests.support.tenant_objects import victim, zoned_node, zoned_preemptor
from tests.support.wire_log import RequestLine

ZONES = ("calm", "hostile")
DOT_NAMES = ("..", ".")
SETTLE_SECONDS = 20.0
# A preemptor that never binds (its victim cannot be deleted) ends its run after this.
SCHEDULED_WAIT_SECONDS = "4"
_DNS1123 = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
POD_PATH = re.compile(rf"/api/v1/namespaces/{_DNS1123}/pods/{_DNS1123}")
POD_WRITE_PATH = re.compile(rf"{POD_PATH.pattern}(/status|/eviction)?")
NAMESPACED = "/api/v1/namespaces/"
EVENT_PATH = re.compile(
    rf"(/api/v1|/apis/events\.k8s\.io/v1)/namespaces/{_DNS1123}/events(/{_DNS1123})?"
)


def overflowing_failed_pod(node_name: str) -> dict[str, object]:
    """A tenant's pod the kubelet failed: bound, two containers of 5E ephemeral-storage."""
    obj = pod("hostile", "tenant", node_name=node_name, phase="Failed", priority=0)
    obj["spec"]["containers"] = [
        {"name": name, "image": "busybox", "resources": {"requests": {"ephemeral-storage": "5E"}}}
        for name in ("a", "b")
    ]
    return obj


def scenario() -> dict[str, object]:
    objects: list[dict[str, object]] = []
    for zone in ZONES:
        objects += [zoned_node(f"{zone}-1", zone), zoned_node(f"{zone}-2", zone)]
        objects += [
            victim(f"low-{zone}-1", f"{zone}-1", priority=1),
            victim(f"low-{zone}-2", f"{zone}-2", priority=2),
            zoned_preemptor(f"urgent-{zone}", zone),
        ]
    objects.append(overflowing_failed_pod("hostile-1"))
    for index, name in enumerate(DOT_NAMES):
        zone = f"dots-{index}"
        objects.append(zoned_node(zone, zone))
        objects.append(victim(name, zone, namespace="tenant"))
        objects.append(zoned_preemptor(f"urgent-{zone}", zone, namespace="tenant"))
    return as_list(*objects)


@dataclass
class Outcome:
    decisions: dict[str, tuple[str | None, list[str]]]  # preemptor -> (node, victims)
    deleted: dict[str, list[str]]  # preemptor zone -> pods the API server deleted there
    wire: list[RequestLine]
    ended: set[str]  # preemptors whose preemption reached an end in the ledger
    contradicted: list[str]  # ledger fates of victims the API server still holds


TERMINAL = frozenset(
    {"completed", "failed", "preemption_aborted", "dry_run", "no_candidate", "ineligible"}
)
# Fates that say the victim is no longer there as decided.
GONE = frozenset({"victim_already_gone", "victim_replaced"})


@pytest.fixture(scope="module")
def outcome(
    persistent_temporal: PersistentTemporal, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Outcome]:
    work = tmp_path_factory.mktemp("tenant-pods")
    with hostile_rig(
        persistent_temporal,
        work,
        scenario(),
        wire_log=True,
        env={"PREEMPT_SCHEDULED_WAIT_SECONDS": SCHEDULED_WAIT_SECONDS},
    ) as rig:
        preemptors = {f"urgent-{zone}" for zone in ZONES} | {
            f"urgent-dots-{index}" for index in range(len(DOT_NAMES))
        }

        def ended() -> set[str]:
            return {
                row["preemptor_name"]
                for row in rig.ledger_rows()
                if row["kind"] in TERMINAL and row["preemptor_name"] in preemptors
            }

        rig.wait_bounded(lambda: ended() >= preemptors, SETTLE_SECONDS)
        decisions: dict[str, tuple[str | None, list[str]]] = {}
        for row in rig.ledger_rows():
            name = row["preemptor_name"]
            if row["kind"] == "decision_made":
                decisions[name] = (row["node"], decisions.get(name, (None, []))[1])
            elif row["kind"] == "victim_chosen":
                node, chosen = decisions.get(name, (None, []))
                decisions[name] = (node, [*chosen, str(row["victim_name"])])
        deleted: dict[str, list[str]] = {zone: [] for zone in ZONES}
        for request in rig.requests:
            if request.verb == "delete" and request.resource == "pods" and request.code < 300:
                for zone in ZONES:
                    if request.name.startswith(f"low-{zone}-"):
                        deleted[zone].append(request.name)
        live = {p["metadata"]["uid"]: p for p in rig.cluster.store.objects(PODS)}
        contradicted = [
            f"{row['kind']}: {row['victim_namespace']}/{row['victim_name']} uid "
            f"{row['victim_uid']}, still held by the API server"
            for row in rig.ledger_rows()
            if row["kind"] in GONE and row["victim_uid"] in live
        ]
        assert rig.wire is not None
        yield Outcome(decisions, deleted, rig.wire.lines(), ended(), contradicted)


def calm_name(name: str) -> str:
    """A hostile-zone object's name as its twin in the calm zone has it."""
    return name.replace("hostile", "calm")


def as_calm(decision: tuple[str | None, list[str]]) -> tuple[str | None, list[str]]:
    """A hostile-zone decision written with the calm zone's names."""
    node, victims = decision
    return (calm_name(node) if node else None, [calm_name(v) for v in victims])


def test_without_the_hostile_pod_the_calm_zone_preempts_node_1s_cheaper_pod(
    outcome: Outcome,
) -> None:
    assert outcome.decisions.get("urgent-calm") == ("calm-1", ["low-calm-1"])


def test_the_failed_overflowing_pod_changes_neither_node_nor_victims(outcome: Outcome) -> None:
    assert as_calm(outcome.decisions.get("urgent-hostile", (None, []))) == outcome.decisions.get(
        "urgent-calm"
    )


def test_the_api_server_deletes_the_same_victims_with_the_hostile_pod_present(
    outcome: Outcome,
) -> None:
    hostile = [calm_name(name) for name in outcome.deleted["hostile"]]
    assert (outcome.deleted["calm"], hostile) == (["low-calm-1"], ["low-calm-1"])


def test_the_worker_did_send_deletes(outcome: Outcome) -> None:
    """Without a DELETE on the wire the path checks below would prove nothing."""
    assert [line.path for line in outcome.wire if line.method == "DELETE"] != []


def test_no_delete_has_a_path_other_than_a_pods(outcome: Outcome) -> None:
    strays = [
        f"DELETE {line.path}"
        for line in outcome.wire
        if line.method == "DELETE" and not POD_PATH.fullmatch(line.path)
    ]
    assert strays == []


def test_no_request_about_an_object_leaves_its_path(outcome: Outcome) -> None:
    strays = [
        f"{line.method} {line.path}"
        for line in outcome.wire
        if line.path.startswith(NAMESPACED)
        and not (POD_WRITE_PATH.fullmatch(line.path) or EVENT_PATH.fullmatch(line.path))
    ]
    assert strays == [], "\n".join(strays)


def test_the_ledger_records_no_fate_the_cluster_contradicts(outcome: Outcome) -> None:
    assert outcome.contradicted == [], "\n".join(outcome.contradicted)

"""Bad objects of other tenants never fail a decision, nor steer it (issue 20, finding 1).

Scenarios:
- a Failed pod bound to node-1 whose two containers each request `ephemeral-storage: 5E`
  (each value valid, their sum beyond int64) changes nothing: the same decision as without
  it, read from a snapshot file and fed one object at a time as the cluster view feeds it;
- a running pod whose requests overflow is counted saturated at the largest int64 (as
  upstream's quantity arithmetic caps), not refused: its node stays a candidate for a
  preemptor that does not ask for that resource;
- such a pod below the preemptor's priority, on the node the preemptor needs, is no extra
  victim when the preemptor asks no ephemeral storage (issue 27, point 6): upstream's
  `fitsRequest` checks only what the preemptor requests, so the pod goes back beside it;
  alone, or with a pod of a `disruptionMode: all` group as the victim, for a pending pod
  group as for a pod, and for a single `5E` container (beyond 2^62, within int64) as for
  the saturated sum;
- a terminal pod (Succeeded or Failed) holds nothing, so even a malformed quantity in it is
  never read: it decodes with no request and its node is judged as if it were gone;
- except what the trigger and the critical-admission strategy read: a pod the kubelet
  refused for lack of room (Failed, `OutOf...`) keeps its requests, reason, scheduler and
  policy, and still holds nothing on its node; if its spec cannot be read, it is a
  preemptor the planner refuses, never a failed decision;
- a pod, node, PodGroup or namespace whose name the API server would refuse (`..`) is an
  input error, as a malformed quantity is: no write path is ever built from it.
"""

from __future__ import annotations

from typing import Any

import pytest

from preemptctl.preemption.decision import Verdict
from preemptctl.preemption.decode import decode_pod
from preemptctl.preemption.errors import PlannerInputError
from preemptctl.preemption.objects import Resources
from preemptctl.preemption.planner import plan, plan_group
from preemptctl.preemption.quantity import MAX_VALUE
from preemptctl.preemption.snapshot import ClusterSnapshot
from tests.preemption.builders import container, listing, node, pod, pod_group, victim_names

Json = dict[str, Any]

OVERFLOWING = [
    container(extra={"ephemeral-storage": "5E"}, name="a"),
    container(extra={"ephemeral-storage": "5E"}, name="b"),
]


def two_nodes() -> list[Json]:
    """node-1's victim is the cheaper one (lower priority): without interference the
    planner preempts on node-1."""
    return [
        node("node-1", cpu="2"),
        node("node-2", cpu="2"),
        pod("low-1", cpu="2", node="node-1", priority=1, start=0),
        pod("low-2", cpu="2", node="node-2", priority=2, start=0),
        pod("p", cpu="2", priority=10),
    ]


def hostile(phase: str) -> Json:
    return pod("hostile", node="node-1", containers=OVERFLOWING, phase=phase, priority=100)


def test_without_the_hostile_pod_node_1_is_chosen() -> None:
    decision = plan(ClusterSnapshot.from_list(listing(*two_nodes())), "default/p")
    assert (decision.verdict, decision.nominated_node, victim_names(decision)) == (
        Verdict.PREEMPT,
        "node-1",
        ["low-1"],
    )


def test_a_failed_pod_whose_requests_overflow_changes_no_decision() -> None:
    decision = plan(
        ClusterSnapshot.from_list(listing(*two_nodes(), hostile("Failed"))), "default/p"
    )
    assert (decision.verdict, decision.nominated_node, victim_names(decision)) == (
        Verdict.PREEMPT,
        "node-1",
        ["low-1"],
    )


def feed(snapshot: ClusterSnapshot, obj: Json) -> None:
    """What `kube.view` does with a watched pod: apply it, or leave out one it cannot read
    (and keep its node from being a candidate)."""
    try:
        snapshot.apply("Pod", obj)
    except PlannerInputError:
        snapshot.reject_pod(obj["metadata"]["uid"], obj["spec"].get("nodeName"))


def test_a_failed_overflowing_pod_fed_as_the_view_feeds_it_changes_no_decision() -> None:
    snapshot = ClusterSnapshot.from_list(listing(*two_nodes()))
    feed(snapshot, hostile("Failed"))
    decision = plan(snapshot, "default/p")
    assert (decision.nominated_node, victim_names(decision), snapshot.rejected) == (
        "node-1",
        ["low-1"],
        {},
    )


def test_a_running_pod_whose_requests_overflow_is_counted_saturated() -> None:
    running = decode_pod(hostile("Running"))
    assert running.requests == Resources(ephemeral_storage=MAX_VALUE)


def test_a_saturated_pod_keeps_its_node_a_candidate_for_other_resources() -> None:
    items = [*two_nodes(), hostile("Running")]
    items[2] = pod("low-1", cpu="2", node="node-1", priority=1, start=0)
    decision = plan(ClusterSnapshot.from_list(listing(*items)), "default/p")
    assert (decision.nominated_node, victim_names(decision)) == ("node-1", ["low-1"])


def tenant(containers: list[Json]) -> Json:
    """Another tenant's running pod on node-1, below the preemptor's priority, asking only
    for ephemeral storage."""
    return pod("tenant", node="node-1", containers=containers, priority=0, start=0)


ONE_5E = [container(extra={"ephemeral-storage": "5E"}, name="a")]


@pytest.mark.parametrize("containers", [OVERFLOWING, ONE_5E], ids=["saturated-sum", "one-5E"])
def test_a_lower_pod_asking_only_what_the_preemptor_does_not_is_no_victim(
    containers: list[Json],
) -> None:
    decision = plan(
        ClusterSnapshot.from_list(listing(*two_nodes(), tenant(containers))), "default/p"
    )
    assert (decision.verdict, decision.nominated_node, victim_names(decision)) == (
        Verdict.PREEMPT,
        "node-1",
        ["low-1"],
    )


def test_nor_beside_a_group_taken_whole() -> None:
    items = [*two_nodes(), tenant(OVERFLOWING), pod_group("gang", disruption="all", priority=1)]
    items[2] = pod("low-1", cpu="2", node="node-1", priority=1, start=0, group="gang")
    decision = plan(ClusterSnapshot.from_list(listing(*items)), "default/p")
    assert (decision.verdict, decision.nominated_node, victim_names(decision)) == (
        Verdict.PREEMPT,
        "node-1",
        ["low-1"],
    )


def test_nor_for_a_pending_pod_group() -> None:
    items = [
        node("node-1", cpu="2"),
        pod("low-1", cpu="2", node="node-1", priority=1, start=0),
        tenant(OVERFLOWING),
        pod_group("gang", priority=10, min_count=1),
        pod("member", cpu="2", priority=10, group="gang"),
    ]
    decision = plan_group(ClusterSnapshot.from_list(listing(*items)), "default/gang")
    assert (decision.verdict, [victim.name for victim in decision.victims]) == (
        Verdict.PREEMPT,
        ["low-1"],
    )


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_a_terminal_pod_holds_nothing_even_with_a_malformed_quantity(phase: str) -> None:
    done = pod("done", cpu="5x", node="node-1", phase=phase)
    assert decode_pod(done).requests == Resources()
    snapshot = ClusterSnapshot.from_list(listing(*two_nodes(), done))
    info = snapshot.node("node-1")
    assert info is not None
    assert (sorted(p.name for p in info.pods.values()), info.milli_cpu) == (["low-1"], 2000)


def refused(cpu: str) -> Json:
    """A critical pod the kubelet refused on node-1 (phase Failed, reason OutOfcpu)."""
    obj = pod("critical", cpu=cpu, node="node-1", phase="Failed", priority=2_000_001_000)
    obj["status"]["reason"] = "OutOfcpu"
    return obj


def test_a_pod_refused_admission_keeps_what_critical_admission_reads() -> None:
    decoded = decode_pod(refused("1"))
    assert (decoded.requests.milli_cpu, decoded.status_reason, decoded.is_critical()) == (
        1000,
        "OutOfcpu",
        True,
    )
    snapshot = ClusterSnapshot.from_list(listing(*two_nodes(), refused("1")))
    info = snapshot.node("node-1")
    assert info is not None
    assert (sorted(p.name for p in info.pods.values()), info.milli_cpu) == (["low-1"], 2000)


def test_a_pod_refused_admission_with_an_unreadable_spec_is_refused_as_a_preemptor() -> None:
    decoded = decode_pod(refused("5x"))
    assert (decoded.requests, decoded.status_reason) == (Resources(), "OutOfcpu")
    assert decoded.unsupported.startswith("its spec cannot be read: ")


@pytest.mark.parametrize(
    ("obj", "problem"),
    [
        (pod("..", cpu="1", node="node-1"), "pod name '..' is not valid"),
        (pod("web", namespace="Team_A", node="node-1"), "namespace 'Team_A' is not valid"),
        (node("a/b"), "node name 'a/b' is not valid"),
    ],
)
def test_a_name_the_api_server_would_refuse_is_an_input_error(obj: Json, problem: str) -> None:
    with pytest.raises(PlannerInputError, match=problem):
        ClusterSnapshot.from_list(listing(obj))

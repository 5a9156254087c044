"""The filter pass kept on the snapshot between preemptors of one request.

Scenarios:
- after every kind of change the view makes (a pod bound, finished or removed, a Node
  replaced, cordoned or tainted, a pod nominated and its nomination gone, a claim laid over
  and taken off), the next preemptor of the same request gets, node by node and in the
  same order, the statuses a pass over every node gives;
- a preemptor of another request, or one read after a node was added, is judged afresh.
"""

from __future__ import annotations

import random

from preemptctl.preemption.claims import Claim, ClaimBook
from preemptctl.preemption.decode import decode_node, decode_pod
from preemptctl.preemption.filters import Status
from preemptctl.preemption.find_nodes_that_fit import filter_nodes
from preemptctl.preemption.objects import Pod
from preemptctl.preemption.snapshot import ClusterSnapshot
from tests.preemption.builders import node, pod, snapshot, taint

NODES = 8


def shown(statuses: dict[str, Status]) -> list[tuple[str, str, tuple[str, ...], str]]:
    return [(name, s.code.value, s.reasons, s.plugin) for name, s in statuses.items()]


def judged_afresh(cluster: ClusterSnapshot, preemptor: Pod) -> dict[str, Status]:
    cluster.kept_filter_pass = None
    return filter_nodes(cluster, preemptor)


def pending(name: str, cpu: str, priority: int = 100) -> Pod:
    return decode_pod(pod(name, cpu=cpu, priority=priority))


def test_each_change_is_judged_again_as_a_pass_over_every_node_would() -> None:
    rng = random.Random(7)
    cluster = snapshot(
        *(node(f"n{i}", cpu=str(2 + i % 3)) for i in range(NODES)),
        *(pod(f"a{i}", node=f"n{i % NODES}", cpu="1", priority=i % 4) for i in range(20)),
    )
    first, second = pending("p1", "2"), pending("p2", "2", priority=7)
    filter_nodes(cluster, first)
    for step in range(200):
        choice = rng.randrange(7)
        name = f"n{rng.randrange(NODES)}"
        if choice == 0:
            cluster.upsert_pod(decode_pod(pod(f"b{step}", node=name, cpu="1")))
        elif choice == 1 and cluster.pods:
            cluster.remove_pod(rng.choice(sorted(cluster.pods)))
        elif choice == 2:
            taints = [taint("dedicated")] if rng.random() < 0.5 else []
            cluster.upsert_node(decode_node(node(name, cpu="3", taints=taints)))
        elif choice == 3:
            cordoned = rng.random() < 0.5
            cluster.upsert_node(decode_node(node(name, cpu="2", unschedulable=cordoned)))
        elif choice == 4:
            cluster.upsert_pod(decode_pod(pod(f"q{step % 3}", cpu="1", nominated=name)))
        elif choice == 5:
            cluster.upsert_pod(decode_pod(pod(f"c{step}", node=name, cpu="1", phase="Succeeded")))
        bound = [p.uid for p in cluster.pods.values() if p.node_name]
        claim = Claim("uid-default-p1", name, frozenset(rng.sample(bound, min(2, len(bound)))))
        with ClaimBook([claim]).applied(cluster, ""):
            preemptor = first if step % 2 else second
            kept = shown(filter_nodes(cluster, preemptor))
            assert kept == shown(judged_afresh(cluster, preemptor)), step
        kept = shown(filter_nodes(cluster, first))
        assert kept == shown(judged_afresh(cluster, first)), step


def test_another_request_or_a_new_node_is_judged_afresh() -> None:
    cluster = snapshot(node("n1", cpu="2"), pod("a", node="n1", cpu="1"))
    small, large = pending("small", "1"), pending("large", "2")
    assert [s.ok for s in filter_nodes(cluster, small).values()] == [True]
    assert [s.ok for s in filter_nodes(cluster, large).values()] == [False]
    cluster.upsert_node(decode_node(node("n2", cpu="4")))
    assert [s.ok for s in filter_nodes(cluster, large).values()] == [False, True]
    assert [s.ok for s in filter_nodes(cluster, small).values()] == [True, True]

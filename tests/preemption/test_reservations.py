"""The reservation book: in-flight preemptions counted by later decisions as if done.

Scenarios:
- a decision made with a reservation in place never takes the reserved victims;
- nor the capacity the reserved preemption freed: once every lower pod is claimed, the next
  preemptor finds no candidate;
- a preemptor's own reservation is ignored when it decides again;
- the overlay puts the snapshot back exactly as it was;
- a reservation lapses when the preemptor is bound and its victims are gone, or when the
  preemptor is gone; it holds while a victim is still there. (Claims older than the
  window are left out by the ledger's query: tests/ledger/test_claims.py.)
"""

from __future__ import annotations

import dataclasses

from preemptctl.preemption.decision import Verdict
from preemptctl.preemption.planner import plan
from preemptctl.preemption.reservations import Reservation, ReservationBook
from preemptctl.preemption.snapshot import ClusterSnapshot
from tests.preemption.builders import node, pod, snapshot, victim_names


def full_node() -> ClusterSnapshot:
    """node-1 (4 cpu) with four 1-cpu priority-100 pods b0..b3 (b0 the most important);
    three pending 2-cpu preemptors p1..p3."""
    return snapshot(
        node("node-1", cpu="4"),
        *(pod(f"b{i}", priority=100, cpu="1", node="node-1", start=i) for i in range(4)),
        *(pod(f"p{i}", priority=1000, cpu="2") for i in (1, 2, 3)),
    )


def reserve_first_decision(cluster: ClusterSnapshot, book: ReservationBook, key: str) -> list[str]:
    decision = plan(cluster, key)
    assert decision.status is Verdict.PREEMPT and decision.nominated_node == "node-1"
    preemptor = cluster.pod_by_key(key)
    assert preemptor is not None
    book.reserve(Reservation(preemptor.uid, "node-1", frozenset(v.uid for v in decision.victims)))
    return victim_names(decision)


def uid_of(cluster: ClusterSnapshot, key: str) -> str:
    found = cluster.pod_by_key(key)
    assert found is not None
    return found.uid


def test_a_later_decision_never_takes_reserved_victims() -> None:
    cluster, book = full_node(), ReservationBook()
    first = reserve_first_decision(cluster, book, "default/p1")
    with book.applied(cluster, deciding_for=uid_of(cluster, "default/p2")):
        second = victim_names(plan(cluster, "default/p2"))
    assert first == ["b2", "b3"]
    assert second == ["b0", "b1"]


def test_capacity_freed_for_reservations_is_not_claimed_twice() -> None:
    cluster, book = full_node(), ReservationBook()
    reserve_first_decision(cluster, book, "default/p1")
    with book.applied(cluster, deciding_for=uid_of(cluster, "default/p2")):
        decision = plan(cluster, "default/p2")
    book.reserve(
        Reservation(
            uid_of(cluster, "default/p2"),
            "node-1",
            frozenset(v.uid for v in decision.victims),
        )
    )
    with book.applied(cluster, deciding_for=uid_of(cluster, "default/p3")):
        third = plan(cluster, "default/p3")
    assert third.status is Verdict.UNSCHEDULABLE


def test_a_preemptors_own_reservation_is_ignored_when_it_decides_again() -> None:
    cluster, book = full_node(), ReservationBook()
    first = reserve_first_decision(cluster, book, "default/p1")
    with book.applied(cluster, deciding_for=uid_of(cluster, "default/p1")):
        again = victim_names(plan(cluster, "default/p1"))
    assert again == first


def test_overlay_puts_the_snapshot_back_exactly() -> None:
    cluster, book = full_node(), ReservationBook()
    reserve_first_decision(cluster, book, "default/p1")
    before = dict(cluster.pods)
    info = cluster.node("node-1")
    assert info is not None
    used_before = (info.milli_cpu, len(info.pods))
    with book.applied(cluster, deciding_for=""):
        assert len(info.pods) == 2
        assert cluster.nominated_pods("node-1")[0].name == "p1"
    assert cluster.pods == before
    assert all(cluster.pods[uid] is pod_ for uid, pod_ in before.items())
    assert (info.milli_cpu, len(info.pods)) == used_before
    assert cluster.nominated_pods("node-1") == []


def test_reservation_lapses_once_the_cluster_shows_its_effect() -> None:
    cluster, book = full_node(), ReservationBook()
    reserve_first_decision(cluster, book, "default/p1")
    p1 = cluster.pod_by_key("default/p1")
    assert p1 is not None
    cluster.upsert_pod(dataclasses.replace(p1, node_name="node-1"))
    cluster.remove_pod(uid_of(cluster, "default/b2"))
    assert book.prune(cluster) == []  # b3 is still there: the claim holds
    cluster.remove_pod(uid_of(cluster, "default/b3"))
    assert book.prune(cluster) == [p1.uid]
    assert len(book) == 0


def test_reservation_lapses_when_the_preemptor_is_gone() -> None:
    cluster, book = full_node(), ReservationBook()
    reserve_first_decision(cluster, book, "default/p1")
    reserve_first_decision(cluster, book, "default/p2")
    p1, p2 = uid_of(cluster, "default/p1"), uid_of(cluster, "default/p2")
    cluster.remove_pod(p1)
    assert book.prune(cluster) == [p1]
    assert book.holders() == [p2]

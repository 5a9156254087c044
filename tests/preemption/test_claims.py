"""The claim book: in-flight preemptions counted by later decisions as if done.

Scenarios:
- a decision made with a claim in place never takes the claimed victims;
- nor the capacity the claimed preemption freed: once every lower pod is claimed, the next
  preemptor finds no candidate;
- a preemptor's own claim is ignored when it decides again;
- the overlay puts the snapshot back exactly as it was;
- a claim is set aside once the view shows its effect (preemptor bound, victims gone); it
  holds while a victim is still there;
- a claim whose preemptor the view does not show still holds: the view may lag, and only
  the claim's run (told by the API server) ends it. (When a run ends its claim, see
  tests/ledger/test_claims.py.)
"""

from __future__ import annotations

import dataclasses

from preemptctl.preemption.claims import Claim, ClaimBook
from preemptctl.preemption.decision import Verdict
from preemptctl.preemption.planner import plan
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


def claim_first_decision(cluster: ClusterSnapshot, book: ClaimBook, key: str) -> list[str]:
    decision = plan(cluster, key)
    assert decision.verdict is Verdict.PREEMPT and decision.nominated_node == "node-1"
    preemptor = cluster.pod_by_key(key)
    assert preemptor is not None
    book.claim(Claim(preemptor.uid, "node-1", frozenset(v.uid for v in decision.victims)))
    return victim_names(decision)


def uid_of(cluster: ClusterSnapshot, key: str) -> str:
    found = cluster.pod_by_key(key)
    assert found is not None
    return found.uid


def test_a_later_decision_never_takes_claimed_victims() -> None:
    cluster, book = full_node(), ClaimBook()
    first = claim_first_decision(cluster, book, "default/p1")
    with book.applied(cluster, deciding_for=uid_of(cluster, "default/p2")):
        second = victim_names(plan(cluster, "default/p2"))
    assert first == ["b2", "b3"]
    assert second == ["b0", "b1"]


def test_capacity_freed_for_claims_is_not_claimed_twice() -> None:
    cluster, book = full_node(), ClaimBook()
    claim_first_decision(cluster, book, "default/p1")
    with book.applied(cluster, deciding_for=uid_of(cluster, "default/p2")):
        decision = plan(cluster, "default/p2")
    book.claim(
        Claim(
            uid_of(cluster, "default/p2"),
            "node-1",
            frozenset(v.uid for v in decision.victims),
        )
    )
    with book.applied(cluster, deciding_for=uid_of(cluster, "default/p3")):
        third = plan(cluster, "default/p3")
    assert third.verdict is Verdict.UNSCHEDULABLE


def test_a_preemptors_own_claim_is_ignored_when_it_decides_again() -> None:
    cluster, book = full_node(), ClaimBook()
    first = claim_first_decision(cluster, book, "default/p1")
    with book.applied(cluster, deciding_for=uid_of(cluster, "default/p1")):
        again = victim_names(plan(cluster, "default/p1"))
    assert again == first


def test_overlay_puts_the_snapshot_back_exactly() -> None:
    cluster, book = full_node(), ClaimBook()
    claim_first_decision(cluster, book, "default/p1")
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


def test_a_claim_is_set_aside_once_the_view_shows_its_effect() -> None:
    cluster, book = full_node(), ClaimBook()
    claim_first_decision(cluster, book, "default/p1")
    p1 = cluster.pod_by_key("default/p1")
    assert p1 is not None
    cluster.upsert_pod(dataclasses.replace(p1, node_name="node-1"))
    cluster.remove_pod(uid_of(cluster, "default/b2"))
    assert book.set_aside_fulfilled(cluster) == []  # b3 is still there: the claim holds
    cluster.remove_pod(uid_of(cluster, "default/b3"))
    assert book.set_aside_fulfilled(cluster) == [p1.uid]
    assert len(book) == 0


def test_a_claim_holds_while_the_view_does_not_show_its_preemptor() -> None:
    cluster, book = full_node(), ClaimBook()
    claimed = claim_first_decision(cluster, book, "default/p1")
    p1, p2 = uid_of(cluster, "default/p1"), uid_of(cluster, "default/p2")
    cluster.remove_pod(p1)
    assert book.set_aside_fulfilled(cluster) == []
    assert book.holders() == [p1]
    with book.applied(cluster, deciding_for=p2):
        names = {pod_.name for pod_ in cluster.pods.values()}
    assert not set(claimed) & names

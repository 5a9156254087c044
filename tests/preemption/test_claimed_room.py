"""Claims in the way: a decision that finds no candidate names the claims that held its room.

Scenarios:
- a pod that finds no candidate because running preemptions claimed the room on a node names
  that node and the pods the claims place there (`claimsInTheWay` in its rationale), and not
  a claimed node it would not fit on without the claims (more important pods fill it);
- a group that finds no candidate because a claim holds room it would be placed on names
  that node and the claim's pod; a group that could not be placed even without the claims
  (too large) names none.
"""

from __future__ import annotations

from preemptctl.preemption.claimed_room import CLAIMS_IN_THE_WAY
from preemptctl.preemption.claims import Claim, ClaimBook
from preemptctl.preemption.decision import Verdict
from preemptctl.preemption.planner import plan, plan_group
from preemptctl.preemption.snapshot import ClusterSnapshot
from tests.preemption.builders import node, pod, pod_group, snapshot


def claim_of(cluster: ClusterSnapshot, key: str) -> Claim:
    """The claim `key`'s own (unclaimed) decision would make."""
    decision = plan(cluster, key)
    assert decision.verdict is Verdict.PREEMPT and decision.nominated_node is not None
    preemptor = cluster.pod_by_key(key)
    assert preemptor is not None
    victims = frozenset(v.uid for v in decision.victims)
    return Claim(preemptor.uid, decision.nominated_node, victims, holder=key)


def test_a_pod_blocked_by_claims_names_the_nodes_where_they_hold_its_room() -> None:
    # node-1 (4 cpu) full of 1-cpu priority-100 pods, all claimed by p1 and p2 (2 cpu each):
    # p3 (2 cpu) would fit there but for them. node-2 holds db (priority 5000, 3 cpu) and
    # c0, claimed by q (1 cpu): p3 never fits beside db, so q's claim is not in its way.
    cluster = snapshot(
        node("node-1", cpu="4"),
        node("node-2", cpu="4"),
        *(pod(f"b{i}", priority=100, cpu="1", node="node-1", start=i) for i in range(4)),
        pod("db", priority=5000, cpu="3", node="node-2"),
        pod("c0", priority=100, cpu="1", node="node-2"),
        *(pod(f"p{i}", priority=1000, cpu="2") for i in (1, 2, 3)),
        pod("q", priority=1000, cpu="1"),
    )
    book = ClaimBook()
    for key in ("default/p1", "default/p2", "default/q"):
        with book.applied(cluster, ""):
            book.claim(claim_of(cluster, key))
    assert [c.node for c in book.all()] == ["node-1", "node-1", "node-2"]
    with book.applied(cluster, ""):
        decision = plan(cluster, "default/p3")
    assert decision.verdict is Verdict.UNSCHEDULABLE
    assert decision.to_json()["rationale"][CLAIMS_IN_THE_WAY] == {
        "node-1": ["default/p1", "default/p2"]
    }


def two_full_nodes(*pending: dict[str, object]) -> ClusterSnapshot:
    """node-a and node-b (4 cpu each), each full of four 1-cpu priority-100 pods; a pending
    3-cpu pod p (priority 1000); and `pending`."""
    return snapshot(
        node("node-a", cpu="4"),
        node("node-b", cpu="4"),
        *(pod(f"a{i}", priority=100, cpu="1", node="node-a", start=i) for i in range(4)),
        *(pod(f"b{i}", priority=100, cpu="1", node="node-b", start=i) for i in range(4)),
        pod("p", priority=1000, cpu="3"),
        *pending,
    )


def test_a_group_blocked_by_a_claim_names_it_unless_it_could_not_be_placed_anyway() -> None:
    # The gang g (two 3-cpu members, minCount 2) needs both nodes; p's claim holds one. The
    # gang h (three 3-cpu members, minCount 3) fits on two 4-cpu nodes neither way.
    cluster = two_full_nodes(
        pod_group("g", priority=1000, min_count=2),
        *(pod(f"g-{i}", priority=1000, cpu="3", group="g") for i in range(2)),
        pod_group("h", priority=1000, min_count=3),
        *(pod(f"h-{i}", priority=1000, cpu="3", group="h") for i in range(3)),
    )
    claim = claim_of(cluster, "default/p")
    with ClaimBook([claim]).applied(cluster, ""):
        g = plan_group(cluster, "default/g").to_json()
        h = plan_group(cluster, "default/h").to_json()
    assert (g["status"], h["status"]) == ("Unschedulable", "Unschedulable")
    assert g["rationale"][CLAIMS_IN_THE_WAY] == {claim.node: ["default/p"]}
    assert CLAIMS_IN_THE_WAY not in h["rationale"]

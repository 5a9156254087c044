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

Groups:
- a group's claim hides its victims on every node and places each member on its node: a
  later pod decision takes neither those victims nor that room;
- a pod's claim is respected by a later group decision;
- a claimed member keeps the claimed priority, though its group's is lower (a member's
  priority is otherwise its group's);
- a group's claim is set aside once every member it placed is bound and every victim gone;
- properties, on generated clusters mixing pod and group preemptors decided one after
  another, each with the claims before it: no victim is claimed twice, and with every claim
  laid over the cluster at once no node holds more than it has (no freed room claimed
  twice).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from preemptctl.preemption.claims import CLAIMED_PRIORITY, Claim, ClaimBook
from preemptctl.preemption.decision import Verdict
from preemptctl.preemption.group_decision import GroupDecision
from preemptctl.preemption.planner import plan, plan_group
from preemptctl.preemption.snapshot import ClusterSnapshot
from tests.preemption.builders import node, pod, pod_group, snapshot, victim_names


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


# -- groups -------------------------------------------------------------------------------------


def two_full_nodes() -> ClusterSnapshot:
    """node-a and node-b (4 cpu each), each full of four 1-cpu priority-100 pods a0..a3 and
    b0..b3; a pending gang g (priority 1000, minCount 2) of two 3-cpu members; a pending
    3-cpu pod p (priority 1000)."""
    return snapshot(
        node("node-a", cpu="4"),
        node("node-b", cpu="4"),
        *(pod(f"a{i}", priority=100, cpu="1", node="node-a", start=i) for i in range(4)),
        *(pod(f"b{i}", priority=100, cpu="1", node="node-b", start=i) for i in range(4)),
        pod_group("g", priority=1000, min_count=2),
        pod("g-0", priority=1000, cpu="3", group="g"),
        pod("g-1", priority=1000, cpu="3", group="g"),
        pod("p", priority=1000, cpu="3"),
    )


def group_claim(cluster: ClusterSnapshot, decision: GroupDecision) -> Claim:
    members = []
    for key, where in sorted(decision.nominations.items()):
        member = cluster.pod_by_key(key)
        assert member is not None
        members.append((member.uid, where))
    return Claim(
        decision.uid, "", frozenset(v.uid for v in decision.victims), members=tuple(members)
    )


def test_a_group_claim_holds_its_victims_and_its_members_room_on_every_node() -> None:
    cluster, book = two_full_nodes(), ClaimBook()
    decision = plan_group(cluster, "default/g")
    assert decision.verdict is Verdict.PREEMPT
    assert decision.nominations == {"default/g-0": "node-a", "default/g-1": "node-b"}
    book.claim(group_claim(cluster, decision))
    with book.applied(cluster, deciding_for=""):
        later = plan(cluster, "default/p")
    assert sorted(v.name for v in decision.victims) == ["a1", "a2", "a3", "b1", "b2", "b3"]
    assert later.verdict is Verdict.UNSCHEDULABLE  # a0 and b0 alone leave 3 cpu nowhere


def test_a_pod_claim_is_respected_by_a_later_group_decision() -> None:
    cluster, book = two_full_nodes(), ClaimBook()
    first = plan(cluster, "default/p")
    assert first.verdict is Verdict.PREEMPT and first.nominated_node is not None
    book.claim(
        Claim(
            uid_of(cluster, "default/p"),
            first.nominated_node,
            frozenset(v.uid for v in first.victims),
        )
    )
    with book.applied(cluster, deciding_for=""):
        group = plan_group(cluster, "default/g")
    assert group.verdict is Verdict.UNSCHEDULABLE
    assert group.victims == ()


def test_a_claimed_member_keeps_the_claimed_priority() -> None:
    cluster, book = two_full_nodes(), ClaimBook()
    book.claim(group_claim(cluster, plan_group(cluster, "default/g")))
    with book.applied(cluster, deciding_for=""):
        placed = {p.name: p for p in cluster.nominated_pods("node-a")}
    assert placed["g-0"].priority == CLAIMED_PRIORITY
    member = cluster.pod_by_key("default/g-0")
    assert member is not None and (member.priority, member.group) == (1000, "g")


def test_a_group_claim_is_set_aside_once_its_members_are_bound_and_victims_gone() -> None:
    cluster, book = two_full_nodes(), ClaimBook()
    decision = plan_group(cluster, "default/g")
    claim = group_claim(cluster, decision)
    book.claim(claim)
    for victim in decision.victims:
        cluster.remove_pod(victim.uid)
    g0 = cluster.pod_by_key("default/g-0")
    assert g0 is not None
    cluster.upsert_pod(dataclasses.replace(g0, node_name="node-a"))
    assert book.set_aside_fulfilled(cluster) == []  # g-1 is not bound yet
    g1 = cluster.pod_by_key("default/g-1")
    assert g1 is not None
    cluster.upsert_pod(dataclasses.replace(g1, node_name="node-b"))
    assert book.set_aside_fulfilled(cluster) == [claim.preemptor_uid]


# -- properties: pods and groups, decided one after another ----------------------------------


@st.composite
def mixed_clusters(draw: Any) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """2-4 nodes of 4 cpu full of 1-cpu pods of priority 10 or 20, some of them in a
    disruptionMode-all group spanning nodes; 1-4 preemptors, each a pending pod (1-3 cpu)
    or a pending gang of 2-3 members (1-2 cpu each), at priority 100, 200 or 300."""
    items: list[dict[str, Any]] = []
    nodes = draw(st.integers(2, 4))
    items.append(pod_group("whole", priority=20, disruption="all"))
    for n in range(nodes):
        items.append(node(f"n{n}", cpu="4"))
        for i in range(draw(st.integers(2, 4))):
            in_whole = draw(st.booleans())
            items.append(
                pod(
                    f"v{n}-{i}",
                    priority=draw(st.sampled_from([10, 20])),
                    cpu="1",
                    node=f"n{n}",
                    start=draw(st.integers(0, 50)),
                    group="whole" if in_whole else None,
                )
            )
    preemptors: list[tuple[str, str]] = []
    for k in range(draw(st.integers(1, 4))):
        priority = draw(st.sampled_from([100, 200, 300]))
        if draw(st.booleans()):
            items.append(pod(f"p{k}", priority=priority, cpu=str(draw(st.integers(1, 3)))))
            preemptors.append(("pod", f"default/p{k}"))
        else:
            size = draw(st.integers(2, 3))
            items.append(pod_group(f"g{k}", priority=priority, min_count=size))
            items += [
                pod(f"g{k}-{m}", priority=priority, cpu=str(draw(st.integers(1, 2))), group=f"g{k}")
                for m in range(size)
            ]
            preemptors.append(("group", f"default/g{k}"))
    return items, preemptors


def decide_one_after_another(
    cluster: ClusterSnapshot, preemptors: list[tuple[str, str]]
) -> tuple[ClaimBook, list[frozenset[str]]]:
    book, victim_sets = ClaimBook(), []
    for kind, key in preemptors:
        with book.applied(cluster, deciding_for=""):
            if kind == "pod":
                decision = plan(cluster, key)
                claim = None
                if decision.verdict is Verdict.PREEMPT and decision.nominated_node:
                    claim = Claim(
                        decision.preemptor.uid,
                        decision.nominated_node,
                        frozenset(v.uid for v in decision.victims),
                    )
            else:
                group = plan_group(cluster, key)
                claim = group_claim(cluster, group) if group.verdict is Verdict.PREEMPT else None
        if claim is not None:
            book.claim(claim)
            victim_sets.append(claim.victim_uids)
    return book, victim_sets


@settings(max_examples=80, deadline=None)
@given(mixed_clusters())
def test_no_victim_is_claimed_twice(generated: Any) -> None:
    items, preemptors = generated
    _, victim_sets = decide_one_after_another(snapshot(*items), preemptors)
    every = [uid for victims in victim_sets for uid in victims]
    assert len(every) == len(set(every))


@settings(max_examples=80, deadline=None)
@given(mixed_clusters())
def test_no_freed_room_is_claimed_twice(generated: Any) -> None:
    items, preemptors = generated
    cluster = snapshot(*items)
    book, _ = decide_one_after_another(cluster, preemptors)
    gone = {uid for claim in book.all() for uid in claim.victim_uids}
    used = {info.name: 0 for info in cluster.nodes()}
    for pod_ in cluster.pods.values():
        if pod_.node_name and pod_.uid not in gone:
            used[pod_.node_name] += pod_.requests.milli_cpu
    for claim in book.all():
        for uid, where in claim.placed:
            used[where] += cluster.pods[uid].requests.milli_cpu
    assert all(cpu <= 4000 for cpu in used.values()), used

"""Nominated pods: pending pods the scheduler has already promised a node to.

Scenarios:
- a nominated pod of equal or higher priority counts as placed on its node: its requests
  and host ports are taken, in the filter pass and in the dry run;
- a lower-priority nominated pod does not count, and is listed in `nominatedPodsToClear`
  when the preemptor takes its node (most important first);
- nominations to other nodes are not cleared;
- the preemptor's own nomination never counts against it and is never cleared.
"""

from __future__ import annotations

from preemptctl.preemption.decision import Verdict
from tests.preemption.builders import decide, node, pod


def test_an_equal_priority_nomination_takes_its_capacity_in_the_filter_pass() -> None:
    decision = decide(
        node("n", cpu="2"),
        pod("promised", cpu="2", priority=10, nominated="n"),
        pod("p", cpu="1", priority=10),
        preemptor="p",
    )
    assert decision.verdict is Verdict.UNSCHEDULABLE
    assert decision.rationale.filtered == {"Insufficient cpu": 1}


def test_a_higher_priority_nomination_takes_its_host_ports() -> None:
    decision = decide(
        node("n"),
        pod("promised", priority=50, nominated="n", host_ports=[80]),
        pod("low", node="n", priority=1),
        pod("p", priority=10, host_ports=[80]),
        preemptor="p",
    )
    assert decision.verdict is Verdict.UNSCHEDULABLE
    assert decision.rationale.evaluated[0].reasons == (
        "node(s) didn't have free ports for the requested pod ports",
    )


def test_a_lower_priority_nomination_does_not_count() -> None:
    decision = decide(
        node("n", cpu="2"),
        pod("promised", cpu="2", priority=5, nominated="n"),
        pod("p", cpu="2", priority=10),
        preemptor="p",
    )
    assert decision.verdict is Verdict.FITS_WITHOUT_PREEMPTION


def test_a_higher_priority_nomination_makes_the_dry_run_take_more_victims() -> None:
    items = [
        node("n", cpu="4"),
        pod("a", cpu="1", node="n", priority=5),
        pod("b", cpu="1", node="n", priority=1, start=1),
        pod("c", cpu="1", node="n", priority=1, start=2),
        pod("p", cpu="2", priority=10),
    ]
    without = decide(*items, preemptor="p")
    assert [v.name for v in without.victims] == ["c"]
    promised = pod("promised", cpu="1", priority=20, nominated="n")
    with_nomination = decide(*items, promised, preemptor="p")
    assert [v.name for v in with_nomination.victims] == ["b", "c"]


def test_lower_priority_nominations_on_the_chosen_node_are_to_be_cleared() -> None:
    decision = decide(
        node("n", cpu="2"),
        pod("low", cpu="2", node="n", priority=1),
        pod("later", cpu="1", priority=5, nominated="n", start=9),
        pod("earlier", cpu="1", priority=5, nominated="n", start=1),
        pod("more-important", cpu="1", priority=8, nominated="n"),
        pod("p", cpu="2", priority=10),
        preemptor="p",
    )
    assert decision.verdict is Verdict.PREEMPT
    assert [v.name for v in decision.victims] == ["low"]
    assert [ref.key for ref in decision.nominated_pods_to_clear] == [
        "default/more-important",
        "default/earlier",
        "default/later",
    ]


def test_nominations_to_other_nodes_are_not_cleared() -> None:
    decision = decide(
        node("n", cpu="2"),
        pod("low", cpu="2", node="n", priority=1),
        node("m", cpu="1"),
        pod("low-m", cpu="1", node="m", priority=1),
        pod("elsewhere", cpu="1", priority=5, nominated="m"),
        pod("p", cpu="2", priority=10),
        preemptor="p",
    )
    assert decision.nominated_node == "n"
    assert decision.nominated_pods_to_clear == ()


def test_the_preemptors_own_nomination_does_not_count_against_it() -> None:
    decision = decide(
        node("n", cpu="2"),
        pod("low", cpu="2", node="n", priority=1),
        pod("p", cpu="2", priority=10, nominated="n"),
        preemptor="p",
    )
    assert decision.verdict is Verdict.PREEMPT
    assert [v.name for v in decision.victims] == ["low"]
    assert decision.nominated_pods_to_clear == ()

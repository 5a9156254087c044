"""The Evaluator's sequence before the dry run: fit, eligibility, nodes where preemption helps.

Scenarios:
- a pod that fits somewhere needs no preemption (FitsWithoutPreemption);
- a bound pod and a terminating pod are not preemptors (Ineligible);
- PodEligibleToPreemptOthers: `preemptionPolicy: Never` is ineligible; a lower-priority pod
  terminating with DisruptionTarget/PreemptionByScheduler on the preemptor's nominated node
  makes it ineligible (it is waiting for its earlier preemption); it is eligible again once
  that nominated node is unresolvable for it; a terminating pod without that condition, a
  higher-priority one, or one on another node does not block it;
- nodes where preemption might help: unresolvable nodes are never dry-run;
- no node helps: Unschedulable with upstream's FitError message, the filter histogram then
  preemption's own (`0/N nodes are available: ...`), each sorted as upstream sorts them.
"""

from __future__ import annotations

from preemptctl.preemption.decision import Verdict
from tests.preemption.builders import decide, node, pod, taint

GPU_TAINT = taint("dedicated", "NoSchedule", "gpu")


def test_a_pod_that_fits_somewhere_needs_no_preemption() -> None:
    decision = decide(
        node("full", cpu="1"),
        node("free", cpu="2"),
        pod("a", cpu="1", node="full"),
        pod("p", cpu="2", priority=10),
        preemptor="p",
    )
    assert decision.verdict is Verdict.FITS_WITHOUT_PREEMPTION
    assert decision.victims == ()
    assert decision.nominated_node is None
    assert decision.rationale.fits == ["free"]


def test_a_bound_pod_is_not_a_preemptor() -> None:
    decision = decide(node("n"), pod("p", node="n", priority=10), preemptor="p")
    assert decision.verdict is Verdict.INELIGIBLE
    assert "already bound to node n" in decision.message


def test_a_terminating_pod_is_not_a_preemptor() -> None:
    decision = decide(
        node("n", cpu="1"),
        pod("a", cpu="1", node="n"),
        pod("p", cpu="1", priority=10, terminating=True),
        preemptor="p",
    )
    assert decision.verdict is Verdict.INELIGIBLE
    assert decision.message == "pod is terminating"


def busy_node(*, victim_terminating: bool = False, disrupted: bool = False) -> list[dict]:  # type: ignore[type-arg]
    return [
        node("n1", cpu="2"),
        pod(
            "low",
            cpu="2",
            node="n1",
            priority=1,
            terminating=victim_terminating,
            disrupted_by_scheduler=disrupted,
        ),
    ]


def test_preemption_policy_never_is_ineligible() -> None:
    decision = decide(
        *busy_node(), pod("p", cpu="2", priority=10, preemption_policy="Never"), preemptor="p"
    )
    assert decision.verdict is Verdict.INELIGIBLE
    assert decision.message == "not eligible due to preemptionPolicy=Never."


def test_a_victim_still_terminating_by_preemption_on_the_nominated_node_makes_it_wait() -> None:
    decision = decide(
        *busy_node(victim_terminating=True, disrupted=True),
        pod("p", cpu="2", priority=10, nominated="n1"),
        preemptor="p",
    )
    assert decision.verdict is Verdict.INELIGIBLE
    assert decision.message == "not eligible due to a terminating pod on the nominated node."


def test_it_is_eligible_again_once_the_nominated_node_is_unresolvable() -> None:
    decision = decide(
        node("n1", cpu="2", taints=[GPU_TAINT]),
        pod("low", cpu="2", node="n1", priority=1, terminating=True, disrupted_by_scheduler=True),
        node("n2", cpu="2"),
        pod("other", cpu="2", node="n2", priority=1),
        pod("p", cpu="2", priority=10, nominated="n1"),
        preemptor="p",
    )
    assert decision.verdict is Verdict.PREEMPT
    assert decision.nominated_node == "n2"


def test_a_terminating_pod_without_the_preemption_condition_does_not_block() -> None:
    decision = decide(
        *busy_node(victim_terminating=True, disrupted=False),
        pod("p", cpu="2", priority=10, nominated="n1"),
        preemptor="p",
    )
    assert decision.verdict is Verdict.PREEMPT


def test_a_disruption_condition_without_deletion_does_not_block() -> None:
    decision = decide(
        *busy_node(victim_terminating=False, disrupted=True),
        pod("p", cpu="2", priority=10, nominated="n1"),
        preemptor="p",
    )
    assert decision.verdict is Verdict.PREEMPT


def test_a_terminating_pod_of_higher_priority_does_not_block() -> None:
    decision = decide(
        node("n1", cpu="3"),
        pod("high", cpu="1", node="n1", priority=50, terminating=True, disrupted_by_scheduler=True),
        pod("low", cpu="2", node="n1", priority=1),
        pod("p", cpu="2", priority=10, nominated="n1"),
        preemptor="p",
    )
    assert decision.verdict is Verdict.PREEMPT
    assert [v.name for v in decision.victims] == ["low"]


def test_a_terminating_pod_on_another_node_does_not_block() -> None:
    decision = decide(
        *busy_node(),
        node("n2", cpu="2"),
        pod("gone", cpu="2", node="n2", priority=1, terminating=True, disrupted_by_scheduler=True),
        pod("p", cpu="2", priority=10, nominated="n1"),
        preemptor="p",
    )
    assert decision.verdict is Verdict.PREEMPT


def test_unresolvable_nodes_are_never_dry_run() -> None:
    decision = decide(
        node("cordoned", cpu="2", unschedulable=True),
        pod("c", cpu="2", node="cordoned", priority=1),
        node("tainted", cpu="2", taints=[GPU_TAINT]),
        pod("t", cpu="2", node="tainted", priority=1),
        node("small", cpu="1"),
        node("busy", cpu="2"),
        pod("b", cpu="2", node="busy", priority=1),
        pod("p", cpu="2", priority=10),
        preemptor="p",
    )
    assert decision.verdict is Verdict.PREEMPT
    assert decision.rationale.potential_nodes == 1
    assert [verdict.node for verdict in decision.rationale.evaluated] == ["busy"]
    assert decision.rationale.unresolvable == {
        "Insufficient cpu": ["small"],
        "node(s) had untolerated taint {dedicated: gpu}": ["tainted"],
        "node(s) were unschedulable": ["cordoned"],
    }


def test_when_no_node_could_be_helped_the_message_says_preemption_is_not_helpful() -> None:
    decision = decide(
        node("cordoned", cpu="2", unschedulable=True),
        node("tainted", cpu="2", taints=[GPU_TAINT]),
        pod("p", cpu="1", priority=10),
        preemptor="p",
    )
    assert decision.verdict is Verdict.UNSCHEDULABLE
    assert decision.message == (
        "0/2 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, "
        "1 node(s) were unschedulable. preemption: 0/2 nodes are available: "
        "2 Preemption is not helpful for scheduling."
    )


def test_when_the_dry_run_finds_no_candidate_the_message_names_each_nodes_reason() -> None:
    decision = decide(
        node("n1", cpu="2"),
        pod("peer-1", cpu="2", node="n1", priority=10),
        node("n2", cpu="2"),
        pod("peer-2", cpu="2", node="n2", priority=20),
        node("n3", cpu="2"),
        pod("high-3", cpu="1", node="n3", priority=50),
        pod("low-3", cpu="1", node="n3", priority=1),
        node("tainted", cpu="8", taints=[GPU_TAINT]),
        pod("p", cpu="2", priority=10),
        preemptor="p",
    )
    assert decision.verdict is Verdict.UNSCHEDULABLE
    # upstream sorts the "<count> <reason>" strings themselves
    assert decision.message == (
        "0/4 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, "
        "3 Insufficient cpu. preemption: 0/4 nodes are available: "
        "1 Insufficient cpu, 1 Preemption is not helpful for scheduling, "
        "2 No preemption victims found for incoming pod."
    )


def test_preemption_is_not_limited_to_the_preemptors_namespace() -> None:
    decision = decide(
        node("n", cpu="1"),
        pod("batch", namespace="jobs", cpu="1", node="n", priority=1),
        pod("p", namespace="web", cpu="1", priority=10),
        preemptor="web/p",
    )
    assert decision.verdict is Verdict.PREEMPT
    assert [v.key for v in decision.victims] == ["jobs/batch"]


def test_a_cluster_without_nodes_has_no_nodes_available() -> None:
    decision = decide(pod("p", cpu="1", priority=10), preemptor="p")
    assert decision.verdict is Verdict.UNSCHEDULABLE
    assert decision.message == "no nodes available to schedule pods"

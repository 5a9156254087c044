"""The kubelet's admission preemption for critical pods (`CriticalPodAdmissionHandler`).

A critical pod bound to a node that lacks resources for it has the kubelet evict the
cheapest set of other pods on that node: BestEffort first, then Burstable, then Guaranteed,
and within a tier the pods closest to what is still missing.

Scenarios:
- a pod that is not critical, or not bound, is Ineligible; a mirror (static) pod is critical
  at any priority;
- a critical pod that fits is admitted without preemption;
- tiers: BestEffort pods go before Burstable, Burstable before Guaranteed, and Guaranteed
  pods go only for what the other tiers together cannot free;
- distance: the pod whose requests come closest to covering what is missing is taken;
  equal distances go to the smaller request, memory first, then cpu; identical pods go to
  the later one in the order (upstream counts equal requests as smaller);
- a full pod count is a requirement of one pod;
- critical pods of equal or higher priority are never evicted; lower-priority critical pods
  may be;
- not enough to reclaim: Unschedulable, "no set of running pods found to reclaim resources";
- a NoExecute taint the pod does not tolerate, or an affinity it does not match, fails
  admission for a reason preemption cannot help; NoSchedule taints are not the kubelet's
  concern, and static pods skip the taint check;
- victims' PDB violations are counted for the audit but do not steer the choice.
"""

from __future__ import annotations

from typing import Any

from preemptctl.preemption.decision import Decision, Strategy, Verdict
from tests.preemption.builders import container, decide, node, pdb, pod, taint

Json = dict[str, Any]
CRITICAL = 2_000_000_000
NODE_CRITICAL = 2_000_001_000


def admit(*items: Json, incoming: Json) -> Decision:
    return decide(
        *items,
        incoming,
        preemptor=incoming["metadata"]["name"],
        strategy=Strategy.CRITICAL_ADMISSION,
    )


def critical(cpu: str | None = None, memory: str | None = None, **kwargs: Any) -> Json:
    kwargs.setdefault("priority", CRITICAL)
    return pod("critical", cpu=cpu, memory=memory, node="n", **kwargs)


def best_effort(name: str, **kwargs: Any) -> Json:
    return pod(name, node="n", **kwargs)


def burstable(name: str, cpu: str = "0", memory: str = "0", **kwargs: Any) -> Json:
    return pod(name, cpu=cpu, memory=memory, node="n", **kwargs)


def guaranteed(name: str, cpu: str, memory: str = "1Mi", **kwargs: Any) -> Json:
    limits = {"cpu": cpu, "memory": memory}
    return pod(name, node="n", containers=[container(limits=limits)], **kwargs)


def victims(decision: Decision) -> list[str]:
    assert decision.verdict is Verdict.PREEMPT, decision.message
    return [victim.name for victim in decision.victims]


def test_a_pod_that_is_not_critical_is_ineligible() -> None:
    decision = admit(
        node("n", cpu="1"), burstable("b", cpu="1"), incoming=critical("1", priority=1000)
    )
    assert decision.verdict is Verdict.INELIGIBLE
    assert "not critical" in decision.message


def test_an_unbound_pod_is_ineligible() -> None:
    decision = admit(node("n"), incoming=pod("critical", priority=CRITICAL))
    assert decision.verdict is Verdict.INELIGIBLE


def test_a_mirror_pod_is_critical_at_any_priority() -> None:
    decision = admit(
        node("n", cpu="1"),
        burstable("b", cpu="1"),
        incoming=critical("1", priority=0, annotations={"kubernetes.io/config.mirror": "x"}),
    )
    assert victims(decision) == ["b"]


def test_a_critical_pod_that_fits_is_admitted_without_preemption() -> None:
    decision = admit(node("n", cpu="2"), burstable("b", cpu="1"), incoming=critical("1"))
    assert decision.verdict is Verdict.FITS_WITHOUT_PREEMPTION
    assert decision.victims == ()


def test_best_effort_pods_go_before_burstable_ones() -> None:
    decision = admit(
        node("n", pods=2),
        burstable("b", cpu="100m", memory="1Mi"),
        best_effort("e"),
        incoming=critical(),
    )
    assert victims(decision) == ["e"]


def test_burstable_pods_go_before_guaranteed_ones() -> None:
    decision = admit(
        node("n", cpu="2"),
        guaranteed("g", cpu="1"),  # exactly what is missing
        burstable("b", cpu="1500m"),
        incoming=critical("1"),
    )
    assert victims(decision) == ["b"]


def test_guaranteed_pods_go_only_for_what_the_other_tiers_cannot_free() -> None:
    decision = admit(
        node("n", cpu="4"),
        burstable("b", cpu="1"),
        guaranteed("g-large", cpu="2"),
        guaranteed("g-small", cpu="1"),
        incoming=critical("3"),
    )
    # 3 cpu missing; the burstable pod frees 1, so Guaranteed pods must free 2
    assert victims(decision) == ["b", "g-large"]
    assert decision.rationale.details["tiers"] == {
        "default/b": "Burstable",
        "default/g-large": "Guaranteed",
    }


def test_the_pod_closest_to_what_is_missing_is_taken() -> None:
    decision = admit(
        node("n", cpu="6"),
        burstable("one", cpu="1"),
        burstable("two", cpu="2"),
        burstable("three", cpu="3"),
        incoming=critical("2"),
    )
    # "two" and "three" both cover the 2 missing cpu (distance 0); "two" asks less
    assert victims(decision) == ["two"]


def test_several_pods_are_taken_until_nothing_is_missing() -> None:
    decision = admit(
        node("n", cpu="3", memory="3Gi"),
        burstable("cpu-heavy", cpu="2", memory="1Gi"),
        burstable("memory-heavy", cpu="1", memory="2Gi"),
        incoming=critical("2", "2Gi"),
    )
    assert sorted(victims(decision)) == ["cpu-heavy", "memory-heavy"]


def test_at_equal_distance_the_smaller_memory_request_is_taken() -> None:
    decision = admit(
        node("n", cpu="5", memory="3Gi"),
        burstable("more-cpu", cpu="3", memory="1Gi"),
        burstable("more-memory", cpu="2", memory="2Gi"),
        incoming=critical("1"),
    )
    assert victims(decision) == ["more-cpu"]


def test_at_equal_distance_and_memory_the_smaller_cpu_request_is_taken() -> None:
    decision = admit(
        node("n", cpu="5"),
        burstable("three", cpu="3", memory="1Gi"),
        burstable("two", cpu="2", memory="1Gi"),
        incoming=critical("1"),
    )
    assert victims(decision) == ["two"]


def test_among_identical_pods_the_later_one_is_taken() -> None:
    decision = admit(
        node("n", cpu="2"),
        burstable("a", cpu="1"),
        burstable("b", cpu="1"),
        incoming=critical("1"),
    )
    assert victims(decision) == ["b"]


def test_a_full_pod_count_needs_one_pod_to_go() -> None:
    decision = admit(node("n", pods=2), best_effort("e1"), best_effort("e2"), incoming=critical())
    assert len(victims(decision)) == 1
    assert decision.rationale.details["insufficient"] == {"pods": 1}


def test_critical_pods_of_equal_or_higher_priority_are_never_evicted() -> None:
    decision = admit(
        node("n", cpu="2"),
        burstable("peer", cpu="1", priority=CRITICAL),
        burstable("node-critical", cpu="1", priority=NODE_CRITICAL),
        incoming=critical("1"),
    )
    assert decision.verdict is Verdict.UNSCHEDULABLE
    assert decision.message.startswith("no set of running pods found to reclaim resources")


def test_a_lower_priority_critical_pod_may_be_evicted() -> None:
    decision = admit(
        node("n", cpu="1"),
        burstable("cluster-critical", cpu="1", priority=CRITICAL),
        incoming=critical("1", priority=NODE_CRITICAL),
    )
    assert victims(decision) == ["cluster-critical"]


def test_a_non_critical_pod_is_evicted_whatever_its_priority() -> None:
    decision = admit(
        node("n", cpu="1"),
        burstable("important", cpu="1", priority=1_000_000_000),
        incoming=critical("1"),
    )
    assert victims(decision) == ["important"]


def test_when_not_enough_can_be_reclaimed_the_pod_is_unschedulable() -> None:
    decision = admit(
        node("n", cpu="2"),
        burstable("b", cpu="1"),
        burstable("peer", cpu="1", priority=CRITICAL),
        incoming=critical("2"),
    )
    assert decision.verdict is Verdict.UNSCHEDULABLE
    assert decision.message == "no set of running pods found to reclaim resources: [cpu 1000m]"


def test_an_untolerated_no_execute_taint_fails_admission_for_good() -> None:
    decision = admit(
        node("n", cpu="1", taints=[taint("maintenance", "NoExecute")]),
        burstable("b", cpu="1"),
        incoming=critical("1"),
    )
    assert decision.verdict is Verdict.UNSCHEDULABLE
    assert decision.victims == ()
    assert decision.rationale.unresolvable == {
        "node(s) had untolerated taint {maintenance: }": ["n"]
    }


def test_a_no_schedule_taint_is_not_checked_on_admission() -> None:
    decision = admit(
        node("n", cpu="1", taints=[taint("dedicated", "NoSchedule")]),
        burstable("b", cpu="1"),
        incoming=critical("1"),
    )
    assert victims(decision) == ["b"]


def test_a_static_pod_is_admitted_despite_a_no_execute_taint() -> None:
    decision = admit(
        node("n", cpu="1", taints=[taint("maintenance", "NoExecute")]),
        burstable("b", cpu="1"),
        incoming=critical("1", annotations={"kubernetes.io/config.source": "file"}),
    )
    assert victims(decision) == ["b"]


def test_an_affinity_the_node_does_not_match_fails_admission_for_good() -> None:
    decision = admit(
        node("n", cpu="1"),
        burstable("b", cpu="1"),
        incoming=critical("1", node_selector={"zone": "b"}),
    )
    assert decision.verdict is Verdict.UNSCHEDULABLE
    assert "preemption cannot help" in decision.message


def test_pdb_violations_are_counted_but_do_not_steer_the_choice() -> None:
    decision = admit(
        node("n", cpu="1"),
        pdb("guard", match_labels={"app": "db"}, allowed=0),
        burstable("db", cpu="1", labels={"app": "db"}),
        incoming=critical("1"),
    )
    assert victims(decision) == ["db"]
    assert decision.num_pdb_violations == 1


def test_the_decision_names_the_pods_own_node() -> None:
    decision = admit(node("n", cpu="1"), burstable("b", cpu="1"), incoming=critical("1"))
    assert decision.nominated_node == "n"

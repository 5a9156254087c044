"""What the planner refuses to judge, and how it reads the scheduler's own diagnosis.

Scenarios:
- a preemptor with DRA resource claims or an in-tree volume plugin's volume (a GCE disk,
  RBD...) is Unsupported, the message naming the feature, with no victim; volumes no filter
  looks at (emptyDir, configMap, secret, projected...) are judged as usual (claims and CSI
  volumes are modeled: see test_volumes);
- a namespaceSelector in a snapshot without Namespace objects is Unsupported;
- a pod affinity term with an invalid selector is Unsupported;
- the scheduler's FitError message is read into reasons (counts and the preemption part
  dropped); a reason from a filter the planner does not model makes the pod Unsupported,
  naming that reason; reasons of modeled filters change nothing;
- FitsWithoutPreemption for a pod whose PodScheduled condition says no node fits is kept,
  marked `schedulerDisagrees`, and the message says nothing is evicted.
"""

from __future__ import annotations

from typing import Any

import pytest

from preemptctl.preemption.decision import Verdict
from preemptctl.preemption.diagnosis import scheduler_reasons, unmodeled_scheduler_reasons
from tests.preemption.builders import decide, node, pod, term

Json = dict[str, Any]
CROWDED = (node("n1", cpu="1"), pod("low", node="n1", cpu="1", priority=1))


def preemptor(**spec: Any) -> Json:
    made = pod("p", cpu="1", priority=100)
    made["spec"].update(spec)
    return made


def unschedulable(made: Json, message: str) -> Json:
    made["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    ]
    return made


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        (
            {"resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu-1"}]},
            "DRA resource claims",
        ),
        (
            {"volumes": [{"name": "disk", "gcePersistentDisk": {"pdName": "d"}}]},
            "gcePersistentDisk",
        ),
        ({"volumes": [{"name": "r", "rbd": {"image": "i", "monitors": []}}]}, "rbd"),
    ],
)
def test_a_preemptor_needing_an_unmodeled_filter_is_refused(spec: Json, named: str) -> None:
    decision = decide(*CROWDED, preemptor(**spec), preemptor="p")
    assert decision.verdict is Verdict.UNSUPPORTED
    assert named in decision.message
    assert decision.victims == () and decision.nominated_node is None


def test_volumes_no_filter_looks_at_are_judged_as_usual() -> None:
    volumes = [
        {"name": "a", "emptyDir": {}},
        {"name": "b", "configMap": {"name": "c"}},
        {"name": "c", "secret": {"secretName": "s"}},
        {"name": "d", "projected": {"sources": []}},
    ]
    decision = decide(*CROWDED, preemptor(volumes=volumes), preemptor="p")
    assert decision.verdict is Verdict.PREEMPT


def test_a_namespace_selector_without_namespaces_in_the_snapshot_is_refused() -> None:
    chosen = term(match_labels={"app": "db"}, namespace_selector={"matchLabels": {"team": "x"}})
    decision = decide(
        *CROWDED, pod("p", cpu="1", priority=100, pod_anti_affinity=[chosen]), preemptor="p"
    )
    assert decision.verdict is Verdict.UNSUPPORTED
    assert "namespaceSelector" in decision.message


def test_an_invalid_affinity_selector_is_refused() -> None:
    broken = term(expressions=[{"key": "app", "operator": "In", "values": []}])
    decision = decide(
        *CROWDED, pod("p", cpu="1", priority=100, pod_affinity=[broken]), preemptor="p"
    )
    assert decision.verdict is Verdict.UNSUPPORTED
    assert "invalid label selector" in decision.message


def test_the_fit_error_message_is_read_into_reasons() -> None:
    message = (
        "0/40 nodes are available: 3 Insufficient cpu, 2 node(s) didn't match pod anti-affinity "
        "rules, 35 node(s) had untolerated taint {dedicated: gpu}. preemption: 0/40 nodes are "
        "available: 40 No preemption victims found for incoming pod."
    )
    assert scheduler_reasons(message) == [
        "Insufficient cpu",
        "node(s) didn't match pod anti-affinity rules",
        "node(s) had untolerated taint {dedicated: gpu}",
    ]
    assert unmodeled_scheduler_reasons(message) == []


def test_a_reason_from_an_unmodeled_filter_makes_the_pod_unsupported() -> None:
    message = (
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't find available "
        "persistent volumes to bind."
    )
    decision = decide(*CROWDED, unschedulable(preemptor(), message), preemptor="p")
    assert decision.verdict is Verdict.UNSUPPORTED
    assert "node(s) didn't find available persistent volumes to bind" in decision.message
    assert decision.victims == ()


def test_reasons_of_modeled_filters_change_nothing() -> None:
    message = (
        "0/1 nodes are available: 1 Insufficient cpu, 1 node(s) had volume node affinity "
        "conflict, 1 node(s) didn't match pod topology spread constraints."
    )
    decision = decide(*CROWDED, unschedulable(preemptor(), message), preemptor="p")
    assert decision.verdict is Verdict.PREEMPT


def test_fitting_while_the_scheduler_found_no_node_is_marked() -> None:
    message = "0/1 nodes are available: 1 Insufficient cpu."
    decision = decide(node("n1", cpu="2"), unschedulable(preemptor(), message), preemptor="p")
    assert decision.verdict is Verdict.FITS_WITHOUT_PREEMPTION
    assert decision.scheduler_disagrees is True
    assert decision.to_json()["schedulerDisagrees"] is True
    assert "the scheduler found no node" in decision.message
    assert "nothing is evicted" in decision.message


def test_fitting_without_a_scheduler_verdict_is_not_marked() -> None:
    decision = decide(node("n1", cpu="2"), preemptor(), preemptor="p")
    assert decision.verdict is Verdict.FITS_WITHOUT_PREEMPTION
    assert decision.scheduler_disagrees is False

"""The scheduler filters, each failure classified as preemption-can-help or not.

`Unschedulable` means removing pods could cure the failure (resources, host ports);
`UnschedulableAndUnresolvable` means nothing preemption does can (name, cordon, taints,
affinity, a request larger than the whole node).

Scenarios:
- NodeResourcesFit: insufficient cpu/memory/extended resources are Unschedulable and every
  reason is kept; too many pods is Unschedulable; a request above the node's allocatable is
  unresolvable; resources the pod does not request are not checked;
- NodeName: a pod naming another node is unresolvable there;
- NodeUnschedulable: a cordoned node is unresolvable unless the pod tolerates the
  `node.kubernetes.io/unschedulable` taint;
- TaintToleration: untolerated NoSchedule and NoExecute taints are unresolvable,
  PreferNoSchedule is ignored; Equal compares values, Exists does not, an empty effect or an
  empty key with Exists tolerates more;
- NodeAffinity: nodeSelector must match; required terms are ORed, expressions in a term
  ANDed; matchFields on metadata.name; Gt/Lt compare integers; NotIn/DoesNotExist match an
  absent label; an empty term matches nothing;
- NodePorts: a taken host port is Unschedulable; protocols differ → no conflict; 0.0.0.0
  conflicts with every IP; different specific IPs do not conflict;
- filters run in the default profile's order and the first failure is the node's status.
"""

from __future__ import annotations

from typing import Any

from preemptctl.preemption.filters import Code, Status, node_name
from preemptctl.preemption.find_nodes_that_fit import filter_node
from tests.preemption.builders import (
    as_node,
    as_pod,
    container,
    node,
    pod,
    requirement,
    snapshot,
    taint,
    toleration,
)

Json = dict[str, Any]


def status_for(incoming: Json, on: Json, *bound: Json) -> Status:
    """The filter status of the pending pod `incoming` on the single node `on`."""
    cluster = snapshot(on, incoming, *bound)
    preemptor = cluster.pod_by_key(f"default/{incoming['metadata']['name']}")
    info = cluster.node(on["metadata"]["name"])
    assert preemptor is not None and info is not None
    return filter_node(cluster, preemptor, info)


def unschedulable(*reasons: str) -> Status:
    return Status(Code.UNSCHEDULABLE, reasons)


def unresolvable(*reasons: str) -> Status:
    return Status(Code.UNRESOLVABLE, reasons)


SUCCESS = Status(Code.SUCCESS)

# -- NodeResourcesFit --------------------------------------------------------------------------


def test_a_pod_that_fits_passes() -> None:
    assert status_for(pod("p", cpu="1"), node("n", cpu="2")) == SUCCESS


def test_insufficient_cpu_is_unschedulable() -> None:
    got = status_for(pod("p", cpu="2"), node("n", cpu="3"), pod("a", cpu="2", node="n"))
    assert got == unschedulable("Insufficient cpu")


def test_every_insufficient_resource_is_a_reason() -> None:
    got = status_for(
        pod("p", cpu="2", memory="2Gi"),
        node("n", cpu="3", memory="3Gi"),
        pod("a", cpu="2", memory="2Gi", node="n"),
    )
    assert got == unschedulable("Insufficient cpu", "Insufficient memory")


def test_too_many_pods_is_unschedulable() -> None:
    got = status_for(pod("p"), node("n", pods=1), pod("a", node="n"))
    assert got == unschedulable("Too many pods")


def test_a_pod_without_requests_is_checked_only_for_the_pod_count() -> None:
    got = status_for(pod("p"), node("n", cpu="1", pods=2), pod("a", cpu="1", node="n"))
    assert got == SUCCESS


def test_a_request_above_the_nodes_allocatable_is_unresolvable() -> None:
    got = status_for(pod("p", cpu="5"), node("n", cpu="4"))
    assert got == unresolvable("Insufficient cpu")


def test_one_request_above_allocatable_makes_the_whole_status_unresolvable() -> None:
    got = status_for(
        pod("p", cpu="1", memory="16Gi"),
        node("n", cpu="1", memory="8Gi"),
        pod("a", cpu="1", node="n"),
    )
    assert got == unresolvable("Insufficient cpu", "Insufficient memory")


def test_resources_the_pod_does_not_request_are_not_checked() -> None:
    # the node is over-committed on memory, but the pod asks only for cpu
    got = status_for(
        pod("p", cpu="1"), node("n", cpu="2", memory="1Gi"), pod("a", memory="2Gi", node="n")
    )
    assert got == SUCCESS


def test_insufficient_extended_resource_is_unschedulable() -> None:
    gpu = {"nvidia.com/gpu": "1"}
    got = status_for(
        pod("p", containers=[container(extra=gpu)]),
        node("n", extra={"nvidia.com/gpu": "1"}),
        pod("a", containers=[container(extra=gpu)], node="n"),
    )
    assert got == unschedulable("Insufficient nvidia.com/gpu")


def test_an_extended_resource_the_node_lacks_is_unresolvable() -> None:
    got = status_for(pod("p", containers=[container(extra={"nvidia.com/gpu": "1"})]), node("n"))
    assert got == unresolvable("Insufficient nvidia.com/gpu")


def test_hugepages_are_checked_like_extended_resources() -> None:
    huge = {"hugepages-2Mi": "64Mi"}
    got = status_for(
        pod("p", containers=[container(extra=huge)]),
        node("n", extra={"hugepages-2Mi": "100Mi"}),
        pod("a", containers=[container(extra=huge)], node="n"),
    )
    assert got == unschedulable("Insufficient hugepages-2Mi")


def test_terminal_pods_do_not_count_on_their_node() -> None:
    got = status_for(
        pod("p", cpu="2"), node("n", cpu="2"), pod("done", cpu="2", node="n", phase="Succeeded")
    )
    assert got == SUCCESS


# -- NodeName ----------------------------------------------------------------------------------


def test_a_pod_naming_another_node_is_unresolvable_there() -> None:
    got = node_name(as_pod(pod("p", node="elsewhere")), as_node(node("n")))
    assert got == unresolvable("node(s) didn't match the requested node name")


def test_a_pod_naming_this_node_passes_node_name() -> None:
    assert node_name(as_pod(pod("p", node="n")), as_node(node("n"))).ok


# -- NodeUnschedulable --------------------------------------------------------------------------


def test_a_cordoned_node_is_unresolvable() -> None:
    got = status_for(pod("p"), node("n", unschedulable=True))
    assert got == unresolvable("node(s) were unschedulable")


def test_a_pod_tolerating_the_unschedulable_taint_may_use_a_cordoned_node() -> None:
    tolerates_cordon = toleration(
        "node.kubernetes.io/unschedulable", "NoSchedule", operator="Exists"
    )
    got = status_for(pod("p", tolerations=[tolerates_cordon]), node("n", unschedulable=True))
    assert got == SUCCESS


def test_a_toleration_of_everything_tolerates_the_cordon() -> None:
    everything = toleration(operator="Exists")
    assert status_for(pod("p", tolerations=[everything]), node("n", unschedulable=True)) == SUCCESS


# -- TaintToleration ----------------------------------------------------------------------------

GPU_TAINT = taint("dedicated", "NoSchedule", "gpu")
UNTOLERATED_GPU = "node(s) had untolerated taint {dedicated: gpu}"


def test_an_untolerated_no_schedule_taint_is_unresolvable() -> None:
    assert status_for(pod("p"), node("n", taints=[GPU_TAINT])) == unresolvable(UNTOLERATED_GPU)


def test_an_untolerated_no_execute_taint_is_unresolvable() -> None:
    got = status_for(pod("p"), node("n", taints=[taint("dedicated", "NoExecute", "gpu")]))
    assert got == unresolvable(UNTOLERATED_GPU)


def test_a_prefer_no_schedule_taint_does_not_filter() -> None:
    got = status_for(pod("p"), node("n", taints=[taint("dedicated", "PreferNoSchedule", "gpu")]))
    assert got == SUCCESS


def test_an_equal_toleration_with_the_same_value_tolerates() -> None:
    tolerated = toleration("dedicated", "NoSchedule", "gpu")
    assert status_for(pod("p", tolerations=[tolerated]), node("n", taints=[GPU_TAINT])) == SUCCESS


def test_an_equal_toleration_with_another_value_does_not_tolerate() -> None:
    other = toleration("dedicated", "NoSchedule", "cpu")
    got = status_for(pod("p", tolerations=[other]), node("n", taints=[GPU_TAINT]))
    assert got == unresolvable(UNTOLERATED_GPU)


def test_an_exists_toleration_ignores_the_value() -> None:
    exists = toleration("dedicated", "NoSchedule", operator="Exists")
    assert status_for(pod("p", tolerations=[exists]), node("n", taints=[GPU_TAINT])) == SUCCESS


def test_a_toleration_without_effect_tolerates_every_effect() -> None:
    any_effect = toleration("dedicated", value="gpu")
    taints = [GPU_TAINT, taint("dedicated", "NoExecute", "gpu")]
    assert status_for(pod("p", tolerations=[any_effect]), node("n", taints=taints)) == SUCCESS


def test_a_toleration_for_another_effect_does_not_tolerate() -> None:
    no_execute = toleration("dedicated", "NoExecute", "gpu")
    got = status_for(pod("p", tolerations=[no_execute]), node("n", taints=[GPU_TAINT]))
    assert got == unresolvable(UNTOLERATED_GPU)


# -- NodeAffinity -------------------------------------------------------------------------------

AFFINITY = "node(s) didn't match Pod's node affinity/selector"
ZONE_A = {"zone": "a", "size": "8"}


def affinity_status(
    terms: list[Json] | None = None, selector: dict[str, str] | None = None
) -> Status:
    return status_for(
        pod("p", affinity_terms=terms, node_selector=selector), node("n", labels=ZONE_A)
    )


def test_a_matching_node_selector_passes() -> None:
    assert affinity_status(selector={"zone": "a"}) == SUCCESS


def test_a_node_selector_that_does_not_match_is_unresolvable() -> None:
    assert affinity_status(selector={"zone": "b"}) == unresolvable(AFFINITY)


def test_required_terms_are_ored() -> None:
    terms = [
        {"matchExpressions": [requirement("zone", "In", "b")]},
        {"matchExpressions": [requirement("zone", "In", "a")]},
    ]
    assert affinity_status(terms) == SUCCESS


def test_expressions_within_a_term_are_anded() -> None:
    terms = [
        {
            "matchExpressions": [
                requirement("zone", "In", "a"),
                requirement("size", "In", "16"),
            ]
        }
    ]
    assert affinity_status(terms) == unresolvable(AFFINITY)


def test_node_selector_and_required_terms_must_both_match() -> None:
    terms = [{"matchExpressions": [requirement("zone", "In", "a")]}]
    assert affinity_status(terms, selector={"zone": "b"}) == unresolvable(AFFINITY)


def test_match_fields_select_the_node_by_name() -> None:
    assert affinity_status([{"matchFields": [requirement("metadata.name", "In", "n")]}]) == SUCCESS
    got = affinity_status([{"matchFields": [requirement("metadata.name", "In", "other")]}])
    assert got == unresolvable(AFFINITY)


def test_match_fields_not_in_excludes_the_named_node() -> None:
    got = affinity_status([{"matchFields": [requirement("metadata.name", "NotIn", "n")]}])
    assert got == unresolvable(AFFINITY)


def test_gt_and_lt_compare_label_values_as_integers() -> None:
    assert affinity_status([{"matchExpressions": [requirement("size", "Gt", "4")]}]) == SUCCESS
    assert affinity_status([{"matchExpressions": [requirement("size", "Lt", "10")]}]) == SUCCESS
    got = affinity_status([{"matchExpressions": [requirement("size", "Gt", "8")]}])
    assert got == unresolvable(AFFINITY)


def test_gt_on_a_missing_label_does_not_match() -> None:
    got = affinity_status([{"matchExpressions": [requirement("gpus", "Gt", "0")]}])
    assert got == unresolvable(AFFINITY)


def test_not_in_and_does_not_exist_match_an_absent_label() -> None:
    terms = [
        {
            "matchExpressions": [
                requirement("gpu", "NotIn", "a100"),
                {"key": "gpu", "operator": "DoesNotExist"},
            ]
        }
    ]
    assert affinity_status(terms) == SUCCESS


def test_an_empty_term_matches_nothing() -> None:
    assert affinity_status([{}]) == unresolvable(AFFINITY)


def test_an_empty_term_does_not_stop_another_term_from_matching() -> None:
    assert affinity_status([{}, {"matchExpressions": [requirement("zone", "In", "a")]}]) == SUCCESS


def test_a_required_affinity_without_terms_matches_nothing() -> None:
    assert affinity_status([]) == unresolvable(AFFINITY)


def test_a_term_with_an_invalid_operator_matches_nothing() -> None:
    got = affinity_status([{"matchExpressions": [requirement("zone", "Like", "a")]}])
    assert got == unresolvable(AFFINITY)


# -- NodePorts ----------------------------------------------------------------------------------

PORTS = "node(s) didn't have free ports for the requested pod ports"


def ports_status(wanted: tuple[int, str, str], used: tuple[int, str, str]) -> Status:
    return status_for(
        pod("p", host_ports=[wanted]), node("n"), pod("a", node="n", host_ports=[used])
    )


def test_a_taken_host_port_is_unschedulable() -> None:
    got = status_for(pod("p", host_ports=[8080]), node("n"), pod("a", node="n", host_ports=[8080]))
    assert got == unschedulable(PORTS)


def test_the_same_port_on_another_protocol_is_free() -> None:
    assert ports_status((53, "UDP", ""), (53, "TCP", "")) == SUCCESS


def test_the_wildcard_address_conflicts_with_a_specific_one() -> None:
    assert ports_status((80, "TCP", "0.0.0.0"), (80, "TCP", "10.0.0.1")) == unschedulable(PORTS)
    assert ports_status((80, "TCP", "10.0.0.1"), (80, "TCP", "")) == unschedulable(PORTS)


def test_two_different_specific_addresses_do_not_conflict() -> None:
    assert ports_status((80, "TCP", "10.0.0.1"), (80, "TCP", "10.0.0.2")) == SUCCESS


def test_a_sidecars_host_port_is_taken_too() -> None:
    sidecar = container(host_ports=[9000], sidecar=True)
    got = status_for(
        pod("p", host_ports=[9000]),
        node("n"),
        pod("a", node="n", containers=[container()], init_containers=[sidecar]),
    )
    assert got == unschedulable(PORTS)


# -- order ---------------------------------------------------------------------------------------


def test_the_first_failing_filter_in_profile_order_is_the_status() -> None:
    got = status_for(
        pod("p", cpu="8", host_ports=[80]),
        node("n", unschedulable=True, taints=[GPU_TAINT], labels={"zone": "b"}),
    )
    assert got == unresolvable("node(s) were unschedulable")


def test_ports_are_checked_before_resources() -> None:
    got = status_for(
        pod("p", cpu="4", host_ports=[80]),
        node("n", cpu="4"),
        pod("a", cpu="1", node="n", host_ports=[80]),
    )
    assert got == unschedulable(PORTS)

"""A pod's effective request and QoS class, as the scheduler and the kubelet compute them.

Scenarios:
- the containers' requests are summed;
- a larger init container sets the request (max of the sum and each init container);
- restartable (sidecar) init containers run alongside: they add to the containers' sum and
  to every later init container's step (KEP-753);
- `spec.overhead` is added on top;
- requests default from limits where unset;
- extended resources (`nvidia.com/gpu`) and hugepages are counted, unknown names are not;
- malformed and negative quantities name the pod;
- QoS: BestEffort without requests or limits, Guaranteed when every container limits cpu and
  memory equal to its requests, Burstable otherwise; `status.qosClass` wins when present.
"""

from __future__ import annotations

import pytest

from preemptctl.preemption.errors import PlannerInputError
from preemptctl.preemption.objects import QOS_BEST_EFFORT, QOS_BURSTABLE, QOS_GUARANTEED
from tests.preemption.builders import as_pod, container, pod


def test_containers_requests_are_summed() -> None:
    made = as_pod(pod("p", containers=[container("100m", "1Gi"), container("250m", "512Mi")]))
    assert made.requests.milli_cpu == 350
    assert made.requests.memory == 1536 * 2**20


def test_a_larger_init_container_sets_the_request() -> None:
    made = as_pod(
        pod(
            "p",
            containers=[container("100m", "100Mi"), container("100m", "100Mi")],
            init_containers=[container("500m", "50Mi")],
        )
    )
    assert made.requests.milli_cpu == 500  # the init container's peak
    assert made.requests.memory == 200 * 2**20  # the containers' sum


def test_the_largest_of_several_init_containers_counts_not_their_sum() -> None:
    made = as_pod(
        pod(
            "p",
            containers=[container("100m")],
            init_containers=[container("300m"), container("400m")],
        )
    )
    assert made.requests.milli_cpu == 400


def test_a_sidecar_adds_to_the_containers_sum() -> None:
    made = as_pod(
        pod("p", containers=[container("100m")], init_containers=[container("50m", sidecar=True)])
    )
    assert made.requests.milli_cpu == 150


def test_a_sidecar_keeps_running_during_later_init_containers() -> None:
    # step of the second init container: 200m + the sidecar's 50m = 250m > 100m + 50m
    made = as_pod(
        pod(
            "p",
            containers=[container("100m")],
            init_containers=[container("50m", sidecar=True), container("200m")],
        )
    )
    assert made.requests.milli_cpu == 250


def test_an_init_container_before_a_sidecar_does_not_run_with_it() -> None:
    made = as_pod(
        pod(
            "p",
            containers=[container("100m")],
            init_containers=[container("200m"), container("50m", sidecar=True)],
        )
    )
    assert made.requests.milli_cpu == 200


def test_overhead_is_added_on_top() -> None:
    made = as_pod(
        pod(
            "p",
            containers=[container("100m", "64Mi")],
            init_containers=[container("300m")],
            overhead={"cpu": "10m", "memory": "1Mi"},
        )
    )
    assert made.requests.milli_cpu == 310
    assert made.requests.memory == 65 * 2**20


def test_requests_default_from_limits() -> None:
    made = as_pod(pod("p", containers=[container(memory="64Mi", limits={"cpu": "2"})]))
    assert made.requests.milli_cpu == 2000
    assert made.requests.memory == 64 * 2**20


def test_an_explicit_request_is_not_overridden_by_the_limit() -> None:
    made = as_pod(pod("p", containers=[container("500m", limits={"cpu": "2"})]))
    assert made.requests.milli_cpu == 500


def test_extended_resources_and_hugepages_are_counted() -> None:
    made = as_pod(
        pod(
            "p",
            containers=[container(extra={"nvidia.com/gpu": "2", "hugepages-2Mi": "4Mi"})],
        )
    )
    assert made.requests.get("nvidia.com/gpu") == 2
    assert made.requests.get("hugepages-2Mi") == 4 * 2**20


def test_ephemeral_storage_is_counted() -> None:
    made = as_pod(pod("p", containers=[container(extra={"ephemeral-storage": "1Gi"})]))
    assert made.requests.ephemeral_storage == 2**30


def test_names_that_are_not_resources_the_scheduler_counts_are_ignored() -> None:
    made = as_pod(pod("p", containers=[container("1", extra={"widgets": "3"})]))
    assert made.requests.get("widgets") == 0
    assert made.requests.names() == ("cpu",)


def test_a_malformed_request_names_the_pod() -> None:
    with pytest.raises(PlannerInputError, match=r"pod default/x: malformed quantity '5x'"):
        as_pod(pod("x", cpu="5x"))


def test_a_negative_request_names_the_pod() -> None:
    with pytest.raises(PlannerInputError, match=r"pod default/x: negative request '-1'"):
        as_pod(pod("x", memory="-1"))


def _qos(*containers: dict[str, object], qos: str | None = None) -> str:
    return as_pod(pod("p", containers=list(containers), qos=qos)).qos_class


def test_a_pod_without_requests_or_limits_is_best_effort() -> None:
    assert _qos(container()) == QOS_BEST_EFFORT


def test_a_pod_with_requests_below_limits_is_burstable() -> None:
    assert _qos(container("100m", "64Mi", limits={"cpu": "1", "memory": "64Mi"})) == QOS_BURSTABLE


def test_a_pod_with_only_requests_is_burstable() -> None:
    assert _qos(container("100m")) == QOS_BURSTABLE


def test_a_pod_whose_limits_equal_its_requests_is_guaranteed() -> None:
    assert _qos(container(limits={"cpu": "1", "memory": "1Gi"})) == QOS_GUARANTEED


def test_every_container_must_limit_cpu_and_memory_to_be_guaranteed() -> None:
    assert (
        _qos(container(limits={"cpu": "1", "memory": "1Gi"}), container(limits={"cpu": "1"}))
        == QOS_BURSTABLE
    )


def test_the_api_servers_qos_class_wins() -> None:
    assert _qos(container(), qos=QOS_GUARANTEED) == QOS_GUARANTEED

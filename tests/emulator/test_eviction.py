"""The policy/v1 Eviction subresource and PodDisruptionBudgets.

Scenarios:
- evicting a pod its budget allows answers 201, spends one disruption, and deletes the pod;
- evicting a pod whose budget has no disruptions left is a 429 worded as the API server words
  it, with a DisruptionBudget cause, and the pod stays;
- a pod no budget covers is evicted without a check;
- a pending pod is evicted without a look at its budget, however exhausted (`canIgnorePDB`,
  as kube-apiserver; the pods above run on a node, Ready);
- a running pod that is not Ready counts for nothing in its budget: it is evicted without
  spending a disruption while the budget is healthy (IfHealthyBudget, the default), refused
  while it is not, and evicted anyway under AlwaysAllow;
- a pod two budgets cover cannot be evicted (500), as upstream;
- eviction honours a UID precondition, checked by its delete, after the budget: a refused
  one leaves a disruption spent, as kube-apiserver does (its disruption controller gives it
  back later); with the budget exhausted it is the budget's 429.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from preemptctl.emulator import Emulator
from preemptctl.emulator.resources import PDBS
from tests.support.emulator import as_list, pdb, pod


def _evict(core: Any, name: str, uid: str | None = None) -> Any:
    body: dict[str, Any] = {"metadata": {"name": name, "namespace": "default"}}
    if uid is not None:
        body["deleteOptions"] = {"preconditions": {"uid": uid}}
    return core.create_namespaced_pod_eviction(name, "default", body)


def _allowed(emulator: Emulator, name: str = "budget") -> int:
    allowed: int = emulator.store.get(PDBS, "default", name)["status"]["disruptionsAllowed"]
    return allowed


def test_allowed_eviction_spends_a_disruption_and_deletes(core: Any, emulator: Emulator) -> None:
    emulator.load(
        as_list(
            pod("web", node_name="n1", labels={"app": "web"}, grace_period=0, ready=True),
            pdb("budget", match_labels={"app": "web"}, disruptions_allowed=1),
        )
    )
    _evict(core, "web")
    assert emulator.pod("default/web") is None
    assert _allowed(emulator) == 0
    assert emulator.requests.matching("create", "pods/eviction")[0].code == 201


def test_exhausted_budget_refuses_with_429(core: Any, emulator: Emulator) -> None:
    emulator.load(
        as_list(
            pod("web", node_name="n1", labels={"app": "web"}, ready=True),
            pdb(
                "budget",
                match_labels={"app": "web"},
                disruptions_allowed=0,
                desired_healthy=2,
                current_healthy=2,
            ),
        )
    )
    with pytest.raises(ApiException) as raised:
        _evict(core, "web")
    assert raised.value.status == 429
    body = json.loads(raised.value.body)
    assert body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert body["details"]["causes"] == [
        {
            "reason": "DisruptionBudget",
            "message": "The disruption budget budget needs 2 healthy pods and has 2 currently",
        }
    ]
    assert emulator.pod("default/web") is not None


def test_pod_without_budget_is_evicted(core: Any, emulator: Emulator) -> None:
    emulator.load(pod("web"))
    _evict(core, "web")
    assert emulator.pod("default/web") is None


def test_pod_with_two_budgets_cannot_be_evicted(core: Any, emulator: Emulator) -> None:
    emulator.load(
        as_list(
            pod("web", node_name="n1", labels={"app": "web"}),
            pdb("one", match_labels={"app": "web"}, disruptions_allowed=1),
            pdb("two", match_labels={"app": "web"}, disruptions_allowed=1),
        )
    )
    with pytest.raises(ApiException) as raised:
        _evict(core, "web")
    assert raised.value.status == 500


def test_refused_uid_precondition_is_checked_after_the_budget(
    core: Any, emulator: Emulator
) -> None:
    emulator.load(
        as_list(
            pod("web", node_name="n1", labels={"app": "web"}, uid="new", ready=True),
            pdb("budget", match_labels={"app": "web"}, disruptions_allowed=1),
        )
    )
    with pytest.raises(ApiException) as raised:
        _evict(core, "web", uid="old")
    assert raised.value.status == 409
    assert "the UID in the precondition (old) does not match" in raised.value.body
    assert _allowed(emulator) == 0
    assert emulator.pod("default/web") is not None
    with pytest.raises(ApiException) as exhausted:
        _evict(core, "web", uid="old")
    assert exhausted.value.status == 429


def test_pending_pod_is_evicted_without_its_budget(core: Any, emulator: Emulator) -> None:
    emulator.load(
        as_list(
            pod("queued", labels={"app": "web"}),
            pdb("budget", match_labels={"app": "web"}, disruptions_allowed=0),
        )
    )
    _evict(core, "queued")
    assert emulator.pod("default/queued") is None
    assert _allowed(emulator) == 0


def _unready_under(emulator: Emulator, current_healthy: int, policy: str | None = None) -> None:
    budget = pdb(
        "budget",
        match_labels={"app": "web"},
        disruptions_allowed=0,
        desired_healthy=2,
        current_healthy=current_healthy,
    )
    if policy:
        budget["spec"]["unhealthyPodEvictionPolicy"] = policy
    emulator.load(as_list(pod("crashing", node_name="n1", labels={"app": "web"}), budget))


def test_unready_pod_goes_free_while_its_budget_is_healthy(core: Any, emulator: Emulator) -> None:
    _unready_under(emulator, current_healthy=2)
    _evict(core, "crashing")
    stored = emulator.pod("default/crashing")
    assert stored is not None and stored["metadata"]["deletionTimestamp"]  # its grace period
    assert _allowed(emulator) == 0


def test_unready_pod_is_refused_while_its_budget_is_not_healthy(
    core: Any, emulator: Emulator
) -> None:
    _unready_under(emulator, current_healthy=1)
    with pytest.raises(ApiException) as raised:
        _evict(core, "crashing")
    assert raised.value.status == 429


def test_unready_pod_goes_under_always_allow(core: Any, emulator: Emulator) -> None:
    _unready_under(emulator, current_healthy=1, policy="AlwaysAllow")
    _evict(core, "crashing")
    stored = emulator.pod("default/crashing")
    assert stored is not None and stored["metadata"]["deletionTimestamp"]  # its grace period

"""The policy/v1 Eviction subresource: a delete that the API server refuses when a
PodDisruptionBudget has no disruptions left.

Mirrors the checks of `pkg/registry/core/pod/storage/eviction.go` that a preemption can meet:
terminal, pending or already-terminating pods skip the budget (`canIgnorePDB`), more than one
matching budget is a 500, a running pod that is not Ready goes without spending a disruption
when the budget's `unhealthyPodEvictionPolicy` lets it (AlwaysAllow; or IfHealthyBudget, the
default, while the budget is healthy), an exhausted budget is a 429 with a `DisruptionBudget`
cause, and an allowed eviction spends one disruption (`status.disruptionsAllowed`,
`status.disruptedPods`) before deleting.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from preemptctl.emulator import status
from preemptctl.emulator.resources import PDBS, PODS
from preemptctl.emulator.status import ApiError
from preemptctl.emulator.store import Obj, Store, now_rfc3339

EVICTION_REFUSED = "Cannot evict pod as it would violate the pod's disruption budget."


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """`metav1.LabelSelectorAsSelector` semantics; a nil or empty selector matches nothing
    for a PDB (policy/v1)."""
    if not selector:
        return False
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not match_labels and not expressions:
        return False
    if any(labels.get(key) != value for key, value in match_labels.items()):
        return False
    for expression in expressions:
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def evict(store: Store, namespace: str, name: str, eviction: Mapping[str, Any]) -> Obj:
    """Evict a pod; returns the `Status` success body the API server answers with (201)."""
    options = eviction.get("deleteOptions") or {}
    preconditions = options.get("preconditions") or {}
    with store.transaction():
        pod = store.get(PODS, namespace, name)
        if _needs_budget(pod):
            _spend_disruption(store, namespace, pod)
        # The preconditions are the delete's, checked after the budget is spent: a refused
        # one leaves the disruption spent, as on kube-apiserver (its disruption controller
        # gives it back once the pod named in disruptedPods is seen not to go).
        store.delete(
            PODS,
            namespace,
            name,
            grace_period=options.get("gracePeriodSeconds"),
            uid=preconditions.get("uid"),
            resource_version=preconditions.get("resourceVersion"),
        )
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }


def _needs_budget(pod: Obj) -> bool:
    """Upstream's `canIgnorePDB`, negated: a terminal, pending or terminating pod is evicted
    without a look at its budget."""
    phase = (pod.get("status") or {}).get("phase", "Pending")
    return phase not in ("Succeeded", "Failed", "Pending") and not pod["metadata"].get(
        "deletionTimestamp"
    )


def _ready(pod: Obj) -> bool:
    """`podutil.IsPodReady`, what a budget counts as healthy: the Ready condition is True."""
    return any(
        isinstance(condition, dict)
        and condition.get("type") == "Ready"
        and condition.get("status") == "True"
        for condition in (pod.get("status") or {}).get("conditions") or []
    )


def _unhealthy_may_go(budget: Obj) -> bool:
    """Whether a running pod that is not Ready is evicted without the budget's check: always
    under `unhealthyPodEvictionPolicy: AlwaysAllow`; under the default, IfHealthyBudget,
    while the application is not disrupted (`currentHealthy >= desiredHealthy > 0`)."""
    if (budget.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
        return True
    budget_status = budget.get("status") or {}
    desired = int(budget_status.get("desiredHealthy") or 0)
    return desired > 0 and int(budget_status.get("currentHealthy") or 0) >= desired


def _spend_disruption(store: Store, namespace: str, pod: Obj) -> None:
    labels = pod["metadata"].get("labels") or {}
    budgets = [
        pdb
        for pdb in store.objects(PDBS, namespace)
        if selector_matches((pdb.get("spec") or {}).get("selector"), labels)
    ]
    if not budgets:
        return
    if len(budgets) > 1:
        raise ApiError(
            500,
            status.status_body(
                500,
                "InternalError",
                "This pod has more than one PodDisruptionBudget, which the eviction "
                "subresource does not support.",
            ),
        )
    budget = budgets[0]
    budget_status = budget.get("status") or {}
    if not _ready(pod) and _unhealthy_may_go(budget):
        return  # it counts for nothing in the budget: evicted without spending a disruption
    if int(budget_status.get("disruptionsAllowed", 0)) <= 0:
        raise status.too_many_requests(
            EVICTION_REFUSED,
            retry_after=None,
            causes=[
                {
                    "reason": "DisruptionBudget",
                    "message": (
                        f"The disruption budget {budget['metadata']['name']} needs "
                        f"{budget_status.get('desiredHealthy', 0)} healthy pods and has "
                        f"{budget_status.get('currentHealthy', 0)} currently"
                    ),
                }
            ],
        )
    spent = dict(budget_status)
    spent["disruptionsAllowed"] = int(budget_status["disruptionsAllowed"]) - 1
    spent["disruptedPods"] = dict(budget_status.get("disruptedPods") or {})
    spent["disruptedPods"][pod["metadata"]["name"]] = now_rfc3339()
    store.update(
        PDBS, namespace, budget["metadata"]["name"], {"status": spent}, subresource="status"
    )

"""Objects a tenant (the `edit` role in a namespace) can create, for the hostile-tenant suite,
and the cluster objects around them. Built on `tests.support.emulator`'s pod and node."""

from __future__ import annotations

import uuid
from typing import Any

from tests.support.emulator import node, pod
from tests.support.fault_rig import PREEMPTOR_PRIORITY

ZONE = "topology.kubernetes.io/zone"


def zoned_node(name: str, zone: str, cpu: str = "2") -> dict[str, Any]:
    """A node labelled with its zone, so a preemptor can be kept to one zone."""
    obj = node(name, cpu=cpu)
    obj["metadata"]["labels"][ZONE] = zone
    return obj


def zoned_preemptor(
    name: str, zone: str, namespace: str = "default", cpu: str = "2"
) -> dict[str, Any]:
    """A pending preemptor that may only run in `zone` (a nodeSelector)."""
    obj = pod(name, namespace, priority=PREEMPTOR_PRIORITY, cpu=cpu)
    obj["spec"]["nodeSelector"] = {ZONE: zone}
    return obj


def victim(
    name: str, node_name: str, *, namespace: str = "default", priority: int = 1, cpu: str = "2"
) -> dict[str, Any]:
    """A running low-priority pod with a one-second grace period."""
    return pod(name, namespace, node_name=node_name, priority=priority, cpu=cpu, grace_period=1)


def marked_by_scheduler(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` as kube-scheduler leaves a victim: `DisruptionTarget=True`, reason
    `PreemptionByScheduler` (written through pods/status, which tenants cannot write)."""
    obj["status"].setdefault("conditions", []).append(
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": "default-scheduler: preempting to accommodate a higher priority pod",
        }
    )
    return obj


def preempted_event(
    victim_obj: dict[str, Any],
    preemptor_uid: str,
    node_name: str,
    *,
    reporter: str = "default-scheduler",
    namespace: str | None = None,
    message: str | None = None,
    event_time: str | None = None,
) -> dict[str, Any]:
    """A core/v1 `Preempted` Event about `victim_obj`, as kube-scheduler writes it, unless
    a tenant changed a part: the reporter, the Event's namespace, the message, its time."""
    meta = victim_obj["metadata"]
    event: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{meta['name']}.{uuid.uuid4().hex[:12]}",
            "namespace": namespace or meta["namespace"],
        },
        "involvedObject": {
            "kind": "Pod",
            "apiVersion": "v1",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta["uid"],
        },
        "reason": "Preempted",
        "message": message or f"Preempted by pod {preemptor_uid} on node {node_name}",
        "type": "Normal",
        "source": {"component": reporter},
        "reportingComponent": reporter,
        "count": 1,
    }
    if event_time is not None:
        event["eventTime"] = event_time
    return event

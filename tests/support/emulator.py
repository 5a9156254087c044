"""Starting an emulator for a test, and building the objects scenarios are made of.

Shared by the emulator's own tests, the gateway and view tests, and any later test that
needs a cluster (the workflow's integration tests, `preemptctl dev`'s).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from preemptctl.emulator import Emulator


@contextmanager
def running_emulator(**options: Any) -> Iterator[Emulator]:
    """An emulator serving on a free 127.0.0.1 port for the duration of the block."""
    emulator = Emulator(**options)
    emulator.start()
    try:
        yield emulator
    finally:
        emulator.stop()


def node(name: str, cpu: str = "4", memory: str = "8Gi", pods: str = "110") -> dict[str, Any]:
    allocatable = {"cpu": cpu, "memory": memory, "pods": pods}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"capacity": dict(allocatable), "allocatable": allocatable},
    }


def pod(
    name: str,
    namespace: str = "default",
    *,
    node_name: str | None = None,
    priority: int = 0,
    labels: Mapping[str, str] | None = None,
    cpu: str = "100m",
    phase: str | None = None,
    uid: str | None = None,
    grace_period: int | None = None,
    nominated_node: str | None = None,
    ready: bool = False,
) -> dict[str, Any]:
    """A pod; `ready` adds the Ready condition a kubelet reports once its containers are ready
    (what a PodDisruptionBudget counts as healthy)."""
    spec: dict[str, Any] = {
        "schedulerName": "default-scheduler",
        "priority": priority,
        "containers": [
            {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}
        ],
    }
    if node_name:
        spec["nodeName"] = node_name
    if grace_period is not None:
        spec["terminationGracePeriodSeconds"] = grace_period
    status: dict[str, Any] = {"phase": phase or ("Running" if node_name else "Pending")}
    if nominated_node:
        status["nominatedNodeName"] = nominated_node
    if ready:
        status["conditions"] = [{"type": "Ready", "status": "True"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or str(uuid.uuid4()),
            "labels": dict(labels or {}),
        },
        "spec": spec,
        "status": status,
    }


def pdb(
    name: str,
    namespace: str = "default",
    *,
    match_labels: Mapping[str, str],
    disruptions_allowed: int,
    desired_healthy: int = 1,
    current_healthy: int = 1,
) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"matchLabels": dict(match_labels)}, "minAvailable": desired_healthy},
        "status": {
            "disruptionsAllowed": disruptions_allowed,
            "desiredHealthy": desired_healthy,
            "currentHealthy": current_healthy,
            "expectedPods": current_healthy,
        },
    }


def as_list(*objects: Mapping[str, Any]) -> dict[str, Any]:
    """A `v1 List`, the scenario format."""
    return {"apiVersion": "v1", "kind": "List", "items": [dict(obj) for obj in objects]}

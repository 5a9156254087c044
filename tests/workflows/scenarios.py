"""Small clusters for the workflow tests, built from the emulator's object builders."""

from __future__ import annotations

import uuid
from typing import Any

from tests.support.emulator import as_list, node, pod


def started(obj: dict[str, Any], second: int) -> dict[str, Any]:
    """`obj` with a start time `second` seconds into the scenario's day: victims of equal
    priority are ordered by it (earlier: more important), not by their random UIDs."""
    obj["status"]["startTime"] = f"2026-01-01T00:00:{second:02d}Z"
    return obj


def one_full_node(victims: int = 2) -> dict[str, Any]:
    """node-1 (4 cpu) full: 1-cpu priority-100 pods victim-0..N-1 (started in that order, so
    the most important first), the rest 1-cpu `keeper`s as important as `urgent` (never
    victims); `urgent` (priority 1000000) needs N cpu."""
    items = [node("node-1", cpu="4")]
    items += [
        started(pod(f"victim-{i}", node_name="node-1", priority=100, cpu="1"), i)
        for i in range(victims)
    ]
    items += [
        pod(f"keeper-{i}", node_name="node-1", priority=1_000_000, cpu="1")
        for i in range(4 - victims)
    ]
    items.append(pod("urgent", priority=1_000_000, cpu=str(victims)))
    return as_list(*items)


def spare_room() -> dict[str, Any]:
    """`urgent` fits on node-1 as it is."""
    return as_list(node("node-1", cpu="4"), pod("urgent", priority=1_000_000, cpu="1"))


def nothing_lower() -> dict[str, Any]:
    """node-1 is full of pods as important as `urgent`: no preemption helps."""
    return as_list(
        node("node-1", cpu="2"),
        pod("peer", node_name="node-1", priority=1_000_000, cpu="2"),
        pod("urgent", priority=1_000_000, cpu="1"),
    )


def never_preempts() -> dict[str, Any]:
    """`urgent` has preemptionPolicy Never."""
    scenario = one_full_node()
    scenario["items"][-1]["spec"]["preemptionPolicy"] = "Never"
    return scenario


def a_gang_in_the_way() -> dict[str, Any]:
    """node-1 and node-2 (2 cpu each) full, each holding one pod of ml/train-y, a gang taken
    whole or not at all (`disruptionMode: all`, priority 100); ml/urgent (priority 1000,
    1 cpu) needs either node, so it takes the gang whole: train-y-0 on node-1 and
    train-y-1 on node-2."""

    def member(name: str, node_name: str) -> dict[str, Any]:
        obj = pod(name, "ml", node_name=node_name, priority=100, cpu="2")
        obj["spec"]["schedulingGroup"] = {"podGroupName": "train-y"}
        return obj

    train_y = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "train-y", "namespace": "ml", "uid": str(uuid.uuid4())},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": 2}},
            "disruptionMode": {"all": {}},
            "priority": 100,
        },
    }
    return as_list(
        node("node-1", cpu="2"),
        node("node-2", cpu="2"),
        train_y,
        member("train-y-0", "node-1"),
        member("train-y-1", "node-2"),
        pod("urgent", "ml", priority=1000, cpu="1"),
    )

"""Kubernetes JSON for pods, nodes and PDBs, small enough to read in a test table.

Every object is a plain dict shaped like `kubectl get -o json` prints it, and every snapshot
is decoded through `preemption.decode`, so the tests exercise the real decoding too.
Start times are minutes after `T0`; a pod given no `start` has none (it counts as newest).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from preemptctl.preemption.decision import Decision, Strategy
from preemptctl.preemption.decode import decode_node, decode_pod
from preemptctl.preemption.default_preemption import PreemptionArgs
from preemptctl.preemption.objects import Node, Pod
from preemptctl.preemption.planner import plan
from preemptctl.preemption.snapshot import ClusterSnapshot

Json = dict[str, Any]
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def timestamp(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


def container(
    cpu: str | None = None,
    memory: str | None = None,
    *,
    limits: Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
    host_ports: Sequence[int | tuple[int, str, str]] = (),
    sidecar: bool = False,
    name: str = "c",
) -> Json:
    """A container requesting `cpu`/`memory` (and `extra` resources); ports are `port` or
    `(port, protocol, hostIP)`; `sidecar` makes it a restartable init container."""
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    requests.update(extra or {})
    resources: Json = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = dict(limits)
    made: Json = {"name": name, "image": "busybox", "resources": resources}
    if host_ports:
        made["ports"] = [
            {"containerPort": p, "hostPort": p}
            if isinstance(p, int)
            else {"containerPort": p[0], "hostPort": p[0], "protocol": p[1], "hostIP": p[2]}
            for p in host_ports
        ]
    if sidecar:
        made["restartPolicy"] = "Always"
    return made


def pod(
    name: str,
    *,
    namespace: str = "default",
    priority: int = 0,
    cpu: str | None = None,
    memory: str | None = None,
    node: str | None = None,
    nominated: str | None = None,
    start: float | None = None,
    labels: Mapping[str, str] | None = None,
    uid: str | None = None,
    containers: Sequence[Json] | None = None,
    init_containers: Sequence[Json] = (),
    overhead: Mapping[str, str] | None = None,
    tolerations: Sequence[Json] = (),
    node_selector: Mapping[str, str] | None = None,
    affinity_terms: Sequence[Json] | None = None,
    host_ports: Sequence[int | tuple[int, str, str]] = (),
    preemption_policy: str | None = None,
    terminating: bool = False,
    disrupted_by_scheduler: bool = False,
    phase: str | None = None,
    qos: str | None = None,
    annotations: Mapping[str, str] | None = None,
    pod_affinity: Sequence[Json] = (),
    pod_anti_affinity: Sequence[Json] = (),
    spread: Sequence[Json] = (),
    group: str | None = None,
) -> Json:
    """A pod; bound to `node` (Running) or pending (nominated to `nominated`, if given);
    `group` names the PodGroup it joins.

    Unless `containers` is given it has one container requesting `cpu` and `memory`.
    """
    metadata: Json = {
        "name": name,
        "namespace": namespace,
        "uid": uid or f"uid-{namespace}-{name}",
        "labels": dict(labels or {}),
    }
    if annotations:
        metadata["annotations"] = dict(annotations)
    if terminating:
        metadata["deletionTimestamp"] = timestamp(1000)
    spec: Json = {
        "containers": list(containers)
        if containers is not None
        else [container(cpu, memory, host_ports=host_ports)],
        "priority": priority,
    }
    if init_containers:
        spec["initContainers"] = list(init_containers)
    if overhead:
        spec["overhead"] = dict(overhead)
    if node:
        spec["nodeName"] = node
    if tolerations:
        spec["tolerations"] = list(tolerations)
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if affinity_terms is not None:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": list(affinity_terms)
                }
            }
        }
    if pod_affinity or pod_anti_affinity:
        affinity = spec.setdefault("affinity", {})
        for kind, terms in (("podAffinity", pod_affinity), ("podAntiAffinity", pod_anti_affinity)):
            if terms:
                affinity[kind] = {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}
    if spread:
        spec["topologySpreadConstraints"] = list(spread)
    if preemption_policy:
        spec["preemptionPolicy"] = preemption_policy
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    status: Json = {"phase": phase or ("Running" if node else "Pending")}
    if start is not None:
        status["startTime"] = timestamp(start)
    if nominated:
        status["nominatedNodeName"] = nominated
    if disrupted_by_scheduler:
        status["conditions"] = [
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
        ]
    if qos:
        status["qosClass"] = qos
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def node(
    name: str,
    *,
    cpu: str = "4",
    memory: str = "8Gi",
    pods: int = 110,
    extra: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Json] = (),
    unschedulable: bool = False,
) -> Json:
    allocatable = {"cpu": cpu, "memory": memory, "pods": str(pods), **(extra or {})}
    spec: Json = {}
    if taints:
        spec["taints"] = list(taints)
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels or {"kubernetes.io/hostname": name})},
        "spec": spec,
        "status": {"allocatable": allocatable, "capacity": allocatable},
    }


def term(
    topology_key: str = "kubernetes.io/hostname",
    *,
    match_labels: Mapping[str, str] | None = None,
    expressions: Sequence[Json] = (),
    namespaces: Sequence[str] = (),
    namespace_selector: Json | None = None,
    match_label_keys: Sequence[str] = (),
    mismatch_label_keys: Sequence[str] = (),
) -> Json:
    """A required pod (anti-)affinity term selecting `match_labels` and `expressions`."""
    made: Json = {
        "topologyKey": topology_key,
        "labelSelector": {
            "matchLabels": dict(match_labels or {}),
            "matchExpressions": list(expressions),
        },
    }
    if namespaces:
        made["namespaces"] = list(namespaces)
    if namespace_selector is not None:
        made["namespaceSelector"] = namespace_selector
    if match_label_keys:
        made["matchLabelKeys"] = list(match_label_keys)
    if mismatch_label_keys:
        made["mismatchLabelKeys"] = list(mismatch_label_keys)
    return made


def spread(
    topology_key: str = "zone",
    max_skew: int = 1,
    *,
    match_labels: Mapping[str, str] | None = None,
    when: str = "DoNotSchedule",
    min_domains: int | None = None,
    node_affinity_policy: str | None = None,
    node_taints_policy: str | None = None,
    match_label_keys: Sequence[str] = (),
) -> Json:
    """A topology spread constraint over pods with `match_labels`."""
    made: Json = {
        "maxSkew": max_skew,
        "topologyKey": topology_key,
        "whenUnsatisfiable": when,
        "labelSelector": {"matchLabels": dict(match_labels or {})},
    }
    if min_domains is not None:
        made["minDomains"] = min_domains
    if node_affinity_policy:
        made["nodeAffinityPolicy"] = node_affinity_policy
    if node_taints_policy:
        made["nodeTaintsPolicy"] = node_taints_policy
    if match_label_keys:
        made["matchLabelKeys"] = list(match_label_keys)
    return made


def namespace(name: str, labels: Mapping[str, str] | None = None) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": dict(labels or {})},
    }


# -- storage ------------------------------------------------------------------------------------


def with_claims(made: Json, *claims: str) -> Json:
    made["spec"]["volumes"] = [
        {"name": f"v{i}", "persistentVolumeClaim": {"claimName": claim}}
        for i, claim in enumerate(claims)
    ]
    return made


def claim(
    name: str,
    *,
    volume: str = "",
    modes: tuple[str, ...] = ("ReadWriteOnce",),
    storage_class: str | None = "fast",
    terminating: bool = False,
) -> Json:
    metadata: Json = {"name": name, "namespace": "default"}
    if terminating:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: Json = {"accessModes": list(modes), "storageClassName": storage_class}
    if volume:
        spec["volumeName"] = volume
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": metadata, "spec": spec}


def volume(
    name: str,
    *,
    zone: str | None = None,
    beta_zone: str | None = None,
    hosts: tuple[str, ...] = (),
    driver: str = "",
) -> Json:
    labels: Json = {}
    if zone:
        labels["topology.kubernetes.io/zone"] = zone
    if beta_zone:
        labels["failure-domain.beta.kubernetes.io/zone"] = beta_zone
    spec: Json = {"storageClassName": "fast", "claimRef": {"name": name}}
    if hosts:
        spec["nodeAffinity"] = {
            "required": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "kubernetes.io/hostname",
                                "operator": "In",
                                "values": list(hosts),
                            }
                        ]
                    }
                ]
            }
        }
    if driver:
        spec["csi"] = {"driver": driver, "volumeHandle": f"handle-{name}"}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }


def storage_class(name: str = "fast", *, wait: bool = True, topologies: bool = False) -> Json:
    made: Json = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": "csi.example.com",
        "volumeBindingMode": "WaitForFirstConsumer" if wait else "Immediate",
    }
    if topologies:
        made["allowedTopologies"] = [
            {"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": ["a"]}]}
        ]
    return made


def csinode(name: str, limit: int | None, driver: str = "csi.example.com") -> Json:
    entry: Json = {"name": driver, "nodeID": name}
    if limit is not None:
        entry["allocatable"] = {"count": limit}
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {"name": name},
        "spec": {"drivers": [entry]},
    }


def attachment(name: str, node_name: str, pv: str, driver: str = "csi.example.com") -> Json:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "VolumeAttachment",
        "metadata": {"name": name},
        "spec": {"attacher": driver, "nodeName": node_name, "source": {"persistentVolumeName": pv}},
    }


def taint(key: str, effect: str = "NoSchedule", value: str = "") -> Json:
    return {"key": key, "value": value, "effect": effect}


def toleration(key: str = "", effect: str = "", value: str = "", operator: str = "Equal") -> Json:
    return {"key": key, "operator": operator, "value": value, "effect": effect}


def requirement(key: str, operator: str, *values: str) -> Json:
    return {"key": key, "operator": operator, "values": list(values)}


def pdb(
    name: str,
    *,
    namespace: str = "default",
    match_labels: Mapping[str, str] | None = None,
    selector: Json | None = None,
    no_selector: bool = False,
    allowed: int = 0,
    disrupted: Iterable[str] = (),
) -> Json:
    """A policy/v1 PDB selecting `match_labels` (or the raw `selector`) with a budget."""
    spec: Json = {"minAvailable": 1}
    if not no_selector:
        spec["selector"] = selector if selector is not None else {"matchLabels": match_labels}
    status: Json = {"disruptionsAllowed": allowed}
    disrupted = list(disrupted)
    if disrupted:
        status["disruptedPods"] = {name: timestamp(0) for name in disrupted}
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
        "status": status,
    }


def pod_group(
    name: str,
    *,
    namespace: str = "default",
    priority: int | None = None,
    min_count: int | None = None,
    disruption: str = "single",
    preemption_policy: str | None = None,
    topology: bool = False,
    uid: str | None = None,
    parent: str | None = None,
) -> Json:
    """A scheduling.k8s.io/v1beta1 PodGroup: a gang of `min_count` (basic when None), under
    the CompositePodGroup `parent` when given."""
    spec: Json = {
        "schedulingPolicy": {"basic": {}}
        if min_count is None
        else {"gang": {"minCount": min_count}},
        "disruptionMode": {disruption: {}},
    }
    if parent is not None:
        spec["parentCompositePodGroupName"] = parent
    if priority is not None:
        spec["priority"] = priority
    if preemption_policy:
        spec["preemptionPolicy"] = preemption_policy
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": "topology.kubernetes.io/zone"}]}
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or f"pg-{name}"},
        "spec": spec,
    }


def composite_pod_group(
    name: str,
    *,
    namespace: str = "default",
    priority: int | None = None,
    disruption: str = "single",
    parent: str | None = None,
    min_group_count: int | None = None,
    uid: str | None = None,
) -> Json:
    """A scheduling.k8s.io/v1alpha3 CompositePodGroup (KEP-6012) of `min_group_count` child
    groups (basic when None), under `parent` when given."""
    spec: Json = {
        "schedulingPolicy": {"basic": {}}
        if min_group_count is None
        else {"gang": {"minGroupCount": min_group_count}},
        "disruptionMode": {disruption: {}},
        "workloadRef": {"name": "w", "compositePodGroupTemplateName": name},
    }
    if parent is not None:
        spec["parentCompositePodGroupName"] = parent
    if priority is not None:
        spec["priority"] = priority
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha3",
        "kind": "CompositePodGroup",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or f"cpg-{name}"},
        "spec": spec,
    }


def listing(*items: Json) -> Json:
    """A `v1 List`, as `kubectl get nodes,pods,pdb -A -o json` prints it."""
    return {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": list(items)}


def snapshot(*items: Json, shuffle_seed: int | None = None) -> ClusterSnapshot:
    """A snapshot decoded from the objects (in a shuffled order when a seed is given)."""
    ordered = list(items)
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(ordered)
    return ClusterSnapshot.from_list(listing(*ordered))


def decide(
    *items: Json,
    preemptor: str,
    strategy: Strategy = Strategy.DEFAULT,
    args: PreemptionArgs | None = None,
) -> Decision:
    """The planner's decision for the pod named `preemptor` (`name` or `namespace/name`)."""
    key = preemptor if "/" in preemptor else f"default/{preemptor}"
    return plan(snapshot(*items), key, strategy, args)


def victim_names(decision: Decision) -> list[str]:
    return [victim.name for victim in decision.victims]


def as_pod(obj: Json) -> Pod:
    return decode_pod(obj)


def as_node(obj: Json) -> Node:
    return decode_node(obj)

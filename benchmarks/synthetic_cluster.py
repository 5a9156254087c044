"""A large synthetic cluster snapshot, shaped like `kubectl get nodes,pods,pdb -A -o json` output.

Pods carry what real ones carry (owner references, env, probes, projected service-account
volume, container statuses), because the cost of reading a snapshot is mostly the JSON, and
a benchmark over skeletal pods would flatter the planner. Deterministic for a given seed.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

PRIORITIES = (0, 100, 1000, 10000)
NAMESPACES = tuple(f"team-{i:02d}" for i in range(40))


def _uid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _node(i: int) -> dict[str, Any]:
    name = f"node-{i:05d}"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, name)),
            "resourceVersion": str(10_000 + i),
            "creationTimestamp": "2026-10-01T00:00:00Z",
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "m6i.8xlarge",
                "topology.kubernetes.io/zone": f"zone-{'abc'[i % 3]}",
            },
        },
        "spec": {"podCIDR": f"10.{i // 256 % 256}.{i % 256}.0/24", "providerID": f"aws:///{name}"},
        "status": {
            "capacity": {
                "cpu": "32",
                "memory": "128Gi",
                "pods": "110",
                "ephemeral-storage": "200Gi",
            },
            "allocatable": {
                "cpu": "31850m",
                "memory": "126Gi",
                "pods": "110",
                "ephemeral-storage": "190Gi",
            },
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": "2026-11-21T08:00:00Z",
                    "lastTransitionTime": "2026-10-01T00:00:00Z",
                }
            ],
            "nodeInfo": {
                "kubeletVersion": "v1.34.1",
                "containerRuntimeVersion": "containerd://2.1.0",
            },
        },
    }


# Where `constrained` is given, this share of the pods carries a rule, split as: required
# anti-affinity by hostname against its own app (half), a cluster-wide guard keeping pods
# labelled exclusive=true off its node (a quarter), a DoNotSchedule hostname spread (a quarter).
EXCLUSIVE = {"exclusive": "true"}


def _rule(rng: random.Random, app: str) -> dict[str, Any]:
    draw = rng.random()
    if draw < 0.5:
        return {
            "affinity": {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {"matchLabels": {"app": app}},
                            "topologyKey": "kubernetes.io/hostname",
                        }
                    ]
                }
            }
        }
    if draw < 0.75:
        return {
            "affinity": {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {"matchLabels": dict(EXCLUSIVE)},
                            "namespaceSelector": {},
                            "topologyKey": "kubernetes.io/hostname",
                        }
                    ]
                }
            }
        }
    return {
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": app}},
            }
        ]
    }


def _namespace(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
    }


def _pod(rng: random.Random, node: str, index: int, cpu_m: int, mem_mi: int) -> dict[str, Any]:
    namespace = NAMESPACES[rng.randrange(len(NAMESPACES))]
    app = f"app-{rng.randrange(400):03d}"
    priority = PRIORITIES[rng.randrange(len(PRIORITIES))]
    name = f"{app}-{index:07d}"
    started = (
        f"2026-11-{1 + rng.randrange(20):02d}T{rng.randrange(24):02d}:{rng.randrange(60):02d}:00Z"
    )
    resources = {"requests": {"cpu": f"{cpu_m}m", "memory": f"{mem_mi}Mi"}}
    if rng.random() < 0.5:
        resources["limits"] = {"cpu": f"{cpu_m * 2}m", "memory": f"{mem_mi * 2}Mi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "generateName": f"{app}-",
            "namespace": namespace,
            "uid": _uid(rng),
            "resourceVersion": str(100_000 + index),
            "creationTimestamp": started,
            "labels": {"app": app, "pod-template-hash": "5d8f7c9b6", "tier": "batch"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-10-30T10:00:00Z"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{app}-5d8f7c9b6",
                    "uid": _uid(rng),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": f"registry.example.com/{app}:1.{rng.randrange(20)}.0",
                    "imagePullPolicy": "IfNotPresent",
                    "env": [
                        {"name": "LOG_LEVEL", "value": "info"},
                        {
                            "name": "POD_NAME",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                        },
                    ],
                    "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
                    "readinessProbe": {
                        "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
                        "periodSeconds": 10,
                        "timeoutSeconds": 1,
                        "successThreshold": 1,
                        "failureThreshold": 3,
                    },
                    "resources": resources,
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "volumeMounts": [
                        {
                            "name": "kube-api-access",
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                            "readOnly": True,
                        }
                    ],
                }
            ],
            "dnsPolicy": "ClusterFirst",
            "enableServiceLinks": True,
            "nodeName": node,
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": priority,
            "priorityClassName": f"priority-{priority}",
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
            "securityContext": {},
            "serviceAccountName": "default",
            "terminationGracePeriodSeconds": 30,
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
            "volumes": [
                {
                    "name": "kube-api-access",
                    "projected": {
                        "defaultMode": 420,
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {
                                "configMap": {
                                    "name": "kube-root-ca.crt",
                                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                }
                            },
                        ],
                    },
                }
            ],
        },
        "status": {
            "phase": "Running",
            "hostIP": "10.0.0.1",
            "podIP": f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(256)}",
            "qosClass": "Burstable",
            "startTime": started,
            "conditions": [
                {"type": kind, "status": "True", "lastTransitionTime": started}
                for kind in (
                    "PodReadyToStartContainers",
                    "Initialized",
                    "Ready",
                    "ContainersReady",
                    "PodScheduled",
                )
            ],
            "containerStatuses": [
                {
                    "name": "main",
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "image": f"registry.example.com/{app}:1.0.0",
                    "imageID": "registry.example.com/app@sha256:" + "0" * 64,
                    "containerID": "containerd://" + "f" * 64,
                    "state": {"running": {"startedAt": started}},
                }
            ],
        },
    }


def _pdb(rng: random.Random, index: int) -> dict[str, Any]:
    namespace = NAMESPACES[index % len(NAMESPACES)]
    app = f"app-{rng.randrange(400):03d}"
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": f"pdb-{index}", "namespace": namespace, "uid": _uid(rng)},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": app}}},
        "status": {"disruptionsAllowed": rng.randrange(3), "currentHealthy": 3, "expectedPods": 3},
    }


def constrained_preemptor(index: int) -> dict[str, Any]:
    """A pending high-priority pod with a rule, in turn: none, anti-affinity by hostname
    against a busy app, a hostname spread over its own app, and the exclusive label that the
    cluster-wide guards keep away."""
    made = preemptor(name=f"urgent-{index}")
    made["metadata"]["namespace"] = "team-00"
    kind = index % 4
    if kind == 1:
        made["spec"]["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"app": "app-007"}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        }
    elif kind == 2:
        made["metadata"]["labels"] = {"app": "app-011"}
        made["spec"]["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "app-011"}},
            }
        ]
    elif kind == 3:
        made["metadata"]["labels"] = dict(EXCLUSIVE)
    return made


def preemptor(name: str = "urgent-0", cpu: str = "6", memory: str = "8Gi") -> dict[str, Any]:
    """A pending high-priority pod that fits nowhere without preemption."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "online",
            "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, name)),
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "nginx",
                    "resources": {"requests": {"cpu": cpu, "memory": memory}},
                }
            ],
            "priority": 1_000_000,
            "priorityClassName": "high-priority",
        },
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }


GANG_SIZE = 16


def pod_group_object(
    name: str, namespace: str, priority: int, *, min_count: int, whole: bool
) -> dict[str, Any]:
    """A scheduling.k8s.io/v1beta1 PodGroup: a gang of `min_count`, disruptionMode all or
    single."""
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, f"podgroup/{namespace}/{name}")),
        },
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": min_count}},
            "disruptionMode": {"all": {}} if whole else {"single": {}},
            "priority": priority,
        },
    }


def _gangs(rng: random.Random, pods: list[dict[str, Any]], share: float) -> list[dict[str, Any]]:
    """Put `share` of the pods in gangs of `GANG_SIZE` (every fifth pod at 20%, so a gang
    spans two or three nodes), half of them disruptionMode all; returns the PodGroups."""
    step = max(1, round(1 / share))
    chosen = pods[::step]
    groups = []
    for start in range(0, len(chosen) - GANG_SIZE + 1, GANG_SIZE):
        members = chosen[start : start + GANG_SIZE]
        namespace = members[0]["metadata"]["namespace"]
        name = f"gang-{start // GANG_SIZE:05d}"
        groups.append(
            pod_group_object(
                name,
                namespace,
                PRIORITIES[rng.randrange(len(PRIORITIES))],
                min_count=GANG_SIZE,
                whole=rng.random() < 0.5,
            )
        )
        for member in members:
            member["metadata"]["namespace"] = namespace
            member["spec"]["schedulingGroup"] = {"podGroupName": name}
    return groups


def pending_gang(
    name: str = "train-0", size: int = 32, cpu: str = "6", memory: str = "8Gi"
) -> list[dict[str, Any]]:
    """A pending high-priority PodGroup of `size` pods, each needing most of a node."""
    made = [pod_group_object(name, "online", 1_000_000, min_count=size, whole=True)]
    for i in range(size):
        member = preemptor(f"{name}-{i:02d}", cpu, memory)
        member["spec"]["schedulingGroup"] = {"podGroupName": name}
        made.append(member)
    return made


def cluster(
    nodes: int = 5000,
    pods_per_node: int = 30,
    pdbs: int = 200,
    seed: int = 7,
    constrained: float = 0.0,
    gangs: float = 0.0,
) -> dict[str, Any]:
    """Nodes nearly full (about 1 cpu free each) of mixed-priority pods, plus PDBs; with
    `constrained` > 0, that share of the pods carries anti-affinity or spread rules, and
    the snapshot holds the Namespace objects their namespaceSelectors read; with `gangs` > 0,
    that share of the pods is in PodGroups of 16 (see `_gangs`)."""
    rng = random.Random(seed)
    rules = random.Random(seed + 1)
    items: list[dict[str, Any]] = []
    if constrained:
        items.extend(_namespace(name) for name in (*NAMESPACES, "online"))
    index = 0
    for i in range(nodes):
        node = _node(i)
        items.append(node)
        for _ in range(pods_per_node):
            made = _pod(rng, node["metadata"]["name"], index, 1000 + rng.randrange(-20, 20), 3800)
            if constrained and rules.random() < constrained:
                made["spec"].update(_rule(rules, made["metadata"]["labels"]["app"]))
            items.append(made)
            index += 1
    if gangs:
        pods = [item for item in items if item["kind"] == "Pod"]
        items.extend(_gangs(random.Random(seed + 2), pods, gangs))
    items.extend(_pdb(rng, i) for i in range(pdbs))
    items.append(preemptor())
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}


def hostile_pod(index: int, node: str, labels: int = 12_000) -> dict[str, Any]:
    """Issue 20's finding 2: a running pod a tenant made huge within etcd's limit, a 250 KiB
    annotation and `labels` labels (about 1.3 MB of JSON at 12,000)."""
    made = _pod(random.Random(index), node, 9_000_000 + index, 100, 100)
    made["metadata"]["name"] = f"hostile-{index:04d}"
    made["metadata"]["namespace"] = "tenant"
    made["metadata"]["uid"] = f"hostile-{index:04d}"
    made["metadata"]["labels"] = {
        f"tenant.example.com/k{i:05d}": f"v{i:059d}" for i in range(labels)
    }
    made["metadata"]["annotations"] = {"tenant.example.com/blob": "x" * 250 * 1024}
    return made

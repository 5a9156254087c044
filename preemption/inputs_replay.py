"""Recorded decision inputs replayed: the planner's arguments rebuilt, decisions compared.

`rebuild` turns the JSON `recorded_inputs.to_json` wrote back into a `ClusterSnapshot` in
which each node's unrecorded pods stand as one pod carrying their summed requests and ports
plus placeholders for their count; `compare` says how a replayed decision differs from the
recorded one (`recorded_inputs.decision_summary` of each). A replay whose dry run walks a node
recorded as sums only cannot judge that node's victims: `Rebuilt.summarised` lets the caller
say so. What `preemptctl replay --decision` runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from preemptctl.preemption.dataclass_codec import DecodeError, decode
from preemptctl.preemption.decision import Strategy
from preemptctl.preemption.default_preemption import PreemptionArgs
from preemptctl.preemption.objects import (
    CSINode,
    HostPort,
    Namespace,
    Node,
    PersistentVolume,
    PersistentVolumeClaim,
    Pod,
    PodDisruptionBudget,
    Resources,
    StorageClass,
    VolumeAttachment,
)
from preemptctl.preemption.recorded_inputs import FORMAT
from preemptctl.preemption.snapshot import ClusterSnapshot

SUMMARY_NAMESPACE = ""
"""The namespace of the stand-ins for a node's unrecorded pods: no selector names it."""
STAND_IN_PRIORITY = 2**31 - 1
"""Stand-ins are never victims: a replay that would need their victims says so instead."""


class RecordedInputsError(ValueError):
    """Recorded inputs this version cannot read (a newer format, or damaged data)."""


@dataclass(slots=True)
class Rebuilt:
    """The planner's arguments again: the view, the preemptor, strategy and arguments."""

    snapshot: ClusterSnapshot
    preemptor: Pod
    strategy: Strategy
    args: PreemptionArgs
    recorded: dict[str, Any]
    summarised: frozenset[str]
    """Nodes whose unrecorded pods stand as sums: a dry run there cannot be judged."""
    claims: list[str]


_STORAGE: dict[str, tuple[type[Any], str, str]] = {
    "claims": (PersistentVolumeClaim, "claims", "key"),
    "volumes": (PersistentVolume, "volumes", "name"),
    "storageClasses": (StorageClass, "storage_classes", "name"),
    "csiNodes": (CSINode, "csinodes", "name"),
    "volumeAttachments": (VolumeAttachment, "volume_attachments", "name"),
}


def rebuild(document: Mapping[str, Any]) -> Rebuilt:
    """A snapshot and planner arguments from `to_json`'s output; `RecordedInputsError` when
    the document is not one this version can read."""
    try:
        version = document.get("format")
        if not isinstance(version, int) or version > FORMAT:
            raise RecordedInputsError(
                f"recorded inputs in format {version!r}; this version reads up to {FORMAT}"
            )
        snapshot = ClusterSnapshot()
        for node in document["nodes"]:
            snapshot.upsert_node(decode(Node, node))
        for pod in document["pods"]:
            snapshot.upsert_pod(decode(Pod, pod))
        for name, (count, requests, ports) in document["podSums"].items():
            for pod in stand_ins(name, count, decode(Resources, requests), decode_ports(ports)):
                snapshot.upsert_pod(pod)
        for pdb in document["pdbs"]:
            snapshot.upsert_pdb(decode(PodDisruptionBudget, pdb))
        for namespace in document["namespaces"]:
            snapshot.upsert_namespace(decode(Namespace, namespace))
        for kind, objs in document.get("storage", {}).items():
            cls, store, key = _STORAGE[kind]
            for raw in objs:
                obj = decode(cls, raw)
                getattr(snapshot, store)[getattr(obj, key)] = obj
        for uid, node_name in document["rejected"].items():
            snapshot.reject_pod(uid, node_name)
        preemptor = decode(Pod, document["preemptor"])
        snapshot.upsert_pod(preemptor)
        return Rebuilt(
            snapshot,
            preemptor,
            Strategy(document["strategy"]),
            decode(PreemptionArgs, document["args"]),
            dict(document["decision"]),
            frozenset(document["podSums"]),
            list(document["claims"]),
        )
    except RecordedInputsError:
        raise
    except DecodeError as error:
        raise RecordedInputsError(str(error)) from None
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise RecordedInputsError(f"recorded inputs unreadable: {error!r}") from None


def decode_ports(raw: Any) -> tuple[HostPort, ...]:
    return tuple(HostPort(*port) for port in raw)


def stand_ins(node: str, count: int, requests: Resources, ports: tuple[HostPort, ...]) -> list[Pod]:
    """`count` pods on `node` that together request `requests` and use `ports`."""
    pods = [
        Pod(
            SUMMARY_NAMESPACE,
            f"{node}#{index}",
            f"stand-in/{node}/{index}",
            STAND_IN_PRIORITY,
            requests if index == 0 else Resources(),
            node_name=node,
            host_ports=ports if index == 0 else (),
            phase="Running",
        )
        for index in range(count)
    ]
    return pods


def compare(recorded: Mapping[str, Any], replayed: Mapping[str, Any]) -> list[str]:
    """How the replayed decision differs from the recorded one, one line per difference;
    empty when it is the same decision (verdict, node and victims)."""
    lines = []
    if recorded["verdict"] != replayed["verdict"]:
        lines.append(f"verdict: {recorded['verdict']} -> {replayed['verdict']}")
    if recorded["node"] != replayed["node"]:
        lines.append(f"node: {recorded['node'] or '(none)'} -> {replayed['node'] or '(none)'}")
    before = {v["uid"]: v for v in recorded["victims"]}
    after = {v["uid"]: v for v in replayed["victims"]}
    removed = [_victim(v) for uid, v in before.items() if uid not in after]
    added = [_victim(v) for uid, v in after.items() if uid not in before]
    if removed:
        lines.append(f"victims removed: {', '.join(removed)}")
    if added:
        lines.append(f"victims added: {', '.join(added)}")
    if lines and recorded["criterion"] != replayed["criterion"]:
        lines.append(
            f"deciding criterion: {recorded['criterion'] or '(none)'} -> "
            f"{replayed['criterion'] or '(none)'}"
        )
    return lines


def _victim(victim: Mapping[str, Any]) -> str:
    return f"{victim['namespace']}/{victim['name']} (priority {victim['priority']})"

"""Recorded decision inputs replayed: the planner's arguments rebuilt, decisions compared.

`rebuild` turns recorded inputs back into a `ClusterSnapshot` and the planner's arguments:
inputs written whole (`recorded_inputs.to_json`, format 2, and format 1, whose nodes beyond
the dry run's kept their pods as sums: those stand as one pod carrying the summed requests
and ports plus placeholders for their count), or the root of a decision written for the
shared layout together with the objects it references (`shared_inputs.resolve`). `compare`
says how a replayed decision differs from the recorded one (`recorded_inputs.
decision_summary` or `group_decision_summary` of each). What `preemptctl replay --decision`
runs.

Recorded inputs come from a database a person could have written to: nothing in them is
trusted. Each part is checked before use (a missing or mistyped key is a
`RecordedInputsError` naming it, never a KeyError), and counts are capped before anything is
built for them (`MAX_OBJECTS` objects, `MAX_PODS_PER_NODE` unrecorded pods on a node), so a
small record that claims millions of pods is refused rather than built.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from preemptctl.preemption.dataclass_codec import DecodeError, decode
from preemptctl.preemption.decision import Strategy
from preemptctl.preemption.default_preemption import PreemptionArgs
from preemptctl.preemption.objects import (
    CompositePodGroup,
    CSINode,
    HostPort,
    Namespace,
    Node,
    PersistentVolume,
    PersistentVolumeClaim,
    Pod,
    PodDisruptionBudget,
    PodGroup,
    Resources,
    StorageClass,
    VolumeAttachment,
)
from preemptctl.preemption.pod_group_preemption import POD_GROUP_STRATEGY
from preemptctl.preemption.recorded_inputs import FORMAT, STORAGE_KINDS
from preemptctl.preemption.snapshot import ClusterSnapshot

SUMMARY_NAMESPACE = ""
"""The namespace of the stand-ins for a node's unrecorded pods: no selector names it."""
STAND_IN_PRIORITY = 2**31 - 1
"""Stand-ins are never victims: a replay that would need their victims says so instead."""
MAX_OBJECTS = 3_000_000
"""Objects (and stand-ins) a replay builds at most: 20 times the 150,000 pods of a cluster
at Kubernetes' tested limits, far below what a worker's memory would hold anyway."""
MAX_PODS_PER_NODE = 10_000
"""Unrecorded pods a format-1 node may declare: Kubernetes' kubelet runs a few hundred."""

STRATEGIES = frozenset({*map(str, Strategy), POD_GROUP_STRATEGY})


class RecordedInputsError(ValueError):
    """Recorded inputs this version cannot read (a newer format, or damaged data)."""


@dataclass(slots=True)
class Rebuilt:
    """The planner's arguments again: the view, the preemptor (or group), strategy and
    arguments."""

    snapshot: ClusterSnapshot
    preemptor: Pod | None
    """A pod decision's preemptor; None for a group decision's."""
    pod_group: str
    """A group decision's group ("namespace/name"); "" for a pod decision's."""
    strategy: str
    args: PreemptionArgs
    recorded: dict[str, Any]
    summarised: frozenset[str]
    """Nodes whose unrecorded pods stand as sums (format 1): a dry run there cannot be
    judged."""
    claims: list[str]


def _add_storage(store: str, key: str, cls: type[Any]) -> Callable[[ClusterSnapshot, Any], None]:
    def add(snapshot: ClusterSnapshot, raw: Any) -> None:
        obj = decode(cls, raw)
        getattr(snapshot, store)[getattr(obj, key)] = obj

    return add


_STORAGE_CLASSES: dict[str, type[Any]] = {
    "claims": PersistentVolumeClaim,
    "volumes": PersistentVolume,
    "storageClasses": StorageClass,
    "csiNodes": CSINode,
    "volumeAttachments": VolumeAttachment,
}
_ADD: dict[str, Callable[[ClusterSnapshot, Any], None]] = {
    "nodes": lambda snapshot, raw: snapshot.upsert_node(decode(Node, raw)),
    "pods": lambda snapshot, raw: snapshot.upsert_pod(decode(Pod, raw)),
    "pdbs": lambda snapshot, raw: snapshot.upsert_pdb(decode(PodDisruptionBudget, raw)),
    "namespaces": lambda snapshot, raw: snapshot.upsert_namespace(decode(Namespace, raw)),
    "podGroups": lambda snapshot, raw: snapshot.upsert_pod_group(decode(PodGroup, raw)),
    "compositePodGroups": lambda snapshot, raw: snapshot.upsert_composite_pod_group(
        decode(CompositePodGroup, raw)
    ),
    **{
        kind: _add_storage(store, key, _STORAGE_CLASSES[kind])
        for kind, (store, key) in STORAGE_KINDS.items()
    },
}


def inline_objects(document: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """The objects of inputs written whole, as (tag, JSON): nodes, pods, PDBs, Namespaces,
    PodGroups, CompositePodGroups, storage objects."""
    for tag in ("nodes", "pods", "pdbs", "namespaces", "podGroups", "compositePodGroups"):
        required = tag not in ("podGroups", "compositePodGroups")
        yield from ((tag, raw) for raw in _list(document, tag, required=required))
    storage = document.get("storage", {})
    if not isinstance(storage, Mapping):
        raise RecordedInputsError("recorded inputs unreadable: 'storage' is not an object")
    for kind, objs in storage.items():
        if kind not in STORAGE_KINDS:
            raise RecordedInputsError(f"recorded inputs unreadable: unknown storage {kind!r:.40}")
        if not isinstance(objs, list):
            raise RecordedInputsError(f"recorded inputs unreadable: storage {kind} is no list")
        yield from ((kind, raw) for raw in objs)


def rebuild(
    document: Mapping[str, Any], objects: Iterable[tuple[str, Any]] | None = None
) -> Rebuilt:
    """A snapshot and planner arguments from recorded inputs: `document` whole, or its root
    with `objects` (what it references, as `shared_inputs.resolve` yields it).
    `RecordedInputsError` when they are not inputs this version can read."""
    try:
        if not isinstance(document, Mapping):
            raise RecordedInputsError("recorded inputs unreadable: not a JSON object")
        version = document.get("format")
        if type(version) is not int or version > FORMAT or version < 1:
            raise RecordedInputsError(
                f"recorded inputs in format {version!r:.20}; this version reads up to {FORMAT}"
            )
        strategy = document.get("strategy")
        if strategy not in STRATEGIES:
            raise RecordedInputsError(f"recorded inputs name no known strategy: {strategy!r:.40}")
        recorded = decision_of(document.get("decision"))
        claims = _list(document, "claims")
        if not all(isinstance(claim, str) for claim in claims):
            raise RecordedInputsError("recorded inputs unreadable: a claim is not a string")
        rejected = document.get("rejected", {})
        if not isinstance(rejected, Mapping) or not all(
            isinstance(uid, str) and (node is None or isinstance(node, str))
            for uid, node in rejected.items()
        ):
            raise RecordedInputsError("recorded inputs unreadable: 'rejected' is malformed")
        args = decode(PreemptionArgs, _object(document, "args"))
        pod_group = ""
        preemptor: Pod | None = None
        if strategy == POD_GROUP_STRATEGY:
            named = document.get("podGroup")
            if not isinstance(named, str) or "/" not in named:
                raise RecordedInputsError("recorded inputs of a group decision name no group")
            pod_group = named
        else:
            preemptor = decode(Pod, _object(document, "preemptor"))
        snapshot = ClusterSnapshot()
        built = 0
        for tag, raw in inline_objects(document) if objects is None else objects:
            add = _ADD.get(tag)
            if add is None:
                raise RecordedInputsError(f"recorded inputs unreadable: unknown kind {tag!r:.40}")
            built += 1
            if built > MAX_OBJECTS:
                raise RecordedInputsError(
                    f"recorded inputs hold more than {MAX_OBJECTS:,} objects; refused"
                )
            add(snapshot, raw)
        summarised = _stand_ins(snapshot, document.get("podSums", {}), built)
        for uid, node_name in rejected.items():
            snapshot.reject_pod(uid, node_name)
        if preemptor is not None:
            snapshot.upsert_pod(preemptor)
        return Rebuilt(snapshot, preemptor, pod_group, strategy, args, recorded, summarised, claims)
    except RecordedInputsError:
        raise
    except DecodeError as error:
        raise RecordedInputsError(f"recorded inputs unreadable: {error}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise RecordedInputsError(f"recorded inputs unreadable: {error!r:.200}") from None


def _list(document: Mapping[str, Any], key: str, *, required: bool = True) -> list[Any]:
    found = document.get(key, None if required else [])
    if not isinstance(found, list):
        raise RecordedInputsError(f"recorded inputs unreadable: {key!r} is missing or not a list")
    return found


def _object(document: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    found = document.get(key)
    if not isinstance(found, Mapping):
        raise RecordedInputsError(f"recorded inputs unreadable: {key!r} is missing or no object")
    return found


def _stand_ins(snapshot: ClusterSnapshot, sums: Any, built: int) -> frozenset[str]:
    """Format 1: each summarised node's unrecorded pods as stand-ins, counts capped first."""
    if not isinstance(sums, Mapping):
        raise RecordedInputsError("recorded inputs unreadable: 'podSums' is not an object")
    checked = []
    for name, summed in sums.items():
        if not isinstance(summed, list) or len(summed) != 3:
            raise RecordedInputsError(f"recorded inputs unreadable: podSums of {name!r:.60}")
        count, requests, ports = summed
        if type(count) is not int or not 0 <= count <= MAX_PODS_PER_NODE:
            raise RecordedInputsError(
                f"recorded inputs declare {count!r:.20} unrecorded pods on node {name!r:.60}; "
                f"at most {MAX_PODS_PER_NODE:,} are read"
            )
        built += count
        if built > MAX_OBJECTS:
            raise RecordedInputsError(
                f"recorded inputs hold more than {MAX_OBJECTS:,} objects; refused"
            )
        checked.append((name, count, decode(Resources, requests), decode_ports(ports)))
    for name, count, requests, ports in checked:
        for pod in stand_ins(name, count, requests, ports):
            snapshot.upsert_pod(pod)
    return frozenset(sums)


def decode_ports(raw: Any) -> tuple[HostPort, ...]:
    if not isinstance(raw, list):
        raise RecordedInputsError("recorded inputs unreadable: ports are not a list")
    return tuple(decode(HostPort, port) for port in raw)


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


def decision_of(raw: Any) -> dict[str, Any]:
    """The recorded decision (a summary, as `decision_summary` writes it), checked field by
    field: what `compare` and `preemptctl replay` read of it."""
    if not isinstance(raw, Mapping):
        raise RecordedInputsError("recorded inputs hold no decision")

    def field(key: str, *kinds: type[Any]) -> Any:
        value = raw.get(key)
        if not isinstance(value, kinds):
            raise RecordedInputsError(f"the recorded decision's {key!r} is missing or malformed")
        return value

    victims = field("victims", list)
    for victim in victims:
        if not (
            isinstance(victim, Mapping)
            and all(isinstance(victim.get(k), str) for k in ("namespace", "name", "uid"))
            and type(victim.get("priority")) is int
        ):
            raise RecordedInputsError("the recorded decision's 'victims' are malformed")
    evaluated = field("evaluated", list)
    if not all(isinstance(node, str) for node in evaluated):
        raise RecordedInputsError("the recorded decision's 'evaluated' are malformed")
    summary = {
        "verdict": field("verdict", str),
        "node": field("node", str, type(None)),
        "victims": [dict(victim) for victim in victims],
        "criterion": field("criterion", str, type(None)),
        "message": field("message", str),
        "evaluated": list(evaluated),
    }
    if "nominations" in raw:
        nominations = field("nominations", Mapping)
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in nominations.items()):
            raise RecordedInputsError("the recorded decision's 'nominations' are malformed")
        summary["nominations"] = dict(nominations)
        summary["units"] = list(field("units", list))
    return summary


def compare(recorded: Mapping[str, Any], replayed: Mapping[str, Any]) -> list[str]:
    """How the replayed decision differs from the recorded one, one line per difference;
    empty when it is the same decision (verdict, node and victims; for a group, where each
    member is placed)."""
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
    placed_before = recorded.get("nominations") or {}
    placed_after = replayed.get("nominations") or {}
    moved = [
        f"{pod} {placed_before.get(pod) or '(none)'} -> {placed_after.get(pod) or '(none)'}"
        for pod in sorted({*placed_before, *placed_after})
        if placed_before.get(pod) != placed_after.get(pod)
    ]
    if moved:
        lines.append(f"nominations: {', '.join(moved)}")
    if lines and recorded["criterion"] != replayed["criterion"]:
        lines.append(
            f"deciding criterion: {recorded['criterion'] or '(none)'} -> "
            f"{replayed['criterion'] or '(none)'}"
        )
    return lines


def _victim(victim: Mapping[str, Any]) -> str:
    return f"{victim['namespace']}/{victim['name']} (priority {victim['priority']})"

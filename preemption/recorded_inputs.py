"""A decision's inputs as plain JSON data, and the planner's arguments rebuilt from them.

`preemptctl replay --decision` answers "would this version have evicted the same pods?"
long after the cluster has changed, so each decision keeps what the planner read. Keeping
the whole cluster view (150,000 pods) per decision is more than a ledger can afford; what a
decision depends on is much less:

- the preemptor, the strategy and the planner's arguments;
- every node (the filter pass judges each one, and the dry run's window depends on how many
  might help) with, for most nodes, only what the filters read of their pods: the summed
  requests, the pod count and (for a preemptor asking for host ports) the ports in use;
- whole pods where the planner reads pods one by one: on each node the dry run evaluated,
  the preemptor's own and nominated nodes and the chosen one; every nominated pod; pods
  whose required anti-affinity selects the preemptor (they repel it); pods the preemptor's
  affinity or spread selectors can select; pods with volumes when the preemptor has volumes;
- the PDBs of the namespaces those pods live in, every Namespace, the storage objects when
  the preemptor has volumes, the pods the view could not read;
- the claims respected (as the planner saw them: applied to the view) and the decision made.

Two steps, so that the part under the decision lock stays cheap: `capture` (under the lock)
takes references only (the view replaces a changed object, never mutates it) and the few
per-node sums; `to_json` (after the commit) encodes them. `rebuild` turns the JSON back into
a `ClusterSnapshot` in which each node's unrecorded pods stand as one pod carrying their
summed requests and ports plus placeholders for their count; `compare` says how a replayed
decision differs from the recorded one. A replay whose dry run walks a node recorded as
sums only cannot judge that node's victims: `Rebuilt.summarised` lets the caller say so.

Objects are encoded field by field from their dataclass definitions (fields at their
default are left out), and decoded by their type hints, so a field added later reads as its
default in inputs recorded before it.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

from preemptctl.preemption.decision import PLANNER_VERSION, Decision, Strategy
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
from preemptctl.preemption.pod_constraints import term_matches
from preemptctl.preemption.selectors import label_selector_matches
from preemptctl.preemption.snapshot import ClusterSnapshot

FORMAT = 1
"""The layout of the JSON `to_json` writes; `rebuild` refuses a newer one."""

SUMMARY_NAMESPACE = ""
"""The namespace of the stand-ins for a node's unrecorded pods: no selector names it."""
STAND_IN_PRIORITY = 2**31 - 1
"""Stand-ins are never victims: a replay that would need their victims says so instead."""


# -- capture (under the decision lock: references and sums only) ------------------------------


class NodeSums(NamedTuple):
    """What the filters read of a node's pods: summed requests, count, host ports in use
    (a tuple: one is built per node under the decision lock)."""

    node: Node
    milli_cpu: int
    memory: int
    ephemeral_storage: int
    scalars: dict[str, int] | None
    pods: int
    ports: tuple[HostPort, ...]


@dataclass(frozen=True, slots=True)
class Captured:
    """One decision's inputs as references into the view, taken under the decision lock."""

    preemptor: Pod
    strategy: Strategy
    args: PreemptionArgs
    nodes: list[tuple[Any, ...]]  # NodeSums' fields: a plain tuple is 3x cheaper to build
    pods: list[Pod]
    pdbs: list[PodDisruptionBudget]
    namespaces: list[Namespace]
    storage: dict[str, list[Any]] | None
    rejected: dict[str, str | None]
    claims: list[str]
    decision: dict[str, Any]


def _selects_nothing_unlabelled(selectors: Iterable[Any]) -> bool:
    """No selector matches a pod without labels (so the stand-ins cannot be counted)."""
    return not any(
        selector is not None and selector.valid and label_selector_matches(selector, {})
        for selector in selectors
    )


def capture(
    snapshot: ClusterSnapshot,
    preemptor: Pod,
    strategy: Strategy,
    args: PreemptionArgs | None,
    decision: Decision,
    claims: Iterable[str] = (),
) -> Captured:
    """The inputs of `decision`, just made over `snapshot` (claims applied) for `preemptor`."""
    args = args or PreemptionArgs()
    affinity = (*preemptor.pod_affinity, *preemptor.pod_anti_affinity)
    selectors = [term.selector for term in affinity]
    selectors += [spread.selector for spread in preemptor.spread_constraints]
    # A selector that matches unlabelled pods would count the stand-ins: keep every pod.
    everything = not _selects_nothing_unlabelled(selectors)
    whole_nodes = {node.node for node in decision.rationale.evaluated}
    whole_nodes.update(
        name
        for name in (preemptor.node_name, preemptor.nominated_node_name, decision.nominated_node)
        if name
    )
    ports = bool(preemptor.host_ports)
    infos = snapshot.nodes()
    nodes = [
        (
            info.node,
            info.milli_cpu,
            info.memory,
            info.ephemeral_storage,
            dict(info.scalars) if info.scalars else None,
            len(info.pods),
            tuple(info.used_ports()) if ports else (),
        )
        for info in infos
    ]
    pods: dict[str, Pod] = {}
    for info in infos if everything else filter(None, map(snapshot.node, whole_nodes)):
        pods.update(info.pods)
    for pod in snapshot.all_nominated_pods():
        pods[pod.uid] = pod
    bound = snapshot.bound
    own_labels = snapshot.namespace_labels(preemptor.namespace)
    for terms, _ in bound.anti_affinity_groups_for(preemptor.labels):
        if any(term_matches(term, preemptor, own_labels) for term in terms):
            pods.update(bound.anti_affinity[terms])  # the group repels the preemptor
    storage: dict[str, list[Any]] | None = None
    if preemptor.claims or preemptor.inline_csi:
        pods.update(bound.with_volumes)
        storage = {
            "claims": list(snapshot.claims.values()),
            "volumes": list(snapshot.volumes.values()),
            "storageClasses": list(snapshot.storage_classes.values()),
            "csiNodes": list(snapshot.csinodes.values()),
            "volumeAttachments": list(snapshot.volume_attachments.values()),
        }
    if not everything and any(selector is not None for selector in selectors):
        index = snapshot.pod_index()
        namespaces = {preemptor.namespace}
        for term in affinity:
            namespaces.update(term.namespaces)
            if term.namespace_selector is not None:
                namespaces.update(index.by_namespace)
        for selector in selectors:
            if selector is None or not selector.valid:
                continue
            for namespace in namespaces:
                for pod in index.selectable(namespace, selector):
                    pods[pod.uid] = pod
    pods.pop(preemptor.uid, None)
    return Captured(
        preemptor=preemptor,
        strategy=strategy,
        args=args,
        nodes=nodes,
        pods=list(pods.values()),
        pdbs=list(snapshot.pdbs.values()),  # those of the kept pods' namespaces: after
        namespaces=list(snapshot.namespaces.values()),
        storage=storage,
        rejected=dict(snapshot.rejected),
        claims=list(claims),
        decision=decision_summary(decision),
    )


def decision_summary(decision: Decision) -> dict[str, Any]:
    """What a replay compares: verdict, node, victims, the criterion that decided."""
    return {
        "verdict": str(decision.verdict),
        "node": decision.nominated_node,
        "victims": [victim.to_json() for victim in decision.victims],
        "criterion": decision.rationale.deciding_criterion,
        "message": decision.message,
        "evaluated": [verdict.node for verdict in decision.rationale.evaluated],
    }


# -- to JSON (after the commit) --------------------------------------------------------------


CACHE_BYTES = 32 * 1024 * 1024
"""The JSON an `EncodedCache` keeps between decisions, by default: a 5,000-node decision
uses about 2 MiB for its nodes and 9 MiB for the 15,000 pods of its dry run."""
ENTRY_OVERHEAD = 200
"""Bytes an entry costs beyond its JSON (its slots in the dict, its tuple, Fragment and
str)."""


class EncodedCache:
    """Pods' and nodes' JSON reused between decisions, least recently used dropped first
    once over `max_bytes`.

    The view replaces a changed pod or node rather than mutating it, so one object always
    encodes the same: successive decisions read every node, and the dry runs of many cover
    some of the same pods. Entries are keyed by the object's id and hold the object, so an
    id is not reused while cached (a replaced object stays alive until its entry is
    dropped). Three flat dicts rather than a tuple per entry: the cyclic collector then has
    nothing new to track per entry (its full passes over tens of thousands of tuples cost
    more than the encoding). One thread at a time: the recorder's."""

    def __init__(self, max_bytes: int = CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        """What the entries cost, their JSON and `ENTRY_OVERHEAD` each."""
        self._json: dict[int, orjson.Fragment] = {}  # least recently used first
        self._held: dict[int, object] = {}
        self._sizes: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._json)

    def encoded(self, objs: Iterable[object]) -> list[orjson.Fragment]:
        """Each object's JSON, in order: reused, or encoded and kept."""
        cached = self._json
        pop = cached.pop
        found = []
        for obj in objs:
            key = id(obj)
            fragment = pop(key, None)
            if fragment is None:
                # As str: the bytes orjson returns keep its whole buffer (4 KiB of memory
                # for a 0.5 KiB pod), and allocating a fresh one for each costs more than
                # the encoding.
                text = orjson.dumps(encode(obj)).decode()
                fragment = orjson.Fragment(text)
                self._held[key] = obj
                self._sizes[key] = size = len(text) + ENTRY_OVERHEAD
                self.bytes += size
            cached[key] = fragment  # the most recently used, last
            found.append(fragment)
        if self.bytes > self.max_bytes:
            self._drop_oldest()
        return found

    def _drop_oldest(self) -> None:
        """Down to three quarters of the limit, least recently used first (one pass, so
        that each decision does not pay for its own eviction)."""
        target = self.max_bytes * 3 // 4
        dropped = []
        for key in self._json:
            if self.bytes <= target:
                break
            dropped.append(key)
            self.bytes -= self._sizes[key]
        for key in dropped:
            del self._json[key], self._held[key], self._sizes[key]


def dumps(captured: Captured, cache: EncodedCache | None = None) -> bytes:
    """The captured inputs as compact UTF-8 JSON (what `to_json` gives, serialised), each
    pod's and node's part reused from `cache` when an earlier decision encoded it."""
    return orjson.dumps(to_json(captured, cache))


def to_json(captured: Captured, cache: EncodedCache | None = None) -> dict[str, Any]:
    """The captured inputs as JSON-able data (see the module docstring for what is kept);
    pods' and nodes' as JSON fragments from `cache` when given."""
    nodes: list[Any] = list(map(_FIRST, captured.nodes))
    if cache is None:
        nodes, pods = list(map(encode, nodes)), list(map(encode, captured.pods))
    else:
        nodes, pods = cache.encoded(nodes), cache.encoded(captured.pods)
    kept_on: dict[str, list[Pod]] = {}
    for pod in (*captured.pods, captured.preemptor):
        if pod.node_name and not pod.is_terminal():
            kept_on.setdefault(pod.node_name, []).append(pod)
    sums: dict[str, list[Any]] = {}
    for fields in captured.nodes:
        node, cpu, memory, ephemeral, scalars, count, ports = fields
        kept = kept_on.get(node.name)
        if kept is None:  # most nodes: none of their pods kept whole
            if count > 0:
                shown = _requests_json(cpu, memory, ephemeral, scalars)
                sums[node.name] = [count, shown, encode(ports) if ports else []]
            continue
        total = NodeSums(*fields)
        count -= len(kept)
        if count <= 0:
            continue
        left = list(ports)  # captured only when the preemptor asks for host ports
        for pod in kept:
            for port in pod.host_ports:
                if port in left:
                    left.remove(port)
        sums[node.name] = [count, encode(_rest(total, kept)), encode(tuple(left))]
    namespaces = set(map(_NAMESPACE, captured.pods))
    namespaces.add(captured.preemptor.namespace)
    document: dict[str, Any] = {
        "format": FORMAT,
        "plannerVersion": PLANNER_VERSION,
        "strategy": str(captured.strategy),
        "args": encode(captured.args),
        "preemptor": encode(captured.preemptor),
        "nodes": nodes,
        "pods": pods,
        "podSums": sums,
        "pdbs": [encode(pdb) for pdb in captured.pdbs if pdb.namespace in namespaces],
        "namespaces": [encode(namespace) for namespace in captured.namespaces],
        "rejected": captured.rejected,
        "claims": captured.claims,
        "decision": captured.decision,
    }
    if captured.storage is not None:
        document["storage"] = {kind: encode(objs) for kind, objs in captured.storage.items()}
    return document


_NAMESPACE = operator.attrgetter("namespace")
_FIRST = operator.itemgetter(0)


def _requests_json(
    milli_cpu: int, memory: int, ephemeral_storage: int, scalars: dict[str, int] | None
) -> dict[str, Any]:
    """`encode(_rest(...))` of a node none of whose pods is kept whole (most nodes, every
    decision), without building the `Resources`."""
    shown: dict[str, Any] = {}
    if milli_cpu:
        shown["milli_cpu"] = milli_cpu
    if memory:
        shown["memory"] = memory
    if ephemeral_storage:
        shown["ephemeral_storage"] = ephemeral_storage
    if scalars:
        nonzero = tuple(sorted((name, amount) for name, amount in scalars.items() if amount))
        if nonzero:
            shown["scalars"] = nonzero
    return shown


def _rest(total: NodeSums, kept: Iterable[Pod]) -> Resources:
    """What a node's pods request beyond those kept whole."""
    cpu, memory, ephemeral = total.milli_cpu, total.memory, total.ephemeral_storage
    scalars = dict(total.scalars or {})
    for pod in kept:
        cpu -= pod.requests.milli_cpu
        memory -= pod.requests.memory
        ephemeral -= pod.requests.ephemeral_storage
        for name, amount in pod.requests.scalars:
            scalars[name] = scalars.get(name, 0) - amount
    return Resources(cpu, memory, ephemeral, tuple(sorted((n, a) for n, a in scalars.items() if a)))


# -- rebuild ------------------------------------------------------------------------------------


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


# -- compare ------------------------------------------------------------------------------------


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


# -- the codec ----------------------------------------------------------------------------------


_ENCODERS: dict[type, Callable[[Any], dict[str, Any]]] = {}
_NO_DEFAULT = object()
_PRIMITIVES = (str, int, float, bool, type(None))
NOT_INPUTS = frozenset({"resource_version"})
"""Fields the planner never reads (kept by the view for writes), left out of the inputs."""


@functools.cache
def _fields(cls: type) -> tuple[tuple[str, Any], ...]:
    """A dataclass's init fields with their defaults (`_NO_DEFAULT` when required)."""
    found = []
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        if field.default is not dataclasses.MISSING:
            default = field.default
        elif field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        else:
            default = _NO_DEFAULT
        found.append((field.name, default))
    return tuple(found)


def _is_primitive(hint: Any) -> bool:
    if hint in _PRIMITIVES:
        return True
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        return all(_is_primitive(arg) for arg in typing.get_args(hint))
    return False


def _plain_mapping(value: Mapping[str, Any]) -> dict[str, Any]:
    return value if type(value) is dict else dict(value)


def _flat(hint: Any) -> bool:
    """A primitive, or a (named) tuple of primitives and flat tuples: JSON arrays as is."""
    if _is_primitive(hint):
        return True
    if typing.get_origin(hint) is tuple:
        return all(arg is Ellipsis or _flat(arg) for arg in typing.get_args(hint))
    return False


def _named_tuples(value: tuple[tuple[Any, ...], ...]) -> list[tuple[Any, ...]]:
    return [tuple(item) for item in value]


def _converter(hint: Any) -> Any:
    """How a field of this type becomes JSON-able data: None when it already is."""
    if _flat(hint):
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Mapping and all(_is_primitive(arg) for arg in args):
        return _plain_mapping
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        item = args[0]
        named = isinstance(item, type) and issubclass(item, tuple) and hasattr(item, "_fields")
        if named and all(_flat(h) for h in _hints(item).values()):
            return _named_tuples
    return encode


@functools.cache
def _plan(cls: type) -> tuple[tuple[str, Any, Any], ...]:
    """How to encode each field of a dataclass: name, default, converter (None: as is)."""
    hints = _hints(cls)
    return tuple(
        (name, default, _converter(hints[name]))
        for name, default in _fields(cls)
        if name not in NOT_INPUTS
    )


def _encoder(cls: type) -> Callable[[Any], dict[str, Any]]:
    """The function that encodes a `cls`, written out field by field from its plan (as
    `dataclasses` writes `__init__`): a loop over the plan costs twice as much, and
    a decision's inputs hold some 20,000 pods and nodes."""
    found = _ENCODERS.get(cls)
    if found is None:
        plan = _plan(cls)
        constants: dict[str, Any] = {}
        lines = []
        leading = 0  # required fields before the first optional one: one dict display
        while leading < len(plan) and plan[leading][1] is _NO_DEFAULT:
            leading += 1
        shown = ", ".join(
            f"{name!r}: {_converted(f'value.{name}', index, convert, constants)}"
            for index, (name, _, convert) in enumerate(plan[:leading])
        )
        lines.append(f"    shown = {{{shown}}}")
        for index, (name, default, convert) in enumerate(plan[leading:], leading):
            item = _converted("item", index, convert, constants)
            lines.append(f"    item = value.{name}")
            if default is _NO_DEFAULT:
                lines.append(f"    shown[{name!r}] = {item}")
                continue
            constants[f"default_{index}"] = default
            lines.append(f"    if item is not default_{index} and item != default_{index}:")
            lines.append(f"        shown[{name!r}] = {item}")
        source = "def encoder(value):\n" + "\n".join(lines) + "\n    return shown\n"
        exec(source, constants)  # the source names only the class's own fields
        found = _ENCODERS[cls] = constants["encoder"]
    return found


def _converted(item: str, index: int, convert: Any, constants: dict[str, Any]) -> str:
    """The expression for one field's JSON-able value in `_encoder`'s source."""
    if convert is None:
        return item
    constants[f"convert_{index}"] = convert
    return f"convert_{index}({item})"


def encode(value: Any) -> Any:
    """JSON-able data for a domain object: a dataclass as an object of its fields not at
    their default, a named or plain tuple as an array, a set as a sorted array."""
    kind = type(value)
    if kind in _PRIMITIVES:
        return value
    encoder = _ENCODERS.get(kind)
    if encoder is not None:
        return encoder(value)
    if isinstance(value, tuple | list):
        return [encode(item) for item in value]
    if dataclasses.is_dataclass(value):
        return _encoder(kind)(value)
    if isinstance(value, frozenset | set):
        return sorted(encode(item) for item in value)
    if isinstance(value, Mapping):
        return {str(key): encode(item) for key, item in value.items()}
    raise TypeError(f"cannot encode {type(value).__name__}")


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


_T = typing.TypeVar("_T")


def decode(cls: type[_T], raw: Any) -> _T:
    """The object `encode` wrote for a `cls`."""
    return typing.cast(_T, _decode(cls, raw))


def _decode(hint: Any, raw: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        if raw is None:
            return None
        (inner,) = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return _decode(inner, raw)
    if origin is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(args[0], item) for item in raw)
        return tuple(_decode(arg, item) for arg, item in zip(args, raw, strict=True))
    if origin is frozenset:
        (inner,) = typing.get_args(hint)
        return frozenset(_decode(inner, item) for item in raw)
    if origin is dict or origin is Mapping:
        _, inner = typing.get_args(hint)
        return {key: _decode(inner, item) for key, item in raw.items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        hints = _hints(hint)
        known = {name for name, _ in _fields(hint)}
        return hint(**{k: _decode(hints[k], v) for k, v in raw.items() if k in known})
    if isinstance(hint, type) and issubclass(hint, tuple) and hasattr(hint, "_fields"):
        hints = _hints(hint)
        return hint(
            *(_decode(hints[name], item) for name, item in zip(hint._fields, raw, strict=False))
        )
    if hint is float:
        return None if raw is None else float(raw)
    if hint in (int, str, bool):
        if not isinstance(raw, hint):
            raise RecordedInputsError(f"expected {hint.__name__}, found {raw!r}")
        return raw
    if hint is Any:
        return raw
    raise RecordedInputsError(f"cannot decode {hint!r}")

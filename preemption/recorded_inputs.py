"""What a decision's inputs are: captured under the decision lock, encoded as JSON after it.

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
per-node sums; `to_json` (after the commit) encodes them, objects through the generic
dataclass codec (`preemption.dataclass_codec`), each pod's and node's JSON reused between
decisions (`EncodedCache`). Replaying them (rebuild, compare) is `preemption.inputs_replay`.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

from preemptctl.preemption.dataclass_codec import encode
from preemptctl.preemption.decision import PLANNER_VERSION, Decision, Strategy
from preemptctl.preemption.default_preemption import PreemptionArgs
from preemptctl.preemption.objects import (
    HostPort,
    Namespace,
    Node,
    Pod,
    PodDisruptionBudget,
    Resources,
)
from preemptctl.preemption.pod_constraints import term_matches
from preemptctl.preemption.selectors import label_selector_matches
from preemptctl.preemption.snapshot import ClusterSnapshot

FORMAT = 1
"""The layout of the JSON `to_json` writes; `rebuild` refuses a newer one."""


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

"""What a decision's inputs are: captured under the decision lock, written out after it.

`preemptctl replay --decision` answers "would this version have evicted the same pods?"
long after the cluster has changed, so each decision keeps everything the planner read: the
view as the planner saw it (the claims of in-flight preemptions laid over it), every node
with every pod bound to it, the pending pods the planner reads (every nominated pod, the
claims' placements among them, and a group decision's own members), every PDB, Namespace,
PodGroup, CompositePodGroup and storage object, the pods the view could not read; and what
is specific to the decision: the preemptor as the API server returned it (or the pod group
decided for), the strategy and the planner's arguments, the claims respected and the
decision made. Nothing is
summarised, so a replay rebuilds exactly the view the planner decided over, for a pod
decision as for a group decision (whose planner reads the whole cluster).

That is far more than one decision can afford to store, but nearly all of it is the same from
one decision to the next: `preemption.shared_inputs` stores each object once and lets
decisions reference it. This module only captures (cheaply) and writes one decision out
whole (`to_json`, the inline form: what tests, `replay` of an edited row and older versions
read).

`capture` runs under the decision lock, so it takes references only: the view replaces a
changed object rather than mutating it, and each node's pods are taken as the node's own
importance-ordered list (`NodeInfo.pods_by_importance`), which the view replaces, never
mutates, when the node's pods change. Successive captures therefore share every list of an
unchanged node, which is also how the recorder finds what changed. Replaying the inputs
(rebuild, compare) is `preemption.inputs_replay`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from preemptctl.preemption.dataclass_codec import encode
from preemptctl.preemption.decision import PLANNER_VERSION, Decision, Strategy
from preemptctl.preemption.default_preemption import PreemptionArgs
from preemptctl.preemption.group_decision import GroupDecision
from preemptctl.preemption.objects import (
    CompositePodGroup,
    Namespace,
    Node,
    Pod,
    PodDisruptionBudget,
    PodGroup,
)
from preemptctl.preemption.pod_group_preemption import POD_GROUP_STRATEGY
from preemptctl.preemption.snapshot import ClusterSnapshot

FORMAT = 2
"""The layout of the inputs' JSON; `rebuild` reads 1 (the first: most nodes' pods as sums
only) and 2 (every pod whole), and refuses a newer one."""

STORAGE_KINDS: dict[str, tuple[str, str]] = {
    "claims": ("claims", "key"),
    "volumes": ("volumes", "name"),
    "storageClasses": ("storage_classes", "name"),
    "csiNodes": ("csinodes", "name"),
    "volumeAttachments": ("volume_attachments", "name"),
}
"""The storage objects as the inputs name them: the snapshot's store and each object's key."""


# -- capture (under the decision lock: references only) --------------------------------------


@dataclass(frozen=True, slots=True)
class Captured:
    """One decision's inputs as references into the view, taken under the decision lock.

    `node_names`, `nodes` and `node_pods` are parallel: every node the view holds (a Node,
    or pods bound to a name with no Node object), its Node (None for the latter), and its
    pods as the view's own list (never mutated: a change makes a new list)."""

    preemptor: Pod | None
    """A pod decision's preemptor, as the API server returned it; None for a group's."""
    pod_group: str
    """A group decision's group, "namespace/name"; "" for a pod decision."""
    strategy: str
    args: PreemptionArgs
    node_names: list[str]
    nodes: list[Node | None]
    node_pods: list[Sequence[Pod]]
    pending: list[Pod]
    pdbs: list[PodDisruptionBudget]
    namespaces: list[Namespace]
    pod_groups: list[PodGroup]
    composite_pod_groups: list[CompositePodGroup]
    storage: dict[str, list[Any]]
    rejected: dict[str, str | None]
    claims: list[str]
    decision: dict[str, Any]

    @property
    def pod_count(self) -> int:
        """Pods held: bound (on every node) and pending."""
        return sum(map(len, self.node_pods)) + len(self.pending)


def capture(
    snapshot: ClusterSnapshot,
    preemptor: Pod,
    strategy: Strategy,
    args: PreemptionArgs | None,
    decision: Decision,
    claims: Iterable[str] = (),
) -> Captured:
    """The inputs of `decision`, just made over `snapshot` (claims applied, the preemptor
    as the API server returned it upserted) for `preemptor`. Under the decision lock: about
    a millisecond at 5,000 nodes (benchmarks/decision_inputs.py)."""
    return _captured(
        snapshot,
        preemptor,
        "",
        str(strategy),
        args,
        snapshot.all_nominated_pods(),
        decision_summary(decision),
        claims,
    )


def capture_group(
    snapshot: ClusterSnapshot,
    group_key: str,
    args: PreemptionArgs | None,
    decision: GroupDecision,
    claims: Iterable[str] = (),
) -> Captured:
    """The inputs of the group decision `decision`, just made over `snapshot` (claims
    applied, the PodGroup as the API server returned it upserted) for the pod group
    `group_key` ("namespace/name"). The group's pending members are kept with the
    nominated pods; its PodGroup (if it has one) with every other."""
    args = args or PreemptionArgs()
    if snapshot.pod_group(group_key) is not None or not args.pod_group_label:
        members = snapshot.group_members(group_key)
    else:
        members = snapshot.label_group_members(args.pod_group_label, group_key)
    pending = snapshot.all_nominated_pods()
    nominated = {pod.uid for pod in pending}
    pending.extend(p for p in members if not p.node_name and p.uid not in nominated)
    return _captured(
        snapshot,
        None,
        group_key,
        POD_GROUP_STRATEGY,
        args,
        pending,
        group_decision_summary(decision),
        claims,
    )


def _captured(
    snapshot: ClusterSnapshot,
    preemptor: Pod | None,
    pod_group: str,
    strategy: str,
    args: PreemptionArgs | None,
    pending: list[Pod],
    decision: dict[str, Any],
    claims: Iterable[str],
) -> Captured:
    infos = list(snapshot.node_infos.values())
    return Captured(
        preemptor=preemptor,
        pod_group=pod_group,
        strategy=strategy,
        args=args or PreemptionArgs(),
        node_names=[info.name for info in infos],
        nodes=[info.node for info in infos],
        # The node's own list: built once per change of its pods, by the planner or here.
        node_pods=[info.pods_by_importance() for info in infos],
        pending=pending,
        pdbs=list(snapshot.pdbs.values()),
        namespaces=list(snapshot.namespaces.values()),
        pod_groups=list(snapshot.pod_groups.values()),
        composite_pod_groups=list(snapshot.composite_pod_groups.values()),
        storage={
            kind: list(getattr(snapshot, store).values())
            for kind, (store, _) in STORAGE_KINDS.items()
        },
        rejected=dict(snapshot.rejected),
        claims=list(claims),
        decision=decision,
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


def group_decision_summary(decision: GroupDecision) -> dict[str, Any]:
    """What a replay compares of a group decision: verdict, victims, each placed member's
    node, and the units the victims went in."""
    return {
        "verdict": str(decision.verdict),
        "node": None,
        "victims": [victim.to_json() for victim in decision.victims],
        "criterion": None,
        "message": decision.message,
        "evaluated": [],
        "nominations": dict(sorted(decision.nominations.items())),
        "units": [unit.to_json() for unit in decision.units],
    }


# -- written out whole (the inline form) -------------------------------------------------------


def header(captured: Captured) -> dict[str, Any]:
    """What is specific to the decision: format, versions, strategy, arguments, the
    preemptor (or group), the unreadable pods, the claims respected and the decision. The
    inline form adds the objects; the shared form (`preemption.shared_inputs`) references."""
    document: dict[str, Any] = {
        "format": FORMAT,
        "plannerVersion": PLANNER_VERSION,
        "strategy": captured.strategy,
        "args": encode(captured.args),
    }
    if captured.preemptor is not None:
        document["preemptor"] = encode(captured.preemptor)
    else:
        document["podGroup"] = captured.pod_group
    document["rejected"] = captured.rejected
    document["claims"] = captured.claims
    document["decision"] = captured.decision
    return document


def bound_pods(captured: Captured) -> Iterator[Pod]:
    """Every pod bound to a node, node by node."""
    for pods in captured.node_pods:
        yield from pods


def to_json(captured: Captured) -> dict[str, Any]:
    """The captured inputs whole, as JSON-able data: the decision's own part and every
    object (pods carry their node), each through the generic codec."""
    document = header(captured)
    document["nodes"] = [encode(node) for node in captured.nodes if node is not None]
    document["pods"] = [encode(pod) for pod in (*bound_pods(captured), *captured.pending)]
    document["pdbs"] = [encode(pdb) for pdb in captured.pdbs]
    document["namespaces"] = [encode(namespace) for namespace in captured.namespaces]
    document["podGroups"] = [encode(group) for group in captured.pod_groups]
    document["compositePodGroups"] = [encode(group) for group in captured.composite_pod_groups]
    document["storage"] = {kind: encode(objs) for kind, objs in captured.storage.items()}
    return document


def dumps(captured: Captured) -> bytes:
    """`to_json` as compact UTF-8 JSON."""
    return orjson.dumps(to_json(captured))

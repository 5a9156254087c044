"""The cluster as the planner sees it: nodes with their pods, nominations and budgets.

`ClusterSnapshot` mirrors the scheduler's cache: per node a `NodeInfo` with the pods bound to
it and their summed requests, plus the nominator's index of pods nominated to each node.
It is updated in place, one object at a time, by whoever feeds it (a snapshot file, or the
watch-fed cluster view), and keeps the derived data the planner needs fast (pods ordered by
importance, PDB matches) cached until the objects they depend on change.
"""

from __future__ import annotations

import bisect
import dataclasses
import gc
from array import array
from collections import Counter
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from itertools import repeat
from operator import attrgetter, is_
from typing import Any

from preemptctl.preemption.decode import (
    decode_claim,
    decode_composite_pod_group,
    decode_csinode,
    decode_namespace,
    decode_node,
    decode_pdb,
    decode_pod,
    decode_pod_group,
    decode_storage_class,
    decode_volume,
    decode_volume_attachment,
    iter_list_items,
)
from preemptctl.preemption.errors import PlannerInputError
from preemptctl.preemption.objects import (
    AffinityTerm,
    CompositePodGroup,
    CSINode,
    HostPort,
    LabelSelector,
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
from preemptctl.preemption.selectors import label_selector_matches

# Kinds the cluster view feeds and `remove` names: a Pod by UID, a cluster-scoped object
# by name, any other namespaced one by `namespace/name`.
CLUSTER_SCOPED_KINDS = frozenset(
    {"Node", "Namespace", "PersistentVolume", "StorageClass", "CSINode", "VolumeAttachment"}
)
NAMESPACED_KINDS = frozenset(
    {"Pod", "PodDisruptionBudget", "PersistentVolumeClaim", "PodGroup", "CompositePodGroup"}
)
# Kinds accepted and not kept (none today; a kind the planner stops reading goes here, so
# an older feed keeps working).
IGNORED_KINDS: frozenset[str] = frozenset()

_NEVER_STARTED = float("inf")
_uid_of = attrgetter("uid")

# `WorkloadMaxTreeDepth`: the levels a hierarchy of (composite) pod groups may have; upstream
# walks no further up (`traverseHierarchyUp`) or down (`GetPodGroupStates`) than this.
WORKLOAD_MAX_TREE_DEPTH = 4


def importance_key(pod: Pod) -> tuple[int, int, float, str]:
    """Sort key for `MoreImportantVictim` applied to a victim of one pod: higher priority
    first, then a pod that names a pod group before one that does not (upstream ranks it as
    a group member), then earlier start, then the smaller UID (upstream's last tie-break).

    A pod without a start time counts as the newest, as upstream's `GetPodStartTime` (which
    falls back to "now") makes it. Victims of several pods (a group taken whole) are ordered
    by `victim_units.importance`, which agrees with this key on pods alone.
    """
    start = pod.start_time if pod.start_time is not None else _NEVER_STARTED
    return (-pod.priority, 0 if pod.group else 1, start, pod.uid)


def _compact(values: list[int]) -> Sequence[int]:
    """The integers as one machine array (the view keeps such lists for every node; as
    Python ints they would cost ten times the memory), or as they are if one exceeds 64 bits."""
    try:
        return array("q", values)
    except OverflowError:
        return values


_Derived = tuple[
    list[Pod],
    Sequence[int],
    tuple[Sequence[int], Sequence[int], Sequence[int]],
    list[tuple[int, ...]],
    list[int],
    int,
]
"""A node's pods in importance order and what `NodeInfo` derives from that order: the
descending priorities, the suffix sums, the budget matches, the budgeted positions and the
budgets' generation those were matched at."""


class NodeInfo:
    """One node and the non-terminal pods bound to it, with their summed requests."""

    __slots__ = (
        "_budgeted",
        "_by_importance",
        "_descending_priorities",
        "_dry_run",
        "_earlier",
        "_pdb_generation",
        "_pdb_matches",
        "_suffix_sums",
        "_units",
        "ephemeral_storage",
        "grouped",
        "memory",
        "milli_cpu",
        "name",
        "node",
        "pods",
        "scalars",
    )

    def __init__(self, name: str, node: Node | None = None) -> None:
        self.name = name
        self.node = node
        self.pods: dict[str, Pod] = {}
        self.milli_cpu = 0
        self.memory = 0
        self.ephemeral_storage = 0
        self.scalars: dict[str, int] = {}
        self.grouped = 0  # how many of its pods name a pod group
        self._by_importance: list[Pod] | None = None
        self._descending_priorities: Sequence[int] = ()
        # Summed cpu, memory and ephemeral storage of the pods from each position on.
        self._suffix_sums: tuple[Sequence[int], Sequence[int], Sequence[int]] = ((), (), ())
        self._pdb_matches: list[tuple[int, ...]] = []
        self._budgeted: list[int] = []  # positions (importance order) of pods a budget selects
        self._pdb_generation = -1
        self._dry_run: tuple[Hashable, list[Pod], Node | None, Any] | None = None
        # The node's victim units (`victim_units.node_units`), with what they were built from.
        self._units: tuple[Hashable, list[Pod], Any] | None = None
        # The order and its derived data as they were before the pods last changed (see
        # `_restore_earlier`).
        self._earlier: _Derived | None = None

    def add_pod(self, pod: Pod) -> None:
        self.pods[pod.uid] = pod
        self._account(pod.requests, 1)
        if pod.group:
            self.grouped += 1

    def remove_pod(self, uid: str) -> Pod | None:
        pod = self.pods.pop(uid, None)
        if pod is not None:
            self._account(pod.requests, -1)
            if pod.group:
                self.grouped -= 1
        return pod

    def _account(self, requests: Resources, sign: int) -> None:
        self.milli_cpu += sign * requests.milli_cpu
        self.memory += sign * requests.memory
        self.ephemeral_storage += sign * requests.ephemeral_storage
        for name, amount in requests.scalars:
            self.scalars[name] = self.scalars.get(name, 0) + sign * amount
        if self._by_importance is not None:
            self._earlier = (
                self._by_importance,
                self._descending_priorities,
                self._suffix_sums,
                self._pdb_matches,
                self._budgeted,
                self._pdb_generation,
            )
            self._by_importance = None

    def requested(self) -> Resources:
        """The summed requests of the pods on the node (`NodeInfo.Requested`)."""
        return Resources(
            self.milli_cpu,
            self.memory,
            self.ephemeral_storage,
            tuple(sorted((n, a) for n, a in self.scalars.items() if a)),
        )

    def pods_by_importance(self) -> list[Pod]:
        """The node's pods, most important first (cached until the node's pods change)."""
        ordered = self._by_importance
        if ordered is None:
            ordered = self._restore_earlier()
            if ordered is None:
                ordered = self._order()
        return ordered

    def _order(self) -> list[Pod]:
        """Sort the node's pods by importance, and derive from the order what is kept."""
        ordered = sorted(self.pods.values(), key=importance_key)
        self._descending_priorities = _compact([-p.priority for p in ordered])
        size = len(ordered) + 1
        cpu_sums, memory_sums, ephemeral_sums = [0] * size, [0] * size, [0] * size
        cpu = memory = ephemeral = 0
        for index in range(len(ordered) - 1, -1, -1):
            r = ordered[index].requests
            cpu += r.milli_cpu
            memory += r.memory
            ephemeral += r.ephemeral_storage
            cpu_sums[index], memory_sums[index], ephemeral_sums[index] = cpu, memory, ephemeral
        self._suffix_sums = (
            _compact(cpu_sums),
            _compact(memory_sums),
            _compact(ephemeral_sums),
        )
        self._pdb_generation = -1
        self._by_importance = ordered
        return ordered

    def _restore_earlier(self) -> list[Pod] | None:
        """Take back the order (the same list object) and what was derived from it as they
        were before the pods last changed, when the node holds exactly those pod objects
        again; None when it does not. A claim hides its victims for one decision and puts
        them back (`claims.ClaimBook.applied`), so each decision found the claimed nodes
        changed twice: their order sorted again, their suffix sums and budget matches made
        again, and the inputs captured (`recorded_inputs.capture`, which reads every node)
        holding a new list, so that the recorder compared its pods one by one. Everything
        restored is a function of the pod objects alone (the order breaks every tie by UID;
        the budget matches are checked against `pdb_generation` as always)."""
        earlier = self._earlier
        if earlier is None:
            return None
        ordered, pods = earlier[0], self.pods
        if len(ordered) != len(pods) or not all(
            map(is_, map(pods.get, map(_uid_of, ordered)), ordered)
        ):
            return None
        self._earlier = None
        (
            self._by_importance,
            self._descending_priorities,
            self._suffix_sums,
            self._pdb_matches,
            self._budgeted,
            self._pdb_generation,
        ) = earlier
        return ordered

    def lower_priority_start(self, priority: int) -> int:
        """Where the pods below `priority` begin in the importance order (they are a suffix)."""
        self.pods_by_importance()
        return bisect.bisect_right(self._descending_priorities, -priority)

    def lower_priority_pods(self, priority: int) -> list[Pod]:
        """The pods below `priority`, most important first."""
        return self.pods_by_importance()[self.lower_priority_start(priority) :]

    def suffix_requests(self, start: int) -> tuple[int, int, int]:
        """Summed cpu, memory and ephemeral-storage requests of the pods from `start` on."""
        self.pods_by_importance()
        cpu, memory, ephemeral = self._suffix_sums
        return cpu[start], memory[start], ephemeral[start]

    def pdb_matches(self, snapshot: ClusterSnapshot) -> list[tuple[int, ...]]:
        """For each pod in importance order, the budgets that select it (cached per node)."""
        ordered = self.pods_by_importance()
        if self._pdb_generation != snapshot.pdb_generation:
            self._pdb_matches = [snapshot.matching_pdbs(pod) for pod in ordered]
            self._budgeted = [i for i, matches in enumerate(self._pdb_matches) if matches]
            self._pdb_generation = snapshot.pdb_generation
        return self._pdb_matches

    def budgeted_below(self, snapshot: ClusterSnapshot, priority: int) -> list[Pod]:
        """The pods below `priority` that some budget selects, most important first."""
        self.pdb_matches(snapshot)
        budgeted = self._budgeted
        if not budgeted:
            return []
        start = bisect.bisect_left(budgeted, self.lower_priority_start(priority))
        ordered = self.pods_by_importance()
        return [ordered[i] for i in budgeted[start:]]

    def remembered(self, key: Hashable) -> Any:
        """What `remember` kept under `key`, if the node and its pods are the same objects
        as then; None otherwise."""
        memo = self._dry_run
        if memo is not None and memo[0] == key:
            ordered = self.pods_by_importance()
            if memo[1] is ordered and memo[2] is self.node:
                return memo[3]
        return None

    def remember(self, key: Hashable, value: Any) -> None:
        """Keep one result computed from this node as it is now (the last key only): any
        change to its pods makes a new importance order, and a new Node object replaces
        the old, so `remembered` then finds nothing."""
        self._dry_run = (key, self.pods_by_importance(), self.node, value)

    def cached_units(self, key: Hashable) -> Any:
        """What `cache_units` kept under `key`, if the node's pods are the same as then."""
        kept = self._units
        if kept is not None and kept[0] == key and kept[1] is self.pods_by_importance():
            return kept[2]
        return None

    def cache_units(self, key: Hashable, value: Any) -> None:
        self._units = (key, self.pods_by_importance(), value)

    def used_ports(self) -> list[HostPort]:
        return [port for pod in self.pods.values() for port in pod.host_ports]


class BoundPodIndex:
    """The bound, non-terminal pods by namespace and by label, and those with required
    anti-affinity grouped by their terms: what lets InterPodAffinity and PodTopologySpread
    precompute their state from the pods a selector can match, not from every pod."""

    __slots__ = (
        "_anti_pairs",
        "anti_affinity",
        "anti_by_label",
        "anti_per_node",
        "anti_unindexed",
        "by_label",
        "by_namespace",
        "claim_users",
        "labels_ready",
        "with_volumes",
    )

    def __init__(self) -> None:
        # Built on first use (`build_labels`), then kept current.
        self.labels_ready = False
        self.by_namespace: dict[str, dict[str, Pod]] = {}
        self.by_label: dict[tuple[str, str, str], dict[str, Pod]] = {}
        self.anti_affinity: dict[tuple[AffinityTerm, ...], dict[str, Pod]] = {}
        # How many pods of each anti-affinity group each node holds.
        self.anti_per_node: dict[tuple[AffinityTerm, ...], dict[str, int]] = {}
        # (terms, topology key) -> (the domains map used, the counts per topology pair),
        # dropped when the group's pods change: see `anti_pairs`.
        self._anti_pairs: dict[
            tuple[tuple[AffinityTerm, ...], str],
            tuple[Mapping[str, str], dict[tuple[str, str], int]],
        ] = {}
        # Each anti-affinity group under the first matchLabels pair of each of its terms (a
        # pod lacking that label cannot match the term), or unindexed when a term has none.
        self.anti_by_label: dict[tuple[str, str], set[tuple[AffinityTerm, ...]]] = {}
        self.anti_unindexed: set[tuple[AffinityTerm, ...]] = set()
        # Bound pods by the claims they mount ("namespace/claim"), and those with any
        # claim or inline CSI volume: what VolumeRestrictions and NodeVolumeLimits count.
        self.claim_users: dict[str, dict[str, Pod]] = {}
        self.with_volumes: dict[str, Pod] = {}

    def add(self, pod: Pod) -> None:
        if pod.claims or pod.inline_csi:
            self.with_volumes[pod.uid] = pod
            for claim in pod.claims:
                self.claim_users.setdefault(f"{pod.namespace}/{claim}", {})[pod.uid] = pod
        if self.labels_ready:
            self._add_labels(pod)
        terms = pod.pod_anti_affinity
        if terms:
            group = self.anti_affinity.get(terms)
            if group is None:
                group = self.anti_affinity[terms] = {}
                for term in terms:
                    if term.selector is None:
                        continue
                    if term.selector.match_labels:
                        pair = term.selector.match_labels[0]
                        self.anti_by_label.setdefault(pair, set()).add(terms)
                    else:
                        self.anti_unindexed.add(terms)
            group[pod.uid] = pod
            per_node = self.anti_per_node.setdefault(terms, {})
            per_node[pod.node_name] = per_node.get(pod.node_name, 0) + 1
            self._anti_changed(terms)

    def discard(self, pod: Pod) -> None:
        if pod.claims or pod.inline_csi:
            self.with_volumes.pop(pod.uid, None)
            for claim in pod.claims:
                _discard(self.claim_users, f"{pod.namespace}/{claim}", pod.uid)
        if self.labels_ready:
            # `_discard` inlined: this runs for each label of each victim a claim hides and
            # gives back, hundreds of times a decision.
            uid, namespace, by_label = pod.uid, pod.namespace, self.by_label
            _discard(self.by_namespace, namespace, uid)
            for key, value in pod.labels.items():
                label = (namespace, key, value)
                labelled = by_label.get(label)
                if labelled is not None:
                    labelled.pop(uid, None)
                    if not labelled:
                        del by_label[label]
        terms = pod.pod_anti_affinity
        if terms and pod.uid in self.anti_affinity.get(terms, {}):
            self._anti_changed(terms)
            per_node = self.anti_per_node[terms]
            left = per_node[pod.node_name] - 1
            if left:
                per_node[pod.node_name] = left
            else:
                del per_node[pod.node_name]
            _discard(self.anti_affinity, terms, pod.uid)
            if terms not in self.anti_affinity:
                del self.anti_per_node[terms]
                self.anti_unindexed.discard(terms)
                for term in terms:
                    if term.selector is not None and term.selector.match_labels:
                        pair = term.selector.match_labels[0]
                        groups = self.anti_by_label.get(pair)
                        if groups is not None:
                            groups.discard(terms)
                            if not groups:
                                del self.anti_by_label[pair]

    def _add_labels(self, pod: Pod) -> None:
        # get-then-create, not setdefault: most keys exist, and setdefault would build (and
        # drop) an empty dict for each; this runs for every label of 150,000 pods at warm.
        uid, namespace = pod.uid, pod.namespace
        in_namespace = self.by_namespace.get(namespace)
        if in_namespace is None:
            in_namespace = self.by_namespace[namespace] = {}
        in_namespace[uid] = pod
        by_label = self.by_label
        for key, value in pod.labels.items():
            label = (namespace, key, value)
            labelled = by_label.get(label)
            if labelled is None:
                by_label[label] = {uid: pod}
            else:
                labelled[uid] = pod

    def build_labels(self, pods: Iterable[Pod]) -> None:
        """Index the bound pods by namespace and label, the first time a decision needs it
        (a cluster whose preemptors never use spread or pod affinity never pays for it);
        from then on `add` and `discard` keep it current."""
        if not self.labels_ready:
            for pod in pods:
                self._add_labels(pod)
            self.labels_ready = True

    def _anti_changed(self, terms: tuple[AffinityTerm, ...]) -> None:
        if self._anti_pairs:
            for term in terms:
                self._anti_pairs.pop((terms, term.topology_key), None)

    def anti_pairs(
        self, terms: tuple[AffinityTerm, ...], key: str, domains: Mapping[str, str]
    ) -> dict[tuple[str, str], int]:
        """How many pods of the group each topology pair `(key, value)` holds, summed from
        the group's per-node counts over `domains` (node -> value of `key`). Kept until the
        group's pods or the domains change: most decisions find it ready."""
        cached = self._anti_pairs.get((terms, key))
        if cached is not None and cached[0] is domains:
            return cached[1]
        pairs: dict[tuple[str, str], int] = {}
        for node_name, count in self.anti_per_node.get(terms, {}).items():
            value = domains.get(node_name)
            if value is not None:
                pairs[key, value] = pairs.get((key, value), 0) + count
        if len(self._anti_pairs) > 10_000:
            self._anti_pairs.clear()
        self._anti_pairs[terms, key] = (domains, pairs)
        return pairs

    def anti_affinity_groups_for(
        self, labels: Mapping[str, str]
    ) -> list[tuple[tuple[AffinityTerm, ...], dict[str, int]]]:
        """The anti-affinity groups that may select a pod with these labels (check each),
        with how many of their pods each node holds."""
        found = set(self.anti_unindexed)
        for pair in labels.items():
            groups = self.anti_by_label.get(pair)
            if groups:
                found.update(groups)
        return [(terms, self.anti_per_node[terms]) for terms in found]

    def selectable(self, namespace: str, selector: LabelSelector) -> Iterable[Pod]:
        """The bound pods of `namespace` the selector may select (a superset: check each).
        Needs `build_labels` first."""
        narrowest: dict[str, Pod] | None = self.by_namespace.get(namespace)
        if narrowest is None:
            return ()
        for key, value in selector.match_labels:
            found = self.by_label.get((namespace, key, value))
            if found is None:
                return ()
            if len(found) < len(narrowest):
                narrowest = found
        for requirement in selector.match_expressions:
            if requirement.operator == "In":
                union: dict[str, Pod] = {}
                for value in requirement.values:
                    union.update(self.by_label.get((namespace, requirement.key, value)) or {})
                if len(union) < len(narrowest):
                    narrowest = union
        return narrowest.values()


def _discard(index: dict[Any, dict[str, Pod]], key: Any, uid: str) -> None:
    found = index.get(key)
    if found is not None:
        found.pop(uid, None)
        if not found:
            del index[key]


def _discard_child(index: dict[str, dict[str, bool]], parent: str, child: str) -> None:
    found = index.get(parent)
    if found is not None:
        found.pop(child, None)
        if not found:
            del index[parent]


class ClusterSnapshot:
    """Nodes, pods, PDBs, namespaces and nominations, kept consistent under one-object
    updates."""

    def __init__(self) -> None:
        self.node_infos: dict[str, NodeInfo] = {}
        self.pods: dict[str, Pod] = {}
        self.pdbs: dict[str, PodDisruptionBudget] = {}
        self.namespaces: dict[str, Namespace] = {}
        self.claims: dict[str, PersistentVolumeClaim] = {}
        self.volumes: dict[str, PersistentVolume] = {}
        self.storage_classes: dict[str, StorageClass] = {}
        self.csinodes: dict[str, CSINode] = {}
        self.volume_attachments: dict[str, VolumeAttachment] = {}
        self.pod_groups: dict[str, PodGroup] = {}
        self.composite_pod_groups: dict[str, CompositePodGroup] = {}
        # Per CompositePodGroup key ("namespace/name"), the groups naming it as their parent,
        # each key with whether it is a CompositePodGroup (kept whether the parent exists
        # or not, as upstream's cache keeps a child under a parent not seen yet).
        self._children: dict[str, dict[str, bool]] = {}
        # The non-terminal pods naming each pod group ("namespace/name"), bound or pending.
        self._group_members: dict[str, dict[str, Pod]] = {}
        # Per pod label that names groups (a setting), the non-terminal pods by
        # "namespace/value"; built on first use (`label_group_members`), then kept current.
        self._label_groups: dict[str, dict[str, dict[str, Pod]]] = {}
        # Annotations decoded pods keep (a setting reads them); every other one is dropped.
        self.kept_annotations: frozenset[str] = frozenset()
        # Labels a setting reads (the label naming a gang): kept even on a pod whose labels
        # exceed the caps (`decode.POD_CAPS`), when its others are not.
        self.kept_labels: frozenset[str] = frozenset()
        # Pods with content beyond the caps: which fields, by UID (all pods held), and the
        # non-terminal ones whose labels were not all kept, by namespace (a selector over
        # that namespace cannot tell whether they match). `over_cap_total` counts every
        # pod object read with content beyond a cap, by field, since the snapshot began:
        # what the view exports as a metric.
        self.over_cap: dict[str, tuple[str, ...]] = {}
        self._labels_over_cap: dict[str, dict[str, Pod]] = {}
        self.over_cap_total: Counter[str] = Counter()
        self.bound = BoundPodIndex()
        # Pods the feeder could not read, by UID, with the node they were on (if known):
        # that node's capacity is unknown, so it is no candidate until the pod is readable.
        self.rejected: dict[str, str | None] = {}
        self._rejected_on_node: dict[str, set[str]] = {}
        self._uid_by_key: dict[str, str] = {}
        self._nominated: dict[str, dict[str, Pod]] = {}
        self._sorted_nodes: list[NodeInfo] | None = None
        self._domains: dict[str, dict[str, str]] = {}
        # Nodes whose pods or Node object changed since the kept filter pass last took them
        # (`take_changed_nodes`), and that pass (`find_nodes_that_fit.filter_nodes`).
        self._changed_nodes: set[str] = set()
        self.kept_filter_pass: Any = None
        self._sorted_pdbs: list[PodDisruptionBudget] | None = None
        self._pdbs_by_namespace: dict[str, list[tuple[int, LabelSelector]]] | None = None
        self._pdb_positions: dict[str, int] = {}
        self._pdb_matches: dict[str, tuple[int, ...]] = {}
        self.pdb_generation = 0  # bumped when the budgets' selectors may match other pods
        self.pdb_version = 0  # bumped on any change to any budget, its status included
        # Per group taken whole (a PodGroup "namespace/name", or a label-named group
        # "label\0namespace/value"), a stamp renewed when the group or one of its members
        # changes: what a dry run kept for a node holding a group's pod depends on the group's
        # pods on other nodes too, and on nothing else of theirs. Stamps come from one clock,
        # so a group forgotten and seen again never gets an old stamp back.
        self._unit_stamps: dict[str, int] = {}
        self._stamp_clock = 0
        # Bumped when a PodGroup or CompositePodGroup appears, goes, or changes its
        # disruption mode or parent (or a CompositePodGroup its priority): which pods are
        # taken whole then changes, though no pod did.
        self.group_modes_version = 0
        # Set by `warm`: from then on each bound pod's PDB matches are computed as it
        # arrives (by the feed, outside any decision), not by the first decision visiting it.
        self.warmed = False

    # -- building ---------------------------------------------------------------------------

    @classmethod
    def from_objects(
        cls,
        nodes: Iterable[Node],
        pods: Iterable[Pod],
        pdbs: Iterable[PodDisruptionBudget] = (),
    ) -> ClusterSnapshot:
        snapshot = cls()
        for node in nodes:
            snapshot.upsert_node(node)
        for pod in pods:
            snapshot.upsert_pod(pod)
        for pdb in pdbs:
            snapshot.upsert_pdb(pdb)
        return snapshot

    @classmethod
    def from_list(
        cls,
        document: Any,
        kept_annotations: Iterable[str] = (),
        kept_labels: Iterable[str] = (),
    ) -> ClusterSnapshot:
        """A snapshot from a `v1 List` (kubectl get nodes,pods,pdb,namespaces,... -A -o json).

        Kinds the planner does not read are skipped. Two pods with one UID are an error: a
        decision about one of them could name the other. Pods keep only the annotations in
        `kept_annotations`, and their labels within the caps (beyond them, `kept_labels`).
        """
        snapshot = cls()
        snapshot.kept_annotations = frozenset(kept_annotations)
        snapshot.kept_labels = frozenset(kept_labels)
        # Building allocates hundreds of thousands of objects and frees none; the cyclic
        # collector would rescan the whole (large) document again and again meanwhile.
        collecting = gc.isenabled()
        gc.disable()
        try:
            for kind, item in iter_list_items(document):
                if kind == "Pod":
                    pod = decode_pod(item, snapshot.kept_annotations, snapshot.kept_labels)
                    seen = snapshot.pods.get(pod.uid)
                    if seen is not None:
                        raise PlannerInputError(
                            f"pods {seen.key} and {pod.key} share the uid {pod.uid}; a "
                            "snapshot names each pod once (take it again with kubectl get)"
                        )
                    snapshot.upsert_pod(pod)
                elif kind in _DECODERS:
                    snapshot.apply(kind, item)
        finally:
            if collecting:
                gc.enable()
        return snapshot

    def apply(self, kind: str, obj: Mapping[str, Any]) -> None:
        """Add or replace one object given as Kubernetes JSON; kinds in `IGNORED_KINDS` are
        accepted and not kept. Raises `PlannerInputError` for an object it cannot read."""
        if kind == "Pod":
            self.upsert_pod(decode_pod(obj, self.kept_annotations, self.kept_labels))
        elif kind == "Node":
            self.upsert_node(decode_node(obj))
        elif kind == "PodDisruptionBudget":
            self.upsert_pdb(decode_pdb(obj))
        elif kind == "Namespace":
            self.upsert_namespace(decode_namespace(obj))
        elif kind == "PersistentVolumeClaim":
            claim = decode_claim(obj)
            self.claims[claim.key] = claim
        elif kind == "PersistentVolume":
            volume = decode_volume(obj)
            self.volumes[volume.name] = volume
        elif kind == "StorageClass":
            storage_class = decode_storage_class(obj)
            self.storage_classes[storage_class.name] = storage_class
        elif kind == "CSINode":
            csinode = decode_csinode(obj)
            self.csinodes[csinode.name] = csinode
        elif kind == "VolumeAttachment":
            attachment = decode_volume_attachment(obj)
            self.volume_attachments[attachment.name] = attachment
        elif kind == "PodGroup":
            self.upsert_pod_group(decode_pod_group(obj))
        elif kind == "CompositePodGroup":
            self.upsert_composite_pod_group(decode_composite_pod_group(obj))
        elif kind not in IGNORED_KINDS:
            raise ValueError(f"unsupported kind {kind}")

    def remove(self, kind: str, key: str) -> None:
        """Forget one object: a Pod by UID, a cluster-scoped object by name, any other
        namespaced one by `namespace/name`. Unknown objects and ignored kinds are no-ops."""
        if kind == "Pod":
            self.remove_pod(key)
            self._forget_rejection(key)
        elif kind == "Node":
            self.remove_node(key)
        elif kind == "PodDisruptionBudget":
            self.remove_pdb(key)
        elif kind == "Namespace":
            self.namespaces.pop(key, None)
        elif kind == "PodGroup":
            self.remove_pod_group(key)
        elif kind == "CompositePodGroup":
            self.remove_composite_pod_group(key)
        elif kind in _STORES:
            getattr(self, _STORES[kind]).pop(key, None)
        elif kind not in IGNORED_KINDS:
            raise ValueError(f"unsupported kind {kind}")

    def warm(self) -> None:
        """Compute now what decisions would otherwise compute on first use: the label index,
        the nodes in name order, each node's pods by importance and the budgets matching
        each pod. The cluster view calls it once synced, so that no decision (under the
        decision lock) pays for a node it is the first to visit; from then on each bound
        pod's budget matches are computed as it arrives, and a budget's status update keeps
        them (only a new, removed or reselected budget clears them). Nodes holding pods of
        pod groups get their victim units too (`victim_units.node_units`)."""
        # Imported here: victim_units builds on this module.
        from preemptctl.preemption.victim_units import UnitIndex, node_units

        self.pod_index()
        self.nodes()
        self.sorted_pdbs()
        units = UnitIndex(self)
        for info in self.node_infos.values():
            info.pdb_matches(self)
            if info.grouped and info.node is not None:
                node_units(self, info, units)
        self.warmed = True

    def pod_index(self) -> BoundPodIndex:
        """The bound-pod index with its label part built (see `BoundPodIndex.build_labels`)."""
        if not self.bound.labels_ready:
            self.bound.build_labels(
                pod for info in self.node_infos.values() for pod in info.pods.values()
            )
        return self.bound

    # -- namespaces -------------------------------------------------------------------------

    def upsert_namespace(self, namespace: Namespace) -> None:
        self.namespaces[namespace.name] = namespace

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        """A namespace's labels; None when the snapshot has no such Namespace object."""
        found = self.namespaces.get(name)
        return found.labels if found is not None else None

    # -- pods the feeder could not read -----------------------------------------------------

    def reject_pod(self, uid: str, node_name: str | None) -> None:
        """A pod that could not be read: drop what was known of it, and keep its node (if
        any) out of the candidates until that UID is upserted readably or removed."""
        self.remove_pod(uid)
        self._forget_rejection(uid)
        self.rejected[uid] = node_name
        if node_name:
            self._rejected_on_node.setdefault(node_name, set()).add(uid)

    def _forget_rejection(self, uid: str) -> None:
        node_name = self.rejected.pop(uid, None)
        if node_name:
            on_node = self._rejected_on_node.get(node_name)
            if on_node is not None:
                on_node.discard(uid)
                if not on_node:
                    del self._rejected_on_node[node_name]

    def unreadable_pods(self, node_name: str) -> list[str]:
        """UIDs of pods on this node the feeder could not read (sorted)."""
        found = self._rejected_on_node.get(node_name)
        return sorted(found) if found else []

    # -- nodes ------------------------------------------------------------------------------

    def upsert_node(self, node: Node) -> None:
        info = self.node_infos.get(node.name)
        if info is None:
            info = self.node_infos[node.name] = NodeInfo(node.name, node)
            self._sorted_nodes = None
            self._domains.clear()
        else:
            if info.node is None:
                self._sorted_nodes = None
                self._domains.clear()
            elif info.node.labels != node.labels:
                self._domains.clear()
            info.node = node
            self._changed_nodes.add(node.name)

    def domains(self, key: str) -> dict[str, str]:
        """Each node having the label `key`, with its value: the topology domains of that key
        (kept until a node is added, removed or relabelled; status updates keep it)."""
        found = self._domains.get(key)
        if found is None:
            found = self._domains[key] = {
                info.name: info.node.labels[key]
                for info in self.nodes()
                if info.node is not None and key in info.node.labels
            }
        return found

    def remove_node(self, name: str) -> None:
        info = self.node_infos.get(name)
        if info is None:
            return
        if info.pods:
            info.node = None  # pods still bound to it keep counting, as in the scheduler cache
        else:
            del self.node_infos[name]
        self._sorted_nodes = None
        self._domains.clear()

    def take_changed_nodes(self) -> set[str]:
        """The names of the nodes whose pods or Node object changed since the last call (a
        node added or removed also renews `nodes()`, the list): what the kept filter pass
        must judge again."""
        changed, self._changed_nodes = self._changed_nodes, set()
        return changed

    def nodes(self) -> list[NodeInfo]:
        """Nodes that exist (have a Node object), in name order."""
        if self._sorted_nodes is None:
            self._sorted_nodes = sorted(
                (info for info in self.node_infos.values() if info.node is not None),
                key=lambda info: info.name,
            )
        return self._sorted_nodes

    def node(self, name: str) -> NodeInfo | None:
        info = self.node_infos.get(name)
        return info if info is not None and info.node is not None else None

    # -- pods -------------------------------------------------------------------------------

    def upsert_pod(self, pod: Pod) -> None:
        if pod.group or pod.spec_priority is not None:
            pod = self._with_group_priority(pod)
        uid, key = pod.uid, pod.key
        old = self.pods.get(uid)
        if old is not None:
            self._detach(old)
            if old.namespace != pod.namespace or old.labels != pod.labels:
                self._pdb_matches.pop(uid, None)
        else:
            replaced_uid = self._uid_by_key.get(key)
            if replaced_uid is not None and replaced_uid != uid:
                self.remove_pod(replaced_uid)
        self.pods[uid] = pod
        self._uid_by_key[key] = uid
        if pod.over_cap or self.over_cap:
            self._count_over_cap(old, pod)
        self._attach(pod)
        if self.rejected:
            self._forget_rejection(uid)

    def remove_pod(self, uid: str, *, returning: bool = False) -> Pod | None:
        """Remove the pod; `returning` says the same object will be upserted again soon
        (a claim hides its victims for one decision), so what is known of it is kept."""
        pod = self.pods.pop(uid, None)
        if pod is None:
            return None
        key = pod.key
        if self._uid_by_key.get(key) == uid:
            del self._uid_by_key[key]
        if pod.over_cap:
            self._count_over_cap(pod, None)
        self._detach(pod)
        if not returning:
            self._pdb_matches.pop(uid, None)
        return pod

    def _count_over_cap(self, old: Pod | None, new: Pod | None) -> None:
        """Keep `over_cap` and the labels-over-cap index current as `old` becomes `new`."""
        if old is not None and old.over_cap:
            self.over_cap.pop(old.uid, None)
            if "labels" in old.over_cap:
                _discard(self._labels_over_cap, old.namespace, old.uid)
        if new is not None and new.over_cap:
            self.over_cap[new.uid] = new.over_cap
            self.over_cap_total.update(new.over_cap)
            if "labels" in new.over_cap and not new.is_terminal():
                found = self._labels_over_cap.setdefault(new.namespace, {})
                found[new.uid] = new

    def over_cap_pods(self) -> dict[str, int]:
        """How many pods held now have each field beyond the caps (what a gauge exports)."""
        counts: Counter[str] = Counter()
        for fields in self.over_cap.values():
            counts.update(fields)
        return dict(counts)

    def labels_over_cap(self, namespace: str) -> list[Pod]:
        """The non-terminal pods of `namespace` whose labels were not all kept."""
        found = self._labels_over_cap.get(namespace)
        return list(found.values()) if found else []

    def namespaces_with_labels_over_cap(self) -> Collection[str]:
        return self._labels_over_cap.keys()

    def _attach(self, pod: Pod) -> None:
        if pod.is_terminal():
            return
        if pod.group:
            key = f"{pod.namespace}/{pod.group}"
            self._stamp(key)
            members = self._group_members.get(key)
            if members is None:
                members = self._group_members[key] = {}
            members[pod.uid] = pod
        if self._label_groups:
            self._index_label_groups(pod, 1)
        if pod.node_name:
            info = self.node_infos.get(pod.node_name)
            if info is None:
                info = self.node_infos[pod.node_name] = NodeInfo(pod.node_name)
            info.add_pod(pod)
            self._changed_nodes.add(pod.node_name)
            if self.warmed and pod.uid not in self._pdb_matches:
                self.matching_pdbs(pod)
            bound = self.bound
            if pod.claims or pod.inline_csi or pod.pod_anti_affinity or bound.labels_ready:
                bound.add(pod)
        elif pod.nominated_node_name:
            self._nominated.setdefault(pod.nominated_node_name, {})[pod.uid] = pod

    def _detach(self, pod: Pod) -> None:
        if pod.group:
            key = f"{pod.namespace}/{pod.group}"
            _discard(self._group_members, key, pod.uid)
            if key in self._group_members or key in self.pod_groups:
                self._stamp(key)
            else:
                self._unit_stamps.pop(key, None)
        if self._label_groups:
            self._index_label_groups(pod, -1)
        if pod.node_name:
            info = self.node_infos.get(pod.node_name)
            self.bound.discard(pod)
            if info is not None:
                info.remove_pod(pod.uid)
                self._changed_nodes.add(pod.node_name)
                if info.node is None and not info.pods:
                    del self.node_infos[pod.node_name]
        elif pod.nominated_node_name:
            nominated = self._nominated.get(pod.nominated_node_name)
            if nominated is not None:
                nominated.pop(pod.uid, None)
                if not nominated:
                    del self._nominated[pod.nominated_node_name]

    def pod_by_key(self, key: str) -> Pod | None:
        """A pod by `namespace/name`."""
        uid = self._uid_by_key.get(key)
        return self.pods.get(uid) if uid is not None else None

    def nominated_pods(self, node_name: str) -> list[Pod]:
        """Pods not yet bound whose `status.nominatedNodeName` is this node (the nominator)."""
        nominated = self._nominated.get(node_name)
        return list(nominated.values()) if nominated else []

    def all_nominated_pods(self) -> list[Pod]:
        """Every pending pod with a nomination (the nominator's whole index)."""
        return [pod for pods in self._nominated.values() for pod in pods.values()]

    def has_nominations(self, node_name: str) -> bool:
        return node_name in self._nominated

    def nominated_node_names(self) -> Collection[str]:
        """The nodes some pending pod is nominated to (a live view: do not keep it)."""
        return self._nominated.keys()

    # -- pod groups -------------------------------------------------------------------------

    def upsert_pod_group(self, group: PodGroup) -> None:
        """Add or replace a PodGroup; its members' priority follows the group's (the root's
        of its hierarchy, when it has a parent)."""
        key = group.key
        old = self.pod_groups.get(key)
        self.pod_groups[key] = group
        self._stamp(key)
        moved = old is None or old.parent != group.parent
        if moved:
            self._adopt(key, False, old.parent if old is not None else "", group.parent)
        if moved or old is None or old.disruption_all != group.disruption_all:
            self.group_modes_version += 1
        if moved or old is None or old.priority != group.priority:
            self._reprioritise_members(key)

    def remove_pod_group(self, key: str) -> None:
        """Forget a PodGroup (`namespace/name`); its members take back their own priority."""
        old = self.pod_groups.pop(key, None)
        if old is not None:
            self._adopt(key, False, old.parent, "")
            self.group_modes_version += 1
            if key in self._group_members:
                self._stamp(key)
            else:
                self._unit_stamps.pop(key, None)
            self._reprioritise_members(key)

    def upsert_composite_pod_group(self, group: CompositePodGroup) -> None:
        """Add or replace a CompositePodGroup: the members of every PodGroup beneath it take
        the priority of their hierarchy's root, and are taken whole as its modes say."""
        key = group.key
        old = self.composite_pod_groups.get(key)
        self.composite_pod_groups[key] = group
        if old is not None and (old.priority, old.disruption_all, old.parent) == (
            group.priority,
            group.disruption_all,
            group.parent,
        ):
            return
        self._adopt(key, True, old.parent if old is not None else "", group.parent)
        self.group_modes_version += 1
        for leaf in self.leaf_pod_groups(key, composite=True):
            self._reprioritise_members(leaf)

    def remove_composite_pod_group(self, key: str) -> None:
        """Forget a CompositePodGroup (`namespace/name`): the groups beneath it stop there."""
        if key not in self.composite_pod_groups:
            return
        leaves = self.leaf_pod_groups(key, composite=True)  # while it still leads to them
        old = self.composite_pod_groups.pop(key)
        self._adopt(key, True, old.parent, "")
        self.group_modes_version += 1
        for leaf in leaves:
            self._reprioritise_members(leaf)

    def _adopt(self, key: str, composite: bool, old_parent: str, new_parent: str) -> None:
        """Move the group `key` from under `old_parent` to under `new_parent` (names in its
        namespace; "" for none) in the children index."""
        namespace = key.partition("/")[0]
        if old_parent:
            _discard_child(self._children, f"{namespace}/{old_parent}", key)
        if new_parent:
            self._children.setdefault(f"{namespace}/{new_parent}", {})[key] = composite

    def traverse_hierarchy_up(self, key: str) -> list[PodGroup | CompositePodGroup]:
        """`traverseHierarchyUp`: the PodGroup `key` and its ancestors, nearest first, as far
        as they exist (a missing parent ends it), at most `WORKLOAD_MAX_TREE_DEPTH` of them
        and none twice (a cycle ends it)."""
        group = self.pod_groups.get(key)
        if group is None:
            return []
        found: list[PodGroup | CompositePodGroup] = [group]
        seen = {key}
        parent = group.parent
        namespace = group.namespace
        while parent and len(found) < WORKLOAD_MAX_TREE_DEPTH:
            parent_key = f"{namespace}/{parent}"
            composite = self.composite_pod_groups.get(parent_key)
            if composite is None or parent_key in seen:
                break
            seen.add(parent_key)
            found.append(composite)
            parent = composite.parent
        return found

    def group_priority(self, key: str) -> int | None:
        """`getPodPriority` for a member of the PodGroup `key`: the priority of the root of
        its hierarchy (the last group `traverse_hierarchy_up` reaches); None without the
        PodGroup (the pod's own priority then counts)."""
        chain = self.traverse_hierarchy_up(key)
        return chain[-1].priority if chain else None

    def leaf_pod_groups(self, key: str, *, composite: bool) -> list[str]:
        """`helper.GetPodGroupStates`: the PodGroups at the leaves beneath the group `key`
        (itself, for a PodGroup), walking down at most `WORKLOAD_MAX_TREE_DEPTH` levels and
        through each group once; only groups the snapshot holds."""
        leaves: list[str] = []
        seen: set[str] = set()

        def walk(at: str, is_composite: bool, depth: int) -> None:
            if depth >= WORKLOAD_MAX_TREE_DEPTH or at in seen:
                return
            seen.add(at)
            if not is_composite:
                if at in self.pod_groups:
                    leaves.append(at)
                return
            if at not in self.composite_pod_groups:
                return
            for child, child_composite in sorted(self._children.get(at, {}).items()):
                walk(child, child_composite, depth + 1)

        walk(key, composite, 0)
        return leaves

    def _stamp(self, key: str) -> None:
        self._stamp_clock += 1
        self._unit_stamps[key] = self._stamp_clock

    def unit_stamp(self, key: str) -> int:
        """The stamp of a group taken whole (see `_unit_stamps`); 0 for one not known."""
        return self._unit_stamps.get(key, 0)

    def unit_stamps(self, keys: tuple[str, ...]) -> tuple[int, ...]:
        """`unit_stamp` of each key (read for every node a dry run visits: one C loop)."""
        return tuple(map(self._unit_stamps.get, keys, repeat(0, len(keys))))

    def _reprioritise_members(self, key: str) -> None:
        for pod in list(self._group_members.get(key, {}).values()):
            self.upsert_pod(pod)

    def _with_group_priority(self, pod: Pod) -> Pod:
        """The pod with its effective priority: its group's (the root's of the group's
        hierarchy) when the group is known (upstream `getPodPriority`), else its own (kept in
        `spec_priority` meanwhile)."""
        own = pod.spec_priority if pod.spec_priority is not None else pod.priority
        group = self.group_priority(f"{pod.namespace}/{pod.group}") if pod.group else None
        if group is None or group == own:
            if pod.spec_priority is None:
                return pod
            return dataclasses.replace(pod, priority=own, spec_priority=None)
        if pod.priority == group and pod.spec_priority == own:
            return pod
        return dataclasses.replace(pod, priority=group, spec_priority=own)

    def pod_group(self, key: str) -> PodGroup | None:
        return self.pod_groups.get(key)

    def composite_pod_group(self, key: str) -> CompositePodGroup | None:
        return self.composite_pod_groups.get(key)

    def group_members(self, key: str) -> list[Pod]:
        """The non-terminal pods naming the pod group `namespace/name`, bound or pending."""
        members = self._group_members.get(key)
        return list(members.values()) if members else []

    def label_group_members(self, label: str, key: str) -> list[Pod]:
        """The non-terminal pods whose `label` has the value `name`, in `namespace` (key
        `namespace/name`): a group named by a label (a setting), bound or pending."""
        groups = self._label_groups.get(label)
        if groups is None:
            groups = self._label_groups[label] = {}
            for pod in self.pods.values():
                value = pod.labels.get(label)
                if value is not None and not pod.is_terminal():
                    groups.setdefault(f"{pod.namespace}/{value}", {})[pod.uid] = pod
        members = groups.get(key)
        return list(members.values()) if members else []

    def _index_label_groups(self, pod: Pod, sign: int) -> None:
        labels = pod.labels
        if not labels:
            return
        for label, groups in self._label_groups.items():
            value = labels.get(label)
            if value is None:
                continue
            key = f"{pod.namespace}/{value}"
            stamp_key = f"{label}\0{key}"
            if sign > 0:
                members = groups.get(key)
                if members is None:
                    members = groups[key] = {}
                members[pod.uid] = pod
                self._stamp(stamp_key)
            else:
                _discard(groups, key, pod.uid)
                if key in groups:
                    self._stamp(stamp_key)
                else:
                    self._unit_stamps.pop(stamp_key, None)

    # -- budgets ----------------------------------------------------------------------------

    def upsert_pdb(self, pdb: PodDisruptionBudget) -> None:
        self.pdb_version += 1
        key = pdb.key
        old = self.pdbs.get(key)
        self.pdbs[key] = pdb
        position = self._pdb_positions.get(key)
        if (
            old is not None
            and self._sorted_pdbs is not None
            and position is not None
            and old.selector == pdb.selector
        ):
            # A status update (disruptionsAllowed, disruptedPods): the same pods match, at
            # the same position; what a decision spends is read from the new object.
            self._sorted_pdbs[position] = pdb
            return
        self._invalidate_pdbs()

    def remove_pdb(self, key: str) -> None:
        self.pdb_version += 1
        if self.pdbs.pop(key, None) is not None:
            self._invalidate_pdbs()

    def _invalidate_pdbs(self) -> None:
        self.pdb_generation += 1
        self._sorted_pdbs = None
        self._pdbs_by_namespace = None
        self._pdb_positions = {}
        self._pdb_matches.clear()

    def sorted_pdbs(self) -> list[PodDisruptionBudget]:
        """The budgets in a fixed order; `matching_pdbs` indexes into this list."""
        if self._sorted_pdbs is None:
            self._sorted_pdbs = sorted(self.pdbs.values(), key=lambda pdb: pdb.key)
            # Per namespace, the budgets that can select a pod at all: a nil, empty or
            # invalid selector matches nothing upstream, so it is left out here, once.
            by_namespace: dict[str, list[tuple[int, LabelSelector]]] = {}
            for index, pdb in enumerate(self._sorted_pdbs):
                self._pdb_positions[pdb.key] = index
                selector = pdb.selector
                if selector is not None and selector.valid and not selector.is_empty():
                    by_namespace.setdefault(pdb.namespace, []).append((index, selector))
            self._pdbs_by_namespace = by_namespace
        return self._sorted_pdbs

    def matching_pdbs(self, pod: Pod) -> tuple[int, ...]:
        """Indexes of the budgets whose selector selects the pod: same namespace, non-empty
        valid selector (upstream: a nil, empty or invalid selector matches nothing)."""
        cached = self._pdb_matches.get(pod.uid)
        if cached is not None:
            return cached
        if self._pdbs_by_namespace is None:
            self.sorted_pdbs()
            assert self._pdbs_by_namespace is not None
        matches: tuple[int, ...] = ()
        if "labels" in pod.over_cap:
            # Its labels were not all kept: any budget of its namespace may select it, so
            # it is never taken for a free victim (it spends each, and violates any spent).
            matches = tuple(index for index, _ in self._pdbs_by_namespace.get(pod.namespace, ()))
        elif pod.labels:
            labels = pod.labels
            matches = tuple(
                [
                    index
                    for index, selector in self._pdbs_by_namespace.get(pod.namespace, ())
                    if label_selector_matches(selector, labels)
                ]
            )
        self._pdb_matches[pod.uid] = matches
        return matches


_STORES = {
    "PersistentVolumeClaim": "claims",
    "PersistentVolume": "volumes",
    "StorageClass": "storage_classes",
    "CSINode": "csinodes",
    "VolumeAttachment": "volume_attachments",
}
_DECODERS = frozenset(
    {"Node", "Pod", "PodDisruptionBudget", "Namespace", "PodGroup", "CompositePodGroup", *_STORES}
)

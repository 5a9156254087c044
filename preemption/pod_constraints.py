"""The filters that read other pods and objects: the volume filters, PodTopologySpread
(DoNotSchedule) and InterPodAffinity, as kube-scheduler's plugins judge them.

These plugins precompute, once per scheduling cycle (`PreFilter`), counts of matching pods per
topology domain, answer `Filter` for a node from those counts alone, and keep the counts true
while preemption's dry run removes and reprieves pods (`PreFilterExtensions.RemovePod` and
`AddPod`). `PodConstraints` is that state for one preemptor (the volume filters' own part
is `volumes.VolumeChecks`); `prefilter` returns None when none of them has anything to
judge, so the common pod keeps the planner's fast path.

The counts are built from `BoundPodIndex` (pods by namespace and label, anti-affinity pods by
their terms), so PreFilter touches the pods a selector can match, never the whole cluster.
A dry run on a node changes only that node's domains; `begin`/`restore` undo it exactly.

As upstream, the spread PreFilter skips terminating pods but RemovePod and AddPod do not:
removing a terminating victim in the dry run lowers its domain's count below what PreFilter
counted, and reprieving it raises it back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from preemptctl.preemption.filters import SUCCESS, Code, Status, node_affinity, status_of
from preemptctl.preemption.objects import AffinityTerm, Node, Pod, SpreadConstraint
from preemptctl.preemption.selectors import first_untolerated_taint, label_selector_matches
from preemptctl.preemption.volumes import VolumeChecks

if TYPE_CHECKING:
    from preemptctl.preemption.snapshot import ClusterSnapshot

ERR_AFFINITY_RULES = "node(s) didn't match pod affinity rules"
ERR_ANTI_AFFINITY_RULES = "node(s) didn't match pod anti-affinity rules"
ERR_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
ERR_SPREAD = "node(s) didn't match pod topology spread constraints"
ERR_SPREAD_LABEL = ERR_SPREAD + " (missing required label)"

SPREAD = "PodTopologySpread"
INTER_POD_AFFINITY = "InterPodAffinity"

_NO_DOMAIN = 1 << 31  # upstream's criticalPaths start at MaxInt32
_EMPTY: Mapping[str, str] = {}


def term_covers_namespace(
    term: AffinityTerm, namespace: str, namespace_labels: Mapping[str, str] | None
) -> bool:
    """Whether the term reads pods of `namespace`: named, or selected by its namespaceSelector
    (`namespace_labels` None: no such Namespace, which a selector does not select)."""
    if namespace in term.namespaces:
        return True
    chooser = term.namespace_selector
    if chooser is None or namespace_labels is None or not chooser.valid:
        return False
    return label_selector_matches(chooser, namespace_labels)


def term_matches(term: AffinityTerm, pod: Pod, namespace_labels: Mapping[str, str] | None) -> bool:
    """`AffinityTerm.Matches`: the pod's namespace is named or selected, and its labels match.

    `namespace_labels` are the labels of the pod's namespace; None when the snapshot has no
    such Namespace (a namespaceSelector then selects it not, as upstream's lister finds none).
    """
    if not term_covers_namespace(term, pod.namespace, namespace_labels):
        return False
    selector = term.selector
    return selector is not None and selector.valid and label_selector_matches(selector, pod.labels)


def _spread_selects(constraint: SpreadConstraint, pod: Pod) -> bool:
    selector = constraint.selector
    return selector is not None and label_selector_matches(selector, pod.labels)


class _Effect:
    """What one pod contributes to the counts when it is on a node (see `PodConstraints`)."""

    __slots__ = ("affinity", "anti", "existing", "spread", "volumes")

    def __init__(self) -> None:
        self.affinity = False  # matches every required affinity term of the preemptor
        self.anti: list[int] = []  # the preemptor's anti-affinity terms it matches
        # topology keys of its own anti terms matching the preemptor (pods not bound; a bound
        # pod's are looked up by its terms in `PodConstraints.existing_groups`)
        self.existing: list[str] = []
        self.spread: list[int] = []  # the spread constraints selecting it
        self.volumes = False  # mounts claims or CSI volumes the volume filters count

    def empty(self) -> bool:
        return not (self.affinity or self.anti or self.existing or self.spread or self.volumes)


class _Spread:
    """One constraint's `TpValueToMatchNum` and the two least-loaded domains (`criticalPaths`)."""

    __slots__ = ("constraint", "counts", "eligible", "min1", "min1_domain", "min2", "self_match")

    def __init__(self, constraint: SpreadConstraint, self_match: bool) -> None:
        self.constraint = constraint
        self.self_match = self_match
        self.counts: dict[str, int] = {}
        self.eligible: Mapping[str, str] = {}  # node name -> its domain
        self.min1 = self.min2 = _NO_DOMAIN
        self.min1_domain = ""

    def settle(self) -> None:
        for domain, count in self.counts.items():
            if count < self.min1:
                self.min1, self.min2, self.min1_domain = count, self.min1, domain
            elif count < self.min2:
                self.min2 = count

    def min_match(self, domain: str) -> int:
        """The global minimum with `domain` at its current count (only that domain changes
        while one node is judged, so the precomputed others stay exact)."""
        if len(self.counts) < self.constraint.min_domains:
            return 0
        others = self.min2 if domain == self.min1_domain else self.min1
        here = self.counts.get(domain)
        return others if here is None else min(others, here)


class PodConstraints:
    """The PreFilter state of PodTopologySpread and InterPodAffinity for one preemptor."""

    def __init__(self, snapshot: ClusterSnapshot, preemptor: Pod) -> None:
        self.snapshot = snapshot
        self.pod = preemptor
        self.namespace_labels = snapshot.namespace_labels(preemptor.namespace)
        self.affinity_terms = preemptor.pod_affinity
        self.anti_terms = preemptor.pod_anti_affinity
        self.affinity_counts: dict[tuple[str, str], int] = {}
        self.anti_counts: dict[tuple[str, str], int] = {}
        self.existing_counts: dict[tuple[str, str], int] = {}
        self.existing_keys: set[str] = set()
        # Bound pods' anti-affinity terms that select the preemptor -> their topology keys.
        self.existing_groups: dict[tuple[AffinityTerm, ...], list[str]] = {}
        self.spreads = [
            _Spread(c, _spread_selects(c, preemptor)) for c in preemptor.spread_constraints
        ]
        self.self_affinity = all(
            term_matches(t, preemptor, self.namespace_labels) for t in self.affinity_terms
        )
        self.effects: dict[str, _Effect] = {}
        self.volumes: VolumeChecks | None = None
        # (counts, key, count before, whether a zero count stays as an entry)
        self._undo: list[tuple[dict[Any, int], Any, int, bool]] | None = None

    # -- PreFilter ------------------------------------------------------------------------------

    @classmethod
    def prefilter(cls, snapshot: ClusterSnapshot, preemptor: Pod) -> PodConstraints | None:
        """Both plugins' `PreFilter`; None when neither has anything to judge for this pod."""
        state = cls(snapshot, preemptor)
        state._count_existing_anti_affinity()
        if preemptor.claims or preemptor.inline_csi:
            state.volumes = VolumeChecks(snapshot, preemptor)
            for pod in snapshot.bound.with_volumes.values():
                state._effect(pod).volumes = True
        if not (
            state.volumes is not None
            or state.affinity_terms
            or state.anti_terms
            or state.spreads
            or state.existing_keys
            or state._nominated_anti_affinity()
        ):
            return None
        state._count_incoming_affinity()
        state._count_spread()
        return state

    def _nominated_anti_affinity(self) -> bool:
        """Whether a pending pod nominated somewhere has anti-affinity against the preemptor
        (AddPod of nominated pods would then change the answer on its node)."""
        labels = self.namespace_labels if self.namespace_labels is not None else _EMPTY
        return any(
            term_matches(t, self.pod, labels)
            for pod in self.snapshot.all_nominated_pods()
            for t in pod.pod_anti_affinity
        )

    def _node_of(self, pod: Pod) -> Node | None:
        info = self.snapshot.node_infos.get(pod.node_name)
        return info.node if info is not None else None

    def _effect(self, pod: Pod) -> _Effect:
        found = self.effects.get(pod.uid)
        if found is None:
            found = self.effects[pod.uid] = _Effect()
        return found

    def _count_existing_anti_affinity(self) -> None:
        """Existing pods whose required anti-affinity selects the preemptor (symmetry).

        Pods sharing their terms (a Deployment's replicas) are one group: each group is
        matched against the preemptor once, its counts per topology pair come from the
        index (`BoundPodIndex.anti_pairs`), and a pod's part in the dry run is looked up by
        its terms (`existing_groups`), not kept per pod."""
        labels = self.namespace_labels if self.namespace_labels is not None else _EMPTY
        bound = self.snapshot.bound
        counts = self.existing_counts
        for terms, _ in bound.anti_affinity_groups_for(self.pod.labels):
            keys = [t.topology_key for t in terms if term_matches(t, self.pod, labels)]
            if not keys:
                continue
            self.existing_keys.update(keys)
            self.existing_groups[terms] = keys
            for key in keys:
                pairs = bound.anti_pairs(terms, key, self.snapshot.domains(key))
                if not counts:
                    counts.update(pairs)
                else:
                    for pair, count in pairs.items():
                        counts[pair] = counts.get(pair, 0) + count

    def _term_candidates(self, term: AffinityTerm) -> Iterable[Pod]:
        """The bound pods a term may select, from the index (each still to be checked)."""
        selector = term.selector
        if selector is None or not selector.valid:
            return ()
        bound = self.snapshot.pod_index()
        namespaces = set(term.namespaces)
        if term.namespace_selector is not None:
            namespaces.update(bound.by_namespace)
        found: list[Pod] = []
        for namespace in sorted(namespaces):
            found.extend(bound.selectable(namespace, selector))
        return found

    def _matches(self, term: AffinityTerm, pod: Pod) -> bool:
        return term_matches(term, pod, self.snapshot.namespace_labels(pod.namespace))

    def _count_incoming_affinity(self) -> None:
        """Pods matching all the preemptor's affinity terms, or any of its anti-affinity terms."""
        if self.affinity_terms:
            first, rest = self.affinity_terms[0], self.affinity_terms[1:]
            for pod in self._term_candidates(first):
                if self._matches(first, pod) and all(self._matches(t, pod) for t in rest):
                    node = self._node_of(pod)
                    if node is not None:
                        self._effect(pod).affinity = True
                        for term in self.affinity_terms:
                            self._bump_pair(self.affinity_counts, node, term.topology_key, 1)
        for index, term in enumerate(self.anti_terms):
            for pod in self._term_candidates(term):
                if self._matches(term, pod):
                    node = self._node_of(pod)
                    if node is not None:
                        self._effect(pod).anti.append(index)
                        self._bump_pair(self.anti_counts, node, term.topology_key, 1)

    def _include(self, constraint: SpreadConstraint, node: Node) -> bool:
        """`matchNodeInclusionPolicies`: node affinity honoured by default, taints if asked."""
        pod = self.pod
        if (
            constraint.honor_node_affinity
            and (pod.node_selector or pod.required_affinity is not None)
            and not node_affinity(pod, node).ok
        ):
            return False
        return not (
            constraint.honor_node_taints
            and node.taints
            and first_untolerated_taint(node.taints, pod.tolerations, ("NoSchedule", "NoExecute"))
            is not None
        )

    def _count_spread(self) -> None:
        """`calPreFilterState`: matching pods per domain over the nodes each constraint counts
        (nodes with every constraint's topology key, passing its inclusion policies)."""
        if not self.spreads:
            return
        domains = [self.snapshot.domains(s.constraint.topology_key) for s in self.spreads]
        common = domains[0]
        if len(domains) > 1:
            common = {name: v for name, v in common.items() if all(name in d for d in domains)}
        pod = self.pod
        for spread, by_node in zip(self.spreads, domains, strict=True):
            constraint = spread.constraint
            filtering = constraint.honor_node_taints or (
                constraint.honor_node_affinity
                and (pod.node_selector or pod.required_affinity is not None)
            )
            if not filtering and len(domains) == 1:
                spread.eligible = by_node
            else:
                node_infos = self.snapshot.node_infos
                spread.eligible = {
                    name: by_node[name]
                    for name in common
                    if not filtering or self._include(constraint, node_infos[name].node)  # type: ignore[arg-type]
                }
            spread.counts = dict.fromkeys(spread.eligible.values(), 0)
        for index, spread in enumerate(self.spreads):
            selector = spread.constraint.selector
            if selector is None:
                continue
            for pod in self.snapshot.pod_index().selectable(self.pod.namespace, selector):
                if not label_selector_matches(selector, pod.labels):
                    continue
                # A terminating pod is not counted, but RemovePod and AddPod count it
                # as any other (upstream's updateWithPod does not look at deletion).
                self._effect(pod).spread.append(index)
                domain = spread.eligible.get(pod.node_name)
                if domain is not None and not pod.terminating:
                    spread.counts[domain] += 1
            spread.settle()

    # -- AddPod / RemovePod -------------------------------------------------------------------

    def effect_of(self, pod: Pod) -> _Effect | None:
        """What `pod` contributes; computed for pods PreFilter did not see (nominated ones)."""
        found = self.effects.get(pod.uid)
        if found is not None or pod.node_name:
            return found
        effect = _Effect()
        if self.affinity_terms and all(self._matches(t, pod) for t in self.affinity_terms):
            effect.affinity = True
        effect.anti = [i for i, t in enumerate(self.anti_terms) if self._matches(t, pod)]
        labels = self.namespace_labels if self.namespace_labels is not None else _EMPTY
        effect.existing = [
            t.topology_key for t in pod.pod_anti_affinity if term_matches(t, self.pod, labels)
        ]
        if pod.namespace == self.pod.namespace:
            effect.spread = [
                i for i, s in enumerate(self.spreads) if _spread_selects(s.constraint, pod)
            ]
        effect.volumes = self.volumes is not None and bool(pod.claims or pod.inline_csi)
        self.existing_keys.update(effect.existing)
        self.effects[pod.uid] = effect
        return effect

    def update(self, pod: Pod, node: Node, sign: int) -> None:
        """`AddPod` (sign 1) or `RemovePod` (sign -1) of `pod` on `node`, for all plugins."""
        if pod.node_name and pod.pod_anti_affinity and self.existing_groups:
            for key in self.existing_groups.get(pod.pod_anti_affinity, ()):
                self._bump_pair(self.existing_counts, node, key, sign)
        effect = self.effect_of(pod)
        if effect is None or effect.empty():
            return
        if effect.affinity:
            for term in self.affinity_terms:
                self._bump_pair(self.affinity_counts, node, term.topology_key, sign)
        for index in effect.anti:
            self._bump_pair(self.anti_counts, node, self.anti_terms[index].topology_key, sign)
        for key in effect.existing:
            self._bump_pair(self.existing_counts, node, key, sign)
        if effect.volumes and self.volumes is not None:
            self._update_volumes(self.volumes, pod, sign)
        for index in effect.spread:
            spread = self.spreads[index]
            domain = spread.eligible.get(node.name)
            if domain is not None:
                self._log(spread.counts, domain, keep_zero=True)
                spread.counts[domain] += sign

    def _update_volumes(self, volumes: VolumeChecks, pod: Pod, sign: int) -> None:
        """VolumeRestrictions' AddPod/RemovePod, and the pod's volumes on or off the node."""
        uses = volumes.rwop_uses(pod)
        if uses:
            self._bump_key(volumes.counts, "rwop", sign * uses)
        if pod.node_name:
            self._bump_key(volumes.counts, f"absent/{pod.uid}", -sign)
        else:
            volumes.pods[pod.uid] = pod
            self._bump_key(volumes.counts, f"added/{pod.uid}", sign)

    def _bump_key(self, counts: dict[str, int], key: str, by: int) -> None:
        self._log(counts, key, keep_zero=False)
        left = counts.get(key, 0) + by
        if left:
            counts[key] = left
        else:
            counts.pop(key, None)

    @property
    def prefilter_failure(self) -> Status | None:
        """A PreFilter failure (a missing claim...): every node fails with it."""
        return self.volumes.everywhere if self.volumes is not None else None

    @property
    def unsupported(self) -> str:
        """What the PreFilter found it cannot judge ("" if nothing)."""
        return self.volumes.unsupported if self.volumes is not None else ""

    def affects(self, pod: Pod) -> bool:
        """Whether adding or removing the pod can change any filter's answer."""
        if pod.node_name and pod.pod_anti_affinity in self.existing_groups:
            return True
        effect = self.effect_of(pod)
        return effect is not None and not effect.empty()

    def _bump_pair(self, counts: dict[tuple[str, str], int], node: Node, key: str, by: int) -> None:
        """`topologyToMatchedTermCount.update`: a count that reaches zero is deleted."""
        value = node.labels.get(key)
        if value is None:
            return
        pair = (key, value)
        self._log(counts, pair, keep_zero=False)
        left = counts.get(pair, 0) + by
        if left:
            counts[pair] = left
        else:
            del counts[pair]

    def _log(self, counts: dict[Any, int], key: Any, *, keep_zero: bool) -> None:
        if self._undo is not None:
            self._undo.append((counts, key, counts.get(key, 0), keep_zero))

    def begin(self) -> None:
        """Start recording changes, so that `restore` puts the PreFilter state back."""
        self._undo = []

    def restore(self) -> None:
        """Undo every `update` since `begin` (the dry run judged one node; the next starts
        from the cycle's state, as upstream's per-node state clone does)."""
        undo, self._undo = self._undo or [], None
        for counts, key, old, keep_zero in reversed(undo):
            if old or keep_zero:
                counts[key] = old
            else:
                counts.pop(key, None)

    # -- Filter -------------------------------------------------------------------------------

    def filter(self, node: Node) -> Status:
        """The volume filters', PodTopologySpread's, then InterPodAffinity's `Filter`."""
        if self.volumes is not None:
            status = self.volumes.filter(node)
            if not status.ok:
                return status
        status = self.filter_spread(node)
        if status.ok:
            status = self.filter_affinity(node)
        return status

    def filter_spread(self, node: Node) -> Status:
        labels = node.labels
        for spread in self.spreads:
            domain = labels.get(spread.constraint.topology_key)
            if domain is None:
                return status_of(Code.UNRESOLVABLE, (ERR_SPREAD_LABEL,), SPREAD)
            skew = spread.counts.get(domain, 0) + spread.self_match - spread.min_match(domain)
            if skew > spread.constraint.max_skew:
                return status_of(Code.UNSCHEDULABLE, (ERR_SPREAD,), SPREAD)
        return SUCCESS

    def filter_affinity(self, node: Node) -> Status:
        labels = node.labels
        if self.affinity_terms and not self._satisfies_affinity(labels):
            return status_of(Code.UNRESOLVABLE, (ERR_AFFINITY_RULES,), INTER_POD_AFFINITY)
        if self.anti_counts:
            for term in self.anti_terms:
                value = labels.get(term.topology_key)
                if value is not None and self.anti_counts.get((term.topology_key, value), 0) > 0:
                    return status_of(
                        Code.UNSCHEDULABLE, (ERR_ANTI_AFFINITY_RULES,), INTER_POD_AFFINITY
                    )
        if self.existing_counts:
            for key in self.existing_keys:
                value = labels.get(key)
                if value is not None and self.existing_counts.get((key, value), 0) > 0:
                    return status_of(
                        Code.UNSCHEDULABLE, (ERR_EXISTING_ANTI_AFFINITY,), INTER_POD_AFFINITY
                    )
        return SUCCESS

    def _satisfies_affinity(self, labels: Mapping[str, str]) -> bool:
        """`satisfyPodAffinity`: every term has a matching pod in the node's domain, or no pod
        anywhere matches and the preemptor matches its own terms (the first of a series)."""
        pods_exist = True
        for term in self.affinity_terms:
            value = labels.get(term.topology_key)
            if value is None:
                return False
            if self.affinity_counts.get((term.topology_key, value), 0) <= 0:
                pods_exist = False
        return pods_exist or (not self.affinity_counts and self.self_affinity)

    def filter_with_nominated(self, node: Node, nominated: Sequence[Pod]) -> Status:
        """`RunFilterPluginsWithNominatedPods` for these plugins: with the nominated pods
        added, and, if that passes, again without them (they may never arrive)."""
        if not nominated:
            return self.filter(node)
        for pod in nominated:
            self.update(pod, node, 1)
        status = self.filter(node)
        for pod in nominated:
            self.update(pod, node, -1)
        return status if not status.ok else self.filter(node)

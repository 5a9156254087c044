"""Properties of DefaultPreemption on generated clusters (hypothesis).

Clusters of 1–6 nodes with 0–8 pods each, mixed priorities and start times, a few PDBs,
some taints and host ports, and a few pending pods nominated to nodes; half of them also
with zones, pods carrying required anti-affinity (by hostname or zone), CSI volumes (one
claim ReadWriteOncePod, nodes with CSINode limits, some VolumeAttachments), and a preemptor
with anti-affinity, affinity or a DoNotSchedule spread constraint and maybe a claim. For
every decision:

- every victim is bound to the chosen node and has strictly lower priority than the preemptor;
- victims are listed most important first and PDB violations never outnumber them;
- with the victims removed, the preemptor passes ALL modeled filters on the chosen node
  (computed afresh from a snapshot without them, not from the dry run's updated state);
- putting back any single victim makes it fail one again (the reprieve is minimal: each
  victim was tried and failed beside a subset of the pods finally kept, and every filter
  that can fail only gets harder with more pods on the node: affinity only gets easier, and
  a skew grows with its own domain's count);
- the nominations to clear are lower-priority pods nominated to the chosen node;
- FitsWithoutPreemption exactly when some node passes the filters as it stands;
- the filter pass over all nodes (with its inline resource check) gives each node the status,
  reasons and filter that judging that node alone gives;
- Unschedulable only when no node passes the filters even with every lower-priority pod
  removed (when the dry run finds nothing it has looked at every node);
- the same input gives the same decision, also from the same objects in another order;
- a snapshot warmed (`ClusterSnapshot.warm`) over an older state of the cluster, then fed the
  objects one at a time, decides as one built afresh from them: the caches warming fills
  follow pods relabelled, budgets whose status or selector changed, budgets removed;
- deciding again on one snapshot after pods, nodes or budgets changed (what a decision keeps
  on each node for the next preemptor of its priority and request included) gives what a
  snapshot built afresh gives.
"""

from __future__ import annotations

import copy
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from preemptctl.preemption.decision import Decision, Verdict
from preemptctl.preemption.find_nodes_that_fit import filter_node, filter_nodes
from preemptctl.preemption.planner import plan
from preemptctl.preemption.snapshot import ClusterSnapshot, importance_key
from tests.preemption.builders import (
    attachment,
    claim,
    csinode,
    node,
    pdb,
    pod,
    snapshot,
    spread,
    taint,
    term,
    volume,
    with_claims,
)

Json = dict[str, Any]
PREEMPTOR = "default/preemptor"

priorities = st.sampled_from([-5, 0, 1, 5, 10, 50, 100])
cpus = st.sampled_from([None, "100m", "250m", "500m", "500m", "1", "1500m"])
memories = st.sampled_from([None, "128Mi", "256Mi", "512Mi", "1Gi"])
starts = st.one_of(st.none(), st.integers(0, 5))
apps = st.sampled_from(["a", "a", "b", None])
ports = st.sampled_from([(), (), (), (80,)])


topology_keys = st.sampled_from(["kubernetes.io/hostname", "zone"])


@st.composite
def anti_affinities(draw: st.DrawFn) -> list[Json]:
    """No anti-affinity mostly; else one term against app a or b, by hostname or zone."""
    if draw(st.integers(0, 4)):
        return []
    return [term(draw(topology_keys), match_labels={"app": draw(st.sampled_from(["a", "b"]))})]


@st.composite
def preemptor_rules(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["none", "anti", "affinity", "spread", "spread"]))
    rules: dict[str, Any] = {}
    if draw(st.booleans()):
        rules["labels"] = {"app": "a"}
    if kind == "anti":
        rules["pod_anti_affinity"] = [
            term(draw(topology_keys), match_labels={"app": draw(st.sampled_from(["a", "b"]))})
        ]
    elif kind == "affinity":
        rules["pod_affinity"] = [term("zone", match_labels={"app": "b"})]
    elif kind == "spread":
        rules["spread"] = [
            spread(
                draw(topology_keys),
                draw(st.integers(1, 2)),
                match_labels={"app": "a"},
                min_domains=draw(st.sampled_from([None, None, 3])),
            )
        ]
    return rules


@st.composite
def clusters(draw: st.DrawFn, constrained: bool = False) -> list[Json]:
    items: list[Json] = []
    node_names = [f"node-{i}" for i in range(draw(st.integers(1, 6)))]
    serial = 0
    for name in node_names:
        tainted = draw(st.sampled_from([False, False, False, False, True]))
        labels = {"kubernetes.io/hostname": name}
        if constrained and draw(st.integers(0, 5)):
            labels["zone"] = draw(st.sampled_from(["zone-a", "zone-b", "zone-c"]))
        items.append(
            node(
                name,
                cpu=draw(st.sampled_from(["1", "2", "4"])),
                memory=draw(st.sampled_from(["1Gi", "2Gi", "4Gi"])),
                pods=draw(st.integers(2, 10)),
                taints=[taint("dedicated")] if tainted else [],
                labels=labels,
            )
        )
        if constrained:
            items.append(csinode(name, draw(st.sampled_from([1, 2, None]))))
            if draw(st.integers(0, 4)) == 0:
                items.append(attachment(f"va-{name}", name, "pv-1"))
        for _ in range(draw(st.sampled_from([0, 2, 4, 6, 8]))):
            serial += 1
            app = draw(apps)
            mounted = draw(claims_mounted) if constrained else None
            items.append(
                mounting(
                    mounted,
                    pod(
                        f"pod-{serial}",
                        namespace=draw(st.sampled_from(["default", "default", "team"])),
                        node=name,
                        priority=draw(priorities),
                        cpu=draw(cpus),
                        memory=draw(memories),
                        start=draw(starts),
                        labels={"app": app} if app else {},
                        host_ports=draw(ports),
                        pod_anti_affinity=draw(anti_affinities()) if constrained else [],
                    ),
                )
            )
    for index in range(draw(st.integers(0, 4))):
        items.append(
            pdb(
                f"pdb-{index}",
                namespace=draw(st.sampled_from(["default", "team"])),
                match_labels={"app": draw(st.sampled_from(["a", "b"]))},
                allowed=draw(st.sampled_from([0, 0, 1, 2])),
            )
        )
    for index in range(draw(st.integers(0, 3))):
        items.append(
            pod(
                f"nominated-{index}",
                nominated=draw(st.sampled_from(node_names)),
                priority=draw(priorities),
                cpu=draw(cpus),
                memory=draw(memories),
            )
        )
    if constrained:
        items += STORAGE
    items.append(
        mounting(
            draw(claims_mounted) if constrained else None,
            pod(
                "preemptor",
                priority=draw(st.sampled_from([1, 10, 50, 50])),
                cpu=draw(st.sampled_from(["500m", "1", "2", "2"])),
                memory=draw(memories),
                host_ports=draw(ports),
                nominated=draw(st.one_of(st.none(), st.sampled_from(node_names))),
                **(draw(preemptor_rules()) if constrained else {}),
            ),
        )
    )
    return items


# Four CSI volumes, the first ReadWriteOncePod; pods of the default namespace may mount one.
STORAGE = [
    *(
        claim(
            f"vol-{i}",
            volume=f"pv-{i}",
            modes=("ReadWriteOncePod",) if i == 0 else ("ReadWriteOnce",),
        )
        for i in range(4)
    ),
    *(volume(f"pv-{i}", driver="csi.example.com") for i in range(4)),
]
claims_mounted = st.sampled_from([None, None, None, "vol-0", "vol-1", "vol-2", "vol-3"])


def mounting(claim_name: str | None, made: Json) -> Json:
    if claim_name is None or made["metadata"]["namespace"] != "default":
        return made
    return with_claims(made, claim_name)


# Half plain clusters, half with zones, anti-affinity and a constrained preemptor.
any_clusters = st.one_of(clusters(), clusters(constrained=True))


def preemptor_fits(items: list[Json], node_name: str, without: set[str]) -> bool:
    """Whether the preemptor passes the filters on `node_name` with the pods `without` gone."""
    cluster = snapshot(*(i for i in items if _key(i) not in without))
    preemptor = cluster.pod_by_key(PREEMPTOR)
    info = cluster.node(node_name)
    assert preemptor is not None and info is not None
    return filter_node(cluster, preemptor, info).ok


def _key(item: Json) -> str:
    return f"{item['metadata'].get('namespace', '')}/{item['metadata']['name']}"


def _decide(items: list[Json]) -> tuple[ClusterSnapshot, Decision]:
    cluster = snapshot(*items)
    return cluster, plan(cluster, PREEMPTOR)


SETTINGS = settings(max_examples=150, deadline=None)


@SETTINGS
@given(any_clusters)
def test_victims_are_lower_priority_pods_on_the_chosen_node_most_important_first(
    items: list[Json],
) -> None:
    cluster, decision = _decide(items)
    preemptor = cluster.pod_by_key(PREEMPTOR)
    assert preemptor is not None
    victims = [cluster.pod_by_key(v.key) for v in decision.victims]
    assert all(v is not None for v in victims)
    for victim in victims:
        assert victim is not None
        assert victim.priority < preemptor.priority
        assert victim.node_name == decision.nominated_node
    assert victims == sorted(victims, key=importance_key)  # type: ignore[arg-type]
    assert decision.num_pdb_violations <= len(victims)
    assert (decision.verdict is Verdict.PREEMPT) == bool(victims)


@SETTINGS
@given(any_clusters)
def test_without_the_victims_the_preemptor_fits_and_each_victim_was_needed(
    items: list[Json],
) -> None:
    _, decision = _decide(items)
    if decision.verdict is not Verdict.PREEMPT:
        return
    assert decision.nominated_node is not None
    victims = {v.key for v in decision.victims}
    assert preemptor_fits(items, decision.nominated_node, victims)
    for victim in victims:
        assert not preemptor_fits(items, decision.nominated_node, victims - {victim}), victim


@SETTINGS
@given(any_clusters)
def test_nominations_to_clear_are_lower_priority_pods_nominated_to_the_chosen_node(
    items: list[Json],
) -> None:
    cluster, decision = _decide(items)
    preemptor = cluster.pod_by_key(PREEMPTOR)
    assert preemptor is not None
    for ref in decision.nominated_pods_to_clear:
        nominated = cluster.pod_by_key(ref.key)
        assert nominated is not None and ref.key != PREEMPTOR
        assert nominated.priority < preemptor.priority
        assert nominated.nominated_node_name == decision.nominated_node


@SETTINGS
@given(any_clusters)
def test_fits_without_preemption_exactly_when_some_node_passes_the_filters(
    items: list[Json],
) -> None:
    cluster, decision = _decide(items)
    preemptor = cluster.pod_by_key(PREEMPTOR)
    assert preemptor is not None
    fits_somewhere = any(filter_node(cluster, preemptor, info).ok for info in cluster.nodes())
    assert (decision.verdict is Verdict.FITS_WITHOUT_PREEMPTION) == fits_somewhere


@SETTINGS
@given(any_clusters)
def test_the_filter_pass_judges_each_node_as_judging_it_alone_does(items: list[Json]) -> None:
    cluster = snapshot(*items)
    preemptor = cluster.pod_by_key(PREEMPTOR)
    assert preemptor is not None
    statuses = filter_nodes(cluster, preemptor)
    for info in cluster.nodes():
        alone = filter_node(cluster, preemptor, info)
        assert (statuses[info.name], statuses[info.name].plugin) == (alone, alone.plugin)


@SETTINGS
@given(any_clusters)
def test_unschedulable_only_when_no_node_could_take_the_preemptor(items: list[Json]) -> None:
    cluster, decision = _decide(items)
    if decision.verdict is not Verdict.UNSCHEDULABLE:
        return
    preemptor = cluster.pod_by_key(PREEMPTOR)
    assert preemptor is not None
    for info in cluster.nodes():
        lower = {pod.key for pod in info.pods.values() if pod.priority < preemptor.priority}
        assert not preemptor_fits(items, info.name, lower), info.name


@SETTINGS
@given(any_clusters, st.integers(0, 2**32))
def test_the_same_input_gives_the_same_decision_in_any_order(items: list[Json], seed: int) -> None:
    first = plan(snapshot(*items), PREEMPTOR).to_json()
    assert plan(snapshot(*items), PREEMPTOR).to_json() == first
    assert plan(snapshot(*items, shuffle_seed=seed), PREEMPTOR).to_json() == first


def _older(item: Json, rng: random.Random) -> Json:
    """The object as it may have been before: a pod with other labels, a budget with another
    budget left or another selector."""
    older = copy.deepcopy(item)
    if item["kind"] == "Pod" and rng.random() < 0.5:
        older["metadata"]["labels"] = rng.choice([{}, {"app": "a"}, {"app": "b"}])
    elif item["kind"] == "PodDisruptionBudget":
        older["status"]["disruptionsAllowed"] = rng.choice([0, 1, 2])
        if rng.random() < 0.3:
            older["spec"]["selector"] = {"matchLabels": {"app": rng.choice(["a", "b"])}}
    return older


@SETTINGS
@given(any_clusters, st.integers(0, 2**32))
def test_a_warmed_snapshot_fed_one_object_at_a_time_decides_as_a_fresh_one(
    items: list[Json], seed: int
) -> None:
    rng = random.Random(seed)
    gone = pdb("pdb-gone", match_labels={"app": "a"}, allowed=0)
    cluster = snapshot(*(_older(item, rng) for item in items), gone)
    cluster.warm()
    feed = rng.sample(items, len(items))
    feed.insert(rng.randrange(len(feed) + 1), {"kind": "removed", "metadata": gone["metadata"]})
    for item in feed:
        if item["kind"] == "removed":
            cluster.remove("PodDisruptionBudget", "default/pdb-gone")
        else:
            cluster.apply(item["kind"], item)
    assert plan(cluster, PREEMPTOR).to_json() == plan(snapshot(*items), PREEMPTOR).to_json()


def _changed(rng: random.Random, current: dict[tuple[str, str], Json]) -> tuple[str, Json]:
    """One change the watch could bring: a bound pod gone or relabelled, a budget with
    another status, a node with another allocatable cpu or pod count."""
    kind, _ = key = rng.choice(sorted(k for k in current if k[1] != PREEMPTOR))
    item = copy.deepcopy(current[key])
    if kind == "Pod" and item["spec"].get("nodeName") and rng.random() < 0.5:
        del current[key]
        return "removed", item
    if kind == "Pod":
        item["metadata"]["labels"] = rng.choice([{}, {"app": "a"}, {"app": "b"}])
    elif kind == "PodDisruptionBudget":
        item["status"]["disruptionsAllowed"] = rng.choice([0, 1, 2])
    elif kind == "Node":
        allocatable = item["status"]["allocatable"]
        allocatable["cpu"] = rng.choice(["1", "2", "4"])
        allocatable["pods"] = str(rng.randrange(2, 10))
    current[key] = item
    return "applied", item


@SETTINGS
@given(any_clusters, st.integers(0, 2**32))
def test_deciding_again_after_changes_decides_as_a_fresh_snapshot(
    items: list[Json], seed: int
) -> None:
    rng = random.Random(seed)
    cluster = snapshot(*items)
    cluster.warm()
    current = {(item["kind"], _key(item)): item for item in items}
    for _ in range(4):
        fresh = plan(snapshot(*current.values()), PREEMPTOR).to_json()
        assert plan(cluster, PREEMPTOR).to_json() == fresh
        what, item = _changed(rng, current)
        if what == "removed":
            cluster.remove("Pod", item["metadata"]["uid"])
        else:
            cluster.apply(item["kind"], item)

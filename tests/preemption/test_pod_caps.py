"""What the planner keeps of a pod a tenant made huge (issue 20, finding 2), and how it then
decides about that pod.

A hostile pod here is what the finding used: a 250 KiB annotation and 12,000 labels, under
etcd's limit. Scenarios:
- a hostile pod keeps no annotation (none is named) and none of its labels (beyond the caps
  only the labels a setting names are kept, such as the label naming a gang); the pod says
  which field went over (`over_cap`); an ordinary pod keeps every label and goes over
  nothing;
- the snapshot counts them: pods held now with a field over the caps (a gauge) and every pod
  object read with one (a counter), by field; an update counts again, a removal leaves the
  gauge;
- a pod whose labels were not all kept is never a free victim of a budget it might be
  covered by: it spends every budget of its namespace, so with a budget spent it is a
  violating victim, and the planner prefers another;
- a preemptor whose spread constraints or anti-affinity read a namespace holding such a pod
  is Unsupported, naming it (either guess could pick a node the scheduler rejects); one in
  another namespace is decided as before; a preemptor whose own labels went over is
  Unsupported;
- a kept annotation longer than its cap is not kept, so a size annotation of 5,000 digits
  (beyond what Python's int() reads) is no crash: the group's size then comes from its
  members;
- a bound pod with more host ports than the cap blocks every host port on its node until it
  is a victim; as a preemptor it is Unsupported; more tolerations than the cap are dropped
  (only a preemptor reads them) and make it Unsupported;
- a bound pod whose anti-affinity exceeds the cap is not read at all (its node then takes no
  preemptor): its anti-affinity cannot be left out;
- the containers' env, and the container lists, are not kept; nor are huge toleration or
  host-port lists in the decoder's shared tables.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest

from preemptctl.preemption import decode as decode_module
from preemptctl.preemption.decision import Verdict
from preemptctl.preemption.decode import POD_CAPS, decode_pod
from preemptctl.preemption.default_preemption import PreemptionArgs
from preemptctl.preemption.errors import PlannerInputError
from preemptctl.preemption.planner import plan
from preemptctl.preemption.pod_group_preemption import plan_pod_group
from preemptctl.preemption.snapshot import ClusterSnapshot
from tests.preemption.builders import (
    container,
    listing,
    node,
    pdb,
    pod,
    snapshot,
    spread,
    term,
    toleration,
    victim_names,
)

Json = dict[str, Any]
KUEUE = "kueue.x-k8s.io/pod-group-name"
SIZE = "kueue.x-k8s.io/pod-group-total-count"


def hostile(name: str, **options: Any) -> Json:
    """A pod with a 250 KiB annotation and 12,000 labels (about 1.35 MB of JSON)."""
    extra_labels = options.pop("extra_labels", {})
    made = pod(name, **options)
    made["metadata"]["labels"] = {
        **{f"tenant.example.com/k{i:05d}": f"v{i:075d}" for i in range(12_000)},
        **extra_labels,
    }
    made["metadata"]["annotations"] = {"tenant.example.com/blob": "x" * 250 * 1024}
    return made


def test_a_hostile_pod_keeps_no_label_and_no_annotation() -> None:
    kept = decode_pod(hostile("h", node="n"))
    assert (dict(kept.labels), dict(kept.annotations), kept.over_cap) == ({}, {}, ("labels",))


def test_beyond_the_caps_the_label_a_setting_names_is_kept() -> None:
    kept = decode_pod(hostile("h", node="n", extra_labels={KUEUE: "job"}), kept_labels=(KUEUE,))
    assert (dict(kept.labels), kept.over_cap) == ({KUEUE: "job"}, ("labels",))


def test_an_ordinary_pod_keeps_every_label() -> None:
    labels = {f"app.example.com/k{i}": "v" for i in range(POD_CAPS.labels)}
    kept = decode_pod(pod("p", node="n", labels=labels))
    assert (dict(kept.labels), kept.over_cap) == (labels, ())


def test_labels_within_the_count_but_beyond_the_length_cap_are_not_kept() -> None:
    long = {"a": "v" * POD_CAPS.label_chars}
    kept = decode_pod(pod("p", node="n", labels=long))
    assert (dict(kept.labels), kept.over_cap) == ({}, ("labels",))


def test_the_snapshot_counts_pods_over_the_caps_now_and_ever() -> None:
    cluster = snapshot(node("n", pods=500), *(hostile(f"h{i}", node="n") for i in range(200)))
    first = (cluster.over_cap_pods(), cluster.over_cap_total["labels"])
    for i in range(200):
        cluster.apply("Pod", hostile(f"h{i}", node="n"))
    updated = (cluster.over_cap_pods(), cluster.over_cap_total["labels"])
    for i in range(200):
        cluster.remove("Pod", f"uid-default-h{i}")
    assert (first, updated, cluster.over_cap_pods(), cluster.over_cap_total["labels"]) == (
        ({"labels": 200}, 200),
        ({"labels": 200}, 400),
        {},
        400,
    )


def test_a_pod_whose_labels_were_not_kept_is_never_a_free_victim_of_a_budget() -> None:
    """`h` might be covered by the budget (its labels are unknown), which is spent: taking
    `h` would be a violation, so the planner takes `plain` on node-2 instead."""
    items = [
        node("node-1", cpu="1"),
        node("node-2", cpu="1"),
        pdb("guard", match_labels={"app": "db"}, allowed=0),
        hostile("h", cpu="1", node="node-1", priority=1, start=0),
        pod("plain", cpu="1", node="node-2", priority=2, start=0),
        pod("p", cpu="1", priority=10),
    ]
    decision = plan(snapshot(*items), "default/p")
    assert (decision.nominated_node, victim_names(decision), decision.num_pdb_violations) == (
        "node-2",
        ["plain"],
        0,
    )


def test_taking_a_pod_whose_labels_were_not_kept_counts_as_a_violation() -> None:
    items = [
        node("node-1", cpu="1"),
        pdb("guard", match_labels={"app": "db"}, allowed=0),
        hostile("h", cpu="1", node="node-1", priority=1),
        pod("p", cpu="1", priority=10),
    ]
    decision = plan(snapshot(*items), "default/p")
    assert (victim_names(decision), decision.num_pdb_violations) == (["h"], 1)


def crowded(*preemptor: Json) -> list[Json]:
    return [
        node("node-1", cpu="1", labels={"kubernetes.io/hostname": "node-1", "zone": "a"}),
        hostile("h", namespace="tenant", cpu="1", node="node-1", priority=1),
        pod("low", namespace="other", cpu="1", node="node-1", priority=1),
        *preemptor,
    ]


@pytest.mark.parametrize("namespace", ["tenant", "other"])
def test_spread_over_a_namespace_with_labels_not_kept_is_unsupported(namespace: str) -> None:
    spreading = pod(
        "p",
        namespace=namespace,
        cpu="1",
        priority=10,
        labels={"app": "web"},
        spread=[spread("zone", match_labels={"app": "web"})],
    )
    decision = plan(snapshot(*crowded(spreading)), f"{namespace}/p")
    unsupported = namespace == "tenant"
    assert (decision.verdict is Verdict.UNSUPPORTED, "namespace tenant" in decision.message) == (
        unsupported,
        unsupported,
    )


def test_anti_affinity_over_a_namespace_with_labels_not_kept_is_unsupported() -> None:
    avoiding = pod(
        "p",
        namespace="other",
        cpu="1",
        priority=10,
        pod_anti_affinity=[term(match_labels={"app": "web"}, namespaces=["tenant"])],
    )
    decision = plan(snapshot(*crowded(avoiding)), "other/p")
    assert (decision.verdict, "pod anti-affinity over namespace tenant" in decision.message) == (
        Verdict.UNSUPPORTED,
        True,
    )


def test_a_preemptor_whose_own_labels_went_over_is_unsupported() -> None:
    decision = plan(snapshot(node("n", cpu="1"), hostile("p", cpu="1", priority=10)), "default/p")
    assert (decision.verdict, decision.victims, "labels beyond" in decision.message) == (
        Verdict.UNSUPPORTED,
        (),
        True,
    )


def test_a_kept_annotation_beyond_its_cap_is_not_kept() -> None:
    made = pod("p", annotations={SIZE: "9" * (POD_CAPS.annotation_chars + 1)})
    kept = decode_pod(made, kept_annotations=(SIZE,))
    assert (dict(kept.annotations), kept.over_cap) == ({}, ("annotations",))


def test_a_size_annotation_of_many_digits_is_no_crash() -> None:
    job = [
        pod(
            f"j-{i}", cpu="1", priority=100, labels={KUEUE: "train"}, annotations={SIZE: "9" * 5000}
        )
        for i in range(2)
    ]
    items = [node("n", cpu="2"), pod("low", cpu="2", node="n", priority=1), *job]
    cluster = ClusterSnapshot.from_list(listing(*items), (SIZE,), (KUEUE,))
    args = PreemptionArgs(pod_group_label=KUEUE, pod_group_size_annotation=SIZE)
    decision = plan_pod_group(cluster, "default/train", args)
    assert (decision.verdict, decision.rationale["group"]["minCount"]) == (Verdict.PREEMPT, 2)


def many_ports(count: int) -> list[Json]:
    return [container("1", host_ports=list(range(10_000, 10_000 + count)))]


def test_a_bound_pod_with_ports_beyond_the_cap_blocks_every_port_until_it_is_a_victim() -> None:
    """node-1's `ports` asks for 65 host ports (beyond the cap of 64) and is more important
    than node-2's `busy`: a preemptor wanting port 80 takes `busy` on node-2, where only
    resources stand in its way, though `ports` does not ask for port 80."""
    items = [
        node("node-1", cpu="2"),
        node("node-2", cpu="1"),
        pod("ports", node="node-1", priority=5, containers=many_ports(65)),
        pod("busy", cpu="1", node="node-2", priority=1),
        pod("p", cpu="1", priority=10, host_ports=[80]),
    ]
    decision = plan(snapshot(*items), "default/p")
    assert (decision.nominated_node, victim_names(decision)) == ("node-2", ["busy"])


def test_a_preemptor_with_ports_beyond_the_cap_is_unsupported() -> None:
    items = [node("n", cpu="1"), pod("p", priority=10, containers=many_ports(65))]
    decision = plan(snapshot(*items), "default/p")
    assert (decision.verdict, "hostPorts beyond" in decision.message) == (
        Verdict.UNSUPPORTED,
        True,
    )


def test_tolerations_beyond_the_cap_are_dropped_and_refuse_the_preemptor() -> None:
    tolerations = [toleration(f"k{i}", "NoSchedule") for i in range(POD_CAPS.tolerations + 1)]
    bound = decode_pod(pod("b", node="n", tolerations=tolerations))
    pending = plan(
        snapshot(node("n", cpu="1"), pod("p", priority=10, tolerations=tolerations)), "default/p"
    )
    assert (bound.tolerations, bound.over_cap, pending.verdict) == (
        (),
        ("tolerations",),
        Verdict.UNSUPPORTED,
    )


def test_a_bound_pod_with_anti_affinity_beyond_the_cap_is_not_read() -> None:
    huge = term(
        expressions=[{"key": "app", "operator": "In", "values": [f"v{i}" for i in range(3000)]}]
    )
    with pytest.raises(PlannerInputError, match="more than 2048 entries"):
        decode_pod(pod("b", node="n", pod_anti_affinity=[huge]))


def reachable_ids(root: object, limit: int = 100_000) -> set[int]:
    seen: set[int] = set()
    stack = [root]
    while stack and len(seen) < limit:
        item = stack.pop()
        if id(item) in seen or isinstance(item, type):
            continue
        seen.add(id(item))
        stack.extend(gc.get_referents(item))
    return seen


def test_env_and_the_container_lists_are_not_kept() -> None:
    made = pod("p", node="n", cpu="1")
    made["spec"]["containers"][0]["env"] = [{"name": "SECRET", "value": "s" * 100_000}]
    spec = made["spec"]
    kept = reachable_ids(decode_pod(made))
    raw = [spec["containers"], spec["containers"][0], spec["containers"][0]["env"]]
    assert [id(item) in kept for item in raw] == [False, False, False]
    assert id(spec["containers"][0]["env"][0]["value"]) not in kept


def test_huge_toleration_and_port_lists_stay_out_of_the_decoders_shared_tables() -> None:
    tables = (len(decode_module._interned), len(decode_module._toleration_lists))
    for i in range(50):
        tolerations = [toleration(f"t{i}-{j}", "NoSchedule") for j in range(60)]
        decode_pod(pod(f"p{i}", node="n", tolerations=tolerations, containers=many_ports(60 + i)))
    assert (len(decode_module._interned), len(decode_module._toleration_lists)) == tables

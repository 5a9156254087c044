"""A decision's recorded inputs rebuild the planner's arguments, and the decision with them.

Scenarios:
- through JSON and back, the rebuilt inputs give the same decision: a plain preemptor whose
  dry run stops early, anti-affinity, a zone spread, existing pods repelling the preemptor,
  host ports, nominated pods, PDBs, a ReadWriteOncePod claim, a namespaceSelector, a bound
  preemptor (critical admission), verdicts other than Preempt, a whole group among the
  victims, claims laid over the view
- every node keeps every pod whole (nothing is summarised): a replay judges any node
- a group decision's inputs (its PodGroup, its pending members, every other group) rebuild
  the same group decision, for a PodGroup and for a group a label names
- what is captured is the view at the capture: the view moving on afterwards changes
  nothing written
- inputs recorded in format 1 (most nodes' pods as sums) still replay, their sums standing
  as pods that are never victims
- each class's encoder (written out field by field) shows exactly the fields not at their
  default; what the planner never reads (resourceVersion) is left out
- every field of a pod survives the round trip; a field this version does not know is
  ignored, one it knows and the inputs lack reads as its default
- `compare` says nothing for the same decision, and names verdict, node, victims removed
  and added, a group member placed elsewhere, and the deciding criterion when they differ
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from preemptctl.preemption.claims import Claim, ClaimBook
from preemptctl.preemption.dataclass_codec import decode, encode
from preemptctl.preemption.decision import Decision, Strategy, Verdict
from preemptctl.preemption.decode import decode_pod
from preemptctl.preemption.default_preemption import PreemptionArgs
from preemptctl.preemption.inputs_replay import compare, rebuild
from preemptctl.preemption.objects import Pod
from preemptctl.preemption.planner import plan, plan_group
from preemptctl.preemption.recorded_inputs import (
    FORMAT,
    capture,
    capture_group,
    decision_summary,
    group_decision_summary,
    to_json,
)
from preemptctl.preemption.snapshot import ClusterSnapshot
from tests.preemption.builders import (
    claim,
    container,
    namespace,
    node,
    pdb,
    pod,
    pod_group,
    snapshot,
    spread,
    term,
    toleration,
    volume,
    with_claims,
)

Json = dict[str, Any]
ZONE = "topology.kubernetes.io/zone"
FEW_CANDIDATES = PreemptionArgs(min_candidate_nodes_percentage=0, min_candidate_nodes_absolute=1)


def full_nodes(count: int = 6, **labels: str) -> list[Json]:
    """`count` 4-cpu nodes in three zones, each full of four 1-cpu pods (priority 10+n)."""
    items: list[Json] = []
    for n in range(count):
        name = f"n{n}"
        items.append(node(name, labels={"kubernetes.io/hostname": name, ZONE: f"z{n % 3}"}))
        items += [
            pod(
                f"low-{n}-{i}",
                node=name,
                priority=10 + n,
                cpu="1",
                start=i,
                labels={"app": f"app-{i % 2}", **labels},
            )
            for i in range(4)
        ]
    return items


def recorded(
    items: list[Json],
    preemptor: str,
    args: PreemptionArgs | None = None,
    strategy: Strategy = Strategy.DEFAULT,
) -> tuple[Decision, Json, ClusterSnapshot]:
    """The decision over `items`, and its inputs as they come back from the ledger (JSON)."""
    view = snapshot(*items)
    decision = plan(view, f"default/{preemptor}", strategy, args)
    incoming = view.pod_by_key(f"default/{preemptor}")
    assert incoming is not None
    document = to_json(capture(view, incoming, strategy, args, decision, ["claim-uid"]))
    return decision, json.loads(json.dumps(document)), view


def replay(document: Json) -> Decision:
    rebuilt = rebuild(document)
    assert rebuilt.preemptor is not None
    strategy = Strategy(rebuilt.strategy)
    return plan(rebuilt.snapshot, rebuilt.preemptor.key, strategy, rebuilt.args)


def whole_group_victims() -> list[Json]:
    """A gang taken whole (`disruptionMode: all`), its members on two nodes."""
    return [
        node("node-1", cpu="2"),
        node("node-2", cpu="2"),
        node("node-3", cpu="2"),
        pod_group("gang", priority=1, disruption="all"),
        pod("g-1", cpu="2", node="node-1", group="gang", start=0),
        pod("g-2", cpu="1", node="node-3", group="gang", start=0),
        pod("plain", cpu="2", node="node-2", priority=5, start=0),
        pod("keeper", cpu="1", node="node-3", priority=100),
        pod("p", cpu="2", priority=10),
    ]


SCENARIOS: dict[str, tuple[list[Json], PreemptionArgs | None, Strategy]] = {
    "plain, dry run stopping early": (
        [*full_nodes(), pod("p", priority=100, cpu="2")],
        FEW_CANDIDATES,
        Strategy.DEFAULT,
    ),
    "anti-affinity": (
        [
            *full_nodes(),
            pod(
                "p", priority=100, cpu="1", pod_anti_affinity=[term(match_labels={"app": "app-0"})]
            ),
        ],
        FEW_CANDIDATES,
        Strategy.DEFAULT,
    ),
    "zone spread": (
        [
            *full_nodes(),
            pod(
                "p",
                priority=100,
                cpu="1",
                labels={"app": "app-1"},
                spread=[spread(ZONE, 1, match_labels={"app": "app-1"})],
            ),
        ],
        None,
        Strategy.DEFAULT,
    ),
    "existing pods repel the preemptor": (
        [
            *full_nodes(),
            pod(
                "guard",
                node="n0",
                priority=1000,
                cpu="0",
                pod_anti_affinity=[term(match_labels={"role": "web"})],
            ),
            pod("p", priority=100, cpu="1", labels={"role": "web"}),
        ],
        FEW_CANDIDATES,
        Strategy.DEFAULT,
    ),
    "host ports": (
        [
            *full_nodes(),
            pod("port-user", node="n1", priority=1, cpu="0", host_ports=[8080]),
            pod("p", priority=100, cpu="1", host_ports=[8080]),
        ],
        FEW_CANDIDATES,
        Strategy.DEFAULT,
    ),
    "nominated pods": (
        [
            *full_nodes(3),
            pod("first", priority=500, cpu="2", nominated="n0"),
            pod("lower", priority=50, cpu="1", nominated="n1"),
            pod("p", priority=100, cpu="2"),
        ],
        None,
        Strategy.DEFAULT,
    ),
    "PDBs": (
        [
            *full_nodes(3),
            pdb("keep-app-0", match_labels={"app": "app-0"}),
            pod("p", priority=100, cpu="2"),
        ],
        None,
        Strategy.DEFAULT,
    ),
    "a ReadWriteOncePod claim": (
        [
            *full_nodes(3),
            claim("data", volume="pv-data", modes=("ReadWriteOncePod",)),
            volume("pv-data"),
            with_claims(pod("holder", node="n2", priority=1, cpu="0"), "data"),
            with_claims(pod("p", priority=100, cpu="1"), "data"),
        ],
        None,
        Strategy.DEFAULT,
    ),
    "a namespaceSelector": (
        [
            *full_nodes(3),
            namespace("default", {"team": "a"}),
            pod(
                "p",
                priority=100,
                cpu="1",
                pod_affinity=[term(match_labels={"app": "app-1"}, namespace_selector={})],
            ),
        ],
        None,
        Strategy.DEFAULT,
    ),
    "tolerations and node affinity": (
        [
            *full_nodes(3),
            pod(
                "p",
                priority=100,
                cpu="1",
                tolerations=[toleration("dedicated", "NoSchedule", "x")],
                node_selector={ZONE: "z1"},
            ),
        ],
        None,
        Strategy.DEFAULT,
    ),
    "fits without preemption": (
        [*full_nodes(3), node("empty"), pod("p", priority=100, cpu="1")],
        None,
        Strategy.DEFAULT,
    ),
    "unschedulable": (
        [*full_nodes(3), pod("p", priority=5, cpu="1")],
        None,
        Strategy.DEFAULT,
    ),
    "critical admission of a bound pod": (
        [*full_nodes(3), pod("p", node="n1", priority=2_000_000_000, cpu="1")],
        None,
        Strategy.CRITICAL_ADMISSION,
    ),
    "a whole group among the victims": (whole_group_victims(), None, Strategy.DEFAULT),
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_rebuilt_inputs_give_the_same_decision(scenario: str) -> None:
    items, args, strategy = SCENARIOS[scenario]
    decision, document, _ = recorded(items, "p", args, strategy)
    again = replay(document)
    assert compare(decision_summary(decision), decision_summary(again)) == []
    assert again.to_json() == decision.to_json()


def test_every_pod_is_kept_whole_on_every_node() -> None:
    items, args, _ = SCENARIOS["plain, dry run stopping early"]
    decision, document, view = recorded(items, "p", args)
    assert {verdict.node for verdict in decision.rationale.evaluated} == {"n0"}
    assert (document["format"], "podSums" in document) == (FORMAT, False)
    assert sorted(p["name"] for p in document["pods"]) == sorted(
        p.name for p in view.pods.values() if p.name != "p"
    )
    rebuilt = rebuild(document)
    assert rebuilt.summarised == frozenset()
    for name in ("n0", "n2", "n5"):
        before, after = view.node(name), rebuilt.snapshot.node(name)
        assert before is not None and after is not None
        assert sorted(after.pods) == sorted(before.pods)


def test_claims_laid_over_the_view_are_what_is_captured() -> None:
    """A claim hides its victims and places its preemptor: the capture, taken under it,
    keeps the view as the planner saw it, and the replay decides the same."""
    view = snapshot(*full_nodes(3), pod("first", priority=50, cpu="2"), pod("p", priority=100))
    first = view.pod_by_key("default/first")
    incoming = view.pod_by_key("default/p")
    assert first is not None and incoming is not None
    held = Claim(first.uid, "n0", frozenset({"uid-default-low-0-2", "uid-default-low-0-3"}))
    with ClaimBook([held]).applied(view, ""):
        decision = plan(view, incoming.key)
        document = to_json(capture(view, incoming, Strategy.DEFAULT, None, decision))
    names = {p["name"] for p in document["pods"]}
    assert ("low-0-2" in names, "first" in names) == (False, True)
    assert decision.nominated_node != "n0"
    again = replay(json.loads(json.dumps(document)))
    assert compare(decision_summary(decision), decision_summary(again)) == []


def test_what_is_written_is_the_view_at_the_capture_not_as_it_moved_on() -> None:
    items, args, strategy = SCENARIOS["plain, dry run stopping early"]
    view = snapshot(*items)
    decision = plan(view, "default/p", strategy, args)
    incoming = view.pod_by_key("default/p")
    assert incoming is not None
    captured = capture(view, incoming, strategy, args, decision)
    assert view.remove_pod("uid-default-low-2-0") is not None
    view.upsert_pod(decode_pod(pod("late", node="n5", priority=1, cpu="3")))
    rebuilt = rebuild(json.loads(json.dumps(to_json(captured)))).snapshot
    for name in ("n2", "n5"):
        after = rebuilt.node(name)
        assert after is not None
        assert (after.requested().milli_cpu, len(after.pods)) == (4000, 4)


# -- group decisions ------------------------------------------------------------------------


def gang_cluster(*extra: Json) -> list[Json]:
    return [
        node("node-1", cpu="1"),
        node("node-2", cpu="1"),
        node("node-3", cpu="1"),
        pod("low-1", cpu="1", node="node-1", priority=1, start=0),
        pod("low-2", cpu="1", node="node-2", priority=2, start=0),
        pod("high-3", cpu="1", node="node-3", priority=500, start=0),
        pod_group("other", priority=3, disruption="all"),
        pod("o-1", cpu="0", node="node-1", group="other", start=0),
        *extra,
    ]


def group_recorded(
    items: list[Json], key: str, args: PreemptionArgs | None = None
) -> tuple[Any, Json]:
    view = snapshot(*items)
    decision = plan_group(view, key, args)
    document = to_json(capture_group(view, key, args, decision, ["claim-uid"]))
    return decision, json.loads(json.dumps(document))


def group_replay(document: Json) -> Any:
    rebuilt = rebuild(document)
    assert rebuilt.preemptor is None
    return plan_group(rebuilt.snapshot, rebuilt.pod_group, rebuilt.args)


def test_a_group_decision_rebuilds_the_same_group_decision() -> None:
    items = gang_cluster(
        pod_group("train", priority=100, min_count=2),
        pod("t-1", cpu="1", group="train"),
        pod("t-2", cpu="1", group="train"),
    )
    decision, document = group_recorded(items, "default/train")
    assert decision.verdict is Verdict.PREEMPT
    assert (document["strategy"], document["podGroup"], "preemptor" in document) == (
        "pod-group",
        "default/train",
        False,
    )
    again = group_replay(document)
    assert compare(group_decision_summary(decision), group_decision_summary(again)) == []
    assert again.to_json() == decision.to_json()


def test_a_label_named_group_decision_rebuilds_the_same_group_decision() -> None:
    label = "kueue.x-k8s.io/pod-group-name"
    items = gang_cluster(
        *(pod(f"w-{i}", cpu="1", priority=100, labels={label: "job"}) for i in range(2))
    )
    args = PreemptionArgs(pod_group_label=label)
    decision, document = group_recorded(items, "default/job", args)
    assert decision.verdict is Verdict.PREEMPT
    assert {p["name"] for p in document["pods"]} >= {"w-0", "w-1"}
    again = group_replay(document)
    assert compare(group_decision_summary(decision), group_decision_summary(again)) == []


def test_a_member_placed_elsewhere_is_a_named_difference() -> None:
    items = gang_cluster(
        pod_group("train", priority=100, min_count=2),
        pod("t-1", cpu="1", group="train"),
        pod("t-2", cpu="1", group="train"),
    )
    decision, document = group_recorded(items, "default/train")
    recorded_summary = group_decision_summary(decision)
    moved = {**recorded_summary, "nominations": {"default/t-1": "node-3", "default/t-2": "node-2"}}
    assert compare(moved, group_decision_summary(group_replay(document))) == [
        "nominations: default/t-1 node-3 -> node-1"
    ]


# -- format 1 ---------------------------------------------------------------------------------


def test_inputs_recorded_in_format_1_replay_with_their_sums_standing_as_pods() -> None:
    """Format 1 kept the dry run's nodes whole and the others' pods as (count, requests,
    ports); those stand as pods that are never victims."""
    items, args, _ = SCENARIOS["plain, dry run stopping early"]
    decision, document, _ = recorded(items, "p", args)
    document["format"] = 1
    document["pods"] = [p for p in document["pods"] if p["node_name"] == "n0"]
    document["podSums"] = {f"n{n}": [4, {"milli_cpu": 4000}, []] for n in range(1, 6)}
    del document["podGroups"]
    rebuilt = rebuild(document)
    assert rebuilt.summarised == frozenset({"n1", "n2", "n3", "n4", "n5"})
    n2 = rebuilt.snapshot.node("n2")
    assert n2 is not None and (n2.requested().milli_cpu, len(n2.pods)) == (4000, 4)
    assert compare(decision_summary(decision), decision_summary(replay(document))) == []


# -- the codec --------------------------------------------------------------------------------


def test_the_fields_of_a_pod_are_encoded_as_the_generic_codec_does() -> None:
    """`encode` writes each class's encoder out field by field; the same JSON as a loop
    over the fields (left out at their default, resourceVersion never) would give."""
    full = _every_field_pod()
    shown = encode(full)
    expected: dict[str, Any] = {}
    for field in dataclasses.fields(Pod):
        value = getattr(full, field.name)
        if field.default is not dataclasses.MISSING:
            default = field.default
        elif field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        else:
            default = object()  # required: always shown
        if field.name != "resource_version" and value != default:
            expected[field.name] = value
    assert list(shown) == list(expected)
    assert encode(Pod("ns", "bare", "uid-1", 0, full.requests)) == {
        "namespace": "ns",
        "name": "bare",
        "uid": "uid-1",
        "priority": 0,
        "requests": encode(full.requests),
    }


def test_what_the_planner_never_reads_is_left_out() -> None:
    _, document, _ = recorded([*full_nodes(1), pod("p", priority=100, cpu="1")], "p")
    assert all("resource_version" not in p for p in [*document["pods"], *document["nodes"]])


def _every_field_pod() -> Pod:
    made = pod(
        "every",
        namespace="ns",
        priority=7,
        containers=[container("250m", "64Mi", extra={"example.com/gpu": "1"}, host_ports=[80])],
        node="n1",
        start=3,
        labels={"app": "a"},
        tolerations=[toleration("k", "NoSchedule", "v")],
        node_selector={"disk": "ssd"},
        pod_affinity=[term(match_labels={"app": "b"}, namespaces=["ns", "other"])],
        pod_anti_affinity=[term(ZONE, namespace_selector={"matchLabels": {"team": "x"}})],
        spread=[spread(ZONE, 2, match_labels={"app": "a"}, min_domains=2)],
        terminating=True,
    )
    return decode(Pod, encode(snapshot(with_claims(made, "data")).pods[made["metadata"]["uid"]]))


def test_every_field_of_a_pod_survives_the_round_trip() -> None:
    original = _every_field_pod()
    assert encode(decode(Pod, json.loads(json.dumps(encode(original))))) == encode(original)
    assert original.claims == ("data",)
    assert original.pod_affinity[0].namespaces == frozenset({"ns", "other"})


def test_unknown_fields_are_ignored_and_missing_ones_read_as_defaults() -> None:
    raw = {"namespace": "ns", "name": "x", "uid": "u", "priority": 1, "requests": {}}
    got = decode(Pod, {**raw, "a_field_from_the_future": 1})
    assert (got.key, got.phase, got.labels, got.claims) == ("ns/x", "Pending", {}, ())


# -- compare ----------------------------------------------------------------------------------


def test_the_same_decision_has_no_differences() -> None:
    decision, document, _ = recorded([*full_nodes(3), pod("p", priority=100, cpu="2")], "p")
    assert compare(document["decision"], decision_summary(decision)) == []


def test_a_changed_planner_argument_is_a_named_difference() -> None:
    decision, document, _ = recorded([*full_nodes(3), pod("p", priority=100, cpu="2")], "p")
    assert decision.verdict is Verdict.PREEMPT
    document["args"]["max_victims"] = 1
    lines = compare(document["decision"], decision_summary(replay(document)))
    assert lines == [
        "verdict: Preempt -> Unschedulable",
        "node: n0 -> (none)",
        "victims removed: default/low-0-2 (priority 10), default/low-0-3 (priority 10)",
        "deciding criterion: minHighestPriority -> (none)",
    ]


def test_a_different_victim_choice_names_victims_added_and_removed() -> None:
    _, document, _ = recorded([*full_nodes(3), pod("p", priority=100, cpu="2")], "p")
    for pod_json in document["pods"]:
        if pod_json["node_name"] == "n0":
            pod_json["priority"] = 1000  # n0's pods now outrank the preemptor
    lines = compare(document["decision"], decision_summary(replay(document)))
    assert lines[0] == "node: n0 -> n1"
    assert lines[1].startswith("victims removed: default/low-0-")
    assert lines[2].startswith("victims added: default/low-1-")

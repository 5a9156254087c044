"""A decision's recorded inputs rebuild the planner's arguments, and the decision with them.

Scenarios:
- through JSON and back, the rebuilt inputs give the same decision: a plain preemptor whose
  dry run stops early (most nodes recorded as sums only), anti-affinity, a zone spread,
  existing pods repelling the preemptor, host ports, nominated pods, PDBs, a
  ReadWriteOncePod claim, a namespaceSelector, a bound preemptor (critical admission), and
  verdicts other than Preempt
- a node recorded as sums keeps its summed requests and pod count, and no pod of it is
  kept whole unless a rule needs it
- a selector that matches unlabelled pods keeps every pod whole (stand-ins would match it)
- on a node recorded as sums, a pod whose anti-affinity selects the preemptor is kept whole,
  one whose anti-affinity selects other pods is not
- `dumps` (pods' JSON reused across decisions) serialises exactly what `to_json` gives,
  and a pod the view replaced is encoded afresh; the reused JSON stays within its limit,
  the least recently used dropped first
- each class's encoder (written out field by field) shows exactly the fields not at their
  default
- what the planner never reads (resourceVersion) is left out
- every field of a pod survives the round trip; a field this version does not know is
  ignored, one it knows and the inputs lack reads as its default
- inputs in a newer format, or damaged, are refused with a `RecordedInputsError`
- `compare` says nothing for the same decision, and names verdict, node, victims removed
  and added, and the deciding criterion when they differ
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import orjson
import pytest

from preemptctl.preemption.dataclass_codec import decode, encode
from preemptctl.preemption.decision import Decision, Strategy, Verdict
from preemptctl.preemption.decode import decode_pod
from preemptctl.preemption.default_preemption import PreemptionArgs
from preemptctl.preemption.inputs_replay import RecordedInputsError, compare, rebuild
from preemptctl.preemption.objects import Pod
from preemptctl.preemption.planner import plan
from preemptctl.preemption.recorded_inputs import (
    EncodedCache,
    capture,
    decision_summary,
    dumps,
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
    requirement,
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
    return plan(rebuilt.snapshot, rebuilt.preemptor.key, rebuilt.strategy, rebuilt.args)


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
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_rebuilt_inputs_give_the_same_decision(scenario: str) -> None:
    items, args, strategy = SCENARIOS[scenario]
    decision, document, _ = recorded(items, "p", args, strategy)
    again = replay(document)
    assert compare(decision_summary(decision), decision_summary(again)) == []
    assert again.to_json() == decision.to_json()


def test_most_nodes_are_recorded_as_sums_when_the_dry_run_stops_early() -> None:
    items, args, _ = SCENARIOS["plain, dry run stopping early"]
    decision, document, _ = recorded(items, "p", args)
    evaluated = {verdict.node for verdict in decision.rationale.evaluated}
    assert evaluated == {"n0"}
    assert set(document["podSums"]) == {"n1", "n2", "n3", "n4", "n5"}
    assert {p["node_name"] for p in document["pods"]} == {"n0"}


def test_a_node_recorded_as_sums_keeps_its_requests_and_pod_count() -> None:
    items, args, _ = SCENARIOS["plain, dry run stopping early"]
    _, document, view = recorded(items, "p", args)
    rebuilt = rebuild(document).snapshot
    for name in ("n0", "n2", "n5"):
        before, after = view.node(name), rebuilt.node(name)
        assert before is not None and after is not None
        assert (after.requested(), len(after.pods)) == (before.requested(), len(before.pods))


def test_node_sums_are_those_of_the_capture_not_of_the_view_moving_on_after_it() -> None:
    """The capture (under the lock) takes the sums; the encoding (after the commit) must
    not read the view again, which the feed has changed meanwhile."""
    items, args, strategy = SCENARIOS["plain, dry run stopping early"]
    view = snapshot(*items)
    decision = plan(view, "default/p", strategy, args)
    incoming = view.pod_by_key("default/p")
    assert incoming is not None
    captured = capture(view, incoming, strategy, args, decision)
    assert view.remove_pod("uid-default-low-2-0") is not None
    view.upsert_pod(decode_pod(pod("late", node="n5", priority=1, cpu="3")))
    document = json.loads(json.dumps(to_json(captured)))
    rebuilt = rebuild(document).snapshot
    for name in ("n2", "n5"):
        after = rebuilt.node(name)
        assert after is not None
        assert (after.requested().milli_cpu, len(after.pods)) == (4000, 4)


def test_a_selector_matching_unlabelled_pods_keeps_every_pod_whole() -> None:
    anti = term(expressions=[requirement("app", "NotIn", "app-0")])
    items = [*full_nodes(), pod("p", priority=100, cpu="1", pod_anti_affinity=[anti])]
    decision, document, _ = recorded(items, "p", FEW_CANDIDATES)
    assert document["podSums"] == {}
    assert len(document["pods"]) == 24
    assert compare(decision_summary(decision), decision_summary(replay(document))) == []


def test_dumps_reuses_pods_json_and_encodes_a_replaced_pod_afresh() -> None:
    view = snapshot(*full_nodes(1), pod("p", priority=100, cpu="1"))
    incoming = view.pod_by_key("default/p")
    assert incoming is not None
    decision = plan(view, incoming.key)
    cache = EncodedCache()
    first = capture(view, incoming, Strategy.DEFAULT, None, decision)
    assert dumps(first, cache) == dumps(first) == orjson.dumps(to_json(first))
    assert json.loads(dumps(first)) == json.loads(json.dumps(to_json(first)))
    kept = len(cache)
    assert kept == len(first.nodes) + len(first.pods)
    victim = view.pod_by_key("default/low-0-0")
    assert victim is not None
    view.upsert_pod(dataclasses.replace(victim, priority=5))
    again = capture(view, incoming, Strategy.DEFAULT, None, decision)
    [changed] = [p for p in json.loads(dumps(again, cache))["pods"] if p["name"] == "low-0-0"]
    assert changed["priority"] == 5
    assert len(cache) == kept + 1  # the replaced pod's entry stays until it is the oldest
    assert dumps(again, cache) == dumps(again)


def test_the_encoded_cache_stays_within_its_limit_dropping_the_least_recently_used() -> None:
    view = snapshot(*full_nodes(3), pod("p", priority=100, cpu="1"))
    incoming = view.pod_by_key("default/p")
    assert incoming is not None
    captured = capture(view, incoming, Strategy.DEFAULT, None, plan(view, incoming.key))
    pods = captured.pods
    whole = EncodedCache()
    whole.encoded(pods)
    cache = EncodedCache(max_bytes=whole.bytes // 2)
    # the same JSON, whatever is kept
    assert orjson.dumps(cache.encoded(pods)) == orjson.dumps(whole.encoded(pods))
    assert 0 < cache.bytes <= cache.max_bytes * 3 // 4
    assert len(cache) < len(pods)
    newest = len(cache)
    cache.encoded(pods[-newest:])  # all still kept: nothing dropped, nothing added
    assert len(cache) == newest


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


def test_only_anti_affinity_that_selects_the_preemptor_keeps_its_pods_whole() -> None:
    def guard(name: str, against: str) -> Json:
        anti = [term(match_labels={"role": against})]
        return pod(name, node="n4", priority=1000, cpu="0", pod_anti_affinity=anti)

    items = [
        *full_nodes(),
        guard("repels-web", "web"),
        guard("repels-db", "db"),
        pod("p", priority=100, cpu="2", labels={"role": "web"}),
    ]
    decision, document, _ = recorded(items, "p", FEW_CANDIDATES)
    assert "n4" in document["podSums"]
    kept = {p["name"] for p in document["pods"] if p["node_name"] == "n4"}
    assert kept == {"repels-web"}
    assert compare(decision_summary(decision), decision_summary(replay(document))) == []


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


def test_inputs_in_a_newer_format_are_refused() -> None:
    _, document, _ = recorded([*full_nodes(1), pod("p", priority=100, cpu="1")], "p")
    with pytest.raises(RecordedInputsError, match="format 2; this version reads up to 1"):
        rebuild({**document, "format": 2})


def test_damaged_inputs_are_refused() -> None:
    _, document, _ = recorded([*full_nodes(1), pod("p", priority=100, cpu="1")], "p")
    del document["nodes"]
    with pytest.raises(RecordedInputsError, match="unreadable"):
        rebuild(document)


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

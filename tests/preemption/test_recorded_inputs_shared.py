"""Decision inputs stored once per object: the packer writes each decision's root and what
no decision before it stored; the resolver reads the objects back (issue 22, item 3).

Scenarios (a packer and an in-memory pack store standing for the ledger):
- a decision written for the shared layout resolves to the same objects and replays the
  same decision, for a pod decision and for a group decision
- the root names 64 buckets per collection and holds no object of the view
- a second decision over the same view stores no pack at all: only its root is new
- a pod replaced on one node stores that pod, its node's entry and the node's bucket, and
  nothing else; the replay of each decision sees the view of its own time
- a claim that hides pods and gives them back (a new list, the same pods) stores nothing
- a PDB's new status stores that PDB and its bucket only
- a removed node leaves its bucket, and the resolver finds neither it nor its pods
- each bucket is stored again once its renewal time is reached (staggered: bucket b at
  (b+1)/64 of the period), and a pack is referenced until its buckets' renewal, always
  after the decision that wrote it
- after `reset` (a failed append) the next decision stores everything it references
- the resolver refuses a reference that is no reference, a missing pack, a blob index out
  of range, a bucket that is not a list, and more references than `MAX_OBJECTS`
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import orjson
import pytest

from preemptctl.preemption import shared_inputs
from preemptctl.preemption.claims import Claim, ClaimBook
from preemptctl.preemption.decision import Strategy
from preemptctl.preemption.decode import decode_pdb
from preemptctl.preemption.inputs_replay import RecordedInputsError, compare, rebuild
from preemptctl.preemption.planner import plan, plan_group
from preemptctl.preemption.recorded_inputs import (
    Captured,
    capture,
    capture_group,
    decision_summary,
    group_decision_summary,
)
from preemptctl.preemption.shared_inputs import BUCKETS, InputsPacker, Shared, resolve
from preemptctl.preemption.snapshot import ClusterSnapshot
from tests.preemption.builders import node, pdb, pod, pod_group, snapshot

Json = dict[str, Any]


class Store:
    """The ledger's packs, in memory: what `record` appends and `pack_loader` reads."""

    def __init__(self) -> None:
        self.packs: dict[int, list[Any]] = {}
        self.ids = itertools.count(1)

    def new_id(self) -> int:
        return next(self.ids)

    def append(self, shared: Shared) -> dict[str, Any]:
        for pack in shared.packs:
            self.packs[pack.id] = orjson.loads(pack.body())
        root: dict[str, Any] = json.loads(orjson.dumps(shared.document))
        return root

    def load(self, ids: Iterable[int]) -> Iterator[tuple[int, Sequence[Any]]]:
        for pack_id in ids:
            if pack_id in self.packs:
                yield pack_id, self.packs[pack_id]


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def cluster(nodes: int = 8) -> ClusterSnapshot:
    items = [pdb("keep-app-0", match_labels={"app": "app-0"}, allowed=1)]
    for n in range(nodes):
        items.append(node(f"n{n}", cpu="4"))
        items += [
            pod(f"low-{n}-{i}", node=f"n{n}", priority=10, cpu="1", start=i, labels={"app": "a"})
            for i in range(4)
        ]
    items.append(pod("p", priority=100, cpu="2"))
    return snapshot(*items)


def captured(view: ClusterSnapshot) -> tuple[Captured, Any]:
    incoming = view.pod_by_key("default/p")
    assert incoming is not None
    decision = plan(view, incoming.key)
    return capture(view, incoming, Strategy.DEFAULT, None, decision), decision


@pytest.fixture
def store() -> Store:
    return Store()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def packer(store: Store, clock: Clock) -> InputsPacker:
    return InputsPacker(store.new_id, clock=clock)


def replayed(store: Store, root: dict[str, Any]) -> Any:
    rebuilt = rebuild(root, resolve(root, store.load))
    assert rebuilt.preemptor is not None
    return plan(rebuilt.snapshot, rebuilt.preemptor.key, Strategy.DEFAULT, rebuilt.args)


def kinds(shared: Shared) -> list[str]:
    """What each new blob is, sorted: 'pod', 'node', 'entry', 'bucket', 'object'."""
    found = []
    for pack in shared.packs:
        for blob in pack.blobs:
            value = orjson.loads(blob)
            if isinstance(value, list):
                found.append("bucket")
            elif "pods" in value and "name" in value and "node" in value:
                found.append("entry")
            elif "allocatable" in value:
                found.append("node")
            elif "uid" in value and "requests" in value:
                found.append("pod")
            else:
                found.append("object")
    return sorted(found)


def test_a_shared_decision_resolves_to_the_view_and_replays_the_same(
    packer: InputsPacker, store: Store
) -> None:
    view = cluster()
    inputs, decision = captured(view)
    root = store.append(packer.shared(inputs))
    rebuilt = rebuild(root, resolve(root, store.load))
    assert sorted(rebuilt.snapshot.pods) == sorted(view.pods)
    assert sorted(rebuilt.snapshot.pdbs) == ["default/keep-app-0"]
    assert compare(decision_summary(decision), decision_summary(replayed(store, root))) == []


def test_a_shared_group_decision_replays_the_same(packer: InputsPacker, store: Store) -> None:
    view = snapshot(
        node("node-1", cpu="1"),
        node("node-2", cpu="1"),
        pod("low-1", cpu="1", node="node-1", priority=1, start=0),
        pod("low-2", cpu="1", node="node-2", priority=2, start=0),
        pod_group("train", priority=100, min_count=2),
        pod("t-1", cpu="1", group="train"),
        pod("t-2", cpu="1", group="train"),
    )
    decision = plan_group(view, "default/train")
    root = store.append(packer.shared(capture_group(view, "default/train", None, decision)))
    rebuilt = rebuild(root, resolve(root, store.load))
    again = plan_group(rebuilt.snapshot, rebuilt.pod_group, rebuilt.args)
    assert compare(group_decision_summary(decision), group_decision_summary(again)) == []
    assert again.to_json() == decision.to_json()


def test_the_root_names_buckets_and_holds_no_object(packer: InputsPacker) -> None:
    shared = packer.shared(captured(cluster())[0])
    objects = shared.document["objects"]
    assert {len(refs) for refs in objects.values()} == {BUCKETS}
    assert "pods" not in shared.document and "nodes" not in shared.document
    nodes = [ref for ref in objects["nodes"] if ref is not None]
    assert 1 <= len(nodes) <= 8


def test_a_second_decision_over_the_same_view_stores_only_its_root(
    packer: InputsPacker,
) -> None:
    view = cluster()
    first = packer.shared(captured(view)[0])
    again = packer.shared(captured(view)[0])
    assert (first.blobs > 0, again.packs) == (True, [])
    assert again.document["objects"] == first.document["objects"]


def test_a_replaced_pod_stores_the_pod_its_entry_and_its_bucket_only(
    packer: InputsPacker, store: Store
) -> None:
    view = cluster()
    before_inputs, before = captured(view)
    first = store.append(packer.shared(before_inputs))
    old = view.pods["uid-default-low-3-0"]
    view.upsert_pod(dataclasses.replace(old, priority=500))  # the feed replaces, never mutates
    after_inputs, after = captured(view)
    shared = packer.shared(after_inputs)
    assert kinds(shared) == ["bucket", "entry", "pod"]
    second = store.append(shared)
    assert compare(decision_summary(before), decision_summary(replayed(store, first))) == []
    assert compare(decision_summary(after), decision_summary(replayed(store, second))) == []
    rebuilt = rebuild(first, resolve(first, store.load)).snapshot
    assert rebuilt.pods["uid-default-low-3-0"].priority == 10  # each decision its own view


def test_a_claim_hiding_and_giving_back_pods_stores_nothing(packer: InputsPacker) -> None:
    view = cluster()
    packer.shared(captured(view)[0])
    claim = Claim("uid-gone", "n1", frozenset({"uid-default-low-1-0"}))
    with ClaimBook([claim]).applied(view, ""):
        hidden = packer.shared(captured(view)[0])
    back = packer.shared(captured(view)[0])
    assert (kinds(hidden), back.packs) == (["bucket", "entry"], [])


def test_a_pdbs_new_status_stores_that_pdb_and_its_bucket(packer: InputsPacker) -> None:
    view = cluster()
    packer.shared(captured(view)[0])
    view.upsert_pdb(decode_pdb(pdb("keep-app-0", match_labels={"app": "app-0"}, allowed=0)))
    assert kinds(packer.shared(captured(view)[0])) == ["bucket", "object"]


def test_a_removed_node_is_gone_from_the_resolved_view(packer: InputsPacker, store: Store) -> None:
    view = cluster()
    store.append(packer.shared(captured(view)[0]))
    for uid in [p.uid for p in view.pods.values() if p.node_name == "n2"]:
        view.remove_pod(uid)
    view.remove_node("n2")
    root = store.append(packer.shared(captured(view)[0]))
    rebuilt = rebuild(root, resolve(root, store.load)).snapshot
    assert (rebuilt.node("n2"), any(p.node_name == "n2" for p in rebuilt.pods.values())) == (
        None,
        False,
    )


def test_buckets_are_stored_again_on_their_staggered_renewal(
    packer: InputsPacker, store: Store, clock: Clock
) -> None:
    view = cluster(nodes=1)
    first = packer.shared(captured(view)[0])
    bucket = shared_inputs.bucket_of("n0")
    renewal = clock.now + shared_inputs.RENEW_SECONDS * (bucket + 1) / BUCKETS
    period = shared_inputs.RENEW_SECONDS
    assert all(clock.now < pack.referenced_until <= clock.now + period for pack in first.packs)
    entry_pack = next(p for p in first.packs if not p.leaf and b'"name":"n0"' in b"".join(p.blobs))
    assert entry_pack.referenced_until >= renewal
    clock.now = renewal - 1
    assert "entry" not in kinds(packer.shared(captured(view)[0]))
    clock.now = renewal
    renewed = packer.shared(captured(view)[0])
    assert kinds(renewed).count("pod") == 4
    assert all(pack.referenced_until > clock.now for pack in renewed.packs)
    root = store.append(first)
    store.append(renewed)
    assert len(rebuild(root, resolve(root, store.load)).snapshot.pods) == 5


def test_after_a_reset_the_next_decision_stores_everything(packer: InputsPacker) -> None:
    view = cluster(nodes=2)
    first = packer.shared(captured(view)[0])
    packer.reset()
    assert kinds(packer.shared(captured(view)[0])) == kinds(first)


def test_the_resolver_refuses_what_is_no_reference(packer: InputsPacker, store: Store) -> None:
    root = store.append(packer.shared(captured(cluster())[0]))
    damaged = json.loads(json.dumps(root))
    first = next(i for i, ref in enumerate(damaged["objects"]["nodes"]) if ref is not None)
    damaged["objects"]["nodes"][first] = "pack 1"
    with pytest.raises(RecordedInputsError, match="a nodes reference is 'pack 1'"):
        list(resolve(damaged, store.load))


def test_the_resolver_refuses_a_missing_pack(packer: InputsPacker, store: Store) -> None:
    root = store.append(packer.shared(captured(cluster())[0]))
    store.packs.clear()
    with pytest.raises(RecordedInputsError, match=r"incomplete: pack\(s\) .* not found"):
        list(resolve(root, store.load))


def test_the_resolver_refuses_an_index_out_of_range(packer: InputsPacker, store: Store) -> None:
    root = store.append(packer.shared(captured(cluster())[0]))
    damaged = json.loads(json.dumps(root))
    first = next(i for i, ref in enumerate(damaged["objects"]["nodes"]) if ref is not None)
    damaged["objects"]["nodes"][first][1] = 10**6
    with pytest.raises(RecordedInputsError, match="has no blob 1000000"):
        list(resolve(damaged, store.load))


def test_the_resolver_refuses_a_bucket_that_is_no_list(packer: InputsPacker, store: Store) -> None:
    root = store.append(packer.shared(captured(cluster())[0]))
    pack_id, index = next(ref for ref in root["objects"]["pdbs"] if ref is not None)
    store.packs[pack_id][index] = {"not": "a bucket"}
    with pytest.raises(RecordedInputsError, match="a pdbs bucket is no list"):
        list(resolve(root, store.load))


def test_the_resolver_caps_references_before_reading_objects(
    packer: InputsPacker, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = store.append(packer.shared(captured(cluster())[0]))
    monkeypatch.setattr(shared_inputs, "MAX_OBJECTS", 10)
    with pytest.raises(RecordedInputsError, match="more than 10 objects; refused"):
        list(resolve(root, store.load))

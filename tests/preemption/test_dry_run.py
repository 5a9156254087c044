"""How many nodes the dry run looks at, where it starts, when it stops, what it returns.

Scenarios:
- calculateNumCandidates: 10% of the nodes, at least 100, never more than there are;
- the start offset comes from the preemptor's UID: the same UID always gives the same
  offset, and offsets over many UIDs cover every position;
- DryRunPreemption walks the window from the offset, wrapping around;
- it stops once it has a non-violating candidate and `wanted` candidates in all;
- it does not stop while every candidate found violates a PDB;
- non-violating candidates come before violating ones;
- each candidate list holds at most `wanted` candidates (upstream's candidateList);
- nodes without victims are rejected with their reason and the walk goes on.
"""

from __future__ import annotations

from typing import Any

import pytest

from preemptctl.preemption.default_preemption import (
    ERR_NO_VICTIMS,
    Candidate,
    DryRun,
    PreemptionArgs,
    calculate_num_candidates,
    dry_run_preemption,
    offset_and_num_candidates,
)
from preemptctl.preemption.snapshot import ClusterSnapshot
from tests.preemption.builders import node, pdb, pod, snapshot

Json = dict[str, Any]


@pytest.mark.parametrize(
    ("nodes", "wanted"),
    [(1, 1), (50, 50), (100, 100), (150, 100), (1000, 100), (2000, 200), (5000, 500)],
)
def test_the_dry_run_wants_ten_percent_at_least_a_hundred_at_most_all(
    nodes: int, wanted: int
) -> None:
    assert calculate_num_candidates(nodes, PreemptionArgs()) == wanted


def test_candidate_count_follows_the_configured_arguments() -> None:
    args = PreemptionArgs(min_candidate_nodes_percentage=50, min_candidate_nodes_absolute=1)
    assert calculate_num_candidates(10, args) == 5
    assert calculate_num_candidates(1, args) == 1


def test_the_same_uid_always_gets_the_same_offset() -> None:
    first = offset_and_num_candidates("6f1c2a", 37, PreemptionArgs())
    assert all(offset_and_num_candidates("6f1c2a", 37, PreemptionArgs()) == first for _ in range(5))


def test_offsets_cover_every_position() -> None:
    offsets = {offset_and_num_candidates(f"uid-{i}", 7, PreemptionArgs())[0] for i in range(300)}
    assert offsets == set(range(7))


def cluster(*layout: tuple[str, bool]) -> ClusterSnapshot:
    """One 1-cpu node per entry, full with a 1-cpu low pod labelled `guarded` if the flag says
    so (a PDB with no budget protects those), and the 1-cpu preemptor `p`."""
    items: list[Json] = [pdb("guard", match_labels={"guarded": "yes"}, allowed=0)]
    for name, guarded in layout:
        labels = {"guarded": "yes"} if guarded else {}
        items += [node(name, cpu="1"), pod(f"low-{name}", cpu="1", node=name, labels=labels)]
    items.append(pod("p", cpu="1", priority=10))
    return snapshot(*items)


def dry_run(
    cluster: ClusterSnapshot, offset: int, wanted: int
) -> tuple[list[Candidate], list[str], DryRun]:
    preemptor = cluster.pod_by_key("default/p")
    assert preemptor is not None
    found = dry_run_preemption(cluster, preemptor, cluster.nodes(), offset, wanted)
    return found.candidates, [verdict.node for verdict in found.evaluated], found


def names(candidates: list[Candidate]) -> list[str]:
    return [candidate.node for candidate in candidates]


def test_the_walk_starts_at_the_offset_and_wraps_around() -> None:
    _, walked, _ = dry_run(cluster(("a", True), ("b", True), ("c", True)), offset=1, wanted=3)
    assert walked == ["b", "c", "a"]


def test_it_stops_once_it_has_a_non_violating_candidate_and_enough_in_all() -> None:
    candidates, walked, rationale = dry_run(
        cluster(("a", False), ("b", False), ("c", False), ("d", False)), offset=0, wanted=2
    )
    assert names(candidates) == ["a", "b"]
    assert walked == ["a", "b"]
    assert rationale.stopped_early


def test_it_does_not_stop_while_every_candidate_violates_a_pdb() -> None:
    candidates, walked, _ = dry_run(
        cluster(("a", True), ("b", True), ("c", False), ("d", False)), offset=0, wanted=2
    )
    assert walked == ["a", "b", "c"]
    assert names(candidates) == ["c", "a", "b"]


def test_with_only_violating_candidates_it_walks_every_node() -> None:
    candidates, walked, rationale = dry_run(cluster(("a", True), ("b", True)), offset=0, wanted=1)
    assert walked == ["a", "b"]
    assert not rationale.stopped_early
    assert names(candidates) == ["a"]


def test_non_violating_candidates_come_before_violating_ones() -> None:
    candidates, _, _ = dry_run(
        cluster(("a", True), ("b", False), ("c", True), ("d", False)), offset=0, wanted=4
    )
    assert names(candidates) == ["b", "d", "a", "c"]
    assert [c.num_pdb_violations for c in candidates] == [0, 0, 1, 1]


def test_a_violating_candidate_beyond_the_lists_capacity_is_not_kept() -> None:
    candidates, walked, rationale = dry_run(
        cluster(("a", True), ("b", True), ("c", False)), offset=0, wanted=1
    )
    assert walked == ["a", "b", "c"]
    assert names(candidates) == ["c", "a"]
    assert not rationale.evaluated[1].candidate


def test_a_node_without_victims_is_rejected_and_the_walk_goes_on() -> None:
    items: list[Json] = [
        node("a", cpu="1"),
        pod("peer", cpu="1", node="a", priority=10),
        node("b", cpu="1"),
        pod("low", cpu="1", node="b"),
        pod("p", cpu="1", priority=10),
    ]
    candidates, walked, rationale = dry_run(snapshot(*items), offset=0, wanted=2)
    assert walked == ["a", "b"]
    assert names(candidates) == ["b"]
    assert rationale.evaluated[0].reasons == (ERR_NO_VICTIMS,)

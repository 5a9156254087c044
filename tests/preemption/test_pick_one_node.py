"""pickOneNodeForPreemption: the criteria, in order, each deciding when the earlier ones tie.

Scenarios (each names the criterion that decides, as `rationale.deciding_criterion`):
- a single candidate is chosen as the only one;
- minNumPDBViolations: fewer PDB violations win over everything after;
- minHighestPriority: the least important most-important victim wins, even with more victims;
- minSumPriorities: the smaller sum of victim priorities wins;
- minSumPriorities shifts each priority by MaxInt32+1, so one victim at -10 beats two;
- minNumPods: fewer victims win when the shifted sums tie;
- latestStartTime: the latest earliest-start among the highest-priority victims wins (lower
  priority victims do not count); a victim without a start time counts as the newest;
- a full tie is broken by node name.
"""

from __future__ import annotations

from typing import Any

from preemptctl.preemption.decision import Decision, Verdict
from tests.preemption.builders import decide, node, pdb, pod

Json = dict[str, Any]
INT32_MIN = -(2**31)


def full_node(
    name: str, *victims: tuple[int, float | None], labels: dict[str, str] | None = None
) -> list[Json]:
    """A 6-cpu node filled by one pod per (priority, start), sharing the cpu evenly."""
    share = f"{6000 // len(victims)}m"
    items: list[Json] = [node(name, cpu="6")]
    for index, (priority, start) in enumerate(victims):
        items.append(
            pod(
                f"{name}-{index}",
                cpu=share,
                node=name,
                priority=priority,
                start=start,
                labels=labels,
            )
        )
    return items


def choose(*nodes: list[Json], extra: tuple[Json, ...] = ()) -> Decision:
    """The decision for a preemptor that needs a whole node (every pod on it must go)."""
    flat = [item for items in nodes for item in items]
    decision = decide(*flat, *extra, pod("p", cpu="6", priority=1000), preemptor="p")
    assert decision.verdict is Verdict.PREEMPT
    assert len(decision.rationale.evaluated) == len(nodes)
    return decision


def test_a_single_candidate_is_chosen_as_the_only_one() -> None:
    decision = choose(full_node("a", (1, 0)))
    assert (decision.nominated_node, decision.rationale.deciding_criterion) == (
        "a",
        "onlyCandidate",
    )


def test_fewer_pdb_violations_win_first() -> None:
    decision = choose(
        full_node("guarded", (1, 0), labels={"app": "db"}),
        full_node("costly", (900, 0), (900, 0)),
        extra=(pdb("db", match_labels={"app": "db"}, allowed=0),),
    )
    assert decision.nominated_node == "costly"
    assert decision.rationale.deciding_criterion == "minNumPDBViolations"
    assert decision.num_pdb_violations == 0


def test_the_lowest_highest_victim_priority_wins_next() -> None:
    decision = choose(full_node("a", (5, 0)), full_node("b", (3, 0), (3, 0), (3, 0)))
    assert decision.nominated_node == "b"
    assert decision.rationale.deciding_criterion == "minHighestPriority"


def test_the_smallest_sum_of_victim_priorities_wins_next() -> None:
    decision = choose(full_node("a", (3, 0), (3, 0)), full_node("b", (3, 0), (1, 0)))
    assert decision.nominated_node == "b"
    assert decision.rationale.deciding_criterion == "minSumPriorities"


def test_negative_priorities_are_shifted_so_fewer_victims_sum_smaller() -> None:
    # unshifted, two victims at -10 (sum -20) would beat one (sum -10)
    decision = choose(full_node("one", (-10, 0)), full_node("two", (-10, 0), (-10, 0)))
    assert decision.nominated_node == "one"
    assert decision.rationale.deciding_criterion == "minSumPriorities"


def test_fewer_victims_win_when_the_shifted_sums_tie() -> None:
    # 0 + (MinInt32) shifted sums to exactly one shifted 0: only the count tells them apart
    decision = choose(full_node("a", (0, 0), (INT32_MIN, 0)), full_node("b", (0, 0)))
    assert decision.nominated_node == "b"
    assert decision.rationale.deciding_criterion == "minNumPods"


def test_the_latest_start_of_the_highest_priority_victims_wins_next() -> None:
    # counting every victim, "a" (earliest 10) would beat "b" (earliest 1)
    decision = choose(full_node("a", (2, 10), (1, 90)), full_node("b", (2, 20), (1, 1)))
    assert decision.nominated_node == "b"
    assert decision.rationale.deciding_criterion == "latestStartTime"


def test_a_victim_without_a_start_time_counts_as_the_newest() -> None:
    decision = choose(full_node("started", (1, 500)), full_node("unstarted", (1, None)))
    assert decision.nominated_node == "unstarted"
    assert decision.rationale.deciding_criterion == "latestStartTime"


def test_a_full_tie_is_broken_by_node_name() -> None:
    decision = choose(full_node("b", (1, 5)), full_node("a", (1, 5)), full_node("c", (1, 5)))
    assert decision.nominated_node == "a"
    assert decision.rationale.deciding_criterion == "nodeName"
    assert [step.criterion for step in decision.rationale.selection] == [
        "minNumPDBViolations",
        "minHighestPriority",
        "minSumPriorities",
        "minNumPods",
        "latestStartTime",
        "nodeName",
    ]


def test_the_selection_records_who_was_still_tied_after_each_criterion() -> None:
    decision = choose(
        full_node("a", (5, 0)), full_node("b", (3, 0), (3, 0)), full_node("c", (3, 0), (1, 0))
    )
    assert [(s.criterion, s.kept) for s in decision.rationale.selection] == [
        ("minNumPDBViolations", ("a", "b", "c")),
        ("minHighestPriority", ("b", "c")),
        ("minSumPriorities", ("c",)),
    ]

"""Upstream's workload-aware preemption tests, transcribed (kubernetes/kubernetes,
pkg/scheduler/framework/preemption: podgrouppreemption_test.go and util_test.go).

Each case keeps upstream's name. Upstream's test scheduler filters by a "size" label against
a node capacity; here a node's capacity is its cpu and a pod's size its cpu request (1 unless
given). Priorities are upstream's: low 10, mid 100, high 1000.

Where upstream's test hands the evaluator a fixed victim list or places the group with a
round-robin mock, a real placement and the real `MoreImportantVictim` order give another
answer; those cases assert the planner's answer and say why beside the case:
- "Complex Mixed": the mock places round-robin; on these nodes the group fits as they stand;
- "Preempt group as a whole on single node": the mock lists the group as least important;
  by `MoreImportantVictim` a group outranks a pod of its priority, so the pod goes;
- the two "Failure" cases with room to spare: the group fits without preemption (upstream
  runs PostFilter only after scheduling failed); their "no victims" case is kept with a node
  that is full;
- the reprieve-filter error cases have no counterpart (the planner has no ReprieveFilter);
- "ongoing preemption on nominated nodes" (upstream: Success, the members' current
  nominations kept, nothing preempted) is `Ineligible`, naming the terminating pod's node
  reason: the planner's verdicts have no "keep going" value, and either way nothing new is
  evicted while an earlier preemption's victim terminates.

Upstream's newest table changed "Preempt group as a whole on single node" (its lone pod now
has mid priority, so the group goes); both versions are kept, each with its own answer.
"""

from __future__ import annotations

from typing import Any

import pytest

from preemptctl.preemption.decision import Verdict
from preemptctl.preemption.group_decision import GroupDecision
from preemptctl.preemption.pod_group_preemption import plan_pod_group
from preemptctl.preemption.victim_units import (
    UnitKind,
    filter_victims_with_pdb_violation,
    importance,
    new_victim,
)
from tests.preemption.builders import node, pdb, pod, pod_group, snapshot

Json = dict[str, Any]
LOW, MID, HIGH = 10, 100, 1000


def n(name: str, capacity: int) -> Json:
    return node(name, cpu=str(capacity))


def v(name: str, where: str, priority: int, **rest: Any) -> Json:
    """A running victim of size 1 (cpu 1), uid `uid-<name>` unless given."""
    rest.setdefault("cpu", "1")
    return pod(name, node=where, priority=priority, **rest)


def preemptor(*names: str, min_count: int | None = 1, **group: Any) -> list[Json]:
    """The pending group `preemptor-pg` at high priority, with one pod of size 1 per name."""
    made = [pod_group("preemptor-pg", priority=HIGH, min_count=min_count, **group)]
    made += [pod(name, cpu="1", priority=HIGH, group="preemptor-pg") for name in names]
    return made


def decide(*items: Json) -> GroupDecision:
    return plan_pod_group(snapshot(*items), "default/preemptor-pg")


def victims(decision: GroupDecision) -> set[str]:
    return {victim.name for victim in decision.victims}


# -- TestPodGroupEvaluator_Preempt_Victims ------------------------------------------------------

PG1_SINGLE = pod_group("pg1", priority=LOW, disruption="single")
PG1_ALL = pod_group("pg1", priority=LOW, disruption="all")

PREEMPT_VICTIMS: list[tuple[str, list[Json], set[str], int]] = [
    (
        "Priority: mix of no groups and pod groups",
        [
            n("node1", 2),
            PG1_SINGLE,
            v("p1", "node1", LOW, uid="v1"),
            v("p2", "node1", LOW, uid="v2", group="pg1"),
        ],
        {"p1"},
        0,
    ),
    (
        "Priority: StartTime of pods from same group with disruption mode single",
        [
            n("node1", 2),
            PG1_SINGLE,
            v("p1", "node1", LOW, uid="v1", group="pg1", start=1),
            v("p2", "node1", LOW, uid="v2", group="pg1", start=0),
        ],
        {"p1"},
        0,
    ),
    (
        "Pod group with disruption mode group not reprieved",
        [
            n("node1", 1),
            n("node2", 1),
            PG1_ALL,
            v("p1", "node1", LOW, uid="v1", group="pg1", start=1),
            v("p2", "node2", LOW, uid="v2", group="pg1"),
        ],
        {"p1", "p2"},
        0,
    ),
    (
        "PDB: Mixed groups",
        [
            n("node1", 2),
            pdb("foo", match_labels={"app": "foo"}),
            v("victim-pdb", "node1", LOW, uid="v1", group="pg1", labels={"app": "foo"}),
            v("victim-no-pdb", "node1", LOW, uid="v2", group="pg1"),
        ],
        {"victim-no-pdb"},
        0,
    ),
    ("Preempt single lower priority pod", [n("node1", 1), v("p1", "node1", LOW)], {"p1"}, 0),
    (
        "Priority: Prefer lower priority victim",
        [n("node1", 2), v("p1", "node1", LOW), v("p2", "node1", MID), v("p3", "node1", HIGH)],
        {"p1", "p2"},
        0,
    ),
    (
        "Efficiency: Preempt minimum number of victims",
        [
            n("node1", 3),
            v("p1", "node1", LOW, uid="v1"),
            v("p2", "node1", LOW, uid="v2"),
            v("p3", "node1", LOW, uid="v3"),
            v("p4", "node1", LOW, uid="v4"),
        ],
        {"p3", "p4"},
        0,
    ),
    (
        "PDB: Prefer non-violating victim",
        [
            n("node1", 2),
            pdb("foo", match_labels={"app": "foo"}),
            v("victim-pdb", "node1", LOW, uid="v1", labels={"app": "foo"}),
            v("victim-no-pdb", "node1", LOW, uid="v2"),
        ],
        {"victim-no-pdb"},
        0,
    ),
    (
        "PDB: Prefer removing non-violating victim over lower priority violating victim",
        [
            n("node1", 2),
            pdb("foo", match_labels={"app": "foo"}),
            v("victim-pdb", "node1", LOW, uid="v1", labels={"app": "foo"}),
            v("victim-no-pdb", "node1", MID, uid="v2"),
        ],
        {"victim-no-pdb"},
        0,
    ),
    (
        "PDB: Prefer lower priority pod for preemption, when preemption without pdb violation "
        "is not possible",
        [
            n("node1", 2),
            pdb("all", match_labels={"app": "foo"}),
            v("p1", "node1", LOW, labels={"app": "foo"}),
            v("p2", "node1", MID, labels={"app": "foo"}),
        ],
        {"p1"},
        1,
    ),
    (
        "PodGroup: Preempt group as a whole",
        [
            n("node1", 1),
            n("node2", 0),
            PG1_ALL,
            v("p1", "node1", LOW, group="pg1"),
            v("p2", "node2", LOW, group="pg1"),
        ],
        {"p1", "p2"},
        0,
    ),
    (
        "PodGroup: Prefer single pod over podGroup for preemption candidate",
        [
            n("node1", 3),
            PG1_ALL,
            v("p1", "node1", LOW),
            v("g1-1", "node1", LOW, uid="g1", group="pg1"),
            v("g1-2", "node1", LOW, uid="g2", group="pg1"),
        ],
        {"p1"},
        0,
    ),
    (
        # Upstream's mock lists the group as the least important unit; MoreImportantVictim
        # ranks it above a pod of its priority, so the pod goes (see the module docstring).
        "PodGroup: Preempt group as a whole on single node",
        [
            n("node1", 3),
            PG1_ALL,
            v("g1-1", "node1", LOW, uid="g1", group="pg1"),
            v("g1-2", "node1", LOW, uid="g2", group="pg1"),
            v("p1", "node1", LOW),
        ],
        {"p1"},
        0,
    ),
    (
        "PDB: Unit violation if any member violates",
        [
            n("node1", 3),
            PG1_ALL,
            pdb("g1", match_labels={"app": "g1"}),
            v("g1-1", "node1", LOW, uid="g1", group="pg1", labels={"app": "g1"}),
            v("g1-2", "node1", LOW, uid="g2", group="pg1"),
            v("p1", "node1", LOW),
        ],
        {"p1"},
        0,
    ),
]


def mid_preemptor(*pods: Json) -> list[Json]:
    """The pending group `preemptor-pg` at mid priority (basic), with the given members."""
    return [pod_group("preemptor-pg", priority=MID), *pods]


def member(name: str, priority: int = HIGH, **rest: Any) -> Json:
    return pod(name, cpu="1", priority=priority, group="preemptor-pg", **rest)


# Cases of upstream's newest table, each with its own preemptor.
NEWEST_VICTIMS: list[tuple[str, list[Json], set[str]]] = [
    (
        "PodGroup: Preempt group as a whole on single node (newest: the pod at mid priority)",
        [
            n("node1", 3),
            PG1_ALL,
            v("g1-1", "node1", LOW, uid="g1", group="pg1"),
            v("g1-2", "node1", LOW, uid="g2", group="pg1"),
            v("p1", "node1", MID, uid="p1"),
            *preemptor("p"),
        ],
        {"g1-1", "g1-2"},
    ),
    (
        "Priority divergence: candidate victim PodGroup has lower priority than the Pods "
        "from that group",
        [
            n("node1", 1),
            n("node2", 1),
            pod_group("pg1", priority=MID, disruption="all"),
            v("p1", "node1", HIGH, uid="v1", group="pg1"),
            v("p2", "node2", HIGH, uid="v2", group="pg1"),
            *preemptor("p"),
        ],
        {"p1", "p2"},
    ),
    (
        "Preemptor group is eligible if terminating pods are on non-nominated nodes",
        [
            n("node1", 1),
            n("node2", 1),
            v("victim", "node2", LOW, uid="v1", terminating=True, disrupted_by_scheduler=True),
            v("other-victim", "node1", LOW, uid="v2"),
            pod_group("preemptor-pg", priority=HIGH),
            member("p1"),
            member("p2", nominated="node1"),
        ],
        {"other-victim", "victim"},
    ),
    *(
        (
            "Preemptor group is eligible if nominated node has terminating pod belonging to a "
            f"pod group of higher priority ({mode})",
            [
                n("node1", 2),
                n("node2", 1),
                pod_group("victim-pg", priority=HIGH, disruption=mode),
                v(
                    "victim",
                    "node1",
                    LOW,
                    uid="v1",
                    group="victim-pg",
                    terminating=True,
                    disrupted_by_scheduler=True,
                ),
                v("other-victim", "node1", LOW, uid="v2"),
                *mid_preemptor(member("p1", MID), member("p2", MID, nominated="node1")),
            ],
            {"other-victim"},
        )
        for mode in ("all", "single")
    ),
    *(
        (
            "PodGroup preemptor with PreemptLowerPriority preemption policy performs preemption"
            + (" with PodGroup victims" if victim_groups else "")
            + (", ignoring member pod preemption policy" if never else ""),
            [
                n("node1", 1),
                n("node2", 1),
                n("node3", 1),
                v("p1", "node1", LOW, uid="v1"),
                v("p2", "node2", LOW, uid="v2", group="pg1"),
                v("p3", "node3", LOW, uid="v3", group="pg2"),
                *(
                    [pod_group("pg1", priority=LOW), pod_group("pg2", priority=LOW)]
                    if victim_groups
                    else []
                ),
                pod_group("preemptor-pg", priority=HIGH, preemption_policy="PreemptLowerPriority"),
                member("p-1", preemption_policy="Never" if never else None),
            ],
            {"p1"},
        )
        for victim_groups in (False, True)
        for never in (False, True)
    ),
]


@pytest.mark.parametrize(
    ("items", "expected"),
    [pytest.param(items, want, id=name) for name, items, want in NEWEST_VICTIMS],
)
def test_pod_group_evaluator_preempt_victims_newest(items: list[Json], expected: set[str]) -> None:
    decision = decide(*items)
    assert (decision.verdict, victims(decision)) == (Verdict.PREEMPT, expected)


def test_priority_divergence_group_of_higher_priority_than_its_pods_is_no_victim() -> None:
    """Upstream's "candidate victim PodGroup has higher priority than the Pods from that
    group": the pods' own priority is below the preemptor's, their group's is not."""
    items = [
        n("node1", 1),
        n("node2", 1),
        pod_group("pg1", priority=MID, disruption="all"),
        v("p1", "node1", LOW, uid="v1", group="pg1"),
        v("p2", "node2", LOW, uid="v2", group="pg1"),
    ]
    decision = decide(*items, *mid_preemptor(member("p", MID)))
    assert (decision.verdict, decision.victims) == (Verdict.UNSCHEDULABLE, ())


@pytest.mark.parametrize(
    ("victim_priority", "victim_group"),
    [
        pytest.param(LOW, None, id="member has nominated node with terminating pods"),
        pytest.param(HIGH, "all", id="terminating pod belonging to a pod group of lower priority"),
        pytest.param(
            HIGH,
            "single",
            id="terminating pod belonging to a pod group of lower priority with DisruptionModePod",
        ),
    ],
)
def test_ongoing_preemption_on_a_nominated_node_preempts_nothing_more(
    victim_priority: int, victim_group: str | None
) -> None:
    """Upstream's "Preemptor group returns success with current nominating infos ...": the
    planner says Ineligible (see the module docstring); either way no victim is chosen."""
    items = [
        n("node1", 1),
        v(
            "victim",
            "node1",
            victim_priority,
            uid="v1",
            group="victim-pg" if victim_group else None,
            terminating=True,
            disrupted_by_scheduler=True,
        ),
        *([pod_group("victim-pg", priority=LOW, disruption=victim_group)] if victim_group else []),
        pod_group("preemptor-pg", priority=HIGH),
        member("p1"),
        member("p2", nominated="node1"),
    ]
    decision = decide(*items)
    assert (decision.verdict, decision.victims, decision.message) == (
        Verdict.INELIGIBLE,
        (),
        "not eligible due to a terminating pod on the nominated node.",
    )


@pytest.mark.parametrize(
    ("items", "expected", "violations"),
    [pytest.param(items, want, count, id=name) for name, items, want, count in PREEMPT_VICTIMS],
)
def test_pod_group_evaluator_preempt_victims(
    items: list[Json], expected: set[str], violations: int
) -> None:
    decision = decide(*items, *preemptor("p"))
    assert (decision.verdict, victims(decision), decision.num_pdb_violations) == (
        Verdict.PREEMPT,
        expected,
        violations,
    )


GANGS: list[tuple[str, list[Json], int | None, str, set[str]]] = [
    (
        "Gang scheduling: schedule as many pods as possible without preempting higher "
        "priority pods, but still more than minCount",
        [
            *(n(f"node{i}", 1) for i in range(1, 5)),
            v("p1", "node1", LOW),
            v("p2", "node2", LOW),
            v("p3", "node3", HIGH),
            v("p4", "node4", HIGH),
        ],
        1,
        "single",
        {"p1", "p2"},
    ),
    (
        "Gang scheduling: do not reprieve victim pod group of lower priority",
        [
            *(n(f"node{i}", 1) for i in range(1, 4)),
            pod_group("victim-pg", priority=MID, min_count=1, disruption="all"),
            v("v1", "node1", MID, group="victim-pg"),
            v("v2", "node2", MID, group="victim-pg"),
            v("v3", "node3", LOW),
        ],
        1,
        "single",
        {"v1", "v2", "v3"},
    ),
    (
        "Gang scheduling: preempt a pod group victim but do not schedule full pod group",
        [
            *(n(f"node{i}", 1) for i in range(1, 5)),
            pod_group("victim-pg", priority=MID, min_count=2, disruption="all"),
            pod_group("victim-pg2", priority=HIGH, min_count=2, disruption="all"),
            v("v1", "node1", MID, group="victim-pg"),
            v("v2", "node2", MID, group="victim-pg"),
            v("v3", "node3", HIGH, group="victim-pg2"),
            v("v4", "node4", HIGH, group="victim-pg2"),
        ],
        1,
        "all",
        {"v1", "v2"},
    ),
]


@pytest.mark.parametrize(("policy"), ["gang", "basic"])
@pytest.mark.parametrize(
    ("items", "min_count", "disruption", "expected"),
    [pytest.param(items, m, d, want, id=name) for name, items, m, d, want in GANGS],
)
def test_pod_group_evaluator_preempt_victims_gang_and_basic(
    items: list[Json], min_count: int, disruption: str, expected: set[str], policy: str
) -> None:
    """Upstream's "Gang scheduling: ..." cases and their "Basic scheduling: ..." twins."""
    count = min_count if policy == "gang" else None
    group = preemptor("p-a", "p-b", "p-c", min_count=count, disruption=disruption)
    decision = decide(*items, *group)
    assert (decision.verdict, victims(decision)) == (Verdict.PREEMPT, expected)


def test_complex_mixed_shared_different_and_no_groups_fits_as_nodes_stand() -> None:
    """Upstream's "Complex Mixed: Shared, different, and no groups" (round-robin mock)."""
    items = [
        n("node1", 2),
        n("node2", 1),
        n("node3", 2),
        n("node4", 2),
        n("node5", 2),
        pod_group("pg1", priority=LOW),
        pod_group("pg2", priority=LOW),
        pod_group("pg3", priority=HIGH),
        v("p1", "node1", LOW, group="pg1", start=1),
        v("p2", "node2", LOW, group="pg1"),
        v("p3", "node3", LOW, group="pg2", start=0),
        v("p4", "node4", MID),
        v("p5", "node5", HIGH, group="pg3", start=0),
    ]
    decision = decide(*items, *preemptor("p-1", "p-2", "p-3"))
    assert decision.verdict is Verdict.FITS_WITHOUT_PREEMPTION


def test_failure_cannot_preempt_when_no_victims_are_generated() -> None:
    items = [n("node1", 1), v("p1", "node1", HIGH)]
    group = [pod_group("preemptor-pg", priority=MID, min_count=1)]
    group.append(pod("p", cpu="1", priority=MID, group="preemptor-pg"))
    decision = decide(*items, *group)
    assert (decision.verdict, decision.victims) == (Verdict.UNSCHEDULABLE, ())


def test_failure_cannot_preempt_if_node_is_empty_fits_instead() -> None:
    decision = decide(n("node1", 100), *preemptor("p"))
    assert (decision.verdict, decision.victims) == (Verdict.FITS_WITHOUT_PREEMPTION, ())


# -- TestPodGroupEvaluator_Preempt_NominatedNodes -------------------------------------------------


def test_pod_group_evaluator_preempt_nominated_nodes() -> None:
    """Only the placed members are nominated (upstream: p2 gets no node)."""
    items = [n("node1", 1), v("p3", "node1", LOW)]
    decision = decide(*items, *preemptor("p1", "p2"))
    assert (decision.verdict, decision.nominations) == (
        Verdict.PREEMPT,
        {"default/p1": "node1"},
    )


# -- TestPodGroupEvaluator_Preempt (eligibility) --------------------------------------------------


def test_pod_group_preemptor_returns_unschedulable_when_preemption_policy_is_never() -> None:
    items = [n("node1", 1), v("p1", "node1", LOW)]
    decision = decide(*items, *preemptor("p-1", "p-2", preemption_policy="Never"))
    assert (decision.verdict, decision.message) == (
        Verdict.INELIGIBLE,
        "not eligible due to preemptionPolicy=Never.",
    )


def test_preemptor_group_waits_while_a_victim_terminates_on_a_nominated_node() -> None:
    items = [
        n("node1", 1),
        v("victim", "node1", LOW, terminating=True, disrupted_by_scheduler=True),
        pod_group("preemptor-pg", priority=HIGH, min_count=1),
        pod("p1", cpu="1", priority=HIGH, group="preemptor-pg"),
        pod("p2", cpu="1", priority=HIGH, group="preemptor-pg", nominated="node1"),
    ]
    decision = decide(*items)
    assert (decision.verdict, decision.message) == (
        Verdict.INELIGIBLE,
        "not eligible due to a terminating pod on the nominated node.",
    )


# -- TestMoreImportantVictim ----------------------------------------------------------------

NOW, BEFORE = 1000.0, 500.0


def unit(priority: int, *, grouped: bool = False, size: int = 1, start: float = NOW) -> Any:
    pods = [
        pod(f"u{priority}-{size}-{i}", node="n", priority=priority, group="pg" if grouped else None)
        for i in range(size)
    ]
    made = new_victim(
        UnitKind.POD_GROUP if grouped else UnitKind.POD,
        "default/u",
        [snapshot(node("n"), *pods).pods[p["metadata"]["uid"]] for p in pods],
        priority,
    )
    return made.__class__(
        made.kind, made.key, made.pods, made.priority, made.rank, start, made.first_uid
    )


MORE_IMPORTANT: list[tuple[str, Any, Any, bool]] = [
    ("vi1 has higher priority", unit(20), unit(10), True),
    ("vi2 has higher priority", unit(10), unit(20), False),
    ("vi1 is PG, vi2 is Pod, same priority", unit(10, grouped=True), unit(10), True),
    ("vi1 is Pod, vi2 is PG, same priority", unit(10), unit(10, grouped=True), False),
    ("both Pods, vi1 older", unit(10, start=BEFORE), unit(10, start=NOW), True),
    ("both Pods, vi2 older", unit(10, start=NOW), unit(10, start=BEFORE), False),
    ("both PGs, vi1 larger", unit(10, grouped=True, size=2), unit(10, grouped=True), True),
    ("both PGs, vi2 larger", unit(10, grouped=True), unit(10, grouped=True, size=2), False),
    (
        "both PGs, same size, vi1 older",
        unit(10, grouped=True, size=2, start=BEFORE),
        unit(10, grouped=True, size=2, start=NOW),
        True,
    ),
    (
        "both PGs, same size, vi2 older",
        unit(10, grouped=True, size=2, start=NOW),
        unit(10, grouped=True, size=2, start=BEFORE),
        False,
    ),
]


@pytest.mark.parametrize(
    ("first", "second", "want"),
    [pytest.param(a, b, w, id=name) for name, a, b, w in MORE_IMPORTANT],
)
def test_more_important_victim(first: Any, second: Any, want: bool) -> None:
    assert (importance(first) < importance(second)) is want


# -- TestFilterVictimsWithPDBViolation ------------------------------------------------------


def units_of(*items: Json) -> tuple[Any, list[Any]]:
    built = snapshot(node("n"), *items)
    pods = sorted((p for p in built.pods.values() if p.node_name), key=lambda p: p.name)
    return built, [new_victim(UnitKind.POD, p.key, [p], p.priority) for p in pods]


@pytest.mark.parametrize(
    ("budgets", "want_violating", "want_counts"),
    [
        pytest.param([], [], [], id="victim with no matching PDBs"),
        pytest.param(
            [pdb("foo", match_labels={"app": "foo"}, allowed=1)],
            [],
            [],
            id="victim matching PDB, adequate DisruptionsAllowed",
        ),
        pytest.param(
            [pdb("foo", match_labels={"app": "foo"}, allowed=0)],
            ["p1"],
            [1],
            id="victim matching PDB, no DisruptionsAllowed",
        ),
        pytest.param(
            [pdb("foo", match_labels={"app": "foo"}, allowed=0, disrupted=["p1"])],
            [],
            [],
            id="pod in DisruptedPods is ignored",
        ),
        pytest.param(
            [
                pdb("foo", match_labels={"app": "foo"}, allowed=1),
                pdb("tier", match_labels={"tier": "backend"}, allowed=0),
            ],
            ["p1"],
            [1],
            id="Multiple PDBs",
        ),
    ],
)
def test_filter_victims_with_pdb_violation(
    budgets: list[Json], want_violating: list[str], want_counts: list[int]
) -> None:
    built, units = units_of(v("p1", "n", LOW, labels={"app": "foo", "tier": "backend"}), *budgets)
    violating, _ = filter_victims_with_pdb_violation(units, built)
    assert [(u.pods[0].name, count) for u, count in violating] == list(
        zip(want_violating, want_counts, strict=True)
    )


def test_podgroup_victim_with_multiple_pods_all_violating_counts_each_pod() -> None:
    built = snapshot(
        node("n"),
        pdb("foo", match_labels={"app": "foo"}, allowed=0),
        v("p1", "n", LOW, labels={"app": "foo"}),
        v("p2", "n", LOW, labels={"app": "foo"}),
    )
    group = new_victim(UnitKind.POD_GROUP, "default/pg", [p for p in built.pods.values()], LOW)
    violating, non_violating = filter_victims_with_pdb_violation([group], built)
    assert ([(u.key, count) for u, count in violating], non_violating) == (
        [("default/pg", 2)],
        [],
    )


def test_multiple_victims_matching_the_same_pdb_spend_it_in_order() -> None:
    built, units = units_of(
        v("p1", "n", LOW, labels={"app": "foo"}),
        v("p2", "n", LOW, labels={"app": "foo"}),
        pdb("foo", match_labels={"app": "foo"}, allowed=1),
    )
    violating, non_violating = filter_victims_with_pdb_violation(units, built)
    assert ([u.pods[0].name for u, _ in violating], [u.pods[0].name for u in non_violating]) == (
        ["p2"],
        ["p1"],
    )

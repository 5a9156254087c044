"""Hostile input: whatever a snapshot holds, the planner answers or says what is wrong in one line.

Scenarios:
- any JSON value (null, numbers of any size, strings, lists, objects) put in any field the
  planner reads of a pod, node or PDB gives a decision or a `PlannerInputError` naming the
  object, never another exception (a bounded hypothesis fuzz test);
- known crashes stay fixed: a list or dict as nodeName or nominatedNodeName, Gt/Lt against
  non-numeric or out-of-range labels, priorities beyond 32 bits, quantity exponents that
  would build astronomically large numbers, digits beyond any sane quantity;
- quantity exponents: within int64 they are exact, far below a nano-unit they round up to
  one, above int64 they are refused.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from preemptctl.preemption.decision import Strategy, Verdict
from preemptctl.preemption.errors import PlannerInputError, QuantityError
from preemptctl.preemption.objects import Requirement
from preemptctl.preemption.planner import plan
from preemptctl.preemption.quantity import parse_quantity
from preemptctl.preemption.selectors import requirement_matches
from preemptctl.preemption.snapshot import ClusterSnapshot
from tests.preemption.builders import listing, node, pdb, pod, requirement, spread, term

Json = dict[str, Any]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True)
    | st.text(max_size=12)
    | st.sampled_from(["1e100000000", "1e-999999999", "Gt", "Exists", "", "-1", "9" * 80]),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=6,
)

POD_PATHS = [
    ("metadata", "uid"),
    ("metadata", "labels"),
    ("metadata", "annotations"),
    ("spec", "nodeName"),
    ("spec", "priority"),
    ("spec", "schedulerName"),
    ("spec", "preemptionPolicy"),
    ("spec", "tolerations"),
    ("spec", "nodeSelector"),
    ("spec", "affinity"),
    ("spec", "topologySpreadConstraints"),
    ("spec", "volumes"),
    ("spec", "containers"),
    ("spec", "overhead"),
    ("status", "nominatedNodeName"),
    ("status", "startTime"),
    ("status", "phase"),
    ("status", "conditions"),
]
NODE_PATHS = [("metadata", "labels"), ("spec", "taints"), ("status", "allocatable")]
PDB_PATHS = [("spec", "selector"), ("status", "disruptionsAllowed"), ("status", "disruptedPods")]


def base_items() -> list[Json]:
    return [
        node("n1", cpu="2", labels={"kubernetes.io/hostname": "n1", "zone": "a", "rank": "7"}),
        pod("low", node="n1", cpu="1", priority=1, labels={"app": "a"}),
        pod(
            "guard",
            node="n1",
            cpu="500m",
            priority=1,
            pod_anti_affinity=[term(match_labels={"app": "web"})],
        ),
        pdb("budget", match_labels={"app": "a"}),
        pod(
            "p",
            cpu="2",
            priority=100,
            labels={"app": "web"},
            spread=[spread(match_labels={"app": "web"})],
        ),
    ]


def planned_or_refused(items: list[Json], strategy: Strategy = Strategy.DEFAULT) -> None:
    """A decision, or one line naming what is wrong; any other exception fails the test."""
    try:
        cluster = ClusterSnapshot.from_list(listing(*items))
        for key in ("default/p", "default/low"):
            if cluster.pod_by_key(key) is not None:
                plan(cluster, key, strategy)
    except PlannerInputError as error:
        assert "\n" not in str(error) and str(error)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["pod", "node", "pdb"]),
    st.integers(0, 100),
    json_values,
    st.sampled_from(list(Strategy)),
)
def test_any_value_in_any_field_is_a_decision_or_one_line(
    target: str, which: int, value: Any, strategy: Strategy
) -> None:
    items = base_items()
    if target == "pod":
        obj, paths = items[4 if which % 2 else 1], POD_PATHS
    elif target == "node":
        obj, paths = items[0], NODE_PATHS
    else:
        obj, paths = items[3], PDB_PATHS
    section, field = paths[which % len(paths)]
    obj.setdefault(section, {})[field] = value
    planned_or_refused(items, strategy)


@pytest.mark.parametrize("value", [["n1"], {"name": "n1"}, 7])
@pytest.mark.parametrize("field", [("spec", "nodeName"), ("status", "nominatedNodeName")])
def test_a_non_string_node_name_is_one_line(field: tuple[str, str], value: Any) -> None:
    items = base_items()
    items[4][field[0]][field[1]] = value
    with pytest.raises(
        PlannerInputError, match=f"pod default/p: {'.'.join(field)} must be a string"
    ):
        ClusterSnapshot.from_list(listing(*items))


@pytest.mark.parametrize(
    ("label", "operator", "value", "matches"),
    [
        ("7", "Gt", "5", True),
        ("7", "Lt", "5", False),
        ("seven", "Gt", "5", False),
        ("7", "Gt", "five", False),
        ("1_0", "Gt", "5", False),
        (" 7", "Gt", "5", False),
        ("9" * 30, "Gt", "5", False),
    ],
)
def test_gt_and_lt_compare_only_64_bit_integers(
    label: str, operator: str, value: str, matches: bool
) -> None:
    assert requirement_matches(Requirement("rank", operator, (value,)), {"rank": label}) is matches


def test_gt_against_a_non_numeric_node_label_is_no_match_not_a_crash() -> None:
    items = base_items()
    items[0]["metadata"]["labels"]["rank"] = "high"
    items[4]["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [requirement("rank", "Gt", "5")]}]
            }
        }
    }
    decision = plan(ClusterSnapshot.from_list(listing(*items)), "default/p")
    assert decision.verdict is Verdict.UNSCHEDULABLE


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1e3", Fraction(1000)),
        ("5E-3", Fraction(5, 1000)),
        ("1e-100000000", Fraction(1, 10**9)),
        ("0e100000000", Fraction(0)),
        ("8Ei", Fraction(2**63 - 1)),
    ],
)
def test_quantity_exponents_are_bounded_as_upstream_bounds_them(text: str, value: Fraction) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["1e100000000", "1e19", "1e99999999999999", "9" * 80])
def test_quantities_beyond_int64_are_refused_at_once(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)

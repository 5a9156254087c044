"""Label selectors, node selectors and taint tolerations, with upstream's matching rules."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from preemptctl.preemption.objects import (
    LabelSelector,
    NodeSelectorTerm,
    Requirement,
    Taint,
    Toleration,
)

UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")


def requirement_matches(requirement: Requirement, labels: Mapping[str, str]) -> bool:
    """`labels.Requirement.Matches`: NotIn and DoesNotExist match an absent key."""
    key, operator, values = requirement
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    if operator in ("Gt", "Lt"):
        if key not in labels or len(values) != 1:
            return False
        have, want = parse_int64(labels[key]), parse_int64(values[0])
        if have is None or want is None:
            return False
        return have > want if operator == "Gt" else have < want
    return False


_INT64 = re.compile(r"[+-]?[0-9]{1,19}")


def parse_int64(text: str) -> int | None:
    """Go's `strconv.ParseInt(text, 10, 64)`: an optional sign and decimal digits within
    int64; None for anything else (Python's `int` would also take spaces, `_` and other
    scripts' digits, and any size)."""
    if not isinstance(text, str) or _INT64.fullmatch(text) is None:
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


def label_selector_matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """`metav1.LabelSelectorAsSelector(s).Matches(labels)` for a valid, non-empty selector."""
    for key, value in selector.match_labels:
        if labels.get(key) != value:
            return False
    return all(requirement_matches(r, labels) for r in selector.match_expressions)


def node_selector_term_matches(
    term: NodeSelectorTerm, node_name: str, labels: Mapping[str, str]
) -> bool:
    """A required node-affinity term: all expressions and fields hold (an empty one never does)."""
    if not term.match_expressions and not term.match_fields:
        return False
    for requirement in term.match_fields:
        if requirement.key != "metadata.name":
            return False
        if not requirement_matches(requirement, {"metadata.name": node_name}):
            return False
    return all(requirement_matches(r, labels) for r in term.match_expressions)


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """`Toleration.ToleratesTaint`: empty effect and empty key (with Exists) are wildcards."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator in ("", "Equal"):
        return toleration.value == taint.value
    return toleration.operator == "Exists"


def first_untolerated_taint(
    taints: Sequence[Taint], tolerations: Sequence[Toleration], effects: tuple[str, ...]
) -> Taint | None:
    """`FindMatchingUntoleratedTaint`: the first taint of the given effects nobody tolerates."""
    for taint in taints:
        if taint.effect not in effects:
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None

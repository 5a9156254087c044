"""A decision's rationale as text a person reads at a terminal (`preemptctl plan --explain`):
a pod's (`render_explanation`) or a pod group's (`render_group_explanation`)."""

from __future__ import annotations

from collections.abc import Sequence

from preemptctl.preemption.decision import Decision, Strategy
from preemptctl.preemption.group_decision import GroupDecision

_MAX_LISTED = 8


def _names(names: Sequence[str]) -> str:
    if len(names) <= _MAX_LISTED:
        return ", ".join(names)
    return ", ".join(names[:_MAX_LISTED]) + f" … and {len(names) - _MAX_LISTED} more"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=False)]
    lines = []
    for row in [header, *rows]:
        cells = [str(cell).ljust(width) for cell, width in zip(row, widths, strict=False)]
        lines.append(indent + "  ".join(cells).rstrip())
    return lines


def render_explanation(decision: Decision) -> str:
    """The rationale as sections: verdict, filter pass, dry run, selection, victims."""
    r = decision.rationale
    p = decision.preemptor
    lines = [
        f"Preemptor   {p.key} (priority {p.priority}, uid {p.uid})",
        f"Strategy    {r.strategy}",
        f"Decision    {decision.verdict}"
        + (f" on {decision.nominated_node}" if decision.nominated_node else ""),
        f"Message     {decision.message}",
        "",
    ]
    if r.filtered:
        lines.append(f"Filter pass over {r.nodes_total} node(s)")
        lines += _table(
            ("FILTER", "REASON", "NODES"),
            [(r.filters.get(reason, "-"), reason, str(n)) for reason, n in r.filtered.items()],
        )
        lines.append("")
    if r.unresolvable:
        lines.append("Unresolvable: preemption cannot help on these nodes")
        lines += _table(
            ("FILTER", "REASON", "NODES"),
            [
                (r.filters.get(reason, "-"), reason, _names(nodes))
                for reason, nodes in r.unresolvable.items()
            ],
        )
        lines.append("")
    if r.fits:
        lines += [f"Fits without preemption on: {_names(r.fits)}", ""]
    if r.details.get("insufficient"):
        missing = ", ".join(
            f"{name} {amount}" for name, amount in r.details["insufficient"].items()
        )
        lines += [f"Missing on the pod's node for admission: {missing}", ""]
    if r.evaluated:
        if r.strategy is Strategy.DEFAULT:
            lines.append(
                f"Dry run: {r.potential_nodes} node(s) where preemption might help; window of "
                f"{r.candidates_wanted} from offset {r.offset}; evaluated {len(r.evaluated)}"
                + (" (stopped early: enough candidates)" if r.stopped_early else "")
            )
        rows = []
        for verdict in r.evaluated:
            if verdict.candidate:
                rows.append(
                    (
                        verdict.node,
                        "candidate",
                        str(len(verdict.victims)),
                        str(verdict.num_pdb_violations),
                        _names(verdict.victims),
                    )
                )
            else:
                why = "; ".join(verdict.reasons)
                if verdict.filter:
                    why = f"{verdict.filter}: {why}"
                rows.append((verdict.node, "rejected", "-", "-", why))
        lines += _table(("NODE", "RESULT", "VICTIMS", "PDB-VIOLATIONS", "DETAIL"), rows)
        lines.append("")
    if r.selection:
        lines.append("Choosing the node (pickOneNodeForPreemption), criteria in order")
        lines += _table(
            ("CRITERION", "STILL TIED"),
            [(step.criterion, _names(step.kept)) for step in r.selection],
        )
        lines.append("")
    if r.deciding_criterion:
        lines += [f"Chosen by   {r.deciding_criterion}", ""]
    if decision.victims:
        order = "most important first" if r.strategy is Strategy.DEFAULT else "kubelet order"
        lines.append(f"Victims ({order}), {decision.num_pdb_violations} PDB violation(s)")
        tiers = r.details.get("tiers", {})
        lines += _table(
            ("POD", "PRIORITY", "UID", *(("QOS",) if tiers else ())),
            [
                (v.key, str(v.priority), v.uid, *((tiers.get(v.key, ""),) if tiers else ()))
                for v in decision.victims
            ],
        )
        lines.append("")
    if decision.nominated_pods_to_clear:
        lines.append(
            "Lower-priority nominations to clear: "
            + _names([pod.key for pod in decision.nominated_pods_to_clear])
        )
        lines.append("")
    return "\n".join(lines)


def render_group_explanation(decision: GroupDecision) -> str:
    """A group decision's rationale as sections: the group, the verdict, where the group is
    placed (once, with every lower-priority unit removed), the units taken and why each
    could not be reprieved, and the victims, most important first, each with its unit."""
    r = decision.rationale
    group = r.get("group") or {}
    placed = decision.nominations or r.get("placement") or r.get("fits") or {}
    policy = f"{group.get('schedulingPolicy', '?')}, minCount {group.get('minCount', '?')}"
    lines = [
        f"Pod group   {decision.pod_group} (priority {group.get('priority', '?')}, uid "
        f"{decision.uid}; {group.get('kind', 'PodGroup')}, {policy}; "
        f"{group.get('pending', '?')} pending, {group.get('bound', '?')} bound)",
        f"Strategy    {r.get('strategy', '?')}",
        f"Decision    {decision.verdict}",
        f"Message     {decision.message}",
        "",
    ]
    if "potentialVictimPods" in r:
        lines += [
            f"Dry run over {r.get('nodesTotal', '?')} node(s): {r['potentialVictimPods']} "
            "lower-priority pod(s) removed, the group placed once on what is left",
            "",
        ]
    if placed:
        lines.append(f"Placement: {len(placed)} pod(s) on {len(set(placed.values()))} node(s)")
        lines += _table(("POD", "NODE"), sorted(placed.items()))
        lines.append("")
    if "unitsConsidered" in r:
        taken = len(decision.units)
        victim_nodes = len({node for unit in decision.units for node in unit.nodes})
        lines.append(
            f"Victim units: {r['unitsConsidered']} considered, {r.get('unitsReprieved', 0)} "
            f"reprieved, {taken} taken (most important first), their pods on "
            f"{victim_nodes} node(s)"
        )
        if decision.units:
            lines += _table(
                ("UNIT", "PRIORITY", "WHOLE", "PODS", "NODES", "PDB-VIOLATIONS", "WHY TAKEN"),
                [
                    (
                        unit.unit,
                        str(unit.priority),
                        "yes" if unit.whole else "no",
                        str(len(unit.pods)),
                        _names(unit.nodes),
                        str(unit.pdb_violations),
                        unit.reason,
                    )
                    for unit in decision.units
                ],
            )
        lines.append("")
    if decision.victims:
        lines.append(
            f"Victims (most important first), {decision.num_pdb_violations} PDB violation(s)"
        )
        rows = []
        for victim in decision.victims:
            unit = decision.unit_of(victim)
            rows.append((victim.key, str(victim.priority), victim.uid, unit.unit if unit else "-"))
        lines += _table(("POD", "PRIORITY", "UID", "UNIT"), rows)
        lines.append("")
    return "\n".join(lines)

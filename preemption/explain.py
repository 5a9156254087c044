"""A decision's rationale as text a person reads at a terminal (`preemptctl plan --explain`)."""

from __future__ import annotations

from collections.abc import Sequence

from preemptctl.preemption.decision import Decision, Strategy

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

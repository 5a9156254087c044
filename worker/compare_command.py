"""`preemptctl compare`: shadow mode's decisions beside kube-scheduler's own, per preemptor.

Our side is the ledger's decisions (in shadow mode, every `dry_run` run's decision); the
scheduler's is `upstream_preemptions`, one row per `Preempted` Event the worker recorded
while running with `--dry-run`. Both are grouped by the preemptor's UID (the older Event
form, which names the preemptor by namespace/name, joins by that name). Each preemptor gets
one result:

- `agree`: both preempted, on the same node, the same victims;
- `other-victims`: the same node, other victims (the pods named, each side's own);
- `other-node`: both preempted, on different nodes;
- `ours-only`: we would have preempted, the scheduler did not;
- `upstream-only`: the scheduler preempted, we would not have (our verdict named);
- `after-upstream`: the scheduler preempted and our only decisions came after it had, and
  were not to preempt (e.g. its victims already gone, the preemptor fitting or bound
  meanwhile). Not a disagreement: we decided on a cluster the scheduler had already
  changed. Counted apart, not in the ratio. (A worker in shadow mode plans through
  `kube.upstream_events.ShadowView`, which shows the victims still terminating as running,
  so this is what is left: victims gone before our dry run, or Events recorded after it.)

A preemptor is a pod or a pod group. kube-scheduler preempts for a PodGroup as one
(workload-aware preemption: `Preempted by podgroup <uid> on node cluster` on each victim),
and so do we (a group preemption, its decision naming the group in the preemptor columns):
the two are compared by the group's UID like a pod's, with no node to compare (a group is
placed over the whole cluster), so a group's result is `agree` (the same victims) or
`other-victims`, besides the one-sided results. Its units are told too: for each victim
unit our decision took (a gang taken whole, or a pod), whether kube-scheduler took all of
its pods (`both`), none (`ours-only`) or some (`split`); the scheduler's victims outside
our units are its own (`only upstream`). Its Events name pods, not units: the units are
our decision's.

A preemptor neither side preempted for is not listed. When we decided several times (the
trigger retries a pod that stays unschedulable), the comparable decision is our latest
`Preempt` if there is one, else our latest decision. Agreement is `agree` over every
compared preemptor except `after-upstream`.

Agreement needs the scheduler's side: with nothing recorded from kube-scheduler in the window
(the worker was not in shadow mode, or kube-scheduler did not preempt) it is not measured,
and the command says what compare needs instead of a ratio against nothing. A `Preempt`
decision we carried out (not a dry run) is counted apart too: kube-scheduler had nothing
left to preempt for it.

What the cluster wrote (names, node names, messages) is shown through `worker.terminal`'s
`printable`, so an Event's text cannot move the operator's cursor, retitle the terminal or
hide part of a line; `-o json` escapes the same characters (as JSON escapes: the values
read back unchanged).
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import orjson

from preemptctl.kube.upstream_events import preempted_by_group
from preemptctl.ledger.upstream import (
    DecidedUnit,
    OurDecision,
    RecordedUpstream,
    decisions_since,
    upstream_since,
)
from preemptctl.worker.errors import add_output_flag
from preemptctl.worker.ledger_commands import READ_DATABASE_HELP, open_ledger, parse_since
from preemptctl.worker.terminal import printable, printable_json

PREEMPT = "Preempt"
NOTICE_WIDTH = 92  # the table's notices, wrapped


class Result(StrEnum):
    AGREE = "agree"
    OTHER_VICTIMS = "other-victims"
    OTHER_NODE = "other-node"
    OURS_ONLY = "ours-only"
    UPSTREAM_ONLY = "upstream-only"
    AFTER_UPSTREAM = "after-upstream"

    @property
    def disagreement(self) -> bool:
        return self in (
            Result.OTHER_VICTIMS,
            Result.OTHER_NODE,
            Result.OURS_ONLY,
            Result.UPSTREAM_ONLY,
        )


@dataclass(frozen=True, slots=True)
class UpstreamSide:
    """What the scheduler did for one preemptor: its node(s) and victims, first Event time;
    `by_group` when it preempted for a pod group (no node: over the whole cluster)."""

    preemptor_uid: str
    preemptor: str | None  # ns/name when known
    nodes: tuple[str, ...]
    victims: tuple[str, ...]
    first_at: datetime
    by_group: bool = False


class UnitResult(StrEnum):
    """What kube-scheduler did with one victim unit of our group decision."""

    BOTH = "both"  # it took every pod of the unit too
    OURS_ONLY = "ours-only"  # it took none of them
    SPLIT = "split"  # it took some: not the unit we took whole


@dataclass(frozen=True, slots=True)
class UnitCompared:
    unit: str
    pods: tuple[str, ...]
    result: UnitResult
    upstream_took: int  # how many of its pods the scheduler preempted

    def to_json(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "pods": list(self.pods),
            "result": str(self.result),
            "upstreamTook": self.upstream_took,
        }

    def describe(self) -> str:
        if self.result is UnitResult.SPLIT:
            return f"{self.unit} split ({self.upstream_took} of {len(self.pods)} taken upstream)"
        return f"{self.unit} {self.result}"


def compare_units(
    units: Sequence[DecidedUnit], upstream_victims: Sequence[str]
) -> tuple[UnitCompared, ...]:
    """Each of our decision's units beside the scheduler's victims."""
    taken = set(upstream_victims)
    compared = []
    for unit in units:
        took = sum(pod in taken for pod in unit.pods)
        result = (
            UnitResult.BOTH
            if took == len(unit.pods)
            else UnitResult.OURS_ONLY
            if took == 0
            else UnitResult.SPLIT
        )
        compared.append(UnitCompared(unit.unit, unit.pods, result, took))
    return tuple(compared)


@dataclass(frozen=True, slots=True)
class Comparison:
    preemptor: str  # ns/name, or the UID when neither side knows the name
    preemptor_uid: str
    result: Result
    ours: OurDecision | None
    upstream: UpstreamSide | None
    only_ours: tuple[str, ...] = ()
    only_upstream: tuple[str, ...] = ()
    units: tuple[UnitCompared, ...] = ()  # a pod group's: our decision's units, judged

    @property
    def by_group(self) -> bool:
        """A pod group is the preemptor (either side says so)."""
        return (self.ours is not None and self.ours.by_group) or (
            self.upstream is not None and self.upstream.by_group
        )

    def to_json(self) -> dict[str, Any]:
        ours = self.ours
        upstream = self.upstream
        shown: dict[str, Any] = {
            "preemptor": self.preemptor,
            "preemptorUid": self.preemptor_uid,
            "preemptorType": "podgroup" if self.by_group else "pod",
            "result": str(self.result),
            "ours": None
            if ours is None
            else {
                "verdict": ours.verdict,
                "node": ours.node,
                "victims": list(ours.victims),
                "decidedAt": ours.occurred_at.isoformat(),
                "dryRun": ours.dry_run,
                "message": ours.message,
            },
            "upstream": None
            if upstream is None
            else {
                "node": upstream.nodes[-1] if upstream.nodes else None,
                "nodes": list(upstream.nodes),
                "victims": list(upstream.victims),
                "firstEventAt": upstream.first_at.isoformat(),
            },
            "onlyOurs": list(self.only_ours),
            "onlyUpstream": list(self.only_upstream),
        }
        if self.by_group:
            shown["units"] = [unit.to_json() for unit in self.units]
        return shown


@dataclass
class Totals:
    counts: dict[Result, int] = field(default_factory=lambda: dict.fromkeys(Result, 0))
    upstream_events: int = 0  # kube-scheduler's Preempted Events recorded in the window
    acted: int = 0  # compared Preempt decisions we carried out (not dry runs)

    @property
    def compared(self) -> int:
        return sum(n for result, n in self.counts.items() if result is not Result.AFTER_UPSTREAM)

    @property
    def agreement(self) -> float | None:
        """None when there is nothing to measure: no preemptor compared, or nothing recorded
        from kube-scheduler (then every one of ours would read as a disagreement)."""
        if not self.compared or not self.upstream_events:
            return None
        return self.counts[Result.AGREE] / self.compared

    def to_json(self) -> dict[str, Any]:
        return {
            **{str(result): n for result, n in self.counts.items()},
            "compared": self.compared,
            "agreement": self.agreement,
            "upstreamEvents": self.upstream_events,
            "acted": self.acted,
        }


def upstream_sides(rows: Sequence[RecordedUpstream]) -> dict[str, UpstreamSide]:
    """The scheduler's preemptions grouped by preemptor UID (by "ns/name" for the older
    Event form whose UID the worker could not resolve)."""
    grouped: dict[str, list[RecordedUpstream]] = {}
    for row in rows:
        grouped.setdefault(row.preemptor_uid or row.preemptor_key or "?", []).append(row)
    sides = {}
    for key, group in grouped.items():
        group.sort(key=lambda r: (r.occurred_at, r.id))
        nodes = tuple(dict.fromkeys(r.node for r in group if r.node))
        sides[key] = UpstreamSide(
            preemptor_uid=group[0].preemptor_uid,
            preemptor=next((r.preemptor_key for r in group if r.preemptor_key), None),
            nodes=nodes,
            victims=tuple(dict.fromkeys(r.victim_key for r in group)),
            first_at=group[0].occurred_at,
            by_group=any(preempted_by_group(r.message) for r in group),
        )
    return sides


def comparable_decision(decisions: Sequence[OurDecision]) -> OurDecision:
    """Our latest `Preempt` decision, else our latest decision (`decisions` oldest first)."""
    preempting = [d for d in decisions if d.verdict == PREEMPT]
    return (preempting or list(decisions))[-1]


def judge(ours: Sequence[OurDecision], upstream: UpstreamSide | None) -> Comparison | None:
    """One preemptor's result; None when neither side preempted."""
    decision = comparable_decision(ours) if ours else None
    name = (
        decision.preemptor_key
        if decision is not None
        else (upstream.preemptor if upstream is not None else None)
    )
    uid = (
        decision.preemptor_uid
        if decision is not None
        else upstream.preemptor_uid
        if upstream
        else ""
    )
    we_preempted = decision is not None and decision.verdict == PREEMPT

    def result(kind: Result, **more: Any) -> Comparison:
        return Comparison(name or uid or "?", uid, kind, decision, upstream, **more)

    if upstream is None:
        if not (we_preempted and decision):
            return None
        units = compare_units(decision.units, ()) if decision.by_group else ()
        return result(Result.OURS_ONLY, only_ours=decision.victims, units=units)
    if not we_preempted:
        after = ours and all(d.occurred_at >= upstream.first_at for d in ours)
        return result(
            Result.AFTER_UPSTREAM if after else Result.UPSTREAM_ONLY,
            only_upstream=upstream.victims,
        )
    assert decision is not None
    units = compare_units(decision.units, upstream.victims) if decision.by_group else ()
    # A pod group is placed over the whole cluster, by both: only its victims compare.
    if not (decision.by_group and upstream.by_group) and decision.node not in upstream.nodes:
        return result(
            Result.OTHER_NODE,
            only_ours=decision.victims,
            only_upstream=upstream.victims,
            units=units,
        )
    ours_set, theirs = set(decision.victims), set(upstream.victims)
    if ours_set == theirs:
        return result(Result.AGREE, units=units)
    return result(
        Result.OTHER_VICTIMS,
        only_ours=tuple(v for v in decision.victims if v not in theirs),
        only_upstream=tuple(v for v in upstream.victims if v not in ours_set),
        units=units,
    )


def compare(
    decisions: Sequence[OurDecision], rows: Sequence[RecordedUpstream]
) -> tuple[list[Comparison], Totals]:
    """Every preemptor either side preempted for, with its result, and the totals."""
    sides = upstream_sides(rows)
    ours: dict[str, list[OurDecision]] = {}
    for decision in decisions:
        ours.setdefault(decision.preemptor_uid, []).append(decision)
    by_name = {d.preemptor_key: uid for uid, group in ours.items() for d in group}
    joined: dict[str, UpstreamSide] = {}
    for key, side in sides.items():
        uid = side.preemptor_uid or by_name.get(key, key)
        joined[uid] = side
    comparisons = []
    for uid in sorted({*ours, *joined}):
        compared = judge(ours.get(uid, []), joined.get(uid))
        if compared is not None:
            comparisons.append(compared)
    order = list(Result)
    comparisons.sort(key=lambda c: (not c.result.disagreement, order.index(c.result), c.preemptor))
    totals = Totals(upstream_events=len(rows))
    for compared in comparisons:
        totals.counts[compared.result] += 1
        totals.acted += carried_out(compared.ours)
    return comparisons, totals


def carried_out(decision: OurDecision | None) -> bool:
    """A `Preempt` decision of a run that acted: not shadow mode's."""
    return decision is not None and decision.verdict == PREEMPT and not decision.dry_run


# -- the command ------------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="shadow mode: our decisions beside kube-scheduler's preemptions",
        description="Per preemptor, this controller's decisions (in shadow mode, --dry-run) "
        "beside what kube-scheduler preempted (its Preempted Events, recorded by the worker "
        "in shadow mode): same node, same victims, preempted by one and not the other, with "
        "the pods named; totals and the agreement ratio. Exit 0 whatever the agreement.",
    )
    parser.add_argument(
        "--since",
        metavar="WHEN",
        default="24h",
        help="a duration (30m, 2h, 1d12h) or an ISO 8601 time (default 24h)",
    )
    parser.add_argument(
        "--database-url",
        metavar="URL",
        help=READ_DATABASE_HELP,
    )
    add_output_flag(parser, ("table", "json"), "table")
    parser.set_defaults(handler=run_compare)


def run_compare(args: argparse.Namespace) -> int:
    since = parse_since(args.since, datetime.now(UTC))
    with open_ledger(args) as engine:
        comparisons, totals = compare(decisions_since(engine, since), upstream_since(engine, since))
    if args.output == "json":
        document = {
            "since": since.isoformat(),
            "preemptors": [c.to_json() for c in comparisons],
            "totals": totals.to_json(),
            "notices": notices(totals, since),
        }
        text = orjson.dumps(document, option=orjson.OPT_INDENT_2).decode()
        sys.stdout.write(printable_json(text) + "\n")
    else:
        sys.stdout.write(render_table(comparisons, totals, since))
    return 0


SHADOW_MODE_HINT = (
    "compare needs the worker in shadow mode (PREEMPT_DRY_RUN=true, or preemptctl worker "
    "--dry-run) while kube-scheduler still preempts: it then records kube-scheduler's "
    "Preempted Events beside its own dry-run decisions. On one machine: preemptctl dev "
    '--shadow. See docs/adopting.md, "Compare, in shadow mode".'
)


def notices(totals: Totals, since: datetime) -> list[str]:
    """What the numbers cannot say by themselves: that nothing came from kube-scheduler
    (and how to record it), that some of our decisions were carried out, not dry runs."""
    found = []
    if not totals.upstream_events:
        found.append(
            f"Nothing was recorded from kube-scheduler since {since.isoformat(timespec='seconds')}."
        )
        found.append(SHADOW_MODE_HINT)
    if totals.acted:
        found.append(
            f"Carried out, not dry runs: {totals.acted} of our compared Preempt decisions (the "
            "worker was not in shadow mode), so kube-scheduler had nothing left to preempt for "
            "them."
        )
    return found


def _names(pods: Sequence[str]) -> str:
    return ", ".join(pods) if pods else "-"


GROUP_WHERE = "pod group, over the cluster"  # where a group is placed: no one node


def _describe(compared: Comparison) -> list[str]:
    """The lines under one preemptor: what each side did, the pods named; for a pod group,
    our units and what the scheduler did with each."""
    ours, upstream = compared.ours, compared.upstream
    lines = []
    if compared.result is Result.AGREE and ours is not None:
        where = GROUP_WHERE if ours.by_group else f"node {ours.node}"
        lines.append(f"both: {where}, victims {_names(ours.victims)}")
    else:
        if ours is None:
            lines.append("ours:     no decision recorded")
        elif ours.verdict == PREEMPT:
            where = GROUP_WHERE if ours.by_group else f"node {ours.node}"
            lines.append(f"ours:     {where}, victims {_names(ours.victims)}")
        else:
            lines.append(f"ours:     {ours.verdict}: {ours.message}"[:200])
        if upstream is None:
            lines.append("upstream: no Preempted event")
        else:
            where = GROUP_WHERE if upstream.by_group else f"node {_names(upstream.nodes)}"
            lines.append(f"upstream: {where}, victims {_names(upstream.victims)}")
        if compared.result is Result.OTHER_VICTIMS:
            lines.append(f"only ours: {_names(compared.only_ours)}")
            lines.append(f"only upstream: {_names(compared.only_upstream)}")
    if compared.units:
        lines.append("units: " + ", ".join(unit.describe() for unit in compared.units))
    return lines


def render_table(comparisons: Sequence[Comparison], totals: Totals, since: datetime) -> str:
    """The table, every line through `printable`: names, nodes and messages come from the
    cluster."""
    out = [f"Since {since.isoformat(timespec='seconds')}:"]
    if not comparisons:
        out.append("no preemption by either side")
    width = max([len("PREEMPTOR"), *(len(c.preemptor) for c in comparisons)])
    if comparisons:
        out.append(f"{'PREEMPTOR':<{width}}  RESULT          DETAIL")
    for compared in comparisons:
        lines = _describe(compared)
        out.append(f"{compared.preemptor:<{width}}  {compared.result!s:<14}  {lines[0]}")
        out.extend(f"{'':<{width}}  {'':<14}  {line}" for line in lines[1:])
    counts = totals.counts
    parts = [f"{counts[result]} {result}" for result in Result if counts[result]]
    out.append("")
    out.append(f"Preemptors: {len(comparisons)} ({', '.join(parts) or 'none'}).")
    if not totals.upstream_events:
        out.append("Agreement: not measured (nothing from kube-scheduler to compare with).")
    elif totals.agreement is None:
        out.append("Agreement: nothing to compare.")
    else:
        out.append(
            f"Agreement: {counts[Result.AGREE]}/{totals.compared} "
            f"({totals.agreement:.0%}) of the preemptors compared"
            + (
                f"; {counts[Result.AFTER_UPSTREAM]} decided after upstream acted, not compared."
                if counts[Result.AFTER_UPSTREAM]
                else "."
            )
        )
    for notice in notices(totals, since):
        out.extend(textwrap.wrap(notice, width=NOTICE_WIDTH, break_on_hyphens=False))
    return "\n".join(printable(line) for line in out) + "\n"

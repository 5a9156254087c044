"""The rationale put into words: why this node, why these victims, what became of them.

Pure text from views, so `preemptctl explain`, a future UI and the tests read the same
sentences. The criterion names are the planner's (upstream `pickOneNodeForPreemption`'s),
kept verbatim because they are what people search the upstream code and docs for.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from preemptctl.ledger.views import Fate, Outcome, PreemptionView, VictimView
from preemptctl.preemption.decision import PodRef

CRITERION_MEANING = {
    "minNumPDBViolations": "fewest PodDisruptionBudget violations",
    "minHighestPriority": "least important most-important victim",
    "minSumPriorities": "smallest sum of victim priorities",
    "minNumPods": "fewest victims",
    "latestStartTime": "most important victims started latest",
    "nodeName": "node name, the final tie-break",
}


def format_time(moment: datetime | None) -> str:
    """UTC, to the second, with `Z`: what a person compares across clusters and logs."""
    if moment is None:
        return "-"
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


def format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{rest:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def pod_label(pod: PodRef) -> str:
    return f"{pod.key} (priority {pod.priority})"


def _rationale(decision: dict[str, Any] | None) -> dict[str, Any]:
    rationale = (decision or {}).get("rationale")
    return rationale if isinstance(rationale, dict) else {}


def why_node(decision: dict[str, Any] | None, preemptor: PodRef) -> str | None:
    """One sentence: why the decision's node, from the dry run and the selection steps."""
    node = (decision or {}).get("nominatedNode")
    if not node:
        return None
    rationale = _rationale(decision)
    if rationale.get("strategy") == "critical-admission":
        return (
            f"{node} is where {preemptor.key} is bound; the kubelet's critical-pod admission "
            "only ever preempts on the pod's own node"
        )
    evaluated = rationale.get("evaluated", [])
    candidates = sorted(v["node"] for v in evaluated if v.get("result") == "candidate")
    rejected = [v for v in evaluated if v.get("result") == "rejected"]
    deciding = rationale.get("decidingCriterion", "")
    if deciding == "onlyCandidate" or len(candidates) <= 1:
        total = rationale.get("nodesTotal")
        sentence = f"{node} was the only candidate node"
        if total is not None:
            sentence += f" of {total} node(s) in the cluster"
    else:
        meaning = CRITERION_MEANING.get(deciding)
        criterion = f"{deciding} ({meaning})" if meaning else deciding
        sentence = (
            f"{node} was chosen by {criterion} among {len(candidates)} candidate nodes "
            f"({', '.join(candidates)})"
        )
        steps = [
            f"{step['criterion']} kept {', '.join(step['kept'])}"
            for step in rationale.get("selection", [])
        ]
        if steps:
            sentence += ": " + "; ".join(steps)
    if rejected:
        shown = ", ".join(f"{v['node']} ({'; '.join(v.get('reasons', []))})" for v in rejected)
        sentence += f". Rejected by the dry run: {shown}"
    return sentence


def why_victim(
    decision: dict[str, Any] | None, victim: PodRef, preemptor: PodRef, node: str | None
) -> str:
    """One sentence: why this pod had to go for the preemptor to fit."""
    rationale = _rationale(decision)
    where = node or "its node"
    victims = [v.get("uid") for v in (decision or {}).get("victims", [])]
    rank = ""
    if victim.uid in victims:
        rank = f" (victim {victims.index(victim.uid) + 1} of {len(victims)}, most important first)"
    if rationale.get("strategy") == "critical-admission":
        return (
            f"{pod_label(victim)} was a victim{rank} because {pod_label(preemptor)} is a critical "
            f"pod that failed admission on {where}; the kubelet evicts the smallest set of "
            "lower-priority pods, lowest QoS class first, that frees what it needs"
        )
    sentence = (
        f"{pod_label(victim)} was a victim{rank} because it has lower priority than "
        f"{pod_label(preemptor)}, which does not fit on {where} while it runs: the dry run "
        f"removed every lower-priority pod there, then reprieved as many as still let "
        f"{preemptor.key} fit, most important first, and {victim.key} could not be reprieved"
    )
    violations = (decision or {}).get("numPDBViolations") or 0
    if violations:
        sentence += (
            f"; the chosen victims violate {violations} PodDisruptionBudget(s) "
            "(no node with fewer violations could host the preemptor)"
        )
    return sentence


def fate_phrase(view: PreemptionView, victim: VictimView) -> str:
    """What became of the victim, with when, relative to the decision."""
    after = ""
    if victim.settled_at is not None and view.decided_at is not None:
        delay = (victim.settled_at - view.decided_at).total_seconds()
        after = f" ({format_seconds(delay)} after the decision)"
    at = format_time(victim.settled_at)
    if victim.fate is Fate.DELETED and victim.answer_lost:
        return (
            f"deleted at {at}{after}; the API server's answer was lost (worker killed or "
            "connection dropped), and the retry found it gone"
        )
    if victim.fate is Fate.DELETED:
        return f"deleted at {at}{after}"
    if victim.fate is Fate.ALREADY_GONE:
        return f"already gone at {at}{after}: something else removed it first"
    if victim.fate is Fate.REPLACED:
        newer = f" (uid {victim.replaced_by_uid})" if victim.replaced_by_uid else ""
        return f"replaced by a new pod of the same name{newer}, which was left alone{after}"
    removed = "; its DisruptionTarget condition was removed" if victim.unmarked else ""
    if victim.fate is Fate.FAILED:
        return f"could not be preempted at {at}: {victim.error or 'no error recorded'}{removed}"
    if victim.fate is Fate.MARKED:
        return "marked with a DisruptionTarget condition, not deleted yet"
    if victim.fate is Fate.SPARED:
        if victim.unmarked:
            return (
                f"spared: the preemption ended ({outcome_phrase(view)}) before deleting it; "
                "its DisruptionTarget condition was removed"
            )
        return f"spared: the preemption ended ({outcome_phrase(view)}) before touching it"
    return "chosen, not touched yet"


def outcome_phrase(view: PreemptionView) -> str:
    if view.outcome is None:
        return f"in progress ({view.status})"
    if view.outcome is Outcome.FAILED:
        return f"failed: {view.error or 'no error recorded'}"
    if view.outcome is Outcome.ABORTED:
        return f"aborted: {view.abort_reason or 'no reason recorded'}"
    if view.outcome is Outcome.DRY_RUN:
        return "dry run: decided and recorded, nothing touched"
    return str(view.outcome)


def scheduling_phrase(view: PreemptionView) -> str:
    if view.scheduled_at is None:
        return f"{view.preemptor.key} was not scheduled, as far as the ledger knows"
    return (
        f"{view.preemptor.key} was scheduled on {view.scheduled_node or '?'} at "
        f"{format_time(view.scheduled_at)}, {format_seconds(view.seconds_to_schedule)} "
        "after the decision"
    )


def _header(view: PreemptionView) -> str:
    runs = f"run {view.run_id}" if len(view.runs) == 1 else f"runs {', '.join(view.runs)}"
    return f"preemption {view.preemption_id} ({runs})"


def preemptor_story(view: PreemptionView) -> list[str]:
    """A preemption told from the preemptor's side: decision, victims, scheduling, outcome."""
    decision = view.decision or {}
    took = view.victims and view.duration_seconds is not None
    lines = [
        f"{format_time(view.started)}  {_header(view)}: {outcome_phrase(view)}"
        + (f", took {format_seconds(view.duration_seconds)}" if took else "")
    ]
    if decision:
        lines.append(
            f"  decision at {format_time(view.decided_at)}: {decision.get('status')}, "
            f"{decision.get('message', '')}".rstrip(", ")
        )
    reason = why_node(view.decision, view.preemptor)
    if reason:
        lines.append(f"  why {view.node}: {reason}")
    for victim in view.victims:
        lines.append(f"  victim {pod_label(victim.victim)}: {fate_phrase(view, victim)}")
    cleared = decision.get("nominatedPodsToClear") or []
    if cleared:
        lines.append(f"  nominations cleared: {', '.join(cleared)}")
    if decision.get("status") == "Preempt" or view.scheduled_at is not None:
        lines.append(f"  {scheduling_phrase(view)}")
    return lines


def victim_story(view: PreemptionView, victim: VictimView) -> list[str]:
    """A preemption told from one victim's side: by whom, where, why, and its fate."""
    when = format_time(view.decided_at or view.started)
    lines = [
        f"{when}  preempted by {pod_label(view.preemptor)} on {victim.node or '?'} "
        f"in {_header(view)}",
        "  why: " + why_victim(view.decision, victim.victim, view.preemptor, victim.node),
    ]
    reason = why_node(view.decision, view.preemptor)
    if reason:
        lines.append(f"  why {victim.node}: {reason}")
    lines.append(f"  fate: {fate_phrase(view, victim)}")
    lines.append(f"  preemption outcome: {outcome_phrase(view)}; {scheduling_phrase(view)}")
    return lines

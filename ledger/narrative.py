"""The rationale put into words: why this node, why these victims, what became of them.

A preemption is told attempt by attempt, in order, the failed ones too, each with what
changed since the one before; a victim's entry is headed by its fate. Pure text from
views, so `preemptctl explain`, a future UI and the tests read the same sentences. The
criterion names are the planner's (upstream `pickOneNodeForPreemption`'s), kept
verbatim because they are what people search the upstream code and docs for.

A group preemption is told the same way, in the group's words: how many pods it places, its
minCount, how many victims in how many units on how many nodes, and on how many nodes its
members are placed, each count saying what it counts (`group_summary`, `node_counts`), each unit
with why it could not stay, each member with its node and nomination, each victim with the
unit it went with.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.payloads import Write
from preemptctl.ledger.views import AttemptView, Link, PreemptionView, VictimView
from preemptctl.ledger.vocabulary import Fate, Outcome
from preemptctl.preemption.decision import PodRef
from preemptctl.preemption.upstream import UpstreamPreemption

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


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _unit_phrase(unit: dict[str, Any]) -> str:
    """A victim unit in a few words: `podGroup ml/train-b (3 pods, taken whole, on node-1,
    node-2)`, `pod default/web-1 (on node-2)`."""
    pods = unit.get("pods") or []
    nodes = ", ".join(str(n) for n in unit.get("nodes") or ()) or "?"
    if unit.get("whole"):
        return f"{unit.get('unit')} ({_plural(len(pods), 'pod')}, taken whole, on {nodes})"
    return f"{unit.get('unit')} (on {nodes})"


def node_counts(attempt: AttemptView) -> str:
    """A group preemption's nodes, each count saying what it counts: "victims on 4 nodes,
    members placed on 4" (never the two together, which counts neither)."""
    placed = len(attempt.member_nodes)
    if not attempt.victims:
        return f"no victims, members placed on {_plural(placed, 'node')}"
    return f"victims on {_plural(len(attempt.victim_nodes), 'node')}, members placed on {placed}"


def group_summary(decision: dict[str, Any] | None) -> str | None:
    """One sentence for a group decision: "for ml/train-a, 16 pods, minCount 16: 12 victims
    in 3 units on 4 nodes, members placed on 4: ..." (None for a pod's decision, or none)."""
    if not decision or "podGroup" not in decision:
        return None
    rationale = _rationale(decision)
    given = rationale.get("group")
    policy: dict[str, Any] = given if isinstance(given, dict) else {}
    placed = decision.get("nominations") or {}
    units = [u for u in rationale.get("units") or () if isinstance(u, dict)]
    victim_nodes = {str(n) for unit in units for n in unit.get("nodes") or ()}
    placed_on = set(map(str, placed.values()))
    pods = len(placed) or int(policy.get("pending") or 0)
    sentence = (
        f"for {decision['podGroup']}, {_plural(pods, 'pod')}, minCount "
        f"{policy.get('minCount', '?')}"
    )
    victims = decision.get("victims") or []
    if victims or units:
        sentence += f": {_plural(len(victims), 'victim')} in {_plural(len(units), 'unit')}"
        if victim_nodes:
            sentence += f" on {_plural(len(victim_nodes), 'node')}"
        if placed_on:
            sentence += f", members placed on {len(placed_on)}"
        if units:
            sentence += ": " + ", ".join(_unit_phrase(unit) for unit in units)
    elif placed_on:
        sentence += f": members placed on {_plural(len(placed_on), 'node')}"
    return sentence


def unit_lines(decision: dict[str, Any] | None) -> list[str]:
    """Each victim unit of a group decision: what it is, its priority, why it could not
    stay (the planner's reason), its PodDisruptionBudget violations."""
    lines = []
    for unit in _rationale(decision).get("units") or ():
        if not isinstance(unit, dict):
            continue
        whole = ", taken whole" if unit.get("whole") else ""
        violations = int(unit.get("pdbViolations") or 0)
        budget = f"; {violations} PodDisruptionBudget violation(s)" if violations else ""
        lines.append(
            f"unit {unit.get('unit')}{whole} (priority {unit.get('priority')}): "
            f"{unit.get('reason') or 'no reason recorded'}{budget}"
        )
    return lines


NOMINATION_WRITTEN = {
    "Done": "nominated",
    "Unchanged": "nominated (it already was, by an earlier write)",
    "KeptOtherNomination": "not nominated: another component's nomination was kept",
    "AlreadyGone": "not nominated: it was gone",
    "Replaced": "not nominated: a new pod had its name",
    "Terminating": "not nominated: it was terminating",
}
"""A member's nomination as the API server settled it (`kube.results.WriteEffect`), in words."""


def member_lines(attempt: AttemptView) -> list[str]:
    """Each member a group decision placed: its node, and its nomination as written."""
    lines = []
    for member in attempt.members:
        if member.error is not None:
            done = f"its nomination failed: {member.error}"
        elif member.effect is not None:
            done = NOMINATION_WRITTEN.get(member.effect, f"nomination written ({member.effect})")
        else:
            done = "not nominated yet"
        lines.append(f"placed {member.pod} on {member.node}: {done}")
    return lines


def why_victim(
    decision: dict[str, Any] | None, victim: PodRef, preemptor: PodRef, node: str | None
) -> str:
    """One sentence: why this pod had to go for the preemptor to fit."""
    rationale = _rationale(decision)
    if decision and "podGroup" in decision:
        return _why_group_victim(decision, victim, preemptor, node)
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


def _why_group_victim(
    decision: dict[str, Any], victim: PodRef, group: PodRef, node: str | None
) -> str:
    victims = [v.get("uid") for v in decision.get("victims", [])]
    rank = ""
    if victim.uid in victims:
        rank = f" (victim {victims.index(victim.uid) + 1} of {len(victims)}, most important first)"
    unit = next(
        (
            u
            for u in _rationale(decision).get("units") or ()
            if isinstance(u, dict) and victim.key in (u.get("pods") or ())
        ),
        None,
    )
    sentence = (
        f"{pod_label(victim)} on {node or '?'} was a victim{rank} because it has lower priority "
        f"than the pod group {pod_label(group)}: the planner removed every lower-priority unit, "
        "placed the group once, then reprieved the units that still let every placed member "
        "fit, most important first"
    )
    if unit is None:
        return sentence
    sentence += f", and {unit.get('unit')} could not be reprieved: {unit.get('reason')}"
    if unit.get("whole") and len(unit.get("pods") or ()) > 1:
        others = [p for p in unit.get("pods") or () if p != victim.key]
        sentence += f"; it went with {', '.join(others)}, its unit taken whole"
    return sentence


Upstream = Mapping[str, UpstreamPreemption]
"""kube-scheduler's own preemption of a victim, by victim UID, as shadow mode recorded it."""


def upstream_phrase(victim: VictimView, upstream: Upstream | None) -> str:
    """What kube-scheduler did to a victim a dry run chose, from its `Preempted` Event; or
    that none was recorded."""
    seen = (upstream or {}).get(victim.victim.uid)
    if seen is None:
        return "no kube-scheduler preemption of it recorded"
    return (
        f"kube-scheduler preempted it at {format_time(seen.occurred_at)} (its Event: "
        f"{seen.message})"
    )


def fate_phrase(attempt: AttemptView, victim: VictimView, upstream: Upstream | None = None) -> str:
    """What became of the victim in this attempt, with when, relative to its decision; for
    a dry run's, what kube-scheduler did to it (shadow mode records its Events)."""
    if attempt.outcome is Outcome.DRY_RUN and victim.fate is Fate.SPARED:
        return f"would have been a victim (dry run); {upstream_phrase(victim, upstream)}"
    after = ""
    if victim.settled_at is not None and attempt.decided_at is not None:
        delay = (victim.settled_at - attempt.decided_at).total_seconds()
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
        return f"failed at {at}: {victim.error or 'no error recorded'}{removed}"
    if victim.fate is Fate.MARKED:
        return "marked with a DisruptionTarget condition, not deleted yet"
    if victim.fate is Fate.SPARED:
        ended = attempt.outcome or attempt.status
        if victim.unmarked:
            return (
                f"spared: the attempt ended ({ended}) before deleting it; "
                "its DisruptionTarget condition was removed"
            )
        return f"spared: the attempt ended ({ended}) before touching it"
    return "chosen, not touched yet"


def outcome_phrase(attempt: AttemptView) -> str:
    """How an attempt ended (or where it stands), with its cause and whether retrying helps;
    and, when its preemptor was bound after it ended, that nothing is left to retry."""
    phrase = _ended_phrase(attempt)
    if attempt.bound_after_end:
        phrase += (
            f"; {attempt.preemptor.key} was bound to {attempt.scheduled_node or '?'} after it "
            f"ended, at {format_time(attempt.scheduled_at)}: nothing left to retry"
        )
    return phrase


def _ended_phrase(attempt: AttemptView) -> str:
    if attempt.outcome is None:
        return f"in progress ({attempt.status})"
    if attempt.outcome is Outcome.FAILED:
        phrase = f"failed: {attempt.error or 'no error recorded'}"
        if attempt.retryable is False:
            phrase += " (not retryable: the cause must be fixed first)"
        return phrase
    if attempt.outcome is Outcome.ABORTED:
        return f"aborted: {attempt.abort_reason or 'no reason recorded'}"
    if attempt.outcome is Outcome.DRY_RUN:
        return "dry run: decided and recorded, nothing touched"
    if attempt.outcome is Outcome.UNSUPPORTED:
        return f"unsupported: {attempt.cause} (not retryable)"
    return str(attempt.outcome)


def preemption_phrase(view: PreemptionView) -> str:
    """The preemption as a whole: its latest attempt's outcome, and how many there were
    (and when its preemptor was bound after that attempt ended, where)."""
    count = len(view.attempts)
    tried = f"{count} attempt" + ("" if count == 1 else "s")
    if view.outcome is None:
        return f"in progress ({view.status}), {tried}"
    latest = view.latest
    if latest.bound_after_end:
        return f"{view.outcome} after {tried}, then bound to {latest.scheduled_node or '?'}"
    return f"{view.outcome} after {tried}"


def scheduling_phrase(attempt: AttemptView) -> str:
    if attempt.outcome is Outcome.DRY_RUN and attempt.scheduled_at is None:
        whom = attempt.pod_group or attempt.preemptor.key
        return f"{whom}'s placement is kube-scheduler's in shadow mode, not recorded here"
    if attempt.bound_after_end:
        return (
            f"{attempt.preemptor.key} was bound to {attempt.scheduled_node or '?'} at "
            f"{format_time(attempt.scheduled_at)}, after this attempt ended (placed by the "
            "scheduler, not by this preemption)"
        )
    if attempt.pod_group is not None:
        if attempt.scheduled_at is None:
            return (
                f"the pod group {attempt.pod_group} was not scheduled (minCount members bound), "
                "as far as the ledger knows"
            )
        bound = (
            "minCount members"
            if attempt.members_bound is None
            else (_plural(attempt.members_bound, "member"))
        )
        return (
            f"the pod group {attempt.pod_group} was scheduled ({bound} bound) at "
            f"{format_time(attempt.scheduled_at)}, {format_seconds(attempt.seconds_to_schedule)} "
            "after the decision"
        )
    if attempt.scheduled_at is None:
        return f"{attempt.preemptor.key} was not scheduled, as far as the ledger knows"
    return (
        f"{attempt.preemptor.key} was scheduled on {attempt.scheduled_node or '?'} at "
        f"{format_time(attempt.scheduled_at)}, {format_seconds(attempt.seconds_to_schedule)} "
        "after the decision"
    )


def how_started(attempt: AttemptView) -> str | None:
    """Who started a later attempt, why, and after which run (None for the first)."""
    if attempt.attempt == 1:
        return None
    after = attempt.previous_run_id or "?"
    if attempt.previous_outcome:
        after += f" ({attempt.previous_outcome})"
    if attempt.started_by is None:
        return f"started after run {after}; its `retried` event is not recorded (yet)"
    who = {"person": "a person (preemptctl retry)", "trigger": "the trigger"}.get(
        attempt.started_by, attempt.started_by
    )
    because = f": {attempt.retry_reason}" if attempt.retry_reason else ""
    return f"retried by {who} after run {after}{because}"


_DROPPED = {
    Fate.DELETED: "deleted by attempt {n}",
    Fate.ALREADY_GONE: "already gone in attempt {n}",
    Fate.REPLACED: "replaced in attempt {n}",
    Fate.FAILED: "failed in attempt {n}",
    Fate.SPARED: "spared by attempt {n}",
}


def what_changed(before: AttemptView, after: AttemptView) -> list[str]:
    """What differs between two attempts: verdict, node, victims, victims now gone, error."""
    changes: list[str] = []
    n = before.attempt
    verdict_before = (before.decision or {}).get("status")
    verdict_after = (after.decision or {}).get("status")
    if verdict_before and verdict_after and verdict_before != verdict_after:
        changes.append(f"decision {verdict_after} instead of {verdict_before}")
    if before.node != after.node:
        if before.node and after.node:
            changes.append(f"node {after.node} instead of {before.node}")
        elif after.node:
            changes.append(f"node {after.node} (attempt {n} had none)")
        elif after.decision is not None:
            changes.append(f"no node (attempt {n} had {before.node})")
    earlier = {v.victim.uid: v for v in before.victims}
    later = {v.victim.uid: v for v in after.victims}
    added = [v.victim.key for uid, v in later.items() if uid not in earlier]
    if added and after.decision is not None:
        changes.append("victims added: " + ", ".join(added))
    dropped = [
        f"{v.victim.key} ({_DROPPED.get(v.fate, 'chosen by attempt {n}').format(n=n)})"
        for uid, v in earlier.items()
        if uid not in later
    ]
    if dropped and after.decision is not None:
        changes.append("victims dropped: " + ", ".join(dropped))
    for uid, victim in later.items():
        was = earlier.get(uid)
        if was is None or was.fate is victim.fate:
            continue
        if victim.fate is Fate.ALREADY_GONE:
            changes.append(f"{victim.victim.key} was already gone this time")
        elif victim.fate is Fate.REPLACED:
            newer = f" by uid {victim.replaced_by_uid}" if victim.replaced_by_uid else ""
            changes.append(f"{victim.victim.key} had been replaced{newer}")
    if before.error and not after.error and after.outcome is not None:
        changes.append(f"attempt {n}'s error is gone")
    elif before.error and after.error and before.error != after.error:
        changes.append(f"a different error from attempt {n}'s")
    elif before.error and after.error:
        changes.append(f"the same error as attempt {n}")
    placed_before = (before.decision or {}).get("nominations")
    placed_after = (after.decision or {}).get("nominations")
    if placed_before is not None and placed_after is not None and placed_before != placed_after:
        moved = [
            f"{pod} on {node} instead of {placed_before[pod]}"
            for pod, node in sorted(placed_after.items())
            if pod in placed_before and placed_before[pod] != node
        ]
        added = [
            f"{pod} on {node}"
            for pod, node in sorted(placed_after.items())
            if pod not in placed_before
        ]
        changes.append("placement changed: " + ", ".join([*moved, *added] or ["fewer members"]))
    same = not any(c.startswith(("node ", "no node", "victims ", "placement ")) for c in changes)
    if same and after.decision is not None and before.decision is not None:
        what = "placement" if after.pod_group is not None else "node"
        changes.insert(0, f"the same {what} and victims")
    return changes


def _attempt_header(attempt: AttemptView) -> str:
    took = ""
    if attempt.duration_seconds is not None:
        took = f", took {format_seconds(attempt.duration_seconds)}"
    return (
        f"attempt {attempt.attempt} at {format_time(attempt.started)}, run {attempt.run_id}: "
        f"{outcome_phrase(attempt)}{took}"
    )


def attempt_story(
    attempt: AttemptView,
    before: AttemptView | None = None,
    link: Link | None = None,
    upstream: Upstream | None = None,
) -> list[str]:
    """One attempt from the preemptor's side: how it started, what changed since `before`,
    its decision, its victims' fates (a dry run's: what kube-scheduler did to them, from
    `upstream`), scheduling (lines without indentation)."""
    decision = attempt.decision or {}
    lines = [_attempt_header(attempt)]
    started = how_started(attempt)
    if started:
        lines.append(f"  {started}")
    if before is not None:
        lines.append(
            f"  changed since attempt {before.attempt}: " + "; ".join(what_changed(before, attempt))
        )
    if decision:
        lines.append(
            f"  decision at {format_time(attempt.decided_at)}: {decision.get('status')}, "
            f"{decision.get('message', '')}".rstrip(", ")
        )
    summary = group_summary(attempt.decision)
    if summary is not None:
        lines.append(f"  {summary}")
        lines.extend(f"  {line}" for line in unit_lines(attempt.decision))
        lines.extend(f"  {line}" for line in member_lines(attempt))
    reason = why_node(attempt.decision, attempt.preemptor)
    if reason and before is not None and reason == why_node(before.decision, before.preemptor):
        lines.append(f"  why {attempt.node}: as in attempt {before.attempt}")
    elif reason:
        lines.append(f"  why {attempt.node}: {reason}")
    for victim in attempt.victims:
        where = ""
        if victim.unit is not None:
            where = f" on {victim.node or '?'}"
            if not victim.unit.startswith("pod "):  # a unit of more than this pod
                where += f", with {victim.unit}"
        fate = fate_phrase(attempt, victim, upstream)
        lines.append(f"  victim {pod_label(victim.victim)}{where}: {fate}")
    lines.extend(f"  {line}" for line in nomination_lines(attempt, decision))
    if decision.get("status") == "Preempt" or attempt.scheduled_at is not None:
        lines.append(f"  {scheduling_phrase(attempt)}")
    if link is not None:
        lines.append(f"  see {link(attempt.preemption_id, attempt.run_id)}")
    return lines


def preemptor_story(
    view: PreemptionView, link: Link | None = None, upstream: Upstream | None = None
) -> list[str]:
    """A preemption told from the preemptor's side: every attempt in order, the failed ones
    too, each with what changed since the one before."""
    lines = [f"{format_time(view.started)}  {view.preemption_id}: {preemption_phrase(view)}"]
    before: AttemptView | None = None
    for attempt in view.attempts:
        lines.extend(f"  {line}" for line in attempt_story(attempt, before, link, upstream))
        before = attempt
    return lines


def victim_heading(
    attempt: AttemptView, victim: VictimView, upstream: Upstream | None = None
) -> str:
    """A victim's entry headed by its fate: what was done to it, for whom, where (a dry
    run's: what kube-scheduler did to it)."""
    whom = pod_label(attempt.preemptor)
    if attempt.pod_group is not None:
        whom = f"the pod group {whom}"
    by = f"the preemption for {whom} on {victim.node or '?'}"
    fate = victim.fate
    if attempt.outcome is Outcome.DRY_RUN and fate is Fate.SPARED:
        return f"would have been a victim (dry run) of {by}; {upstream_phrase(victim, upstream)}"
    if fate is Fate.DELETED:
        return f"deleted by {by}"
    if fate is Fate.SPARED:
        return f"spared: chosen by {by}, which ended before deleting it"
    if fate is Fate.FAILED:
        return f"failed: {by} could not delete it"
    if fate is Fate.ALREADY_GONE:
        return f"already gone: chosen by {by}, but something else removed it first"
    if fate is Fate.REPLACED:
        newer = f"uid {victim.replaced_by_uid}" if victim.replaced_by_uid else "a new pod"
        return f"replaced by {newer}: chosen by {by}, its name now belongs to another pod"
    if fate is Fate.MARKED:
        return f"marked for deletion by {by}, not deleted yet"
    return f"chosen by {by}, not touched yet"


def victim_story(
    view: PreemptionView,
    victim: VictimView,
    link: Link | None = None,
    upstream: Upstream | None = None,
) -> list[str]:
    """A victim's part in one attempt: its fate, by whom, where, why, and how it ended."""
    attempt = next((a for a in view.attempts if a.run_id == victim.run_id), view.latest)
    when = format_time(attempt.decided_at or attempt.started)
    lines = [
        f"{when}  {victim_heading(attempt, victim, upstream)}",
        f"  in attempt {attempt.attempt} of {len(view.attempts)} of {view.preemption_id} "
        f"(run {attempt.run_id})",
        "  why: " + why_victim(attempt.decision, victim.victim, attempt.preemptor, victim.node),
    ]
    reason = why_node(attempt.decision, attempt.preemptor)
    if reason:
        lines.append(f"  why {victim.node}: {reason}")
    summary = group_summary(attempt.decision)
    if summary is not None:
        lines.append(f"  the group's decision: {summary}")
    lines.append(f"  fate: {fate_phrase(attempt, victim, upstream)}")
    lines.append(f"  attempt outcome: {outcome_phrase(attempt)}; {scheduling_phrase(attempt)}")
    if attempt is not view.latest:
        lines.append(f"  the preemption: {preemption_phrase(view)}")
    if link is not None:
        lines.append(f"  see {link(view.preemption_id, attempt.run_id)}")
    return lines


def _unit_of(decision: dict[str, Any] | None, unit: str) -> dict[str, Any]:
    """The decision's rationale entry for the victim unit named `unit` ({} when missing)."""
    for entry in _rationale(decision).get("units") or ():
        if isinstance(entry, dict) and entry.get("unit") == unit:
            return entry
    return {}


def victim_unit_story(
    view: PreemptionView,
    attempt: AttemptView,
    unit: str,
    victims: tuple[VictimView, ...],
    link: Link | None = None,
    upstream: Upstream | None = None,
) -> list[str]:
    """A pod group's part in one attempt as a victim unit: what became of it, for whom,
    why it could not stay, each of its pods with its node and fate (a dry run's: what
    kube-scheduler did to it), how the attempt ended."""
    whom = pod_label(attempt.preemptor)
    if attempt.pod_group is not None:
        whom = f"the pod group {whom}"
    nodes = sorted({v.node for v in victims if v.node})
    pods = f"{_plural(len(victims), 'pod')} on {_plural(len(nodes), 'node')} ({', '.join(nodes)})"
    done = [v for v in victims if v.fate in (Fate.DELETED, Fate.ALREADY_GONE)]
    by = f"the preemption for {whom}"
    if attempt.outcome is Outcome.DRY_RUN:
        heading = f"would have been taken whole (dry run) by {by}: {unit}, {pods}"
    elif len(done) == len(victims):
        heading = f"taken whole by {by}: {unit}, {pods}"
    else:
        heading = (
            f"chosen whole by {by}: {unit}, {pods}; {len(done)} of {len(victims)} deleted when "
            f"the attempt ended ({attempt.outcome or attempt.status})"
        )
    when = format_time(attempt.decided_at or attempt.started)
    lines = [
        f"{when}  {heading}",
        f"  in attempt {attempt.attempt} of {len(view.attempts)} of {view.preemption_id} "
        f"(run {attempt.run_id})",
    ]
    chosen = _unit_of(attempt.decision, unit)
    if chosen:
        whole = ", taken whole" if chosen.get("whole") else ""
        lines.append(
            f"  why: {unit}{whole} (priority {chosen.get('priority')}) could not be reprieved: "
            f"{chosen.get('reason') or 'no reason recorded'}"
        )
    summary = group_summary(attempt.decision)
    if summary is not None:
        lines.append(f"  the group's decision: {summary}")
    for victim in victims:
        lines.append(
            f"  pod {pod_label(victim.victim)} on {victim.node or '?'}: "
            f"{fate_phrase(attempt, victim, upstream)}"
        )
    lines.append(f"  attempt outcome: {outcome_phrase(attempt)}; {scheduling_phrase(attempt)}")
    if attempt is not view.latest:
        lines.append(f"  the preemption: {preemption_phrase(view)}")
    if link is not None:
        lines.append(f"  see {link(view.preemption_id, attempt.run_id)}")
    return lines


def parked_cause(view: PreemptionView) -> str:
    """Why a parked preemption's latest attempt cannot be cured by retrying."""
    latest = view.latest
    return f"{latest.outcome}: {latest.cause}"


def nomination_lines(attempt: AttemptView, decision: dict[str, Any]) -> list[str]:
    """The nominations this attempt cleared, as the API server answered each write: a refused
    clear is told as refused, never as done. A decision's list with no recorded write (an
    attempt still running, or a ledger from before the writes were recorded) is told as
    the decision's intent."""
    writes = [
        Write.from_json(event.payload)
        for event in attempt.events
        if event.kind == EventKind.NOMINATION_CLEARED
    ]
    if not writes:
        planned = decision.get("nominatedPodsToClear") or []
        return [f"nominations to clear: {', '.join(planned)}"] if planned else []
    cleared = [w.pod or "?" for w in writes if w.error is None]
    lines = [f"nominations cleared: {', '.join(cleared)}"] if cleared else []
    lines.extend(
        f"could not clear the nomination of {w.pod or '?'}: {w.error}"
        for w in writes
        if w.error is not None
    )
    return lines

"""The group preemption workflow's activities: what a preemption for a pod group does that a
pod's does not.

As the pod preemption's activities (`activities.preemption`), each translates and
classifies and decides nothing: the decision path decides for the group
(`DecisionPath.decide_group`, under the same lock and claims as pod decisions), the domain
says whether the group still needs the room (`preemption.standing.reason_to_stop_group`).
The victims are marked and unmarked by the pod preemption's own activities; their deletes
(`delete_group_victim`) share its code (`activities.victim_steps`) and re-check the group
instead of a pod: the group gone or replaced, or its members bound to other nodes than
the ones the decision placed them on, leave the victim alone.

The ledger's preemptor columns name the group (`GroupRef.as_preemptor`). Events: on the
PodGroup (`Preempting`, `PreemptionUnsupported`, `PreemptionFailed`; none for a group a
label names, which has no object), on each placed member (`Preempting`: where it is placed
and why; `PreemptionFailed` when the run fails), on each victim (`Preempted`, in upstream's
workload-aware words) and on each victim PodGroup (`Preempted`, `activities.victim_groups`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import astuple
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from preemptctl.activities.contracts import (
    Nomination,
    PreemptVictimInput,
    RunRef,
    VictimInput,
    VictimResult,
    Written,
)
from preemptctl.activities.errors import decision_errors, kube_errors, ledger_errors
from preemptctl.activities.group_contracts import (
    GroupCheck,
    GroupEndInput,
    GroupSelection,
    GroupVictimInput,
    GroupVictimRound,
    MembersNominated,
    MembersNomination,
    SelectGroupInput,
    VictimPlacement,
)
from preemptctl.activities.heartbeat import beat_while_waiting
from preemptctl.activities.recording import Recorder, event, failure_note, when
from preemptctl.activities.resumed import resumed_group_selection
from preemptctl.activities.story import group_story
from preemptctl.activities.victim_groups import tell_victim_pod_groups, victim_pod_groups
from preemptctl.activities.victim_steps import VictimSteps, write_events, written
from preemptctl.activities.view_channel import ViewChannel
from preemptctl.deciding.path import DecidedGroup, DecisionPath, GroupDecisionRequest, Resumed
from preemptctl.kube import events, nomination
from preemptctl.kube.events import ObjectRef
from preemptctl.kube.pods import Presence, get_pod, get_pod_group
from preemptctl.kube.results import KubeCallError
from preemptctl.kube.view import ClusterView
from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.payloads import Scheduled, Terminal, VictimStep
from preemptctl.ledger.queries import recorded_attempt
from preemptctl.ledger.vocabulary import KIND_OF_OUTCOME, Outcome
from preemptctl.preemption.decision import PodRef, Verdict
from preemptctl.preemption.errors import PlannerInputError
from preemptctl.preemption.group_decision import GroupDecision, GroupRef
from preemptctl.preemption.objects import Pod
from preemptctl.preemption.standing import (
    GroupStanding,
    Standing,
    group_standing_of,
    reason_to_stop_group,
)

logger = logging.getLogger(__name__)


class GroupPreemptionActivities:
    """The group activities, on the pod activities' cluster, ledger and decision path."""

    def __init__(
        self,
        view: ClusterView,
        recorder: Recorder,
        victims: VictimSteps,
        decisions: DecisionPath,
        *,
        group_label: str = "",
        view_channel: ViewChannel | None = None,
    ) -> None:
        self._view = view
        self._channel = view_channel
        self._recorder = recorder
        self._kube = recorder.kube
        self._victims = victims
        self._decisions = decisions
        self._group_label = group_label

    def all(self) -> list[Callable[..., Any]]:
        """The group's own activities (mark and unmark are the pod preemption's)."""
        return [
            self.select_group_preemption,
            self.nominate_members,
            self.delete_group_victim,
            self.delete_group_victims,
            self.check_group,
            self.record_group_end,
        ]

    # -- deciding ---------------------------------------------------------------------------

    @activity.defn(name="select_group_preemption")
    def select_group_preemption(self, request: SelectGroupInput) -> GroupSelection:
        """The decision path for the group (`DecisionPath.decide_group`): the group fresh
        from the API server, then lock, claims, plan, budget, write ahead; then tell the
        group and its placed members what is decided for them. A run after the first
        appends `retried` first; a group that no longer needs room is reported (no
        verdict, the reason as the message) for the workflow to record the abort. In a
        workflow process, the main process decides (`view_channel`)."""
        if self._channel is not None:
            selection: GroupSelection = self._channel.call("select_group_preemption", request)
            return selection
        return self.select(request, beat=beat_while_waiting())

    def select(self, request: SelectGroupInput, beat: Callable[[], object]) -> GroupSelection:
        """The select's body, wherever it was asked (`beat`: while it waits its turn); a
        run that decided before is answered from its decision on record."""
        group, run = request.group, request.run
        dry_run = request.dry_run or self._recorder.dry_run
        decision_request = GroupDecisionRequest(
            run.preemption_id,
            run.run_id,
            when(run),
            group,
            dry_run,
            request.throttled,
            request.started_by,
            request.retry_reason,
        )
        with decision_errors(group.as_preemptor()):
            decided = self._decisions.decide_group(decision_request, beat=beat)
        if isinstance(decided, Resumed):
            with ledger_errors():
                attempt = recorded_attempt(self._recorder.ledger, *astuple(decided))
            resumed = resumed_group_selection(group, attempt)
            units = {victim.pod.uid: victim.unit for victim in resumed.victims}
            with self._view.read() as snapshot:
                victims = [victim.pod for victim in resumed.victims]
                resumed.victim_pod_groups = victim_pod_groups(snapshot, victims, units)
            return resumed
        if decided.decision is None:
            return GroupSelection(group, decided.stopped or decided.message)
        selection = self._selection(group, decided, decided.decision, dry_run=dry_run)
        if not decided.retry_after_seconds:
            self._tell_the_group_the_decision(run, selection)
        return selection

    def _selection(
        self, group: GroupRef, decided: DecidedGroup, decision: GroupDecision, *, dry_run: bool
    ) -> GroupSelection:
        """The decision as the workflow reads it: each placed member and each victim named
        by its UID and node, as the view shows them (the view the decision was made on)."""
        placements: list[Nomination] = []
        victims: list[VictimPlacement] = []
        groups: set[str] = set()
        with self._view.read() as snapshot:
            pod_groups = victim_pod_groups(snapshot, decision.victims)
            for key, node in sorted(decision.nominations.items()):
                member = snapshot.pod_by_key(key)
                if member is not None:
                    seen = member.nominated_node_name or None
                    placements.append(Nomination(PodRef.of(member), node, seen))
            for victim in decision.victims:
                unit = decision.unit_of(victim)
                pod = snapshot.pods.get(victim.uid)
                on = pod.node_name if pod is not None and pod.node_name else ""
                if not on and unit is not None and len(unit.nodes) == 1:
                    on = unit.nodes[0]  # gone from the view meanwhile: its unit says where
                victims.append(VictimPlacement(victim, on, unit.unit if unit else ""))
                if unit is not None and unit.whole:
                    groups.add(unit.unit.partition(" ")[2])
                if pod is not None and pod.group:
                    groups.add(f"{pod.namespace}/{pod.group}")
        summary = decision.rationale.get("group") or {}
        min_count = int(summary.get("minCount") or 1)
        return GroupSelection(
            group,
            decided.message,
            verdict=decision.verdict,
            placements=placements,
            victims=victims,
            victim_groups=sorted(groups),
            min_count=min_count,
            num_pdb_violations=decision.num_pdb_violations,
            retry_after_seconds=decided.retry_after_seconds,
            dry_run=dry_run,
            story=group_story(group, decision, placements, victims, min_count, dry_run=dry_run),
            terminating=list(decided.terminating),
            victim_pod_groups=pod_groups,
        )

    def _tell_the_group_the_decision(self, run: RunRef, selection: GroupSelection) -> None:
        """`Preempting` on the PodGroup and on each placed member for a decision to preempt
        that goes on now; `PreemptionUnsupported` on the PodGroup for a refusal."""
        group = selection.group
        if selection.verdict is Verdict.UNSUPPORTED:
            self._tell_the_group(group, "PreemptionUnsupported", selection.message, run=None)
            return
        if selection.verdict is not Verdict.PREEMPT or selection.dry_run:
            return
        nodes = sorted({v.node for v in selection.victims if v.node})
        told = selection.story.line() if selection.story else selection.message
        self._tell_the_group(group, "Preempting", told, run=run, normal=True)
        for placed in selection.placements:
            self._recorder.tell(
                ObjectRef.pod(placed.pod),
                "Preempting",
                f"placed on {placed.node} with its pod group {group.key}: "
                f"{len(selection.victims)} victim(s) on {len(nodes)} node(s)",
                key=("Preempting", run.run_id),
                normal=True,
                related=None if group.label_named else ObjectRef.pod_group(group),
            )

    def _tell_the_group(
        self, group: GroupRef, reason: str, note: str, *, run: RunRef | None, normal: bool = False
    ) -> None:
        """An event on the PodGroup (none for a group a label names: it has no object)."""
        if group.label_named:
            return
        self._recorder.tell(
            ObjectRef.pod_group(group),
            reason,
            note,
            key=(reason, run.run_id if run is not None else ""),
            normal=normal,
        )

    # -- the cluster ------------------------------------------------------------------------

    @activity.defn(name="nominate_members")
    def nominate_members(self, request: MembersNomination) -> MembersNominated:
        """Set each placed member's nominatedNodeName to its node (overwriting another's:
        the decision requires it), clear the lower-priority nominations to those nodes, and
        record each write, all in one append (or, with `record` off, return them for the
        run's end to record). A write refused for good is recorded and the preemption goes
        on, as upstream's does; one that may succeed later is retried (the writes are
        idempotent: a retry finds what the first attempt did unchanged)."""
        run, group = request.run, request.group
        preemptor = group.as_preemptor()
        self._recorder.refuse_if_dry("nominate the members of", preemptor)
        writes: list[Written] = []
        result = MembersNominated()
        for placed in request.placements:
            pod = placed.pod
            try:
                with kube_errors():
                    settled = nomination.nominate(
                        self._kube, pod, placed.node, overwrite=True, seen=placed.seen
                    )
                writes.append(written(EventKind.MEMBER_NOMINATED, pod, placed.node, settled))
                result.nominated += 1
            except ApplicationError as error:
                if not error.non_retryable:
                    raise
                writes.append(written(EventKind.MEMBER_NOMINATED, pod, placed.node, error.message))
                result.errors.append(f"{pod.key}: {error.message}")
        for nominated in request.clear:
            pod = nominated.pod
            try:
                with kube_errors():
                    cleared = nomination.clear_nomination(self._kube, pod, nominated.node)
                writes.append(written(EventKind.NOMINATION_CLEARED, pod, nominated.node, cleared))
            except ApplicationError as error:
                if not error.non_retryable:
                    raise
                refused = written(EventKind.NOMINATION_CLEARED, pod, nominated.node, error.message)
                writes.append(refused)
        if request.record:
            self._recorder.append(write_events(run, preemptor, writes))
        else:
            result.writes = writes
        return result

    @activity.defn(name="delete_group_victim")
    def delete_group_victim(self, request: GroupVictimInput) -> VictimResult:
        """Delete (or evict) exactly this victim, UID precondition included, if the group
        still needs the room (`reason_to_stop_group`: not gone, not replaced, no member
        bound to another node than its nomination); record what became of it, and the
        `Preempted` event on it. A victim left alone is reported (`stopped`): the workflow
        stops and records the abort."""
        group = request.group
        members = [placed.pod for placed in request.placements]
        nominations = {placed.pod.key: placed.node for placed in request.placements}
        return self._victims.delete(
            request.step,
            lambda: reason_to_stop_group(self._standing(group, members), group.key, nominations),
            lambda step: self._announce_preempted(step, group),
        )

    @activity.defn(name="delete_group_victims")
    def delete_group_victims(self, request: GroupVictimRound) -> list[VictimResult]:
        """`delete_group_victim` for every victim of a round in one step: the group
        re-checked once, the intents in one append before the first DELETE, the fates in
        one after."""
        group = request.group
        members = [placed.pod for placed in request.placements]
        nominations = {placed.pod.key: placed.node for placed in request.placements}
        return self._victims.delete_round(
            request.round.steps(),
            lambda: reason_to_stop_group(self._standing(group, members), group.key, nominations),
            lambda step: self._announce_preempted(step, group),
        )

    def preempt_victim(self, request: PreemptVictimInput) -> VictimResult:
        """A group's victim in one step (`PreemptionActivities.preempt_victim`): the room
        is still needed unless the group is gone, replaced, or has members bound to other
        nodes than the ones the decision placed them on."""
        group = request.group
        assert group is not None
        members = [placed.pod for placed in request.placements]
        nominations = {placed.pod.key: placed.node for placed in request.placements}
        if request.finishing:  # a unit begun is finished: the room is not asked about
            return self._victims.preempt(
                request.step, lambda: "", lambda step: self._announce_preempted(step, group)
            )
        return self._victims.preempt(
            request.step,
            lambda: reason_to_stop_group(self._standing(group, members), group.key, nominations),
            lambda step: self._announce_preempted(step, group),
        )

    def _announce_preempted(self, step: VictimInput, group: GroupRef) -> None:
        try:
            events.record_preempted_by_group(
                self._kube, step.victim, group, step.node, self._recorder.identity
            )
        except KubeCallError as error:
            logger.warning("could not record Preempted on %s: %s", step.victim.key, error)

    @activity.defn(name="check_group")
    def check_group(self, request: GroupCheck) -> GroupStanding:
        """Where the group stands now: which of its members are bound, and where."""
        return self.standing(request.group, request.members)

    def _standing(self, group: GroupRef, members: list[PodRef]) -> GroupStanding:
        """`standing`, from the main process's view when this is a workflow process."""
        if self._channel is not None:
            found: GroupStanding = self._channel.call("group_standing", (group, members))
            return found
        return self.standing(group, members)

    def standing(self, group: GroupRef, members: list[PodRef]) -> GroupStanding:
        """The group's standing from the cluster view: a PodGroup the view does not show (or
        shows with another UID) is asked of the API server before it counts as gone (the
        view may trail it). A worker without a view (a workflow process, running this as a
        local activity) asks the API server: the PodGroup, then each of `members`."""
        if not self._view.ready.is_set():
            return self._standing_from_the_api_server(group, members)
        with self._view.read() as snapshot:
            if group.label_named:
                label = self._group_label
                shown_members = snapshot.label_group_members(label, group.key) if label else []
                exists = Standing.PENDING if shown_members else Standing.GONE
            else:
                shown = snapshot.pod_group(group.key)
                shown_members = snapshot.group_members(group.key)
                exists = (
                    Standing.GONE
                    if shown is None
                    else Standing.PENDING
                    if shown.uid == group.uid
                    else Standing.REPLACED
                )
            found = list(shown_members)
        if exists is not Standing.PENDING and not group.label_named:
            with kube_errors():
                exists = get_pod_group(self._kube, group).standing
        return group_standing_of(exists, found)

    def _standing_from_the_api_server(
        self, group: GroupRef, members: list[PodRef]
    ) -> GroupStanding:
        found: list[Pod] = []
        with kube_errors():
            exists = Standing.PENDING
            if not group.label_named:
                exists = get_pod_group(self._kube, group).standing
            for member in members:
                lookup = get_pod(self._kube, member)
                if lookup.presence is Presence.FOUND:
                    try:
                        found.append(lookup.decoded())
                    except PlannerInputError:  # a member the planner cannot read: not bound
                        continue
        if group.label_named and not found:
            exists = Standing.GONE
        return group_standing_of(exists, found)

    # -- the ledger -------------------------------------------------------------------------

    @activity.defn(name="record_group_end")
    def record_group_end(self, request: GroupEndInput) -> int:
        """Append how the group run ended (completed, failed, aborted), with the group's
        scheduling (minCount members bound) and a victim failed for good, if any; tell the
        PodGroup and each placed member a failure's cause and what to do, and each victim
        PodGroup that lost pods by whom."""
        run, group = request.run, request.group
        preemptor = group.as_preemptor()
        batch = write_events(run, preemptor, request.writes)
        batch += self._victims.fate_events(run, preemptor, request.victims)
        if request.failed_victim is not None and not request.victims:
            batch.append(
                event(
                    run,
                    EventKind.VICTIM_FAILED,
                    preemptor,
                    request.failed_victim_node,
                    VictimStep(error=request.message).to_json(),
                    victim=request.failed_victim,
                )
            )
        scheduled = request.outcome is Outcome.COMPLETED and request.bound >= request.min_count
        if scheduled:
            batch.append(
                event(
                    run,
                    EventKind.PREEMPTOR_SCHEDULED,
                    preemptor,
                    None,
                    Scheduled(request.seconds_to_schedule).to_json(),
                )
            )
        if request.outcome is Outcome.FAILED:
            ended = Terminal(error=request.message, retryable=request.retryable)
            note = failure_note(request.message, retryable=request.retryable)
            self._tell_the_group(group, "PreemptionFailed", note, run=run)
            self._tell_the_members_the_failure(run, group, request.placements, note)
        elif request.outcome is Outcome.ABORTED:
            ended = Terminal(reason=request.message)
        elif request.runbook >= 2:  # ends before the binds, which the trigger records
            ended = Terminal(request.message)
        else:
            ended = Terminal(None if scheduled else request.message, preemptor_scheduled=scheduled)
        tell_victim_pod_groups(
            self._recorder,
            run,
            ObjectRef.pod_group(group),
            request.victim_pod_groups,
            request.victims,
            related=not group.label_named,
        )
        kind = KIND_OF_OUTCOME[request.outcome]
        batch.append(event(run, kind, preemptor, None, ended.to_json()))
        return self._recorder.append(batch)

    def _tell_the_members_the_failure(
        self, run: RunRef, group: GroupRef, placements: list[Nomination], note: str
    ) -> None:
        """`PreemptionFailed` on each placed member, beside its `Preempting`, so that
        `kubectl describe pod` of a member says the run failed, why and what to do. Its
        nomination is left as it is: kube-scheduler does not clear a nomination when its
        preemption fails either (`prepareCandidateAsync` activates the pods again and the
        next cycle nominates anew), so the room already made stays the group's."""
        related = None if group.label_named else ObjectRef.pod_group(group)
        for placed in placements:
            self._recorder.tell(
                ObjectRef.pod(placed.pod),
                "PreemptionFailed",
                f"The preemption for its pod group {group.key} failed: {note} Its nomination "
                f"to {placed.node} is not cleared (kube-scheduler keeps a nomination after a "
                "failed preemption too), so the room already made stays the group's.",
                key=("PreemptionFailed", run.run_id),
                related=related,
            )

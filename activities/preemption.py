"""The preemption workflow's activities: every side effect it has, each safe to retry.

Each activity translates between the workflow's contracts and `kube/` (one gateway call, or
a few), the decision path (`deciding/`) and the ledger, and classifies what went wrong
(`activities.errors`). It decides nothing itself: the gateway says what a write settled as,
the domain says whether the preemptor still needs room (`preemption.standing`), the decision
path decides and writes its decision ahead.

Each activity that acts on the cluster appends the ledger event of what it did, in the same
attempt, keyed by the run and the victim: a retry appends nothing twice
(`activities.recording`). What is done to a victim (mark, delete, unmark, with the answers
kept in heartbeats and a delete's intent recorded before the call) is shared with the group
preemption's activities (`activities.victim_steps`); this module adds what a pod preemption
alone does: decide for a pod, nominate it, re-check it, record its end.

A run's end is the workflow's to record (`record_end`), the decision's write-ahead's when the
decision ends it: an activity that finds the preemptor no longer needs room (select, delete)
reports why and records nothing of the sort.

A worker that runs dry (`dry_run`, the operator's PREEMPT_DRY_RUN: shadow mode, preemption
handed back to kube-scheduler) writes nothing to the cluster, whatever a request says: a
request to act (an older run's, retried; one started by a worker that acted) is decided as a
dry run by the select step, which says so (`Selection.dry_run`) and records it as one
(`dry_run`, no claim held); and every write step (nominate, mark, delete, unmark) refuses
for good (`WorkerRunsDry`), for a run decided by a worker that acted and continued by one
that runs dry. Events on pods are not posted either.

The activities are synchronous (the Kubernetes client and the ledger's engine are), so the
worker runs them on a thread pool. Decisions are serialized by the ledger's decision lock
(see `deciding.path`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine
from temporalio import activity
from temporalio.exceptions import ApplicationError

from preemptctl.activities.contracts import (
    EndInput,
    NominationInput,
    NominationResult,
    PreemptorCheck,
    PreemptVictimInput,
    RunRef,
    SelectInput,
    Selection,
    VictimInput,
    VictimResult,
    VictimRound,
    Written,
)
from preemptctl.activities.errors import decision_errors, kube_errors, ledger_errors
from preemptctl.activities.group_preemption import GroupPreemptionActivities
from preemptctl.activities.heartbeat import beat_while_waiting
from preemptctl.activities.recording import Recorder, event, failure_note, when
from preemptctl.activities.resumed import resumed_selection
from preemptctl.activities.story import pod_story
from preemptctl.activities.victim_groups import (
    tell_victim_pod_groups,
    victim_pod_groups,
    whole_units,
)
from preemptctl.activities.victim_steps import VictimSteps, write_events, written
from preemptctl.activities.view_channel import ViewChannel
from preemptctl.deciding.path import Decided, DecisionPath, DecisionRequest, Resumed
from preemptctl.kube import events, nomination
from preemptctl.kube.client import KubeClient
from preemptctl.kube.events import ObjectRef
from preemptctl.kube.pods import get_pod, get_pod_group
from preemptctl.kube.results import KubeCallError
from preemptctl.kube.view import ClusterView
from preemptctl.ledger.inputs_recorder import INPUTS_MAX_BYTES, INPUTS_RETENTION_DAYS
from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.payloads import Scheduled, Terminal, VictimStep
from preemptctl.ledger.queries import recorded_attempt
from preemptctl.ledger.vocabulary import KIND_OF_OUTCOME, Outcome
from preemptctl.preemption.decision import PodRef, Verdict
from preemptctl.preemption.default_preemption import PreemptionArgs
from preemptctl.preemption.standing import PreemptorStanding, reason_to_stop, standing_of

logger = logging.getLogger(__name__)


class PreemptionActivities:
    """The activities, bound to one cluster (client and view) and one ledger; with the group
    preemption's (`groups`), which share its decision path and its victim steps."""

    def __init__(
        self,
        kube: KubeClient,
        view: ClusterView,
        ledger: Engine,
        *,
        identity: str = "preemptctl",
        view_ready_timeout: float = 30.0,
        planner_args: PreemptionArgs | None = None,
        evictions_per_minute: int = 0,
        lock_wait_seconds: float = 4.0,
        inputs_max_bytes: int = INPUTS_MAX_BYTES,
        inputs_retention_days: int = INPUTS_RETENTION_DAYS,
        dry_run: bool = False,
        view_channel: ViewChannel | None = None,
    ) -> None:
        """`view_channel`: in a workflow process, the way to the main process, which holds
        the view and decides (`activities.view_channel`): the select and the standing
        look-ups go there; None where this process holds the view itself."""
        self._kube = kube
        self._channel = view_channel
        self._dry_run = dry_run
        self._view = view
        self._ledger = ledger
        self._identity = identity
        self._group_label = planner_args.pod_group_label if planner_args else ""
        self._recorder = Recorder(kube, ledger, identity, dry_run=dry_run)
        self._victims = VictimSteps(self._recorder)
        self._decisions = DecisionPath(
            ledger,
            view,
            lambda pod: get_pod(kube, pod),
            read_group=lambda group: get_pod_group(kube, group),
            identity=identity,
            planner_args=planner_args,
            evictions_per_minute=evictions_per_minute,
            lock_wait_seconds=lock_wait_seconds,
            view_ready_timeout=view_ready_timeout,
            inputs_max_bytes=inputs_max_bytes,
            inputs_retention_days=inputs_retention_days,
        )
        self.groups = GroupPreemptionActivities(
            view,
            self._recorder,
            self._victims,
            self._decisions,
            group_label=planner_args.pod_group_label if planner_args else "",
            view_channel=view_channel,
        )
        """The group preemption's activities (`activities.group_preemption`)."""

    @property
    def decisions(self) -> DecisionPath:
        """The decision path, for its lock hold figures (`DecisionPath.holds`)."""
        return self._decisions

    def close(self) -> int:
        """At shutdown, once the worker has stopped running activities: let the decision
        path's inputs recorder finish what is queued, for a bounded time, and stop it
        (blocking: from async code, in a thread). The decisions whose inputs were left
        unrecorded."""
        return self._decisions.close()

    def all(self) -> list[Callable[..., Any]]:
        """Every activity, the group preemption's included, for `Worker(activities=...)`."""
        return [
            self.select_preemption,
            self.nominate_preemptor,
            self.mark_victim,
            self.delete_victim,
            self.mark_victims,
            self.delete_victims,
            self.preempt_victim,
            self.unmark_victim,
            self.check_preemptor,
            self.record_end,
            *self.groups.all(),
        ]

    # -- deciding ---------------------------------------------------------------------------

    @activity.defn(name="select_preemption")
    def select_preemption(self, request: SelectInput) -> Selection:
        """The decision path (`deciding.path`): the preemptor fresh from the API server,
        then lock, claims, plan, budget, write ahead, serial across all replicas; then tell
        the preemptor what is decided for it.

        A run after the first appends `retried` first. The path writes the decision ahead
        (with its end when it is final: fits, ineligible, no candidate, unsupported, dry
        run) or `throttled`; a preemptor that no longer needs room is reported (no verdict,
        the reason as the message) for the workflow to record the abort. In a workflow
        process, the main process decides (`view_channel`)."""
        if self._channel is not None:
            selection: Selection = self._channel.call("select_preemption", request)
            return selection
        return self.select(request, beat=beat_while_waiting())

    def select(self, request: SelectInput, beat: Callable[[], object]) -> Selection:
        """The select's body, wherever it was asked (`beat`: while it waits its turn). A
        run decides once: asked again (its worker lost after the decision was written), it
        is answered from the decision on record (`resumed_selection`)."""
        run = request.run
        dry_run = request.dry_run or self._dry_run
        decision_request = DecisionRequest(
            run.preemption_id,
            run.run_id,
            when(run),
            request.preemptor,
            request.strategy,
            dry_run,
            request.throttled,
            request.started_by,
            request.retry_reason,
        )
        with decision_errors(request.preemptor):
            decided = self._decisions.decide(decision_request, beat=beat)
        if isinstance(decided, Resumed):
            return self._resumed(request, decided)
        if not isinstance(decided, Decided):
            return Selection(request.preemptor, decided.reason)
        self._tell_the_preemptor_the_decision(request, decided, dry_run=dry_run)
        selection = _selection(decided, dry_run=dry_run)
        if selection.victims and not dry_run and not selection.retry_after_seconds:
            with self._view.read() as snapshot:
                selection.victim_pod_groups = victim_pod_groups(snapshot, selection.victims)
                selection.victim_units = whole_units(snapshot, selection.victims, self._group_label)
        return selection

    def _resumed(self, request: SelectInput, resumed: Resumed) -> Selection:
        """The selection of a run that decided before, from its decision on record."""
        with ledger_errors():
            attempt = recorded_attempt(self._ledger, resumed.preemption_id, resumed.run_id)
        with self._view.read() as snapshot:
            selection = resumed_selection(request.preemptor, attempt, snapshot.pod_by_key)
            units = {v.victim.uid: v.unit for v in attempt.victims if v.unit} if attempt else {}
            selection.victim_pod_groups = victim_pod_groups(snapshot, selection.victims, units)
            selection.victim_units = whole_units(snapshot, selection.victims, self._group_label)
            return selection

    def _tell_the_preemptor_the_decision(
        self, request: SelectInput, decided: Decided, *, dry_run: bool
    ) -> None:
        """`Preempting` (which pods, where) for a decision to preempt that goes on now;
        `PreemptionUnsupported` (why) for a refusal."""
        decision = decided.decision
        if decided.retry_after_seconds:
            return
        if decision.verdict is Verdict.UNSUPPORTED:
            self._tell_the_preemptor(request.preemptor, "PreemptionUnsupported", decision.message)
        elif decision.verdict is Verdict.PREEMPT and not dry_run:
            victims = ", ".join(v.key for v in decision.victims)
            self._tell_the_preemptor(
                request.preemptor,
                "Preempting",
                f"{len(decision.victims)} pod(s) on {decision.nominated_node}: {victims}",
                normal=True,
                run=request.run,
            )

    def _tell_the_preemptor(
        self,
        preemptor: PodRef,
        reason: str,
        note: str,
        *,
        normal: bool = False,
        run: RunRef | None = None,
    ) -> None:
        """An event on the preemptor, so `kubectl describe` tells what is done for it and why
        nothing happens (a Warning unless `normal`). One per `run` when given (each run
        tells its own story), else one per pod and reason. Best effort; none when dry."""
        self._recorder.tell(
            ObjectRef.pod(preemptor),
            reason,
            note,
            key=(reason, run.run_id if run is not None else ""),
            normal=normal,
        )

    # -- the cluster ------------------------------------------------------------------------

    @activity.defn(name="nominate_preemptor")
    def nominate_preemptor(self, request: NominationInput) -> NominationResult:
        """Set the preemptor's nominatedNodeName (a nomination another component set is
        overwritten: the decision requires it), clear lower-priority nominations to the node,
        and record each (or, with `record` off, return them for the run's end to record).
        A write that fails for good is recorded and the preemption goes on, as upstream's
        does; one that may succeed later is retried."""
        run, node = request.run, request.node
        self._recorder.refuse_if_dry("nominate", request.preemptor, f"to {node}")
        writes: list[Written] = []
        result = NominationResult()
        try:
            with kube_errors():
                settled = nomination.nominate(
                    self._kube, request.preemptor, node, overwrite=True, seen=request.seen
                )
            result = NominationResult(settled.effect.value, settled.message, settled.previous)
            writes.append(written(EventKind.NOMINATED, request.preemptor, node, settled))
        except ApplicationError as error:
            if not error.non_retryable:
                raise
            result = NominationResult(error=error.message)
            writes.append(written(EventKind.NOMINATED, request.preemptor, node, error.message))
        for pod in request.clear:
            try:
                with kube_errors():
                    cleared = nomination.clear_nomination(self._kube, pod, node)
                writes.append(written(EventKind.NOMINATION_CLEARED, pod, node, cleared))
            except ApplicationError as error:
                if not error.non_retryable:
                    raise
                writes.append(written(EventKind.NOMINATION_CLEARED, pod, node, error.message))
        if request.record:
            self._recorder.append(write_events(run, request.preemptor, writes))
        else:
            result.writes = writes
        return result

    @activity.defn(name="mark_victim")
    def mark_victim(self, request: VictimInput) -> VictimResult:
        """Add the DisruptionTarget condition, unless the victim is gone, replaced, or already
        terminating (then there is nothing left to do to it); record what became of it. A
        group preemption's victims are marked by this activity too."""
        return self._victims.mark(request)

    @activity.defn(name="delete_victim")
    def delete_victim(self, request: VictimInput) -> VictimResult:
        """Delete (or evict) exactly this victim, UID precondition included, if the preemptor
        still needs the room (`reason_to_stop`: not gone, not replaced, not bound to another
        node; the view answers when it shows the preemptor, else the API server). Record what
        became of the victim, and the `Preempted` event on it, as upstream records it. A
        victim left alone because the preemptor moved on is reported (`stopped`): the
        workflow stops and records the abort."""
        return self._victims.delete(
            request,
            lambda: reason_to_stop(self._preemptor_standing(request.preemptor), request.node),
            self._announce_preempted,
        )

    def _announce_preempted(self, request: VictimInput) -> None:
        try:
            events.record_preempted(
                self._kube, request.victim, request.preemptor, request.node, self._identity
            )
        except KubeCallError as error:
            logger.warning("could not record Preempted on %s: %s", request.victim.key, error)

    @activity.defn(name="preempt_victim")
    def preempt_victim(self, request: PreemptVictimInput) -> VictimResult:
        """One victim's own step (the one runbook): mark it, then, if the room is still
        needed (a pod's: `reason_to_stop`; a group's: `reason_to_stop_group`), delete it
        with the UID precondition and post its `Preempted` event. Nothing is appended to
        the ledger here: the run's end records the fate returned. A DELETE answered 2xx is
        never sent again (`VictimSteps.preempt`)."""
        step = request.step
        if request.group is not None:
            return self.groups.preempt_victim(request)
        if request.finishing:  # a unit begun is finished: the room is not asked about
            return self._victims.preempt(step, lambda: "", self._announce_preempted)
        return self._victims.preempt(
            step,
            lambda: reason_to_stop(
                self._preemptor_standing(step.preemptor), request.room_node or step.node
            ),
            self._announce_preempted,
        )

    @activity.defn(name="mark_victims")
    def mark_victims(self, request: VictimRound) -> list[VictimResult]:
        """`mark_victim` for every victim of a round in one step (a group preemption's
        too): their fates in one append."""
        return self._victims.mark_round(request.steps())

    @activity.defn(name="delete_victims")
    def delete_victims(self, request: VictimRound) -> list[VictimResult]:
        """`delete_victim` for every victim of a round in one step: the preemptor re-checked
        once, the intents in one append before the first DELETE, the fates in one after."""
        steps = request.steps()
        node = steps[0].node if steps else ""
        return self._victims.delete_round(
            steps,
            lambda: reason_to_stop(self._preemptor_standing(request.preemptor), node),
            self._announce_preempted,
        )

    @activity.defn(name="unmark_victim")
    def unmark_victim(self, request: VictimInput) -> str:
        """Remove the DisruptionTarget condition this preemption set on a victim it did not
        delete after all (the run aborted or failed), and record the removal. A removal
        refused for good is recorded, not raised: the condition then lapses on its own."""
        return self._victims.unmark(request)

    @activity.defn(name="check_preemptor")
    def check_preemptor(self, request: PreemptorCheck) -> PreemptorStanding:
        """Where the preemptor stands now, read from the API server (not the view)."""
        with kube_errors():
            return get_pod(self._kube, request.preemptor).standing()

    def serve(self, operation: str, argument: Any) -> Any:
        """What the main process does for a workflow process (`activities.view_channel`):
        the select, a pod's or a group's, and the standing look-ups, beside the view."""
        if operation == "select_preemption":
            return self.select(argument, beat=lambda: None)
        if operation == "select_group_preemption":
            return self.groups.select(argument, beat=lambda: None)
        if operation == "preemptor_standing":
            return self._preemptor_standing(argument)
        if operation == "group_standing":
            group, members = argument
            return self.groups.standing(group, members)
        raise ValueError(f"no such operation on the view channel: {operation!r}")

    def _preemptor_standing(self, preemptor: PodRef) -> PreemptorStanding:
        """The view's answer when it shows the preemptor; else the API server's. In a
        workflow process, the main process's view answers (`view_channel`)."""
        if self._channel is not None:
            standing: PreemptorStanding = self._channel.call("preemptor_standing", preemptor)
            return standing
        with self._view.read() as snapshot:
            pod = snapshot.pods.get(preemptor.uid)
            if pod is not None:
                return standing_of(pod)
        with kube_errors():
            return get_pod(self._kube, preemptor).standing()

    # -- the ledger -------------------------------------------------------------------------

    @activity.defn(name="record_end")
    def record_end(self, request: EndInput) -> int:
        """Append how the run ended (what the workflow records itself: completed, failed,
        aborted), with the preemptor's scheduling and a victim failed for good, if any; tell
        each victim PodGroup that lost pods by whom (`activities.victim_groups`)."""
        run = request.run
        batch = write_events(run, request.preemptor, request.writes)
        batch += self._victims.fate_events(run, request.preemptor, request.victims)
        if request.failed_victim is not None and not request.victims:
            batch.append(
                event(
                    run,
                    EventKind.VICTIM_FAILED,
                    request.preemptor,
                    request.node,
                    VictimStep(error=request.message).to_json(),
                    victim=request.failed_victim,
                )
            )
        if request.scheduled_node is not None:
            scheduled = Scheduled(request.seconds_to_schedule).to_json()
            batch.append(
                event(
                    run,
                    EventKind.PREEMPTOR_SCHEDULED,
                    request.preemptor,
                    request.scheduled_node,
                    scheduled,
                )
            )
        if request.outcome is Outcome.FAILED:
            ended = Terminal(error=request.message, retryable=request.retryable)
            self._tell_the_preemptor(
                request.preemptor,
                "PreemptionFailed",
                failure_note(request.message, retryable=request.retryable),
                run=run,
            )
        elif request.outcome is Outcome.ABORTED:
            ended = Terminal(reason=request.message)
        elif request.runbook >= 2:  # ends before the bind, which the trigger records
            ended = Terminal(request.message)
        else:
            bound = request.scheduled_node is not None
            ended = Terminal(None if bound else request.message, preemptor_scheduled=bound)
        preemptor = ObjectRef.pod(request.preemptor)
        tell_victim_pod_groups(
            self._recorder, run, preemptor, request.victim_pod_groups, request.victims
        )
        kind = KIND_OF_OUTCOME[request.outcome]
        batch.append(event(run, kind, request.preemptor, request.node, ended.to_json()))
        return self._recorder.append(batch)


# -- translations ---------------------------------------------------------------------------


def _selection(decided: Decided, *, dry_run: bool) -> Selection:
    """The decision as the workflow reads it (held back: when to decide again, and why)."""
    decision = decided.decision
    return Selection(
        preemptor=decision.preemptor,
        message=decided.message,
        verdict=decision.verdict,
        node=decision.nominated_node,
        victims=list(decision.victims),
        nominations_to_clear=list(decision.nominated_pods_to_clear),
        num_pdb_violations=decision.num_pdb_violations,
        scheduler_name=decided.scheduler_name,
        retry_after_seconds=decided.retry_after_seconds,
        dry_run=dry_run,
        story=pod_story(decision, dry_run=dry_run),
        terminating=list(decided.terminating),
        nominated_node_seen=decided.nominated_node_seen,
        victim_nodes=dict(decided.victim_nodes),
    )

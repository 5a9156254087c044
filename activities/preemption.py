"""The preemption workflow's activities: every side effect it has, each safe to retry.

Each activity translates between the workflow's contracts and one gateway call (or one
ledger append), and classifies what went wrong: a Kubernetes error that retrying can cure
becomes a retryable `ApplicationError` (honouring a 429's Retry-After), one that needs a
person (RBAC, an invalid request) a non-retryable one whose message says what to fix.

The activities are synchronous (the Kubernetes client and the ledger's engine are), so the
worker runs them on a thread pool; the decision itself is serialized by a lock, which with
the reservation book is what keeps concurrent preemptions from claiming the same victim or
the same freed capacity (see `preemption.reservations`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine
from temporalio import activity
from temporalio.exceptions import ApplicationError

from preemptctl.activities.budget import WINDOW, seconds_until_budget_allows
from preemptctl.activities.contracts import (
    LedgerEntry,
    NominationInput,
    PreemptorCheck,
    PreemptorState,
    RecordInput,
    SelectInput,
    Selection,
    VictimInput,
    WriteResult,
)
from preemptctl.kube import conditions, deletion, events, nomination
from preemptctl.kube.client import KubeClient
from preemptctl.kube.outcomes import KubeCallError, WriteOutcome
from preemptctl.kube.pods import Presence, get_pod
from preemptctl.kube.view import ClusterView
from preemptctl.ledger.claims import decision_lock, open_claims, victims_chosen_since
from preemptctl.ledger.errors import LedgerError
from preemptctl.ledger.events import LedgerEvent, decision_events
from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.writer import append_batch, append_batch_on
from preemptctl.preemption.decision import Decision, PodRef, Strategy, Verdict
from preemptctl.preemption.decode import decode_pod
from preemptctl.preemption.default_preemption import PreemptionArgs
from preemptctl.preemption.errors import PlannerInputError
from preemptctl.preemption.planner import plan
from preemptctl.preemption.reservations import Reservation, ReservationBook
from preemptctl.preemption.snapshot import ClusterSnapshot

ABORTED = "Aborted"
THROTTLED = "Throttled"
TERMINATING = "Terminating"


@contextmanager
def kube_errors() -> Iterator[None]:
    """A classified Kubernetes failure as the `ApplicationError` Temporal retries (or not)."""
    try:
        yield
    except KubeCallError as error:
        delay = timedelta(seconds=error.retry_after) if error.retry_after else None
        raise ApplicationError(
            error.message,
            type=error.kind.value,
            non_retryable=not error.retryable,
            next_retry_delay=delay,
        ) from None


def _result(outcome: WriteOutcome) -> WriteResult:
    return WriteResult(outcome.verdict.value, outcome.message, outcome.previous)


@contextmanager
def _fresh_preemptor(snapshot: ClusterSnapshot, obj: dict[str, Any]) -> Iterator[None]:
    """Plan with the preemptor exactly as the API server just returned it (the view may be a
    moment behind), then put the view's own copy back."""
    fresh = decode_pod(obj)
    previous = snapshot.pods.get(fresh.uid)
    snapshot.upsert_pod(fresh)
    try:
        yield
    finally:
        if previous is not None:
            snapshot.upsert_pod(previous)
        else:
            snapshot.remove_pod(fresh.uid)


def _selection(decision: Decision, scheduler_name: str) -> Selection:
    return Selection(
        scheduler_name=scheduler_name,
        status=str(decision.status),
        message=decision.message,
        preemptor=decision.preemptor,
        node=decision.nominated_node,
        victims=list(decision.victims),
        nominations_to_clear=list(decision.nominated_pods_to_clear),
        num_pdb_violations=decision.num_pdb_violations,
        decision=decision.to_json(),
    )


class PreemptionActivities:
    """The activities, bound to one cluster (client and view) and one ledger."""

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
    ) -> None:
        self._kube = kube
        self._view = view
        self._ledger = ledger
        self._identity = identity
        self._decisions = 0
        self._view_ready_timeout = view_ready_timeout
        self._planner_args = planner_args
        self._evictions_per_minute = evictions_per_minute

    def all(self) -> list[Callable[..., Any]]:
        """Every activity, for `Worker(activities=...)`."""
        return [
            self.select_preemption,
            self.release_reservation,
            self.record_events,
            self.nominate_preemptor,
            self.clear_nomination,
            self.mark_victim,
            self.delete_victim,
            self.record_preempted_event,
            self.check_preemptor,
        ]

    # -- deciding ---------------------------------------------------------------------------

    @activity.defn(name="select_preemption")
    def select_preemption(self, request: SelectInput) -> Selection:
        """Re-read the preemptor, then decide over the cluster view with every preemption in
        flight (the ledger's open claims, whichever worker made them) counted as done, and
        write the decision ahead in the same transaction, under the ledger-wide decision
        lock: decisions are serial across all replicas, and a claim exists from the moment
        its decision does.

        The decision JSON gains a `context`: this worker's identity, the decision's sequence
        number in it, and the in-flight preemptions it counted as done."""
        preemptor = request.preemptor
        with kube_errors():
            lookup = get_pod(self._kube, preemptor)
        if lookup.presence is Presence.GONE:
            return Selection(ABORTED, "the preemptor is gone", preemptor)
        if lookup.presence is Presence.REPLACED:
            return Selection(
                ABORTED, "the preemptor was replaced by a pod with another UID", preemptor
            )
        assert lookup.pod is not None
        bound_to = (lookup.pod.get("spec") or {}).get("nodeName")
        strategy = Strategy(request.strategy)
        if bound_to and strategy is Strategy.DEFAULT:
            return Selection(ABORTED, f"the preemptor is already bound to {bound_to}", preemptor)
        if not self._view.wait_ready(self._view_ready_timeout):
            raise ApplicationError("the cluster view has not finished its initial sync yet")
        scheduler = str(lookup.pod["spec"].get("schedulerName") or "default-scheduler")
        try:
            return self._decide_and_write_ahead(request, lookup.pod, strategy, scheduler)
        except LedgerError as error:
            raise ApplicationError(
                f"ledger unavailable: {error}", type="LedgerUnavailable"
            ) from None

    def _decide_and_write_ahead(
        self, request: SelectInput, pod: dict[str, Any], strategy: Strategy, scheduler: str
    ) -> Selection:
        preemptor = request.preemptor
        since = datetime.now(UTC) - timedelta(seconds=request.reservation_seconds)
        with decision_lock(self._ledger) as connection, self._view.read() as snapshot:
            book = ReservationBook()
            for claim in open_claims(connection, since):
                if claim.preemptor_uid != preemptor.uid:
                    book.reserve(Reservation(claim.preemptor_uid, claim.node, claim.victim_uids))
            book.prune(snapshot)
            self._decisions += 1
            context = {
                "worker": self._identity,
                "sequence": self._decisions,
                "inFlight": [
                    snapshot.pods[uid].key for uid in book.holders() if uid in snapshot.pods
                ],
            }
            try:
                with book.applied(snapshot, preemptor.uid), _fresh_preemptor(snapshot, pod):
                    decision = plan(snapshot, preemptor.key, strategy, self._planner_args)
            except PlannerInputError as error:
                raise ApplicationError(
                    f"cannot plan for {preemptor.key}: {error}", non_retryable=True
                ) from None
            wait = 0.0
            budget = self._evictions_per_minute
            if decision.status is Verdict.PREEMPT and not request.dry_run and budget:
                decided_at = (
                    datetime.fromisoformat(request.occurred_at)
                    if request.occurred_at
                    else datetime.now(UTC)
                )
                recent = victims_chosen_since(connection, decided_at - WINDOW)
                wait = seconds_until_budget_allows(
                    recent, len(decision.victims), budget, decided_at
                )
            selection = _selection(decision, scheduler)
            assert selection.decision is not None
            selection.decision["context"] = context
            if wait:
                selection.status, selection.retry_after_seconds = THROTTLED, wait
                selection.message = (
                    f"held back by the eviction budget ({budget}/min): "
                    f"{len(decision.victims)} victim(s) fit in {wait:.0f}s; {decision.message}"
                )
            elif request.run_id:
                append_batch_on(connection, self._write_ahead(request, selection))
        return selection

    def _write_ahead(self, request: SelectInput, selection: Selection) -> list[LedgerEvent]:
        """The decision's events, keyed as the workflow keys them (its own later append of
        the same events is then a no-op); a dry run ends here, so its end is written too."""
        assert selection.decision is not None and selection.preemptor is not None
        occurred_at = datetime.fromisoformat(request.occurred_at)
        batch = decision_events(
            request.preemption_id,
            request.run_id,
            selection.preemptor,
            selection.decision,
            occurred_at,
        )
        if request.dry_run and selection.status == Verdict.PREEMPT.value:
            batch.append(
                LedgerEvent(
                    request.preemption_id,
                    request.run_id,
                    EventKind.DRY_RUN,
                    selection.preemptor,
                    node=selection.node,
                    occurred_at=occurred_at,
                )
            )
        return batch

    @activity.defn(name="release_reservation")
    def release_reservation(self, preemptor: PodRef) -> None:
        """Kept so that preemptions started by an older worker (which released an in-memory
        reservation here) can finish; claims now end with their run's terminal event."""

    # -- the ledger -------------------------------------------------------------------------

    @activity.defn(name="record_events")
    def record_events(self, request: RecordInput) -> int:
        """Append events idempotently; retried until the ledger takes them."""
        occurred_at = datetime.fromisoformat(request.occurred_at)
        batch: list[LedgerEvent] = []
        if request.decision is not None:
            batch += decision_events(
                request.preemption_id,
                request.run_id,
                request.preemptor,
                request.decision,
                occurred_at,
            )
        batch += [self._event(request, entry, occurred_at) for entry in request.entries]
        try:
            return append_batch(self._ledger, batch)
        except LedgerError as error:
            raise ApplicationError(
                f"ledger unavailable: {error}", type="LedgerUnavailable"
            ) from None

    @staticmethod
    def _event(request: RecordInput, entry: LedgerEntry, occurred_at: datetime) -> LedgerEvent:
        return LedgerEvent(
            preemption_id=request.preemption_id,
            run_id=request.run_id,
            kind=EventKind(entry.kind),
            preemptor=request.preemptor,
            node=entry.node,
            victim=entry.victim,
            payload=entry.payload,
            occurred_at=occurred_at,
            step=entry.step,
        )

    # -- the cluster ------------------------------------------------------------------------

    @activity.defn(name="nominate_preemptor")
    def nominate_preemptor(self, request: NominationInput) -> WriteResult:
        """Set the preemptor's nominatedNodeName: the decision requires it, so a nomination
        another component set is overwritten (and the result says which)."""
        with kube_errors():
            return _result(
                nomination.nominate(self._kube, request.pod, request.node, overwrite=True)
            )

    @activity.defn(name="clear_nomination")
    def clear_nomination(self, request: NominationInput) -> WriteResult:
        """Clear a lower-priority pod's nomination to the node this preemption takes."""
        with kube_errors():
            return _result(nomination.clear_nomination(self._kube, request.pod, request.node))

    @activity.defn(name="mark_victim")
    def mark_victim(self, request: VictimInput) -> WriteResult:
        """Add the DisruptionTarget condition, unless the victim is gone, replaced, or
        already terminating (then there is nothing left to do to it)."""
        with kube_errors():
            lookup = get_pod(self._kube, request.victim)
            if lookup.found and lookup.pod and lookup.pod["metadata"].get("deletionTimestamp"):
                return WriteResult(TERMINATING, "victim is already terminating")
            return _result(
                conditions.add_disruption_target(self._kube, request.victim, request.scheduler_name)
            )

    @activity.defn(name="delete_victim")
    def delete_victim(self, request: VictimInput) -> WriteResult:
        """Delete (or evict) exactly this victim, UID precondition included."""
        with kube_errors():
            return _result(
                deletion.delete_victim(
                    self._kube,
                    request.victim,
                    grace_period_seconds=request.grace_period_seconds,
                    use_eviction=request.use_eviction,
                )
            )

    @activity.defn(name="record_preempted_event")
    def record_preempted_event(self, request: VictimInput) -> WriteResult:
        """The `Preempted` event on the victim, as upstream records it."""
        with kube_errors():
            return _result(
                events.record_preempted(
                    self._kube, request.victim, request.preemptor, request.node, self._identity
                )
            )

    @activity.defn(name="check_preemptor")
    def check_preemptor(self, request: PreemptorCheck) -> PreemptorState:
        """Where the preemptor stands now, read from the API server (not the view)."""
        with kube_errors():
            lookup = get_pod(self._kube, request.preemptor)
        if lookup.presence is Presence.GONE:
            return PreemptorState("Gone")
        if lookup.presence is Presence.REPLACED:
            return PreemptorState("Replaced")
        node = ((lookup.pod or {}).get("spec") or {}).get("nodeName")
        return PreemptorState("Bound", node) if node else PreemptorState("Pending")

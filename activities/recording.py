"""How an activity records what it did: in the ledger, and on the cluster's objects.

Every activity that acts appends the ledger events of what it did (`event`: one step of a
run, at the workflow's clock, keyed so that a retry appends nothing twice), in one
transaction per call (`Recorder.append`); and tells the objects concerned with a Kubernetes
Event (`Recorder.tell`: best effort, since the ledger already has it all). A worker that
runs dry writes nothing to the cluster (`Recorder.refuse_if_dry`), Events included.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from sqlalchemy import Engine

from preemptctl.activities.contracts import RunRef
from preemptctl.activities.errors import ledger_errors, worker_runs_dry
from preemptctl.kube import events
from preemptctl.kube.client import KubeClient
from preemptctl.kube.events import ObjectRef
from preemptctl.kube.results import KubeCallError
from preemptctl.ledger.events import LedgerEvent
from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.writer import append_batch
from preemptctl.preemption.decision import PodRef

logger = logging.getLogger(__name__)


class Recorder:
    """The ledger and the cluster's Events, for one worker (its identity, dry or not)."""

    def __init__(self, kube: KubeClient, ledger: Engine, identity: str, *, dry_run: bool) -> None:
        self.kube = kube
        self.ledger = ledger
        self.identity = identity
        self.dry_run = dry_run

    def append(self, batch: list[LedgerEvent]) -> int:
        """Append `batch` in one transaction; how many rows were new (0: all there already)."""
        with ledger_errors():
            return append_batch(self.ledger, batch)

    def refuse_if_dry(self, step: str, pod: PodRef, where: str = "") -> None:
        """A worker that runs dry writes nothing to the cluster, whatever the request says:
        the step fails for good, saying why and what to do (`WorkerRunsDry`)."""
        if self.dry_run:
            raise worker_runs_dry(step, pod, where)

    def tell(
        self,
        regarding: ObjectRef,
        reason: str,
        note: str,
        *,
        key: tuple[str, ...],
        normal: bool = False,
        related: ObjectRef | None = None,
    ) -> None:
        """An Event about `regarding`, so `kubectl describe` tells what is done and why (a
        Warning unless `normal`), once per `key`. Best effort: the ledger already has it
        all. A worker that runs dry posts none."""
        if self.dry_run:
            return
        try:
            events.record_event(
                self.kube,
                regarding,
                reason,
                note,
                self.identity,
                key=key,
                normal=normal,
                related=related,
            )
        except KubeCallError as error:
            logger.warning("could not record %s on %s: %s", reason, regarding.key, error)


def when(run: RunRef) -> datetime:
    """The workflow's clock when it asked for the step."""
    return datetime.fromisoformat(run.occurred_at)


def event(
    run: RunRef,
    kind: EventKind,
    preemptor: PodRef,
    node: str | None,
    payload: dict[str, Any],
    *,
    victim: PodRef | None = None,
    step: str = "",
) -> LedgerEvent:
    """The ledger event of one step of `run`, at the workflow's clock. A group preemption's
    preemptor columns name its group (`GroupRef.as_preemptor`)."""
    return LedgerEvent(
        preemption_id=run.preemption_id,
        run_id=run.run_id,
        kind=kind,
        preemptor=preemptor,
        node=node,
        victim=victim,
        payload=payload,
        occurred_at=when(run),
        step=step,
    )


def failure_note(message: str, *, retryable: bool) -> str:
    """A failed preemption's event note: its cause, then what to do about it."""
    if retryable:
        return f"{message}. Nothing to do yet: the preemption is tried again after a backoff."
    return (
        f"{message}. Retrying cannot help until this is fixed (grant the permission named, "
        "or correct the request); the pod is tried again once it changes."
    )

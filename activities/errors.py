"""How the activities classify what went wrong: as the `ApplicationError` Temporal retries,
or not.

A Kubernetes error that retrying can cure becomes a retryable `ApplicationError` (honouring
a 429's Retry-After); one that needs a person (RBAC, an invalid request) a non-retryable
one whose message says what to fix. A ledger outage (or a schema a migration will bring) is
retried; a row the database refuses is not. The decision path's own refusals (a view not
synced yet: retried; a preemptor the planner cannot read: not) are classified here too, and
so is a write step refused because the worker runs dry (`worker_runs_dry`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from temporalio.exceptions import ApplicationError

from preemptctl.deciding.path import ViewNotReadyError
from preemptctl.kube.results import KubeCallError
from preemptctl.ledger.errors import LedgerError, LedgerNotMigratedError, LedgerUnavailableError
from preemptctl.preemption.decision import PodRef
from preemptctl.preemption.errors import PlannerInputError

WORKER_RUNS_DRY = "WorkerRunsDry"
"""The type of the failure of a write step on a worker that runs dry."""


def worker_runs_dry(step: str, pod: PodRef, where: str = "") -> ApplicationError:
    """The failure of a write step refused because the worker runs dry (shadow mode):
    retrying on this worker cannot help, so it fails for good, saying what was refused, why,
    and what to do."""
    target = f"{pod.key} {where}".rstrip()
    return ApplicationError(
        f"refused to {step} {target}: this worker runs dry (PREEMPT_DRY_RUN=true) and writes "
        "nothing to the cluster; to act, set PREEMPT_DRY_RUN=false and retry",
        type=WORKER_RUNS_DRY,
        non_retryable=True,
    )


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


@contextmanager
def ledger_errors() -> Iterator[None]:
    """A ledger failure as an `ApplicationError`: an outage (or a schema a migration will
    bring) is retried; anything else (a row the database refuses) is not."""
    try:
        yield
    except LedgerError as error:
        transient = isinstance(error, LedgerUnavailableError | LedgerNotMigratedError)
        raise ApplicationError(
            f"ledger: {error}",
            type="LedgerUnavailable" if transient else "LedgerRejected",
            non_retryable=not transient,
        ) from None


@contextmanager
def decision_errors(preemptor: PodRef) -> Iterator[None]:
    """Every failure of the decision path, classified: the API server's and the ledger's as
    above, a view not synced yet retried, a preemptor the planner cannot read not."""
    try:
        with kube_errors(), ledger_errors():
            yield
    except ViewNotReadyError as error:
        raise ApplicationError(str(error)) from None
    except PlannerInputError as error:
        raise ApplicationError(
            f"cannot plan for {preemptor.key}: {error}", non_retryable=True
        ) from None

"""The controller's connections, each checked at start-up: the cluster configuration, the
ledger (waited for while its database does not answer), Temporal, and the SDK's metrics.

A failure is one `StartupError` line naming what to fix (a wrong Temporal address, a missing
kubeconfig, an unmigrated ledger), so a misconfigured worker stops at once instead of failing
its first preemption minutes later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from sqlalchemy import Engine
from sqlalchemy.exc import InterfaceError, OperationalError, SQLAlchemyError
from temporalio.client import Client
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from preemptctl.kube.client import KubeClient, connect
from preemptctl.ledger.engine import create_ledger_engine, display_url
from preemptctl.ledger.errors import LedgerError, LedgerUnavailableError
from preemptctl.migrations import current_revision, schema_problem
from preemptctl.worker.config import ConfigError, Settings, temporal_tls

log = logging.getLogger("preemptctl")


class StartupError(Exception):
    """The controller cannot start; the message says what to fix."""


def connect_cluster(settings: Settings) -> KubeClient:
    try:
        return connect(settings.kubeconfig or None, context=settings.kube_context or None)
    except Exception as error:
        where = settings.kubeconfig or "$KUBECONFIG / in-cluster config"
        raise StartupError(f"cannot load the cluster configuration ({where}): {error}") from None


class LedgerUnreachableError(StartupError):
    """The ledger database does not answer (yet): worth waiting for, not a wrong setting."""


class TemporalUnreachableError(StartupError):
    """The Temporal frontend does not answer: a runtime failure (exit 1), not bad input."""


def open_ledger(settings: Settings) -> Engine:
    url = settings.effective_database_url()
    try:
        engine = create_ledger_engine(url)
        with engine.connect() as connection:
            current = current_revision(connection.engine)
    except LedgerUnavailableError as error:
        raise LedgerUnreachableError(f"ledger {display_url(url)}: {error}") from None
    except LedgerError as error:
        raise StartupError(f"ledger {display_url(url)}: {error}") from None
    except (OperationalError, InterfaceError) as error:
        first = str(error.orig or error).strip().splitlines()[0:1]
        raise LedgerUnreachableError(
            f"ledger {display_url(url)} does not answer: {first[0] if first else error}"
        ) from None
    except SQLAlchemyError as error:
        raise StartupError(f"ledger {display_url(url)}: {type(error).__name__}") from None
    # A release runs on its own head and the next revision (expand-only migrations), so a
    # `kubectl rollout undo` after a migration keeps the old pods running.
    problem = schema_problem(current)
    if problem:
        raise StartupError(f"ledger {display_url(url)} {problem}")
    return engine


async def wait_for_ledger(
    settings: Settings,
    stop: asyncio.Event,
    *,
    on_wait: Callable[[str], None] = lambda why: None,
    initial: float = 1.0,
    maximum: float = 30.0,
) -> Engine | None:
    """Open the ledger, waiting with backoff (one log line per attempt) while its database
    does not answer, as a worker started before its Postgres must; None if `stop` is set
    meanwhile. A wrong setting or an unmigrated schema is still a `StartupError` at once."""
    delay, attempt = initial, 1
    while True:
        try:
            return await asyncio.to_thread(open_ledger, settings)
        except LedgerUnreachableError as error:
            why = f"{error} (attempt {attempt}; retrying in {delay:g}s)"
            log.warning("waiting for the ledger: %s", why)
            on_wait(f"waiting for the ledger: {error}")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await stop.wait()
        if stop.is_set():
            return None
        delay, attempt = min(delay * 2, maximum), attempt + 1


def sdk_runtime(port: int, address: str = "0.0.0.0") -> Runtime | None:
    """A Temporal runtime exporting the SDK's own metrics on `port` (None: the default
    runtime, without them, for port 0)."""
    if not port:
        return None
    try:
        return Runtime(
            telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=f"{address}:{port}"))
        )
    except ValueError as error:
        raise StartupError(
            f"cannot serve the Temporal SDK's metrics on port {port}: {error}"
        ) from None


async def connect_temporal(settings: Settings, runtime: Runtime | None = None) -> Client:
    try:
        tls = temporal_tls(settings)
    except ConfigError as error:
        raise StartupError(str(error)) from None
    try:
        async with asyncio.timeout(15):
            return await Client.connect(
                settings.temporal_address,
                namespace=settings.temporal_namespace,
                tls=tls,
                api_key=settings.temporal_api_key or None,
                identity=settings.identity,
                runtime=runtime,
            )
    except (RuntimeError, TimeoutError) as error:
        raise TemporalUnreachableError(
            f"cannot reach Temporal at {settings.temporal_address} "
            f"(namespace {settings.temporal_namespace}): {error or 'timed out'}"
        ) from None

"""A running controller: connections, the cluster view, the Temporal worker, the trigger loop
and the HTTP endpoints, started in order and stopped in reverse.

Every connection is checked at start-up and a failure is one `StartupError` line naming what
to fix (a wrong Temporal address, a missing kubeconfig, an unmigrated ledger), so a
misconfigured worker stops at once instead of failing its first preemption minutes later.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import Engine
from temporalio.client import Client, TLSConfig
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from preemptctl.activities.preemption import PreemptionActivities
from preemptctl.kube.client import KubeClient, connect
from preemptctl.kube.view import ClusterView
from preemptctl.ledger.engine import create_ledger_engine, display_url
from preemptctl.ledger.errors import LedgerError
from preemptctl.migrations import current_revision, head_revision
from preemptctl.preemption.default_preemption import PreemptionArgs
from preemptctl.worker.config import Settings
from preemptctl.worker.metrics import Metrics
from preemptctl.worker.temporal_worker import build_worker
from preemptctl.worker.trigger import Reporter, TriggerLoop

log = logging.getLogger("preemptctl")


class StartupError(Exception):
    """The controller cannot start; the message says what to fix."""


class JsonFormatter(logging.Formatter):
    """One JSON object a line: what log collectors in a cluster expect."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure_logging(log_format: str, level: int = logging.INFO) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("temporalio").setLevel(logging.WARNING)


# -- connections -----------------------------------------------------------------------------


def connect_cluster(settings: Settings) -> KubeClient:
    try:
        return connect(settings.kubeconfig or None, context=settings.kube_context or None)
    except Exception as error:
        where = settings.kubeconfig or "$KUBECONFIG / in-cluster config"
        raise StartupError(f"cannot load the cluster configuration ({where}): {error}") from None


def open_ledger(settings: Settings) -> Engine:
    url = settings.effective_database_url()
    try:
        engine = create_ledger_engine(url)
        with engine.connect() as connection:
            current = current_revision(connection.engine)
    except LedgerError as error:
        raise StartupError(f"ledger {display_url(url)}: {error}") from None
    if current != head_revision():
        raise StartupError(
            f"ledger {display_url(url)} is at schema revision {current or 'none'}, not "
            f"{head_revision()}: run `preemptctl migrate` first"
        )
    return engine


def sdk_runtime(port: int) -> Runtime | None:
    """A Temporal runtime exporting the SDK's own metrics on `port` (None: the default
    runtime, without them, for port 0)."""
    if not port:
        return None
    try:
        return Runtime(
            telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=f"0.0.0.0:{port}"))
        )
    except ValueError as error:
        raise StartupError(
            f"cannot serve the Temporal SDK's metrics on port {port}: {error}"
        ) from None


async def connect_temporal(settings: Settings, runtime: Runtime | None = None) -> Client:
    tls: bool | TLSConfig = settings.temporal_tls or bool(settings.temporal_api_key)
    if settings.temporal_tls_cert:
        with (
            open(settings.temporal_tls_cert, "rb") as cert,
            open(settings.temporal_tls_key, "rb") as key,
        ):
            tls = TLSConfig(client_cert=cert.read(), client_private_key=key.read())
    try:
        return await asyncio.wait_for(
            Client.connect(
                settings.temporal_address,
                namespace=settings.temporal_namespace,
                tls=tls,
                api_key=settings.temporal_api_key or None,
                identity=settings.identity,
                runtime=runtime,
            ),
            timeout=15,
        )
    except (RuntimeError, TimeoutError) as error:
        raise StartupError(
            f"cannot reach Temporal at {settings.temporal_address} "
            f"(namespace {settings.temporal_namespace}): {error or 'timed out'}"
        ) from None


# -- HTTP: metrics and probes ------------------------------------------------------------------


class _Endpoints(BaseHTTPRequestHandler):
    server: ProbeServer

    def do_GET(self) -> None:
        if self.path == "/metrics":
            body, kind, code = (
                generate_latest(self.server.metrics.registry),
                CONTENT_TYPE_LATEST,
                200,
            )
        elif self.path == "/healthz":
            body, kind, code = b"ok\n", "text/plain", 200
        elif self.path == "/readyz":
            ready, why = self.server.readiness()
            body, kind, code = (why + "\n").encode(), "text/plain", 200 if ready else 503
        else:
            body, kind, code = b"not found\n", "text/plain", 404
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


class ProbeServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self, port: int, metrics: Metrics, readiness: Callable[[], tuple[bool, str]]
    ) -> None:
        super().__init__(("0.0.0.0", port), _Endpoints)
        self.metrics = metrics
        self.readiness = readiness

    def start(self) -> None:
        threading.Thread(target=self.serve_forever, name="probes", daemon=True).start()


# -- the controller ----------------------------------------------------------------------------


@dataclass
class Controller:
    settings: Settings
    client: Client
    kube: KubeClient
    view: ClusterView
    ledger: Engine
    metrics: Metrics
    trigger: TriggerLoop | None


def planner_args(settings: Settings) -> PreemptionArgs:
    return PreemptionArgs(
        protected_namespaces=frozenset(settings.protected_namespaces),
        max_victims=settings.max_victims,
    )


@asynccontextmanager
async def running_controller(
    settings: Settings,
    client: Client,
    kube: KubeClient,
    ledger: Engine,
    *,
    worker: bool = True,
    report: Reporter | None = None,
    serve_probes: bool = True,
    view_timeout: float = 120.0,
) -> AsyncIterator[Controller]:
    """The view synced, the Temporal worker polling and the trigger loop running (unless
    `worker` is False); on exit, the trigger stops, the worker drains, the view stops."""
    metrics = Metrics()
    view = ClusterView(kube)
    view.start()
    probes: ProbeServer | None = None
    try:
        log.info("syncing the cluster view")
        if not await asyncio.to_thread(view.wait_ready, view_timeout):
            raise StartupError(f"the cluster view did not sync within {view_timeout:g}s")

        loop = asyncio.get_running_loop()

        def readiness() -> tuple[bool, str]:
            """Ready once the view has synced and Temporal answers (checked on each probe,
            from the probe server's thread, on the controller's event loop)."""
            if not view.ready.is_set():
                return False, "cluster view not synced"
            check = asyncio.run_coroutine_threadsafe(client.service_client.check_health(), loop)
            try:
                healthy = check.result(timeout=5)
            except Exception as error:
                return False, f"Temporal does not answer: {error or 'timed out'}"
            return (True, "ready") if healthy else (False, "Temporal is not serving")

        if serve_probes:
            try:
                probes = ProbeServer(settings.metrics_port, metrics, readiness)
            except OSError as error:
                raise StartupError(
                    f"cannot serve metrics on port {settings.metrics_port}: {error.strerror}"
                ) from None
            probes.start()
        controller = Controller(settings, client, kube, view, ledger, metrics, None)
        if not worker:
            yield controller
            return
        activities = PreemptionActivities(
            kube,
            view,
            ledger,
            identity=settings.identity,
            planner_args=planner_args(settings),
            evictions_per_minute=settings.evictions_per_minute,
        )
        async with build_worker(client, activities, task_queue=settings.task_queue):
            trigger = TriggerLoop(view, client, settings, metrics, report=report)
            trigger.start()
            controller.trigger = trigger
            log.info(
                "worker ready: task queue %s, %s",
                settings.task_queue,
                "dry run (shadow mode)" if settings.dry_run else "preempting",
            )
            try:
                yield controller
            finally:
                await trigger.stop(drain=False)
    finally:
        if probes is not None:
            probes.shutdown()
            probes.server_close()
        view.stop()

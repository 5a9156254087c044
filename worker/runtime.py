"""A running controller: connections, the cluster view, the Temporal worker, the trigger loop
and the HTTP endpoints, started in order and stopped in reverse.

Every connection is checked at start-up and a failure is one `StartupError` line naming what
to fix (a wrong Temporal address, a missing kubeconfig, an unmigrated ledger), so a
misconfigured worker stops at once instead of failing its first preemption minutes later.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import Engine
from sqlalchemy.exc import InterfaceError, OperationalError, SQLAlchemyError
from temporalio.client import Client
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from preemptctl.activities.preemption import PreemptionActivities
from preemptctl.kube.client import KubeClient, connect
from preemptctl.kube.upstream_events import ShadowView, UpstreamIndex, UpstreamRecorder
from preemptctl.kube.view import ClusterView
from preemptctl.ledger.engine import create_ledger_engine, display_url
from preemptctl.ledger.errors import LedgerError, LedgerUnavailableError
from preemptctl.ledger.upstream import append_upstream
from preemptctl.migrations import current_revision, schema_problem
from preemptctl.preemption.default_preemption import PreemptionArgs
from preemptctl.worker.cancellation import GRACE_SECONDS, cancel_and_wait, cancellation_requested
from preemptctl.worker.config import ConfigError, Settings, temporal_tls
from preemptctl.worker.metrics import Metrics
from preemptctl.worker.temporal_worker import build_worker, with_cached_hints
from preemptctl.worker.trigger import Reporter, TriggerLoop

log = logging.getLogger("preemptctl")


class StartupError(Exception):
    """The controller cannot start; the message says what to fix."""


# -- connections -----------------------------------------------------------------------------


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


# -- supervision -------------------------------------------------------------------------------


async def run_in_thread(name: str, target: Callable[[], None]) -> None:
    """Run `target` in a thread of its own (not the default executor: a reflector runs for
    the life of the process) and wait for it to return or raise."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def settle(error: BaseException | None) -> None:
        if done.done():
            return
        if error is None:
            done.set_result(None)
        else:
            done.set_exception(error)

    def body() -> None:
        error: BaseException | None = None
        try:
            target()
        except BaseException as raised:
            error = raised
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
            loop.call_soon_threadsafe(settle, error)

    threading.Thread(target=body, name=name, daemon=True).start()
    await done


class Supervisor:
    """Keeps the controller's background tasks running (kopf's daemons, Erlang's one-for-one).

    A task that raises, or returns while the controller runs, is logged, counted in
    `preemptctl_task_restarts_total{task}` and restarted after a backoff that doubles from
    `initial` to `maximum` (and starts over once the task has run longer than `maximum`).
    More than `max_restarts` crashes within `window` seconds and the supervisor gives up on
    that task: `healthy()` then says so, `/healthz` fails, and the kubelet restarts the pod.
    """

    def __init__(
        self,
        metrics: Metrics,
        *,
        initial: float = 0.5,
        maximum: float = 30.0,
        max_restarts: int = 10,
        window: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._metrics = metrics
        self._initial = initial
        self._maximum = maximum
        self._max_restarts = max_restarts
        self._window = window
        self._clock = clock
        self._sleep = sleep
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._gave_up: dict[str, str] = {}
        self._stopping = False

    def spawn(self, name: str, factory: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
        """Run `factory()` under supervision; the returned task ends only when cancelled or
        given up on."""
        task = asyncio.create_task(self._keep(name, factory), name=f"supervised:{name}")
        self._tasks[name] = task
        return task

    def spawn_thread(self, name: str, target: Callable[[], None]) -> asyncio.Task[None]:
        """Run the blocking `target` in a thread of its own, under supervision."""
        return self.spawn(name, lambda: run_in_thread(name, target))

    def healthy(self) -> tuple[bool, str]:
        if self._gave_up:
            names = ", ".join(f"{name} ({why})" for name, why in sorted(self._gave_up.items()))
            return False, f"gave up restarting: {names}"
        return True, "ok"

    @property
    def gave_up(self) -> dict[str, str]:
        return dict(self._gave_up)

    def stopping(self) -> None:
        """From now on a task that ends is not restarted (the controller is stopping, and
        stopping the view ends its reflector threads)."""
        self._stopping = True

    async def stop(self, grace: float = GRACE_SECONDS) -> None:
        """Cancel every task and wait for them to end (cancelling again, within `grace`:
        see `cancellation`), so that a task which lost a cancellation cannot hang the stop."""
        self._stopping = True
        await cancel_and_wait(self._tasks.values(), grace=grace, what="supervised tasks")
        self._tasks.clear()

    async def _keep(self, name: str, factory: Callable[[], Awaitable[None]]) -> None:
        crashes: deque[float] = deque()
        delay = self._initial
        while True:
            began = self._clock()
            try:
                await factory()
                why = "ended unexpectedly"
            except asyncio.CancelledError:
                raise
            except Exception as error:
                why = f"{type(error).__name__}: {error}"[:300]
                log.error("task %s crashed: %s", name, why, exc_info=error)
            if self._stopping or cancellation_requested():
                return  # asked to stop, even if the CancelledError itself was lost
            now = self._clock()
            if now - began > self._maximum:
                delay = self._initial  # it ran healthy for a while: a fresh crash
            crashes.append(now)
            while crashes and now - crashes[0] > self._window:
                crashes.popleft()
            if len(crashes) > self._max_restarts:
                self._gave_up[name] = why
                log.error(
                    "task %s crashed %d times in %gs; not restarting it (healthz fails): %s",
                    name,
                    len(crashes),
                    self._window,
                    why,
                )
                return
            self._metrics.task_restarts.labels(name).inc()
            log.warning("restarting task %s in %.1fs (%s)", name, delay, why)
            await self._sleep(delay)
            delay = min(delay * 2, self._maximum)


def loop_answers(loop: asyncio.AbstractEventLoop, timeout: float) -> bool:
    """From another thread: does `loop` run a callback within `timeout` seconds? A loop
    stuck in a blocking call, or closed, does not."""
    answered = threading.Event()
    try:
        loop.call_soon_threadsafe(answered.set)
    except RuntimeError:
        return False
    return answered.wait(timeout)


# -- HTTP: metrics and probes ------------------------------------------------------------------

REQUEST_TIMEOUT = 10.0  # seconds a probe or scrape connection may take to send its request
MAX_REQUEST_THREADS = 16
Check = Callable[[], tuple[bool, str]]


class _Endpoints(BaseHTTPRequestHandler):
    server: ProbeServer
    timeout = REQUEST_TIMEOUT  # socket timeout: a client that sends nothing is dropped

    def do_GET(self) -> None:
        if self.path == "/metrics":
            body, kind, code = (
                generate_latest(self.server.metrics.registry),
                CONTENT_TYPE_LATEST,
                200,
            )
        elif self.path == "/parked":
            body, kind, code = (
                json.dumps(self.server.parked(), indent=2).encode() + b"\n",
                "application/json",
                200,
            )
        elif self.path in ("/healthz", "/readyz"):
            check = self.server.health if self.path == "/healthz" else self.server.readiness
            try:
                ok, why = check()
            except Exception as error:
                ok, why = False, f"the check failed: {error}"
            body, kind, code = (why + "\n").encode(), "text/plain", 200 if ok else 503
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
    """/metrics, /healthz, /readyz and /parked (the pods parked after a non-retryable end,
    as JSON, for a CLI or a person) on `settings.http_bind_address`, one thread per
    request up to `MAX_REQUEST_THREADS` (a connection beyond that is closed at once), each
    request bounded by `REQUEST_TIMEOUT`. `health` and `readiness` are replaced as the
    controller starts."""

    daemon_threads = True

    def __init__(self, address: str, port: int, metrics: Metrics) -> None:
        super().__init__((address, port), _Endpoints)
        self.metrics = metrics
        self.health: Check = lambda: (True, "ok")
        self.readiness: Check = lambda: (False, "starting")
        self.parked: Callable[[], list[dict[str, Any]]] = list
        self._slots = threading.BoundedSemaphore(MAX_REQUEST_THREADS)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except Exception:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up or timed out: one debug line, not a traceback on stderr."""
        log.debug("probe request from %s failed", client_address, exc_info=True)

    def start(self) -> None:
        threading.Thread(target=self.serve_forever, name="probes", daemon=True).start()

    def close(self) -> None:
        self.shutdown()
        self.server_close()


def open_probe_server(settings: Settings, metrics: Metrics) -> ProbeServer:
    address = settings.http_bind_address
    try:
        return ProbeServer(address, settings.metrics_port, metrics)
    except OSError as error:
        raise StartupError(
            f"cannot serve metrics on {address or '*'}:{settings.metrics_port}: "
            f"{error.strerror or error}"
        ) from None


def parked_report(trigger: TriggerLoop) -> list[dict[str, Any]]:
    """The parked pods as /parked serves them: pod, uid, reason, since (UTC RFC 3339)."""
    return [
        {
            "pod": parked.pod,
            "uid": parked.uid,
            "reason": parked.reason,
            "since": parked.since.isoformat(timespec="seconds"),
        }
        for parked in trigger.parked()
    ]


def describe_sync(view: ClusterView) -> str:
    """One line per kind: objects listed and seconds, for /readyz and the logs."""
    lines = []
    for kind, progress in view.sync_progress().items():
        state = f"synced in {progress['seconds']:g}s" if progress["synced"] else "listing"
        if progress.get("error"):
            state += f" ({progress['error']})"
        lines.append(f"{kind}: {progress['listed']} listed, {state}")
    return "\n".join(lines)


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
    supervisor: Supervisor
    # Shadow mode only: kube-scheduler's Preempted Events, recorded for `preemptctl compare`.
    upstream: UpstreamRecorder | None = None


def upstream_recorder(
    kube: KubeClient, view: ClusterView, ledger: Engine, index: UpstreamIndex | None = None
) -> UpstreamRecorder:
    """The recorder of kube-scheduler's preemptions: each into `upstream_preemptions`, its
    preemptor named from the view when the view knows it."""

    # The view's own snapshot (not ShadowView's read, which lays every remembered victim
    # back as running first): a name lookup needs none of that.
    def name_of(uid: str) -> tuple[str, str] | None:
        with ClusterView.read(view) as snapshot:
            pod = snapshot.pods.get(uid)
            return (pod.namespace, pod.name) if pod is not None else None

    def uid_of(namespace: str, name: str) -> str | None:
        with ClusterView.read(view) as snapshot:
            pod = snapshot.pod_by_key(f"{namespace}/{name}")
            return pod.uid if pod is not None else None

    return UpstreamRecorder(
        kube,
        lambda found: append_upstream(ledger, found),
        name_of=name_of,
        uid_of=uid_of,
        index=index,
    )


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
    probes: ProbeServer | None = None,
    metrics: Metrics | None = None,
    view_timeout: float | None = None,
) -> AsyncIterator[Controller]:
    """The view synced, the Temporal worker polling and the trigger loop running (unless
    `worker` is False); on exit, the trigger stops, the worker drains, the view stops.

    The view's reflectors, the probe server and the trigger loop run under one `Supervisor`;
    in shadow mode (`settings.dry_run`) so does the recorder of kube-scheduler's own
    preemptions (its `Preempted` Events into `upstream_preemptions`, for `compare`).
    `probes` is a server the caller started (and closes); else one is opened here when
    `serve_probes`."""
    metrics = metrics or (probes.metrics if probes is not None else Metrics())
    supervisor = Supervisor(metrics)
    loop = asyncio.get_running_loop()

    def rejected(kind: str) -> None:
        metrics.rejected_objects.labels(kind).inc()

    # In shadow mode every read of the view shows kube-scheduler's victims as still running
    # (`ShadowView`), so a dry run decided after upstream acted is still comparable.
    upstream = UpstreamIndex() if settings.dry_run and worker else None
    view = (
        ShadowView(kube, upstream, on_rejected=rejected)
        if upstream is not None
        else ClusterView(kube, on_rejected=rejected)
    )
    metrics.watch_view(view.reflector_stats)
    metrics.watch_ledger(ledger)
    view.start(supervisor.spawn_thread)
    owned: ProbeServer | None = None
    if probes is None and serve_probes:
        probes = owned = open_probe_server(settings, metrics)
        supervisor.spawn_thread("probes", owned.serve_forever)

    def health() -> tuple[bool, str]:
        """Alive while the event loop answers and every supervised task runs or restarts."""
        if not loop_answers(loop, timeout=5.0):
            return False, "the event loop does not answer"
        return supervisor.healthy()

    def readiness() -> tuple[bool, str]:
        """Ready once the view has synced and Temporal answers (checked on each probe,
        from the probe server's thread, on the controller's event loop)."""
        alive, why = health()
        if not alive:
            return False, why
        if not view.ready.is_set():
            return False, "cluster view not synced\n" + describe_sync(view)
        check = asyncio.run_coroutine_threadsafe(client.service_client.check_health(), loop)
        try:
            healthy = check.result(timeout=5)
        except Exception as error:
            return False, f"Temporal does not answer: {error or 'timed out'}"
        if not healthy:
            return False, "Temporal is not serving"
        return True, "ready\n" + describe_sync(view)

    if probes is not None:
        probes.health, probes.readiness = health, readiness
    timeout = view_timeout if view_timeout is not None else settings.sync_timeout_seconds
    controller: Controller | None = None
    try:
        log.info("syncing the cluster view")
        if not await asyncio.to_thread(view.wait_ready, timeout):
            raise StartupError(
                f"the cluster view did not sync within {timeout:g}s "
                f"(sync_timeout_seconds): " + "; ".join(describe_sync(view).splitlines())
            )
        log.info("cluster view synced: %s", "; ".join(describe_sync(view).splitlines()))
        controller = Controller(settings, client, kube, view, ledger, metrics, None, supervisor)
        if not worker:
            yield controller
            return
        if upstream is not None:
            recorder = controller.upstream = upstream_recorder(kube, view, ledger, upstream)
            metrics.watch_upstream(lambda: recorder.stats)
            supervisor.spawn_thread("upstream-preemptions", recorder.run)
        activities = PreemptionActivities(
            kube,
            view,
            ledger,
            identity=settings.identity,
            planner_args=planner_args(settings),
            evictions_per_minute=settings.evictions_per_minute,
            inputs_max_bytes=settings.decision_inputs_max_bytes,
            inputs_retention_days=settings.decision_inputs_retention_days,
        )
        # One client for the worker and the trigger loop, reading payloads with each
        # dataclass's hints resolved once (the SDK's default converter re-resolves them on
        # every read); it shares the connection, so eager starts still reach this worker.
        client = with_cached_hints(client)
        try:
            async with build_worker(client, activities, task_queue=settings.task_queue):
                trigger = TriggerLoop(view, client, settings, metrics, report=report)
                trigger.start(supervisor.spawn)
                controller.trigger = trigger
                if probes is not None:
                    probes.parked = lambda: parked_report(trigger)
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
            # No activity runs any more: the inputs recorder records what is queued (for a
            # bounded time) and its thread stops, before the ledger is disposed of.
            await asyncio.to_thread(activities.close)
    finally:
        supervisor.stopping()
        if owned is not None:
            owned.close()
        if controller is not None and controller.upstream is not None:
            controller.upstream.stop()
        view.stop()
        await supervisor.stop()
        if probes is not None and owned is None:
            probes.health = lambda: (True, "ok")
            probes.readiness = lambda: (False, "stopping")
            probes.parked = list

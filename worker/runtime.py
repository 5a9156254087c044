"""A running controller: the cluster view, the Temporal worker, the trigger loop and the
HTTP endpoints, assembled from connections already made, started in order and stopped in
reverse (the connections are `connections`, the supervision `supervisor`, the endpoints
`probes`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Collection, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine
from temporalio.client import Client

from preemptctl.activities.view_channel import ServedOnceReady, ViewChannelServer
from preemptctl.kube.client import KubeClient
from preemptctl.kube.conditions import DISRUPTION_TARGET, PREEMPTION_BY_SCHEDULER
from preemptctl.kube.reflector import POD
from preemptctl.kube.upstream_events import (
    DEFAULT_SCHEDULER,
    DisruptionWitness,
    ShadowView,
    UpstreamIndex,
    UpstreamRecorder,
)
from preemptctl.kube.view import ClusterView, PodListener
from preemptctl.ledger.errors import LedgerError
from preemptctl.ledger.upstream import append_upstream
from preemptctl.preemption.objects import Pod
from preemptctl.worker.config import Settings
from preemptctl.worker.connections import StartupError
from preemptctl.worker.metrics import Metrics
from preemptctl.worker.probes import ProbeServer, loop_answers, open_probe_server
from preemptctl.worker.starter import Starts
from preemptctl.worker.supervisor import Supervisor
from preemptctl.worker.temporal_worker import (
    Role,
    build_worker,
    preemption_activities,
    with_cached_hints,
)
from preemptctl.worker.trigger import Reporter, TriggerLoop
from preemptctl.worker.workflow_processes import Forked, WorkflowProcesses

log = logging.getLogger("preemptctl")


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


def over_cap(view: ClusterView) -> tuple[dict[str, int], dict[str, int]]:
    """The view's pods beyond the caps, by field: held now, and read since the start."""
    with view.read() as snapshot:
        return snapshot.over_cap_pods(), dict(snapshot.over_cap_total)


def describe_sync(view: ClusterView) -> str:
    """One line per kind: objects listed and seconds, for /readyz and the logs."""
    lines = []
    for kind, progress in view.sync_progress().items():
        state = f"synced in {progress['seconds']:g}s" if progress["synced"] else "listing"
        if progress.get("error"):
            state += f" ({progress['error']})"
        lines.append(f"{kind}: {progress['listed']} listed, {state}")
    return "\n".join(lines)


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
    # The workflow processes beside this one, when the replica runs any.
    processes: WorkflowProcesses | None = None
    # Shadow mode only: kube-scheduler's Preempted Events, recorded for `preemptctl compare`.
    upstream: UpstreamRecorder | None = None


def witness_listener(witness: DisruptionWitness) -> PodListener:
    """The view's pod watch, told to `witness`: a pod the scheduler marked as its victim
    (DisruptionTarget, PreemptionByScheduler) is remembered with its node, so an Event read
    after the victim is gone can still be confirmed. The witness reads a pod as the API
    server writes it, the view hands over the pod it decoded: the pod is restated as the
    little the witness checks (identity, node, the mark), for marked pods only."""

    def saw(event_type: str, uid: str, pod: Pod | None) -> None:
        if pod is None or not pod.disrupted_by_scheduler:
            return
        mark = {"type": DISRUPTION_TARGET, "status": "True", "reason": PREEMPTION_BY_SCHEDULER}
        witness.saw(
            event_type,
            POD.name,
            {
                "metadata": {"uid": uid, "namespace": pod.namespace, "name": pod.name},
                "spec": {"nodeName": pod.node_name},
                "status": {"conditions": [mark]},
            },
        )

    return saw


def upstream_recorder(
    kube: KubeClient,
    view: ClusterView,
    ledger: Engine,
    index: UpstreamIndex | None = None,
    *,
    reporters: Collection[str] = (DEFAULT_SCHEDULER,),
) -> UpstreamRecorder:
    """The recorder of kube-scheduler's preemptions: each into `upstream_preemptions`, its
    preemptor named from the view when the view knows it. Only Events that one of
    `reporters` (the worker's `scheduler_names`) reported are believed, each borne out by
    the cluster: the victim as the API server has it now, or, once it is gone, as the view's
    pod watch saw it marked (a `DisruptionWitness` subscribed to the view here)."""
    witness = DisruptionWitness()
    saw = witness_listener(witness)
    view.subscribe(saw)
    # The list the view synced from reaches no listener: the victims already marked in it
    # are told to the witness now (after subscribing, so none falls between the two).
    with ClusterView.read(view) as snapshot:
        marked = [(uid, pod) for uid, pod in snapshot.pods.items() if pod.disrupted_by_scheduler]
    for uid, pod in marked:
        saw("ADDED", uid, pod)

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
        reporters=reporters,
        name_of=name_of,
        uid_of=uid_of,
        index=index,
        witness=witness,
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
    recheck_parked_every: float | None = None,
    workflow_processes: int = 0,
    forked: Sequence[Forked] = (),
) -> AsyncIterator[Controller]:
    """The view synced, the Temporal worker polling and the trigger loop running (unless
    `worker` is False); on exit, the trigger stops, the worker drains, the view stops.

    The view's reflectors, the probe server and the trigger loop run under one `Supervisor`;
    in shadow mode (`settings.dry_run`) so does the recorder of kube-scheduler's own
    preemptions (its `Preempted` Events into `upstream_preemptions`, for `compare`).
    `probes` is a server the caller started (and closes); else one is opened here when
    `serve_probes`. `recheck_parked_every`: how often the trigger looks for a run a person
    started for a parked pod (`TriggerLoop`; its default when None).

    With `workflow_processes` (docs/scale-out.md), the workflows and their local activities
    run in that many processes of their own (`WorkflowProcesses`, supervised here as well),
    and this process's worker polls the regular activities only (the select, beside the
    view): /readyz then also waits for one of them to poll, /metrics serves them all, and
    on exit they drain (SIGTERM) after the trigger stops and before this worker does.
    `forked`: those `preemptctl worker` forked at start-up (`fork_workflow_processes`)."""
    metrics = metrics or (probes.metrics if probes is not None else Metrics())
    supervisor = Supervisor(metrics)
    loop = asyncio.get_running_loop()

    def rejected(kind: str) -> None:
        metrics.rejected_objects.labels(kind).inc()

    # In shadow mode every read of the view shows kube-scheduler's victims as still running
    # (`ShadowView`), so a dry run decided after upstream acted is still comparable.
    upstream = UpstreamIndex() if settings.dry_run and worker else None
    view = (
        ShadowView(kube, upstream, on_rejected=rejected, **settings.view_options())
        if upstream is not None
        else ClusterView(kube, on_rejected=rejected, **settings.view_options())
    )
    metrics.watch_view(view.reflector_stats)
    metrics.watch_caps(lambda: over_cap(view))
    metrics.watch_ledger(ledger)
    view.start(supervisor.spawn_thread)
    # The workflow processes need no view: they start now, while it syncs (their fork
    # server's imports take seconds on a busy machine).
    processes: WorkflowProcesses | None = None
    served = ServedOnceReady()
    channel: ViewChannelServer | None = None
    if workflow_processes and worker:
        channel = ViewChannelServer(served)
        channel.start()
        processes = WorkflowProcesses(
            settings, workflow_processes, metrics, forked=forked, view_channel=channel.address
        )
        processes.prepare()
        processes.start(supervisor.spawn)
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
        if processes is not None and not processes.ready():
            return False, "no workflow process polls yet\n" + processes.describe()
        found = "\n" + processes.describe() if processes is not None else ""
        return True, "ready\n" + describe_sync(view) + found

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
        controller = Controller(
            settings, client, kube, view, ledger, metrics, None, supervisor, processes
        )
        if not worker:
            yield controller
            return
        if upstream is not None:
            recorder = controller.upstream = upstream_recorder(
                kube, view, ledger, upstream, reporters=settings.scheduler_names
            )
            metrics.watch_upstream(lambda: recorder.stats)
            supervisor.spawn_thread("upstream-preemptions", recorder.run)
        activities = preemption_activities(settings, kube, view, ledger)
        if activities.decisions.engine is not ledger:  # the decisions' own pool, timed too
            metrics.watch_ledger(activities.decisions.engine)
        try:
            await asyncio.to_thread(activities.decisions.prime)
        except LedgerError as error:  # the first decision reads them all instead
            log.warning("could not read the open claims ahead of the first decision: %s", error)
        served.ready(activities.serve)
        # One client for the worker and the trigger loop, reading payloads with each
        # dataclass's hints resolved once (the SDK's default converter re-resolves them on
        # every read); it shares the connection, so eager starts still reach this worker.
        client = with_cached_hints(client)
        role = Role.ACTIVITIES if processes is not None else Role.ALL
        try:
            async with build_worker(client, activities, task_queue=settings.task_queue, role=role):
                trigger = TriggerLoop(
                    view,
                    client,
                    settings,
                    metrics,
                    report=report,
                    recheck_parked_every=recheck_parked_every,
                    # Eager: the first workflow task comes back in the start's answer, to
                    # the worker that runs the workflows: this process's, or handed to a
                    # workflow process to start there (`worker.starter.Starts`).
                    starts=Starts(
                        client,
                        settings.task_queue,
                        eager=processes is None,
                        workflow_processes=channel,
                    ),
                    ledger=ledger,
                )
                trigger.start(supervisor.spawn)
                controller.trigger = trigger
                if probes is not None:
                    probes.parked = lambda: parked_report(trigger)
                log.info(
                    "worker ready: task queue %s, %s, %s",
                    settings.task_queue,
                    "dry run (shadow mode)" if settings.dry_run else "preempting",
                    f"{workflow_processes} workflow processes"
                    if workflow_processes
                    else "workflows in this process",
                )
                try:
                    yield controller
                finally:
                    await trigger.stop(drain=False)
                    if processes is not None:
                        await processes.stop()  # before this worker: they may still decide
        finally:
            # No activity runs any more: the inputs recorder records what is queued (for a
            # bounded time) and its thread stops, before the ledger is disposed of.
            await asyncio.to_thread(activities.close)
    finally:
        supervisor.stopping()
        if processes is not None:
            await processes.stop()  # a no-op when stopped above
        if channel is not None:
            channel.close()
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

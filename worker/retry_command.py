"""`preemptctl retry NS/NAME | PREEMPTION-ID [--reason TEXT] [--dry-run]`: run a failed or
aborted preemption again, on the cluster as it is now.

The mechanism is a new run under the same workflow ID, not a Temporal reset: the new run
decides afresh from the current cluster (the old decision may name pods that are gone), its
history is its own (the failed run stays in the UI and in the ledger as the earlier
attempt), and its first step appends `retried` (by a person, why, after which run). The
trigger loop notices the newer run and un-parks the pod.

The worker's trigger loop signals the new run `preemptor_bound` when it sees the (parked)
pod bound, as it signals its own runs; in case no worker's loop is watching, the run is
also started polling the pod every `RETRY_POLL_SECONDS` instead of the trigger's 30 s, so
its end trails the bind by seconds, not half a minute.

It refuses, in one line and without starting anything, when there is nothing to retry: no
preemption of that pod on record, a run still open, the preemptor gone (or replaced by a
new pod under its name) or already bound to a node.

The new run behaves as the settings say now (`worker.starter.preemption_request`: dry or
acting, eviction, waits, timeouts, local activities), never as the failed run was told: an
operator who handed preemption back to kube-scheduler (PREEMPT_DRY_RUN=true) gets a dry
run. From the failed run it keeps only what names the preemption (the pod, its strategy,
the trigger's reason); from the person, who and why. (The worker refuses to write when it
runs dry in any case: see `activities.preemption`.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from typing import Any
from urllib.parse import quote

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.common import (
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.service import RPCError, RPCStatusCode

from preemptctl.kube.client import KubeClient, connect
from preemptctl.kube.pods import Presence, get_pod
from preemptctl.kube.results import KubeCallError
from preemptctl.preemption.decision import PodRef
from preemptctl.preemption.names import pod_key_problem
from preemptctl.worker.config import ConfigError, Settings, load_settings
from preemptctl.worker.connections import StartupError, TemporalUnreachableError, connect_temporal
from preemptctl.worker.errors import Unavailable, UsageError
from preemptctl.worker.starter import preemption_request, search_attributes_at_start
from preemptctl.workflows.contract import PreemptionRequest, workflow_id_for
from preemptctl.workflows.preemption import PreemptionWorkflow

WORKFLOW_ID = re.compile(r"^preemption-[a-z0-9.-]+$")
RETRY_POLL_SECONDS = 5.0  # how often a retried run looks whether its preemptor is bound


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "retry",
        help="run a failed or aborted preemption again, on the cluster as it is now",
        description="Start a new run of a preemption that failed or was aborted (by the "
        "preemptor's namespace/name, or by its preemption ID, the Temporal workflow ID). The "
        "new run decides afresh and appends `retried` to the ledger. Refuses when the pod is "
        "bound or gone, or a run is still open.",
    )
    parser.add_argument("target", metavar="NS/NAME|PREEMPTION-ID")
    parser.add_argument("--reason", default="", help="why, for the ledger's `retried` event")
    parser.add_argument(
        "--dry-run", action="store_true", help="say what would be started, start nothing"
    )
    parser.add_argument("--config", metavar="FILE", help="settings file (YAML); or $PREEMPT_CONFIG")
    parser.add_argument("--temporal-address", metavar="HOST:PORT", help="Temporal frontend")
    parser.add_argument("--temporal-namespace", metavar="NAMESPACE", help="Temporal namespace")
    parser.add_argument("--kubeconfig", metavar="FILE", help="the cluster (default: $KUBECONFIG)")
    parser.add_argument(
        "-o", "--output", choices=("text", "json"), default="text", help="text (default) or json"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(
            args.config,
            {
                "temporal_address": args.temporal_address,
                "temporal_namespace": args.temporal_namespace,
                "kubeconfig": args.kubeconfig,
            },
        )
    except ConfigError as error:
        raise UsageError(str(error)) from None
    outcome = asyncio.run(retry(settings, args.target, args.reason, dry_run=args.dry_run))
    if args.output == "json":
        print(json.dumps(outcome, indent=2))
    else:
        verb = "would start" if args.dry_run else "started"
        print(f"{verb} a new run of {outcome['preemptionId']} for {outcome['preemptor']}")
        print(f"  after run   {outcome['previousRunId']} ({outcome['previousStatus']})")
        if not args.dry_run:
            print(f"  new run     {outcome['runId']}")
        if outcome["dryRun"]:
            print("  as a dry run: the settings say PREEMPT_DRY_RUN=true (nothing is touched)")
        print(f"  see         {outcome['link']}")
    return 0


async def retry(settings: Settings, target: str, reason: str, *, dry_run: bool) -> dict[str, Any]:
    """Check there is something to retry, then (unless `dry_run`) start the new run."""
    kube = _cluster(settings)
    try:
        workflow_id = await asyncio.to_thread(_workflow_id_of, kube, target)
    except KubeCallError as error:
        raise Unavailable(f"cannot read pod {target}: {error}") from None
    client = await _connect(settings)
    handle: WorkflowHandle[Any, Any] = client.get_workflow_handle(workflow_id)
    try:
        description = await handle.describe()
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            raise UsageError(f"no preemption {workflow_id} on record: nothing to retry") from None
        raise Unavailable(f"Temporal refused to describe {workflow_id}: {error}") from None
    status = description.status
    if status in (WorkflowExecutionStatus.RUNNING, None):
        raise UsageError(
            f"{workflow_id} has a run still open ({description.run_id}): nothing to retry; "
            "wait for it, or cancel it in the Temporal UI first"
        )
    previous = await started_with(client, workflow_id, description.run_id or "")
    pod = previous.preemptor
    _refuse_if_done(kube, pod.namespace, pod.name, pod.uid)
    request = preemption_request(
        pod,
        settings,
        reason=previous.reason,
        strategy=previous.strategy,
        started_by="person",
        retry_reason=reason or "a person ran preemptctl retry",
        scheduled_poll_seconds=RETRY_POLL_SECONDS,
    )
    outcome: dict[str, Any] = {
        "preemptionId": workflow_id,
        "preemptor": pod.key,
        "previousRunId": description.run_id,
        "previousStatus": status.name.lower(),
        "runId": None,
        "dryRun": request.dry_run,
        "link": _link(settings, workflow_id, None),
    }
    if dry_run:
        return outcome
    new = await client.start_workflow(
        PreemptionWorkflow.run,
        request,
        id=workflow_id,
        task_queue=description.task_queue or settings.task_queue,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
        search_attributes=search_attributes_at_start(request),
        static_summary=f"Preempt for {pod.key} (priority {pod.priority}), retried",
        static_details=f"Retried by a person after run {description.run_id}: {reason or '-'}"
        + ("; dry run (PREEMPT_DRY_RUN=true)" if request.dry_run else ""),
    )
    outcome["runId"] = new.result_run_id
    outcome["link"] = _link(settings, workflow_id, new.result_run_id)
    return outcome


async def _connect(settings: Settings) -> Client:
    """Temporal, connected as the worker connects; unreachable is exit 1, bad TLS input 2."""
    try:
        return await connect_temporal(settings)
    except TemporalUnreachableError as error:
        raise Unavailable(str(error)) from None
    except StartupError as error:
        raise UsageError(str(error)) from None


def _workflow_id_of(kube: KubeClient, target: str) -> str:
    """The preemption ID named, or that of the pod named `NS/NAME` as it is now (its UID is
    in the ID: a pod recreated under the same name is another preemption)."""
    if WORKFLOW_ID.match(target) and "/" not in target:
        return target
    namespace, _, name = target.partition("/")
    if not namespace or not name or "/" in name:
        raise UsageError(f"expected NAMESPACE/NAME or a preemption ID, not {target!r}")
    if (problem := pod_key_problem(namespace, name)) is not None:
        raise UsageError(problem)
    uid = get_pod(kube, PodRef(namespace, name, uid="")).uid  # whatever pod has the name now
    if uid is None:
        raise UsageError(f"{target} is gone: nothing to retry")
    return workflow_id_for(namespace, name, uid)


def _cluster(settings: Settings) -> KubeClient:
    try:
        return connect(settings.kubeconfig or None, context=settings.kube_context or None)
    except Exception as error:
        raise Unavailable(f"cannot reach the cluster: {error}") from None


async def started_with(client: Client, workflow_id: str, run_id: str) -> PreemptionRequest:
    """The input a run was started with (its first history event)."""
    history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            payloads = event.workflow_execution_started_event_attributes.input.payloads
            (request,) = await client.data_converter.decode(payloads, [PreemptionRequest])
            if isinstance(request, PreemptionRequest):
                return request
    raise UsageError(f"{workflow_id}: its history has no start event to retry from")


def _refuse_if_done(kube: KubeClient, namespace: str, name: str, uid: str) -> None:
    """Refuse when the preemptor no longer needs room: gone, replaced, or bound."""
    try:
        lookup = get_pod(kube, PodRef(namespace, name, uid))
    except KubeCallError as error:
        raise Unavailable(f"cannot read pod {namespace}/{name}: {error}") from None
    key = f"{namespace}/{name}"
    if lookup.presence is Presence.GONE:
        raise UsageError(f"{key} is gone: nothing to retry")
    if lookup.presence is Presence.REPLACED:
        raise UsageError(f"{key} is now another pod (uid changed): nothing to retry")
    node = lookup.node_name
    if node:
        raise UsageError(f"{key} is already bound to {node}: nothing to retry")


def _link(settings: Settings, workflow_id: str, run_id: str | None) -> str:
    """Where to look: the Temporal UI's page when its address is known, else the CLI."""
    if settings.temporal_ui_url:
        return ui_link(settings.temporal_ui_url, settings.temporal_namespace, workflow_id, run_id)
    return f"temporal workflow describe --workflow-id {workflow_id}"


def ui_link(ui_url: str, namespace: str, workflow_id: str, run_id: str | None = None) -> str:
    """The Temporal UI's page of a preemption: of one run, or (no `run_id`) of its latest."""
    path = f"/namespaces/{quote(namespace)}/workflows/{quote(workflow_id)}"
    return ui_url.rstrip("/") + path + (f"/{run_id}/history" if run_id else "")

"""`preemptctl retry NS/NAME | --pod-group NS/NAME | PREEMPTION-ID [--reason TEXT] [--dry-run]`:
run a failed or aborted preemption again, on the cluster as it is now: a pod's
(`PreemptionWorkflow`), or a pod group's (a gang's, `GroupPreemptionWorkflow`).

The target is a pod (`NS/NAME`), a pod group (`--pod-group NS/NAME`: a PodGroup, or a group
the `pod_group_label` setting names), or either's preemption ID, the Temporal workflow ID
(`preemption-...` or `group-preemption-...`). `NS/NAME` naming no pod but a pod group is
that group, as `history` and `explain` take a name (a pod of that name wins: `--pod-group`
says which is meant). A pod that belongs to a gang has no preemption of its own: its group
has one, and the refusal for the pod says which `--pod-group` to name.

The mechanism is a new run under the same workflow ID, not a Temporal reset: the new run
decides afresh from the current cluster (the old decision may name pods that are gone), its
history is its own (the failed run stays in the UI and in the ledger as the earlier
attempt), and its first step appends `retried` (by a person, why, after which run). The
trigger loop notices the newer run and un-parks the pod or group.

The worker's trigger loop signals the new run when it sees the (parked) pod bound
(`preemptor_bound`), or a member of the group (`member_bound`), as it signals its own runs;
in case no worker's loop is watching, the run is also started polling every
`RETRY_POLL_SECONDS` instead of the trigger's 30 s, so its end trails the bind by seconds,
not half a minute.

It refuses, in one line and without starting anything, when there is nothing to retry: no
preemption of that pod or group on record, a run still open, the preemptor gone (or
replaced by a new pod or PodGroup under its name), a pod already bound to a node, or a group
with no member left pending (placed: every member bound; or none left at all). The group's
test is the one its run would stop on (`preemption.standing.reason_to_stop_group`), made
from the API server's answers: the run would only abort.

The new run behaves as the settings say now (`worker.starter.preemption_request`,
`group_preemption_request`: dry or acting, eviction, waits, timeouts, local activities),
never as the failed run was told: an operator who handed preemption back to kube-scheduler
(PREEMPT_DRY_RUN=true) gets a dry run. From the failed run it keeps only what names the
preemption (the pod or group, a pod's strategy, the trigger's reason); from the person, who
and why. (The worker refuses to write when it runs dry in any case: see
`activities.preemption`.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from dataclasses import dataclass
from typing import Any, TypeVar

from kubernetes.client.exceptions import ApiException
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHandle,
)
from temporalio.common import (
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.service import RPCError, RPCStatusCode

from preemptctl.kube.classify import Call, api_status, classify_status
from preemptctl.kube.client import KubeClient
from preemptctl.kube.pods import Presence, get_pod, get_pod_group, path_segment
from preemptctl.kube.results import KubeCallError
from preemptctl.preemption.decision import PodRef
from preemptctl.preemption.decode import decode_pod
from preemptctl.preemption.errors import PlannerInputError
from preemptctl.preemption.group_decision import GroupRef, label_group_uid
from preemptctl.preemption.names import NameKind, name_problem, pod_key_problem
from preemptctl.preemption.objects import Pod
from preemptctl.preemption.standing import GroupStanding, Standing, group_standing_of
from preemptctl.worker.config import ConfigError, Settings, load_settings
from preemptctl.worker.connections import (
    StartupError,
    TemporalUnreachableError,
    connect_cluster,
    connect_temporal,
)
from preemptctl.worker.errors import Unavailable, UsageError
from preemptctl.worker.starter import (
    group_preemption_request,
    group_search_attributes_at_start,
    preemption_request,
    search_attributes_at_start,
)
from preemptctl.worker.ui_links import run_page
from preemptctl.workflows.contract import (
    GroupPreemptionRequest,
    PreemptionRequest,
    group_workflow_id_for,
    workflow_id_for,
)
from preemptctl.workflows.group_preemption import GroupPreemptionWorkflow
from preemptctl.workflows.preemption import PreemptionWorkflow

WORKFLOW_ID = re.compile(r"^preemption-[a-z0-9.-]+$")
GROUP_WORKFLOW_ID = re.compile(r"^group-preemption-[a-z0-9.-]+$")
RETRY_POLL_SECONDS = 5.0  # how often a retried run looks whether its preemptor is bound
# A label's value, as the API server checks it (IsValidLabelValue): what a label-named
# group's name may be besides a PodGroup name.
LABEL_VALUE = re.compile(r"^(?=.{1,63}$)[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
MEMBERS_PAGE = "500"  # pods per page when listing a group's members

RequestT = TypeVar("RequestT", PreemptionRequest, GroupPreemptionRequest)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "retry",
        help="run a failed or aborted preemption (of a pod or a pod group) again, on the "
        "cluster as it is now",
        description="Start a new run of a preemption that failed or was aborted: a pod's "
        "(by the preemptor's namespace/name), a pod group's (by --pod-group namespace/name), "
        "or either by its preemption ID, the Temporal workflow ID (preemption-... or "
        "group-preemption-...). The new run decides afresh and appends `retried` to the "
        "ledger. Refuses when a run is still open, the pod or group is gone or replaced, "
        "the pod is bound, or no member of the group is pending.",
    )
    parser.add_argument(
        "target",
        nargs="?",
        metavar="NS/NAME|PREEMPTION-ID",
        help="the preemptor pod, or a pod's or group's preemption ID",
    )
    parser.add_argument(
        "--pod-group",
        metavar="NS/NAME",
        help="the preemptor pod group instead (a PodGroup, or a group named by the "
        "pod_group_label setting)",
    )
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
    if (args.target is None) == (args.pod_group is None):
        raise UsageError(
            "name one preemption: a pod NS/NAME, --pod-group NS/NAME, or a preemption ID"
        )
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
    if args.pod_group is not None:
        target, pod_group = args.pod_group, True
    else:
        target, pod_group = args.target, False
    outcome = asyncio.run(
        retry(settings, target, args.reason, dry_run=args.dry_run, pod_group=pod_group)
    )
    if args.output == "json":
        print(json.dumps(outcome, indent=2))
    else:
        verb = "would start" if args.dry_run else "started"
        what = f"pod group {outcome['podGroup']}" if outcome["podGroup"] else outcome["preemptor"]
        print(f"{verb} a new run of {outcome['preemptionId']} for {what}")
        print(f"  after run   {outcome['previousRunId']} ({outcome['previousStatus']})")
        if outcome["podGroup"]:
            members = outcome["members"]
            print(f"  members     {members['pending']} pending, {members['bound']} bound")
        if not args.dry_run:
            print(f"  new run     {outcome['runId']}")
        if outcome["dryRun"]:
            print("  as a dry run: the settings say PREEMPT_DRY_RUN=true (nothing is touched)")
        print(f"  see         {outcome['link']}")
    return 0


@dataclass(frozen=True)
class _Target:
    """The preemption a person named: its workflow ID, and whether it is a group's."""

    workflow_id: str
    group: bool
    hint: str = ""  # added to "no preemption on record" (a gang member: name its group)


async def retry(
    settings: Settings, target: str, reason: str, *, dry_run: bool, pod_group: bool = False
) -> dict[str, Any]:
    """Check there is something to retry, then (unless `dry_run`) start the new run.

    `target`: a pod `NS/NAME` or a (pod or group) preemption ID; with `pod_group`, a pod
    group's `NS/NAME`."""
    key = _key_of(target, pod_group)  # malformed: refused before any server is asked
    kube = _cluster(settings)
    noun = "pod group" if pod_group else "pod"
    try:
        named = await asyncio.to_thread(_target_of, kube, settings, target, key, pod_group)
    except KubeCallError as error:
        raise Unavailable(f"cannot read {noun} {target}: {error}") from None
    client = await _connect(settings)
    description = await _closed_run(client, named)
    if named.group:
        return await _retry_group(client, kube, settings, description, reason, dry_run=dry_run)
    return await _retry_pod(client, kube, settings, description, reason, dry_run=dry_run)


async def _retry_pod(
    client: Client,
    kube: KubeClient,
    settings: Settings,
    description: WorkflowExecutionDescription,
    reason: str,
    *,
    dry_run: bool,
) -> dict[str, Any]:
    workflow_id, run_id = description.id, description.run_id
    previous = await started_with(client, workflow_id, run_id)
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
    outcome = _outcome(settings, description, pod.key, request.dry_run)
    if dry_run:
        return outcome
    new_run = await _start_again(
        client,
        PreemptionWorkflow.run,
        request,
        description,
        settings,
        search_attributes_at_start(request),
        summary=f"Preempt for {pod.key} (priority {pod.priority}), retried",
        details=_details(run_id, reason, request.dry_run),
    )
    return _started(settings, outcome, new_run)


async def _retry_group(
    client: Client,
    kube: KubeClient,
    settings: Settings,
    description: WorkflowExecutionDescription,
    reason: str,
    *,
    dry_run: bool,
) -> dict[str, Any]:
    """As `_retry_pod`, for a pod group: refused unless the group is still there (same UID)
    with a member pending; started as the trigger starts a group's run
    (`group_preemption_request`), by a person."""
    workflow_id, run_id = description.id, description.run_id
    previous = await group_started_with(client, workflow_id, run_id)
    group = previous.group
    try:
        standing = await asyncio.to_thread(_group_standing, kube, settings, group)
    except KubeCallError as error:
        raise Unavailable(f"cannot read pod group {group.key}: {error}") from None
    _refuse_if_placed(group, standing)
    request = group_preemption_request(
        group,
        settings,
        reason=previous.reason,
        started_by="person",
        retry_reason=reason or "a person ran preemptctl retry",
    )
    request.scheduled_poll_seconds = RETRY_POLL_SECONDS
    outcome = _outcome(settings, description, group.key, request.dry_run)
    outcome["podGroup"] = group.key
    outcome["members"] = {"pending": standing.pending, "bound": len(standing.bound)}
    if dry_run:
        return outcome
    kind = "label-named group" if group.label_named else "pod group"
    new_run = await _start_again(
        client,
        GroupPreemptionWorkflow.run,
        request,
        description,
        settings,
        group_search_attributes_at_start(request),
        summary=f"Preempt for {kind} {group.key} (priority {group.priority}), retried",
        details=_details(run_id, reason, request.dry_run),
    )
    return _started(settings, outcome, new_run)


async def _start_again(
    client: Client,
    run: Any,
    request: PreemptionRequest | GroupPreemptionRequest,
    description: WorkflowExecutionDescription,
    settings: Settings,
    search_attributes: TypedSearchAttributes,
    *,
    summary: str,
    details: str,
) -> str | None:
    """A new run under the closed run's workflow ID and on its task queue (a run still
    open makes the start fail: the check before it may have lost a race); its run ID."""
    new = await client.start_workflow(
        run,
        request,
        id=description.id,
        task_queue=description.task_queue or settings.task_queue,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
        search_attributes=search_attributes,
        static_summary=summary,
        static_details=details,
    )
    return new.result_run_id


def _outcome(
    settings: Settings, description: WorkflowExecutionDescription, preemptor: str, dry: bool
) -> dict[str, Any]:
    """What is (or would be) started, before it is: `runId` None until it is."""
    status = description.status
    return {
        "preemptionId": description.id,
        "preemptor": preemptor,
        "podGroup": None,
        "previousRunId": description.run_id,
        "previousStatus": status.name.lower() if status is not None else "unknown",
        "runId": None,
        "dryRun": dry,
        "link": _link(settings, description.id, description.run_id),
    }


def _started(settings: Settings, outcome: dict[str, Any], run_id: str | None) -> dict[str, Any]:
    outcome["runId"] = run_id
    outcome["link"] = _link(settings, outcome["preemptionId"], run_id)
    return outcome


def _details(previous_run_id: str, reason: str, dry_run: bool) -> str:
    return f"Retried by a person after run {previous_run_id}: {reason or '-'}" + (
        "; dry run (PREEMPT_DRY_RUN=true)" if dry_run else ""
    )


async def _closed_run(client: Client, named: _Target) -> WorkflowExecutionDescription:
    """The latest run of the named preemption, once it is closed; refused when there is none
    on record or it is still open."""
    workflow_id = named.workflow_id
    handle: WorkflowHandle[Any, Any] = client.get_workflow_handle(workflow_id)
    try:
        description = await handle.describe()
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            what = "group preemption" if named.group else "preemption"
            raise UsageError(
                f"no {what} {workflow_id} on record: nothing to retry{named.hint}"
            ) from None
        raise Unavailable(f"Temporal refused to describe {workflow_id}: {error}") from None
    if description.status in (WorkflowExecutionStatus.RUNNING, None):
        raise UsageError(
            f"{workflow_id} has a run still open ({description.run_id}): nothing to retry; "
            "wait for it, or cancel it in the Temporal UI first"
        )
    return description


async def _connect(settings: Settings) -> Client:
    """Temporal, connected as the worker connects; unreachable is exit 1, bad TLS input 2."""
    try:
        return await connect_temporal(settings)
    except TemporalUnreachableError as error:
        raise Unavailable(str(error)) from None
    except StartupError as error:
        raise UsageError(str(error)) from None


def _key_of(target: str, pod_group: bool) -> tuple[str, str] | None:
    """`target`'s namespace and name; None for a preemption ID (never with `pod_group`)."""
    if not pod_group and (GROUP_WORKFLOW_ID.match(target) or WORKFLOW_ID.match(target)):
        return None
    namespace, _, name = target.partition("/")
    if not namespace or not name or "/" in name:
        if pod_group:
            raise UsageError(f"expected NAMESPACE/NAME after --pod-group, not {target!r}")
        raise UsageError(f"expected NAMESPACE/NAME or a preemption ID, not {target!r}")
    return namespace, name


def _target_of(
    kube: KubeClient, settings: Settings, target: str, key: tuple[str, str] | None, pod_group: bool
) -> _Target:
    """The preemption named: by its ID (`key` None), or that of the pod (or, `pod_group`,
    the pod group) named `key` as it is now (its UID is in the ID: a pod or PodGroup
    recreated under the same name is another preemption)."""
    if key is None:
        return _Target(target, group=GROUP_WORKFLOW_ID.match(target) is not None)
    namespace, name = key
    if pod_group:
        return _group_target(kube, settings, namespace, name)
    if (problem := pod_key_problem(namespace, name)) is not None:
        raise UsageError(problem)
    lookup = get_pod(kube, PodRef(namespace, name, uid=""))  # whatever pod has the name now
    uid = lookup.uid
    if uid is None:  # no pod by that name: a pod group's, as `explain` and `history` take it
        found = _group_named(kube, settings, namespace, name)
        if found is None:
            raise UsageError(
                f"{target} is gone (no pod or pod group by that name): nothing to retry"
            )
        return found
    group = _group_of(lookup.pod or {}, settings)
    hint = f"; it is a member of pod group {group}: name that (--pod-group {group})"
    return _Target(workflow_id_for(namespace, name, uid), group=False, hint=hint if group else "")


def _group_target(kube: KubeClient, settings: Settings, namespace: str, name: str) -> _Target:
    """The preemption of the group `namespace/name` as it is now (`_group_named`); refused
    when the name cannot be a group's, or no group has it."""
    label = settings.pod_group_label
    problem = name_problem(NameKind.NAMESPACE, namespace)
    if problem is None and (not label or not LABEL_VALUE.match(name)):
        problem = name_problem(NameKind.POD_GROUP, name)
    if problem is not None:
        raise UsageError(problem)
    found = _group_named(kube, settings, namespace, name)
    if found is None:
        raise UsageError(f"pod group {namespace}/{name} is gone: nothing to retry")
    return found


def _group_named(kube: KubeClient, settings: Settings, namespace: str, name: str) -> _Target | None:
    """The preemption of the group `namespace/name` as it is now: the PodGroup's by that
    name; else, with `pod_group_label` set, the group that label names (its UID is derived
    from the name: `label_group_uid`), when a pod carries it; None when there is neither."""
    if name_problem(NameKind.POD_GROUP, name) is None:
        found = get_pod_group(kube, GroupRef(namespace, name, uid=""))
        if found.group is not None:
            return _Target(group_workflow_id_for(namespace, name, found.group.uid), group=True)
    uid = label_group_uid(namespace, name)
    label = settings.pod_group_label
    if (
        label
        and LABEL_VALUE.match(name)
        and _members(kube, settings, GroupRef(namespace, name, uid))
    ):
        return _Target(group_workflow_id_for(namespace, name, uid), group=True)
    return None


def _group_of(pod: dict[str, Any], settings: Settings) -> str:
    """The group (`NS/NAME`) a pod belongs to, as the trigger reads it; "" for none (or a
    pod the planner cannot read)."""
    try:
        decoded = decode_pod(pod, kept_labels=tuple(filter(None, [settings.pod_group_label])))
    except PlannerInputError:
        return ""
    if decoded.group:
        return f"{decoded.namespace}/{decoded.group}"
    value = decoded.labels.get(settings.pod_group_label) if settings.pod_group_label else None
    return f"{decoded.namespace}/{value}" if value is not None else ""


def _cluster(settings: Settings) -> KubeClient:
    """The cluster's client. Nothing is asked of the server here: a configuration that cannot
    be loaded is a setting to fix (exit 2, as for the worker), never a failure to retry."""
    try:
        return connect_cluster(settings)
    except StartupError as error:
        found = str(error).rstrip(".")
        raise UsageError(f"{found}; name the cluster with --kubeconfig or KUBECONFIG") from None


async def started_with(client: Client, workflow_id: str, run_id: str) -> PreemptionRequest:
    """The input a pod preemption's run was started with (its first history event)."""
    return await _start_input(client, workflow_id, run_id, PreemptionRequest)


async def group_started_with(
    client: Client, workflow_id: str, run_id: str
) -> GroupPreemptionRequest:
    """The input a group preemption's run was started with (its first history event)."""
    return await _start_input(client, workflow_id, run_id, GroupPreemptionRequest)


async def _start_input(
    client: Client, workflow_id: str, run_id: str, kind: type[RequestT]
) -> RequestT:
    history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            payloads = event.workflow_execution_started_event_attributes.input.payloads
            (request,) = await client.data_converter.decode(payloads, [kind])
            if isinstance(request, kind):
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


def _refuse_if_placed(group: GroupRef, standing: GroupStanding) -> None:
    """Refuse when the group no longer needs room, as its run would find on its first step
    (`reason_to_stop_group` before a decision): gone, replaced, or no member pending."""
    key = group.key
    if standing.state is Standing.GONE:
        raise UsageError(f"pod group {key} is gone: nothing to retry")
    if standing.state is Standing.REPLACED:
        raise UsageError(f"pod group {key} is now another group (uid changed): nothing to retry")
    if standing.pending:
        return
    if standing.bound:
        nodes = sorted(set(standing.bound.values()))
        raise UsageError(
            f"pod group {key} is already placed: all {len(standing.bound)} member(s) bound "
            f"(to {', '.join(nodes)}): nothing to retry"
        )
    raise UsageError(f"pod group {key} has no member left: nothing to retry")


def _group_standing(kube: KubeClient, settings: Settings, group: GroupRef) -> GroupStanding:
    """Where the group stands, from the API server (no view here): its PodGroup (a group a
    label names has none: it is there while a pod carries the label) and its members."""
    members = _members(kube, settings, group)
    if group.label_named:
        exists = Standing.PENDING if members else Standing.GONE
    else:
        exists = get_pod_group(kube, group).standing
    return group_standing_of(exists, members)


def _members(kube: KubeClient, settings: Settings, group: GroupRef) -> list[Pod]:
    """The pods of `group` in its namespace, page by page, as the trigger counts them: for a
    PodGroup, those naming it (`spec.schedulingGroup`); for a group a label names, those
    carrying the label with its name and naming no PodGroup. Pods the planner cannot read
    are left out, as the worker's view leaves them out."""
    label = settings.pod_group_label
    if group.label_named and not label:
        return []
    what = f"the pods of pod group {group.key}"
    path = f"/api/v1/namespaces/{path_segment(NameKind.NAMESPACE, group.namespace, what)}/pods"
    query = {"limit": MEMBERS_PAGE}
    if group.label_named:
        query["labelSelector"] = f"{label}={group.name}"
    kept = tuple(filter(None, [label]))
    members: list[Pod] = []
    call = Call("list", "pods", f"in namespace {group.namespace}")
    while True:
        try:
            page = kube.request("GET", path, call, query=query)
        except ApiException as error:
            raise classify_status(api_status(error), call) from None
        for item in page.get("items") or []:
            try:
                pod = decode_pod(item, kept_labels=kept)
            except PlannerInputError:
                continue
            if pod.group == ("" if group.label_named else group.name):
                members.append(pod)
        cont = (page.get("metadata") or {}).get("continue")
        if not cont:
            return members
        query = {**query, "continue": str(cont)}


def _link(settings: Settings, workflow_id: str, run_id: str | None) -> str:
    """Where to look: the Temporal UI's page when its address is known, else the CLI."""
    if settings.temporal_ui_url:
        return ui_link(settings.temporal_ui_url, settings.temporal_namespace, workflow_id, run_id)
    return f"temporal workflow describe --workflow-id {workflow_id}"


def ui_link(ui_url: str, namespace: str, workflow_id: str, run_id: str | None = None) -> str:
    """The Temporal UI's page of a preemption: one run's story (`worker.ui_links`), or (no
    `run_id`) the workflow, which the UI opens at its latest run's event history."""
    return run_page(ui_url, namespace, workflow_id, run_id)

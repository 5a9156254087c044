"""The Temporal worker that runs preemption workflows and their activities in this process."""

from __future__ import annotations

import dataclasses
import typing
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from enum import StrEnum
from typing import Any, ClassVar

from sqlalchemy import Engine
from temporalio.client import Client
from temporalio.converter import (
    CompositePayloadConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
    JSONTypeConverter,
    value_to_type,
)
from temporalio.worker import PollerBehaviorAutoscaling, UnsandboxedWorkflowRunner, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from preemptctl.activities.preemption import PreemptionActivities
from preemptctl.activities.view_channel import ViewChannel
from preemptctl.kube.client import KubeClient
from preemptctl.kube.view import ClusterView
from preemptctl.preemption.default_preemption import PreemptionArgs
from preemptctl.worker.config import Settings
from preemptctl.workflows.failures import with_classified_failures
from preemptctl.workflows.group_preemption import GroupPreemptionWorkflow
from preemptctl.workflows.preemption import PreemptionWorkflow

DEFAULT_TASK_QUEUE = "preemptctl"

# Modules the workflow sandbox must not re-import per run: the activities' I/O libraries
# (imported only for the activity method references) and our own pure modules.
PASSTHROUGH_MODULES = (
    "kubernetes",
    "urllib3",
    "sqlalchemy",
    "psycopg",
    "orjson",
    "yaml",
    "preemptctl.activities",
    "preemptctl.deciding",
    "preemptctl.kube",
    "preemptctl.ledger",
    "preemptctl.preemption",
)


# The worker runs workflows outside the sandbox. The sandbox re-imports the workflow module
# for every run and goes through a proxy for every call into it: about 30 ms of worker CPU per
# preemption of the 180 ms it cost at 30/s (benchmarks/preemption_e2e.py). The workflow
# module imports only our pure modules and the activity contracts, and its determinism is
# checked under the sandbox by the tests (tests/workflows/test_runbook.py, test_replay.py)
# and by `preemptctl replay`, which keep `workflow_runner()`.
SANDBOXED = False


def workflow_runner() -> SandboxedWorkflowRunner:
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES)
    )


class DataclassHints(JSONTypeConverter):
    """Reads a dataclass from JSON as the SDK's `value_to_type` does, with each class's field
    types resolved once instead of on every payload.

    The SDK calls `typing.get_type_hints` for every dataclass it reads, and with postponed
    annotations that compiles each field's annotation string again: about 5% of the worker's
    CPU at 20 preemptions/s (every activity's input, every result the workflow reads, and
    each `PodRef` inside them). Only reading changes: what is written, and so the histories,
    stay byte for byte the same.

    One cache for the process: the SDK makes a payload converter per workflow run (its
    serialization context), and a cache per converter missed at each run's first reads. A
    class's fields never change, and the classes read are the few the workflow names."""

    _plans: ClassVar[dict[type, tuple[tuple[str, Any, bool], ...]]] = {}

    def to_typed_value(self, hint: type, value: Any) -> Any:
        if not (isinstance(hint, type) and dataclasses.is_dataclass(hint)):
            return JSONTypeConverter.Unhandled
        plan = self._plans.get(hint)
        if plan is None:
            hints = typing.get_type_hints(hint)
            plan = tuple((f.name, hints[f.name], f.init) for f in dataclasses.fields(hint))
            self._plans[hint] = plan
        if not isinstance(value, dict):
            raise TypeError(f"Cannot convert to dataclass {hint}, value is {type(value)} not dict")
        given: dict[str, Any] = {}
        later: dict[str, Any] = {}
        for name, field_type, init in plan:
            if name not in value:
                continue  # a missing required field fails in the constructor, as in the SDK
            try:
                converted = value_to_type(field_type, value[name], (self,))
            except Exception as error:
                raise TypeError(f"Failed converting field {name} on dataclass {hint}") from error
            (given if init else later)[name] = converted
        made = hint(**given)
        for name, converted in later.items():
            object.__setattr__(made, name, converted)
        return made


_HINTS = DataclassHints()


class _PayloadConverter(CompositePayloadConverter):
    """The SDK's default payload converters, JSON reading dataclasses with `DataclassHints`."""

    def __init__(self) -> None:
        hints = _HINTS
        super().__init__(
            *(
                JSONPlainPayloadConverter(custom_type_converters=[hints])
                if isinstance(converter, JSONPlainPayloadConverter)
                else converter
                for converter in DefaultPayloadConverter.default_encoding_payload_converters
            )
        )


def with_cached_hints(client: Client) -> Client:
    """`client` with `DataclassHints` in its JSON converter; `client` itself when it was
    given a payload converter of its own. The copy shares the connection, so a start that
    asks for eager dispatch through either still reaches this process's worker."""
    converter = client.data_converter
    if converter.payload_converter_class is not DefaultPayloadConverter:
        return client
    config = client.config()
    config["data_converter"] = dataclasses.replace(
        converter, payload_converter_class=_PayloadConverter
    )
    return Client(**config)


GRACEFUL_SHUTDOWN = timedelta(seconds=10)
"""How long a stopping worker lets in-flight steps finish before cancelling them. A step is
one short Kubernetes call or ledger append; ten seconds lets it end on its own rather than be
cancelled halfway and retried by the next worker. (Not zero also because Temporal's core
retries a cancelled local activity at once, sdk-rust#709. A hang once blamed on that was the
trigger loop's lost cancellation: see `preemptctl.worker.cancellation`.)"""


class Role(StrEnum):
    """What a process's worker polls for (docs/scale-out.md, "More than one interpreter")."""

    # Everything: the workflows, their local activities and the regular activities (the
    # select among them). One process per replica.
    ALL = "all"
    # The regular activities only: the select, which needs the cluster view, and every step
    # when `local_activities` is off. The process that holds the view, when workflow
    # processes run beside it.
    ACTIVITIES = "activities"
    # The workflows and their local activities (nominate, mark, delete, record the end),
    # and never a regular activity task: a workflow process, which has no view.
    WORKFLOWS = "workflows"


def build_worker(
    client: Client,
    activities: PreemptionActivities,
    *,
    task_queue: str = DEFAULT_TASK_QUEUE,
    role: Role = Role.ALL,
    max_concurrent_activities: int = 16,
    max_concurrent_local_activities: int = 48,
    max_pollers: int = 20,
    sandboxed: bool = SANDBOXED,
) -> Worker:
    """A worker for preemptions: the workflow (outside the sandbox unless `sandboxed`, see
    `SANDBOXED`), and the activities on a thread pool (the Kubernetes client and the ledger
    engine are synchronous).

    Activities and local activities share one thread pool, one thread per slot of either
    kind. The select activity holds its thread while it waits its turn to decide; with
    local activities (the trigger's default) it is the only activity, and its 16 slots
    leave the local activities (nominate, mark, delete, ...) threads of their own. When
    every thread was open to every step, a burst at 30/s filled them all with selects
    waiting their turn, the local activities queued behind them past their attempt
    timeout, and the machine sat idle while preemptions failed. Sixteen selects in flight
    are plenty: the decision path decides the queued ones together (up to 32 a hold).

    Pollers scale with the backlog, up to `max_pollers` per task kind: a burst of
    preemptions brings workflow and activity tasks faster than five long polls (the SDK's
    default) take them.

    Payloads are read with each dataclass's field types resolved once (`DataclassHints`).

    `role` splits the work between processes (`Role`): the select is a regular activity, so
    only a worker that polls regular activity tasks ever runs it, and that worker is the
    one beside the cluster view; a workflow process registers the activities only to run
    them locally (`no_remote_activities`). Nothing in the workflow changes: it schedules
    the select on its own task queue, as ever."""
    polls_workflows = role is not Role.ACTIVITIES
    polls_activities = role is not Role.WORKFLOWS
    threads = (max_concurrent_activities if polls_activities else 0) + (
        max_concurrent_local_activities if polls_workflows else 0
    )
    return Worker(
        # Failures the activities and workflows classified read in the UI without a trace.
        with_classified_failures(with_cached_hints(client)),
        task_queue=task_queue,
        workflows=[PreemptionWorkflow, GroupPreemptionWorkflow] if polls_workflows else [],
        activities=activities.all(),
        activity_executor=ThreadPoolExecutor(max_workers=threads, thread_name_prefix="activity"),
        max_concurrent_activities=max_concurrent_activities,
        max_concurrent_local_activities=max_concurrent_local_activities,
        no_remote_activities=not polls_activities,
        workflow_runner=workflow_runner() if sandboxed else UnsandboxedWorkflowRunner(),
        workflow_task_poller_behavior=PollerBehaviorAutoscaling(maximum=max_pollers),
        activity_task_poller_behavior=PollerBehaviorAutoscaling(maximum=max_pollers),
        graceful_shutdown_timeout=GRACEFUL_SHUTDOWN,
    )


def preemption_activities(
    settings: Settings,
    kube: KubeClient,
    view: ClusterView,
    ledger: Engine,
    *,
    view_channel: ViewChannel | None = None,
) -> PreemptionActivities:
    """The activities as `settings` configure them: the same in the main process (with the
    view, for the select) and in a workflow process (an empty view, and the channel to the
    main process's, `view_channel`)."""
    return PreemptionActivities(
        kube,
        view,
        ledger,
        identity=settings.identity,
        dry_run=settings.dry_run,
        planner_args=planner_args(settings),
        evictions_per_minute=settings.evictions_per_minute,
        inputs_max_bytes=settings.decision_inputs_max_bytes,
        inputs_retention_days=settings.decision_inputs_retention_days,
        view_channel=view_channel,
    )


def planner_args(settings: Settings) -> PreemptionArgs:
    return PreemptionArgs(
        protected_namespaces=frozenset(settings.protected_namespaces),
        max_victims=settings.max_victims,
        pod_group_label=settings.pod_group_label,
        pod_group_size_annotation=settings.pod_group_size_annotation,
    )

"""The worker's Prometheus metrics: upstream's names where the meaning is upstream's, and
`preemptctl_*` for everything else.

Naming, chosen so that a dashboard built for kube-scheduler's preemption keeps working when
this controller takes preemption over, and never shows a number that means something else:

- `scheduler_preemption_attempts_total` (no labels) and `scheduler_preemption_victims`
  (buckets `ExponentialBuckets(1, 2, 7)`: 1 to 64) are kube-scheduler's, with its meaning:
  preemption attempts, and victims chosen per attempt. An attempt is counted when it ends
  (upstream counts it when PostFilter runs; a preemption here is one workflow run).
- `scheduler_preemption_evaluation_duration_seconds` and
  `scheduler_preemption_execution_duration_seconds` (`{preemptor, result}`, buckets
  `ExponentialBuckets(0.001, 2, 16)`: 1 ms to ~32.8 s) are kube-scheduler 1.36's: choosing
  the victims, then preempting them: the workflow times both (`PreemptionResult`), and
  the trigger loop observes them, labelled `preemptor="DefaultPreemption"` and the end.
- Everything upstream has no metric for is `preemptctl_*`: attempts by outcome, the whole
  preemption's duration (it includes waiting for the victims to terminate and the preemptor
  to be bound, which upstream does not measure), the eviction budget, the trigger loop's
  queues, the cluster view's reflectors, the ledger.

The process and garbage-collector collectors are registered too (`process_*`,
`python_gc_*`), as client_golang registers Go's. The Temporal SDK's own metrics
(`temporal_*`, e.g. `temporal_activity_schedule_to_start_latency`) are served by the SDK
itself on `PREEMPT_SDK_METRICS_PORT` (default 9465).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from sqlalchemy import Engine, event

# metrics.ExponentialBuckets(1, 2, 7) upstream: "#victims>64 is pretty rare".
VICTIM_BUCKETS = tuple(float(2**i) for i in range(7))
# metrics.ExponentialBuckets(0.001, 2, 16) upstream: 1 ms to ~32.8 s.
STEP_BUCKETS = tuple(0.001 * 2**i for i in range(16))
# The whole preemption: selection, graceful termination, binding (minutes at worst).
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
# One INSERT of a batch of events: a millisecond on a local database, 5 s is trouble.
APPEND_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
LEDGER_TABLE_PREFIX = "INSERT INTO PREEMPTION_"  # preemption_events and its sibling tables


class OncePerPod:
    """A counter each pod adds one to at most once, under one label value: a pod judged
    again is not counted again. The UIDs counted are remembered, the oldest forgotten past
    `remember` (a pod forgotten and judged again would count twice; 10,000 pods is more
    than a cluster leaves pending to another scheduler at once). Thread-safe."""

    def __init__(self, counter: Counter, remember: int = 10_000) -> None:
        self._counter = counter
        self._remember = remember
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def count(self, uid: str, label: str) -> bool:
        """Count the pod `uid` under `label`; False when it was counted already."""
        with self._lock:
            if uid in self._seen:
                return False
            self._seen[uid] = None
            if len(self._seen) > self._remember:
                self._seen.popitem(last=False)
        self._counter.labels(label).inc()
        return True


class ReflectorStatsLike(Protocol):
    """What the collector reads of `kube.reflector.ReflectorStats` (a structural type, so
    this module does not import the Kubernetes side)."""

    lists: int
    relists_after_gone: int
    reconnects: int
    events: int
    errors: int
    rejected: int
    listed: int
    list_seconds: float
    synced: bool
    absent: bool


class ReflectorCollector(Collector):
    """The cluster view's reflectors, read at scrape time: one sample per watched kind."""

    def __init__(self, stats: Callable[[], Mapping[str, ReflectorStatsLike]]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        stats = self._stats()
        counters = {
            "events": ("preemptctl_reflector_events", "Watch events applied to the view."),
            "lists": ("preemptctl_reflector_lists", "Complete lists (the first, and relists)."),
            "relists_after_gone": (
                "preemptctl_reflector_relists",
                "Relists forced by 410 Gone (the watch's resourceVersion expired).",
            ),
            "reconnects": ("preemptctl_reflector_reconnects", "Watches reopened after they ended."),
            "errors": ("preemptctl_reflector_errors", "List or watch requests that failed."),
            "rejected": (
                "preemptctl_reflector_rejected_objects",
                "Objects the view could not read and left out.",
            ),
        }
        for attribute, (name, documentation) in counters.items():
            family = CounterMetricFamily(name, documentation, labels=["kind"])
            for kind, reflector in sorted(stats.items()):
                family.add_metric([kind], float(getattr(reflector, attribute)))
            yield family
        listed = GaugeMetricFamily(
            "preemptctl_reflector_listed_objects",
            "Objects the latest complete list returned.",
            labels=["kind"],
        )
        seconds = GaugeMetricFamily(
            "preemptctl_reflector_list_seconds",
            "How long the latest complete list took.",
            labels=["kind"],
        )
        synced = GaugeMetricFamily(
            "preemptctl_view_synced",
            "1 once the view holds a complete list of this kind, else 0.",
            labels=["kind"],
        )
        absent = GaugeMetricFamily(
            "preemptctl_view_kind_absent",
            "1 when the API server does not serve this kind at a version preemptctl reads "
            "(PodGroups without the workload API, or only in 1.35's first alpha; "
            "CompositePodGroups without their gate): the view holds none of it, else 0.",
            labels=["kind"],
        )
        for kind, reflector in sorted(stats.items()):
            listed.add_metric([kind], float(reflector.listed))
            seconds.add_metric([kind], float(reflector.list_seconds))
            synced.add_metric([kind], 1.0 if reflector.synced else 0.0)
            absent.add_metric([kind], 1.0 if reflector.absent else 0.0)
        yield from (listed, seconds, synced, absent)


class UpstreamStatsLike(Protocol):
    """What the collector reads of `kube.upstream_events.RecorderStats`."""

    seen: int
    recorded: int
    skipped: int
    lists: int
    relists_after_gone: int
    reconnects: int
    errors: int

    @property
    def skipped_by(self) -> Mapping[str, int]:
        """Events left out, by `kube.upstream_events.Skip` value."""


# Why the shadow recorder left a Preempted Event out (`kube.upstream_events.Skip`): the
# label values of preemptctl_upstream_events_skipped_total, each exported from the start
# (at 0), so that an alert's `increase()` sees the first one.
SKIP_HELP = (
    "kube-scheduler Preempted Events left out, by reason: unreadable (a parse failure), "
    "ours, untrusted-reporter (no configured scheduler name reported it), other-namespace "
    "(not in its victim's namespace), refuted (the victim is there, not marked by the "
    "scheduler on that node), unconfirmed (gone, never seen marked), victim-known (already "
    "recorded), over-cap (its namespace's rows for the hour are used)."
)


class UpstreamCollector(Collector):
    """Shadow mode's recorder of kube-scheduler's own preemptions, read at scrape time: is it
    seeing the scheduler's `Preempted` Events, and recording them for `compare`? Events it
    leaves out are counted by reason: a forged Event (untrusted-reporter, other-namespace,
    refuted) is an attempt to steer `compare` and the shadow dry runs."""

    def __init__(self, stats: Callable[[], UpstreamStatsLike]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        stats = self._stats()
        counters = {
            "seen": ("preemptctl_upstream_events_seen", "kube-scheduler Preempted Events seen."),
            "recorded": (
                "preemptctl_upstream_preemptions_recorded",
                "Upstream preemptions recorded in the ledger (new rows; a replayed Event is not).",
            ),
            "lists": ("preemptctl_upstream_lists", "Complete lists of the Events (and relists)."),
            "relists_after_gone": (
                "preemptctl_upstream_relists",
                "Relists forced by 410 Gone (the watch's resourceVersion expired).",
            ),
            "reconnects": ("preemptctl_upstream_reconnects", "Watches reopened after they ended."),
            "errors": ("preemptctl_upstream_errors", "List or watch requests that failed."),
        }
        for attribute, (name, documentation) in counters.items():
            yield CounterMetricFamily(name, documentation, value=float(getattr(stats, attribute)))
        skipped = CounterMetricFamily(
            "preemptctl_upstream_events_skipped", SKIP_HELP, labels=["reason"]
        )
        for reason, count in sorted(dict(stats.skipped_by).items()):
            skipped.add_metric([str(reason)], float(count))
        yield skipped


class ProbeDropsCollector(Collector):
    """The probe server's connections dropped without an answer, by listener (probes,
    metrics) and reason (idle, deadline, write, evicted, per_client, full), read at scrape
    time from `ProbeServer.dropped_by`: a rising count is a slow or flooding client."""

    def __init__(self, dropped: Callable[[], Mapping[tuple[str, str], int]]) -> None:
        self._dropped = dropped

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "preemptctl_probe_connections_dropped",
            "Connections to the probe or metrics listener closed without an answer, by "
            "listener and reason: idle (silent too long), deadline (the request not whole in "
            "time), write (the answer not taken), evicted (dropped to make room), per_client "
            "or full (refused at once).",
            labels=["listener", "reason"],
        )
        for (listener, reason), count in sorted(self._dropped().items()):
            family.add_metric([listener, reason], float(count))
        yield family


class ViewCapsCollector(Collector):
    """Pods whose content went beyond the view's caps (`decode.POD_CAPS`: labels,
    annotations, host ports, tolerations, ...), by field, read at scrape time from the
    view's snapshot: what is held now, and every pod object read so since the start. Such
    a pod is decided conservatively (never a free victim; Unsupported as a preemptor); a
    tenant's object that big is worth a look."""

    def __init__(self, read: Callable[[], tuple[Mapping[str, int], Mapping[str, int]]]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        held, read = self._read()
        pods = GaugeMetricFamily(
            "preemptctl_view_pods_over_cap",
            "Pods the view holds now with a field beyond the planner's caps, by field.",
            labels=["field"],
        )
        for name, count in sorted(held.items()):
            pods.add_metric([name], float(count))
        total = CounterMetricFamily(
            "preemptctl_view_over_cap",
            "Pod objects read with a field beyond the planner's caps, by field.",
            labels=["field"],
        )
        for name, count in sorted(read.items()):
            total.add_metric([name], float(count))
        yield from (pods, total)


class AttemptsCollector(Collector):
    """`scheduler_preemption_attempts_total`, upstream's unlabelled counter: the sum over
    outcomes of `preemptctl_preemption_attempts_total`, so the two can never disagree."""

    def __init__(self, by_outcome: Counter) -> None:
        self._by_outcome = by_outcome

    def collect(self) -> Iterator[Metric]:
        total = sum(
            sample.value
            for family in self._by_outcome.collect()
            for sample in family.samples
            if sample.name.endswith("_total")
        )
        family = CounterMetricFamily(
            "scheduler_preemption_attempts",
            "Total preemption attempts in the cluster till now (counted when each ends).",
        )
        family.add_metric([], total)
        yield family


class WorkflowProcessesCollector(Collector):
    """The replica's workflow processes, read at scrape time: how many run, how many poll."""

    def __init__(self, counts: Callable[[], tuple[int, int]]) -> None:
        self._counts = counts

    def collect(self) -> Iterator[Metric]:
        running, ready = self._counts()
        family = GaugeMetricFamily(
            "preemptctl_workflow_processes",
            "The replica's workflow processes (the workflows and their local activities): "
            "running, and ready (their worker polls).",
            labels=["state"],
        )
        family.add_metric(["running"], float(running))
        family.add_metric(["ready"], float(ready))
        yield family


# -- one endpoint for a replica of several processes ---------------------------------------------

# A family as a workflow process reports it to the main one (plain tuples, to pickle): name,
# type, help, and each sample's name, sorted labels and value.
SampleReport = tuple[str, tuple[tuple[str, str], ...], float]
_SampleKey = tuple[str, tuple[tuple[str, str], ...]]
FamilyReport = tuple[str, str, str, tuple[SampleReport, ...]]
# Facts about one process (its CPU, memory, collector): labelled by process, never summed.
PER_PROCESS_PREFIXES = ("process_", "python_")
# Kinds whose samples only grow: what an exited process counted stays in the replica's sum.
CUMULATIVE = frozenset({"counter", "histogram", "summary"})


def report_of(registry: CollectorRegistry) -> list[FamilyReport]:
    """`registry`'s families as a workflow process sends them (no `_created` samples: a
    creation time is not summed)."""
    return [
        (
            family.name,
            family.type,
            family.documentation,
            tuple(
                (sample.name, tuple(sorted(sample.labels.items())), float(sample.value))
                for sample in family.samples
                if not sample.name.endswith("_created")
            ),
        )
        for family in registry.collect()
    ]


class ReplicaMetrics(Collector):
    """The metrics of one replica whose work runs in several processes, as one endpoint:
    the main process's registry, with the latest report of each workflow process merged in.

    Per-process families (`process_*`, `python_*`: CPU, memory, the collector) keep each
    process apart under a `process` label (`main`, `workflows-0`, ...), so that
    `sum(process_resident_memory_bytes)` is the replica's memory. Every other family is
    summed over the processes, sample by sample (same name, same labels): the ledger's
    appends and errors, wherever they happened. What an exited process counted (counters,
    histograms) is kept (`retire`), so the replica's counters never go backwards when a
    workflow process is restarted. Thread-safe: reports arrive from the watchers' threads,
    scrapes from the probe server's."""

    def __init__(self, own: CollectorRegistry, own_name: str = "main") -> None:
        self._own = own
        self._own_name = own_name
        self._lock = threading.Lock()
        self._live: dict[str, list[FamilyReport]] = {}
        # family name -> (type, help, {(sample name, labels): value}) of exited processes
        self._retired: dict[str, tuple[str, str, dict[_SampleKey, float]]] = {}

    def update(self, process: str, families: list[FamilyReport]) -> None:
        """The latest report of `process` (replaces its previous one)."""
        with self._lock:
            self._live[process] = families

    def retire(self, process: str) -> None:
        """`process` has exited: what it counted stays in the sums, its gauges go."""
        with self._lock:
            families = self._live.pop(process, [])
            for name, kind, documentation, samples in families:
                if kind not in CUMULATIVE or name.startswith(PER_PROCESS_PREFIXES):
                    continue
                _, _, kept = self._retired.setdefault(name, (kind, documentation, {}))
                for sample, labels, value in samples:
                    kept[(sample, labels)] = kept.get((sample, labels), 0.0) + value

    def processes(self) -> list[str]:
        """The workflow processes reporting now."""
        with self._lock:
            return sorted(self._live)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            reports = sorted(self._live.items())
            retired = [
                (name, kind, documentation, tuple((s, lab, v) for (s, lab), v in kept.items()))
                for name, (kind, documentation, kept) in self._retired.items()
            ]
        families: dict[str, Metric] = {}
        sums: dict[str, dict[_SampleKey, float]] = {}

        def add(process: str, report: list[FamilyReport]) -> None:
            for name, kind, documentation, samples in report:
                family = families.setdefault(name, Metric(name, documentation, kind))
                if name.startswith(PER_PROCESS_PREFIXES):
                    for sample, labels, value in samples:
                        family.add_sample(sample, {**dict(labels), "process": process}, value)
                    continue
                values = sums.setdefault(name, {})
                for sample, labels, value in samples:
                    values[(sample, labels)] = values.get((sample, labels), 0.0) + value

        add(self._own_name, report_of(self._own))
        for process, report in reports:
            add(process, report)
        add("", retired)  # cumulative families only, never per-process ones
        for name, values in sums.items():
            for (sample, labels), value in values.items():
                families[name].add_sample(sample, dict(labels), value)
        yield from families.values()


class Metrics:
    """One registry per worker, so tests (and two workers in one process) never collide."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        # -- kube-scheduler's names, kube-scheduler's meaning ---------------------------------
        self.victims = Histogram(
            "scheduler_preemption_victims",
            "Number of selected preemption victims for preemption initiated by a single pod.",
            buckets=VICTIM_BUCKETS,
            registry=self.registry,
        )
        self.evaluation_duration = Histogram(
            "scheduler_preemption_evaluation_duration_seconds",
            "Duration in seconds for identifying the target preemption victims.",
            ["preemptor", "result"],
            buckets=STEP_BUCKETS,
            registry=self.registry,
        )
        self.execution_duration = Histogram(
            "scheduler_preemption_execution_duration_seconds",
            "Duration in seconds for preempting the target preemption victims.",
            ["preemptor", "result"],
            buckets=STEP_BUCKETS,
            registry=self.registry,
        )
        # -- this controller's own --------------------------------------------------------
        self.attempts = Counter(
            "preemptctl_preemption_attempts",
            "Preemptions the controller finished, by outcome.",
            ["outcome"],
            registry=self.registry,
        )
        self.registry.register(AttemptsCollector(self.attempts))
        self.duration = Histogram(
            "preemptctl_preemption_duration_seconds",
            "From starting a preemption to its end (victims gone, preemptor bound), by outcome.",
            ["outcome"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.throttled = Counter(
            "preemptctl_preemption_evictions_throttled",
            "Times a preemption was held back by the eviction budget.",
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "preemptctl_preemptions_in_flight",
            "Preemptions this worker is following now.",
            registry=self.registry,
        )
        self.pending_pods = Gauge(
            "preemptctl_pending_pods",
            "Unschedulable pods that meet the trigger rules (preemptors waiting for a decision).",
            registry=self.registry,
        )
        self.parked_pods = Gauge(
            "preemptctl_parked_pods",
            "Pods whose preemption failed for a cause retrying cannot fix (RBAC denial, "
            "Unsupported); parked until the pod changes or a person runs preemptctl retry.",
            registry=self.registry,
        )
        self.backoff_pods = Gauge(
            "preemptctl_backoff_pods",
            "Pods waiting out a retry backoff after a failed or fruitless preemption.",
            registry=self.registry,
        )
        self.woken = Counter(
            "preemptctl_retries_woken",
            "Pods and pod groups (kind) woken from their backoff because a preemption whose "
            "claim held the room their last preemption lacked ended.",
            ["kind"],
            registry=self.registry,
        )
        self.left_to_other_schedulers = OncePerPod(
            Counter(
                "preemptctl_pods_left_to_other_schedulers",
                "Pending unschedulable pods left to another scheduler (their schedulerName is "
                "not one of PREEMPT_SCHEDULER_NAMES), each counted once, by schedulerName.",
                ["scheduler_name"],
                registry=self.registry,
            )
        )
        self.task_restarts = Counter(
            "preemptctl_task_restarts",
            "Supervised background tasks restarted after they crashed, by task.",
            ["task"],
            registry=self.registry,
        )
        self.rejected_objects = Counter(
            "preemptctl_view_rejected_objects",
            "Watched objects the cluster view could not read and left out, by kind.",
            ["kind"],
            registry=self.registry,
        )
        self.ledger_append = Histogram(
            "preemptctl_ledger_append_duration_seconds",
            "One statement appending events (or a decision's inputs) to the ledger.",
            buckets=APPEND_BUCKETS,
            registry=self.registry,
        )
        self.ledger_errors = Counter(
            "preemptctl_ledger_errors",
            "Ledger statements that failed, by whether the database was unreachable "
            "(unavailable) or refused the statement (refused).",
            ["kind"],
            registry=self.registry,
        )
        # The replica's other processes, merged into what /metrics serves (`exposition`).
        self.replica: ReplicaMetrics | None = None
        self._reflectors: ReflectorCollector | None = None
        self._probe_drops: ProbeDropsCollector | None = None
        self._caps: ViewCapsCollector | None = None

    def exposition(self) -> Collector:
        """What /metrics serves: this registry, merged with the replica's workflow
        processes when they run (`merge_processes`)."""
        return self.replica if self.replica is not None else self.registry

    def merge_processes(self) -> ReplicaMetrics:
        """From now on /metrics serves the replica: this process and the workflow processes
        that report to it through the returned `ReplicaMetrics`."""
        if self.replica is None:
            self.replica = ReplicaMetrics(self.registry)
        return self.replica

    def watch_view(self, stats: Callable[[], Mapping[str, ReflectorStatsLike]]) -> None:
        """Export the reflectors' counters, read from `stats` (`ClusterView.reflector_stats`)
        at each scrape; a second call replaces the first (a view rebuilt after a crash)."""
        if self._reflectors is not None:
            self.registry.unregister(self._reflectors)
        self._reflectors = ReflectorCollector(stats)
        self.registry.register(self._reflectors)

    def watch_upstream(self, stats: Callable[[], UpstreamStatsLike]) -> None:
        """Export shadow mode's recorder of kube-scheduler's preemptions (read at scrape)."""
        self.registry.register(UpstreamCollector(stats))

    def watch_probes(self, dropped: Callable[[], Mapping[tuple[str, str], int]]) -> None:
        """Export the probe server's dropped connections (`ProbeServer.dropped_by`); a
        second call replaces the first (a server opened again)."""
        if self._probe_drops is not None:
            self.registry.unregister(self._probe_drops)
        self._probe_drops = ProbeDropsCollector(dropped)
        self.registry.register(self._probe_drops)

    def watch_workflow_processes(self, counts: Callable[[], tuple[int, int]]) -> None:
        """Export the replica's workflow processes (`counts()`: running, ready) as
        `preemptctl_workflow_processes{state}`; read at scrape time."""
        self.registry.register(WorkflowProcessesCollector(counts))

    def watch_caps(self, read: Callable[[], tuple[Mapping[str, int], Mapping[str, int]]]) -> None:
        """Export the view's pods beyond the caps: `read()` gives (held now, read since the
        start) by field; a second call replaces the first (a view rebuilt)."""
        if self._caps is not None:
            self.registry.unregister(self._caps)
        self._caps = ViewCapsCollector(read)
        self.registry.register(self._caps)

    def watch_ledger(self, engine: Engine) -> None:
        """Time every INSERT into the ledger's tables on `engine`, and count failed statements."""

        def before(conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            if _is_append(statement):
                conn.info.setdefault("preemptctl_append_started", []).append(time.perf_counter())

        def after(conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            if _is_append(statement):
                started = conn.info.get("preemptctl_append_started") or []
                if started:
                    self.ledger_append.observe(time.perf_counter() - started.pop())

        def failed(context: Any) -> None:
            connection = context.connection
            if connection is not None and _is_append(context.statement or ""):
                started = connection.info.get("preemptctl_append_started") or []
                if started:
                    started.pop()
            unreachable = context.is_disconnect or context.connection is None
            self.ledger_errors.labels("unavailable" if unreachable else "refused").inc()

        event.listen(engine, "before_cursor_execute", before)
        event.listen(engine, "after_cursor_execute", after)
        event.listen(engine, "handle_error", failed)


def _is_append(statement: str) -> bool:
    return statement.lstrip()[:40].upper().replace('"', "").startswith(LEDGER_TABLE_PREFIX)

"""The worker's Prometheus metrics, named as kube-scheduler names its preemption metrics.

`preemption_attempts_total` and `preemption_victims` (upstream's buckets, 1 to 64 doubling)
mirror the scheduler's own, so existing dashboards keep working when the controller takes
preemption over. The Temporal SDK's metrics are served by the SDK itself (see
`worker.runtime`), on `PREEMPT_SDK_METRICS_PORT`.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

VICTIM_BUCKETS = (1, 2, 4, 8, 16, 32, 64)  # metrics.ExponentialBuckets(1, 2, 7) upstream
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class Metrics:
    """One registry per worker, so tests (and two workers in one process) never collide."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.attempts = Counter(
            "preemption_attempts",
            "Preemptions the controller finished, by outcome.",
            ["outcome"],
            registry=self.registry,
        )
        self.victims = Histogram(
            "preemption_victims",
            "Victims selected per preemption.",
            buckets=VICTIM_BUCKETS,
            registry=self.registry,
        )
        self.duration = Histogram(
            "preemption_duration_seconds",
            "From starting a preemption to its end, by outcome.",
            ["outcome"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.throttled = Counter(
            "preemption_evictions_throttled",
            "Times a preemption was held back by the eviction budget.",
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "preemption_in_flight",
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

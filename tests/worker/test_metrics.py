"""The worker's metrics, as Prometheus scrapes them.

Scenarios:
- upstream's names where the meaning is upstream's: `scheduler_preemption_attempts_total`
  without labels (the sum of the attempts by outcome), `scheduler_preemption_victims` with
  buckets 1 to 64 doubling, evaluation and execution durations with 1 ms to ~32.8 s;
- the rest is `preemptctl_*`, the Python attributes other code uses keep their names;
- the process and GC collectors are registered;
- the reflectors' counters are read from the view at scrape time, per kind;
- in shadow mode, the recorder of kube-scheduler's preemptions is read at scrape time too,
  the Events it left out counted by reason, every reason exported from 0;
- the pods beyond the view's caps, held now and read since the start, by field;
- every ledger append is timed, and a statement the database refuses is counted;
- a replica of several processes is one endpoint: per-process families (process_*,
  python_*) each under a `process` label, every other family summed sample by sample;
  what an exited workflow process counted stays in the sums, its gauges go.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from sqlalchemy import text

from preemptctl import migrations
from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.writer import append
from preemptctl.worker.metrics import FamilyReport, Metrics, report_of
from tests.ledger.builders import T0, event

PREFIXES = ("scheduler_preemption_", "preemptctl_", "process_", "python_")


def scrape(metrics: Metrics) -> str:
    return generate_latest(metrics.registry).decode()


def buckets(metrics: Metrics, name: str, labels: dict[str, str] | None = None) -> list[str]:
    """The `le` bounds of histogram `name` (its child with `labels`), as exposed."""
    wanted = labels or {}
    return [
        sample.labels["le"]
        for family in metrics.registry.collect()
        for sample in family.samples
        if sample.name == f"{name}_bucket"
        and all(sample.labels.get(k) == v for k, v in wanted.items())
    ]


def test_upstream_attempts_counter_has_no_labels_and_sums_the_outcomes() -> None:
    metrics = Metrics()
    metrics.attempts.labels("completed").inc()
    metrics.attempts.labels("completed").inc()
    metrics.attempts.labels("failed").inc()
    assert "scheduler_preemption_attempts_total 3.0\n" in scrape(metrics)
    assert (
        metrics.registry.get_sample_value(
            "preemptctl_preemption_attempts_total", {"outcome": "failed"}
        )
        == 1.0
    )


def test_victims_use_upstreams_buckets() -> None:
    metrics = Metrics()
    metrics.victims.observe(3)
    assert buckets(metrics, "scheduler_preemption_victims") == [
        "1.0", "2.0", "4.0", "8.0", "16.0", "32.0", "64.0", "+Inf"
    ]  # fmt: skip


@pytest.mark.parametrize(
    "name",
    [
        "scheduler_preemption_evaluation_duration_seconds",
        "scheduler_preemption_execution_duration_seconds",
    ],
)
def test_step_durations_use_upstreams_names_labels_and_buckets(name: str) -> None:
    metrics = Metrics()
    histogram = {
        "scheduler_preemption_evaluation_duration_seconds": metrics.evaluation_duration,
        "scheduler_preemption_execution_duration_seconds": metrics.execution_duration,
    }[name]
    histogram.labels("pod", "success").observe(0.2)
    bounds = buckets(metrics, name, {"preemptor": "pod", "result": "success"})
    assert bounds[0] == "0.001"
    assert float(bounds[-2]) == pytest.approx(32.768)
    assert len(bounds) == 17  # 16 and +Inf


def test_the_controllers_own_metrics_are_prefixed() -> None:
    shown = scrape(Metrics())
    for name in (
        "preemptctl_preemption_evictions_throttled_total",
        "preemptctl_preemptions_in_flight",
        "preemptctl_pending_pods",
        "preemptctl_parked_pods",
        "preemptctl_backoff_pods",
        "preemptctl_ledger_append_duration_seconds_count",
    ):
        assert f"\n{name} " in shown, name
    for line in shown.splitlines():
        if line.startswith("# TYPE"):
            metric = line.split()[2]
            assert metric.startswith(
                ("scheduler_preemption_", "preemptctl_", "process_", "python_")
            )


def test_process_and_gc_collectors_are_registered() -> None:
    shown = scrape(Metrics())
    assert "\nprocess_resident_memory_bytes " in shown
    assert "python_gc_collections_total{generation=" in shown


@dataclass
class Stats:
    lists: int = 1
    relists_after_gone: int = 0
    reconnects: int = 0
    events: int = 0
    errors: int = 0
    rejected: int = 0
    listed: int = 0
    list_seconds: float = 0.0
    synced: bool = False
    absent: bool = False


def test_reflector_counters_are_read_at_scrape_time() -> None:
    metrics = Metrics()
    pods = Stats(events=5, listed=40, list_seconds=1.5, synced=True, rejected=1)
    nodes = Stats(relists_after_gone=2)
    metrics.watch_view(lambda: {"Pod": pods, "Node": nodes})
    pods.events = 7
    value = metrics.registry.get_sample_value
    assert value("preemptctl_reflector_events_total", {"kind": "Pod"}) == 7
    assert value("preemptctl_reflector_relists_total", {"kind": "Node"}) == 2
    assert value("preemptctl_reflector_rejected_objects_total", {"kind": "Pod"}) == 1
    assert value("preemptctl_reflector_listed_objects", {"kind": "Pod"}) == 40
    assert value("preemptctl_view_synced", {"kind": "Pod"}) == 1
    assert value("preemptctl_view_synced", {"kind": "Node"}) == 0


def test_a_kind_the_cluster_does_not_serve_is_reported_absent() -> None:
    metrics = Metrics()
    metrics.watch_view(lambda: {"Pod": Stats(synced=True), "PodGroup": Stats(absent=True)})
    value = metrics.registry.get_sample_value
    assert value("preemptctl_view_kind_absent", {"kind": "PodGroup"}) == 1
    assert value("preemptctl_view_kind_absent", {"kind": "Pod"}) == 0


def test_a_rebuilt_view_replaces_the_old_one() -> None:
    metrics = Metrics()
    metrics.watch_view(lambda: {"Pod": Stats(events=1)})
    metrics.watch_view(lambda: {"Pod": Stats(events=9)})
    assert (
        metrics.registry.get_sample_value("preemptctl_reflector_events_total", {"kind": "Pod"}) == 9
    )


SKIP_REASONS = (
    "unreadable",
    "ours",
    "untrusted-reporter",
    "other-namespace",
    "refuted",
    "unconfirmed",
    "victim-known",
    "over-cap",
)


@dataclass
class RecorderStats:
    seen: int = 0
    recorded: int = 0
    skipped: int = 0
    lists: int = 0
    relists_after_gone: int = 0
    reconnects: int = 0
    errors: int = 0
    skipped_by: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SKIP_REASONS, 0))


def test_the_upstream_recorder_is_read_at_scrape_time() -> None:
    metrics = Metrics()
    stats = RecorderStats(seen=3, recorded=2, lists=1)
    metrics.watch_upstream(lambda: stats)
    stats.recorded = 3
    value = metrics.registry.get_sample_value
    assert value("preemptctl_upstream_events_seen_total") == 3
    assert value("preemptctl_upstream_preemptions_recorded_total") == 3
    assert value("preemptctl_upstream_lists_total") == 1
    assert value("preemptctl_upstream_errors_total") == 0


def test_events_the_recorder_left_out_are_counted_by_reason_each_from_zero() -> None:
    metrics = Metrics()
    stats = RecorderStats()
    metrics.watch_upstream(lambda: stats)
    stats.skipped_by["untrusted-reporter"] = 2
    stats.skipped_by["over-cap"] = 1
    skipped = {
        sample.labels["reason"]: sample.value
        for family in metrics.registry.collect()
        for sample in family.samples
        if sample.name == "preemptctl_upstream_events_skipped_total"
    }
    assert skipped == {**dict.fromkeys(SKIP_REASONS, 0.0), "untrusted-reporter": 2, "over-cap": 1}


def test_pods_beyond_the_views_caps_are_read_at_scrape_time() -> None:
    metrics = Metrics()
    held, read = {"labels": 2}, {"labels": 5, "annotations": 1}
    metrics.watch_caps(lambda: (held, read))
    held["labels"] = 1
    value = metrics.registry.get_sample_value
    assert value("preemptctl_view_pods_over_cap", {"field": "labels"}) == 1
    assert value("preemptctl_view_over_cap_total", {"field": "labels"}) == 5
    assert value("preemptctl_view_over_cap_total", {"field": "annotations"}) == 1


def test_ledger_appends_are_timed_and_refusals_counted(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    migrations.upgrade(url)
    engine = create_ledger_engine(url)
    metrics = Metrics()
    metrics.watch_ledger(engine)
    try:
        append(engine, event("p-1", EventKind.NOMINATED, T0))
        append(engine, event("p-1", EventKind.COMPLETED, T0))
        with pytest.raises(Exception, match="append-only"), engine.begin() as connection:
            connection.execute(text("DELETE FROM preemption_events"))
    finally:
        engine.dispose()
    value = metrics.registry.get_sample_value
    assert value("preemptctl_ledger_append_duration_seconds_count") == 2
    assert value("preemptctl_ledger_errors_total", {"kind": "refused"}) == 1


def merged_samples(metrics: Metrics, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(sample.labels.items())): sample.value
        for family in metrics.exposition().collect()
        for sample in family.samples
        if sample.name == name
    }


def workflow_process_report(appends: int, failures: int, in_flight: float) -> list[FamilyReport]:
    """What a workflow process reports: its own Metrics, after `appends` ledger appends."""
    child = Metrics()
    for _ in range(appends):
        child.ledger_append.observe(0.002)
    child.ledger_errors.labels("unavailable").inc(failures)
    child.in_flight.set(in_flight)
    return report_of(child.registry)


def test_a_replica_serves_its_processes_as_one_endpoint() -> None:
    metrics = Metrics()
    metrics.ledger_append.observe(0.002)
    replica = metrics.merge_processes()
    replica.update("workflows-0", workflow_process_report(3, 1, 2))
    replica.update("workflows-1", workflow_process_report(4, 0, 1))
    appended = merged_samples(metrics, "preemptctl_ledger_append_duration_seconds_count")
    assert appended == {(): 1 + 3 + 4}
    errors = merged_samples(metrics, "preemptctl_ledger_errors_total")
    assert errors == {(("kind", "unavailable"),): 1}
    assert merged_samples(metrics, "preemptctl_preemptions_in_flight") == {(): 3}
    memory = merged_samples(metrics, "process_resident_memory_bytes")
    assert {labels for labels in memory} == {
        (("process", "main"),),
        (("process", "workflows-0"),),
        (("process", "workflows-1"),),
    }
    assert (
        "preemptctl_ledger_append_duration_seconds_count 8.0"
        in generate_latest(metrics.exposition()).decode()
    )


def test_what_an_exited_process_counted_stays_and_its_gauges_go() -> None:
    metrics = Metrics()
    replica = metrics.merge_processes()
    replica.update("workflows-0", workflow_process_report(3, 0, 2))
    replica.retire("workflows-0")
    replica.update("workflows-0", workflow_process_report(1, 0, 1))  # its successor
    appended = merged_samples(metrics, "preemptctl_ledger_append_duration_seconds_count")
    assert appended == {(): 3 + 1}
    assert merged_samples(metrics, "preemptctl_preemptions_in_flight") == {(): 1}
    memory = merged_samples(metrics, "process_resident_memory_bytes")
    assert len(memory) == 2  # main and the running workflows-0, not the exited one

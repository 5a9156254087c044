"""The worker's HTTP endpoints: what Kubernetes probes and Prometheus scrape.

Scenarios:
- /healthz answers while the process runs;
- /readyz answers ready once the cluster view has synced and Temporal answers, with the
  sync progress per kind (objects listed, seconds);
- /metrics serves upstream's preemption metrics, counting a finished preemption by outcome
  and its victims;
- /parked lists no pod while nothing is parked;
- an unknown path is 404.
"""

from __future__ import annotations

import asyncio
import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from preemptctl.emulator import SimulatedCluster
from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.migrations import upgrade
from preemptctl.worker.config import load_settings
from preemptctl.worker.connections import connect_cluster
from preemptctl.worker.dev_command import free_port
from preemptctl.worker.runtime import running_controller
from preemptctl.worker.scenarios import ONLINE_OFFLINE
from tests.support.temporal import wait_until_closed


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


async def fetch(port: int, path: str) -> tuple[int, str]:
    return await asyncio.to_thread(get, port, path)


@pytest.fixture
def cluster():
    with SimulatedCluster(max_grace_seconds=0.5) as simulated:
        simulated.load(ONLINE_OFFLINE)
        simulated.start()
        yield simulated


async def test_probes_and_metrics(temporal, cluster, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    upgrade(url)
    port = free_port()
    settings = load_settings(
        overrides={
            "kubeconfig": str(cluster.kubeconfig_path),
            "database_url": url,
            "metrics_port": port,
            "task_queue": "probes",
        },
        environ={},
    )
    ledger = create_ledger_engine(url)
    try:
        async with running_controller(
            settings, temporal.client, connect_cluster(settings), ledger
        ) as controller:
            assert await fetch(port, "/healthz") == (200, "ok\n")
            code, ready = await fetch(port, "/readyz")
            assert code == 200
            assert ready.splitlines()[0] == "ready"
            assert "Pod: 14 listed, synced in" in ready
            assert (await fetch(port, "/nope"))[0] == 404
            assert await fetch(port, "/parked") == (200, "[]\n")
            for _ in range(200):
                if any(r["preemptor"] == "default/nginx-a" for r in controller.trigger.finished):
                    break
                await asyncio.sleep(0.1)
            code, metrics = await fetch(port, "/metrics")
            await wait_until_closed(temporal.client, 'TaskQueue = "probes"')
    finally:
        ledger.dispose()
    assert code == 200
    assert 'preemptctl_preemption_attempts_total{outcome="completed"}' in metrics
    assert re.search(r"\nscheduler_preemption_attempts_total [1-9]", metrics)
    assert "\nscheduler_preemption_victims_bucket" in metrics
    assert 'preemptctl_preemption_duration_seconds_count{outcome="completed"}' in metrics
    assert "\npreemptctl_preemption_evictions_throttled_total 0.0" in metrics
    assert "\nprocess_resident_memory_bytes" in metrics
    # Upstream's two step timings, observed from the finished preemption's result.
    evaluated = (
        'scheduler_preemption_evaluation_duration_seconds_count{preemptor="DefaultPreemption"'
    )
    assert evaluated in metrics
    executed = 'scheduler_preemption_execution_duration_seconds_count{preemptor="DefaultPreemption"'
    assert executed in metrics

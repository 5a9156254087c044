"""`preemptctl setup-temporal` registers the search attributes on an existing server.

Scenarios:
- on a dev server started without them, it registers all seven and the UI can filter by them;
- run again, it says they are already there and changes nothing;
- an unreachable server is one line on stderr and exit code 1 (a runtime failure);
- an address without a host or port (`:`) is one line and exit code 2 (bad input);
- `--temporal-address` is the flag `worker` has; `--address` stays as its alias.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from preemptctl.worker.temporal_setup import missing_search_attributes
from preemptctl.workflows import search_attributes
from tests.support.temporal import temporal_cli

PREEMPTCTL = str(Path(sys.executable).parent / "preemptctl")


def setup_temporal(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PREEMPTCTL, "setup-temporal", *args], capture_output=True, text=True, check=False
    )


async def test_registers_missing_search_attributes_once() -> None:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_cli(), dev_server_log_level="error"
    )
    try:
        address = env.client.service_client.config.target_host
        assert len(await missing_search_attributes(env.client, "default")) == len(
            search_attributes.ALL
        )

        first = setup_temporal("--address", address)
        second = setup_temporal("--temporal-address", address)

        assert await missing_search_attributes(env.client, "default") == []
    finally:
        await env.shutdown()
    assert first.returncode == 0, first.stderr
    assert all(key.name in first.stdout for key in search_attributes.ALL)
    assert second.returncode == 0
    assert "already has every search attribute" in second.stdout


def test_unreachable_server_is_one_line_and_exit_1() -> None:
    completed = setup_temporal("--temporal-address", "127.0.0.1:1")
    assert completed.returncode == 1
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("preemptctl setup-temporal: cannot reach Temporal at 127.0.0.1:1")


def test_an_address_without_host_or_port_is_bad_input() -> None:
    completed = setup_temporal("--address", ":")
    assert completed.returncode == 2
    assert completed.stderr.strip().splitlines() == [
        "preemptctl setup-temporal: temporal_address: expected host:port with a port from 1 "
        "to 65535, got ':'"
    ]

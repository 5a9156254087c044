"""Fixtures shared across test packages: one real Temporal dev server per session."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio
from temporalio.testing import WorkflowEnvironment

from preemptctl.workflows import search_attributes
from tests.support.temporal import temporal_cli


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def temporal() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_cli(),
        search_attributes=search_attributes.ALL,
        dev_server_log_level="error",
    )
    try:
        yield env
    finally:
        await env.shutdown()

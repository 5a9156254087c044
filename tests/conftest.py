"""Fixtures shared across test packages: one real Temporal dev server per session, and a
fresh Postgres ledger database per test (migrated or not)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from preemptctl import migrations
from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.workflows import search_attributes
from tests.support.postgres import fresh_database
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


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """An empty Postgres database of this test's own, dropped afterwards."""
    with fresh_database() as url:
        yield url


@pytest.fixture
def migrated_postgres_url(postgres_url: str) -> str:
    migrations.upgrade(postgres_url)
    return postgres_url


@pytest.fixture
def pg_engine(migrated_postgres_url: str) -> Iterator[Engine]:
    engine = create_ledger_engine(migrated_postgres_url, pool_size=8)
    yield engine
    engine.dispose()

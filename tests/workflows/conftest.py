"""One real Temporal dev server, one emulator and one migrated Postgres ledger per session;
each test gets its own task queue and its own pods."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import pytest
import pytest_asyncio
from sqlalchemy import Engine
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from preemptctl.emulator import Emulator
from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.migrations import upgrade
from tests.support.emulator import running_emulator
from tests.support.postgres import fresh_database
from tests.support.temporal import temporal_test_server


@pytest_asyncio.fixture(loop_scope="session")
async def time_skipping() -> AsyncIterator[WorkflowEnvironment]:
    """The time-skipping test server: durable timers fire without waiting. It cannot register
    custom search attributes, so preemptions on it run with `search_attributes=False`."""
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=temporal_test_server()
    )
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture
def client(temporal: WorkflowEnvironment) -> Client:
    return temporal.client


@contextmanager
def migrated_ledger(prefix: str) -> Iterator[Engine]:
    with fresh_database(prefix) as url:
        upgrade(url)
        engine = create_ledger_engine(url)
        try:
            yield engine
        finally:
            engine.dispose()


@pytest.fixture(scope="session")
def ledger() -> Iterator[Engine]:
    with migrated_ledger("preemptctl_wf") as engine:
        yield engine


@pytest.fixture
def own_ledger() -> Iterator[Engine]:
    """A ledger for one test, for what counts every event in it (the eviction budget)."""
    with migrated_ledger("preemptctl_wf_own") as engine:
        yield engine


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    with running_emulator() as running:
        yield running

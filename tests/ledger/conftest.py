"""Ledger fixtures: a fresh Postgres database per test (migrated or not) and SQLite twins."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from preemptctl import migrations
from preemptctl.ledger.engine import create_ledger_engine
from tests.support.postgres import fresh_database


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


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.sqlite'}"


@pytest.fixture
def sqlite_engine(sqlite_url: str) -> Iterator[Engine]:
    migrations.upgrade(sqlite_url)
    engine = create_ledger_engine(sqlite_url)
    yield engine
    engine.dispose()

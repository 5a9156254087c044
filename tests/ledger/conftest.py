"""Ledger fixtures: SQLite twins of the Postgres ones (those are in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from preemptctl import migrations
from preemptctl.ledger.engine import create_ledger_engine


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.sqlite'}"


@pytest.fixture
def sqlite_engine(sqlite_url: str) -> Iterator[Engine]:
    migrations.upgrade(sqlite_url)
    engine = create_ledger_engine(sqlite_url)
    yield engine
    engine.dispose()

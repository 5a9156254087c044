"""One persistent Temporal dev server for the fault-injection suite (a scenario may restart
it: its workflows survive in its SQLite file)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.temporal_server import PersistentTemporal


@pytest.fixture(scope="session")
def persistent_temporal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PersistentTemporal]:
    directory: Path = tmp_path_factory.mktemp("temporal")
    with PersistentTemporal(directory / "temporal.db") as server:
        yield server

"""One persistent Temporal dev server for the hostile-tenant suite, shared by its modules
(each module has its own task queue, ledger database and simulated cluster)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.temporal_server import PersistentTemporal


@pytest.fixture(scope="session")
def persistent_temporal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PersistentTemporal]:
    directory: Path = tmp_path_factory.mktemp("hostile-temporal")
    with PersistentTemporal(directory / "temporal.db") as server:
        yield server

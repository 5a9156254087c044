"""A Temporal dev server that keeps its workflows across a restart, for fault injection.

`temporal server start-dev --db-filename FILE` stores its state in SQLite (WAL), so killing
the process and starting it again on the same ports is a frontend restart, not a new
cluster: running workflows are still there, and workers must reconnect to them.

    with PersistentTemporal(tmp_path / "temporal.db") as server:
        server.address            # "127.0.0.1:PORT"
        server.kill(); server.start()
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType

from temporalio.common import SearchAttributeIndexedValueType

from preemptctl.worker.ports import free_port
from preemptctl.worker.temporal_binary import temporal_cli
from preemptctl.workflows import search_attributes

_TYPE_NAMES = {
    SearchAttributeIndexedValueType.KEYWORD: "Keyword",
    SearchAttributeIndexedValueType.KEYWORD_LIST: "KeywordList",
    SearchAttributeIndexedValueType.TEXT: "Text",
    SearchAttributeIndexedValueType.INT: "Int",
    SearchAttributeIndexedValueType.DOUBLE: "Double",
    SearchAttributeIndexedValueType.BOOL: "Bool",
    SearchAttributeIndexedValueType.DATETIME: "Datetime",
}


class PersistentTemporal:
    """One dev server process at a time, always on the same ports and the same database."""

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self.port = free_port()
        self.http_port = free_port()
        self.metrics_port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self._process: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    def _command(self) -> list[str]:
        command = [
            temporal_cli(),
            "server",
            "start-dev",
            "--headless",
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--http-port",
            str(self.http_port),
            "--metrics-port",
            str(self.metrics_port),
            "--db-filename",
            str(self.db_path),
            "--sqlite-pragma",
            "journal_mode=wal",
            "--log-level",
            "error",
        ]
        for key in search_attributes.ALL:
            command += ["--search-attribute", f"{key.name}={_TYPE_NAMES[key.indexed_value_type]}"]
        return command

    def start(self, timeout: float = 60.0) -> None:
        """Start the server and return once its frontend answers."""
        if self._process is not None:
            return
        self._process = subprocess.Popen(
            self._command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        asyncio.run(self._wait_serving(timeout))

    async def _wait_serving(self, timeout: float) -> None:
        from temporalio.client import Client

        deadline = time.monotonic() + timeout
        while True:
            assert self._process is not None
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"temporal dev server on {self.address} exited with {self._process.returncode}"
                )
            try:
                client = await Client.connect(self.address)
                await client.count_workflows()
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"temporal dev server on {self.address} not serving after {timeout:g}s"
                    ) from None
                await asyncio.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL the server, as a crashed node would go; its database stays."""
        process, self._process = self._process, None
        if process is None:
            return
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)

    def restart(self) -> None:
        self.kill()
        self.start()
        self.restarts += 1

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            process.wait(timeout=15)

    def __enter__(self) -> PersistentTemporal:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

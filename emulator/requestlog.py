"""Every request the emulator saw, so a test can assert on what a caller sent, not only on
the state it left behind (a skipped call, a retried delete, the precondition it carried)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Request:
    verb: str
    resource: str  # as RBAC names it: "pods", "pods/status", "pods/eviction"
    namespace: str
    name: str
    method: str
    path: str
    query: dict[str, str]
    content_type: str
    body: Any
    code: int  # the answer's status; 0 for a dropped connection
    received_at: float = field(default_factory=time.time)  # epoch seconds, for benchmarks


class RequestLog:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[Request] = []

    def append(self, request: Request) -> None:
        with self._lock:
            self._entries.append(request)

    def __iter__(self) -> Iterator[Request]:
        with self._lock:
            return iter(list(self._entries))

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __getitem__(self, index: int) -> Request:
        with self._lock:
            return self._entries[index]

    def matching(
        self,
        verb: str | None = None,
        resource: str | None = None,
        name: str | None = None,
    ) -> list[Request]:
        """The requests with this verb, resource and object name (None matches any)."""
        return [
            entry
            for entry in self
            if (verb is None or entry.verb == verb)
            and (resource is None or entry.resource == resource)
            and (name is None or entry.name == name)
        ]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

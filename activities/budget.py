"""The eviction rate budget: at most N evictions a minute from this worker.

A token bucket refilled continuously: a burst of a full minute's budget is allowed, then
evictions are spread out. A preemption needing more victims than remain waits (the workflow
records it as throttled and sleeps durably); one needing more than a whole minute's budget is
let through when the bucket is full, or it would starve forever.
"""

from __future__ import annotations

import threading


class EvictionBudget:
    def __init__(self, per_minute: int, now: float) -> None:
        self._capacity = float(per_minute)
        self._rate = per_minute / 60.0
        self._tokens = float(per_minute)
        self._updated = now
        self._lock = threading.Lock()

    @property
    def per_minute(self) -> int:
        return int(self._capacity)

    def take(self, evictions: int, now: float) -> float:
        """Spend `evictions` now and return 0, or spend nothing and return how many seconds
        until they would fit."""
        with self._lock:
            elapsed = max(0.0, now - self._updated)
            self._tokens = min(self._capacity, self._tokens + elapsed * self._rate)
            self._updated = now
            if evictions <= self._tokens or self._tokens >= self._capacity:
                self._tokens -= evictions
                return 0.0
            return (min(evictions, self._capacity) - self._tokens) / self._rate

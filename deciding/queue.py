"""Taking turns to decide: requests that arrive while a batch decides wait, and the next one
to take the turn decides them all together.

As the scheduler's single loop takes one pod after another, one thread per process decides
at a time; the others queue their requests. Whoever takes the turn next decides everything
queued (up to `max_batch` at a time) in one call of the batch function, so many requests
cost one lock hold, one claims read and one commit. A request waiting its turn calls `beat`
about every second (its activity heartbeats), and gives up after `wait_seconds` if no batch
has taken it by then; one a batch has taken is waited for to the end.

A batch is taken and decided in priority order (`priority` of each job, highest first; in
order of arrival among equals), as kube-scheduler's active queue pops its most important pod
first: a higher-priority request that waited beside a lower one is decided first, and the
lower one meets its claim, never the other way round.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

Job = TypeVar("Job")
Answer = TypeVar("Answer")


class NoTurnError(Exception):
    """No batch took the request within the wait: the caller may try again later."""


class Waiting(Generic[Job, Answer]):
    """One queued request and, once a batch has decided it, its answer (or error)."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.done = threading.Event()
        self.answer: Answer | None = None
        self.error: BaseException | None = None

    def result(self) -> Answer:
        if self.error is not None:
            raise self.error
        assert self.answer is not None
        return self.answer


Batch = Callable[[list[Waiting[Job, Answer]]], None]
"""Decides every request of a batch: sets each one's `answer` or `error` (and `done`)."""


class DecisionQueue(Generic[Job, Answer]):
    """The requests of one process waiting to be decided, and whose turn it is."""

    def __init__(
        self,
        decide: Batch[Job, Answer],
        *,
        wait_seconds: float = 60.0,
        max_batch: int = 32,
        priority: Callable[[Job], int] = lambda job: 0,
    ) -> None:
        self._decide = decide
        self._wait_seconds = wait_seconds
        self._max_batch = max_batch
        self._priority = priority
        self.turn = threading.Lock()
        """Held by the thread deciding a batch now (one batch at a time in this process)."""
        self._queued: deque[Waiting[Job, Answer]] = deque()
        self._queued_lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._queued)

    def busy(self) -> bool:
        """A request is queued or a batch under way."""
        return bool(self._queued) or self.turn.locked()

    def submit(self, job: Job, beat: Callable[[], object] = lambda: None) -> Answer:
        """`job`'s answer, decided in this thread's batch or another's; `NoTurnError` when
        no batch took it within the wait."""
        waiting: Waiting[Job, Answer] = Waiting(job)
        with self._queued_lock:
            self._queued.append(waiting)
        deadline = time.monotonic() + self._wait_seconds
        while not self.turn.acquire(timeout=1.0):
            beat()
            if waiting.done.is_set():  # a batch has decided it meanwhile
                return waiting.result()
            if time.monotonic() < deadline:
                continue
            with self._queued_lock:
                queued = waiting in self._queued
                if queued:
                    self._queued.remove(waiting)
            if queued:
                raise NoTurnError(f"no turn to decide within {self._wait_seconds:g}s; retry")
            while not waiting.done.wait(1.0):  # a batch has taken it: the answer is coming
                beat()
            return waiting.result()
        try:
            while not waiting.done.is_set():
                with self._queued_lock:
                    batch = self._take()
                if not batch:  # cannot happen: a batch answers everything it took
                    raise RuntimeError("a queued request was lost")
                self._decide_all(batch)
        finally:
            self.turn.release()
        return waiting.result()

    def _take(self) -> list[Waiting[Job, Answer]]:
        """Under the queue's lock: the next batch, the most important requests first (up to
        `max_batch`), each in order of arrival among equals."""
        ranked = sorted(self._queued, key=lambda w: -self._priority(w.job))  # stable
        batch = ranked[: self._max_batch]
        if len(batch) == len(self._queued):
            self._queued.clear()
        else:
            taken = {id(w) for w in batch}
            self._queued = deque(w for w in self._queued if id(w) not in taken)
        return batch

    def _decide_all(self, batch: list[Waiting[Job, Answer]]) -> None:
        """The batch function, then every request it left unanswered fails with its error."""
        try:
            self._decide(batch)
        except BaseException as error:
            for waiting in batch:
                if not waiting.done.is_set():
                    waiting.error = error
                    waiting.done.set()
            if not isinstance(error, Exception):
                raise
        else:
            for waiting in batch:
                waiting.done.set()

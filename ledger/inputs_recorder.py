"""The decision inputs' writer: one background thread that records each decision's inputs
after its commit, so that neither the decision lock nor the activity waits for it.

The decision path takes only references under its lock (`preemption.recorded_inputs.capture`)
and hands them here with the row to store (`ledger.inputs.InputsRow`); this thread writes
them out for the shared layout (`shared_form`: only what changed since the decision before
is encoded and stored, `preemption.shared_inputs`), appends the decision's row with its new
packs (`ledger.inputs.record`), and prunes inputs older than the retention about once an
hour. Its backlog is bounded: past it, a decision's row is a marker ("not recorded: ..."),
so a burst of decisions can never hold more captures than that. While a decision is queued
or under way in its process it yields (`busy`), for a bounded time and only while its own
backlog is short, so that the lock holder has the interpreter. At shutdown (`close`) it
records what is queued for a bounded time, then stops. A ledger that refuses is logged: the
decision stands without its inputs, and the next decision stores everything it references
again (what the packer believed stored may not be).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from dataclasses import replace

import orjson
from sqlalchemy import Engine

from preemptctl.ledger.errors import LedgerError
from preemptctl.ledger.inputs import Appended, InputsRow, new_pack_id, prune, record
from preemptctl.preemption.recorded_inputs import Captured
from preemptctl.preemption.shared_inputs import InputsPacker, Shared

log = logging.getLogger(__name__)

INPUTS_MAX_BYTES = 4 * 1024 * 1024
"""A decision's own part (its row: preemptor, arguments, claims, decision and references)
above this, compressed, is recorded as a "too large" marker (0: record none)."""
INPUTS_RETENTION_DAYS = 30
PRUNE_EVERY_SECONDS = 3600.0
INPUTS_BACKLOG = 256
"""Decisions whose inputs may wait for the recorder; past that, a marker says they were
not recorded. A queued capture holds references only (three lists of the view's nodes:
about 120 KiB at 5,000 nodes); the first decision after a start stores every object (a few
seconds at 5,000 nodes), later ones what changed (milliseconds), so a burst that starts
with the first decision is recorded whole."""
YIELD_SECONDS = 0.5
"""At most this long the recorder waits, per decision, for the decision path to be idle;
it does not wait at all once a quarter of its backlog is queued."""
RECENT = 10_000
"""How many recent decisions' appended bytes the recorder keeps (`appended`)."""
YIELD_POLL_SECONDS = 0.005
CLOSE_SECONDS = 10.0
"""At shutdown, at most this long the recorder goes on recording what is queued."""


class InputsRecorder:
    """One background thread per worker process that writes each decision's inputs out for
    the shared layout (what changed since its decision before: `InputsPacker`, kept between
    decisions), appends the decision's row with its new packs, and prunes about hourly
    (`ledger.inputs`), so that neither the decision lock nor the activity waits for it. Each
    submission is the row to store (`InputsRow`, its inputs still to write) and the captured
    inputs to write into it.

    Its backlog is bounded: a decision that finds it full is recorded as a marker row ("not
    recorded: ..."), so a burst of decisions costs no more than the recorder keeps up with,
    and `replay --decision` says why it cannot replay those. `close` (at shutdown) records
    what is queued for a bounded time and stops the thread; inputs still queued then are
    lost (no row: replay says none was recorded), and a decision made after it gets a
    marker row. A ledger that refuses is logged: the decision stands without its inputs."""

    def __init__(
        self,
        ledger: Engine,
        max_bytes: int = INPUTS_MAX_BYTES,
        retention_days: int = INPUTS_RETENTION_DAYS,
        backlog: int = INPUTS_BACKLOG,
        busy: Callable[[], bool] = lambda: False,
    ) -> None:
        self._ledger = ledger
        self._busy = busy
        self._max_bytes = max_bytes
        self._retention_days = retention_days
        self._backlog = backlog
        self._queue: queue.Queue[tuple[InputsRow, Captured] | None] = queue.Queue(backlog)
        self._start = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._closing = threading.Event()  # no more yielding to decisions: shutting down
        self._stop = threading.Event()  # past close's deadline: drop what is left
        self._pruned_at = -PRUNE_EVERY_SECONDS  # monotonic; the first recording prunes
        self._packer = InputsPacker(new_pack_id)  # what is stored, between decisions
        self.appended: deque[Appended] = deque(maxlen=RECENT)
        """What each recorded decision appended (its row's and its new packs' bytes)."""
        self.cpu_seconds = 0.0
        """CPU time the recorder's thread spent writing decisions out and appending them."""
        self.skipped = 0
        """Decisions whose inputs were not recorded because the backlog was full."""
        self._behind: deque[InputsRow] = deque()
        """Decisions that found the backlog full, waiting for the thread to write their
        marker rows (a transaction each, kept off the deciding thread)."""
        self._dropped = 0  # queued when close's deadline passed

    def submit(self, row: InputsRow, captured: Captured) -> None:
        """Queue one decision's inputs, to be encoded into `row` (whose `raw` is left
        empty); a marker row instead when the backlog is full or the recorder is closed."""
        if not self._started():
            self._append(replace(row, omitted="not recorded: the worker was shutting down"))
            return
        try:
            self._queue.put_nowait((row, captured))
        except queue.Full:
            # The backlog is full, so the thread has work queued: it writes the marker
            # after its next item, before that item counts as done (`wait` sees it).
            self.skipped += 1
            self._behind.append(row)

    def wait(self) -> None:
        """Until every queued decision's inputs are recorded (tests; orderly shutdown)."""
        self._queue.join()

    def close(self, timeout: float = CLOSE_SECONDS) -> int:
        """Record what is queued for at most `timeout` seconds (without waiting for the
        decision path any more), then stop the thread; the number of decisions whose
        inputs were left unrecorded. Later submissions get a marker row."""
        with self._start:
            self._closed = True
            thread = self._thread
        if thread is None:
            return 0
        deadline = time.monotonic() + timeout
        self._closing.set()
        with suppress(queue.Full):  # after what is queued: the thread ends there
            self._queue.put(None, timeout=timeout)
        thread.join(max(0.0, deadline - time.monotonic()))
        self._stop.set()  # what the thread has not taken yet is dropped
        left = 0
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            left += item is not None
            self._queue.task_done()
        if thread.is_alive():  # recording one still: it ends after it
            with suppress(queue.Full):
                self._queue.put_nowait(None)
        self._mark_behind()  # markers are cheap: every decision that found it full has one
        left += self._dropped
        if left or thread.is_alive():
            log.warning(
                "decision inputs recorder closed: %d decision(s)' inputs not recorded%s",
                left,
                ", one still being appended" if thread.is_alive() else "",
            )
        return left

    def _started(self) -> bool:
        """The thread is running (started now if need be); False once closed."""
        with self._start:
            if self._closed:
                return False
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="decision-inputs", daemon=True
                )
                self._thread.start()
            return True

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:  # closed: everything before it is recorded
                    return
                if self._stop.is_set():  # past close's deadline
                    self._dropped += 1
                    continue
                row, captured = item
                try:
                    self._yield()
                    began = time.thread_time()
                    shared = shared_form(self._packer, captured)
                    raw = orjson.dumps(shared.document)
                    if not self._append(replace(row, raw=raw), shared):
                        self._packer.reset()  # what it believes stored may not be
                    self.cpu_seconds += time.thread_time() - began
                    self._prune()
                except Exception:  # a bug here must not stop recording for good
                    log.exception("recording the inputs of run %s failed", row.run_id)
                    self._packer.reset()
            finally:
                self._mark_behind()
                self._queue.task_done()

    def _mark_behind(self) -> None:
        """Write the marker row of each decision that found the backlog full."""
        while True:
            try:
                row = self._behind.popleft()
            except IndexError:
                return
            behind = f"not recorded: the recorder was {self._backlog} decisions behind"
            self._append(replace(row, omitted=behind))

    def _yield(self) -> None:
        """Let a decision queued or under way go first: encoding holds the GIL, and on a
        small machine its cores. Bounded, so that a steady stream of decisions still gets
        its inputs recorded (or, once the backlog is full, marked as not recorded)."""
        deadline = time.monotonic() + YIELD_SECONDS
        short = max(1, self._backlog // 4)
        while (
            not self._closing.is_set()
            and self._queue.qsize() < short
            and self._busy()
            and time.monotonic() < deadline
        ):
            time.sleep(YIELD_POLL_SECONDS)

    def _append(self, row: InputsRow, shared: Shared | None = None) -> bool:
        """Append the row (and the shared form's new packs); False when the ledger refused."""
        try:
            appended = record(
                self._ledger,
                row,
                max_bytes=self._max_bytes,
                packs=shared.packs if shared is not None else (),
            )
        except LedgerError as error:
            log.warning(
                "the inputs of the decision for %s (run %s) were not recorded: %s",
                row.preemptor.key,
                row.run_id,
                error,
            )
            return False
        if shared is not None:
            self.appended.append(appended)
        return True

    def _prune(self) -> None:
        """About hourly: the inputs older than the retention, and the packs no kept
        decision references."""
        now = time.monotonic()
        if now - self._pruned_at < PRUNE_EVERY_SECONDS:
            return
        self._pruned_at = now
        try:
            pruned = prune(self._ledger, self._retention_days)
        except LedgerError as error:
            log.warning("pruning decision inputs failed: %s", error)
            return
        if pruned:
            log.info("pruned %d decision input(s) older than %d days", pruned, self._retention_days)


def shared_form(packer: InputsPacker, captured: Captured) -> Shared:
    """One decision's inputs written out for the shared layout: its root and the packs of
    what no decision before it stored (`InputsPacker.shared`)."""
    return packer.shared(captured)

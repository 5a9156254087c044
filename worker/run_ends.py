"""How the trigger loop learns that a run it follows has ended: from the ledger (issue 29).

Every run records its end in the ledger: the decision's write-ahead when the decision ends it,
the run's last step otherwise. So the loop does not hold a long poll on the Temporal server per
preemption (a history read waiting for the close event, on every replica that follows the
run): every tick it asks the ledger, in one statement, which of the runs it follows have an
end on record, and reads each such run once (`ledger.queries.recorded_attempt`), which is
what it books and reports. All replicas follow every run (each one's start joins the same
workflow), and the ledger tells them all alike.

A run that records no end (terminated from outside, or failed in a way no step recorded) is
not waited for in vain: past `ASK_TEMPORAL_AFTER` seconds without an end on record, its
follower asks Temporal, as it did before (`RunEnds.wait` gives up, the caller reads the
result).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from sqlalchemy import Engine

from preemptctl.ledger.errors import LedgerError
from preemptctl.ledger.queries import ended_runs, recorded_attempt
from preemptctl.ledger.views import AttemptView

log = logging.getLogger(__name__)

ASK_TEMPORAL_AFTER = 60.0
"""Seconds a followed run may go with no end on record before its follower asks Temporal."""


class RunEnds:
    """The runs being waited for, and the one statement per tick that tells which ended."""

    def __init__(self, ledger: Engine) -> None:
        self._ledger = ledger
        self._waiting: dict[tuple[str, str], asyncio.Future[AttemptView]] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    async def wait(self, preemption_id: str, run_id: str, seconds: float) -> AttemptView | None:
        """The run's end, as the ledger tells it; None when none was recorded within
        `seconds`: the run is still waited for (ask Temporal, then `wait` again or
        `forget` it)."""
        key = (preemption_id, run_id)
        ended = self._waiting.get(key)
        if ended is None:
            ended = self._waiting[key] = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(seconds):
                attempt = await asyncio.shield(ended)
        except TimeoutError:
            return None
        self._waiting.pop(key, None)
        return attempt

    def forget(self, preemption_id: str, run_id: str) -> None:
        """Stop waiting for a run (its end was learned otherwise)."""
        self._waiting.pop((preemption_id, run_id), None)

    async def poll(self) -> None:
        """One look at the ledger for every run waited for; each that ended is read whole
        and its waiter woken. A ledger that cannot answer now is asked again next tick."""
        if not self._waiting:
            return
        keys = list(self._waiting)
        try:
            ended = await asyncio.to_thread(ended_runs, self._ledger, sorted({p for p, _ in keys}))
            for key in keys:
                if key not in ended:
                    continue
                attempt = await asyncio.to_thread(recorded_attempt, self._ledger, *key)
                waiter = self._waiting.get(key)
                if attempt is not None and waiter is not None and not waiter.done():
                    waiter.set_result(attempt)
        except LedgerError as error:
            log.debug("could not read the runs' ends from the ledger: %s", error)

    def close(self) -> None:
        """Wake no one any more (the loop stops)."""
        for waiter in self._waiting.values():
            with contextlib.suppress(asyncio.InvalidStateError):
                waiter.cancel()
        self._waiting.clear()

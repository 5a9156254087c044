"""Stopping asyncio tasks so that a stop always ends.

On Python 3.11 a cancellation can be lost: `asyncio.wait_for` returns its inner result
instead of raising `CancelledError` when the cancellation arrives in the same loop pass
as the inner future completes (CPython gh-86296, fixed in 3.12). A task that lost its
cancellation runs on, and a stop that cancels it once and waits for it waits forever. CI
saw exactly that: the trigger loop, woken by a watch event as the controller stopped,
swallowed its one cancellation and the controller's exit hung for the rest of the run.

Hence two rules, kept here:
- our own code waits with `asyncio.timeout` (which counts cancellations), never
  `asyncio.wait_for` (ruff bans it, TID251);
- a stop cancels again until the task ends, within a grace period, and then goes on
  without it, saying which task did not end (a library may still lose one).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

log = logging.getLogger(__name__)

GRACE_SECONDS = 10.0
RECANCEL_EVERY = 0.5


async def cancel_and_wait(
    tasks: Iterable[asyncio.Task[Any]], *, grace: float = GRACE_SECONDS, what: str = "tasks"
) -> set[asyncio.Task[Any]]:
    """Cancel `tasks` and wait until they end, cancelling again every half second; after
    `grace` seconds give up on those still running (logged as an error) and return them."""
    tasks = list(tasks)
    pending = {task for task in tasks if not task.done()}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    while pending:
        for task in pending:
            task.cancel()
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        _, pending = await asyncio.wait(pending, timeout=min(RECANCEL_EVERY, remaining))
    for task in tasks:
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: a crash on the way out is not logged twice
    if pending:
        log.error(
            "stopping %s: %s did not end within %gs of being cancelled; going on without them",
            what,
            ", ".join(sorted(task.get_name() for task in pending)),
            grace,
        )
    return pending


def cancellation_requested() -> bool:
    """Was the current task asked to stop, even if the `CancelledError` was lost on the way
    (see the module's docstring)? A supervisor must not restart such a task."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0

"""Stopping tasks so that a stop always ends, even when a task loses a cancellation.

Python 3.11's `asyncio.wait_for` loses a cancellation that arrives as its inner future
completes (gh-86296). A stop that cancelled once and waited forever hung CI for 80 minutes
on the trigger loop. The stand-in here loses its first cancellation on purpose.

Scenarios:
- a task that swallows its first cancellation is cancelled again and ends;
- a task that never ends is given up after the grace period, named in an error line, and
  returned, so the stop itself ends;
- a task that crashed before the stop does not make the stop raise;
- the supervisor's stop ends a supervised task that swallowed its cancellation, and does
  not restart it although its factory returned.

The race itself, on the trigger loop, is in tests/worker/test_trigger_loop.py.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from preemptctl.worker.cancellation import cancel_and_wait
from preemptctl.worker.metrics import Metrics
from preemptctl.worker.supervisor import Supervisor


async def _swallows_one_cancellation(started: asyncio.Event, cancels: list[int]) -> None:
    started.set()
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancels.append(1)
            if len(cancels) > 1:
                raise
            # lost, as wait_for loses it on 3.11: go round again


async def test_a_task_that_swallows_a_cancellation_is_cancelled_again_and_ends() -> None:
    started, cancels = asyncio.Event(), list[int]()
    task = asyncio.create_task(_swallows_one_cancellation(started, cancels))
    await started.wait()
    left = await cancel_and_wait([task], grace=5.0)
    assert (left, task.cancelled(), len(cancels)) == (set(), True, 2)


async def test_a_task_that_never_ends_is_given_up_after_the_grace_and_named(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                continue

    task = asyncio.create_task(stubborn(), name="stubborn")
    await asyncio.sleep(0)
    with caplog.at_level(logging.ERROR, logger="preemptctl"):
        left = await cancel_and_wait([task], grace=0.3, what="the test's tasks")
    assert left == {task}
    assert "stopping the test's tasks: stubborn did not end within 0.3s" in caplog.text
    release.set()
    task.cancel()
    await asyncio.sleep(0)
    assert task.done()


async def test_a_task_that_crashed_before_the_stop_does_not_make_it_raise() -> None:
    async def crashes() -> None:
        raise RuntimeError("boom")

    task = asyncio.create_task(crashes())
    await asyncio.sleep(0)
    assert await cancel_and_wait([task]) == set()


async def test_the_supervisor_stops_a_task_that_swallowed_its_cancellation() -> None:
    supervisor = Supervisor(Metrics())
    started, cancels = asyncio.Event(), list[int]()
    returned = asyncio.Event()

    async def loses_then_returns() -> None:
        # Loses the cancellation and returns normally, as a loop that lost it and then
        # saw its own stop condition would: still not to be restarted.
        try:
            started.set()
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancels.append(1)
        returned.set()

    task = supervisor.spawn("trigger-loop", loses_then_returns)
    await started.wait()
    task.cancel()  # one cancellation, lost inside; the supervisor must not restart
    await returned.wait()
    await asyncio.sleep(0.05)
    assert task.done() and len(cancels) == 1
    async with asyncio.timeout(5):
        await supervisor.stop(grace=2.0)

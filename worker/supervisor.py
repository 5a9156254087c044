"""Supervision of the controller's background tasks (kopf's daemons, Erlang's one-for-one):
a task that crashes is restarted with backoff, one that crashes too often is given up on,
and `/healthz` says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TypeVar

from preemptctl.worker.cancellation import GRACE_SECONDS, cancel_and_wait, cancellation_requested
from preemptctl.worker.metrics import Metrics

log = logging.getLogger("preemptctl")

T = TypeVar("T")


async def run_in_thread(name: str, target: Callable[[], T]) -> T:
    """Run `target` in a thread of its own (not the default executor: a reflector runs for
    the life of the process, and a probe's check may block for seconds) and wait for it to
    return or raise. Cancelling the wait leaves the thread to finish on its own."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
            loop.call_soon_threadsafe(lambda: None if done.done() else outcome())

    def body() -> None:
        try:
            result = target()
        except BaseException as error:
            failure = error  # `error` is unbound once the except block ends
            settle(lambda: done.set_exception(failure))
        else:
            settle(lambda: done.set_result(result))

    threading.Thread(target=body, name=name, daemon=True).start()
    return await done


class Supervisor:
    """Keeps the controller's background tasks running (kopf's daemons, Erlang's one-for-one).

    A task that raises, or returns while the controller runs, is logged, counted in
    `preemptctl_task_restarts_total{task}` and restarted after a backoff that doubles from
    `initial` to `maximum` (and starts over once the task has run longer than `maximum`).
    More than `max_restarts` crashes within `window` seconds and the supervisor gives up on
    that task: `healthy()` then says so, `/healthz` fails, and the kubelet restarts the pod.
    """

    def __init__(
        self,
        metrics: Metrics,
        *,
        initial: float = 0.5,
        maximum: float = 30.0,
        max_restarts: int = 10,
        window: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._metrics = metrics
        self._initial = initial
        self._maximum = maximum
        self._max_restarts = max_restarts
        self._window = window
        self._clock = clock
        self._sleep = sleep
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._gave_up: dict[str, str] = {}
        self._stopping = False

    def spawn(self, name: str, factory: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
        """Run `factory()` under supervision; the returned task ends only when cancelled or
        given up on."""
        task = asyncio.create_task(self._keep(name, factory), name=f"supervised:{name}")
        self._tasks[name] = task
        return task

    def spawn_thread(self, name: str, target: Callable[[], None]) -> asyncio.Task[None]:
        """Run the blocking `target` in a thread of its own, under supervision."""
        return self.spawn(name, lambda: run_in_thread(name, target))

    def healthy(self) -> tuple[bool, str]:
        if self._gave_up:
            names = ", ".join(f"{name} ({why})" for name, why in sorted(self._gave_up.items()))
            return False, f"gave up restarting: {names}"
        return True, "ok"

    @property
    def gave_up(self) -> dict[str, str]:
        return dict(self._gave_up)

    def stopping(self) -> None:
        """From now on a task that ends is not restarted (the controller is stopping, and
        stopping the view ends its reflector threads)."""
        self._stopping = True

    async def stop(self, grace: float = GRACE_SECONDS) -> None:
        """Cancel every task and wait for them to end (cancelling again, within `grace`:
        see `cancellation`), so that a task which lost a cancellation cannot hang the stop."""
        self._stopping = True
        await cancel_and_wait(self._tasks.values(), grace=grace, what="supervised tasks")
        self._tasks.clear()

    async def _keep(self, name: str, factory: Callable[[], Awaitable[None]]) -> None:
        crashes: deque[float] = deque()
        delay = self._initial
        while True:
            began = self._clock()
            try:
                await factory()
                why = "ended unexpectedly"
            except asyncio.CancelledError:
                raise
            except Exception as error:
                why = f"{type(error).__name__}: {error}"[:300]
                log.error("task %s crashed: %s", name, why, exc_info=error)
            if self._stopping or cancellation_requested():
                return  # asked to stop, even if the CancelledError itself was lost
            now = self._clock()
            if now - began > self._maximum:
                delay = self._initial  # it ran healthy for a while: a fresh crash
            crashes.append(now)
            while crashes and now - crashes[0] > self._window:
                crashes.popleft()
            if len(crashes) > self._max_restarts:
                self._gave_up[name] = why
                log.error(
                    "task %s crashed %d times in %gs; not restarting it (healthz fails): %s",
                    name,
                    len(crashes),
                    self._window,
                    why,
                )
                return
            self._metrics.task_restarts.labels(name).inc()
            log.warning("restarting task %s in %.1fs (%s)", name, delay, why)
            await self._sleep(delay)
            delay = min(delay * 2, self._maximum)

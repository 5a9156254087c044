"""Supervision of the controller's background tasks, and the probes that report on it.

Scenarios:
- a task that crashes is restarted after a backoff that doubles, and each restart is
  counted in preemptctl_task_restarts_total{task};
- a task that returns while the controller runs is restarted too;
- a blocking target run in a thread of its own is restarted when it raises;
- too many crashes within the window: the supervisor gives up on that task and says so;
- once stopping, an ending task is not restarted;
- /healthz answers 503 naming the task the supervisor gave up on;
- /parked lists the parked pods as JSON (pod, uid, reason, since);
- an event loop that does not answer is seen from another thread within a bounded wait;
- a ledger that does not answer at start-up is waited for with backoff, one log line per
  attempt (never a password, in the URL's user info or its query string), until stopped.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from preemptctl.worker.config import Settings
from preemptctl.worker.connections import wait_for_ledger
from preemptctl.worker.metrics import Metrics
from preemptctl.worker.probes import ProbeServer, loop_answers
from preemptctl.worker.supervisor import Supervisor


class FakeSleep:
    """Records the backoff waits instead of sleeping them."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def restarts(metrics: Metrics, task: str) -> float:
    value = metrics.registry.get_sample_value("preemptctl_task_restarts_total", {"task": task})
    return value or 0.0


async def test_crashed_task_is_restarted_with_doubling_backoff_and_counted() -> None:
    metrics, sleep = Metrics(), FakeSleep()
    supervisor = Supervisor(metrics, initial=0.5, maximum=4, clock=lambda: 0.0, sleep=sleep)
    runs = 0
    done = asyncio.Event()

    async def flaky() -> None:
        nonlocal runs
        runs += 1
        if runs <= 5:
            raise RuntimeError("UNAVAILABLE")
        done.set()
        await asyncio.Event().wait()  # then runs for good

    supervisor.spawn("trigger-loop", flaky)
    async with asyncio.timeout(5):
        await done.wait()
    await supervisor.stop()
    assert sleep.waits == [0.5, 1, 2, 4, 4]
    assert restarts(metrics, "trigger-loop") == 5
    assert supervisor.healthy() == (True, "ok")


async def test_task_that_returns_is_restarted() -> None:
    metrics, sleep = Metrics(), FakeSleep()
    supervisor = Supervisor(metrics, clock=lambda: 0.0, sleep=sleep)
    runs = 0
    done = asyncio.Event()

    async def returns_once() -> None:
        nonlocal runs
        runs += 1
        if runs == 2:
            done.set()
            await asyncio.Event().wait()

    supervisor.spawn("signal-sender", returns_once)
    async with asyncio.timeout(5):
        await done.wait()
    await supervisor.stop()
    assert restarts(metrics, "signal-sender") == 1


async def test_thread_target_that_raises_is_restarted() -> None:
    metrics = Metrics()
    supervisor = Supervisor(metrics, clock=lambda: 0.0, sleep=FakeSleep())
    runs = 0
    second = threading.Event()
    release = threading.Event()

    def reflector() -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            raise OSError("connection reset")
        second.set()
        release.wait(5)

    supervisor.spawn_thread("view-Pod", reflector)
    assert await asyncio.to_thread(second.wait, 5)
    supervisor.stopping()
    release.set()
    await supervisor.stop()
    assert restarts(metrics, "view-Pod") == 1


async def test_gives_up_after_too_many_crashes_in_the_window() -> None:
    metrics = Metrics()
    supervisor = Supervisor(
        metrics, max_restarts=3, window=60, clock=lambda: 0.0, sleep=FakeSleep()
    )

    async def always() -> None:
        raise RuntimeError("broken for good")

    task = supervisor.spawn("trigger-loop", always)
    async with asyncio.timeout(5):
        await task
    assert restarts(metrics, "trigger-loop") == 3
    healthy, why = supervisor.healthy()
    assert not healthy
    assert why == "gave up restarting: trigger-loop (RuntimeError: broken for good)"


async def test_stopping_supervisor_does_not_restart_an_ending_task() -> None:
    metrics = Metrics()
    supervisor = Supervisor(metrics, clock=lambda: 0.0, sleep=FakeSleep())
    supervisor.stopping()

    async def ends() -> None:
        return

    async with asyncio.timeout(5):
        await supervisor.spawn("probes", ends)
    assert restarts(metrics, "probes") == 0


@pytest.fixture
def probes() -> Iterator[ProbeServer]:
    server = ProbeServer("127.0.0.1", 0, 0, Metrics())
    server.start()
    yield server
    server.close()


def get(server: ProbeServer, path: str) -> tuple[int, str]:
    url = f"http://127.0.0.1:{server.server_address[1]}{path}"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_healthz_fails_naming_the_task_given_up_on(probes: ProbeServer) -> None:
    assert get(probes, "/healthz") == (200, "ok\n")
    probes.health = lambda: (False, "gave up restarting: trigger-loop (boom)")
    assert get(probes, "/healthz") == (503, "gave up restarting: trigger-loop (boom)\n")


def test_parked_pods_are_listed_as_json(probes: ProbeServer) -> None:
    assert get(probes, "/parked") == (200, "[]\n")
    parked = {"pod": "default/web", "uid": "u1", "reason": "RBAC", "since": "2026-01-01T00:00:00"}
    probes.parked = lambda: [parked]
    code, body = get(probes, "/parked")
    assert (code, json.loads(body)) == (200, [parked])


def test_blocked_event_loop_is_seen_from_another_thread() -> None:
    loop = asyncio.new_event_loop()
    release = threading.Event()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    try:
        assert loop_answers(loop, timeout=5)
        loop.call_soon_threadsafe(release.wait, 5)  # the loop blocks in a sync call
        assert not loop_answers(loop, timeout=0.2)
    finally:
        release.set()
        loop.call_soon_threadsafe(loop.stop)
        runner.join(5)
        loop.close()
    assert not loop_answers(loop, timeout=0.2)  # closed


@pytest.mark.parametrize(
    "credentials",
    [
        "nobody:secret@{address}/ledger",
        "nobody@{address}/ledger?password=secret&sslpassword=secret",
    ],
)
async def test_unreachable_ledger_is_waited_for_with_one_line_per_attempt(
    caplog: pytest.LogCaptureFixture, credentials: str
) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    address = f"127.0.0.1:{port}"
    settings = Settings(database_url="postgresql+psycopg://" + credentials.format(address=address))
    stop = asyncio.Event()
    reasons: list[str] = []

    def on_wait(why: str) -> None:
        reasons.append(why)
        if len(reasons) == 2:
            stop.set()

    with caplog.at_level(logging.WARNING, logger="preemptctl"):
        async with asyncio.timeout(30):
            engine = await wait_for_ledger(settings, stop, on_wait=on_wait, initial=0.01)
    assert engine is None
    lines = [r.getMessage() for r in caplog.records if "waiting for the ledger" in r.getMessage()]
    assert len(lines) == 2
    assert "attempt 1" in lines[0] and "attempt 2" in lines[1]
    assert all("secret" not in line for line in lines)

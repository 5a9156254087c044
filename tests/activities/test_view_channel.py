"""The view channel: what a workflow process asks of the process that holds the view.

Scenarios:
- an answer comes back as the main process made it (a dataclass, pickled), one connection
  per calling thread, many threads at once;
- a failure raised on purpose in the main process comes back as itself: its message, its
  type, whether retrying can help, and its retry delay;
- a bug in the main process comes back as a retryable failure with its words, and the
  channel serves on;
- before the main process's activities exist, a request waits for them (`ServedOnceReady`),
  and past its wait fails retryably;
- the main process gone: the call fails retryably (Temporal retries the step), and a later
  call reconnects once it listens again;
- a client without the replica's key is refused.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from preemptctl.activities.view_channel import (
    ChannelAddress,
    ServedOnceReady,
    ViewChannel,
    ViewChannelServer,
)


@dataclass(frozen=True)
class Answer:
    operation: str
    argument: Any
    thread: int


def echo(operation: str, argument: Any) -> Answer:
    if operation == "refuse":
        raise ApplicationError(
            "delete pods: forbidden", type="PermissionDenied", non_retryable=True
        )
    if operation == "throttle":
        raise ApplicationError("429", type="Retryable", next_retry_delay=timedelta(seconds=3))
    if operation == "bug":
        raise KeyError("oops")
    return Answer(operation, argument, threading.get_ident())


@pytest.fixture
def server() -> Any:
    served = ViewChannelServer(echo)
    served.start()
    yield served
    served.close()


def test_an_answer_comes_back_as_made(server: ViewChannelServer) -> None:
    channel = ViewChannel(server.address)
    answer = channel.call("select_preemption", {"pod": "default/web"})
    assert (answer.operation, answer.argument) == ("select_preemption", {"pod": "default/web"})


def test_many_threads_call_at_once(server: ViewChannelServer) -> None:
    channel = ViewChannel(server.address)
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda i: channel.call("standing", i), range(64)))
    assert [a.argument for a in answers] == list(range(64))
    assert len({a.thread for a in answers}) > 1  # one connection (and server thread) each


def test_a_failure_on_purpose_comes_back_as_itself(server: ViewChannelServer) -> None:
    channel = ViewChannel(server.address)
    with pytest.raises(ApplicationError) as refused:
        channel.call("refuse", None)
    assert (refused.value.message, refused.value.type) == (
        "delete pods: forbidden",
        "PermissionDenied",
    )
    assert refused.value.non_retryable
    with pytest.raises(ApplicationError) as throttled:
        channel.call("throttle", None)
    assert not throttled.value.non_retryable
    assert throttled.value.next_retry_delay == timedelta(seconds=3)


def test_a_bug_is_a_retryable_failure_and_the_channel_serves_on(
    server: ViewChannelServer,
) -> None:
    channel = ViewChannel(server.address)
    with pytest.raises(ApplicationError) as failed:
        channel.call("bug", None)
    assert failed.value.message == "KeyError: 'oops'"
    assert not failed.value.non_retryable
    assert channel.call("standing", 1).argument == 1


def test_a_request_before_the_activities_exist_waits_for_them() -> None:
    served = ServedOnceReady(wait=5.0)
    server = ViewChannelServer(served)
    server.start()
    try:
        channel = ViewChannel(server.address)
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(channel.call, "standing", 7)
            served.ready(echo)
            assert waiting.result(timeout=5).argument == 7
    finally:
        server.close()


def test_a_request_past_the_wait_fails_retryably() -> None:
    server = ViewChannelServer(ServedOnceReady(wait=0.1))
    server.start()
    try:
        with pytest.raises(ApplicationError) as failed:
            ViewChannel(server.address).call("standing", 7)
        assert failed.value.type == "ViewChannelNotReady" and not failed.value.non_retryable
    finally:
        server.close()


def test_the_main_process_gone_fails_the_call_retryably_until_it_listens_again() -> None:
    first = ViewChannelServer(echo)
    first.start()
    channel = ViewChannel(first.address)
    assert channel.call("standing", 1).argument == 1
    first.close()
    with pytest.raises(ApplicationError) as lost:
        channel.call("standing", 2)
    assert lost.value.type == "ViewChannelLost" and not lost.value.non_retryable


def test_a_client_without_the_key_is_refused(server: ViewChannelServer) -> None:
    with pytest.raises(AuthenticationError):
        Client(server.address.path, "AF_UNIX", authkey=b"not the key")
    wrong = ViewChannel(ChannelAddress(server.address.path, b"not the key"))
    with pytest.raises((ApplicationError, AuthenticationError)):
        wrong.call("standing", 1)

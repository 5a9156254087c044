"""What a workflow process asks of the process that holds the cluster view, over a local
channel (issue 29): the select, and where a preemptor (or a pod group) stands; and what that
process asks of a workflow process: to start a preemption, so that the start is eager.

A replica runs its workflows and their local activities in workflow processes, and holds its
one cluster view, its decision path and its claims in the main process
(docs/scale-out.md). The select was the workflow's one regular activity so that it would
run beside the view: a task through the Temporal server's matching, and a second workflow
task for its completion, per preemption. Now the select is a local activity like every
other step, and a workflow process hands its body to the main process over a Unix socket
(`multiprocessing.connection`, authenticated with a key made per replica, in a directory
only this user can read): the main process decides exactly as before (the same activity
method, the same lock, queue, claims and write-ahead), and the answer comes back in the
time of a local call. The victims' steps ask the same channel whether the room is still
needed, answered from the view (no GET of the preemptor per victim).

The other way round: a start is eager only through the client of the worker that runs the
workflow, and the trigger loop that starts preemptions is the main process's. So each
workflow process also holds one connection on which it serves the main process
(`ViewChannel.serve_main`); the main process hands a start to one of them, in turn
(`ViewChannelServer.ask`), and the first workflow task comes back in the start's answer, to
the worker that will run it.

Both ends are ours and of one version (the workflow processes are forked from the main
one), so requests and answers are pickled dataclasses. A failure the main process raised
on purpose (`ApplicationError`) comes back as itself (its message, type and whether
retrying can help); the channel lost (the main process restarting) is a retryable failure
of the step, retried by Temporal as any other.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection, answer_challenge, deliver_challenge
from typing import Any

from temporalio.exceptions import ApplicationError

log = logging.getLogger(__name__)

SERVE = "serve the main process"  # a workflow process's first word on its serving connection
SERVES = object()
ACCEPT_TICK = 0.5  # seconds the accepting thread waits before it looks whether it is closed

Serve = Callable[[str, Any], Any]
"""What the main process does for a request: (operation name, argument) -> answer."""


class ServedOnceReady:
    """A `Serve` bound late: the channel listens from the start (the workflow processes
    start while the view syncs), the activities that answer exist once it has synced; a
    request before then waits for them, at most `wait` seconds, then fails retryably."""

    def __init__(self, wait: float = 60.0) -> None:
        self._serve: Serve | None = None
        self._bound = threading.Event()
        self._wait = wait

    def ready(self, serve: Serve) -> None:
        self._serve = serve
        self._bound.set()

    def __call__(self, operation: str, argument: Any) -> Any:
        if not self._bound.wait(self._wait) or self._serve is None:
            raise ApplicationError(
                "the replica's main process is still starting (its cluster view syncs)",
                type="ViewChannelNotReady",
            )
        return self._serve(operation, argument)


@dataclass(frozen=True)
class ChannelAddress:
    """Where a workflow process reaches the main process, and the key it proves itself with."""

    path: str
    authkey: bytes


@dataclass(frozen=True)
class _Failed:
    """A failure raised on purpose by the main process, as the step should raise it."""

    message: str
    type: str | None
    non_retryable: bool
    next_retry_delay: float | None


class ViewChannelServer:
    """The main process's end: one thread accepting, one per workflow-process connection
    (each local activity thread of a workflow process holds one)."""

    def __init__(self, serve: Serve) -> None:
        self._serve = serve
        self._directory = tempfile.mkdtemp(prefix="preemptctl-channel-")
        os.chmod(self._directory, 0o700)
        self.address = ChannelAddress(
            os.path.join(self._directory, "view.sock"), secrets.token_bytes(32)
        )
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._socket.bind(self.address.path)
        self._socket.listen(64)
        self._socket.settimeout(ACCEPT_TICK)  # so that the accepting thread sees it closed
        self._closed = threading.Event()
        self._open: set[Connection] = set()
        self._lock = threading.Lock()
        # Connections on which a workflow process serves this one (`ask`), each with its lock.
        self._served_by: list[tuple[Connection, threading.Lock]] = []
        self._turn = 0
        self._thread = threading.Thread(
            target=self._accept, name="preemptctl-view-channel", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Stop listening and hang up on every workflow process (their calls in flight fail
        retryably, as when this process dies)."""
        self._closed.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        with contextlib.suppress(OSError):
            self._socket.close()
        with self._lock:
            connections, self._open = self._open, set()
            connections |= {connection for connection, _ in self._served_by}
            self._served_by = []
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.close()
        shutil.rmtree(self._directory, ignore_errors=True)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                accepted, _ = self._socket.accept()
            except TimeoutError:
                continue
            except OSError:  # closed under it
                return
            accepted.settimeout(None)
            threading.Thread(
                target=self._answer,
                args=(Connection(accepted.detach()),),
                name="preemptctl-view-channel-call",
                daemon=True,
            ).start()

    def _answer(self, connection: Connection) -> None:
        """Authenticate the caller (a workflow process of this replica proves it holds the
        key, and learns this process does), then serve its calls until it hangs up."""
        try:
            deliver_challenge(connection, self.address.authkey)
            answer_challenge(connection, self.address.authkey)
        except (AuthenticationError, EOFError, OSError):
            connection.close()
            return
        with self._lock:
            if self._closed.is_set():
                connection.close()
                return
            self._open.add(connection)
        serving = kept = False
        try:
            serving = self._serve_calls(connection) is SERVES
        finally:
            with self._lock:
                self._open.discard(connection)
                kept = serving and not self._closed.is_set()
                if kept:  # this process asks on it from now on (`ask`)
                    self._served_by.append((connection, threading.Lock()))
            if not kept:
                with contextlib.suppress(OSError):
                    connection.close()

    def _serve_calls(self, connection: Connection) -> object:
        """Answer the calls on `connection` until it hangs up; `SERVES` when its first word
        says the workflow process serves this one on it instead."""
        first = True
        while not self._closed.is_set():
            try:
                operation, argument = connection.recv()
            except (EOFError, OSError, TypeError):  # hung up (or closed under the read)
                return None
            if first and operation == SERVE:
                return SERVES
            first = False
            try:
                connection.send(self._answer_to(operation, argument))
            except (OSError, ValueError):
                return None
        return None

    def ask(self, operation: str, argument: Any, timeout: float) -> Any:
        """A workflow process's answer to `operation` on `argument` (each asked in turn);
        `NoWorkflowProcess` when none serves (none started yet, or every one gone)."""
        while True:
            with self._lock:
                if not self._served_by:
                    raise NoWorkflowProcess("no workflow process serves this one yet")
                self._turn = (self._turn + 1) % len(self._served_by)
                connection, lock = self._served_by[self._turn]
            try:
                with lock:
                    connection.send((operation, argument))
                    if not connection.poll(timeout):
                        raise TimeoutError(f"no answer to {operation} within {timeout:g}s")
                    answer = connection.recv()
            except (EOFError, OSError, ValueError):
                with self._lock:  # gone: the next one is asked
                    if (connection, lock) in self._served_by:
                        self._served_by.remove((connection, lock))
                continue
            if isinstance(answer, _Failed):
                raise ApplicationError(answer.message, type=answer.type)
            return answer

    def _answer_to(self, operation: str, argument: Any) -> Any:
        """What the main process answers: its result, or its failure as the step raises it."""
        try:
            return self._serve(operation, argument)
        except ApplicationError as error:
            delay = error.next_retry_delay
            return _Failed(
                error.message,
                error.type,
                error.non_retryable,
                delay.total_seconds() if delay is not None else None,
            )
        except Exception as error:  # a bug: retryable, with its words
            log.exception("the view channel failed to serve %s", operation)
            return _Failed(f"{type(error).__name__}: {error}", None, False, None)


class NoWorkflowProcess(Exception):
    """No workflow process serves the main process (yet): do it otherwise."""


class ViewChannel:
    """A workflow process's end: one connection per thread (a local activity's), opened
    on first use and again after the main process dropped it."""

    def __init__(self, address: ChannelAddress) -> None:
        self._address = address
        self._local = threading.local()

    def call(self, operation: str, argument: Any) -> Any:
        """The main process's answer to `operation` on `argument`; its failure raised."""
        try:
            connection = self._connection()
            connection.send((operation, argument))
            answer = connection.recv()
        except (EOFError, OSError, AuthenticationError) as error:
            self._drop()
            raise ApplicationError(
                f"the replica's main process did not answer {operation} ({error}); will retry",
                type="ViewChannelLost",
            ) from None
        if isinstance(answer, _Failed):
            delay = answer.next_retry_delay
            raise ApplicationError(
                answer.message,
                type=answer.type,
                non_retryable=answer.non_retryable,
                next_retry_delay=timedelta(seconds=delay) if delay is not None else None,
            )
        return answer

    def serve_main(self, serve: Serve, stopped: threading.Event) -> None:
        """Serve the main process's requests (`ViewChannelServer.ask`) until `stopped`, on a
        connection of its own, connecting again if it drops (run it in a thread)."""
        while not stopped.is_set():
            try:
                connection = Client(self._address.path, "AF_UNIX", authkey=self._address.authkey)
            except (OSError, EOFError, AuthenticationError):
                stopped.wait(1.0)
                continue
            with connection:
                try:
                    connection.send((SERVE, None))
                    while not stopped.is_set():
                        if not connection.poll(ACCEPT_TICK):
                            continue
                        operation, argument = connection.recv()
                        try:
                            answer: Any = serve(operation, argument)
                        except Exception as error:  # told to the main process, as a failure
                            answer = _Failed(f"{type(error).__name__}: {error}", None, False, None)
                        connection.send(answer)
                except (EOFError, OSError):
                    stopped.wait(1.0)

    def _connection(self) -> Connection:
        connection: Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = Client(self._address.path, "AF_UNIX", authkey=self._address.authkey)
            self._local.connection = connection
        return connection

    def _drop(self) -> None:
        connection: Connection | None = getattr(self._local, "connection", None)
        self._local.connection = None
        if connection is not None:
            with contextlib.suppress(OSError):
                connection.close()

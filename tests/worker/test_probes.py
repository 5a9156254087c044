"""The worker's HTTP endpoints: what Kubernetes probes and Prometheus scrape.

Scenarios, the running controller:
- /healthz answers while the process runs, on the probe port and on the metrics port;
- /readyz answers ready once the cluster view has synced and Temporal answers, with the
  sync progress per kind (objects listed, seconds);
- /metrics serves upstream's preemption metrics, counting a finished preemption by outcome
  and its victims; the probe port serves no /metrics;
- /parked lists no pod while nothing is parked;
- an unknown path is 404.

Scenarios, slow and hostile clients (issue 20, finding 3):
- /healthz and /readyz are answered while sixteen clients on 127.0.0.1 drip requests into
  the metrics port one byte every 5 s (the attack that held every slot of the old server);
- the probe port answers while 256 slow clients from 64 addresses hold the metrics port;
- a request dripped within the idle time but not finished within the request deadline is
  dropped at the deadline; a connection that sends nothing is dropped as idle;
- dropped connections are exported by listener and reason
  (preemptctl_probe_connections_dropped_total);
- a client address holds at most `per_client` connections: one more drops its oldest
  connection still waiting for its request, and other addresses are untouched;
- a client whose every connection is being answered has the next one refused at once;
- a full listener drops its oldest waiting connection for a newcomer;
- requests that arrive while a check runs share its one evaluation;
- a method other than GET is 405, a malformed request line 400, an oversized head 431;
- each port that cannot be listened on is one start-up error naming it;
- close() stops serving on both ports.
"""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from preemptctl.emulator import SimulatedCluster
from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.migrations import upgrade
from preemptctl.worker.config import Settings, load_settings
from preemptctl.worker.connections import StartupError, connect_cluster
from preemptctl.worker.metrics import Metrics
from preemptctl.worker.ports import free_port
from preemptctl.worker.probes import Limits, ProbeServer, open_probe_server
from preemptctl.worker.runtime import running_controller
from preemptctl.worker.scenarios import ONLINE_OFFLINE
from tests.support.slow_clients import Answer, SlowClients, probe
from tests.support.temporal import wait_until_closed


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


async def fetch(port: int, path: str) -> tuple[int, str]:
    return await asyncio.to_thread(get, port, path)


@pytest.fixture
def cluster():
    with SimulatedCluster(max_grace_seconds=0.5) as simulated:
        simulated.load(ONLINE_OFFLINE)
        simulated.start()
        yield simulated


async def test_probes_and_metrics(temporal, cluster, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    upgrade(url)
    port, probe_port = free_port(), free_port()
    settings = load_settings(
        overrides={
            "kubeconfig": str(cluster.kubeconfig_path),
            "database_url": url,
            "metrics_port": port,
            "probe_port": probe_port,
            "task_queue": "probes",
        },
        environ={},
    )
    ledger = create_ledger_engine(url)
    try:
        async with running_controller(
            settings, temporal.client, connect_cluster(settings), ledger
        ) as controller:
            assert await fetch(probe_port, "/healthz") == (200, "ok\n")
            assert await fetch(port, "/healthz") == (200, "ok\n")
            code, ready = await fetch(probe_port, "/readyz")
            assert code == 200
            assert ready.splitlines()[0] == "ready"
            assert "Pod: 14 listed, synced in" in ready
            assert (await fetch(port, "/readyz"))[0] == 200
            assert (await fetch(probe_port, "/metrics"))[0] == 404
            assert (await fetch(port, "/nope"))[0] == 404
            assert await fetch(port, "/parked") == (200, "[]\n")
            for _ in range(200):
                if any(r["preemptor"] == "default/nginx-a" for r in controller.trigger.finished):
                    break
                await asyncio.sleep(0.1)
            code, metrics = await fetch(port, "/metrics")
            await wait_until_closed(temporal.client, 'TaskQueue = "probes"')
    finally:
        ledger.dispose()
    assert code == 200
    assert 'preemptctl_preemption_attempts_total{outcome="completed"}' in metrics
    assert re.search(r"\nscheduler_preemption_attempts_total [1-9]", metrics)
    assert "\nscheduler_preemption_victims_bucket" in metrics
    assert 'preemptctl_preemption_duration_seconds_count{outcome="completed"}' in metrics
    assert "\npreemptctl_preemption_evictions_throttled_total 0.0" in metrics
    assert "\nprocess_resident_memory_bytes" in metrics
    # Upstream's two step timings, observed from the finished preemption's result.
    evaluated = (
        'scheduler_preemption_evaluation_duration_seconds_count{preemptor="DefaultPreemption"'
    )
    assert evaluated in metrics
    executed = 'scheduler_preemption_execution_duration_seconds_count{preemptor="DefaultPreemption"'
    assert executed in metrics


# -- slow and hostile clients ------------------------------------------------------------------

PATIENT = Limits(request_seconds=60, idle_seconds=60)  # only the limit under test acts


Serve = Callable[[Limits], ProbeServer]


@pytest.fixture
def serve() -> Iterator[Serve]:
    """Start probe servers on free ports with the given limits; each is closed afterwards."""
    servers: list[ProbeServer] = []

    def start(limits: Limits) -> ProbeServer:
        server = ProbeServer("127.0.0.1", 0, 0, Metrics(), limits)
        server.readiness = lambda: (True, "ready")
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def until(predicate: Callable[[], bool], what: str) -> None:
    """Wait (at most 10 s) for `predicate()`; a bounded wait, not a timing assertion."""
    deadline = time.monotonic() + 10
    while not predicate():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.01)


def silent(port: int, source: str) -> socket.socket:
    """A connection from `source` that sends nothing."""
    return socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))


def closed_by_server(sock: socket.socket) -> bool:
    """True once the server closes `sock` (within 5 s); False if it is still open then."""
    sock.settimeout(5)
    try:
        return sock.recv(100) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def still_open(sock: socket.socket) -> bool:
    sock.settimeout(0.2)
    try:
        return sock.recv(100) != b""
    except TimeoutError:
        return True
    except ConnectionResetError:
        return False


def status_line(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        return sock.makefile("rb").readline().rstrip()


def test_probes_are_answered_while_sixteen_slow_clients_drip_into_the_metrics_port(
    serve: Serve,
) -> None:
    server = serve(Limits())
    port = server.server_address[1]
    with SlowClients(port, count=16, interval=5.0):
        until(lambda: server.connections()["metrics"] == 4, "the attack holds its 4 connections")
        answers = [probe(port, "/healthz"), probe(port, "/readyz")]
    assert [(a.status, a.body) for a in answers] == [(200, "ok\n"), (200, "ready\n")]


def test_probe_port_answers_while_slow_clients_from_many_addresses_fill_the_metrics_port(
    serve: Serve,
) -> None:
    server = serve(Limits())
    sources = [f"127.0.1.{i}" for i in range(1, 65)]
    with SlowClients(server.server_address[1], count=256, interval=0.5, sources=sources):
        until(lambda: server.connections()["metrics"] == 64, "the metrics listener is full")
        port = server.probe_address[1]
        answers = [probe(port, "/healthz"), probe(port, "/readyz")]
    assert [(a.status, a.body) for a in answers] == [(200, "ok\n"), (200, "ready\n")]


def test_request_not_finished_within_the_deadline_is_dropped(serve: Serve) -> None:
    server = serve(Limits(request_seconds=0.5, idle_seconds=0.3))
    with SlowClients(server.server_address[1], count=1, interval=0.05, reconnect=60) as attack:
        until(lambda: attack.closed_by_server == 1, "the server closes the dripping client")
    assert server.dropped == {"deadline": 1}


def test_connection_that_sends_nothing_is_dropped_as_idle(serve: Serve) -> None:
    server = serve(Limits(request_seconds=60, idle_seconds=0.2))
    with silent(server.server_address[1], "127.0.0.1") as sock:
        assert closed_by_server(sock)
    assert server.dropped == {"idle": 1}


def test_dropped_connections_are_exported_by_listener_and_reason(serve: Serve) -> None:
    server = serve(Limits(request_seconds=60, idle_seconds=0.2))
    with silent(server.probe_address[1], "127.0.0.1") as sock:
        assert closed_by_server(sock)
    with silent(server.server_address[1], "127.0.0.1") as sock:
        assert closed_by_server(sock)
    with silent(server.server_address[1], "127.0.0.1") as sock:
        assert closed_by_server(sock)
    value = server.metrics.registry.get_sample_value
    name = "preemptctl_probe_connections_dropped_total"
    assert value(name, {"listener": "probes", "reason": "idle"}) == 1
    assert value(name, {"listener": "metrics", "reason": "idle"}) == 2
    assert server.dropped_by() == {("probes", "idle"): 1, ("metrics", "idle"): 2}


def test_one_more_connection_than_the_client_may_hold_drops_its_oldest_waiting_one(
    serve: Serve,
) -> None:
    server = serve(Limits(request_seconds=60, idle_seconds=60, per_client=2))
    port = server.server_address[1]
    oldest = silent(port, "127.0.0.2")
    until(lambda: server.connections()["metrics"] == 1, "the first connection held")
    second = silent(port, "127.0.0.2")
    other = silent(port, "127.0.0.3")
    until(lambda: server.connections()["metrics"] == 3, "three connections held")
    third = silent(port, "127.0.0.2")
    with oldest, second, other, third:
        assert closed_by_server(oldest)
        assert still_open(second) and still_open(other) and still_open(third)
        third.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
        assert third.makefile("rb").readline() == b"HTTP/1.1 200 OK\r\n"
    assert server.dropped == {"evicted": 1}


def test_client_whose_connections_are_all_being_answered_is_refused_at_once(
    serve: Serve,
) -> None:
    server = serve(Limits(request_seconds=60, idle_seconds=60, per_client=2))
    port = server.server_address[1]
    release = threading.Event()
    server.health = lambda: (release.wait(10), "ok")
    answers: list[Answer] = []
    askers = [
        threading.Thread(
            target=lambda: answers.append(probe(port, "/healthz", source="127.0.0.2", timeout=10))
        )
        for _ in range(2)
    ]
    for asker in askers:
        asker.start()
    try:
        until(lambda: server.answering()["metrics"] == 2, "both requests being answered")
        with silent(port, "127.0.0.2") as refused:
            assert closed_by_server(refused)
    finally:
        release.set()
        for asker in askers:
            asker.join(10)
    assert [(a.status, a.body) for a in answers] == [(200, "ok\n")] * 2
    assert server.dropped == {"per_client": 1}


def test_full_listener_drops_its_oldest_waiting_connection_for_a_newcomer(serve: Serve) -> None:
    server = serve(Limits(request_seconds=60, idle_seconds=60, connections=3))
    port = server.server_address[1]
    held = []
    for source in ("127.0.0.2", "127.0.0.3", "127.0.0.4"):
        held.append(silent(port, source))
        until(lambda: server.connections()["metrics"] == len(held), f"{source} held")
    answer = probe(port, "/healthz", source="127.0.0.5")
    assert (answer.status, answer.body) == (200, "ok\n")
    assert closed_by_server(held[0])
    assert still_open(held[1]) and still_open(held[2])
    for sock in held:
        sock.close()
    assert server.dropped == {"evicted": 1}


def test_requests_during_a_check_share_its_one_evaluation(serve: Serve) -> None:
    server = serve(PATIENT)
    port = server.probe_address[1]
    release, calls = threading.Event(), []

    def readiness() -> tuple[bool, str]:
        calls.append(1)
        release.wait(10)
        return True, "ready"

    server.readiness = readiness
    answers: list[Answer] = []
    askers = [
        threading.Thread(
            target=lambda source=source: answers.append(
                probe(port, "/readyz", source=source, timeout=10)
            )
        )
        for source in ("127.0.0.2", "127.0.0.3", "127.0.0.4")
    ]
    for asker in askers:
        asker.start()
    until(lambda: server.answering()["probes"] == 3, "three requests being answered")
    release.set()
    for asker in askers:
        asker.join(10)
    assert [(a.status, a.body) for a in answers] == [(200, "ready\n")] * 3
    assert len(calls) == 1


@pytest.mark.parametrize(
    ("request_bytes", "expected"),
    [
        (b"POST /healthz HTTP/1.1\r\n\r\n", b"HTTP/1.1 405 Method Not Allowed"),
        (b"hello\r\n\r\n", b"HTTP/1.1 400 Bad Request"),
        (
            b"GET /healthz HTTP/1.1\r\n" + b"X-Long: y\r\n" * 1000 + b"\r\n",
            b"HTTP/1.1 431 Request Header Fields Too Large",
        ),
    ],
)
def test_bad_requests_get_an_error_status(
    serve: Serve, request_bytes: bytes, expected: bytes
) -> None:
    server = serve(PATIENT)
    assert status_line(server.probe_address[1], request_bytes) == expected


def test_probe_server_binds_the_configured_address_and_ports() -> None:
    metrics_port, probe_port = free_port(), free_port()
    settings = Settings(
        http_bind_address="127.0.0.1", metrics_port=metrics_port, probe_port=probe_port
    )
    server = open_probe_server(settings, Metrics())
    try:
        assert server.server_address == ("127.0.0.1", metrics_port)
        assert server.probe_address == ("127.0.0.1", probe_port)
    finally:
        server.close()


@pytest.mark.parametrize(("taken", "what"), [("metrics_port", "metrics"), ("probe_port", "probes")])
def test_port_that_cannot_be_listened_on_is_one_startup_error_naming_it(
    taken: str, what: str
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as occupant:
        port = occupant.getsockname()[1]
        ports = {"metrics_port": free_port(), "probe_port": free_port(), taken: port}
        settings = Settings(http_bind_address="127.0.0.1", **ports)
        with pytest.raises(StartupError) as raised:
            open_probe_server(settings, Metrics())
    assert str(raised.value) == f"cannot serve {what} on 127.0.0.1:{port}: Address already in use"


def test_close_stops_serving_on_both_ports(serve: Serve) -> None:
    server = serve(PATIENT)
    ports = (server.server_address[1], server.probe_address[1])
    assert [probe(port, "/healthz").status for port in ports] == [200, 200]
    server.close()
    for port in ports:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()

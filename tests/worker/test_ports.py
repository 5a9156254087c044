"""A port found free for a server started later is one no outgoing connection can take."""

from __future__ import annotations

import socket
from pathlib import Path

from preemptctl.worker.ports import free_port


def ephemeral_start() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def test_a_free_port_lies_below_the_kernels_ephemeral_range() -> None:
    ports = {free_port() for _ in range(20)}
    assert all(10_000 <= port < ephemeral_start() for port in ports)


def test_a_free_port_can_be_bound_on_every_address() -> None:
    port = free_port()
    with socket.socket() as server:
        server.bind(("0.0.0.0", port))
        server.listen()


def test_a_port_someone_listens_on_is_never_offered() -> None:
    listeners = []
    try:
        for _ in range(50):
            taken = socket.socket()
            taken.bind(("0.0.0.0", free_port()))
            taken.listen()
            listeners.append(taken)
        offered = {free_port() for _ in range(200)}
        assert not offered & {listener.getsockname()[1] for listener in listeners}
    finally:
        for listener in listeners:
            listener.close()

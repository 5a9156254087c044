"""A free port for a server that another process will bind later.

A port the kernel hands out for `bind(("", 0))` comes from its ephemeral range, the same
range every outgoing connection and every other `bind(0)` draws from: between finding it
free and the server binding it, another process's connection can take it (CI saw exactly
that, "Address already in use", several times). A port chosen below that range is never
handed to a connection, so once found free it stays free unless someone names it.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10_000  # above the ports services are usually configured on
_DEFAULT_EPHEMERAL_START = 32_768  # Linux's default, where the range cannot be read


def free_port() -> int:
    """A port on which nothing listens now, outside the kernel's ephemeral range."""
    highest = _ephemeral_start() - 1
    candidates = random.sample(range(_LOWEST, highest + 1), k=64) if highest > _LOWEST else []
    for port in candidates:
        if _bindable(port):
            return port
    with socket.socket() as probe:  # a range too narrow or all taken: the kernel's choice
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _ephemeral_start() -> int:
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return _DEFAULT_EPHEMERAL_START


def _bindable(port: int) -> bool:
    """Free on every address, as the worker's listeners bind 0.0.0.0."""
    with socket.socket() as probe:
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True

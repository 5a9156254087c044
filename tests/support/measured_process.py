"""A command run with its memory watched from outside: peak resident memory as the kernel
counts it, and a limit past which it is killed rather than left to take the machine.

A hostile input that makes a command allocate without bound (a decompression bomb, a count
of twenty million) must fail its test, not exhaust a shared CI machine first: the watchdog
reads /proc/PID/status every `interval` seconds and SIGKILLs the process once its resident
memory passes `rss_limit` (or once `timeout` passes). The peak is the kernel's own figure
for the whole life of the process (`wait4`'s `ru_maxrss`), not a sample.

    measured = run_measured(["preemptctl", "replay", ...], env, rss_limit=512 << 20)
    measured.code, measured.stderr, measured.peak_rss, measured.killed
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Measured:
    code: int  # the exit status; -9 when the watchdog killed it
    stdout: str
    stderr: str
    peak_rss: int  # bytes, the highest resident memory of the process's life
    seconds: float
    killed: str | None  # "memory" or "timeout" when the watchdog stopped it


def resident(pid: int) -> int:
    """The process's resident memory now, in bytes (0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def run_measured(
    argv: Sequence[str],
    env: dict[str, str],
    *,
    rss_limit: int,
    timeout: float = 60.0,
    interval: float = 0.02,
) -> Measured:
    """Run `argv` to its end (or until the watchdog kills it); what it printed and used."""
    began = time.monotonic()
    process = subprocess.Popen(
        list(argv),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    output: dict[str, bytes] = {}

    def drain(name: str) -> None:
        stream = getattr(process, name)
        output[name] = stream.read()
        stream.close()

    readers = [threading.Thread(target=drain, args=(name,)) for name in ("stdout", "stderr")]
    for reader in readers:
        reader.start()
    killed: str | None = None
    while True:
        finished, status, usage = os.wait4(process.pid, os.WNOHANG)
        if finished:
            break
        if resident(process.pid) > rss_limit:
            killed = "memory"
        elif time.monotonic() - began > timeout:
            killed = "timeout"
        if killed:
            os.kill(process.pid, signal.SIGKILL)
            _, status, usage = os.wait4(process.pid, 0)
            break
        time.sleep(interval)
    code = os.waitstatus_to_exitcode(status)
    process.returncode = code  # reaped here: Popen must not wait for it again
    for reader in readers:
        reader.join(timeout=30)
    return Measured(
        code,
        output.get("stdout", b"").decode(errors="replace"),
        output.get("stderr", b"").decode(errors="replace"),
        usage.ru_maxrss * 1024,
        time.monotonic() - began,
        killed,
    )

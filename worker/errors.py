"""What a command reports instead of a traceback, and the exit code each kind gets.

Exit codes follow kubectl's habit: 0 done, 1 a runtime failure (a server that cannot be
reached, a database that went away: trying again later may work), 2 bad usage or bad input
(a flag, a file, a setting: the command line must change). Either way, one line on stderr.
A reader that closes the pipe early ends the command quietly with 141 (128 + SIGPIPE).
"""

from __future__ import annotations

import argparse
import signal
from collections.abc import Sequence

EXIT_RUNTIME = 1
EXIT_USAGE = 2
# The reader closed the output pipe early (`| head`): a shell shows 128 + SIGPIPE for a tool
# that SIGPIPE ended, and preemptctl ends the same way, quietly.
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE


class UsageError(Exception):
    """Bad input: an unreadable file, an unknown pod, a malformed flag value (exit 2)."""


class Unavailable(Exception):
    """A server the command needs cannot be reached or failed it; retrying may help (exit 1)."""


def add_output_flag(parser: argparse.ArgumentParser, formats: Sequence[str], default: str) -> None:
    """`-o/--output FORMAT`, as kubectl spells it, checked here so a bad value is one line."""
    parser.add_argument(
        "-o",
        "--output",
        metavar="FORMAT",
        default=default,
        help=f"one of: {', '.join(formats)} (default {default})",
    )
    parser.set_defaults(output_formats=tuple(formats))

"""`preemptctl`: one entry point whose subcommands each live in their own module.

Every subcommand module exposes `register(subparsers)`, which adds its parser and sets
`handler` to a function taking the parsed arguments and returning the exit code. A
`UsageError` raised anywhere below becomes one line on stderr and exit code 2, so a user
never sees a traceback for bad input.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

from worker import (
    config_command,
    dev_command,
    ledger_commands,
    plan_command,
    replay_command,
    setup_command,
    worker_command,
)
from worker.errors import UsageError

COMMANDS: tuple[ModuleType, ...] = (
    dev_command,
    plan_command,
    ledger_commands,
    setup_command,
    config_command,
    worker_command,
    replay_command,
)

EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser; exposed so tests can check every subcommand's flags."""
    parser = argparse.ArgumentParser(
        prog="preemptctl",
        description="Durable, audited Kubernetes pod preemption.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; bad input is reported in one line with exit code 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except UsageError as error:
        print(f"preemptctl {args.command}: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

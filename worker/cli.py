"""`preemptctl`: one entry point whose subcommands each live in their own module.

Every subcommand module exposes `register(subparsers)`, which adds its parser and sets
`handler` to a function taking the parsed arguments and returning the exit code. A
`UsageError` raised anywhere below becomes one line on stderr and exit code 2, so a user
never sees a traceback for bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from importlib import import_module
from types import ModuleType

from preemptctl.worker.errors import UsageError

# Command name → the module that registers it. Modules are imported only when needed, so
# `preemptctl plan` does not pay for Temporal, SQLAlchemy and the Kubernetes client.
COMMANDS: dict[str, str] = {
    "dev": "preemptctl.worker.dev_command",
    "plan": "preemptctl.worker.plan_command",
    "migrate": "preemptctl.worker.ledger_commands",
    "history": "preemptctl.worker.ledger_commands",
    "explain": "preemptctl.worker.ledger_commands",
    "setup-temporal": "preemptctl.worker.setup_command",
    "config": "preemptctl.worker.config_command",
    "worker": "preemptctl.worker.worker_command",
    "replay": "preemptctl.worker.replay_command",
}

EXIT_USAGE = 2


def _modules(argv: Sequence[str]) -> list[ModuleType]:
    """The module of the command named first in `argv`, or every command's (for --help)."""
    names = [COMMANDS[argv[0]]] if argv and argv[0] in COMMANDS else list(COMMANDS.values())
    return [import_module(name) for name in dict.fromkeys(names)]


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The argument parser, with the subcommand `argv` names (every one when it names none)."""
    parser = argparse.ArgumentParser(
        prog="preemptctl",
        description="Durable, audited Kubernetes pod preemption.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in _modules(argv):
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; bad input is reported in one line with exit code 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except UsageError as error:
        print(f"preemptctl {args.command}: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


def console() -> None:
    """The `preemptctl` executable: run, flush, and exit without interpreter teardown.

    Every command has closed what it opened by the time it returns. Skipping teardown avoids
    a crash seen when the Temporal SDK's native threads outlive Python's finalization in a
    short-lived process (setup-temporal, replay), and a few seconds of freeing a large
    snapshot object by object after `plan`.
    """
    code = main()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError):  # a reader that closed the pipe has what it wanted
            stream.flush()
    logging.shutdown()
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    console()

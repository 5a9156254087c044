"""`preemptctl`: one entry point whose subcommands each live in their own module.

Every subcommand module exposes `register(subparsers)`, which adds its parser (with a help
line and a description) and sets `handler` to a function taking the parsed arguments and
returning the exit code. To add a command, add one line to `COMMANDS`.

Exit codes, as kubectl uses them: 0 done; 1 a runtime failure (`Unavailable`: a server or
database that cannot be reached); 2 bad usage or input (`UsageError`, and argparse's own
usage errors). Either failure is one line on stderr, `preemptctl <command>: <what to do>`,
never a traceback, and never a URL's password.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from importlib import import_module, metadata
from types import ModuleType

from preemptctl.worker.errors import (
    EXIT_BROKEN_PIPE,
    EXIT_RUNTIME,
    EXIT_USAGE,
    Unavailable,
    UsageError,
)

# Command name → the module that registers it. Modules are imported only when needed, so
# `preemptctl plan` does not pay for Temporal, SQLAlchemy and the Kubernetes client.
COMMANDS: dict[str, str] = {
    "dev": "preemptctl.worker.dev_command",
    "plan": "preemptctl.worker.plan_command",
    "migrate": "preemptctl.worker.ledger_commands",
    "history": "preemptctl.worker.ledger_commands",
    "explain": "preemptctl.worker.ledger_commands",
    "compare": "preemptctl.worker.compare_command",
    "setup-temporal": "preemptctl.worker.setup_command",
    "config": "preemptctl.worker.config_command",
    "worker": "preemptctl.worker.worker_command",
    "replay": "preemptctl.worker.replay_command",
    "retry": "preemptctl.worker.retry_command",
    "completion": "preemptctl.worker.completion_command",
}


def version() -> str:
    """The installed distribution's version (the checkout's, in an editable install)."""
    try:
        return metadata.version("preemptctl")
    except metadata.PackageNotFoundError:  # pragma: no cover (run from a bare checkout)
        return "unknown"


def _modules(argv: Sequence[str]) -> list[ModuleType]:
    """The module of the command named first in `argv`, or every command's (for --help)."""
    names = [COMMANDS[argv[0]]] if argv and argv[0] in COMMANDS else list(COMMANDS.values())
    return [import_module(name) for name in dict.fromkeys(names)]


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The argument parser, with the subcommand `argv` names (every one when it names none)."""
    parser = argparse.ArgumentParser(
        prog="preemptctl",
        description="Durable, audited Kubernetes pod preemption. Exit codes: 0 done, "
        "1 a runtime failure (a server unreachable), 2 bad usage or input.",
    )
    parser.add_argument("--version", action="version", version=f"preemptctl {version()}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in _modules(argv):
        module.register(subparsers)
    return parser


def _first_command(argv: Sequence[str]) -> list[str]:
    """`argv` from its first word that is not a top-level flag (so `--version` still works)."""
    return [word for word in argv if not word.startswith("-")][:1]


def _report(command: str, error: Exception) -> None:
    """A failure's one line on stderr, every URL in it masked (whatever built the message:
    a password in a URL's user info or query string is never printed)."""
    from preemptctl.ledger.engine import masked_urls  # on failure only: `plan` stays light

    print(f"preemptctl {command}: {masked_urls(str(error))}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; a failure is reported in one line with exit code 1 or 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv == ["--version"]:  # without importing every command's module first
        print(f"preemptctl {version()}")
        return 0
    parser = build_parser(_first_command(argv))
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        formats = getattr(args, "output_formats", None)
        if formats is not None and args.output not in formats:
            raise UsageError(f"unknown --output {args.output!r}; use one of: {', '.join(formats)}")
        return handler(args)
    except UsageError as error:
        _report(args.command, error)
        return EXIT_USAGE
    except Unavailable as error:
        _report(args.command, error)
        return EXIT_RUNTIME
    except KeyboardInterrupt:
        return 130


def console() -> None:
    """The `preemptctl` executable: run, flush, and exit without interpreter teardown.

    Every command has closed what it opened by the time it returns. Skipping teardown avoids
    a crash seen when the Temporal SDK's native threads outlive Python's finalization in a
    short-lived process (setup-temporal, replay), and a few seconds of freeing a large
    snapshot object by object after `plan`.

    A reader that closed the pipe early (`preemptctl history | head -1`) has what it wanted:
    as a Unix tool that SIGPIPE ends, the command stops quietly, without a traceback, with
    status 141 (128 + SIGPIPE, what a shell shows for such a tool), and the output still
    buffered goes nowhere instead of failing again at exit.
    """
    try:
        code = main()
    except SystemExit as exit_:  # argparse's --help, --version and usage errors
        code = _exit_status(exit_.code)
    except BrokenPipeError:
        code = EXIT_BROKEN_PIPE
    if not _flushed():
        code = EXIT_BROKEN_PIPE
    if code == EXIT_BROKEN_PIPE:
        _discard_output()
    logging.shutdown()
    os._exit(code)


def _exit_status(code: object) -> int:
    """The status `sys.exit(code)` would give (a message is printed, as Python does)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    with contextlib.suppress(OSError):
        print(code, file=sys.stderr)
    return 1


def _flushed() -> bool:
    """Flush stdout and stderr; False when a reader closed the pipe first (any other
    failure to flush is ignored, as before: nothing more can be said)."""
    delivered = True
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:
            delivered = False
        except (OSError, ValueError):
            pass
    return delivered


def _discard_output() -> None:
    """Point stdout and stderr at /dev/null, so that nothing still buffered raises again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            os.dup2(devnull, stream.fileno())
    os.close(devnull)


if __name__ == "__main__":  # pragma: no cover
    console()

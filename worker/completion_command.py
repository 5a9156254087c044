"""`preemptctl completion bash|zsh`: a shell completion script, as `kubectl completion` prints.

The script is generated from the same parsers the commands use, so a new command or flag is
completed without anyone editing a script by hand:

    source <(preemptctl completion bash)          # ~/.bashrc
    source <(preemptctl completion zsh)           # ~/.zshrc
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from preemptctl.worker.errors import UsageError

SHELLS = ("bash", "zsh")

BASH_TEMPLATE = """\
# preemptctl completion for bash (and zsh through bashcompinit)
_preemptctl() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" command="${{COMP_WORDS[1]}}" options=""
    if [ "$COMP_CWORD" -eq 1 ]; then
        COMPREPLY=($(compgen -W {commands} -- "$cur"))
        return 0
    fi
    case "$command" in
{cases}
    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$options" -- "$cur"))
    else
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}}
complete -o default -F _preemptctl preemptctl
"""

ZSH_PREAMBLE = "autoload -U +X compinit && compinit\nautoload -U +X bashcompinit && bashcompinit\n"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "completion",
        help="print a shell completion script (bash or zsh)",
        description="Print a completion script for preemptctl's commands and flags. "
        "Load it with `source <(preemptctl completion bash)` in ~/.bashrc, or "
        "`source <(preemptctl completion zsh)` in ~/.zshrc.",
    )
    parser.add_argument("shell", metavar="SHELL", help="bash or zsh")
    parser.set_defaults(handler=run)


def completion_script(shell: str) -> str:
    """The script for `shell`, listing every command's flags from its parser."""
    from preemptctl.worker.cli import build_parser

    parser = build_parser()
    commands = _subcommands(parser)
    cases = "\n".join(
        f"        {name}) options={shlex.quote(' '.join(flags))} ;;"
        for name, flags in sorted(commands.items())
    )
    words = " ".join([*sorted(commands), "--help", "--version"])
    script = BASH_TEMPLATE.format(commands=shlex.quote(words), cases=cases)
    return ZSH_PREAMBLE + script if shell == "zsh" else script


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    for action in parser._actions:  # argparse keeps its subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            return {
                name: sorted(
                    flag
                    for sub_action in sub._actions
                    for flag in sub_action.option_strings
                    if flag.startswith("--")
                )
                for name, sub in action.choices.items()
            }
    return {}


def run(args: argparse.Namespace) -> int:
    if args.shell not in SHELLS:
        raise UsageError(f"no completion for shell {args.shell!r}; use one of: bash, zsh")
    print(completion_script(args.shell), end="")
    return 0

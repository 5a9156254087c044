"""The `preemptctl` command line in kubectl's habits.

Scenarios:
- `--version` prints the installed distribution's version;
- every subcommand has a help line and a description;
- `completion bash` prints a script that completes commands and each command's flags, and
  an unknown shell is bad input (exit 2, one line);
- `-o` names an output format where a command prints data; an unknown one is exit 2;
- exit codes: 2 for usage errors (argparse's own too) and bad settings (`retry` without a
  usable kubeconfig, as the worker), 1 for a runtime failure;
- an error line never shows a URL's password, in its user info or its query string, whatever
  built the message (the ledger's own errors, a path given as a URL); the README's example
  error lines are the ones the commands print;
- with its output pipe closed by the reader (`| head -0`), a command stops quietly: status
  141 (128 + SIGPIPE), no traceback, nothing on stderr (history, explain, config,
  completion, --help).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from preemptctl import migrations
from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.ledger.writer import append_batch
from preemptctl.worker.cli import COMMANDS, build_parser, main
from preemptctl.worker.completion_command import completion_script
from tests.ledger.builders import completed_preemption

PREEMPTCTL = str(Path(sys.executable).with_name("preemptctl"))


def test_version_is_the_installed_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"preemptctl {metadata.version('preemptctl')}\n"


def test_version_is_also_listed_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    assert "--version" in capsys.readouterr().out


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_command_in_the_table_is_registered() -> None:
    assert set(_subparsers()) == set(COMMANDS)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_has_a_description(command: str) -> None:
    assert _subparsers()[command].description


def _complete(script: str, *words: str) -> list[str]:
    """What bash offers after `words`, the last being the word being typed."""
    line = " ".join(f"'{word}'" for word in words)
    program = (
        f"{script}\nCOMP_WORDS=(preemptctl {line}); COMP_CWORD={len(words)}; "
        '_preemptctl; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    done = subprocess.run(
        ["bash", "-c", program], capture_output=True, text=True, check=True, timeout=30
    )
    return done.stdout.split()


def test_bash_completion_completes_commands() -> None:
    assert _complete(completion_script("bash"), "hist") == ["history"]


def test_bash_completion_completes_a_commands_flags() -> None:
    offered = _complete(completion_script("bash"), "setup-temporal", "--temporal-")
    assert offered == ["--temporal-address", "--temporal-namespace"]


def test_zsh_completion_loads_bash_completion_first() -> None:
    assert completion_script("zsh").startswith("autoload -U +X compinit")


def test_an_unknown_shell_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", "fish"]) == 2
    assert capsys.readouterr().err == (
        "preemptctl completion: no completion for shell 'fish'; use one of: bash, zsh\n"
    )


def test_an_unknown_output_format_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "-o", "xml"]) == 2
    assert capsys.readouterr().err == (
        "preemptctl config: unknown --output 'xml'; use one of: yaml, json\n"
    )


def test_a_usage_error_exits_2() -> None:
    done = subprocess.run(
        [PREEMPTCTL, "history", "--no-such-flag"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 2
    assert "unrecognized arguments: --no-such-flag" in done.stderr


def test_retry_without_a_kubeconfig_is_a_bad_setting(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No cluster configuration is a setting to fix (exit 2, as for the worker, and as a
    --kubeconfig naming no file), not a runtime failure worth trying again (exit 1)."""
    for name in ("KUBECONFIG", "PREEMPT_KUBECONFIG", "KUBERNETES_SERVICE_HOST", "PREEMPT_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", "/nonexistent")
    assert main(["retry", "default/nginx-a"]) == 2
    assert capsys.readouterr().err == (
        "preemptctl retry: cannot load the cluster configuration ($KUBECONFIG / in-cluster "
        "config): Invalid kube-config file. No configuration found; name the cluster with "
        "--kubeconfig or KUBECONFIG\n"
    )
    assert main(["retry", "default/nginx-a", "--kubeconfig", "/nonexistent/kube"]) == 2
    assert (
        capsys.readouterr().err == "preemptctl retry: kubeconfig: no such file /nonexistent/kube\n"
    )


def _readme_error_lines() -> list[tuple[list[str], str]]:
    """The README's example error lines (its `console` block after "never prints a
    password"): each command, and the line it prints."""
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    block = readme.split("never prints a password:", 1)[1].split("```console\n", 1)[1]
    lines = block.split("\n```", 1)[0].splitlines()
    return [
        (shlex.split(command.removeprefix("$ "))[1:], printed)
        for command, printed in zip(lines[::2], lines[1::2], strict=True)
    ]


@pytest.mark.parametrize(("argv", "printed"), _readme_error_lines())
def test_the_readmes_error_lines_are_the_real_ones(
    capsys: pytest.CaptureFixture[str], argv: list[str], printed: str
) -> None:
    assert main(argv) == 2
    assert capsys.readouterr().err == printed + "\n"


def test_an_unknown_command_exits_2() -> None:
    done = subprocess.run(
        [PREEMPTCTL, "retire"], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 2


def test_an_unreachable_ledgers_error_line_masks_every_password_in_its_url(
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = "postgresql://u:hunter1@127.0.0.1:1/ledger?password=hunter2&sslpassword=hunter3"
    assert main(["history", "--database-url", url]) == 1
    line = capsys.readouterr().err
    assert line.startswith(
        "preemptctl history: cannot reach the ledger database "
        "postgresql+psycopg://u:***@127.0.0.1:1/ledger?password=***&sslpassword=***: "
    )
    assert "hunter" not in line


def test_an_error_line_masks_a_url_its_message_quotes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "--config", "https://ops:hunter4@settings.example/s.yaml"]) == 2
    assert capsys.readouterr().err == (
        "preemptctl config: cannot read settings file https://ops:***@settings.example/s.yaml: "
        "No such file or directory\n"
    )


@pytest.fixture
def ledger_with_a_preemption(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    migrations.upgrade(url)
    engine = create_ledger_engine(url)
    append_batch(engine, completed_preemption())
    engine.dispose()
    return url


COMMANDS_THAT_PRINT = [
    ["history", "--database-url", "{ledger}"],
    ["explain", "prod/api-0", "--database-url", "{ledger}"],
    ["config"],
    ["completion", "bash"],
    ["--help"],
]


@pytest.mark.parametrize(
    ("argv", "unbuffered"),
    # Unbuffered, argparse's own --help swallows the write error (and exits 0).
    [(argv, "") for argv in COMMANDS_THAT_PRINT]
    + [(argv, "1") for argv in COMMANDS_THAT_PRINT if argv != ["--help"]],
    ids=lambda value: value[0] if isinstance(value, list) else ("un" * bool(value)) + "buffered",
)
def test_a_closed_output_pipe_ends_the_command_quietly(
    argv: list[str], unbuffered: str, ledger_with_a_preemption: str, tmp_path: Path
) -> None:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first byte, as `| head -0` can be
    try:
        done = subprocess.run(
            [PREEMPTCTL, *(word.format(ledger=ledger_with_a_preemption) for word in argv)],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
            timeout=60,
            env={
                "PATH": "/usr/bin:/bin",
                "XDG_STATE_HOME": str(tmp_path / "state"),
                "PYTHONUNBUFFERED": unbuffered,  # set in many images: every print writes
            },
        )
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, "")

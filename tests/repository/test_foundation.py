"""The repository's promises to its users and to CI.

Scenarios:
- CI runs the README's own test command, verbatim, so a missing install step fails in CI first.
- The README's first command points at a scenario file that exists and is package data.
- docs/adopting.md and docs/ledger.md give the worker's database role every grant the
  migrations give it beyond SELECT and INSERT (UPDATE on decision_lock, EXECUTE on
  prune_decision_inputs) and say it only reads alembic_version.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _readme_commands() -> list[str]:
    """The lines of the README's shell code blocks (fences opened with sh, bash or console)."""
    commands: list[str] = []
    language: str | None = None
    for line in (ROOT / "README.md").read_text().splitlines():
        if line.startswith("```"):
            language = None if language is not None else line[3:].strip()
            continue
        if language in ("sh", "bash", "console") and line.strip():
            commands.append(line.strip().removeprefix("$ "))
    return commands


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    test_commands = [c for c in _readme_commands() if c.endswith(".venv/bin/pytest")]
    assert test_commands, "the README shows no test command ending in .venv/bin/pytest"
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_commands[0] in ci


def test_readme_first_command_names_a_bundled_scenario() -> None:
    run_commands = [c for c in _readme_commands() if "preemptctl plan" in c]
    assert run_commands, "the README shows no preemptctl plan command"
    snapshot = re.search(r"--snapshot (\S+)", run_commands[0])
    assert snapshot is not None
    assert (ROOT / snapshot.group(1)).is_file()


def _worker_role_row(doc: str) -> str:
    rows = [
        line
        for line in (ROOT / doc).read_text().splitlines()
        if line.startswith("| `preemptctl_worker` |")
    ]
    assert len(rows) == 1, f"{doc}: expected one table row for preemptctl_worker"
    return rows[0]


def test_the_docs_give_the_worker_role_the_grants_the_migrations_give() -> None:
    migrations = "\n".join(
        path.read_text() for path in sorted((ROOT / "migrations" / "versions").glob("*.py"))
    )
    beyond_insert = set(re.findall(r"GRANT SELECT, UPDATE ON (\w+)", migrations))
    beyond_insert |= set(re.findall(r"GRANT EXECUTE ON FUNCTION (\w+)", migrations))
    assert beyond_insert == {"decision_lock", "prune_decision_inputs"}
    assert (
        "REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON alembic_version"
        in (ROOT / "migrations" / "env.py").read_text()
    )
    for doc in ("docs/adopting.md", "docs/ledger.md"):
        row = _worker_role_row(doc)
        for name in sorted(beyond_insert):
            assert f"`{name}`" in row, f"{doc} does not give the worker its grant on {name}"
        assert "`alembic_version`, never" in row, f"{doc}: the worker only reads alembic_version"

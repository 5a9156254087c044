"""One installed namespace: everything the distribution ships lives under ``preemptctl.*``.

Scenarios:
- The built wheel puts exactly one top-level package in site-packages, and it carries the
  package data (the bundled scenario, the migration template) as well as the code.
- ``preemptctl/`` links every source folder the distribution ships, and nothing else.
- No module is imported under a bare name (``from ledger import …``): ruff's banned-api rule
  forbids it, so no module is ever loaded twice under two names.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUBPACKAGES = {
    "preemption",
    "kube",
    "ledger",
    "activities",
    "workflows",
    "worker",
    "migrations",
    "emulator",
}


def test_the_wheel_installs_one_top_level_package(tmp_path: Path) -> None:
    # Built from a copy: setuptools writes build/ beside the sources it builds.
    source = tmp_path / "source"
    source.mkdir()
    for name in ["pyproject.toml", "README.md", "preemptctl", *SUBPACKAGES]:
        if (ROOT / name).is_dir() and not (ROOT / name).is_symlink():
            shutil.copytree(
                ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            shutil.copy(ROOT / name, source / name, follow_symlinks=False)
    if (source / "preemptctl").is_symlink():
        raise AssertionError("preemptctl/ must be a folder")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(source)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("preemptctl-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/", 1)[0] for name in names if not name.startswith("preemptctl-")}
    assert top_level == {"preemptctl"}
    shipped = {name.split("/")[1] for name in names if name.count("/") >= 2}
    assert shipped == SUBPACKAGES
    assert "preemptctl/worker/scenarios/online-offline.json" in names
    assert "preemptctl/migrations/script.py.mako" in names


def test_the_namespace_links_every_source_folder() -> None:
    links = {p.name: p for p in (ROOT / "preemptctl").iterdir() if p.is_symlink()}
    assert set(links) == SUBPACKAGES
    for name, link in links.items():
        assert link.resolve() == ROOT / name


def test_bare_imports_are_banned_by_the_linter() -> None:
    ruff = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    assert "TID251" in ruff["extend-select"]
    banned = set(ruff["flake8-tidy-imports"]["banned-api"])
    assert {name for name in banned if "." not in name} == SUBPACKAGES

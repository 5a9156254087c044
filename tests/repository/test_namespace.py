"""One installed namespace: everything the distribution ships lives under ``preemptctl.*``.

Scenarios:
- The built wheel puts exactly one top-level package in site-packages, and it carries the
  package data (the bundled scenario, the migration template) as well as the code.
- ``pyproject.toml`` maps ``preemptctl`` to ``namespace/`` and each ``preemptctl.<x>`` to its
  top-level folder (setuptools ``package-dir``), and lists every folder that is a package.
- The tree tracks no symbolic link: a checkout without symlink support installs and works.
- The installed ``preemptctl.*`` tree holds every module of the source tree (a strict editable
  install links files, so a module added since the install needs the install again).
- No module is imported under a bare name (``from ledger import …``): ruff's banned-api rule
  forbids it, so no module is ever loaded twice under two names.
"""

from __future__ import annotations

import importlib.util
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
    "deciding",
    "activities",
    "workflows",
    "worker",
    "migrations",
    "emulator",
}
REINSTALL = "pip install -e . --config-settings editable_mode=strict"


def _setuptools() -> dict[str, object]:
    table: dict[str, object] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"][
        "setuptools"
    ]
    return table


def _package_dir() -> dict[str, str]:
    mapping = _setuptools()["package-dir"]
    assert isinstance(mapping, dict)
    return {str(k): str(v) for k, v in mapping.items()}


def test_the_wheel_installs_one_top_level_package(tmp_path: Path) -> None:
    # Built from a copy: setuptools writes build/ beside the sources it builds.
    source = tmp_path / "source"
    source.mkdir()
    for name in ["pyproject.toml", "README.md", *_package_dir().values()]:
        if (ROOT / name).is_dir():
            shutil.copytree(
                ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            shutil.copy(ROOT / name, source / name)
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
    assert "preemptctl/__init__.py" in names
    assert "preemptctl/py.typed" in names
    assert "preemptctl/worker/scenarios/online-offline.json" in names
    assert "preemptctl/migrations/script.py.mako" in names


def test_package_dir_maps_each_subpackage_to_its_top_level_folder() -> None:
    mapping = _package_dir()
    assert mapping.pop("preemptctl") == "namespace"
    assert mapping == {f"preemptctl.{name}": name for name in SUBPACKAGES}


def test_every_source_folder_with_an_init_is_a_listed_package() -> None:
    listed = set(_setuptools()["packages"])  # type: ignore[call-overload]
    found = {"preemptctl"}
    for name in SUBPACKAGES:
        for init in (ROOT / name).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT).parts
            found.add(".".join(("preemptctl", *parts)))
    assert listed == found


def test_the_tree_tracks_no_symbolic_link() -> None:
    staged = subprocess.run(
        ["git", "ls-files", "-s"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    links = [line.split("\t", 1)[1] for line in staged.splitlines() if line.startswith("120000")]
    assert links == []


def test_the_installed_namespace_holds_every_source_module() -> None:
    spec = importlib.util.find_spec("preemptctl")
    assert spec is not None and spec.submodule_search_locations
    (installed,) = [Path(p) for p in spec.submodule_search_locations]
    missing = [
        f"preemptctl/{path.relative_to(ROOT)}"
        for name in SUBPACKAGES
        for path in sorted((ROOT / name).rglob("*.py"))
        if "__pycache__" not in path.parts and not (installed / path.relative_to(ROOT)).exists()
    ]
    assert not missing, f"not installed (run `{REINSTALL}` again): {missing}"


def test_the_checkout_does_not_shadow_the_installed_namespace() -> None:
    # `python -m pytest` and `python -c` put the working directory first on sys.path: a
    # `preemptctl/` folder there would hide the installed subpackages.
    assert not (ROOT / "preemptctl").exists()


def test_bare_imports_are_banned_by_the_linter() -> None:
    ruff = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    assert "TID251" in ruff["extend-select"]
    banned = set(ruff["flake8-tidy-imports"]["banned-api"])
    assert {name for name in banned if "." not in name} == SUBPACKAGES

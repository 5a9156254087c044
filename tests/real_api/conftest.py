"""A real control plane per test module (etcd, kube-apiserver, kube-scheduler), from
`KUBEBUILDER_ASSETS`; every test here is skipped, with the reason and how to get them, where
the binaries are missing (tests.support.control_plane).

A module may set `CONTROL_PLANE = {...}`: the options of its control plane
(`ControlPlane(scheduler=False)`, `watch_cache_off=(...)`)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from preemptctl.kube.client import KubeClient, connect
from tests.support.control_plane import (
    Binaries,
    ControlPlane,
    find_binaries,
    no_scheduler_reason,
)


@pytest.fixture(scope="session")
def binaries() -> Binaries:
    found = find_binaries()
    if isinstance(found, str):
        pytest.skip(found)
    return found


@pytest.fixture(scope="module")
def control_plane(
    request: pytest.FixtureRequest, binaries: Binaries, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlane]:
    """One control plane for the module; stopped and removed after it."""
    options = getattr(request.module, "CONTROL_PLANE", {})
    if options.get("scheduler", True) and binaries.kube_scheduler is None:
        pytest.skip(no_scheduler_reason(binaries))
    plane = ControlPlane(tmp_path_factory.mktemp("control-plane"), binaries, **options)
    plane.start()
    try:
        yield plane
    finally:
        plane.remove()


@pytest.fixture(scope="module")
def kube(control_plane: ControlPlane) -> Iterator[KubeClient]:
    """The product's client, connected through the `preemptctl` user's kubeconfig."""
    client = connect(str(control_plane.kubeconfig("preemptctl")), read_timeout=30)
    yield client
    client.api.close()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """What the differential suite compared, and how each came out (tests/real_api/emulator)."""
    report = sys.modules.get("tests.real_api.emulator.test_differential")
    compared: list[tuple[str, str]] = getattr(report, "REPORT", [])
    if not compared:
        return
    same = sum(1 for _, outcome in compared if outcome == "same")
    terminalreporter.section(
        f"the emulator against kube-apiserver: {len(compared)} comparisons, {same} the same, "
        f"{len(compared) - same} different (named: a simplification on purpose)"
    )
    for what, outcome in compared:
        label, _, why = outcome.partition(": ")
        terminalreporter.line(f"  {label:<8} {what}")
        if why:
            terminalreporter.line(f"           ({why})")

"""A pod named on the command line is a name Kubernetes accepts (issue 20, finding 12).

Scenarios (each one line on stderr, exit 2, upstream's rule in the message):
- `retry NS/NAME` with a pod name or namespace that is not DNS-1123 (`..`, `.`, `%2e%2e`,
  `Web`) is refused before the cluster is asked anything: the emulator's request log stays
  empty (before, `retry default/..` sent `GET /api/v1/namespaces/default/`, whose answer,
  the namespace, was read as the pod);
- `history --pod`, `explain` and `plan --pod` refuse the same names before opening the
  ledger or the snapshot;
- a valid name still goes through (here: to the next refusal, neither a pod nor a pod group
  being there).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from preemptctl.emulator import Emulator
from preemptctl.worker.cli import main
from tests.support.emulator import running_emulator

SUBDOMAIN_RULE = (
    "is not valid: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
    "characters, '-' or '.', and must start and end with an alphanumeric character"
)
LABEL_RULE = "is not valid: a lowercase RFC 1123 label must consist of"
REFUSED = [
    ("default/..", f"pod name '..' {SUBDOMAIN_RULE}"),
    ("default/.", f"pod name '.' {SUBDOMAIN_RULE}"),
    ("default/%2e%2e", f"pod name '%2e%2e' {SUBDOMAIN_RULE}"),
    ("default/Web", f"pod name 'Web' {SUBDOMAIN_RULE}"),
    ("../web", f"namespace '..' {LABEL_RULE}"),
]


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    with running_emulator() as running:
        yield running


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    assert captured.out == ""
    return code, captured.err


@pytest.mark.parametrize(("target", "problem"), REFUSED)
def test_retry_refuses_a_name_kubernetes_would_refuse_and_asks_the_cluster_nothing(
    emulator: Emulator, capsys: pytest.CaptureFixture[str], target: str, problem: str
) -> None:
    kubeconfig = str(emulator.kubeconfig_path)
    code, err = _run(capsys, "retry", target, "--kubeconfig", kubeconfig)
    assert code == 2
    assert err.startswith(f"preemptctl retry: {problem}")
    assert len(err.splitlines()) == 1
    assert list(emulator.requests) == []


def test_retry_of_a_valid_name_asks_the_cluster(
    emulator: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = str(emulator.kubeconfig_path)
    code, err = _run(capsys, "retry", "default/web-1", "--kubeconfig", kubeconfig)
    assert (code, err) == (
        2,
        "preemptctl retry: default/web-1 is gone (no pod or pod group by that name): nothing "
        "to retry\n",
    )
    asked = [(r.method, r.path) for r in emulator.requests]
    assert asked[0] == ("GET", "/api/v1/namespaces/default/pods/web-1")
    assert asked[-1] == (
        "GET",
        "/apis/scheduling.k8s.io/v1beta1/namespaces/default/podgroups/web-1",
    )


@pytest.mark.parametrize(("target", "problem"), REFUSED)
def test_history_refuses_such_a_pod_before_opening_the_ledger(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str, problem: str
) -> None:
    ledger = f"sqlite:///{tmp_path / 'never-created.sqlite'}"
    code, err = _run(capsys, "history", "--pod", target, "--database-url", ledger)
    assert code == 2
    assert err.startswith(f"preemptctl history: --pod: {problem}")
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "never-created.sqlite").exists()


@pytest.mark.parametrize(("target", "problem"), REFUSED)
def test_explain_refuses_such_a_pod_before_opening_the_ledger(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str, problem: str
) -> None:
    ledger = f"sqlite:///{tmp_path / 'never-created.sqlite'}"
    code, err = _run(capsys, "explain", target, "--database-url", ledger)
    assert code == 2
    assert err.startswith(f"preemptctl explain: the pod: {problem}")
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "never-created.sqlite").exists()


@pytest.mark.parametrize(("target", "problem"), REFUSED)
def test_plan_refuses_such_a_pod_before_reading_the_snapshot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str, problem: str
) -> None:
    missing = str(tmp_path / "no-such-snapshot.json")
    code, err = _run(capsys, "plan", "--snapshot", missing, "--pod", target)
    assert code == 2
    assert err.startswith(f"preemptctl plan: --pod: {problem}")
    assert len(err.splitlines()) == 1

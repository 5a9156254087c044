"""One typed configuration: defaults, a file, PREEMPT_* variables and flags, in that order.

Scenarios:
- the defaults are usable as they are;
- a file overrides defaults, a variable overrides the file, a flag overrides the variable;
- lists come as comma-separated variables or YAML lists;
- KUBECONFIG fills the kubeconfig setting when nothing else does;
- a wrong value is one error naming the setting and its source; an unknown key in the file
  is refused; a missing kubeconfig file is refused at load time;
- `preemptctl config` masks secrets.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from preemptctl.worker.cli import main
from preemptctl.worker.config import ConfigError, load_settings


def test_defaults_are_usable() -> None:
    settings = load_settings(environ={})
    assert settings.temporal_address == "localhost:7233"
    assert settings.scheduler_names == ("default-scheduler",)
    assert settings.dry_run is False


def test_file_then_variables_then_flags(tmp_path: Path) -> None:
    file = tmp_path / "preemptctl.yaml"
    file.write_text("task_queue: from-file\nmetrics-port: 9000\nmax_victims: 3\n")
    environ = {"PREEMPT_TASK_QUEUE": "from-env", "PREEMPT_MAX_VICTIMS": "5"}
    settings = load_settings(str(file), {"max_victims": "7", "task_queue": None}, environ)
    assert settings.metrics_port == 9000  # file
    assert settings.task_queue == "from-env"  # variable over file
    assert settings.max_victims == 7  # flag over variable


def test_lists_from_variables_and_files(tmp_path: Path) -> None:
    file = tmp_path / "s.yaml"
    file.write_text("protected_namespaces: [kube-system, monitoring]\n")
    from_file = load_settings(str(file), environ={})
    from_env = load_settings(environ={"PREEMPT_SCHEDULER_NAMES": "a, b"})
    assert from_file.protected_namespaces == ("kube-system", "monitoring")
    assert from_env.scheduler_names == ("a", "b")


def test_kubeconfig_variable_fills_the_setting(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text("apiVersion: v1\n")
    assert load_settings(environ={"KUBECONFIG": str(kubeconfig)}).kubeconfig == str(kubeconfig)


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"PREEMPT_METRICS_PORT": "abc"}, "PREEMPT_METRICS_PORT: expected an integer, got 'abc'"),
        ({"PREEMPT_DRY_RUN": "maybe"}, "PREEMPT_DRY_RUN: expected true or false, got 'maybe'"),
        ({"PREEMPT_METRICS_PORT": "70000"}, "metrics_port: expected a port from 1 to 65535"),
        ({"PREEMPT_TEMPORAL_ADDRESS": "nohost"}, "temporal_address: expected host:port"),
        ({"PREEMPT_KUBECONFIG": "/no/such/file"}, "kubeconfig: no such file /no/such/file"),
    ],
)
def test_wrong_values_are_one_error_naming_the_setting(
    environ: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as error:
        load_settings(environ=environ)
    assert message in str(error.value)


def test_unknown_key_in_the_file_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "s.yaml"
    file.write_text("temporal_adress: x:1\n")
    with pytest.raises(ConfigError, match="unknown setting 'temporal_adress'"):
        load_settings(str(file), environ={})


def test_config_command_masks_secrets(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PREEMPT_TEMPORAL_API_KEY", "very-secret")
    monkeypatch.setenv("PREEMPT_DATABASE_URL", "postgresql://worker:hunter2@db:5432/ledger")
    assert main(["config"]) == 0
    shown = capsys.readouterr().out
    assert "very-secret" not in shown and "hunter2" not in shown
    assert "temporal_api_key: '********'" in shown
    assert "worker:***@db:5432/ledger" in shown

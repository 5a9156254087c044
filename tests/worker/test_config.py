"""One typed configuration: defaults, a file, PREEMPT_* variables and flags, in that order.

Scenarios:
- the defaults are usable as they are;
- a file overrides defaults, a variable overrides the file, a flag overrides the variable;
- lists come as comma-separated variables or YAML lists;
- KUBECONFIG fills the kubeconfig setting when nothing else does;
- a wrong value is one error naming the setting and its source; an unknown key in the file
  is refused; a missing kubeconfig file is refused at load time;
- `preemptctl config` masks secrets, and prints JSON with `-o json`: the API key whole, and
  in every URL setting the user info's password and the query's secrets (`?password=`,
  `sslpassword=`: libpq honours them), the Temporal UI's address included;
- an error quoting a setting's value masks a URL's secrets in it;
- timeouts that are infinite, not a number or absurdly long are refused, as are addresses
  without a host or a port (`:`), and numbers too long to be a setting;
- a settings file that is not a regular file (/dev/zero), is too large, or uses YAML aliases
  (an alias bomb) is refused at once; a YAML error names the line, never quotes it;
- Temporal's own environment configuration (TEMPORAL_ADDRESS, a TOML profile) fills the
  connection settings, and PREEMPT_* variables override it;
- TLS follows the settings: an API key implies TLS, a CA file or client certificate makes a
  TLS configuration;
- the gang label and its size annotation are label/annotation keys (Kubernetes' rules), the
  annotation only with the label; the cluster view is told to keep both on its pods.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import TLSConfig

from preemptctl.worker.cli import main
from preemptctl.worker.config import (
    MAX_SETTINGS_FILE_BYTES,
    ConfigError,
    Settings,
    load_settings,
    temporal_tls,
)


def test_defaults_are_usable() -> None:
    settings = load_settings(environ={})
    assert settings.temporal_address == "localhost:7233"
    assert settings.scheduler_names == ("default-scheduler",)
    assert settings.dry_run is False
    # Three listeners of their own: /metrics, the kubelet's probes, the SDK's metrics.
    assert (settings.metrics_port, settings.probe_port, settings.sdk_metrics_port) == (
        9464,
        9466,
        9465,
    )


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
        ({"PREEMPT_PROBE_PORT": "0"}, "probe_port: expected a port from 1 to 65535"),
        (
            {"PREEMPT_PROBE_PORT": "9464"},
            "probe_port: expected a port of its own (not metrics_port's or sdk_metrics_port's)"
            ", got 9464",
        ),
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


def test_config_command_masks_the_secrets_in_every_urls_query_and_user_info(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "PREEMPT_DATABASE_URL",
        "postgresql://worker@db:5432/ledger?password=hunter2&sslpassword=hunter3&sslmode=require",
    )
    monkeypatch.setenv("PREEMPT_TEMPORAL_UI_URL", "https://ops:hunter4@temporal.example:8080/")
    assert main(["config", "-o", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["database_url"] == (
        "postgresql+psycopg://worker@db:5432/ledger?password=***&sslmode=require&sslpassword=***"
    )
    assert shown["temporal_ui_url"] == "https://ops:***@temporal.example:8080/"


def test_an_error_quoting_a_url_setting_masks_its_secrets() -> None:
    with pytest.raises(ConfigError) as error:
        load_settings(environ={"PREEMPT_TEMPORAL_ADDRESS": "https://ops:hunter5@temporal"})
    assert str(error.value) == (
        "temporal_address: expected host:port with a port from 1 to 65535, "
        "got 'https://ops:***@temporal'"
    )


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e300", "604801", "0"])
def test_timeouts_must_be_finite_positive_and_at_most_a_week(value: str) -> None:
    with pytest.raises(ConfigError, match="call_timeout_seconds: expected seconds"):
        load_settings(environ={"PREEMPT_CALL_TIMEOUT_SECONDS": value})


@pytest.mark.parametrize("address", [":", "host:", ":7233", "host:0", "host:99999", "host:x"])
def test_a_temporal_address_needs_a_host_and_a_port(address: str) -> None:
    with pytest.raises(ConfigError, match="temporal_address: expected host:port"):
        load_settings(environ={"PREEMPT_TEMPORAL_ADDRESS": address})


def test_an_ipv6_temporal_address_is_accepted() -> None:
    settings = load_settings(environ={"PREEMPT_TEMPORAL_ADDRESS": "[::1]:7233"})
    assert settings.temporal_address == "[::1]:7233"


def test_a_number_too_long_to_be_a_setting_is_refused() -> None:
    with pytest.raises(ConfigError, match="PREEMPT_MAX_VICTIMS: expected an integer"):
        load_settings(environ={"PREEMPT_MAX_VICTIMS": "9" * 5000})


def test_a_settings_file_that_is_not_a_regular_file_is_refused_at_once() -> None:
    with pytest.raises(ConfigError, match="/dev/zero is not a regular file"):
        load_settings("/dev/zero", environ={})


def test_a_settings_file_too_large_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "big.yaml"
    file.write_text("# " + "x" * MAX_SETTINGS_FILE_BYTES + "\n")
    with pytest.raises(ConfigError, match="is larger than 256 KiB"):
        load_settings(str(file), environ={})


def test_a_yaml_alias_bomb_is_refused_before_it_expands(tmp_path: Path) -> None:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 12):
        previous = chr(ord("a") + level - 1)
        name = chr(ord("a") + level)
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{previous}"] * 10) + "]")
    lines.append("protected_namespaces: *l")
    file = tmp_path / "bomb.yaml"
    file.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match="YAML aliases"):
        load_settings(str(file), environ={})


def test_a_yaml_error_names_the_line_and_never_quotes_the_file(tmp_path: Path) -> None:
    file = tmp_path / "s.yaml"
    file.write_text("database_url: postgresql://u:hunter2@db/ledger\ntask_queue: [unclosed\n")
    with pytest.raises(ConfigError) as error:
        load_settings(str(file), environ={})
    message = str(error.value)
    assert "is not valid YAML at line" in message
    assert "hunter2" not in message and "\n" not in message


def test_a_wrong_value_in_a_file_is_quoted_short(tmp_path: Path) -> None:
    file = tmp_path / "s.yaml"
    file.write_text(f"metrics_port: {'x' * 500}\n")
    with pytest.raises(ConfigError) as error:
        load_settings(str(file), environ={})
    assert len(str(error.value)) < 200


def test_temporals_own_variables_fill_the_connection() -> None:
    environ = {"TEMPORAL_ADDRESS": "temporal.example:7233", "TEMPORAL_NAMESPACE": "prod"}
    settings = load_settings(environ=environ)
    assert (settings.temporal_address, settings.temporal_namespace) == (
        "temporal.example:7233",
        "prod",
    )


def test_preempt_variables_override_temporals_own() -> None:
    environ = {"TEMPORAL_ADDRESS": "temporal.example:7233", "PREEMPT_TEMPORAL_ADDRESS": "o:1"}
    assert load_settings(environ=environ).temporal_address == "o:1"


def test_a_temporal_profile_file_fills_the_connection(tmp_path: Path) -> None:
    profiles = tmp_path / "temporal.toml"
    profiles.write_text(
        '[profile.staging]\naddress = "staging.example:7233"\nnamespace = "stage"\n'
        'api_key = "from-profile"\n'
    )
    environ = {"TEMPORAL_CONFIG_FILE": str(profiles), "TEMPORAL_PROFILE": "staging"}
    settings = load_settings(environ=environ)
    assert settings.temporal_address == "staging.example:7233"
    assert settings.temporal_namespace == "stage"
    assert settings.temporal_api_key == "from-profile"
    assert temporal_tls(settings) is True


def test_plain_settings_connect_without_tls() -> None:
    assert temporal_tls(load_settings(environ={})) is False


def test_a_ca_file_makes_a_tls_configuration(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(b"-----BEGIN CERTIFICATE-----\n")
    environ = {"PREEMPT_TEMPORAL_TLS_CA": str(ca), "PREEMPT_TEMPORAL_TLS_SERVER_NAME": "t.local"}
    tls = temporal_tls(load_settings(environ=environ))
    assert isinstance(tls, TLSConfig)
    assert tls.server_root_ca_cert == b"-----BEGIN CERTIFICATE-----\n"
    assert tls.domain == "t.local"


def test_config_command_prints_json_on_request(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "-o", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["task_queue"] == "preemptctl"


def test_config_command_refuses_dev_zero_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["config", "--config", "/dev/zero"]) == 2
    assert capsys.readouterr().err.strip() == (
        "preemptctl config: settings file /dev/zero is not a regular file"
    )


KUEUE = "kueue.x-k8s.io/pod-group-name"
SIZE = "kueue.x-k8s.io/pod-group-total-count"


def test_the_gang_label_and_its_size_annotation_are_keys() -> None:
    settings = load_settings(
        environ={"PREEMPT_POD_GROUP_LABEL": KUEUE, "PREEMPT_POD_GROUP_SIZE_ANNOTATION": SIZE}
    )
    assert (settings.pod_group_label, settings.pod_group_size_annotation) == (KUEUE, SIZE)
    assert settings.view_options() == {"kept_labels": (KUEUE,), "kept_annotations": (SIZE,)}
    assert Settings().view_options() == {"kept_labels": (), "kept_annotations": ()}


@pytest.mark.parametrize("key", ["a/b/c", "Kueue.io/name", "-name", "x" * 64, "example.com/"])
def test_a_gang_label_that_is_no_label_key_is_refused(key: str) -> None:
    with pytest.raises(ConfigError, match=r"^pod_group_label: expected a label key \(prefix/name"):
        load_settings(environ={"PREEMPT_POD_GROUP_LABEL": key})


def test_a_size_annotation_without_the_gang_label_is_refused() -> None:
    with pytest.raises(
        ConfigError,
        match=r"^pod_group_size_annotation: expected to be empty unless pod_group_label names",
    ):
        load_settings(environ={"PREEMPT_POD_GROUP_SIZE_ANNOTATION": SIZE})

"""Every setting of the worker in one typed place: defaults, then a file, then `PREEMPT_*`
environment variables, then command-line flags, each overriding the one before.

A wrong value is reported once, at start-up, as one line naming the setting and where it
came from (`PREEMPT_METRICS_PORT: expected an integer from 1 to 65535, got 'abc'`), not as a
traceback minutes later. `preemptctl config` prints the effective settings with secrets
masked, so what the worker runs with is never a guess.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, get_type_hints

import yaml

from preemptctl.ledger.engine import configured_url, display_url

ENV_PREFIX = "PREEMPT_"
SECRET_FIELDS = frozenset({"temporal_api_key", "database_url"})


class ConfigError(ValueError):
    """A setting that cannot be used; the message names it and its source."""


def _default_identity() -> str:
    return f"preemptctl@{socket.gethostname()}"


@dataclass(frozen=True)
class Settings:
    """What the worker needs to know. Field names map to `PREEMPT_<NAME>` variables, to keys of
    the settings file, and to `--kebab-case` flags."""

    # Temporal
    temporal_address: str = "localhost:7233"
    temporal_namespace: str = "default"
    task_queue: str = "preemptctl"
    temporal_tls: bool = False
    temporal_tls_cert: str = ""  # client certificate (mTLS), a file path
    temporal_tls_key: str = ""
    temporal_api_key: str = ""  # Temporal Cloud API key (implies TLS)
    # The ledger: empty means PREEMPT_DATABASE_URL's default, an embedded SQLite file.
    database_url: str = ""
    # The cluster: empty kubeconfig means $KUBECONFIG, then in-cluster config.
    kubeconfig: str = ""
    kube_context: str = ""
    # What triggers a preemption
    scheduler_names: tuple[str, ...] = ("default-scheduler",)
    min_priority: int = 0
    # Guards
    dry_run: bool = False
    protected_namespaces: tuple[str, ...] = ()
    max_victims: int = 0  # per preemption; 0 is no cap
    evictions_per_minute: int = 0  # 0 is no budget
    max_in_flight: int = 100
    # A failed preemption is retried with exponential backoff up to this cap (the scheduler's
    # unschedulable queue flushes after 5 minutes); non-retryable causes park the pod.
    retry_backoff_max_seconds: float = 300.0
    # How a preemption runs
    use_eviction: bool = False
    scheduled_wait_seconds: float = 300.0
    call_timeout_seconds: float = 30.0
    search_attributes: bool = True
    # The process
    metrics_port: int = 9464
    # Where /metrics, /healthz and /readyz listen (all interfaces: the kubelet probes the pod IP).
    http_bind_address: str = "0.0.0.0"
    # How long start-up waits for the cluster view's first complete list of every kind.
    sync_timeout_seconds: float = 120.0
    sdk_metrics_port: int = 9465  # the Temporal SDK's own metrics; 0 turns them off
    log_format: str = "json"
    identity: str = field(default_factory=_default_identity)

    def effective_database_url(self) -> str:
        return configured_url(self.database_url or None)

    def masked(self) -> dict[str, Any]:
        """The settings as `preemptctl config` prints them: secrets never in clear."""
        shown: dict[str, Any] = {}
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name == "temporal_api_key" and value:
                value = "********"
            elif item.name == "database_url":
                value = display_url(self.effective_database_url())
            elif isinstance(value, tuple):
                value = list(value)
            shown[item.name] = value
        return shown


_HINTS = get_type_hints(Settings)


def _convert(name: str, raw: Any, source: str) -> Any:
    """`raw` as the type of setting `name`, or a ConfigError naming `source`."""
    hint = _HINTS[name]
    try:
        if hint is bool:
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off", ""):
                return False
            raise ValueError
        if hint is int:
            if isinstance(raw, bool):
                raise ValueError
            return int(raw)
        if hint is float:
            return float(raw)
        if hint == tuple[str, ...]:
            items = raw if isinstance(raw, list | tuple) else str(raw).split(",")
            return tuple(str(item).strip() for item in items if str(item).strip())
        return str(raw)
    except (TypeError, ValueError):
        kind = {bool: "true or false", int: "an integer", float: "a number"}.get(hint, "text")
        raise ConfigError(f"{source}: expected {kind}, got {raw!r}") from None


def _validate(settings: Settings) -> Settings:
    checks = [
        (1 <= settings.metrics_port <= 65535, "metrics_port", "a port from 1 to 65535"),
        (
            0 <= settings.sdk_metrics_port <= 65535,
            "sdk_metrics_port",
            "a port from 1 to 65535, or 0 for none",
        ),
        (settings.min_priority >= -(2**31), "min_priority", "a priority (int32)"),
        (settings.max_victims >= 0, "max_victims", "0 (no cap) or more"),
        (settings.evictions_per_minute >= 0, "evictions_per_minute", "0 (no budget) or more"),
        (settings.max_in_flight >= 1, "max_in_flight", "1 or more"),
        (settings.scheduled_wait_seconds > 0, "scheduled_wait_seconds", "more than 0"),
        (settings.call_timeout_seconds > 0, "call_timeout_seconds", "more than 0"),
        (settings.retry_backoff_max_seconds > 0, "retry_backoff_max_seconds", "more than 0"),
        (settings.sync_timeout_seconds > 0, "sync_timeout_seconds", "more than 0"),
        (settings.log_format in ("json", "text"), "log_format", "json or text"),
        (bool(settings.scheduler_names), "scheduler_names", "at least one scheduler name"),
        (":" in settings.temporal_address, "temporal_address", "host:port"),
        (
            bool(settings.temporal_tls_cert) == bool(settings.temporal_tls_key),
            "temporal_tls_cert",
            "a certificate and a key together",
        ),
    ]
    for ok, name, expected in checks:
        if not ok:
            value = getattr(settings, name)
            raise ConfigError(f"{name}: expected {expected}, got {value!r}")
    for path_field in ("temporal_tls_cert", "temporal_tls_key", "kubeconfig"):
        path = getattr(settings, path_field)
        if path and not Path(path).is_file():
            raise ConfigError(f"{path_field}: no such file {path}")
    return settings


def _from_file(path: str) -> dict[str, Any]:
    try:
        loaded = yaml.safe_load(Path(path).read_text())
    except OSError as error:
        raise ConfigError(f"cannot read settings file {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"settings file {path} is not valid YAML: {error}") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, Mapping):
        raise ConfigError(f"settings file {path} must be a mapping of setting: value")
    values = {}
    for key, raw in loaded.items():
        name = str(key).replace("-", "_")
        if name not in _HINTS:
            raise ConfigError(f"settings file {path}: unknown setting {key!r}")
        values[name] = _convert(name, raw, f"{path}: {key}")
    return values


def load_settings(
    file: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Defaults ← file ← `PREEMPT_*` variables ← `overrides` (flags; None means not given)."""
    environ = os.environ if environ is None else environ
    file = file or environ.get(f"{ENV_PREFIX}CONFIG") or None
    values: dict[str, Any] = _from_file(file) if file else {}
    for name in _HINTS:
        variable = f"{ENV_PREFIX}{name.upper()}"
        if variable in environ:
            values[name] = _convert(name, environ[variable], variable)
    for name, raw in (overrides or {}).items():
        if raw is not None:
            values[name] = _convert(name, raw, f"--{name.replace('_', '-')}")
    if not values.get("kubeconfig") and environ.get("KUBECONFIG"):
        values["kubeconfig"] = environ["KUBECONFIG"].split(os.pathsep)[0]
    return _validate(dataclasses.replace(Settings(), **values))

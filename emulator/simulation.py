"""The simulated cluster behind `preemptctl dev`: the API emulator, a scheduler and a kubelet.

`SimulatedCluster` owns an `Emulator` and two loops:

- `SimulatedScheduler`, one scheduling pass at a time: each pending pod of the schedulers it
  serves, highest priority first (then oldest), is bound to a node it fits (its nominated
  node when that fits, as upstream tries the nominated node first; otherwise the first
  fitting node by name) or marked `PodScheduled=False`, reason `Unschedulable`, with
  upstream's FitError message. Fit is the planner's own (`filter_nodes` over a
  `ClusterSnapshot` with the Namespaces, so every filter the planner models judges it:
  resources, ports, taints, node affinity, pod affinity and anti-affinity, topology
  spread), so nominated pods of at least the pod's priority count as placed and
  terminating pods occupy their node until the kubelet finishes them: exactly what makes a
  preemption wait for its victims' grace period. It never preempts, the controller does;
  unless it runs in upstream-preemption mode (`preemption=True`, off by default), where it
  preempts as kube-scheduler's DefaultPreemption does, so that shadow mode has something to
  compare with: for a pod that fits nowhere it runs the planner (the same code), nominates
  the pod, clears lower-priority nominations, marks each victim `DisruptionTarget`
  (PreemptionByScheduler), deletes it gracefully with a UID precondition and writes
  upstream's core/v1 Event on it (reason `Preempted`, reporting component
  `default-scheduler`, message `Preempted by pod <uid> on node <node>`). With
  `preemption_delay` it waits that long after first finding a pod unschedulable before it
  preempts for it (a scheduler slower than the controller's dry run).
- `SimulatedKubelet`: finishes terminating pods when their grace period ends (capped by
  `max_grace_seconds` so demos are quick) and starts bound pods (phase Running, startTime)
  after `start_delay`, so start-time tie-breaks have something to compare.

Both act on the store directly, not over HTTP. The real scheduler talks HTTP, but here the
HTTP path would make the simulation a client of everything a test injects: a fault aimed at
the controller (`faults.fail("patch", "pods/status", times=2)`) could be consumed by the
scheduler's own status patch, and the request log a test reads would fill with the
simulation's traffic. Going through the store keeps faults and the log the controller's
alone, lets a pass hold the store still from snapshot to last write (the consistency the
scheduler gets from its single loop and cache), and loses no fidelity: binding goes through
`emulator.binding.bind`, the same code the `pods/binding` route serves, and status changes
through the same strategic-merge status patch an HTTP PATCH reaches.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from preemptctl.emulator.api import Emulator
from preemptctl.emulator.binding import bind
from preemptctl.emulator.patch import STRATEGIC_MERGE_PATCH
from preemptctl.emulator.resources import EVENTS, NAMESPACES, NODES, PDBS, PODS
from preemptctl.emulator.status import ApiError
from preemptctl.emulator.store import Obj, Store, now_rfc3339
from preemptctl.preemption.decision import Decision, Verdict
from preemptctl.preemption.decode import parse_time
from preemptctl.preemption.default_preemption import preempt
from preemptctl.preemption.errors import PlannerInputError
from preemptctl.preemption.filters import Status
from preemptctl.preemption.find_nodes_that_fit import (
    ERR_NO_NODES,
    filter_nodes,
    scheduling_fit_error,
)
from preemptctl.preemption.objects import Pod
from preemptctl.preemption.snapshot import ClusterSnapshot

log = logging.getLogger(__name__)

DEFAULT_SCHEDULER_NAMES: frozenset[str] = frozenset({"default-scheduler"})
DEFAULT_INTERVAL = 0.05
DEFAULT_MAX_GRACE_SECONDS = 2.0
DEFAULT_START_DELAY = 0.1
NO_NODES_AVAILABLE = ERR_NO_NODES
_TERMINAL = ("Succeeded", "Failed")


class _Loop:
    """A daemon thread calling `tick` every `interval` seconds until stopped. A failing tick
    is logged and the loop goes on: one bad object must not stop the simulated cluster."""

    def __init__(self, name: str, interval: float, tick: Callable[[], object]) -> None:
        self._name = name
        self._interval = interval
        self._tick = tick
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stopped.clear()
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stopped.set()
        thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stopped.wait(self._interval):
            try:
                self._tick()
            except Exception:
                log.exception("%s: a round failed; trying again next round", self._name)


# -- the scheduler ------------------------------------------------------------------------------


class SimulatedScheduler:
    """Binds pending pods that fit, marks the others Unschedulable; preempts for them only
    in upstream-preemption mode (`preemption`).

    A pass runs every `interval` seconds when the store changed since the last one.
    `settled_revision` is the store revision at which a pass last found nothing to do; when
    it equals the store's revision, every schedulable pod is bound and every other one
    carries its current Unschedulable condition."""

    def __init__(
        self,
        store: Store,
        *,
        scheduler_names: Collection[str] = DEFAULT_SCHEDULER_NAMES,
        interval: float = DEFAULT_INTERVAL,
        preemption: bool = False,
        preemption_delay: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._clock = clock
        self.scheduler_names = frozenset(scheduler_names)
        self.preemption = preemption
        self.preemption_delay = preemption_delay
        self._loop = _Loop("simulated-scheduler", interval, self._tick)
        self._seen_revision = -1
        self.settled_revision = -1
        self._rejected: set[str] = set()
        self._unschedulable_since: dict[str, float] = {}  # uid -> monotonic, for the delay

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()

    def _tick(self) -> None:
        if self._store.revision != self._seen_revision or self._preemption_due():
            self.schedule_pass()

    def _preemption_due(self) -> bool:
        """A pod waits out `preemption_delay` and its preemption is now due."""
        if not self.preemption or not self._unschedulable_since:
            return False
        now = self._clock()
        return any(
            now - since >= self.preemption_delay for since in self._unschedulable_since.values()
        )

    def schedule_pass(self) -> int:
        """One scheduling pass over the current state, holding the store still; returns how
        many pods it changed (bound or newly marked Unschedulable)."""
        with self._store.transaction():
            revision = self._store.revision
            snapshot = self._snapshot()
            queue = self._queue(snapshot)
            waiting = {pod.uid for _, pod in queue}
            self._unschedulable_since = {
                uid: since for uid, since in self._unschedulable_since.items() if uid in waiting
            }
            changed = sum(self._schedule_one(snapshot, pod) for pod in queue)
            # after changes, the next pass confirms that nothing is left (settles)
            self._seen_revision = revision
            if changed == 0:
                self.settled_revision = revision
            return changed

    def _snapshot(self) -> ClusterSnapshot:
        """The planner's view of the current objects (PDBs play no part in fit, only in
        preemption; Namespaces do, for pod affinity's namespaceSelector)."""
        snapshot = ClusterSnapshot()
        kinds = [("Namespace", NAMESPACES), ("Node", NODES), ("Pod", PODS)]
        if self.preemption:
            kinds.append(("PodDisruptionBudget", PDBS))
        for kind, resource in kinds:
            for obj in self._store.objects(resource):
                try:
                    snapshot.apply(kind, obj)
                except PlannerInputError as error:
                    self._reject(error)
        return snapshot

    def _reject(self, error: PlannerInputError) -> None:
        """An object the planner cannot read is left out, as the cluster view leaves it out;
        said once per distinct error, not every pass."""
        if str(error) not in self._rejected:
            self._rejected.add(str(error))
            log.warning("simulated scheduler leaves out an object: %s", error)

    def _queue(self, snapshot: ClusterSnapshot) -> list[tuple[Obj, Pod]]:
        """The pods to schedule, in the scheduling queue's order: priority, then creation."""
        queue: list[tuple[Obj, Pod]] = []
        for obj in self._store.objects(PODS):
            if not self._schedulable(obj):
                continue
            pod = snapshot.pod_by_key(f"{obj['metadata']['namespace']}/{obj['metadata']['name']}")
            if pod is not None:
                queue.append((obj, pod))
        queue.sort(key=lambda entry: _queue_key(entry[0], entry[1]))
        return queue

    def _schedulable(self, obj: Obj) -> bool:
        spec = obj.get("spec") or {}
        return (
            not spec.get("nodeName")
            and not obj["metadata"].get("deletionTimestamp")
            and (obj.get("status") or {}).get("phase") not in _TERMINAL
            and (spec.get("schedulerName") or "default-scheduler") in self.scheduler_names
            and not spec.get("schedulingGates")
        )

    def _schedule_one(self, snapshot: ClusterSnapshot, entry: tuple[Obj, Pod]) -> int:
        obj, pod = entry
        statuses = filter_nodes(snapshot, pod)
        node = choose_node(pod, statuses)
        if node is not None:
            return self._bind(snapshot, pod, node)
        message = fit_error(len(statuses), statuses)
        preempted = self._preempt(snapshot, pod) if self.preemption else 0
        if preempted:
            obj = self._store.get(PODS, pod.namespace, pod.name)
        return self._mark_unschedulable(obj, message) + preempted

    # -- upstream-preemption mode -------------------------------------------------------------

    def _preempt(self, snapshot: ClusterSnapshot, pod: Pod) -> int:
        """`DefaultPreemption` for one unschedulable pod, once its delay is over: plan,
        then `prepareCandidate` (clear lower nominations, mark, delete, record) and nominate.
        How many objects it changed."""
        since = self._unschedulable_since.setdefault(pod.uid, self._clock())
        if self._clock() - since < self.preemption_delay:
            return 0
        del self._unschedulable_since[pod.uid]
        decision = preempt(snapshot, pod)
        if decision.verdict is not Verdict.PREEMPT or decision.nominated_node is None:
            return 0
        return self._carry_out(snapshot, pod, decision, decision.nominated_node)

    def _carry_out(self, snapshot: ClusterSnapshot, pod: Pod, decision: Decision, node: str) -> int:
        changed = 0
        for cleared in decision.nominated_pods_to_clear:
            changed += self._patch_status(
                cleared.namespace, cleared.name, cleared.uid, {"nominatedNodeName": None}
            )
        for victim in decision.victims:
            condition = {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "PreemptionByScheduler",
                "message": f"{pod.scheduler_name}: preempting to accommodate a higher priority pod",
                "lastTransitionTime": now_rfc3339(),
            }
            if not self._patch_status(
                victim.namespace, victim.name, victim.uid, {"conditions": [condition]}
            ):
                continue
            try:
                self._store.delete(PODS, victim.namespace, victim.name, uid=victim.uid)
            except ApiError as error:
                log.warning("simulated scheduler could not preempt %s: %s", victim.key, error)
                continue
            self._store.create(
                EVENTS,
                victim.namespace,
                preempted_event(victim.namespace, victim.name, victim.uid, pod, node),
            )
            gone = self._store.find(PODS, victim.namespace, victim.name)
            if gone is not None:
                snapshot.apply("Pod", gone)
            else:
                snapshot.remove("Pod", victim.uid)
            changed += 1
            log.info("simulated scheduler preempted %s on %s for %s", victim.key, node, pod.key)
        changed += self._patch_status(pod.namespace, pod.name, pod.uid, {"nominatedNodeName": node})
        snapshot.apply("Pod", self._store.get(PODS, pod.namespace, pod.name))
        return changed

    def _patch_status(self, namespace: str, name: str, uid: str, status: dict[str, Any]) -> int:
        """A status patch on the pod with this uid; 0 when it is gone or replaced."""
        current = self._store.find(PODS, namespace, name)
        if current is None or current["metadata"].get("uid") != uid:
            return 0
        self._store.patch(
            PODS, namespace, name, STRATEGIC_MERGE_PATCH, {"status": status}, subresource="status"
        )
        return 1

    def _bind(self, snapshot: ClusterSnapshot, pod: Pod, node: str) -> int:
        """Bind as upstream's DefaultBinder does (a Binding pinned to the pod's UID), then
        place the pod in the pass's snapshot so later pods in the pass see it."""
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            bind(self._store, pod.namespace, pod.name, binding)
        except ApiError as error:
            log.warning("simulated scheduler could not bind %s to %s: %s", pod.key, node, error)
            return 0
        snapshot.apply("Pod", self._store.get(PODS, pod.namespace, pod.name))
        log.info("simulated scheduler bound %s to %s", pod.key, node)
        return 1

    def _mark_unschedulable(self, obj: Obj, message: str) -> int:
        """`PodScheduled=False`, reason Unschedulable, patched only when it differs (as the
        scheduler's `updatePod` skips an unchanged condition)."""
        meta = obj["metadata"]
        current = _condition(obj, "PodScheduled")
        wanted = {"status": "False", "reason": "Unschedulable", "message": message}
        if current is not None and all(current.get(k) == v for k, v in wanted.items()):
            return 0
        transition = now_rfc3339()
        if current is not None and current.get("status") == "False":
            transition = current.get("lastTransitionTime") or transition
        condition = {
            "type": "PodScheduled",
            **wanted,
            "lastProbeTime": None,
            "lastTransitionTime": transition,
        }
        self._store.patch(
            PODS,
            meta["namespace"],
            meta["name"],
            STRATEGIC_MERGE_PATCH,
            {"status": {"conditions": [condition]}},
            subresource="status",
        )
        log.info("simulated scheduler: %s/%s: %s", meta["namespace"], meta["name"], message)
        return 1


def preempted_event(
    namespace: str, name: str, uid: str, preemptor: Pod, node: str, *, message: str | None = None
) -> Obj:
    """The core/v1 Event kube-scheduler's recorder leaves on a victim (as the core API
    shows an events.k8s.io/v1 Event: `note` as `message`, `regarding` as `involvedObject`).
    `message` replaces upstream's, e.g. with the older `Preempted by <ns>/<name> ...` form."""
    moment = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # a MicroTime, as upstream's
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{name}.", "namespace": namespace},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": namespace,
            "name": name,
            "uid": uid,
        },
        "related": {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": preemptor.namespace,
            "name": preemptor.name,
            "uid": preemptor.uid,
        },
        "reason": "Preempted",
        "action": "Preempting",
        "type": "Normal",
        "message": message or f"Preempted by pod {preemptor.uid} on node {node}",
        "eventTime": moment,
        "reportingComponent": "default-scheduler",
        "reportingInstance": "default-scheduler-simulated",
        "source": {},
        "count": 1,
    }


def _queue_key(obj: Obj, pod: Pod) -> tuple[int, float, str, str]:
    created = _epoch(obj["metadata"].get("creationTimestamp"))
    return (-pod.priority, created, pod.namespace, pod.name)


def _epoch(text: str | None) -> float:
    """A creation timestamp as the queue orders it; a missing or unreadable one sorts first."""
    try:
        return parse_time(text) or 0.0
    except PlannerInputError:
        return 0.0


def choose_node(pod: Pod, statuses: Mapping[str, Status]) -> str | None:
    """The node to bind to: the nominated node when it fits (upstream evaluates it first),
    otherwise the first fitting node by name (upstream would score them; one fixed rule keeps
    the simulation reproducible)."""
    nominated = statuses.get(pod.nominated_node_name)
    if nominated is not None and nominated.ok:
        return pod.nominated_node_name
    return next((name for name in sorted(statuses) if statuses[name].ok), None)


def fit_error(num_nodes: int, statuses: Mapping[str, Status]) -> str:
    """`FitError.Error()` without a PostFilter message (the scheduler does not preempt here),
    worded by the planner's own `scheduling_fit_error`."""
    return scheduling_fit_error(num_nodes, statuses)


def _condition(obj: Obj, kind: str) -> dict[str, Any] | None:
    for condition in (obj.get("status") or {}).get("conditions") or ():
        if condition.get("type") == kind:
            found: dict[str, Any] = condition
            return found
    return None


# -- the kubelet --------------------------------------------------------------------------------


class SimulatedKubelet:
    """Every node's kubelet at once: ends terminating pods, starts bound ones.

    Termination is the store's own bookkeeping (`Store.reap`, which knows when each pod
    started terminating and with what grace period); the kubelet decides when to look and
    caps the grace period at `max_grace_seconds` (None: the pod's own grace period, as a real
    kubelet honours it). A bound Pending pod on an existing node becomes Running, with a
    startTime, `start_delay` seconds after the kubelet first sees it."""

    def __init__(
        self,
        store: Store,
        *,
        max_grace_seconds: float | None = DEFAULT_MAX_GRACE_SECONDS,
        start_delay: float = DEFAULT_START_DELAY,
        interval: float = DEFAULT_INTERVAL,
    ) -> None:
        self._store = store
        self.max_grace_seconds = max_grace_seconds
        self.start_delay = start_delay
        self._loop = _Loop("simulated-kubelet", interval, self.tick)
        self._first_seen: dict[str, float] = {}  # uid of a pod awaiting start -> monotonic

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()

    def tick(self) -> int:
        """One round: finish the pods whose (capped) grace period is over, start the pods
        whose start delay is over; returns how many pods changed."""
        finished = self._store.reap(max_grace=self.max_grace_seconds)
        return finished + self._start_pods()

    def _start_pods(self) -> int:
        now = time.monotonic()
        started = 0
        with self._store.transaction():
            waiting = awaiting_start(self._store)
            self._first_seen = {
                uid: seen for uid, seen in self._first_seen.items() if uid in waiting
            }
            for uid, obj in waiting.items():
                seen = self._first_seen.setdefault(uid, now)
                if now - seen >= self.start_delay:
                    self._run(obj)
                    del self._first_seen[uid]
                    started += 1
        return started

    def _run(self, obj: Obj) -> None:
        """What the kubelet reports once the containers run: phase Running, startTime, and
        the Initialized, ContainersReady and Ready conditions."""
        meta = obj["metadata"]
        moment = now_rfc3339()
        conditions = [
            {"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": moment}
            for kind in ("Initialized", "ContainersReady", "Ready")
        ]
        self._store.patch(
            PODS,
            meta["namespace"],
            meta["name"],
            STRATEGIC_MERGE_PATCH,
            {"status": {"phase": "Running", "startTime": moment, "conditions": conditions}},
            subresource="status",
        )
        log.info("simulated kubelet started %s/%s", meta["namespace"], meta["name"])


def awaiting_start(store: Store) -> dict[str, Obj]:
    """Pods bound to an existing node, still Pending and not terminating, by uid. A pod
    whose nodeName is not a string (a hostile object) is bound nowhere a kubelet could start it."""
    with store.transaction():
        nodes = {node["metadata"]["name"] for node in store.objects(NODES)}
        return {
            pod["metadata"]["uid"]: pod
            for pod in store.objects(PODS)
            if isinstance(node := (pod.get("spec") or {}).get("nodeName"), str)
            and node in nodes
            and (pod.get("status") or {}).get("phase", "Pending") == "Pending"
            and not pod["metadata"].get("deletionTimestamp")
        }


# -- the cluster --------------------------------------------------------------------------------


class SimulatedCluster:
    """An emulator with a simulated scheduler and kubelet: a cluster for `preemptctl dev`.

    Load a scenario (before or after `start`), start, point clients at `kubeconfig_path`,
    `wait_until_quiet` when the cluster should have settled, `stop`. The emulator's own
    reaper is off: the kubelet finishes terminating pods, with its grace-period cap."""

    def __init__(
        self,
        *,
        scheduler_names: Collection[str] = DEFAULT_SCHEDULER_NAMES,
        max_grace_seconds: float | None = DEFAULT_MAX_GRACE_SECONDS,
        start_delay: float = DEFAULT_START_DELAY,
        interval: float = DEFAULT_INTERVAL,
        upstream_preemption: bool = False,
        preemption_delay: float = 0.0,
        host: str = "127.0.0.1",
        port: int = 0,
        bookmark_interval: float = 1.0,
    ) -> None:
        self.emulator = Emulator(
            host=host, port=port, bookmark_interval=bookmark_interval, reap_interval=None
        )
        self.scheduler = SimulatedScheduler(
            self.emulator.store,
            scheduler_names=scheduler_names,
            interval=interval,
            preemption=upstream_preemption,
            preemption_delay=preemption_delay,
        )
        self.kubelet = SimulatedKubelet(
            self.emulator.store,
            max_grace_seconds=max_grace_seconds,
            start_delay=start_delay,
            interval=interval,
        )

    @property
    def store(self) -> Store:
        return self.emulator.store

    @property
    def kubeconfig_path(self) -> Path:
        """The generated kubeconfig for any client (set once started)."""
        return self.emulator.kubeconfig_path

    @property
    def base_url(self) -> str:
        return self.emulator.base_url

    def load(self, scenario: str | Path | Mapping[str, Any]) -> int:
        """Add a scenario's objects (a `v1 List` path or document) in one step: a scheduling
        pass never sees its pods without its nodes. Returns how many objects were loaded."""
        with self.store.transaction():
            return self.emulator.load(scenario)

    def start(self) -> str:
        """Serve and run the scheduler and kubelet; returns the base URL."""
        base_url = self.emulator.start()
        self.scheduler.start()
        self.kubelet.start()
        return base_url

    def stop(self) -> None:
        self.kubelet.stop()
        self.scheduler.stop()
        self.emulator.stop()

    def __enter__(self) -> SimulatedCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def is_quiet(self) -> bool:
        """Nothing left for the simulation to do on its own: the scheduler has seen the
        current state and found nothing to bind or mark, no pod is terminating, and no bound
        pod waits to start. (Whether a controller still has work is for its caller to ask.)"""
        store = self.store
        with store.transaction():
            if self.scheduler.settled_revision != store.revision:
                return False
            if any(pod["metadata"].get("deletionTimestamp") for pod in store.objects(PODS)):
                return False
            return not awaiting_start(store)

    def wait_until_quiet(self, timeout: float = 10.0) -> bool:
        """Wait until `is_quiet`; False if it is not within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while not self.is_quiet():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

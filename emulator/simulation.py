"""The simulated cluster behind `preemptctl dev`: the API emulator, a scheduler and a kubelet.

`SimulatedCluster` owns an `Emulator` and two loops:

- `SimulatedScheduler`, one scheduling pass at a time over the scheduling queue (priority
  first, then oldest):
  - a pod alone is bound to a node it fits (`emulator.placement`: its nominated node when
    that fits, as upstream tries the nominated node first; otherwise the first fitting node
    by name) or marked `PodScheduled=False`, reason `Unschedulable`, with upstream's FitError
    message;
  - a pod of a pod group (`spec.schedulingGroup.podGroupName`, or the configured group
    label) is scheduled with its group's other pending pods, all-or-nothing, as
    kube-scheduler 1.37 does with the `GenericWorkload` gate (`emulator.group_cycle`): the
    members that fit are bound together only when at least the gang's minCount of members
    can be placed at once (`basic`: one); otherwise none is bound, and each is marked
    Unschedulable with the GangScheduling plugin's `minCount (N) cannot be satisfied: ...`
    or its own FitError. A member whose nominated node is still being freed (lower-priority
    pods terminating there) makes its group wait for that room rather than bind elsewhere
    (a deliberate difference, `emulator.group_cycle`), so a gang lands where its
    preemption made room.
  Fit is the planner's own (`filter_nodes` over a `ClusterSnapshot` with the Namespaces and
  PodGroups, so every filter the planner models judges it: resources, ports, taints, node
  affinity, pod affinity and anti-affinity, topology spread), so nominated pods of at least
  the pod's priority count as placed and terminating pods occupy their node until the
  kubelet finishes them: exactly what makes a preemption wait for its victims' grace period.
  It never preempts, the controller does; unless it runs in upstream-preemption mode
  (`preemption=True`, off by default), where it preempts as kube-scheduler does, so that
  shadow mode has something to compare with (`emulator.executor` writes what upstream's
  Executor writes): for a pod that fits nowhere, DefaultPreemption with the planner (the
  same code) nominates the pod, clears lower-priority nominations, marks each victim
  `DisruptionTarget` (PreemptionByScheduler), deletes it gracefully with a UID precondition
  and writes upstream's core/v1 Event on it (reason `Preempted`, reporting component
  `default-scheduler`, message `Preempted by pod <uid> on node <node>`); for a PodGroup that
  does not fit, PodGroupPostFilter with the planner's `plan_pod_group` marks, deletes and
  records each victim (`Preempted by podgroup <uid> on node cluster`) and nominates every
  placed member. A group named by a label is not preempted for: kube-scheduler does not
  know such groups. With `preemption_delay` it waits that long after first finding a pod
  or group unschedulable before it preempts for it (a scheduler slower than the
  controller's dry run).
- `SimulatedKubelet`: finishes terminating pods when their grace period ends (capped by
  `max_grace_seconds` so demos are quick) and starts bound pods (phase Running, startTime,
  each container's status) after `start_delay`, so start-time tie-breaks have something to
  compare.

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

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from preemptctl.emulator.api import Emulator
from preemptctl.emulator.binding import bind
from preemptctl.emulator.executor import POD_GROUP_DOMAIN, Executor, Preemptor
from preemptctl.emulator.group_cycle import queued_group, run_group_cycle
from preemptctl.emulator.patch import STRATEGIC_MERGE_PATCH
from preemptctl.emulator.placement import place
from preemptctl.emulator.resources import NAMESPACES, NODES, PDBS, POD_GROUPS, PODS
from preemptctl.emulator.scenario import read_document, with_fresh_uids
from preemptctl.emulator.status import ApiError
from preemptctl.emulator.store import Obj, Store, now_rfc3339
from preemptctl.preemption.decision import Decision, Verdict
from preemptctl.preemption.decode import parse_time
from preemptctl.preemption.default_preemption import PreemptionArgs, decided_as_group, preempt
from preemptctl.preemption.errors import PlannerInputError
from preemptctl.preemption.find_nodes_that_fit import ERR_NO_NODES
from preemptctl.preemption.objects import Pod
from preemptctl.preemption.pod_group_preemption import PodGroupPreemptor, plan_pod_group
from preemptctl.preemption.snapshot import ClusterSnapshot
from preemptctl.preemption.victim_units import UnitKind

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

Entry = tuple[Obj, Pod]  # a queued pod: the stored object and the planner's view of it


class SimulatedScheduler:
    """Binds pending pods that fit (a pod group's members all-or-nothing), marks the others
    Unschedulable; preempts for them only in upstream-preemption mode (`preemption`).

    A pass runs every `interval` seconds when the store changed since the last one.
    `settled_revision` is the store revision at which a pass last found nothing to do; when
    it equals the store's revision, every schedulable pod is bound and every other one
    carries its current Unschedulable condition (or waits outside the queue, as the member
    of a group that is not ready does). `pod_group_label` and `pod_group_size_annotation`
    name groups by a label, as the controller's setting of the same name does."""

    def __init__(
        self,
        store: Store,
        *,
        scheduler_names: Collection[str] = DEFAULT_SCHEDULER_NAMES,
        interval: float = DEFAULT_INTERVAL,
        preemption: bool = False,
        preemption_delay: float = 0.0,
        pod_group_label: str = "",
        pod_group_size_annotation: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._clock = clock
        self.scheduler_names = frozenset(scheduler_names)
        self.preemption = preemption
        self.preemption_delay = preemption_delay
        self.group_args = PreemptionArgs(
            pod_group_label=pod_group_label, pod_group_size_annotation=pod_group_size_annotation
        )
        self._executor = Executor(store)
        self._loop = _Loop("simulated-scheduler", interval, self._tick)
        self._seen_revision = -1
        self.settled_revision = -1
        self._said: set[str] = set()
        # pod uid, or "podgroup <ns/name>", -> monotonic time first found unschedulable
        self._unschedulable_since: dict[str, float] = {}

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()

    def _tick(self) -> None:
        if self._store.revision != self._seen_revision or self._preemption_due():
            self.schedule_pass()

    def _preemption_due(self) -> bool:
        """A pod or group waits out `preemption_delay` and its preemption is now due."""
        if not self.preemption or not self._unschedulable_since:
            return False
        now = self._clock()
        return any(
            now - since >= self.preemption_delay for since in self._unschedulable_since.values()
        )

    def schedule_pass(self) -> int:
        """One scheduling pass over the current state, holding the store still; returns how
        many pods it changed (bound, nominated, preempted or newly marked Unschedulable)."""
        with self._store.transaction():
            revision = self._store.revision
            snapshot = self._snapshot()
            cycles = self._cycles(self._queue(snapshot))
            waiting = {_delay_key(group, entries) for group, entries in cycles}
            self._unschedulable_since = {
                key: since for key, since in self._unschedulable_since.items() if key in waiting
            }
            changed = sum(
                self._schedule_group(snapshot, group, entries)
                if group
                else self._schedule_one(snapshot, entries[0])
                for group, entries in cycles
            )
            # after changes, the next pass confirms that nothing is left (settles)
            self._seen_revision = revision
            if changed == 0:
                self.settled_revision = revision
            return changed

    def _snapshot(self) -> ClusterSnapshot:
        """The planner's view of the current objects (PDBs play no part in fit, only in
        preemption; Namespaces do, for pod affinity's namespaceSelector; PodGroups before
        pods, whose priority is their group's)."""
        snapshot = ClusterSnapshot()
        args = self.group_args
        if args.pod_group_label:
            snapshot.kept_labels = frozenset({args.pod_group_label})
        if args.pod_group_size_annotation:
            snapshot.kept_annotations = frozenset({args.pod_group_size_annotation})
        kinds = [
            ("Namespace", NAMESPACES),
            ("Node", NODES),
            ("PodGroup", POD_GROUPS),
            ("Pod", PODS),
        ]
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
        """An object the planner cannot read is left out, as the cluster view leaves it out."""
        self._say_once(f"simulated scheduler leaves out an object: {error}")

    def _say_once(self, text: str) -> None:
        """A warning said once per distinct text, not every pass."""
        if text not in self._said:
            self._said.add(text)
            log.warning("%s", text)

    def _queue(self, snapshot: ClusterSnapshot) -> list[Entry]:
        """The pods to schedule, in the scheduling queue's order: priority, then creation."""
        queue: list[Entry] = []
        for obj in self._store.objects(PODS):
            if not self._schedulable(obj):
                continue
            pod = snapshot.pod_by_key(f"{obj['metadata']['namespace']}/{obj['metadata']['name']}")
            if pod is not None:
                queue.append((obj, pod))
        queue.sort(key=lambda entry: _queue_key(entry[0], entry[1]))
        return queue

    def _cycles(self, queue: list[Entry]) -> list[tuple[str, list[Entry]]]:
        """The queue as scheduling cycles: a pod alone ("", [pod]), or a pod group ("ns/name",
        its queued members in queue order) where its first member is queued
        (`podGroupInfoForPod` pops the group's other pods with it)."""
        cycles: list[tuple[str, list[Entry]]] = []
        groups: dict[str, list[Entry]] = {}
        for entry in queue:
            group = decided_as_group(entry[1], self.group_args)
            if not group:
                cycles.append(("", [entry]))
            elif group in groups:
                groups[group].append(entry)
            else:
                groups[group] = [entry]
                cycles.append((group, groups[group]))
        return cycles

    def _schedulable(self, obj: Obj) -> bool:
        spec = obj.get("spec") or {}
        return (
            not spec.get("nodeName")
            and not obj["metadata"].get("deletionTimestamp")
            and (obj.get("status") or {}).get("phase") not in _TERMINAL
            and (spec.get("schedulerName") or "default-scheduler") in self.scheduler_names
            and not spec.get("schedulingGates")
        )

    def _schedule_one(self, snapshot: ClusterSnapshot, entry: Entry) -> int:
        obj, pod = entry
        placement = place(snapshot, pod)
        if placement.node is not None:
            return self._bind(snapshot, pod, placement.node)
        preempted = self._preempt(snapshot, pod) if self.preemption else 0
        if preempted:
            obj = self._store.get(PODS, pod.namespace, pod.name)
        return self._mark_unschedulable(obj, placement.fit_error) + preempted

    def _schedule_group(self, snapshot: ClusterSnapshot, key: str, entries: list[Entry]) -> int:
        """One pod group scheduling cycle (`emulator.group_cycle`): bind every placed member
        together when the group is feasible; else bind none, preempt for the group in
        upstream-preemption mode, and mark each member Unschedulable."""
        group, waiting = queued_group(snapshot, key, self.group_args)
        if group is None:
            self._say_once(f"simulated scheduler: pod group {key} waits: {waiting}")
            return 0
        cycle = run_group_cycle(snapshot, group, [pod for _, pod in entries])
        if cycle.waiting_for:
            log.debug(
                "simulated scheduler: pod group %s waits for the room being made on %s",
                key,
                cycle.waiting_for,
            )
            return 0
        if cycle.feasible:
            changed = 0
            for obj, pod in entries:
                node = cycle.placed.get(pod.uid)
                if node is not None:
                    changed += self._bind(snapshot, pod, node)
                else:
                    changed += self._mark_unschedulable(obj, cycle.message_for(pod))
            return changed
        preempted = 0
        if self.preemption and group.kind is UnitKind.POD_GROUP:
            preempted = self._preempt_group(snapshot, group, entries)
        changed = preempted
        for obj, pod in entries:
            current = self._store.get(PODS, pod.namespace, pod.name) if preempted else obj
            changed += self._mark_unschedulable(current, cycle.message_for(pod))
        if not changed:
            return 0
        log.info("simulated scheduler: pod group %s: %s", key, cycle.message or "unschedulable")
        return changed

    # -- upstream-preemption mode -------------------------------------------------------------

    def _due(self, key: str) -> bool:
        """Whether the preemption for `key` has waited out `preemption_delay` (and it is
        now taken: the next one waits again)."""
        since = self._unschedulable_since.setdefault(key, self._clock())
        if self._clock() - since < self.preemption_delay:
            return False
        del self._unschedulable_since[key]
        return True

    def _preempt(self, snapshot: ClusterSnapshot, pod: Pod) -> int:
        """`DefaultPreemption` for one unschedulable pod, once its delay is over: plan,
        then `prepareCandidate` (clear lower nominations, mark, delete, record) and nominate.
        How many objects it changed."""
        if not self._due(pod.uid):
            return 0
        decision = preempt(snapshot, pod)
        if decision.verdict is not Verdict.PREEMPT or decision.nominated_node is None:
            return 0
        return self._carry_out(snapshot, pod, decision, decision.nominated_node)

    def _carry_out(self, snapshot: ClusterSnapshot, pod: Pod, decision: Decision, node: str) -> int:
        changed = 0
        for cleared in decision.nominated_pods_to_clear:
            changed += self._executor.patch_status(
                cleared.namespace, cleared.name, cleared.uid, {"nominatedNodeName": None}
            )
        preemptor = Preemptor.of_pod(pod)
        for victim in decision.victims:
            changed += self._executor.preempt_pod(victim, preemptor, node)
            self._refresh(snapshot, victim.namespace, victim.name, victim.uid)
        changed += self._executor.patch_status(
            pod.namespace, pod.name, pod.uid, {"nominatedNodeName": node}
        )
        snapshot.apply("Pod", self._store.get(PODS, pod.namespace, pod.name))
        return changed

    def _preempt_group(
        self, snapshot: ClusterSnapshot, group: PodGroupPreemptor, entries: list[Entry]
    ) -> int:
        """`PodGroupPostFilter` for a pod group that did not fit, once its delay is over: the
        planner's `plan_pod_group` over the whole cluster, then upstream's writes: each
        victim marked, deleted and recorded (`Preempted by podgroup <uid> on node cluster`),
        and every placed member nominated to its node. How many objects it changed."""
        if not self._due(f"podgroup {group.key}"):
            return 0
        try:
            decision = plan_pod_group(snapshot, group.key)
        except PlannerInputError as error:
            self._reject(error)
            return 0
        if decision.verdict is not Verdict.PREEMPT:
            return 0
        preemptor = Preemptor.of_pod_group(group.key, group.uid, entries[0][1].scheduler_name)
        changed = 0
        for victim in decision.victims:
            changed += self._executor.preempt_pod(victim, preemptor, POD_GROUP_DOMAIN)
            self._refresh(snapshot, victim.namespace, victim.name, victim.uid)
        for key, node in sorted(decision.nominations.items()):
            member = snapshot.pod_by_key(key)
            if member is None:
                continue
            changed += self._executor.patch_status(
                member.namespace, member.name, member.uid, {"nominatedNodeName": node}
            )
            self._refresh(snapshot, member.namespace, member.name, member.uid)
        log.info(
            "simulated scheduler preempted %d pod(s) for pod group %s: %s",
            len(decision.victims),
            group.key,
            decision.message,
        )
        return changed

    def _refresh(self, snapshot: ClusterSnapshot, namespace: str, name: str, uid: str) -> None:
        """The pass's snapshot follows a write: the pod as stored now, or gone."""
        current = self._store.find(PODS, namespace, name)
        if current is not None:
            snapshot.apply("Pod", current)
        else:
            snapshot.remove("Pod", uid)

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


def _delay_key(group: str, entries: list[Entry]) -> str:
    """What `preemption_delay` is counted for: the pod, or the pod group."""
    return f"podgroup {group}" if group else entries[0][1].uid


def _queue_key(obj: Obj, pod: Pod) -> tuple[int, float, str, str]:
    created = _epoch(obj["metadata"].get("creationTimestamp"))
    return (-pod.priority, created, pod.namespace, pod.name)


def _epoch(text: str | None) -> float:
    """A creation timestamp as the queue orders it; a missing or unreadable one sorts first."""
    try:
        return parse_time(text) or 0.0
    except PlannerInputError:
        return 0.0


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
        """What the kubelet reports once the containers run: phase Running, startTime, the
        Initialized, ContainersReady and Ready conditions, and each container's status (so
        `kubectl get pods` shows it READY)."""
        meta = obj["metadata"]
        moment = now_rfc3339()
        conditions = [
            {"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": moment}
            for kind in ("Initialized", "ContainersReady", "Ready")
        ]
        status: dict[str, Any] = {
            "phase": "Running",
            "startTime": moment,
            "conditions": conditions,
            **container_statuses(obj.get("spec") or {}, moment, str(meta.get("uid", ""))),
        }
        self._store.patch(
            PODS,
            meta["namespace"],
            meta["name"],
            STRATEGIC_MERGE_PATCH,
            {"status": status},
            subresource="status",
        )
        log.info("simulated kubelet started %s/%s", meta["namespace"], meta["name"])


def container_statuses(
    spec: Mapping[str, Any], started_at: str, pod_uid: str = ""
) -> dict[str, list[Obj]]:
    """The kubelet's `containerStatuses` for a pod whose containers all started at
    `started_at`: each running, started and ready, never restarted. Init containers, when
    the pod has some, have completed (`initContainerStatuses`), except sidecars
    (`restartPolicy: Always`), which keep running beside the others."""

    def running(container: Mapping[str, Any]) -> Obj:
        return {
            **container_identity(container, pod_uid),
            "ready": True,
            "started": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": started_at}},
        }

    def completed(container: Mapping[str, Any]) -> Obj:
        return {
            **container_identity(container, pod_uid),
            "ready": False,
            "started": False,
            "restartCount": 0,
            "state": {
                "terminated": {
                    "exitCode": 0,
                    "reason": "Completed",
                    "startedAt": started_at,
                    "finishedAt": started_at,
                }
            },
        }

    containers = [c for c in spec.get("containers") or () if isinstance(c, Mapping)]
    found: dict[str, list[Obj]] = {"containerStatuses": [running(c) for c in containers]}
    inits = [c for c in spec.get("initContainers") or () if isinstance(c, Mapping)]
    if inits:
        found["initContainerStatuses"] = [
            running(c) if c.get("restartPolicy") == "Always" else completed(c) for c in inits
        ]
    return found


def container_identity(container: Mapping[str, Any], pod_uid: str) -> Obj:
    """A container status's name and image, and the ids a container runtime gives: the
    image's digest and the container's (made up, stable for one pod and container). Never
    left out: the official client refuses a container status without `imageID`."""
    name, image = str(container.get("name", "")), str(container.get("image", ""))
    return {
        "name": name,
        "image": image,
        "imageID": image_id(image),
        "containerID": "containerd://" + _digest(f"{pod_uid}/{name}"),
    }


def image_id(image: str) -> str:
    """An image's digest reference as a container runtime reports it (made up, stable):
    `nginx:1.27` is `docker.io/library/nginx@sha256:<digest>`."""
    repository = image.rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image
    if "/" not in repository:
        repository = f"docker.io/library/{repository}"
    return f"{repository}@sha256:{_digest(image)}"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


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
        pod_groups: bool = True,
        pod_group_label: str = "",
        pod_group_size_annotation: str = "",
        host: str = "127.0.0.1",
        port: int = 0,
        bookmark_interval: float = 1.0,
    ) -> None:
        self.emulator = Emulator(
            host=host,
            port=port,
            bookmark_interval=bookmark_interval,
            reap_interval=None,
            pod_groups=pod_groups,
        )
        self.scheduler = SimulatedScheduler(
            self.emulator.store,
            scheduler_names=scheduler_names,
            interval=interval,
            preemption=upstream_preemption,
            preemption_delay=preemption_delay,
            pod_group_label=pod_group_label,
            pod_group_size_annotation=pod_group_size_annotation,
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

    def load(self, scenario: str | Path | Mapping[str, Any], *, keep_uids: bool = False) -> int:
        """Add a scenario's objects (a `v1 List` path or document) in one step: a scheduling
        pass never sees its pods without its nodes. Returns how many objects were loaded.

        Each object gets a new uid (references to it follow, `with_fresh_uids`), as a real API
        server gives every object it creates one: two loads of one file are other pods, never
        the same ones again. `keep_uids` keeps the file's, for a caller that pins them."""
        document = read_document(scenario)
        with self.store.transaction():
            return self.emulator.load(document if keep_uids else with_fresh_uids(document))

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

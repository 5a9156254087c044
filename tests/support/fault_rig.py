"""Everything a fault-injection run is made of, and the audit that judges it afterwards.

A rig is: a simulated cluster (the API emulator, its scheduler and kubelet) crowded with
low-priority pods and a few high-priority pending preemptors; a migrated Postgres ledger of
its own behind a `TcpProxy`; a `PersistentTemporal` dev server; and two `preemptctl worker`
processes, each on its own probe ports. Faults are injected through the emulator (its fault
table, extended here with a random share, and its request log, extended here with a hook
that fires the moment a DELETE has succeeded, before its answer leaves), through the proxy
(a database outage), by SIGKILL (a worker) and by restarting Temporal.

The audit reads only what no worker can bend: the emulator's request log and final state,
the ledger's rows, and Temporal's list of runs. Never the workers' own logs or metrics.

Gangs (issue 25): the rig surveys the PodGroups it is given (`Rig.survey`): a group with a
pending member when first seen is a pending gang (its members are waited for and judged as
preemptors are, unless it is labelled `CANNOT_FIT`); a `disruptionMode: all` group with
scheduled members is a victim unit, taken whole or not at all. The audit then asks whether
each pending gang is bound whole or not at all, whether anything was deleted for a gang left
unbound, and whether a victim unit was split.

Scale and replay: `PREEMPT_FAULTS_SCALE=N` multiplies nodes, preemptors, kills and time
bounds (default 1, CI size); a failure names its seed, and `PREEMPT_FAULTS_SEED=S` replays
the same random choices (the timing of the processes is not replayed).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, select
from temporalio.client import Client

from preemptctl.emulator import Request, RequestLog, SimulatedCluster
from preemptctl.emulator.faults import Action, Decision, Fault, Faults
from preemptctl.emulator.resources import POD_GROUPS, PODS
from preemptctl.ledger.models import events as events_table
from preemptctl.migrations import upgrade
from preemptctl.worker.ports import free_port
from tests.support.emulator import as_list, node, pod
from tests.support.postgres import fresh_database
from tests.support.tcp_proxy import TcpProxy
from tests.support.temporal_server import PersistentTemporal

PREEMPTCTL = str(Path(sys.executable).parent / "preemptctl")
PREEMPTOR_PRIORITY = 1000
CANNOT_FIT = "faults.preemptctl.test/cannot-fit"
"""A label on a pending PodGroup that no preemption can place: not waited for, and judged
only by whether anything was deleted for it."""
SCALE_ENV = "PREEMPT_FAULTS_SCALE"
SEED_ENV = "PREEMPT_FAULTS_SEED"


def scale() -> int:
    """How much bigger than CI size a run is (`PREEMPT_FAULTS_SCALE`, default 1)."""
    return max(1, int(os.environ.get(SCALE_ENV, "1")))


def seed() -> int:
    """The random seed (`PREEMPT_FAULTS_SEED` replays a run; otherwise a fresh one)."""
    given = os.environ.get(SEED_ENV)
    return int(given) if given else random.SystemRandom().randrange(2**32)


# -- the cluster ----------------------------------------------------------------------------------


def crowded_cluster(nodes: int, preemptors: int, *, grace_period: int = 1) -> dict[str, Any]:
    """`nodes` full nodes (4 CPU, four 1-CPU batch pods each, priorities 1 to 4) and
    `preemptors` pending 2-CPU pods at priority 1000: each preemptor needs two victims, and
    there is room for two preemptors per node, so every preemptor can end bound. A deleted
    batch pod terminates for `grace_period` seconds (capped by the rig's
    `max_grace_seconds`)."""
    objects: list[dict[str, Any]] = []
    for n in range(nodes):
        objects.append(node(f"node-{n}", cpu="4"))
        objects.extend(
            pod(
                f"batch-{n}-{j}",
                node_name=f"node-{n}",
                priority=1 + j,
                cpu="1",
                grace_period=grace_period,
            )
            for j in range(4)
        )
    objects.extend(preemptor(f"urgent-{k}") for k in range(preemptors))
    return as_list(*objects)


def preemptor(name: str) -> dict[str, Any]:
    return pod(name, priority=PREEMPTOR_PRIORITY, cpu="2")


def pod_group(
    name: str,
    *,
    min_count: int,
    priority: int,
    disruption_all: bool = False,
    cannot_fit: bool = False,
    namespace: str = "default",
) -> dict[str, Any]:
    """A PodGroup: a gang of `min_count`, `disruptionMode: all` or single; `cannot_fit`
    labels it `CANNOT_FIT` for the audit."""
    return {
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": str(uuid.uuid4()),
            "labels": {CANNOT_FIT: "true"} if cannot_fit else {},
        },
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": min_count}},
            "disruptionMode": {"all": {}} if disruption_all else {"single": {}},
            "priority": priority,
        },
    }


def gang_members(
    group: dict[str, Any], *, cpu: str, nodes: list[str | None], grace_period: int = 1
) -> list[dict[str, Any]]:
    """One pod of `group` per entry of `nodes` (None: pending), at the group's priority."""
    name = group["metadata"]["name"]
    members = []
    for i, node_name in enumerate(nodes):
        member = pod(
            f"{name}-{i}",
            group["metadata"]["namespace"],
            node_name=node_name,
            priority=int(group["spec"]["priority"]),
            cpu=cpu,
            grace_period=grace_period,
        )
        member["spec"]["schedulingGroup"] = {"podGroupName": name}
        members.append(member)
    return members


def hostile_pod() -> dict[str, Any]:
    """A pod no reader can accept (its priority is text), as a broken admission webhook or a
    newer API server could let through."""
    obj = pod("hostile", "hostile", priority=0)
    obj["spec"]["priority"] = "high"
    return obj


# -- faults ---------------------------------------------------------------------------------------


class RandomApiFaults(Faults):
    """The emulator's fault table, plus a random share of requests answered 500, 503, 429 with
    Retry-After, or a dropped connection, while `enabled` is set. Rules added the usual way
    still come first."""

    ACTIONS = ("500", "503", "429", "drop")

    def __init__(self, rng: random.Random, share: float) -> None:
        super().__init__()
        self._rng = rng
        self._rng_lock = threading.Lock()
        self.share = share
        self.enabled = threading.Event()
        self.injected: Counter[str] = Counter()
        # Called as each request arrives, before it is served: a test can change the cluster
        # between a caller's decision to write and the write.
        self.on_arrival: Callable[[str, str, str, str], None] | None = None

    def decide(self, verb: str, resource: str, namespace: str, name: str) -> Decision:
        hook = self.on_arrival
        if hook is not None:
            hook(verb, resource, namespace, name)
        decision = super().decide(verb, resource, namespace, name)
        if decision.fault is not None or not self.enabled.is_set():
            return decision
        with self._rng_lock:
            if self._rng.random() >= self.share:
                return decision
            action = self._rng.choice(self.ACTIONS)
        self.injected[f"{verb} {resource} {action}"] += 1
        if action == "drop":
            return Decision(decision.delay, Fault(Action.DROP, verb, resource))
        retry_after = 1 if action == "429" else None
        return Decision(
            decision.delay,
            Fault(Action.FAIL, verb, resource, code=int(action), retry_after=retry_after),
        )


class HookedRequestLog(RequestLog):
    """The request log, calling `on_deleted` for each successful pod DELETE at the moment it is
    logged: after the pod is deleted, before the caller has its answer."""

    def __init__(self) -> None:
        super().__init__()
        self.on_deleted: Callable[[Request], None] | None = None

    def append(self, request: Request) -> None:
        super().append(request)
        hook = self.on_deleted
        if hook is not None and is_successful_delete(request):
            hook(request)


def is_successful_delete(request: Request) -> bool:
    return request.verb == "delete" and request.resource == "pods" and 200 <= request.code < 300


# -- gangs ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Gang:
    """A pending PodGroup, as the rig first saw it."""

    key: str  # namespace/name
    uid: str
    min_count: int
    members: tuple[str, ...]  # its pods' namespace/name
    fits: bool  # False when labelled `CANNOT_FIT`


@dataclass(frozen=True)
class VictimUnit:
    """A `disruptionMode: all` PodGroup with scheduled members: one victim unit."""

    key: str
    members: frozenset[str]  # the UIDs of its members scheduled when first seen


@dataclass(frozen=True)
class GangEnd:
    """A pending gang at the audit: how many of its members are bound."""

    gang: Gang
    bound: int


def _group_key(obj: dict[str, Any]) -> str:
    return f"{obj['metadata'].get('namespace') or 'default'}/{obj['metadata']['name']}"


def _member_of(pod_obj: dict[str, Any]) -> str | None:
    name = ((pod_obj.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
    return f"{pod_obj['metadata'].get('namespace') or 'default'}/{name}" if name else None


def _min_count(group: dict[str, Any]) -> int:
    gang = (group["spec"].get("schedulingPolicy") or {}).get("gang")
    return int(gang["minCount"]) if gang else 1


# -- the workers ----------------------------------------------------------------------------------


class WorkerProcess:
    """One `preemptctl worker`, started and SIGKILLed at will; its stderr goes to a file only
    for a person debugging a failure (the audit never reads it)."""

    def __init__(self, name: str, env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.probe_port = free_port()
        self.env = {
            **env,
            "PREEMPT_METRICS_PORT": str(self.probe_port),
            "PREEMPT_PROBE_PORT": str(free_port()),  # the kubelet's listener: one per worker
            "PREEMPT_SDK_METRICS_PORT": "0",
            "PREEMPT_IDENTITY": f"faults-{name}",
        }
        self.log_path = log_dir / f"{name}.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self.kills = 0
        self._kills_at_start = 0

    @property
    def pid(self) -> int | None:
        """The running process's id; None when it is not running."""
        with self._lock:
            process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def start(self) -> None:
        with self._lock:
            if self._process is not None and self._process.poll() is None:
                return
            self._kills_at_start = self.kills
            with self.log_path.open("ab") as log:
                self._process = subprocess.Popen(
                    [PREEMPTCTL, "worker"], env=self.env, stdout=log, stderr=log
                )

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until /readyz answers 200; at once when the rig killed it meanwhile (a hook armed
        before the start may kill a worker before the other is ready)."""
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.probe_port}/readyz"
        while True:
            with self._lock:
                process = self._process
            if process is None or process.poll() is not None:
                if self.kills > self._kills_at_start:
                    return  # killed on purpose (an armed hook): the test starts it again
                raise AssertionError(f"worker {self.name} exited; see {self.log_path}")
            try:
                with urllib.request.urlopen(url, timeout=2) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"worker {self.name} not ready after {timeout:g}s")
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL: no shutdown, no goodbye to Temporal, activities cut mid-call."""
        with self._lock:
            process = self._process
            if process is None or process.poll() is not None:
                return
            process.send_signal(signal.SIGKILL)
            self.kills += 1
        process.wait(timeout=30)

    def stop(self) -> None:
        with self._lock:
            process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


# -- the rig --------------------------------------------------------------------------------------


@dataclass
class Rig:
    cluster: SimulatedCluster
    faults: RandomApiFaults
    requests: HookedRequestLog
    temporal: PersistentTemporal
    proxy: TcpProxy
    database_url: str  # direct, for the audit; the workers go through the proxy
    task_queue: str
    workers: list[WorkerProcess]
    rng: random.Random
    seed: int
    gangs: dict[str, Gang] = field(default_factory=dict)
    units: dict[str, VictimUnit] = field(default_factory=dict)

    def survey(self) -> None:
        """Note each PodGroup not seen before: a pending gang, or a victim unit (see the
        module docstring). Called once the scenario is loaded and after each `add_gang`."""
        members: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for obj in self.cluster.store.objects(PODS):
            member_of = _member_of(obj)
            if member_of is not None:
                members[member_of].append(obj)
        for group in self.cluster.store.objects(POD_GROUPS):
            key = _group_key(group)
            if key in self.gangs or key in self.units:
                continue
            pods = members.get(key, [])
            scheduled = [p for p in pods if (p.get("spec") or {}).get("nodeName")]
            if len(scheduled) < len(pods):
                self.gangs[key] = Gang(
                    key,
                    str(group["metadata"]["uid"]),
                    _min_count(group),
                    tuple(
                        sorted(
                            f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods
                        )
                    ),
                    (group["metadata"].get("labels") or {}).get(CANNOT_FIT) != "true",
                )
            elif scheduled and "all" in (group["spec"].get("disruptionMode") or {}):
                self.units[key] = VictimUnit(
                    key, frozenset(str(p["metadata"]["uid"]) for p in scheduled)
                )

    def add_gang(self, group: dict[str, Any], members: list[dict[str, Any]]) -> None:
        """A new PodGroup and its pods, in one step (the scheduler never sees the pods
        without their group), as a job controller would create them."""
        with self.cluster.store.transaction():
            self.cluster.store.load(POD_GROUPS, group)
            for member in members:
                self.cluster.store.load(PODS, member)
        self.survey()

    def gang_ends(self) -> list[GangEnd]:
        """Each pending gang, with how many of its members are bound now."""
        return [
            GangEnd(gang, sum(1 for key in gang.members if self._bound(key)))
            for gang in self.gangs.values()
        ]

    def _bound(self, key: str) -> bool:
        return bool(((self.cluster.emulator.pod(key) or {}).get("spec") or {}).get("nodeName"))

    def preemptor_keys(self) -> list[str]:
        return [
            f"{p['metadata']['namespace']}/{p['metadata']['name']}"
            for p in self.cluster.store.objects(PODS)
            if p["spec"].get("priority") == PREEMPTOR_PRIORITY
        ]

    def unbound_preemptors(self) -> list[str]:
        """The preemptors not bound, members of a pending gang that fits included."""
        members = [key for gang in self.gangs.values() if gang.fits for key in gang.members]
        return [key for key in [*self.preemptor_keys(), *members] if not self._bound(key)]

    def add(self, obj: dict[str, Any]) -> None:
        """A new object, as a controller or a person would create it (ADDED on the watch)."""
        self.cluster.store.load(PODS, obj)

    def replace_pod(self, namespace: str, name: str) -> str:
        """Delete the pod at once and create a pending one of the same name, as a StatefulSet
        recreates its pod; returns the new pod's UID."""
        store = self.cluster.store
        with store.transaction():
            old = store.get(PODS, namespace, name)
            store.delete(PODS, namespace, name, grace_period=0)
            fresh = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "labels": old["metadata"].get("labels") or {},
                },
                "spec": {k: v for k, v in old["spec"].items() if k != "nodeName"},
            }
            created = store.create(PODS, namespace, fresh)
        return str(created["metadata"]["uid"])

    def restart_worker(self, worker: WorkerProcess) -> None:
        """SIGKILL the worker and start it again."""
        worker.kill()
        self.ensure_running(worker)

    def ensure_running(self, worker: WorkerProcess, attempts: int = 3) -> None:
        """Start the worker if it is not running, until it is ready (another fault may kill
        it again while it starts)."""
        for attempt in range(attempts):
            worker.start()
            try:
                worker.wait_ready()
                return
            except AssertionError:
                if attempt == attempts - 1:
                    raise

    def ledger_count(self, kind: str) -> int:
        """How many events of `kind` the ledger holds (read directly, not through the proxy)."""
        engine = create_engine(self.database_url)
        try:
            with engine.connect() as connection:
                return len(
                    connection.execute(
                        select(events_table.c.id).where(events_table.c.kind == kind)
                    ).all()
                )
        finally:
            engine.dispose()

    def ledger_payloads(self, kind: str) -> list[dict[str, Any]]:
        """The payloads of every event of `kind`, in order."""
        engine = create_engine(self.database_url)
        try:
            with engine.connect() as connection:
                return [
                    dict(payload)
                    for (payload,) in connection.execute(
                        select(events_table.c.payload)
                        .where(events_table.c.kind == kind)
                        .order_by(events_table.c.id)
                    )
                ]
        finally:
            engine.dispose()

    def wait_for(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
            time.sleep(0.05)

    def running_workflows(self) -> list[str]:
        async def ask() -> list[str]:
            client = await Client.connect(self.temporal.address)
            query = f'TaskQueue = "{self.task_queue}" AND ExecutionStatus = "Running"'
            return [execution.id async for execution in client.list_workflows(query)]

        return asyncio.run(ask())

    def settle(self, timeout: float) -> float:
        """Wait until every preemptor is bound, no run is open and the cluster is quiet, seen
        twice in a row; returns the seconds it took. On timeout, returns anyway: the audit
        then says what is missing, which is more use than "timed out"."""
        start = time.monotonic()
        calm = 0
        while calm < 2 and time.monotonic() - start < timeout:
            time.sleep(0.5)
            try:
                open_runs = self.running_workflows()
            except Exception:  # Temporal restarting: not calm
                calm = 0
                continue
            quiet = not self.unbound_preemptors() and not open_runs and self.cluster.is_quiet()
            calm = calm + 1 if quiet else 0
        return time.monotonic() - start

    def ledger_rows(self) -> list[dict[str, Any]]:
        """Every event row of the ledger, in order (read directly, not through the proxy)."""
        engine = create_engine(self.database_url)
        try:
            with engine.connect() as connection:
                return [
                    dict(row._mapping)
                    for row in connection.execute(select(events_table).order_by(events_table.c.id))
                ]
        finally:
            engine.dispose()

    def audit(self) -> Audit:
        rows = self.ledger_rows()
        try:
            running = self.running_workflows()
        except Exception as error:
            running = [f"cannot list runs: {error}"]
        audit = Audit.build(
            list(self.requests),
            rows,
            {p["metadata"]["uid"] for p in self.cluster.store.objects(PODS)},
            self.unbound_preemptors(),
            running,
            self.seed,
            self.gang_ends(),
            list(self.units.values()),
        )
        audit.injected = {
            **self.faults.injected,
            "worker kills": sum(worker.kills for worker in self.workers),
            "temporal restarts": self.temporal.restarts,
            "database cuts": self.proxy.cuts,
        }
        return audit


@contextmanager
def fault_rig(
    temporal: PersistentTemporal,
    work_dir: Path,
    scenario: dict[str, Any],
    *,
    share: float = 0.0,
    workers: int = 2,
    extra_env: dict[str, str] | None = None,
    arm: Callable[[Rig], None] | None = None,
    max_grace_seconds: float = 0.5,
) -> Iterator[Rig]:
    """A rig on `scenario`, workers started and ready, random faults armed when `share` > 0.

    `arm` sets the rig's hooks before the first worker starts: a worker that is ready before
    the others preempts at once, so a hook set after they all are may miss every request.
    `max_grace_seconds`: how long a deleted victim stays terminating at most; a DELETE sent
    again while it is terminating is answered 200 (as kube-apiserver answers it), so a run
    that would delete a victim twice is seen doing so only if the victim lives long enough:
    the exactly-once suite gives it seconds."""
    run_seed = seed()
    rng = random.Random(run_seed)
    cluster = SimulatedCluster(max_grace_seconds=max_grace_seconds)
    faults = RandomApiFaults(rng, share)
    requests = HookedRequestLog()
    # Before the server starts: it is handed these two and keeps them.
    cluster.emulator.faults = faults
    cluster.emulator.requests = requests
    cluster.load(scenario)
    task_queue = f"faults-{uuid.uuid4().hex[:8]}"
    with fresh_database("preemptctl_faults") as url, cluster:
        upgrade(url)
        with TcpProxy.for_url(url) as proxy:
            env = {
                "PATH": "/usr/bin:/bin",
                "HOME": str(work_dir),
                **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"},
                "PREEMPT_DATABASE_URL": proxy.rewrite(url),
                "PREEMPT_TEMPORAL_ADDRESS": temporal.address,
                "PREEMPT_KUBECONFIG": str(cluster.kubeconfig_path),
                "PREEMPT_TASK_QUEUE": task_queue,
                "PREEMPT_LOG_FORMAT": "text",
                "PREEMPT_HTTP_BIND_ADDRESS": "127.0.0.1",
                "PREEMPT_MIN_PRIORITY": str(PREEMPTOR_PRIORITY),
                "PREEMPT_SCHEDULED_WAIT_SECONDS": "20",
                **(extra_env or {}),
            }
            fleet = [WorkerProcess(f"worker-{i}", env, work_dir) for i in range(workers)]
            rig = Rig(
                cluster, faults, requests, temporal, proxy, url, task_queue, fleet, rng, run_seed
            )
            rig.survey()
            try:
                if arm is not None:
                    arm(rig)
                for worker in fleet:
                    worker.start()
                for worker in fleet:
                    worker.wait_ready()
                if share > 0:
                    faults.enabled.set()
                yield rig
            finally:
                requests.on_deleted = None
                faults.on_arrival = None
                faults.enabled.clear()
                for worker in fleet:
                    worker.stop()


# -- the audit ------------------------------------------------------------------------------------

INVARIANTS = (
    "every preemptor bound",
    "no victim UID deleted twice",
    "no pod deleted that was not a decided victim",
    "no decided victim left behind",
    "no duplicate ledger event",
    "no missing ledger event",
    "no workflow left running",
    "each run ends once",
    "every pending gang bound whole or none of it",
    "no victim deleted for a gang left unbound",
    "no victim unit taken in part",
)

_ONCE_PER_RUN = frozenset(
    {
        "decision_made",
        "no_candidate",
        "ineligible",
        "dry_run",
        "nominated",
        "preemptor_scheduled",
        "preemption_aborted",
        "completed",
        "failed",
    }
)
_ONCE_PER_VICTIM = frozenset(
    {
        "victim_chosen",
        "victim_marked",
        "victim_deleted",
        "victim_already_gone",
        "victim_replaced",
        "victim_failed",
    }
)
_FATES = _ONCE_PER_VICTIM - {"victim_chosen", "victim_marked"}
_TERMINAL = frozenset(
    {"completed", "failed", "preemption_aborted", "dry_run", "no_candidate", "ineligible"}
)


@dataclass
class Audit:
    """Each invariant's violations, each one line with its evidence; empty means it holds."""

    violations: dict[str, list[str]]
    seed: int
    deletes: int
    runs: int
    injected: dict[str, int] = field(default_factory=dict)  # what the rig did, for the report
    gangs: dict[str, int] = field(default_factory=dict)  # each pending gang: members bound
    units: int = 0  # victim units judged

    def of(self, invariant: str) -> list[str]:
        assert invariant in INVARIANTS, invariant
        return self.violations.get(invariant, [])

    def assert_holds(self, invariant: str) -> None:
        """Fail with the invariant's evidence and the seed that replays the run."""
        violations = self.of(invariant)
        assert violations == [], (
            f"{invariant}: {len(violations)} violation(s) (replay with {SEED_ENV}={self.seed}):\n"
            + "\n".join(violations)
        )

    @staticmethod
    def build(
        requests: list[Request],
        rows: list[dict[str, Any]],
        live_uids: set[str],
        unbound: list[str],
        running: list[str],
        run_seed: int,
        gangs: list[GangEnd] | None = None,
        units: list[VictimUnit] | None = None,
    ) -> Audit:
        found: dict[str, list[str]] = defaultdict(list)
        found["every preemptor bound"] = [f"{key} is not bound" for key in unbound]
        found["no workflow left running"] = [f"{wid} is still running" for wid in running]

        deletes: dict[str, list[Request]] = defaultdict(list)
        for request in requests:
            if not is_successful_delete(request):
                continue
            uid = ((request.body or {}).get("preconditions") or {}).get("uid")
            if not uid:
                found["no pod deleted that was not a decided victim"].append(
                    f"DELETE {request.path} -> {request.code} carried no UID precondition"
                )
                continue
            deletes[uid].append(request)
        for uid, sent in deletes.items():
            if len(sent) > 1:
                found["no victim UID deleted twice"].append(
                    f"{sent[0].namespace}/{sent[0].name} uid {uid}: {len(sent)} successful DELETEs "
                    f"at {', '.join(f'{r.received_at:.3f}' for r in sent)}"
                )

        chosen: dict[str, dict[str, Any]] = {}
        by_run: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in rows:
            by_run[row["run_id"]].append(row)
            if row["kind"] == "victim_chosen":
                chosen.setdefault(row["victim_uid"], row)
        for uid, sent in deletes.items():
            if uid not in chosen:
                found["no pod deleted that was not a decided victim"].append(
                    f"{sent[0].namespace}/{sent[0].name} uid {uid} deleted, chosen in no decision"
                )

        for run_id, events in by_run.items():
            kinds = [event["kind"] for event in events]
            if kinds and kinds[-1] == "completed":
                fated = {e["victim_uid"] for e in events if e["kind"] in _FATES}
                for event in events:
                    if event["kind"] == "victim_chosen" and event["victim_uid"] not in fated:
                        found["no missing ledger event"].append(
                            f"{event['victim_namespace']}/{event['victim_name']} uid "
                            f"{event['victim_uid']}: chosen by completed run {run_id}, "
                            f"which records no fate for it"
                        )
                for event in events:
                    if event["kind"] == "victim_chosen" and event["victim_uid"] in live_uids:
                        found["no decided victim left behind"].append(
                            f"{event['victim_namespace']}/{event['victim_name']} uid "
                            f"{event['victim_uid']} chosen by completed run {run_id} still exists"
                        )
            counts = Counter(
                (event["kind"], event["victim_uid"])
                for event in events
                if event["kind"] in _ONCE_PER_RUN | _ONCE_PER_VICTIM
            )
            for (kind, victim_uid), count in counts.items():
                if count > 1:
                    found["no duplicate ledger event"].append(
                        f"run {run_id}: {kind}{' ' + victim_uid if victim_uid else ''} x{count}"
                    )
            if "decision_made" in kinds and not _TERMINAL & set(kinds):
                found["no missing ledger event"].append(
                    f"run {run_id} ({events[0]['preemption_id']}): no terminal event after "
                    f"{', '.join(kinds)}"
                )

        recorded_deleted = Counter(
            row["victim_uid"] for row in rows if row["kind"] == "victim_deleted"
        )
        fates = defaultdict(list)
        for row in rows:
            if row["kind"] in _ONCE_PER_VICTIM - {"victim_chosen"}:
                fates[row["victim_uid"]].append(row["kind"])
        for uid, sent in deletes.items():
            if recorded_deleted[uid] == 0:
                run_id = chosen[uid]["run_id"] if uid in chosen else None
                story = ", ".join(e["kind"] for e in by_run.get(run_id or "", []))
                found["no missing ledger event"].append(
                    f"{sent[0].namespace}/{sent[0].name} uid {uid}: DELETE -> {sent[0].code} at "
                    f"{sent[0].received_at:.3f}, but no victim_deleted row (ledger says: "
                    f"{', '.join(fates[uid]) or 'nothing'}; its run {run_id}: {story})"
                )
            elif recorded_deleted[uid] > 1:
                found["no duplicate ledger event"].append(
                    f"uid {uid}: victim_deleted x{recorded_deleted[uid]} across runs"
                )
        for uid in recorded_deleted:
            if uid not in deletes:
                found["no missing ledger event"].append(
                    f"uid {uid}: ledger says victim_deleted, the API saw no successful DELETE"
                )
        for run_id, events in by_run.items():
            ends = [event["kind"] for event in events if event["kind"] in _TERMINAL]
            if len(ends) > 1:
                found["each run ends once"].append(
                    f"run {run_id} ({events[0]['preemption_id']}): {len(ends)} ends: "
                    f"{', '.join(ends)}"
                )
        _judge_gangs(found, gangs or [], units or [], deletes, rows, live_uids)
        return Audit(
            dict(found),
            run_seed,
            sum(len(s) for s in deletes.values()),
            len(by_run),
            gangs={end.gang.key: end.bound for end in gangs or []},
            units=len(units or []),
        )


def _judge_gangs(
    found: dict[str, list[str]],
    gangs: list[GangEnd],
    units: list[VictimUnit],
    deletes: dict[str, list[Request]],
    rows: list[dict[str, Any]],
    live_uids: set[str],
) -> None:
    """The gang invariants: each pending gang bound whole (minCount) or not at all; nothing
    deleted for a gang left unbound, by the ledger (its runs' `victim_deleted`) or by the
    request log (a pod deleted that only its runs chose); no victim unit split (some of its
    members deleted or gone, others still there)."""
    for end in gangs:
        gang = end.gang
        if 0 < end.bound < gang.min_count:
            found["every pending gang bound whole or none of it"].append(
                f"{gang.key}: {end.bound} of {len(gang.members)} member(s) bound, "
                f"minCount {gang.min_count}"
            )
        if end.bound:
            continue
        runs = {row["run_id"] for row in rows if row["preemptor_uid"] == gang.uid}
        choosers: dict[str, set[str]] = defaultdict(set)
        for row in rows:
            if row["kind"] == "victim_chosen":
                choosers[row["victim_uid"]].add(row["run_id"])
        for row in rows:
            if row["kind"] == "victim_deleted" and row["run_id"] in runs:
                found["no victim deleted for a gang left unbound"].append(
                    f"{gang.key} is not bound, yet its run {row['run_id']} deleted "
                    f"{row['victim_namespace']}/{row['victim_name']} uid {row['victim_uid']}"
                )
        for uid, sent in deletes.items():
            if choosers.get(uid) and choosers[uid] <= runs:
                found["no victim deleted for a gang left unbound"].append(
                    f"{gang.key} is not bound, yet {sent[0].namespace}/{sent[0].name} uid "
                    f"{uid}, chosen by its runs only, was deleted"
                )
    for unit in units:
        gone = {uid for uid in unit.members if uid in deletes or uid not in live_uids}
        if gone and gone != unit.members:
            found["no victim unit taken in part"].append(
                f"{unit.key} (disruptionMode all): {len(gone)} of {len(unit.members)} "
                f"member(s) deleted, {len(unit.members) - len(gone)} left"
            )

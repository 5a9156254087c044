"""A Kubernetes API emulator for tests, benchmarks and the simulated cluster (never production).

No real API server can run where this project is tested, so the Kubernetes side is checked
over real HTTP with the unmodified `kubernetes` client against this emulator, which keeps
the semantics a preemption controller depends on: resourceVersion, the status subresource,
strategic merge patches, delete preconditions, graceful pod deletion, the Eviction API with
PodDisruptionBudgets, list pagination, watches with bookmarks and 410 Gone, and injectable
faults with a request log. It serves kube-scheduler's PodGroup API (`scheduling.k8s.io/
v1beta1`) like its other kinds, and can be started without it (`pod_groups=False`), as a
cluster whose `GenericWorkload` gate is off.

Why not kmock (PyPI `kmock` 0.8, evaluated as a base): it is a well-made HTTP mock with a
terse DSL and a simple stateful "KubernetesEmulator", but its Kubernetes layer is, by its own
docstring, "in-memory-database-over-http" that "only modifies the objects as simple JSON
structures: merge the dicts, overwrite the keys". What this project needs is exactly what it
leaves out: per-object resourceVersion with optimistic concurrency, a consistent revision
history so a watch can resume and get 410 Gone when compacted, limit/continue pagination,
field selectors, merge-by-key for `status.conditions`, delete preconditions answered with
the server's 409 wording, graceful deletion (it marks deletionTimestamp only for objects
with finalizers), and the Eviction/PDB check. It is also asyncio/aiohttp-only and
self-declared early v0 with breaking changes expected, while our client and view are
synchronous threads. Building those semantics on top of it would mean overriding most of
it; a small standard-library server with one module per concern is less code to own and
needs no new dependency.

Layout: `store` (objects, revisions, history, graceful deletion), `watch` (one watch
stream), `patch` (merge, strategic merge, JSON patch), `eviction` (PDB-checked delete),
`binding` (the `pods/binding` subresource), `selectors`, `faults`, `requestlog`, `routing`
(path to verb/resource), `handlers` (REST semantics), `http_server` (the wire),
`kubeconfig`, `scenario` (List files), `api` (`Emulator`, the public entry point), and
`simulation` (`SimulatedCluster`: the emulator plus a scheduler and a kubelet that judge fit
with the planner's filters, for `preemptctl dev`) with the scheduler's parts: `placement`
(one pod's node), `group_cycle` (a pod group placed all-or-nothing) and `executor` (what
kube-scheduler writes when it preempts).
"""

from preemptctl.emulator.api import Emulator
from preemptctl.emulator.faults import DEFAULT_USER, Fault, Faults
from preemptctl.emulator.requestlog import Request, RequestLog
from preemptctl.emulator.scenario import ScenarioError
from preemptctl.emulator.simulation import SimulatedCluster, SimulatedKubelet, SimulatedScheduler

__all__ = [
    "DEFAULT_USER",
    "Emulator",
    "Fault",
    "Faults",
    "Request",
    "RequestLog",
    "ScenarioError",
    "SimulatedCluster",
    "SimulatedKubelet",
    "SimulatedScheduler",
]

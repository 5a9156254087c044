"""The real kube-scheduler as the planner's oracle (issue 26).

For each generated cluster (nodes of a few sizes, some tainted, labelled by zone, cordoned;
low-priority pods filling them, some with host ports, a few above the preemptor; budgets with
and without a disruption left; a pending pod with, now and then, a node selector, a
toleration, a host port, required anti-affinity or `preemptionPolicy: Never`), the real
kube-scheduler's DefaultPreemption (profile `default-scheduler`) decides, and our planner
decides on a snapshot taken just before (what `kubectl get nodes,pods,pdb,namespaces -A -o
json` prints; `preemptctl plan --snapshot` reads the same). The two are compared on the node
and the victims, and every disagreement is classified:

- `agree`: same outcome (the same node and the same victims; or neither preempts);
- `tie`: the same victims would be taken on either node and upstream's criteria cannot tell
  the nodes apart (`pickOneNodeForPreemption` ends on a tie); upstream then takes the first of
  its candidates in an order its random offset and Go's map iteration decide, ours the first
  by name: both are right. Or the outcome depends on the order of pods upstream's
  `MoreImportantPod` cannot tell apart (same priority and start time), which decides which of
  them is reprieved first: kube-scheduler 1.36 leaves them in the order of the node's pod list,
  ours breaks the tie by UID; planned again with UIDs in that order (`in_pod_order`), ours
  decides as upstream;
- anything else (`node`, `victims`, `outcome`) is a disagreement to explain: a bug of the
  planner, or of this harness. Its snapshot is saved under `--out` for `preemptctl plan`.

How upstream is observed: the preemptor is created with a scheduling gate, the snapshot taken,
the gate removed. The scheduler runs with `SchedulerAsyncPreemption=false`, so its victims
are deleted (they stay terminating: no kubelet runs) before it writes the preemptor's
`PodScheduled=False` with the nomination, and that write ends the case. Only the decision is
compared; async or not, upstream decides the same way.

Run by hand (a few minutes for 300 cases on 2 cores; needs KUBEBUILDER_ASSETS, see README):

    .venv/bin/python -m benchmarks.oracle --cases 300 --seed 1 [--out DIR] [--keep-all]
    .venv/bin/python -m benchmarks.oracle --seed 7 --first 344 --cases 1   # one case again

Seeds 7 and 11, 400 cases each (2026-12-06): 390 agree and 10 ties each, no disagreement.

tests/real_api/test_oracle.py runs a bounded version of it in CI.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from preemptctl.preemption.decision import Decision, Verdict
from preemptctl.preemption.planner import plan
from preemptctl.preemption.snapshot import ClusterSnapshot
from tests.support.control_plane import (
    FEATURE_GATES,
    ControlPlane,
    find_binaries,
)
from tests.support.http_api import MERGE_PATCH, HttpApi

NAMESPACE = "oracle"
CASE_LABEL = "oracle-case"
PREEMPTOR = "preemptor"
PREEMPTOR_PRIORITY = 5000
ABOVE_PREEMPTOR = 9000  # a running pod the preemptor may not take
RUNNING_PRIORITIES = (0, 10, 10, 100, 100, 1000)
START_TIMES = tuple(f"2026-01-01T00:0{minute}:00Z" for minute in range(4))  # ties on purpose
HOST_PORT = 8080
GATE = "preemptctl.test/oracle"
ORACLE_FEATURE_GATES = f"{FEATURE_GATES},SchedulerAsyncPreemption=false"


# -- generated clusters ---------------------------------------------------------------------------


@dataclass
class Case:
    """One generated cluster and its pending pod, as manifests for the API server."""

    index: int
    seed: int
    nodes: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)  # bound at creation
    start_times: dict[str, str] = field(default_factory=dict)
    budgets: list[tuple[str, str, int]] = field(default_factory=list)  # name, app, allowed
    preemptor: dict[str, Any] = field(default_factory=dict)
    features: list[str] = field(default_factory=list)  # what the preemptor asks for


def _container(cpu: str, host_port: bool = False, memory: str = "64Mi") -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": {"cpu": cpu, "memory": memory}},
    }
    if host_port:
        container["ports"] = [{"containerPort": HOST_PORT, "hostPort": HOST_PORT}]
    return container


def generate(index: int, seed: int, max_nodes: int = 6) -> Case:
    """The case `index` of the run seeded `seed` (the same pair gives the same case)."""
    rng = random.Random(f"{seed}/{index}")
    case = Case(index, seed)
    prefix = f"c{index}"
    for n in range(rng.randint(2, max_nodes)):
        name = f"{prefix}-n{n}"
        cpu_millis = rng.choice((2000, 4000, 4000))
        memory_mi = rng.choice((2048, 8192, 8192))
        pod_slots = rng.choice((110, 110, 110, 4))
        node: dict[str, Any] = {
            "name": name,
            "cpu": f"{cpu_millis}m",
            "memory": f"{memory_mi}Mi",
            "pods": str(pod_slots),
            "labels": {"zone": rng.choice(("a", "b")), CASE_LABEL: str(index)},
            "taints": (
                [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]
                if rng.random() < 0.15
                else []
            ),
            "unschedulable": rng.random() < 0.08,
        }
        case.nodes.append(node)
        used, used_memory, count = 0, 0, 0
        limit = pod_slots
        ports_taken = False
        while count < limit:
            cpu = rng.choice((250, 500, 500, 1000, 1000, 2000))
            memory = rng.choice((64, 256, 512, 1024))
            if used + cpu > cpu_millis or used_memory + memory > memory_mi:
                break
            if rng.random() < 0.2 and used > cpu_millis // 2:
                break  # leave some nodes with room
            pod_name = f"{prefix}-{name.split('-')[1]}-p{count}"
            priority = ABOVE_PREEMPTOR if rng.random() < 0.05 else rng.choice(RUNNING_PRIORITIES)
            host_port = not ports_taken and rng.random() < 0.1
            ports_taken = ports_taken or host_port
            running: dict[str, Any] = {
                "metadata": {
                    "name": pod_name,
                    "labels": {"app": rng.choice(("web", "db", "batch"))},
                },
                "spec": {
                    "nodeName": name,
                    "priorityClassName": f"p-{priority}",
                    "terminationGracePeriodSeconds": 600,
                    "containers": [_container(f"{cpu}m", host_port, f"{memory}Mi")],
                },
            }
            if rng.random() < 0.05:  # keeps web pods off its node (the preemptor may be one)
                running["spec"]["affinity"] = {"podAntiAffinity": _away_from("web")}
            case.pods.append(running)
            case.start_times[pod_name] = rng.choice(START_TIMES)
            used += cpu
            used_memory += memory
            count += 1
    if rng.random() < 0.5:
        for app in rng.sample(("web", "db"), rng.randint(1, 2)):
            case.budgets.append((f"{prefix}-{app}", app, rng.choice((0, 1, 1))))
    spec: dict[str, Any] = {
        "schedulerName": "default-scheduler",
        "priorityClassName": f"p-{PREEMPTOR_PRIORITY}",
        "schedulingGates": [{"name": GATE}],
        "containers": [_container(rng.choice(("1", "2", "2", "3")), rng.random() < 0.1)],
    }
    if spec["containers"][0].get("ports"):
        case.features.append("hostPort")
    if rng.random() < 0.05:
        spec["priorityClassName"] = f"p-{PREEMPTOR_PRIORITY}-never"
        case.features.append("preemptionPolicy Never")
    if rng.random() < 0.25:
        spec["nodeSelector"] = {"zone": rng.choice(("a", "b"))}
        case.features.append("nodeSelector")
    if rng.random() < 0.2:
        spec["tolerations"] = [
            {"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}
        ]
        case.features.append("toleration")
    if rng.random() < 0.1:
        spec["affinity"] = {"podAntiAffinity": _away_from("db")}
        case.features.append("podAntiAffinity")
    if rng.random() < 0.1:
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": "zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "web"}},
            }
        ]
        case.features.append("topologySpread")
    if rng.random() < 0.15:
        spec["containers"][0]["resources"]["requests"]["memory"] = "1536Mi"
        case.features.append("memory")
    labels = {"app": "web"} if rng.random() < 0.5 else {}
    case.preemptor = {"metadata": {"name": f"{prefix}-{PREEMPTOR}", "labels": labels}, "spec": spec}
    return case


def _away_from(app: str) -> dict[str, Any]:
    """Required anti-affinity: not on a node that runs a pod labelled `app`."""
    return {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {
                "labelSelector": {"matchLabels": {"app": app}},
                "topologyKey": "kubernetes.io/hostname",
            }
        ]
    }


# -- one case on the control plane ----------------------------------------------------------------


@dataclass
class Outcome:
    """A decision as both sides are compared: preempted on `node`, taking `victims`; bound
    to `node` without preemption (`fits`); or neither (`node` None)."""

    node: str | None
    victims: frozenset[str] = frozenset()
    fits: bool = False
    status: str = ""  # ours: the planner's verdict

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "victims": sorted(self.victims),
            "fits": self.fits,
            **({"status": self.status} if self.status else {}),
        }


@dataclass
class Result:
    case: Case
    upstream: Outcome
    ours: Outcome
    verdict: str  # agree, tie, node, victims, outcome
    explanation: str
    snapshot: dict[str, Any]
    decision: dict[str, Any]
    seconds: float


class Oracle:
    """Runs cases one at a time on a control plane whose scheduler preempts synchronously."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.api = HttpApi(
            plane.server, token=plane.tokens["admin"], ca_file=plane.ca_file, keep_alive=True
        )
        plane.namespace(NAMESPACE)
        for priority in (*set(RUNNING_PRIORITIES), ABOVE_PREEMPTOR, PREEMPTOR_PRIORITY):
            plane.priority_class(priority)
        plane.priority_class(PREEMPTOR_PRIORITY, never=True)

    def run(self, case: Case) -> Result:
        began = time.monotonic()
        try:
            self._create(case)
            snapshot = self._snapshot(case)
            self._ungate(case)
            upstream = self._upstream(case)
        finally:
            self._clean(case)
        decision = plan(
            ClusterSnapshot.from_list(snapshot), f"{NAMESPACE}/{case.preemptor['metadata']['name']}"
        )
        ours = _ours(decision)
        verdict, explanation = classify(upstream, ours, decision, snapshot)
        return Result(
            case,
            upstream,
            ours,
            verdict,
            explanation,
            snapshot,
            decision.to_json(),
            time.monotonic() - began,
        )

    def _create(self, case: Case) -> None:
        for node in case.nodes:
            self.plane.ready_node(
                node["name"],
                cpu=node["cpu"],
                memory=node["memory"],
                pods=node["pods"],
                labels=node["labels"],
                taints=node["taints"],
                unschedulable=node["unschedulable"],
            )
        pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
        for pod in case.pods:
            name = pod["metadata"]["name"]
            pod["metadata"]["labels"][CASE_LABEL] = str(case.index)
            self.api.create(pods, pod)
            self.api.patch(
                f"{pods}/{name}/status",
                {"status": {"phase": "Running", "startTime": case.start_times[name]}},
                MERGE_PATCH,
            ).ok()
        for name, app, allowed in case.budgets:
            path = f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets"
            created = self.api.create(
                path,
                {
                    "metadata": {"name": name, "labels": {CASE_LABEL: str(case.index)}},
                    "spec": {
                        "selector": {"matchLabels": {"app": app, CASE_LABEL: str(case.index)}},
                        "maxUnavailable": allowed,
                    },
                },
            )
            self.api.patch(
                f"{path}/{name}/status",
                {
                    "status": {
                        "observedGeneration": created["metadata"].get("generation", 1),
                        "disruptionsAllowed": allowed,
                        "currentHealthy": 1,
                        "desiredHealthy": 1,
                        "expectedPods": 1,
                    }
                },
                MERGE_PATCH,
            ).ok()
        case.preemptor["metadata"]["labels"][CASE_LABEL] = str(case.index)
        self.api.create(pods, case.preemptor)

    def _snapshot(self, case: Case) -> dict[str, Any]:
        """What `kubectl get nodes,pods,pdb,namespaces -A -o json` prints, the preemptor's
        scheduling gate left out (it is removed next, and the scheduler decides without it)."""
        items: list[dict[str, Any]] = []
        for path, kind, api_version in (
            ("/api/v1/nodes", "Node", "v1"),
            (f"/api/v1/namespaces/{NAMESPACE}/pods", "Pod", "v1"),
            (
                f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets",
                "PodDisruptionBudget",
                "policy/v1",
            ),
            ("/api/v1/namespaces", "Namespace", "v1"),
        ):
            for item in self.api.get(path).ok()["items"]:
                item.get("metadata", {}).pop("managedFields", None)
                items.append({"apiVersion": api_version, "kind": kind, **item})
        for item in items:
            if (
                item["kind"] == "Pod"
                and item["metadata"]["name"] == case.preemptor["metadata"]["name"]
            ):
                item["spec"].pop("schedulingGates", None)
        return {"apiVersion": "v1", "kind": "List", "items": items}

    def _ungate(self, case: Case) -> None:
        self.api.patch(
            f"/api/v1/namespaces/{NAMESPACE}/pods/{case.preemptor['metadata']['name']}",
            {"spec": {"schedulingGates": None}},
            MERGE_PATCH,
        ).ok()

    def _upstream(self, case: Case, timeout: float = 60.0) -> Outcome:
        """Wait for the scheduler's first word on the preemptor: bound, or PodScheduled
        False (with the nomination and the victims already deleted, when it preempted)."""
        path = f"/api/v1/namespaces/{NAMESPACE}/pods/{case.preemptor['metadata']['name']}"
        deadline = time.monotonic() + timeout
        while True:
            pod = self.api.get(path).ok()
            if pod["spec"].get("nodeName"):
                return Outcome(pod["spec"]["nodeName"], fits=True)
            scheduled = [
                c for c in pod["status"].get("conditions") or [] if c["type"] == "PodScheduled"
            ]
            if scheduled and scheduled[0].get("reason") == "Unschedulable":
                break  # not "SchedulingGated", which the gate left there
            if time.monotonic() > deadline:
                raise RuntimeError(f"case {case.index}: no word from the scheduler in {timeout}s")
            time.sleep(0.02)
        node = pod["status"].get("nominatedNodeName")
        if not node:
            return Outcome(None)
        victims = frozenset(
            f"{NAMESPACE}/{p['metadata']['name']}"
            for p in self.api.get(
                f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector=f"{CASE_LABEL}={case.index}"
            ).ok()["items"]
            if p["metadata"].get("deletionTimestamp")
        )
        return Outcome(node, victims)

    def _clean(self, case: Case) -> None:
        selector = {"labelSelector": f"{CASE_LABEL}={case.index}"}
        self.api.call(
            "DELETE",
            f"/api/v1/namespaces/{NAMESPACE}/pods",
            {"gracePeriodSeconds": 0},
            query=selector,
        )
        self.api.call(
            "DELETE",
            f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets",
            query=selector,
        )
        self.api.call("DELETE", "/api/v1/nodes", query=selector)
        left = self.api.get(f"/api/v1/namespaces/{NAMESPACE}/pods", **selector).ok()["items"]
        nodes = self.api.get("/api/v1/nodes", **selector).ok()["items"]
        if left or nodes:
            raise RuntimeError(f"case {case.index}: {len(left)} pods, {len(nodes)} nodes left")


def _ours(decision: Decision) -> Outcome:
    if decision.verdict is Verdict.PREEMPT:
        return Outcome(
            decision.nominated_node,
            frozenset(v.key for v in decision.victims),
            status=decision.verdict.value,
        )
    if decision.verdict is Verdict.FITS_WITHOUT_PREEMPTION:
        first = decision.rationale.fits[0] if decision.rationale.fits else None
        return Outcome(first, fits=True, status=decision.verdict.value)
    return Outcome(None, status=decision.verdict.value)


def in_pod_order(snapshot: dict[str, Any], keep: str) -> dict[str, Any]:
    """The snapshot with every pod's UID but `keep`'s replaced by one that sorts as the pod was
    created (its resourceVersion here: each pod is created and marked running before the
    next): our planner breaks ties between pods of equal priority and start time by UID, and
    kube-scheduler 1.36 keeps them in its node's pod list, in the order they came."""
    copied: dict[str, Any] = json.loads(json.dumps(snapshot))
    for item in copied["items"]:
        meta = item["metadata"]
        if item["kind"] == "Pod" and meta["uid"] != keep:
            meta["uid"] = f"00000000-0000-0000-0000-{int(meta['resourceVersion']):012d}"
    return copied


def classify(
    upstream: Outcome, ours: Outcome, decision: Decision, snapshot: dict[str, Any]
) -> tuple[str, str]:
    """`agree`, `tie` (explained) or the kind of disagreement, with what explains it. A
    disagreement that goes away when the planner breaks ties between equally important pods
    as upstream does (`in_pod_order`) is a tie too: which of them upstream reprieves is not
    specified by its criteria (1.36's MoreImportantPod has no last tie-break)."""
    verdict, explanation = compare(upstream, ours, decision)
    if verdict in ("agree", "tie") or ours != _ours(decision):
        return verdict, explanation  # (the second: an outcome that is not the planner's)
    reordered = plan(
        ClusterSnapshot.from_list(in_pod_order(snapshot, decision.preemptor.uid)),
        decision.preemptor.key,
    )
    again, _ = compare(upstream, _ours(reordered), reordered)
    if again in ("agree", "tie"):
        return "tie", (
            f"{explanation}; it depends on the order of pods upstream's MoreImportantPod cannot "
            "tell apart (same priority and start time): with them in the order of the node's "
            "pod list, as kube-scheduler 1.36 keeps them, the planner decides as upstream"
        )
    return verdict, explanation


def compare(upstream: Outcome, ours: Outcome, decision: Decision) -> tuple[str, str]:
    """`agree`, `tie` (on the node: `pickOneNodeForPreemption` tied to the end) or the kind
    of disagreement."""
    if upstream.fits or ours.fits:
        if upstream.fits and ours.fits:
            return "agree", "fits without preemption (on any node that fits)"
        return "outcome", f"upstream {upstream.to_json()}, ours {ours.to_json()}"
    if upstream.node is None and ours.node is None:
        return "agree", f"no preemption ({ours.status})"
    if upstream.node is None or ours.node is None:
        return "outcome", f"upstream {upstream.to_json()}, ours {ours.to_json()}"
    if upstream.node == ours.node:
        if upstream.victims == ours.victims:
            return "agree", "same node, same victims"
        return "victims", (
            f"on {ours.node}: upstream took {sorted(upstream.victims)}, ours {sorted(ours.victims)}"
        )
    evaluated = {e.node: e for e in decision.rationale.evaluated if e.candidate}
    theirs = evaluated.get(upstream.node)
    if theirs is None:
        return "node", f"upstream chose {upstream.node}, which our dry run did not keep"
    if frozenset(theirs.victims) != upstream.victims:
        return "node", (
            f"upstream chose {upstream.node} taking {sorted(upstream.victims)}; our dry run "
            f"there takes {sorted(theirs.victims)}"
        )
    steps = decision.rationale.selection
    tied_until_the_end = bool(steps) and steps[-1].criterion == "nodeName"
    still_tied = steps[-2].kept if tied_until_the_end and len(steps) >= 2 else ()
    if upstream.node in still_tied:
        return "tie", (
            f"{upstream.node} and {ours.node} tie on every criterion of pickOneNodeForPreemption "
            f"(with the same victims on {upstream.node}); upstream's pick among them follows its "
            "random offset and map order, ours the node name"
        )
    return "node", f"upstream chose {upstream.node}, ours {ours.node}: {decision.message}"


# -- the run --------------------------------------------------------------------------------------


@contextmanager
def oracle_control_plane(workdir: Path) -> Iterator[ControlPlane]:
    binaries = find_binaries()
    if isinstance(binaries, str):
        raise SystemExit(binaries)
    plane = ControlPlane(workdir, binaries, feature_gates=ORACLE_FEATURE_GATES)
    plane.start()
    try:
        yield plane
    finally:
        plane.remove()


def run_cases(plane: ControlPlane, cases: int, seed: int, first: int = 0) -> Iterator[Result]:
    oracle = Oracle(plane)
    for index in range(first, first + cases):
        yield oracle.run(generate(index, seed))


def save(result: Result, out: Path) -> Path:
    """The case's snapshot (for `preemptctl plan --snapshot ... --pod ...`) and both
    outcomes, under `out`."""
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"case-{result.case.seed}-{result.case.index}"
    stem.with_suffix(".snapshot.json").write_text(json.dumps(result.snapshot, indent=1))
    stem.with_suffix(".outcome.json").write_text(
        json.dumps(
            {
                "preemptor": f"{NAMESPACE}/{result.case.preemptor['metadata']['name']}",
                "features": result.case.features,
                "verdict": result.verdict,
                "explanation": result.explanation,
                "upstream": result.upstream.to_json(),
                "ours": result.ours.to_json(),
                "decision": result.decision,
            },
            indent=1,
        )
    )
    return stem


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--first", type=int, default=0, help="the first case's index (to run one case again)"
    )
    parser.add_argument("--out", type=Path, default=None, help="where disagreements are saved")
    parser.add_argument("--keep-all", action="store_true", help="save every case, not only ties")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.gettempdir()) / f"preemptctl-oracle-{args.seed}"
    verdicts: Counter[str] = Counter()
    features: Counter[tuple[str, str]] = Counter()
    began = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="oracle-plane-") as work,
        oracle_control_plane(Path(work)) as plane,
    ):
        for result in run_cases(plane, args.cases, args.seed, args.first):
            verdicts[result.verdict] += 1
            for feature in result.case.features or ["plain"]:
                features[(feature, result.verdict)] += 1
            shown = f"case {result.case.index:4d}  {result.verdict:8s} {result.explanation}"
            if result.verdict != "agree" or args.keep_all:
                shown += f"  [{save(result, out)}.*.json]"
            print(shown, flush=True)
    agreed = verdicts["agree"] + verdicts["tie"]
    print(
        f"\n{args.cases} cases (seed {args.seed}) in {time.monotonic() - began:.0f}s: "
        f"{verdicts['agree']} agree, {verdicts['tie']} ties (both right), "
        f"{args.cases - agreed} disagreements "
        + ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items()) if k not in ("agree", "tie"))
    )
    for feature in sorted({f for f, _ in features}):
        counts = {v: n for (f, v), n in features.items() if f == feature}
        print(f"  {feature:24s} " + ", ".join(f"{v} {n}" for v, n in sorted(counts.items())))
    return 0 if agreed == args.cases else 1


if __name__ == "__main__":
    sys.exit(main())

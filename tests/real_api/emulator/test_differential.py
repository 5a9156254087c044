"""The emulator kept honest: the same requests to the emulator and to a real kube-apiserver
(1.36), and what the product reads of the answers compared.

Each test runs one scenario on both servers, with the same names, and compares projections:
status codes, the fields of objects the product reads (the gateway's, and the planner's
decoded `Pod`), `Status` bodies (reason, code, message with UIDs and versions blanked,
details), watch event types. A difference is either a bug of the emulator (fixed there, and
the comparison then holds) or a simplification it makes on purpose, named here in
`SIMPLIFICATIONS` with both answers exactly as they are: if the emulator is changed to
behave like the real server, that test fails and the simplification is to be removed.

What was compared, and how it came out, is printed at the end of the run (the terminal
summary of tests/real_api/conftest.py) and in `REPORT`.

Scenarios (reads and failures):
- a pod read back; a missing pod (404); a pod created twice (409 AlreadyExists);
- a pod created in a namespace that does not exist (named: the emulator creates it);
- an API group version the server does not serve (named: the emulator serves v1beta1);
- a write RBAC denies (403), the emulator's `deny` fault standing for RBAC;
- the planner's decoding of a pod created from one manifest (named: no admission plugins).

Scenarios (the gateway's writes):
- nomination: set from the resourceVersion read, refused from a stale one (409), cleared;
- the DisruptionTarget condition by server-side apply: added and owned by `preemptctl` on
  pods/status; applied again unchanged (no new resourceVersion); removed by applying none
  (named: the phase no manager owns, which the real server drops then);
  deleted by a strategic merge patch; an apply naming another UID (422, metadata.uid);
- delete with a UID precondition: an unbound pod goes at once, a bound one terminates, a
  second delete of it is answered 200; another UID (409); a missing pod (404);
- eviction: a running, Ready pod with a disruption left (201, the budget spent), without one
  (429 with the budget's cause), a pending pod without one (201: pending pods skip budgets), a
  running pod not Ready under a healthy budget without one (201: it counts for nothing),
  another UID (the budget is weighed first: 429 without a disruption left; with one, 409 and
  the disruption spent);
- an Event through events.k8s.io: created, read back through core/v1, created twice (409).

Scenarios (lists and watches):
- a list in pages of two (continue, remainingItemCount, order);
- a continue token after etcd's compaction (410 Expired);
- a watch of a bound pod labelled, deleted, then deleted with grace period 0 (event types);
- a watch from a compacted resourceVersion (an ERROR event, 410 Expired);
- a watch of a quiet namespace while another changes (a BOOKMARK past the change);
- a watch of a quiet namespace while nothing changes (named: the emulator bookmarks anyway).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from typing import Any

import pytest

from preemptctl.emulator import Emulator
from preemptctl.preemption.decode import decode_pod
from tests.support.control_plane import ControlPlane
from tests.support.emulator import running_emulator
from tests.support.http_api import APPLY_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, HttpApi

CONTROL_PLANE = {"scheduler": False, "watch_cache_off": ("persistentvolumeclaims",)}
NS = "diff"

REPORT: list[tuple[str, str]] = []
"""(what was compared, how it came out: "same", "named: <why>" or "DIFFERS"), in order."""


@dataclass(frozen=True)
class Simplification:
    """A difference the emulator makes on purpose: why, and both answers as they are."""

    why: str
    emulator: Any
    real: Any


@dataclass
class Side:
    """One server, as the scenarios drive it."""

    name: str
    api: HttpApi
    compact: Callable[[], object]  # etcd compaction, or the emulator's
    denied: Callable[[], HttpApi]  # a client whose next DELETE of a pod RBAC refuses


# -- the two servers -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    """No reaper: as on the control plane, no kubelet ends a terminating pod."""
    with running_emulator(bookmark_interval=0.5, reap_interval=None) as running:
        yield running


@pytest.fixture(scope="module")
def sides(emulator: Emulator, control_plane: ControlPlane) -> list[Side]:
    emulated = HttpApi(emulator.base_url, token="emulator-token")

    def deny_on_emulator() -> HttpApi:
        emulator.faults.deny("delete", "pods", user="nobody", times=1)
        return emulated

    real = control_plane.api("admin")
    control_plane.namespace(NS)
    emulated.create("/api/v1/namespaces", {"metadata": {"name": NS}})
    return [
        Side("emulator", emulated, emulator.store.compact, deny_on_emulator),
        Side("real", real, control_plane.compact_etcd, lambda: control_plane.api("nobody")),
    ]


def both(sides: list[Side], scenario: Callable[[Side], Any]) -> tuple[Any, Any]:
    """The scenario's observations on the emulator, then on the real server."""
    emulated, real = (scenario(side) for side in sides)
    return emulated, real


def compare(what: str, emulated: Any, real: Any, named: Simplification | None = None) -> None:
    """Assert the emulator answers as the real server does, or as a named simplification
    says it differs; record either in `REPORT`."""
    if named is None:
        if emulated != real:
            REPORT.append((what, "DIFFERS"))
        assert emulated == real, (
            f"{what}: the emulator differs from kube-apiserver\n"
            f"  emulator: {emulated}\n  real:     {real}"
        )
        REPORT.append((what, "same"))
        return
    assert (emulated, real) == (named.emulator, named.real), (
        f"{what}: the named simplification ({named.why}) no longer describes the difference; "
        f"fix it or remove it\n  emulator: {emulated}\n  real:     {real}"
    )
    REPORT.append((what, f"named: {named.why}"))


# -- projections: what the product reads ---------------------------------------------------------

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_VERSION = re.compile(r"\((\d+)\)")


def blank(text: str) -> str:
    """A message with its UIDs and resourceVersions blanked: they differ between servers."""
    return _VERSION.sub("(<rv>)", _UUID.sub("<uid>", text))


def failure(code: int, body: Any) -> dict[str, Any]:
    """A failure as the gateway reads it (`kube.classify.api_status`), and its details; the
    causes as a set (the real server repeats some)."""
    body = body if isinstance(body, dict) else {}
    details = dict(body.get("details") or {})
    causes = details.pop("causes", None)
    shown: dict[str, Any] = {
        "code": code,
        "kind": body.get("kind"),
        "status": body.get("status"),
        "reason": body.get("reason"),
        "message": blank(str(body.get("message", ""))),
        "details": details,
    }
    if causes is not None:
        shown["causes"] = sorted({blank(str(c.get("message"))) for c in causes})
        shown["cause reasons"] = sorted({str(c.get("reason")) for c in causes})
    return shown


def answer_of(side: Side, method: str, path: str, body: Any = None, **options: Any) -> Any:
    """A 2xx answer's code; a failure's projection otherwise."""
    answer = side.api.call(method, path, body, **options)
    if 200 <= answer.code < 300:
        return answer.code
    return failure(answer.code, answer.body)


def pod_path(name: str, subresource: str = "") -> str:
    path = f"/api/v1/namespaces/{NS}/pods/{name}"
    return f"{path}/{subresource}" if subresource else path


def pod_manifest(
    name: str, *, node: str | None = None, labels: dict[str, str] | None = None
) -> Any:
    spec: dict[str, Any] = {
        "schedulerName": "preemptctl-test-unserved",
        "terminationGracePeriodSeconds": 30,
        "containers": [
            {"name": "main", "image": "pause", "resources": {"requests": {"cpu": "100m"}}}
        ],
    }
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def make_pod(side: Side, name: str, **options: Any) -> dict[str, Any]:
    created: dict[str, Any] = side.api.create(
        f"/api/v1/namespaces/{NS}/pods", pod_manifest(name, **options)
    )
    return created


def running(side: Side, name: str, *, ready: bool = True) -> None:
    """Reported Running (and Ready, unless not), as a kubelet reports it."""
    status: dict[str, Any] = {"phase": "Running"}
    if ready:
        status["conditions"] = [{"type": "Ready", "status": "True"}]
    side.api.patch(pod_path(name, "status"), {"status": status}, MERGE_PATCH).ok()


def read_pod(side: Side, name: str) -> dict[str, Any]:
    found: dict[str, Any] = side.api.get(pod_path(name)).ok()
    return found


def gateway_view(pod: dict[str, Any]) -> dict[str, Any]:
    """The fields the gateway reads of a pod (`kube.pods.PodLookup`), and the conditions and
    status field managers its writes leave."""
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    return {
        "uid set": bool(meta.get("uid")),
        "resourceVersion set": bool(meta.get("resourceVersion")),
        "terminating": bool(meta.get("deletionTimestamp")),
        "deletionGracePeriodSeconds": meta.get("deletionGracePeriodSeconds"),
        "nodeName": spec.get("nodeName"),
        "schedulerName": spec.get("schedulerName"),
        "nominatedNodeName": status.get("nominatedNodeName"),
        "phase": status.get("phase"),
        "conditions": sorted(
            (c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
            for c in status.get("conditions") or []
        ),
        "status managers": sorted(
            (m.get("manager"), m.get("operation"), m.get("subresource"))
            for m in meta.get("managedFields") or []
            if m.get("manager") == "preemptctl"
        ),
    }


def decoded(pod: dict[str, Any]) -> dict[str, Any]:
    """The planner's `Pod`, but for what differs by nature (UID, version, times)."""
    found = decode_pod(pod)
    return {
        item.name: getattr(found, item.name)
        for item in fields(found)
        if item.name not in ("uid", "resource_version", "start_time")
    }


def types(events: list[dict[str, Any]]) -> list[str]:
    return [str(event.get("type")) for event in events]


# -- reads and failures ---------------------------------------------------------------------------


def test_a_pod_reads_back(sides: list[Side]) -> None:
    def scenario(side: Side) -> Any:
        make_pod(side, "read-back", node="node-a")
        return gateway_view(read_pod(side, "read-back"))

    compare("GET a pod: the fields the gateway reads", *both(sides, scenario))


def test_a_missing_pod_is_404(sides: list[Side]) -> None:
    compare(
        "GET a missing pod: 404 Status",
        *both(sides, lambda side: answer_of(side, "GET", pod_path("never-made"))),
    )


def test_a_pod_created_twice_is_409(sides: list[Side]) -> None:
    def scenario(side: Side) -> Any:
        make_pod(side, "twice")
        return answer_of(side, "POST", f"/api/v1/namespaces/{NS}/pods", pod_manifest("twice"))

    compare("POST a pod twice: 409 AlreadyExists", *both(sides, scenario))


def test_a_pod_in_a_missing_namespace(sides: list[Side]) -> None:
    def scenario(side: Side) -> Any:
        return answer_of(side, "POST", "/api/v1/namespaces/nowhere/pods", pod_manifest("lost"))

    compare(
        "POST a pod into a namespace that does not exist",
        *both(sides, scenario),
        named=Simplification(
            "the emulator has no NamespaceLifecycle admission: it stores objects in any "
            "namespace (scenarios and events need none created first)",
            emulator=201,
            real={
                "code": 404,
                "kind": "Status",
                "status": "Failure",
                "reason": "NotFound",
                "message": 'namespaces "nowhere" not found',
                "details": {"name": "nowhere", "kind": "namespaces"},
            },
        ),
    )


def test_an_api_version_not_served(sides: list[Side]) -> None:
    def scenario(side: Side) -> Any:
        return [
            side.api.get("/apis/scheduling.k8s.io/v1beta1").code,
            side.api.get("/apis/scheduling.k8s.io/v1alpha2").code,
        ]

    compare(
        "discovery of PodGroup API versions (v1beta1, v1alpha2)",
        *both(sides, scenario),
        named=Simplification(
            "the emulator serves 1.37's scheduling.k8s.io/v1beta1 PodGroups, the version the "
            "product reads; kube-apiserver 1.36 serves v1alpha2 only (Emulator(pod_groups="
            "False) is a cluster without them)",
            emulator=[200, 404],
            real=[404, 200],
        ),
    )


def test_a_write_rbac_denies_is_403(sides: list[Side]) -> None:
    def scenario(side: Side) -> Any:
        make_pod(side, "guarded-by-rbac")
        answer = side.denied().call("DELETE", pod_path("guarded-by-rbac"))
        return failure(answer.code, answer.body)

    compare("DELETE a pod RBAC denies: 403 Forbidden", *both(sides, scenario))


def test_the_planner_decodes_a_created_pod(sides: list[Side]) -> None:
    def scenario(side: Side) -> Any:
        return decoded(make_pod(side, "decoded", node="node-a"))

    emulated, real = both(sides, scenario)
    added_tolerations = real["tolerations"]
    compare(
        "the planner's decoding of a pod created from one manifest",
        {k: v for k, v in emulated.items() if k != "tolerations"},
        {k: v for k, v in real.items() if k != "tolerations"},
    )
    compare(
        "the tolerations a created pod has",
        emulated["tolerations"],
        real["tolerations"],
        named=Simplification(
            "the emulator runs no admission plugins: DefaultTolerationSeconds adds the "
            "not-ready/unreachable NoExecute tolerations (and Priority sets spec.priority from "
            "a PriorityClass, which the emulator's scenarios give directly)",
            emulator=(),
            real=added_tolerations,
        ),
    )
    assert sorted(t.key for t in added_tolerations) == [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ]


# -- nomination -----------------------------------------------------------------------------------


def test_nomination(sides: list[Side]) -> None:
    def scenario(side: Side) -> Any:
        version = make_pod(side, "nominee")["metadata"]["resourceVersion"]
        seen = {}
        for step, patch in [
            (
                "set",
                {"metadata": {"resourceVersion": version}, "status": {"nominatedNodeName": "n"}},
            ),
            (
                "stale",
                {"metadata": {"resourceVersion": version}, "status": {"nominatedNodeName": "m"}},
            ),
            ("cleared", {"status": {"nominatedNodeName": None}}),
        ]:
            answer = side.api.patch(pod_path("nominee", "status"), patch, MERGE_PATCH)
            seen[step] = (
                gateway_view(answer.body)["nominatedNodeName"]
                if answer.code == 200
                else failure(answer.code, answer.body)
            )
        return seen

    emulated, real = both(sides, scenario)
    for step in ("set", "stale", "cleared"):
        compare(f"nomination by merge patch on pods/status: {step}", emulated[step], real[step])


# -- the DisruptionTarget condition ---------------------------------------------------------------


def condition_apply(pod: dict[str, Any], conditions: list[dict[str, Any]]) -> dict[str, Any]:
    meta = pod["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": meta["name"], "namespace": NS, "uid": meta["uid"]},
        "status": {"conditions": conditions},
    }


DISRUPTION = {
    "type": "DisruptionTarget",
    "status": "True",
    "reason": "PreemptionByScheduler",
    "message": "default-scheduler: preempting to accommodate a higher priority pod",
    "lastTransitionTime": "2026-01-01T00:00:00Z",
}


def apply_status(side: Side, pod: dict[str, Any], conditions: list[dict[str, Any]]) -> Any:
    return side.api.patch(
        pod_path(pod["metadata"]["name"], "status"),
        condition_apply(pod, conditions),
        APPLY_PATCH,
        fieldManager="preemptctl",
        force="true",
    )


def test_the_disruption_target_condition(sides: list[Side]) -> None:
    def scenario(side: Side) -> Any:
        pod = make_pod(side, "marked", node="node-a")
        seen: dict[str, Any] = {}
        added = apply_status(side, pod, [DISRUPTION]).ok()
        seen["added"] = gateway_view(added)
        again = apply_status(side, pod, [DISRUPTION]).ok()
        seen["applied again: new resourceVersion"] = (
            again["metadata"]["resourceVersion"] != added["metadata"]["resourceVersion"]
        )
        seen["removed by applying none"] = gateway_view(apply_status(side, pod, []).ok())
        seen["phase after applying none"] = seen["removed by applying none"].pop("phase")
        apply_status(side, pod, [DISRUPTION]).ok()
        deleted = side.api.patch(
            pod_path("marked", "status"),
            {"status": {"conditions": [{"type": "DisruptionTarget", "$patch": "delete"}]}},
            STRATEGIC_MERGE_PATCH,
        ).ok()
        seen["deleted by strategic merge patch"] = gateway_view(deleted)["conditions"]
        return seen

    emulated, real = both(sides, scenario)
    phase = "phase after applying none"
    for step in [step for step in emulated if step != phase]:
        compare(f"DisruptionTarget by server-side apply: {step}", emulated[step], real[step])
    compare(
        f"DisruptionTarget by server-side apply: the {phase} of a pod no kubelet runs",
        emulated[phase],
        real[phase],
        named=Simplification(
            "kube-apiserver drops a status field no manager owns (the phase the registry "
            "defaulted at creation) when an applier applies its status anew without its own "
            "fields; the emulator does not track Update managers and keeps it. On a node the "
            "kubelet owns a victim's phase, which then stays (checked by hand)",
            emulator="Pending",
            real=None,
        ),
    )


def test_an_apply_naming_another_uid(sides: list[Side]) -> None:
    def scenario(side: Side) -> Any:
        pod = make_pod(side, "impostor")
        pod["metadata"]["uid"] = "00000000-0000-0000-0000-000000000000"
        answer = apply_status(side, pod, [DISRUPTION])
        return failure(answer.code, answer.body)

    compare("server-side apply naming another UID", *both(sides, scenario))


# -- delete ---------------------------------------------------------------------------------------


def delete_options(uid: str, grace: int | None = None) -> dict[str, Any]:
    options: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "preconditions": {"uid": uid},
    }
    if grace is not None:
        options["gracePeriodSeconds"] = grace
    return options


def test_delete_with_a_uid_precondition(sides: list[Side]) -> None:
    def scenario(side: Side) -> Any:
        seen: dict[str, Any] = {}
        unbound = make_pod(side, "unbound")["metadata"]["uid"]
        answer = side.api.delete(pod_path("unbound"), delete_options(unbound))
        seen["unbound: answer"] = (answer.code, answer.body.get("kind"))
        seen["unbound: then"] = side.api.get(pod_path("unbound")).code
        bound = make_pod(side, "bound", node="node-a")["metadata"]["uid"]
        answer = side.api.delete(pod_path("bound"), delete_options(bound))
        seen["bound: answer"] = (answer.code, gateway_view(answer.body))
        seen["bound: then"] = gateway_view(read_pod(side, "bound"))
        again = side.api.delete(pod_path("bound"), delete_options(bound))
        seen["bound: deleted again"] = (again.code, gateway_view(again.body)["terminating"])
        seen["another UID"] = answer_of(
            side,
            "DELETE",
            pod_path("bound"),
            delete_options("00000000-0000-0000-0000-0000000000aa"),
        )
        seen["missing"] = answer_of(side, "DELETE", pod_path("unbound"), delete_options(unbound))
        return seen

    emulated, real = both(sides, scenario)
    for step in emulated:
        compare(f"DELETE a pod with its UID as precondition: {step}", emulated[step], real[step])


# -- eviction -------------------------------------------------------------------------------------


def budget(side: Side, name: str, allowed: int) -> None:
    path = f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets"
    created = side.api.create(
        path,
        {
            "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": name}}, "minAvailable": 1},
        },
    )
    side.api.patch(
        f"{path}/{name}/status",
        {
            "status": {
                "observedGeneration": created["metadata"].get("generation", 1),
                "disruptionsAllowed": allowed,
                "currentHealthy": 1 + allowed,
                "desiredHealthy": 1,
                "expectedPods": 1 + allowed,
            }
        },
        MERGE_PATCH,
    ).ok()


def evict(side: Side, name: str, uid: str | None = None) -> Any:
    body: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": NS},
    }
    if uid:
        body["deleteOptions"] = {"preconditions": {"uid": uid}}
    answer = side.api.call("POST", pod_path(name, "eviction"), body)
    if answer.code == 201:
        return (201, answer.body)
    return (failure(answer.code, answer.body), answer.headers.get("Retry-After"))


def test_eviction(sides: list[Side]) -> None:
    def scenario(side: Side) -> Any:
        seen: dict[str, Any] = {}
        budget(side, "spendable", 1)
        budget(side, "exhausted", 0)
        make_pod(side, "evictable", node="node-a", labels={"app": "spendable"})
        running(side, "evictable")
        seen["allowed"] = evict(side, "evictable")
        spent = side.api.get(f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/spendable")
        status = spent.ok()["status"]
        seen["allowed: the budget"] = (
            status["disruptionsAllowed"],
            sorted(status.get("disruptedPods") or {}),
        )
        seen["allowed: the pod"] = gateway_view(read_pod(side, "evictable"))["terminating"]
        make_pod(side, "protected", node="node-a", labels={"app": "exhausted"})
        running(side, "protected")
        seen["budget exhausted"] = evict(side, "protected")
        make_pod(side, "not-started", node="node-a", labels={"app": "exhausted"})
        seen["budget exhausted, pod pending"] = evict(side, "not-started")
        make_pod(side, "not-ready", node="node-a", labels={"app": "exhausted"})
        running(side, "not-ready", ready=False)
        seen["budget exhausted but healthy, pod running but not Ready"] = evict(side, "not-ready")
        seen["another UID, budget exhausted"] = evict(
            side, "protected", "00000000-0000-0000-0000-0000000000bb"
        )
        budget(side, "refilled", 1)
        make_pod(side, "replaced-meanwhile", node="node-a", labels={"app": "refilled"})
        running(side, "replaced-meanwhile")
        seen["another UID, a disruption left"] = evict(
            side, "replaced-meanwhile", "00000000-0000-0000-0000-0000000000cc"
        )
        left = side.api.get(f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/refilled")
        seen["another UID, a disruption left: the budget after"] = left.ok()["status"][
            "disruptionsAllowed"
        ]
        return seen

    emulated, real = both(sides, scenario)
    for step in emulated:
        compare(f"eviction (policy/v1): {step}", emulated[step], real[step])


# -- events ---------------------------------------------------------------------------------------


def test_an_event(sides: list[Side]) -> None:
    def scenario(side: Side) -> Any:
        victim = make_pod(side, "evented")["metadata"]
        event = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": "evented.preempted", "namespace": NS},
            "eventTime": "2026-01-01T00:00:00.123456Z",
            "reportingController": "preemptctl",
            "reportingInstance": "worker-1",
            "action": "Preempting",
            "reason": "Preempted",
            "type": "Normal",
            "note": "Preempted by pod u on node n",
            "regarding": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": NS,
                "name": victim["name"],
                "uid": victim["uid"],
            },
        }
        path = f"/apis/events.k8s.io/v1/namespaces/{NS}/events"
        seen: dict[str, Any] = {"created": answer_of(side, "POST", path, event)}
        seen["created twice"] = answer_of(side, "POST", path, event)
        core = side.api.get(f"/api/v1/namespaces/{NS}/events/evented.preempted").ok()
        seen["read through core/v1"] = {
            "involvedObject": {k: v for k, v in core["involvedObject"].items() if k != "uid"},
            "reason": core.get("reason"),
            "message": core.get("message"),
            "type": core.get("type"),
            "action": core.get("action"),
            "reportingComponent": core.get("reportingComponent"),
            "reportingInstance": core.get("reportingInstance"),
        }
        return seen

    emulated, real = both(sides, scenario)
    for step in emulated:
        compare(f"Event (events.k8s.io/v1): {step}", emulated[step], real[step])


# -- lists ----------------------------------------------------------------------------------------


def claim(side: Side, name: str) -> None:
    side.api.create(
        f"/api/v1/namespaces/{NS}/persistentvolumeclaims",
        {
            "metadata": {"name": name},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )


def test_a_list_in_pages(sides: list[Side]) -> None:
    def scenario(side: Side) -> Any:
        for index in range(5):
            claim(side, f"paged-{index}")
        pages = []
        token = ""
        while True:
            query = {"limit": "2", **({"continue": token} if token else {})}
            body = side.api.get(f"/api/v1/namespaces/{NS}/persistentvolumeclaims", **query).ok()
            meta = body["metadata"]
            pages.append(
                (
                    [item["metadata"]["name"] for item in body["items"]],
                    bool(meta.get("resourceVersion")),
                    bool(meta.get("continue")),
                    meta.get("remainingItemCount"),
                )
            )
            token = meta.get("continue") or ""
            if not token:
                return pages

    compare(
        "LIST in pages of 2 (names, version, continue, remainingItemCount)", *both(sides, scenario)
    )


def test_a_continue_token_after_compaction(sides: list[Side]) -> None:
    def scenario(side: Side) -> Any:
        for index in range(3):
            claim(side, f"expiring-{index}")
        path = f"/api/v1/namespaces/{NS}/persistentvolumeclaims"
        token = side.api.get(path, limit="1").ok()["metadata"]["continue"]
        claim(side, "moves-on-1")
        claim(side, "moves-on-2")
        side.compact()
        answer = side.api.get(path, limit="1", **{"continue": token})
        refused = failure(answer.code, answer.body)
        refused["a continue token to go on inconsistently"] = bool(
            (answer.body.get("metadata") or {}).get("continue")
        )
        return refused

    emulated, real = both(sides, scenario)
    compare(
        "LIST with a continue token compacted away: code and reason",
        {k: emulated[k] for k in ("code", "reason", "status")},
        {k: real[k] for k in ("code", "reason", "status")},
    )
    compare(
        "LIST with a continue token compacted away: message",
        emulated["message"],
        real["message"],
    )
    compare(
        "LIST with a continue token compacted away: an inconsistent continuation offered",
        emulated["a continue token to go on inconsistently"],
        real["a continue token to go on inconsistently"],
        named=Simplification(
            "the emulator offers no inconsistent continuation (the product relists on 410)",
            emulator=False,
            real=True,
        ),
    )


# -- watches --------------------------------------------------------------------------------------


def test_a_watch_of_a_pod_deleted(sides: list[Side]) -> None:
    def scenario(side: Side) -> Any:
        version = side.api.get(f"/api/v1/namespaces/{NS}/pods").ok()["metadata"]["resourceVersion"]
        uid = make_pod(side, "watched", node="node-a")["metadata"]["uid"]
        side.api.patch(pod_path("watched"), {"metadata": {"labels": {"tier": "web"}}}).ok()
        side.api.delete(pod_path("watched"), delete_options(uid)).ok()
        side.api.delete(pod_path("watched"), delete_options(uid, grace=0)).ok()
        watched = side.api.watch(
            f"/api/v1/namespaces/{NS}/pods",
            {"resourceVersion": version, "fieldSelector": "metadata.name=watched"},
            until=lambda event: event["type"] == "DELETED",
            timeout=10,
        )
        return types(watched.events)

    compare(
        "WATCH a bound pod: created, labelled, deleted, deleted with grace period 0",
        *both(sides, scenario),
    )


def test_a_watch_from_a_compacted_version(sides: list[Side]) -> None:
    def scenario(side: Side) -> Any:
        path = f"/api/v1/namespaces/{NS}/persistentvolumeclaims"
        version = side.api.get(path).ok()["metadata"]["resourceVersion"]
        claim(side, "after-1")
        claim(side, "after-2")
        side.compact()
        watched = side.api.watch(path, {"resourceVersion": version}, timeout=5, count=1)
        [event] = watched.events
        status = event["object"]
        return {
            "answer": (watched.code, event["type"]),
            "status": failure(int(status.get("code") or 0), status),
        }

    emulated, real = both(sides, scenario)
    compare(
        "WATCH from a compacted version: HTTP code and event type",
        emulated["answer"],
        real["answer"],
    )
    compare(
        "WATCH from a compacted version: the ERROR's Status (code, reason, details)",
        {k: v for k, v in emulated["status"].items() if k != "message"},
        {k: v for k, v in real["status"].items() if k != "message"},
    )
    compare(
        "WATCH from a compacted version: the Status's message",
        re.sub(r"\d+", "<n>", emulated["status"]["message"]),
        real["status"]["message"],
        named=Simplification(
            "the emulator words it as kube-apiserver's watch cache does; etcd (what answers "
            "for a resource served without the cache, as here) words it otherwise; the "
            "product reads only the code, 410",
            emulator="too old resource version: <n> (<rv>)",
            real="The resourceVersion for the provided watch is too old.",
        ),
    )


def test_a_bookmark_after_a_change_not_seen(sides: list[Side]) -> None:
    def scenario(side: Side) -> Any:
        version = side.api.get(f"/api/v1/namespaces/{NS}/pods").ok()["metadata"]["resourceVersion"]
        unseen: list[dict[str, Any]] = []
        # made once the watch is open; not on it: its field selector hides it
        later = threading.Timer(1.0, lambda: unseen.append(make_pod(side, "elsewhere")))
        later.start()
        try:
            watched = side.api.watch(
                f"/api/v1/namespaces/{NS}/pods",
                {
                    "resourceVersion": version,
                    "allowWatchBookmarks": "true",
                    "timeoutSeconds": "4",
                    "fieldSelector": "metadata.name=nothing-by-this-name",
                },
                # until a bookmark past the change (one sent before it, but read after it
                # was made, is not the answer: the watch reads on)
                until=lambda event: (
                    event["type"] == "BOOKMARK"
                    and bool(unseen)
                    and int(event["object"]["metadata"]["resourceVersion"])
                    >= int(unseen[0]["metadata"]["resourceVersion"])
                ),
                timeout=8,
            )
        finally:
            later.join()
        marks = [e for e in watched.events if e["type"] == "BOOKMARK"]
        return {
            "last event": types(watched.events)[-1:],
            "last bookmark at or past the unseen change": bool(marks)
            and int(marks[-1]["object"]["metadata"]["resourceVersion"])
            >= int(unseen[0]["metadata"]["resourceVersion"]),
        }

    compare(
        "WATCH with bookmarks, a change the watch does not show: a BOOKMARK past it",
        *both(sides, scenario),
    )


def test_a_bookmark_while_nothing_changes(sides: list[Side]) -> None:
    def scenario(side: Side) -> Any:
        path = f"/api/v1/namespaces/{NS}/pods"
        version = side.api.get(path).ok()["metadata"]["resourceVersion"]
        watched = side.api.watch(
            path,
            {"resourceVersion": version, "allowWatchBookmarks": "true", "timeoutSeconds": "3"},
            timeout=5,
            until=lambda event: event["type"] == "BOOKMARK",
        )
        return types(watched.events)

    compare(
        "WATCH with bookmarks while nothing changes",
        *both(sides, scenario),
        named=Simplification(
            "the emulator sends a bookmark every bookmark_interval even when nothing moved; "
            "kube-apiserver's watch cache sends one only once it is past the last event sent "
            "(the product only moves its resume point on either)",
            emulator=["BOOKMARK"],
            real=[],
        ),
    )

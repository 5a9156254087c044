"""Every write of the kube/ gateway, against a real kube-apiserver (v1.36, etcd behind it).

The emulator's tests say the same things about our belief of the API; these say them about
the API itself. Pods are made in a namespace of the module's own; unbound ones are left to a
scheduler name no profile serves (they stay Pending), bound ones are bound at creation.

Scenarios:
- a pod is read by name and UID: found, gone, replaced by a same-named pod;
- nomination: set (the API server keeps it), kept when another node's, overwritten when
  asked, cleared; a write from a stale resourceVersion is a retryable conflict;
- the DisruptionTarget condition, by server-side apply on pods/status: added with upstream's
  reason and message, owned by the field manager `preemptctl` (managedFields, subresource
  status); a second call sends nothing; removed again;
- the apply of a victim replaced since it was read is refused by the API server with a 422
  (`metadata.uid` is immutable, not the 409 of a delete precondition, and not naming the new
  pod); the gateway reads it as the victim replaced, by the pod it then finds;
- a victim is deleted with its UID as precondition: an unbound pod goes at once, a bound one
  is left terminating for its grace period (the kubelet's part), and a second delete finds
  it terminating, not an error; once gone, already gone;
- a victim replaced by a same-named pod is not deleted: the 409 names the new pod's UID;
- eviction (policy/v1) of a running pod: allowed by a budget with a disruption left,
  spending it; refused by an exhausted budget with a 429 the gateway retries; a replaced
  victim is not evicted;
- the Preempted Event (events.k8s.io/v1) is recorded once however often it is retried, and
  reads back through core/v1 as `kubectl describe` shows it;
- a user without RBAC gets 403, classified as a permission the controller lacks, naming the
  verb and resource.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from preemptctl.kube.classify import (
    Call,
    api_status,
    is_uid_mismatch_refusal,
    is_uid_precondition_conflict,
)
from preemptctl.kube.client import APPLY_PATCH, KubeClient, connect
from preemptctl.kube.conditions import (
    DISRUPTION_TARGET,
    FIELD_MANAGER,
    PREEMPTION_BY_SCHEDULER,
    add_disruption_target,
    preemption_message,
    remove_disruption_target,
)
from preemptctl.kube.deletion import delete_victim
from preemptctl.kube.events import preempted_note, record_preempted
from preemptctl.kube.nomination import clear_nomination, nominate
from preemptctl.kube.pods import Presence, get_pod
from preemptctl.kube.results import ErrorKind, PermissionDenied, Retryable, WriteEffect
from preemptctl.preemption.decision import PodRef
from tests.support.control_plane import (
    ControlPlane,
    create_pdb,
    create_pod,
    mark_running,
    pod_manifest,
    wait_for,
)
from tests.support.http_api import HttpApi

CONTROL_PLANE = {"scheduler": False}


@pytest.fixture(scope="module")
def namespace(control_plane: ControlPlane) -> str:
    return control_plane.namespace("gateway")


@pytest.fixture(scope="module")
def node(control_plane: ControlPlane) -> str:
    return str(control_plane.ready_node("gateway-node")["metadata"]["name"])


@pytest.fixture(scope="module")
def admin(control_plane: ControlPlane) -> HttpApi:
    return control_plane.api("admin")


def make_pod(admin: HttpApi, namespace: str, name: str, **options: Any) -> PodRef:
    created = create_pod(admin, namespace, pod_manifest(name, **options))
    return PodRef(namespace, name, created["metadata"]["uid"])


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def read(admin: HttpApi, ref: PodRef) -> dict[str, Any]:
    found: dict[str, Any] = admin.get(f"/api/v1/namespaces/{ref.namespace}/pods/{ref.name}").ok()
    return found


def gone(admin: HttpApi, ref: PodRef) -> bool:
    return admin.get(f"/api/v1/namespaces/{ref.namespace}/pods/{ref.name}").code == 404


def replace(admin: HttpApi, ref: PodRef, **options: Any) -> PodRef:
    """Delete the pod at once and create another under its name (a StatefulSet's way)."""
    admin.delete(
        f"/api/v1/namespaces/{ref.namespace}/pods/{ref.name}", {"gracePeriodSeconds": 0}
    ).ok()
    wait_for(lambda: gone(admin, ref), 30, f"{ref.key} to go")
    return make_pod(admin, ref.namespace, ref.name, **options)


# -- reading --------------------------------------------------------------------------------------


def test_pod_is_found_by_name_and_uid(kube: KubeClient, admin: HttpApi, namespace: str) -> None:
    ref = make_pod(admin, namespace, unique("read"))
    lookup = get_pod(kube, ref)
    assert (lookup.presence, lookup.uid) == (Presence.FOUND, ref.uid)
    assert lookup.scheduler_name == "preemptctl-test-unserved"


def test_missing_pod_is_gone(kube: KubeClient, namespace: str) -> None:
    assert get_pod(kube, PodRef(namespace, "never-made", "u")).presence is Presence.GONE


def test_pod_recreated_under_its_name_is_replaced(
    kube: KubeClient, admin: HttpApi, namespace: str
) -> None:
    original = make_pod(admin, namespace, unique("web"))
    replacement = replace(admin, original)
    lookup = get_pod(kube, original)
    assert (lookup.presence, lookup.uid) == (Presence.REPLACED, replacement.uid)


# -- nomination -----------------------------------------------------------------------------------


def test_nomination_is_set_on_the_server(kube: KubeClient, admin: HttpApi, namespace: str) -> None:
    ref = make_pod(admin, namespace, unique("urgent"))
    assert nominate(kube, ref, "node-a", overwrite=False).effect is WriteEffect.DONE
    assert read(admin, ref)["status"]["nominatedNodeName"] == "node-a"
    assert nominate(kube, ref, "node-a", overwrite=False).effect is WriteEffect.UNCHANGED


def test_another_nomination_is_kept_unless_overwritten(
    kube: KubeClient, admin: HttpApi, namespace: str
) -> None:
    ref = make_pod(admin, namespace, unique("urgent"))
    nominate(kube, ref, "node-a", overwrite=False)
    kept = nominate(kube, ref, "node-b", overwrite=False)
    assert (kept.effect, kept.previous) == (WriteEffect.KEPT_OTHER_NOMINATION, "node-a")
    # Overwriting is one patch carrying the UID, no read: what the decision saw is named.
    overwritten = nominate(kube, ref, "node-b", overwrite=True, seen="node-a")
    assert (overwritten.effect, overwritten.previous) == (WriteEffect.DONE, "node-a")
    assert read(admin, ref)["status"]["nominatedNodeName"] == "node-b"


def test_nomination_is_cleared_only_for_its_node(
    kube: KubeClient, admin: HttpApi, namespace: str
) -> None:
    ref = make_pod(admin, namespace, unique("lower"))
    nominate(kube, ref, "node-a", overwrite=False)
    assert clear_nomination(kube, ref, "node-b").effect is WriteEffect.KEPT_OTHER_NOMINATION
    assert clear_nomination(kube, ref, "node-a").effect is WriteEffect.DONE
    assert "nominatedNodeName" not in read(admin, ref)["status"]


def test_nomination_from_a_stale_version_is_a_retryable_conflict(
    kube: KubeClient, admin: HttpApi, namespace: str
) -> None:
    """The patch carries the resourceVersion the gateway read; a change in between makes the
    API server refuse it (the gateway's read is raced here by patching before its write)."""
    ref = make_pod(admin, namespace, unique("raced"))
    stale = read(admin, ref)["metadata"]["resourceVersion"]
    admin.patch(
        f"/api/v1/namespaces/{namespace}/pods/{ref.name}", {"metadata": {"labels": {"a": "b"}}}
    ).ok()
    with pytest.raises(ApiException) as raised:
        kube.send(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{ref.name}/status",
            body={"metadata": {"resourceVersion": stale}, "status": {"nominatedNodeName": "n"}},
            content_type="application/merge-patch+json",
        )
    status = api_status(raised.value)
    assert (status.code, status.reason) == (409, "Conflict")
    assert not is_uid_precondition_conflict(status)
    assert "the object has been modified" in status.message


# -- the DisruptionTarget condition ---------------------------------------------------------------


def test_disruption_target_is_applied_as_upstream_writes_it(
    kube: KubeClient, admin: HttpApi, namespace: str, node: str
) -> None:
    ref = make_pod(admin, namespace, unique("victim"), node=node)
    assert add_disruption_target(kube, ref, "default-scheduler").effect is WriteEffect.DONE
    pod = read(admin, ref)
    [condition] = [c for c in pod["status"]["conditions"] if c["type"] == DISRUPTION_TARGET]
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "True",
        PREEMPTION_BY_SCHEDULER,
        preemption_message("default-scheduler"),
    )
    owners = [
        (entry["manager"], entry["operation"], entry.get("subresource"))
        for entry in pod["metadata"]["managedFields"]
        if "f:status" in entry.get("fieldsV1", {})
    ]
    assert (FIELD_MANAGER, "Apply", "status") in owners


def test_disruption_target_applied_again_stays_one_condition(
    kube: KubeClient, admin: HttpApi, namespace: str, node: str
) -> None:
    """The mark is one apply, no read first (issue 29): applied again (a step run again),
    the condition stays one, under the one field manager."""
    ref = make_pod(admin, namespace, unique("victim"), node=node)
    add_disruption_target(kube, ref, "default-scheduler")
    assert add_disruption_target(kube, ref, "default-scheduler").effect is WriteEffect.DONE
    conditions = read(admin, ref)["status"].get("conditions") or []
    assert [c["type"] for c in conditions].count(DISRUPTION_TARGET) == 1


def test_a_victim_already_terminating_is_told_by_the_marks_answer(
    kube: KubeClient, admin: HttpApi, namespace: str, node: str
) -> None:
    """The apply's answer is the pod as it is: one deleted already (terminating, as a real
    API server keeps it until its kubelet finishes it) needs no DELETE."""
    ref = make_pod(admin, namespace, unique("victim"), node=node)
    assert delete_victim(kube, ref).effect is WriteEffect.DONE
    marked = add_disruption_target(kube, ref, "default-scheduler")
    assert marked.effect is WriteEffect.TERMINATING


def test_disruption_target_is_removed(
    kube: KubeClient, admin: HttpApi, namespace: str, node: str
) -> None:
    ref = make_pod(admin, namespace, unique("spared"), node=node)
    add_disruption_target(kube, ref, "default-scheduler")
    assert remove_disruption_target(kube, ref).effect is WriteEffect.DONE
    conditions = read(admin, ref)["status"].get("conditions") or []
    assert DISRUPTION_TARGET not in [c["type"] for c in conditions]


@dataclass(frozen=True)
class ReplacingBeforeApply(KubeClient):
    """The product's client, which runs `replace` once, just before the first PATCH of a
    pod's status leaves: a StatefulSet recreating its pod between the gateway's read of the
    victim and its apply."""

    replace: Callable[[], None] = lambda: None
    fired: list[bool] = field(default_factory=list)

    def request(self, method: str, path: str, call: Call, **options: Any) -> Any:
        if method == "PATCH" and path.endswith("/status") and not self.fired:
            self.fired.append(True)
            self.replace()
        return super().request(method, path, call, **options)


def test_apply_to_a_victim_replaced_after_its_read_leaves_the_new_pod_alone(
    kube: KubeClient, admin: HttpApi, namespace: str
) -> None:
    """The API server refuses the apply with a 422 (metadata.uid is immutable) that does not
    name the new pod: the gateway reads it, and reports the victim replaced, by that pod."""
    original = make_pod(admin, namespace, unique("web"))
    replacements: list[PodRef] = []
    racing = ReplacingBeforeApply(
        kube.api,
        kube.connect_timeout,
        kube.read_timeout,
        replace=lambda: replacements.append(replace(admin, original)),
    )
    outcome = add_disruption_target(racing, original, "default-scheduler")
    [replacement] = replacements
    assert (outcome.effect, outcome.replaced_by_uid) == (WriteEffect.REPLACED, replacement.uid)
    conditions = read(admin, replacement).get("status", {}).get("conditions") or []
    assert DISRUPTION_TARGET not in [c["type"] for c in conditions]


def test_the_refusal_of_an_apply_for_another_uid_is_a_422(
    kube: KubeClient, admin: HttpApi, namespace: str
) -> None:
    """What the API server answers, as the gateway's classification reads it: not the 409 of
    a refused delete precondition, and no word of the UID the pod has now."""
    original = make_pod(admin, namespace, unique("web"))
    replacement = replace(admin, original)
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": original.name, "namespace": namespace, "uid": original.uid},
        "status": {"conditions": [{"type": DISRUPTION_TARGET, "status": "True"}]},
    }
    with pytest.raises(ApiException) as raised:
        kube.send(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{original.name}/status",
            body=body,
            query={"fieldManager": FIELD_MANAGER, "force": "true"},
            content_type=APPLY_PATCH,
        )
    status = api_status(raised.value)
    assert (status.code, status.reason) == (422, "Invalid")
    assert is_uid_mismatch_refusal(status)
    assert not is_uid_precondition_conflict(status)
    assert replacement.uid not in status.message


# -- delete ---------------------------------------------------------------------------------------


def test_unbound_victim_is_deleted_at_once(
    kube: KubeClient, admin: HttpApi, namespace: str
) -> None:
    ref = make_pod(admin, namespace, unique("pending"))
    assert delete_victim(kube, ref).effect is WriteEffect.DONE
    assert gone(admin, ref)
    assert delete_victim(kube, ref).effect is WriteEffect.ALREADY_GONE


def test_bound_victim_is_left_terminating_for_its_grace_period(
    kube: KubeClient, admin: HttpApi, namespace: str, node: str
) -> None:
    ref = make_pod(admin, namespace, unique("running"), node=node, grace_period=30)
    assert delete_victim(kube, ref).effect is WriteEffect.DONE
    meta = read(admin, ref)["metadata"]
    assert (meta["uid"], meta["deletionGracePeriodSeconds"]) == (ref.uid, 30)
    assert meta["deletionTimestamp"]
    again = delete_victim(kube, ref)
    assert again.effect is WriteEffect.DONE  # the API server answers 200 again: not an error
    delete_victim(kube, ref, grace_period_seconds=0)
    assert gone(admin, ref)


def test_replaced_victim_is_not_deleted(kube: KubeClient, admin: HttpApi, namespace: str) -> None:
    original = make_pod(admin, namespace, unique("web"))
    replacement = replace(admin, original)
    result = delete_victim(kube, original)
    assert (result.effect, result.replaced_by_uid) == (WriteEffect.REPLACED, replacement.uid)
    assert read(admin, replacement)["metadata"]["uid"] == replacement.uid


# -- eviction -------------------------------------------------------------------------------------


def test_eviction_spends_the_budget(
    kube: KubeClient, admin: HttpApi, namespace: str, node: str
) -> None:
    app = unique("spend")
    ref = make_pod(admin, namespace, unique("evicted"), node=node, labels={"app": app})
    mark_running(admin, namespace, ref.name)
    create_pdb(admin, namespace, app, {"app": app}, disruptions_allowed=1)
    assert delete_victim(kube, ref, use_eviction=True).effect is WriteEffect.DONE
    assert read(admin, ref)["metadata"]["deletionTimestamp"]
    budget = admin.get(f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/{app}").ok()
    assert budget["status"]["disruptionsAllowed"] == 0
    assert ref.name in budget["status"]["disruptedPods"]


def test_eviction_refused_by_an_exhausted_budget_is_retried(
    kube: KubeClient, admin: HttpApi, namespace: str, node: str
) -> None:
    app = unique("guarded")
    ref = make_pod(admin, namespace, unique("kept"), node=node, labels={"app": app})
    mark_running(admin, namespace, ref.name)
    create_pdb(admin, namespace, app, {"app": app}, disruptions_allowed=0)
    with pytest.raises(Retryable) as raised:
        delete_victim(kube, ref, use_eviction=True)
    assert (raised.value.kind, raised.value.status) == (ErrorKind.THROTTLED, 429)
    assert "disruption budget" in raised.value.message
    assert "deletionTimestamp" not in read(admin, ref)["metadata"]


def test_eviction_of_a_replaced_victim_is_not_sent_to_the_new_pod(
    kube: KubeClient, admin: HttpApi, namespace: str
) -> None:
    original = make_pod(admin, namespace, unique("web"))
    replacement = replace(admin, original)
    result = delete_victim(kube, original, use_eviction=True)
    assert (result.effect, result.replaced_by_uid) == (WriteEffect.REPLACED, replacement.uid)
    assert "deletionTimestamp" not in read(admin, replacement)["metadata"]


# -- events ---------------------------------------------------------------------------------------


def test_preempted_event_is_recorded_once(kube: KubeClient, admin: HttpApi, namespace: str) -> None:
    victim = make_pod(admin, namespace, unique("evented"))
    preemptor = make_pod(admin, namespace, unique("preemptor"))
    first = record_preempted(kube, victim, preemptor, "node-a", "test-worker")
    again = record_preempted(kube, victim, preemptor, "node-a", "test-worker")
    assert (first.effect, again.effect) == (WriteEffect.DONE, WriteEffect.UNCHANGED)
    events = admin.get(
        f"/api/v1/namespaces/{namespace}/events",
        fieldSelector=f"involvedObject.name={victim.name},reason=Preempted",
    ).ok()["items"]
    assert [
        (e["message"], e["involvedObject"]["uid"], e["related"]["uid"], e["reportingComponent"])
        for e in events
    ] == [(preempted_note(preemptor, "node-a"), victim.uid, preemptor.uid, "preemptctl")]


# -- permissions ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nobody(control_plane: ControlPlane) -> Iterator[KubeClient]:
    client = connect(str(control_plane.kubeconfig("nobody")))
    yield client
    client.api.close()


def test_a_write_rbac_denies_names_what_to_grant(
    nobody: KubeClient, admin: HttpApi, namespace: str
) -> None:
    ref = make_pod(admin, namespace, unique("protected"))
    with pytest.raises(PermissionDenied) as raised:
        delete_victim(nobody, ref)
    denied = raised.value
    assert (denied.status, denied.verb, denied.resource) == (403, "delete", "pods")
    assert 'User "nobody" cannot delete resource "pods"' in denied.message

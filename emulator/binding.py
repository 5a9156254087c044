"""The `pods/binding` subresource: how a scheduler assigns a pending pod to a node.

Mirrors `BindingREST.Create` and `setPodNodeAndMetadata` of
`pkg/registry/core/pod/storage/storage.go`: the Binding's name must match the URL, its target
must be a Node with a name, and in one guarded update the pod gets `spec.nodeName`, the
Binding's annotations, and the `PodScheduled=True` condition; nothing else changes (a
nomination stays where it is). A pod already assigned, being deleted or held by scheduling
gates is refused with a 409 Conflict on `pods/binding`, worded as `assignPod` wraps the
update's error; a missing pod is a 404 and a UID precondition that does not hold is a 409 on
`pods`. The simulated scheduler binds through `bind` too, so both paths share these rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from preemptctl.emulator import status
from preemptctl.emulator.resources import PODS
from preemptctl.emulator.status import ApiError
from preemptctl.emulator.store import Obj, Store, now_rfc3339

_SUCCESS: dict[str, Any] = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Success",
    "code": 201,
}


def bind(store: Store, namespace: str, name: str, binding: Mapping[str, Any]) -> Obj:
    """Bind the pod `namespace/name` as the Binding says; returns the `Status` the API server
    answers with (201). Raises `ApiError` for every refusal."""
    meta = binding.get("metadata") or {}
    target = binding.get("target") or {}
    if meta.get("name") != name:
        raise status.bad_request("name in URL does not match name in Binding object")
    if meta.get("namespace") not in (None, "", namespace):
        raise status.bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    if target.get("kind") not in (None, "", "Node"):
        raise status.invalid(
            "Binding",
            name,
            "target.kind",
            f'Invalid value: "{target["kind"]}": must be empty or "Node"',
        )
    node = target.get("name")
    if not node:
        raise status.invalid("Binding", name, "target.name", "Required value")
    annotations = dict(meta.get("annotations") or {})

    def assign(pod: Obj) -> Obj:
        _check_bindable(pod, meta.get("uid"))
        pod.setdefault("spec", {})["nodeName"] = node
        if annotations:
            pod["metadata"]["annotations"] = {
                **(pod["metadata"].get("annotations") or {}),
                **annotations,
            }
        pod_status = pod.setdefault("status", {})
        pod_status["conditions"] = _with_scheduled(pod_status.get("conditions") or [])
        return pod

    store.guaranteed_update(PODS, namespace, name, assign)
    return dict(_SUCCESS)


def _check_bindable(pod: Obj, uid: str | None) -> None:
    meta, spec = pod["metadata"], pod.get("spec") or {}
    name = meta["name"]
    if uid and uid != meta["uid"]:
        raise status.conflict(
            PODS,
            name,
            f"Precondition failed: UID in precondition: {uid}, UID in object meta: {meta['uid']}",
        )
    if meta.get("deletionTimestamp"):
        raise _binding_conflict(name, f"pod {name} is being deleted, cannot be assigned to a host")
    if spec.get("nodeName"):
        raise _binding_conflict(
            name, f'pod {name} is already assigned to node "{spec["nodeName"]}"'
        )
    if spec.get("schedulingGates"):
        raise _binding_conflict(name, f"pod {name} has non-empty .spec.schedulingGates")


def _binding_conflict(name: str, cause: str) -> ApiError:
    """`errors.NewConflict(api.Resource("pods/binding"), name, err)`, as `assignPod` wraps it."""
    return ApiError(
        409,
        status.status_body(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on pods/binding "{name}": {cause}',
            {"name": name, "kind": "pods/binding"},
        ),
    )


def _with_scheduled(conditions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`podutil.UpdatePodCondition` with `PodScheduled=True`: the condition is replaced whole
    (a failure's reason and message go), lastTransitionTime moves only when the status does."""
    scheduled: dict[str, Any] = {
        "type": "PodScheduled",
        "status": "True",
        "lastProbeTime": None,
        "lastTransitionTime": now_rfc3339(),
    }
    for index, existing in enumerate(conditions):
        if existing.get("type") == "PodScheduled":
            if existing.get("status") == "True" and existing.get("lastTransitionTime"):
                scheduled["lastTransitionTime"] = existing["lastTransitionTime"]
            return [*conditions[:index], scheduled, *conditions[index + 1 :]]
    return [*conditions, scheduled]

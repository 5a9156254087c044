"""What the simulated kube-scheduler writes when it preempts (upstream-preemption mode): upstream's
`Executor` (`pkg/scheduler/framework/preemption/executor.go`), on the store.

For each victim (`PreemptPod`): skip it when its graceful deletion has already started, else
mark it `DisruptionTarget` (reason `PreemptionByScheduler`, message `<scheduler>: preempting
to accommodate a higher priority <pod|podgroup>`), delete it gracefully with a UID
precondition, and record the core/v1 `Preempted` Event on it, related to the preemptor:
`Preempted by pod <uid> on node <node>` for a pod, `Preempted by podgroup <uid> on node
cluster` for a pod group (upstream preempts for a group over one domain, the whole cluster,
named "cluster"). Shadow mode's recorder reads these Events as it reads kube-scheduler's.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from preemptctl.emulator.patch import STRATEGIC_MERGE_PATCH
from preemptctl.emulator.resources import EVENTS, POD_GROUPS, PODS
from preemptctl.emulator.status import ApiError
from preemptctl.emulator.store import Obj, Store, now_rfc3339
from preemptctl.preemption.decision import PodRef
from preemptctl.preemption.objects import Pod

log = logging.getLogger(__name__)

POD_GROUP_DOMAIN = "cluster"  # the candidate name of a pod group preemption


@dataclass(frozen=True, slots=True)
class Preemptor:
    """`ExecutorPreemptor`: the pod or pod group a preemption is for, as its writes name it."""

    type: str  # "pod" or "podgroup", as upstream's `Type()`
    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str
    scheduler_name: str

    @classmethod
    def of_pod(cls, pod: Pod) -> Preemptor:
        return cls("pod", "v1", "Pod", pod.namespace, pod.name, pod.uid, pod.scheduler_name)

    @classmethod
    def of_pod_group(cls, key: str, uid: str, scheduler_name: str) -> Preemptor:
        namespace, _, name = key.partition("/")
        return cls(
            "podgroup",
            POD_GROUPS.api_version,
            POD_GROUPS.kind,
            namespace,
            name,
            uid,
            scheduler_name,
        )

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def reference(self) -> dict[str, str]:
        """The Event's `related` object."""
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
        }


class Executor:
    """Upstream's preemption writes, straight to the store (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def preempt_pod(self, victim: PodRef, preemptor: Preemptor, domain: str) -> int:
        """`PreemptPod`: mark, delete and record one victim; 1 when it was preempted now, 0
        when it is gone, replaced, already terminating, or its delete failed."""
        current = self._store.find(PODS, victim.namespace, victim.name)
        if current is None or current["metadata"].get("uid") != victim.uid:
            return 0
        if current["metadata"].get("deletionTimestamp"):
            return 0  # graceful deletion has already started: no second API call
        condition = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": (
                f"{preemptor.scheduler_name}: preempting to accommodate a higher priority "
                f"{preemptor.type}"
            ),
            "lastTransitionTime": now_rfc3339(),
        }
        self.patch_status(victim.namespace, victim.name, victim.uid, {"conditions": [condition]})
        try:
            self._store.delete(PODS, victim.namespace, victim.name, uid=victim.uid)
        except ApiError as error:
            log.warning("simulated scheduler could not preempt %s: %s", victim.key, error)
            return 0
        self._store.create(
            EVENTS,
            victim.namespace,
            preempted_event(
                victim.namespace,
                victim.name,
                victim.uid,
                preemptor,
                message=f"Preempted by {preemptor.type} {preemptor.uid} on node {domain}",
            ),
        )
        log.info(
            "simulated scheduler preempted %s on %s for %s %s",
            victim.key,
            domain,
            preemptor.type,
            preemptor.key,
        )
        return 1

    def patch_status(self, namespace: str, name: str, uid: str, status: dict[str, Any]) -> int:
        """A status patch on the pod with this uid; 0 when it is gone or replaced."""
        current = self._store.find(PODS, namespace, name)
        if current is None or current["metadata"].get("uid") != uid:
            return 0
        self._store.patch(
            PODS, namespace, name, STRATEGIC_MERGE_PATCH, {"status": status}, subresource="status"
        )
        return 1


def preempted_event(
    namespace: str, name: str, uid: str, preemptor: Preemptor, *, message: str
) -> Obj:
    """The core/v1 Event kube-scheduler's recorder leaves on a victim (as the core API
    shows an events.k8s.io/v1 Event: `note` as `message`, `regarding` as `involvedObject`,
    the preemptor as `related`)."""
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
        "related": preemptor.reference(),
        "reason": "Preempted",
        "action": "Preempting",
        "type": "Normal",
        "message": message,
        "eventTime": moment,
        "reportingComponent": "default-scheduler",
        "reportingInstance": "default-scheduler-simulated",
        "source": {},
        "count": 1,
    }

"""The DisruptionTarget condition on a victim.

Scenarios:
- the condition is added through the status subresource with upstream's type, status, reason
  and message, and the pod's other conditions are kept;
- the mark is one request, never a read first (issue 29): applied again, it is one more
  PATCH and the condition stays one;
- a condition from another scheduler is replaced by ours;
- a victim already gone is reported as such (the PATCH's 404);
- a victim replaced by a same-named pod is left alone, and the result names the replacement's
  UID (the API server refuses the apply: 422, metadata.uid is immutable, the new pod
  unnamed, as kube-apiserver answers; one read then names it);
- a victim already terminating is told by the apply's answer (terminating): it needs no
  DELETE;
- the condition is written with server-side apply (field manager preemptctl, force) and
  managedFields show preemptctl owning it on the status subresource;
- the applied object carries the victim's UID, and a conflict from the server with the pod
  still there is retryable;
- removing it: the condition goes, the pod's other conditions stay, and preemptctl no
  longer owns it; a DisruptionTarget set for another reason is left alone; one this manager
  does not own (set by a plain patch) is deleted by type.
"""

from __future__ import annotations

import pytest

from preemptctl.emulator import Emulator
from preemptctl.emulator.resources import PODS
from preemptctl.kube.client import KubeClient
from preemptctl.kube.conditions import add_disruption_target, remove_disruption_target
from preemptctl.kube.results import ErrorKind, Retryable, WriteEffect
from preemptctl.preemption.decision import PodRef
from tests.kube.conftest import ref_of
from tests.support.emulator import pod

UPSTREAM = {
    "type": "DisruptionTarget",
    "status": "True",
    "reason": "PreemptionByScheduler",
    "message": "default-scheduler: preempting to accommodate a higher priority pod",
}


@pytest.fixture
def victim(emulator: Emulator) -> PodRef:
    loaded = pod("victim", node_name="n1")
    loaded["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    emulator.load(loaded)
    return ref_of(emulator, "default/victim")


def _conditions(emulator: Emulator) -> list[dict[str, str]]:
    stored = emulator.pod("default/victim")
    assert stored is not None
    conditions: list[dict[str, str]] = stored["status"]["conditions"]
    return conditions


def test_condition_is_added_as_upstream_words_it(
    kube: KubeClient, emulator: Emulator, victim: PodRef
) -> None:
    outcome = add_disruption_target(kube, victim, "default-scheduler")
    assert outcome.effect is WriteEffect.DONE
    added = _conditions(emulator)[1]
    assert {key: added[key] for key in UPSTREAM} == UPSTREAM
    assert added["lastTransitionTime"]
    assert _conditions(emulator)[0]["type"] == "Ready"
    assert [r.resource for r in emulator.requests.matching("patch")] == ["pods/status"]


def test_marking_again_is_one_more_patch_and_no_read(
    kube: KubeClient, emulator: Emulator, victim: PodRef
) -> None:
    add_disruption_target(kube, victim, "default-scheduler")
    again = add_disruption_target(kube, victim, "default-scheduler")
    assert again.effect is WriteEffect.DONE
    assert len(emulator.requests.matching("patch")) == 2
    assert emulator.requests.matching("get") == []
    targets = [c for c in _conditions(emulator) if c["type"] == "DisruptionTarget"]
    assert len(targets) == 1


def test_condition_from_another_scheduler_is_replaced(
    kube: KubeClient, emulator: Emulator, victim: PodRef
) -> None:
    add_disruption_target(kube, victim, "other-scheduler")
    outcome = add_disruption_target(kube, victim, "default-scheduler")
    assert outcome.effect is WriteEffect.DONE
    targets = [c for c in _conditions(emulator) if c["type"] == "DisruptionTarget"]
    assert [c["message"] for c in targets] == [UPSTREAM["message"]]


def test_gone_victim_is_reported(kube: KubeClient, emulator: Emulator) -> None:
    outcome = add_disruption_target(kube, PodRef("default", "victim", "u1"), "default-scheduler")
    assert outcome.effect is WriteEffect.ALREADY_GONE
    assert emulator.requests.matching("get") == []


def test_replaced_victim_is_left_alone(kube: KubeClient, emulator: Emulator) -> None:
    emulator.load(pod("victim", uid="new-uid"))
    outcome = add_disruption_target(kube, PodRef("default", "victim", "old-uid"), "s")
    assert outcome.effect is WriteEffect.REPLACED
    assert outcome.replaced_by_uid == "new-uid"
    stored = emulator.pod("default/victim")
    assert stored is not None
    assert "conditions" not in stored["status"] or not any(
        c["type"] == "DisruptionTarget" for c in stored["status"]["conditions"]
    )


def test_terminating_victim_is_told_by_the_answer(kube: KubeClient, emulator: Emulator) -> None:
    emulator.load(pod("victim", node_name="n1", grace_period=600))
    emulator.store.delete(PODS, "default", "victim", grace_period=600)
    outcome = add_disruption_target(kube, ref_of(emulator, "default/victim"), "s")
    assert (outcome.effect, outcome.message) == (
        WriteEffect.TERMINATING,
        "victim is already terminating",
    )
    assert emulator.requests.matching("get") == []


def test_an_apply_refused_for_the_uid_names_the_replacement(
    kube: KubeClient, emulator: Emulator, victim: PodRef
) -> None:
    def replace_before_the_apply(verb: str, resource: str, namespace: str, name: str) -> None:
        if verb == "patch" and resource == "pods/status" and emulator.pod("default/victim"):
            emulator.finalize("default/victim")
            emulator.load(pod("victim", node_name="n1", uid="new-uid"))

    emulator.faults.on_arrival = replace_before_the_apply
    outcome = add_disruption_target(kube, victim, "default-scheduler")
    assert (outcome.effect, outcome.replaced_by_uid) == (WriteEffect.REPLACED, "new-uid")
    # no read before the apply: one after the refusal, which does not name the new pod
    assert len(emulator.requests.matching("get", "pods")) == 1


def test_conflict_with_the_pod_still_there_is_retryable(
    kube: KubeClient, emulator: Emulator, victim: PodRef
) -> None:
    emulator.faults.fail(
        "patch",
        "pods/status",
        409,
        times=1,
        message='Operation cannot be fulfilled on pods "victim": the object '
        "has been modified; please apply your changes to the latest version "
        "and try again",
    )
    with pytest.raises(Retryable) as raised:
        add_disruption_target(kube, victim, "default-scheduler")
    assert raised.value.kind is ErrorKind.CONFLICT
    sent = emulator.requests.matching("patch")[0].body
    assert sent["metadata"]["uid"] == victim.uid


def test_condition_is_applied_server_side_and_owned_by_preemptctl(
    kube: KubeClient, emulator: Emulator, victim: PodRef
) -> None:
    add_disruption_target(kube, victim, "default-scheduler")
    [request] = emulator.requests.matching("patch")
    assert request.content_type == "application/apply-patch+yaml"
    assert request.query == {"fieldManager": "preemptctl", "force": "true"}
    stored = emulator.pod("default/victim")
    assert stored is not None
    [entry] = stored["metadata"]["managedFields"]
    assert (entry["manager"], entry["operation"], entry["subresource"]) == (
        "preemptctl",
        "Apply",
        "status",
    )
    owned = entry["fieldsV1"]["f:status"]["f:conditions"]
    assert list(owned) == ['k:{"type":"DisruptionTarget"}']


def test_removal_drops_only_our_condition(
    kube: KubeClient, emulator: Emulator, victim: PodRef
) -> None:
    add_disruption_target(kube, victim, "default-scheduler")
    outcome = remove_disruption_target(kube, victim)
    assert outcome.effect is WriteEffect.DONE
    assert [c["type"] for c in _conditions(emulator)] == ["Ready"]
    stored = emulator.pod("default/victim")
    assert stored is not None
    assert stored["metadata"]["managedFields"] == []
    assert remove_disruption_target(kube, victim).effect is WriteEffect.UNCHANGED


def test_removal_leaves_a_disruption_target_set_for_another_reason(
    kube: KubeClient, emulator: Emulator
) -> None:
    loaded = pod("victim", node_name="n1")
    loaded["status"]["conditions"] = [
        {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"}
    ]
    emulator.load(loaded)
    outcome = remove_disruption_target(kube, ref_of(emulator, "default/victim"))
    assert outcome.effect is WriteEffect.UNCHANGED
    assert emulator.requests.matching("patch") == []


def test_removal_deletes_a_condition_this_manager_does_not_own(
    kube: KubeClient, emulator: Emulator
) -> None:
    loaded = pod("victim", node_name="n1")
    loaded["status"]["conditions"] = [{"type": "Ready", "status": "True"}, dict(UPSTREAM)]
    emulator.load(loaded)
    outcome = remove_disruption_target(kube, ref_of(emulator, "default/victim"))
    assert outcome.effect is WriteEffect.DONE
    assert [c["type"] for c in _conditions(emulator)] == ["Ready"]


def test_removal_on_a_gone_victim_is_reported(kube: KubeClient, emulator: Emulator) -> None:
    outcome = remove_disruption_target(kube, PodRef("default", "victim", "u1"))
    assert outcome.effect is WriteEffect.ALREADY_GONE

"""The DisruptionTarget condition on a victim.

Scenarios:
- the condition is added through the status subresource with upstream's type, status, reason
  and message, and the pod's other conditions are kept;
- an identical condition already there means no PATCH is sent (unchanged);
- a condition from another scheduler is replaced by ours;
- a victim already gone is reported as such, without a PATCH;
- a victim replaced by a same-named pod is left alone;
- the patch pins the resourceVersion it read, so a change in between is a retryable conflict.
"""

from __future__ import annotations

import pytest

from preemptctl.emulator import Emulator
from preemptctl.kube.client import KubeClient
from preemptctl.kube.conditions import add_disruption_target
from preemptctl.kube.outcomes import ErrorKind, PodRef, Retryable, Verdict
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
    assert outcome.verdict is Verdict.DONE
    added = _conditions(emulator)[1]
    assert {key: added[key] for key in UPSTREAM} == UPSTREAM
    assert added["lastTransitionTime"]
    assert _conditions(emulator)[0]["type"] == "Ready"
    assert [r.resource for r in emulator.requests.matching("patch")] == ["pods/status"]


def test_identical_condition_sends_no_patch(
    kube: KubeClient, emulator: Emulator, victim: PodRef
) -> None:
    add_disruption_target(kube, victim, "default-scheduler")
    again = add_disruption_target(kube, victim, "default-scheduler")
    assert again.verdict is Verdict.UNCHANGED
    assert len(emulator.requests.matching("patch")) == 1


def test_condition_from_another_scheduler_is_replaced(
    kube: KubeClient, emulator: Emulator, victim: PodRef
) -> None:
    add_disruption_target(kube, victim, "other-scheduler")
    outcome = add_disruption_target(kube, victim, "default-scheduler")
    assert outcome.verdict is Verdict.DONE
    targets = [c for c in _conditions(emulator) if c["type"] == "DisruptionTarget"]
    assert [c["message"] for c in targets] == [UPSTREAM["message"]]


def test_gone_victim_is_reported_without_patch(kube: KubeClient, emulator: Emulator) -> None:
    outcome = add_disruption_target(kube, PodRef("default", "victim", "u1"), "default-scheduler")
    assert outcome.verdict is Verdict.ALREADY_GONE
    assert emulator.requests.matching("patch") == []


def test_replaced_victim_is_left_alone(kube: KubeClient, emulator: Emulator) -> None:
    emulator.load(pod("victim", uid="new-uid"))
    outcome = add_disruption_target(kube, PodRef("default", "victim", "old-uid"), "s")
    assert outcome.verdict is Verdict.REPLACED
    assert emulator.requests.matching("patch") == []


def test_change_between_read_and_patch_is_a_retryable_conflict(
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
    assert sent["metadata"]["resourceVersion"]

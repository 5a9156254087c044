"""Deleting a victim.

Scenarios:
- the delete carries the victim's UID as a precondition and the requested grace period;
- a victim already gone (404) is success, reported as already gone;
- a victim replaced by a same-named pod (new UID) is not deleted, and that is success; the
  result names the replacement's UID as the API server's refusal names it, in either of
  its wordings (`rest.BeforeDelete`'s, or storage's precondition check), and names none
  when the answer does not;
- a retried delete of a victim that is terminating is done again, not an error;
- eviction mode goes through pods/eviction with the same UID precondition;
- an eviction the budget refuses is retryable (429), and the pod stays;
- an eviction of a replaced victim is success without deleting the new pod, and names it.
"""

from __future__ import annotations

import pytest

from preemptctl.emulator import Emulator
from preemptctl.kube.classify import ApiStatus, replacement_uid
from preemptctl.kube.client import KubeClient
from preemptctl.kube.deletion import delete_victim
from preemptctl.kube.results import ErrorKind, Retryable, WriteEffect
from preemptctl.preemption.decision import PodRef
from tests.kube.conftest import ref_of
from tests.support.emulator import as_list, pdb, pod


@pytest.fixture
def victim(emulator: Emulator) -> PodRef:
    emulator.load(pod("web-1", node_name="n1", labels={"app": "web"}, grace_period=600, ready=True))
    return ref_of(emulator, "default/web-1")


def test_delete_carries_uid_precondition_and_grace(
    kube: KubeClient, emulator: Emulator, victim: PodRef
) -> None:
    outcome = delete_victim(kube, victim, grace_period_seconds=5)
    assert outcome.effect is WriteEffect.DONE
    [sent] = emulator.requests.matching("delete", "pods")
    assert sent.body["preconditions"] == {"uid": victim.uid}
    assert sent.body["gracePeriodSeconds"] == 5


def test_gone_victim_is_already_gone(kube: KubeClient) -> None:
    outcome = delete_victim(kube, PodRef("default", "web-1", "u1"))
    assert outcome.effect is WriteEffect.ALREADY_GONE
    assert outcome.succeeded


def test_replaced_victim_is_not_deleted(
    kube: KubeClient, emulator: Emulator, victim: PodRef
) -> None:
    emulator.finalize(victim.key)  # the StatefulSet's pod went away and was recreated
    emulator.load(pod("web-1", node_name="n1", uid="replacement"))
    outcome = delete_victim(kube, victim)
    assert outcome.effect is WriteEffect.REPLACED
    assert outcome.succeeded
    assert outcome.replaced_by_uid == "replacement"
    stored = emulator.pod("default/web-1")
    assert stored is not None
    assert stored["metadata"]["uid"] == "replacement"
    assert "deletionTimestamp" not in stored["metadata"]


def test_retried_delete_of_terminating_victim_is_done(
    kube: KubeClient, emulator: Emulator, victim: PodRef
) -> None:
    delete_victim(kube, victim)
    assert delete_victim(kube, victim).effect is WriteEffect.DONE


def test_eviction_mode_uses_the_eviction_api(
    kube: KubeClient, emulator: Emulator, victim: PodRef
) -> None:
    outcome = delete_victim(kube, victim, use_eviction=True)
    assert outcome.effect is WriteEffect.DONE
    [sent] = emulator.requests.matching("create", "pods/eviction")
    assert sent.body["deleteOptions"]["preconditions"] == {"uid": victim.uid}
    assert emulator.requests.matching("delete") == []


def test_refused_eviction_is_retryable(
    kube: KubeClient, emulator: Emulator, victim: PodRef
) -> None:
    emulator.load(pdb("budget", match_labels={"app": "web"}, disruptions_allowed=0))
    with pytest.raises(Retryable) as raised:
        delete_victim(kube, victim, use_eviction=True)
    assert raised.value.kind is ErrorKind.THROTTLED
    assert "would violate the pod's disruption budget" in raised.value.message
    assert emulator.pod("default/web-1") is not None


def test_eviction_of_replaced_victim_is_success_without_deleting(
    kube: KubeClient, emulator: Emulator
) -> None:
    emulator.load(as_list(pod("web-1", uid="replacement")))
    outcome = delete_victim(kube, PodRef("default", "web-1", "original"), use_eviction=True)
    assert outcome.effect is WriteEffect.REPLACED
    assert outcome.replaced_by_uid == "replacement"
    assert emulator.pod("default/web-1") is not None


@pytest.mark.parametrize(
    ("message", "current"),
    [
        (
            'Operation cannot be fulfilled on Pod "web-1": the UID in the precondition (u-old) '
            "does not match the UID in record (u-new). The object might have been deleted and "
            "then recreated",
            "u-new",
        ),
        (
            'Operation cannot be fulfilled on pods "web-1": Precondition failed: UID in '
            "precondition: u-old, UID in object meta: u-new",
            "u-new",
        ),
        ("Precondition failed: UID in precondition: u-old, UID in object meta: ", None),
        ('Operation cannot be fulfilled on pods "web-1": the object has been modified', None),
    ],
    ids=["before-delete", "storage", "empty", "not-a-uid-conflict"],
)
def test_the_current_uid_is_read_from_the_refusal(message: str, current: str | None) -> None:
    assert replacement_uid(ApiStatus(409, "Conflict", message, None)) == current

"""nominatedNodeName on the preemptor and on lower-priority pods (KEP-5278).

Scenarios:
- a preemptor without a nomination is nominated through the status subresource;
- nominating to the node it is already nominated to sends no patch;
- a nomination to another node, set by another component, is kept unless the decision
  requires overwriting it, and the outcome names it either way;
- with overwrite, one patch and no read (issue 29): the other nomination is replaced, and
  the outcome names what the decision saw there;
- clearing removes a nomination to the decision's node;
- a nomination that has moved to another node since is not cleared;
- a pod without a nomination needs no clearing;
- a preemptor gone or replaced is reported: read first when keeping another's nomination;
  with overwrite, by the patch's own answer (404, or the UID it carries refused), and the
  pod now under the name is left as it was.
"""

from __future__ import annotations

from preemptctl.emulator import Emulator
from preemptctl.kube.client import KubeClient
from preemptctl.kube.nomination import clear_nomination, nominate
from preemptctl.kube.results import WriteEffect
from preemptctl.preemption.decision import PodRef
from tests.kube.conftest import ref_of
from tests.support.emulator import pod


def _nominated(emulator: Emulator, key: str) -> str | None:
    stored = emulator.pod(key)
    assert stored is not None
    value: str | None = stored["status"].get("nominatedNodeName")
    return value


def test_preemptor_is_nominated(kube: KubeClient, emulator: Emulator) -> None:
    emulator.load(pod("urgent", priority=1000))
    outcome = nominate(kube, ref_of(emulator, "default/urgent"), "n1", overwrite=False)
    assert outcome.effect is WriteEffect.DONE
    assert _nominated(emulator, "default/urgent") == "n1"
    assert [r.resource for r in emulator.requests.matching("patch")] == ["pods/status"]


def test_same_nomination_sends_no_patch(kube: KubeClient, emulator: Emulator) -> None:
    emulator.load(pod("urgent", nominated_node="n1"))
    outcome = nominate(kube, ref_of(emulator, "default/urgent"), "n1", overwrite=False)
    assert outcome.effect is WriteEffect.UNCHANGED
    assert emulator.requests.matching("patch") == []


def test_other_components_nomination_is_kept(kube: KubeClient, emulator: Emulator) -> None:
    emulator.load(pod("urgent", nominated_node="n9"))
    outcome = nominate(kube, ref_of(emulator, "default/urgent"), "n1", overwrite=False)
    assert (outcome.effect, outcome.previous) == (WriteEffect.KEPT_OTHER_NOMINATION, "n9")
    assert _nominated(emulator, "default/urgent") == "n9"


def test_overwrite_replaces_and_names_the_previous(kube: KubeClient, emulator: Emulator) -> None:
    emulator.load(pod("urgent", nominated_node="n9"))
    outcome = nominate(kube, ref_of(emulator, "default/urgent"), "n1", overwrite=True, seen="n9")
    assert (outcome.effect, outcome.previous) == (WriteEffect.DONE, "n9")
    assert outcome.message == "nominated to n1, overwriting the nomination to n9"
    assert _nominated(emulator, "default/urgent") == "n1"
    assert emulator.requests.matching("get") == []


def test_clearing_removes_nomination_to_the_node(kube: KubeClient, emulator: Emulator) -> None:
    emulator.load(pod("lower", nominated_node="n1"))
    outcome = clear_nomination(kube, ref_of(emulator, "default/lower"), "n1")
    assert outcome.effect is WriteEffect.DONE
    assert _nominated(emulator, "default/lower") is None


def test_nomination_moved_elsewhere_is_not_cleared(kube: KubeClient, emulator: Emulator) -> None:
    emulator.load(pod("lower", nominated_node="n2"))
    outcome = clear_nomination(kube, ref_of(emulator, "default/lower"), "n1")
    assert (outcome.effect, outcome.previous) == (WriteEffect.KEPT_OTHER_NOMINATION, "n2")
    assert _nominated(emulator, "default/lower") == "n2"


def test_pod_without_nomination_needs_no_clearing(kube: KubeClient, emulator: Emulator) -> None:
    emulator.load(pod("lower"))
    outcome = clear_nomination(kube, ref_of(emulator, "default/lower"), "n1")
    assert outcome.effect is WriteEffect.UNCHANGED
    assert emulator.requests.matching("patch") == []


def test_gone_or_replaced_preemptor_is_not_patched(kube: KubeClient, emulator: Emulator) -> None:
    gone = nominate(kube, PodRef("default", "urgent", "u1"), "n1", overwrite=False)
    emulator.load(pod("urgent", uid="u2"))
    replaced = nominate(kube, PodRef("default", "urgent", "u1"), "n1", overwrite=False)
    assert (gone.effect, replaced.effect) == (WriteEffect.ALREADY_GONE, WriteEffect.REPLACED)
    assert emulator.requests.matching("patch") == []


def test_overwriting_a_gone_or_replaced_preemptor_leaves_the_pod_there_alone(
    kube: KubeClient, emulator: Emulator
) -> None:
    gone = nominate(kube, PodRef("default", "urgent", "u1"), "n1", overwrite=True)
    emulator.load(pod("urgent", uid="u2"))
    replaced = nominate(kube, PodRef("default", "urgent", "u1"), "n1", overwrite=True)
    assert (gone.effect, replaced.effect) == (WriteEffect.ALREADY_GONE, WriteEffect.REPLACED)
    assert _nominated(emulator, "default/urgent") is None
    assert emulator.requests.matching("get") == []

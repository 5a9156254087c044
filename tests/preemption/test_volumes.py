"""The volume filters and what preemption does with them.

Scenarios (in our words, after upstream's volumerestrictions, volumezone, nodevolumelimits and
volumebinding tests, and default_preemption_test's ReadWriteOncePod cases):
- VolumeRestrictions: a ReadWriteOncePod claim used by another pod fails every node
  (Unschedulable); preemption evicts the lower-priority holder, on its node only; a holder
  of higher priority leaves no candidate; ReadWriteOnce claims are shared freely;
- VolumeBinding: a missing claim, a terminating claim, a claim bound to a missing volume and
  an unbound Immediate claim fail every node, unresolvably, before any other filter; a bound
  volume's nodeAffinity rejects other nodes unresolvably;
- an unbound WaitForFirstConsumer claim whose class restricts topology is refused
  (Unsupported); one whose class provisions anywhere is judged as usual;
- VolumeZone: a bound volume's zone rejects nodes of other zones unresolvably (also through
  the beta label), and a node without zone labels takes it;
- NodeVolumeLimits: a node whose CSINode limit is reached is Unschedulable; a volume already
  attached there counts once; preempting a pod frees its attachment only when no
  VolumeAttachment keeps it, so with one the node is no candidate; a driver without a limit
  never fails.
"""

from __future__ import annotations

from typing import Any

from preemptctl.preemption.decision import Verdict
from preemptctl.preemption.filters import Code, Status
from preemptctl.preemption.find_nodes_that_fit import filter_nodes
from preemptctl.preemption.volumes import (
    ERR_MAX_VOLUMES,
    ERR_MISSING_PV,
    ERR_NODE_CONFLICT,
    ERR_RWOP_CONFLICT,
    ERR_UNBOUND_IMMEDIATE,
    ERR_ZONE_CONFLICT,
)
from tests.preemption.builders import (
    attachment,
    claim,
    csinode,
    decide,
    node,
    pod,
    snapshot,
    storage_class,
    victim_names,
    volume,
    with_claims,
)

Json = dict[str, Any]
ZONE = "topology.kubernetes.io/zone"


def statuses(*items: Json, preemptor: str = "p") -> dict[str, Status]:
    cluster = snapshot(*items)
    incoming = cluster.pod_by_key(f"default/{preemptor}")
    assert incoming is not None
    return filter_nodes(cluster, incoming)


def zoned(name: str, zone: str, **kwargs: Any) -> Json:
    return node(name, labels={"kubernetes.io/hostname": name, ZONE: zone}, **kwargs)


# -- VolumeRestrictions -------------------------------------------------------------------------

RWOP = ("ReadWriteOncePod",)


def test_a_read_write_once_pod_claim_in_use_fails_every_node() -> None:
    got = statuses(
        node("n1"),
        node("n2"),
        claim("data", volume="pv-data", modes=RWOP),
        volume("pv-data"),
        with_claims(pod("holder", node="n1"), "data"),
        with_claims(pod("p"), "data"),
    )
    assert {status.reasons for status in got.values()} == {(ERR_RWOP_CONFLICT,)}
    assert {status.code for status in got.values()} == {Code.UNSCHEDULABLE}


def test_preemption_evicts_the_lower_priority_holder_on_its_node() -> None:
    decision = decide(
        node("n1"),
        node("n2"),
        claim("data", volume="pv-data", modes=RWOP),
        volume("pv-data"),
        with_claims(pod("holder", node="n1", priority=1), "data"),
        pod("bystander", node="n2", priority=1),
        with_claims(pod("p", priority=100), "data"),
        preemptor="p",
    )
    assert decision.verdict is Verdict.PREEMPT
    assert (decision.nominated_node, victim_names(decision)) == ("n1", ["holder"])


def test_a_higher_priority_holder_leaves_no_candidate() -> None:
    decision = decide(
        node("n1"),
        claim("data", volume="pv-data", modes=RWOP),
        volume("pv-data"),
        with_claims(pod("holder", node="n1", priority=500), "data"),
        pod("low", node="n1", priority=1),
        with_claims(pod("p", priority=100), "data"),
        preemptor="p",
    )
    assert decision.verdict is Verdict.UNSCHEDULABLE


def test_read_write_once_claims_are_shared() -> None:
    got = statuses(
        node("n1"),
        claim("data", volume="pv-data"),
        volume("pv-data"),
        with_claims(pod("other", node="n1"), "data"),
        with_claims(pod("p"), "data"),
    )
    assert got["n1"].ok


# -- VolumeBinding ------------------------------------------------------------------------------


def test_a_missing_claim_fails_every_node_before_any_other_filter() -> None:
    got = statuses(
        node("n1", cpu="1"), pod("full", node="n1", cpu="1"), with_claims(pod("p", cpu="1"), "gone")
    )
    assert got["n1"] == Status(Code.UNRESOLVABLE, ('persistentvolumeclaim "gone" not found',))


def test_a_terminating_claim_fails_every_node() -> None:
    got = statuses(node("n1"), claim("data", terminating=True), with_claims(pod("p"), "data"))
    assert got["n1"].reasons == ('persistentvolumeclaim "data" is being deleted',)


def test_a_claim_bound_to_a_missing_volume_fails_every_node() -> None:
    got = statuses(node("n1"), claim("data", volume="pv-x"), with_claims(pod("p"), "data"))
    assert got["n1"] == Status(Code.UNRESOLVABLE, (ERR_MISSING_PV,))


def test_an_unbound_immediate_claim_fails_every_node() -> None:
    got = statuses(
        node("n1"), storage_class(wait=False), claim("data"), with_claims(pod("p"), "data")
    )
    assert got["n1"] == Status(Code.UNRESOLVABLE, (ERR_UNBOUND_IMMEDIATE,))


def test_a_bound_volumes_node_affinity_rejects_other_nodes_unresolvably() -> None:
    got = statuses(
        node("n1"),
        node("n2"),
        claim("data", volume="pv-data"),
        volume("pv-data", hosts=("n1",)),
        with_claims(pod("p"), "data"),
    )
    assert got["n1"].ok
    assert got["n2"] == Status(Code.UNRESOLVABLE, (ERR_NODE_CONFLICT,))


def test_no_victim_is_taken_on_a_node_the_volume_cannot_reach() -> None:
    decision = decide(
        node("n1", cpu="1"),
        node("n2", cpu="1"),
        pod("low-1", node="n1", cpu="1", priority=1),
        pod("low-2", node="n2", cpu="1", priority=1, start=5),
        claim("data", volume="pv-data"),
        volume("pv-data", hosts=("n2",)),
        with_claims(pod("p", cpu="1", priority=100), "data"),
        preemptor="p",
    )
    assert (decision.nominated_node, victim_names(decision)) == ("n2", ["low-2"])


def test_an_unbound_wait_for_first_consumer_claim_restricting_topology_is_refused() -> None:
    decision = decide(
        node("n1"),
        storage_class(topologies=True),
        claim("data"),
        with_claims(pod("p"), "data"),
        preemptor="p",
    )
    assert decision.verdict is Verdict.UNSUPPORTED
    assert "WaitForFirstConsumer claim data" in decision.message


def test_an_unbound_wait_for_first_consumer_claim_provisioned_anywhere_is_judged() -> None:
    decision = decide(
        node("n1"), storage_class(), claim("data"), with_claims(pod("p"), "data"), preemptor="p"
    )
    assert decision.verdict is Verdict.FITS_WITHOUT_PREEMPTION


# -- VolumeZone ---------------------------------------------------------------------------------


def test_a_bound_volumes_zone_rejects_nodes_of_other_zones() -> None:
    got = statuses(
        zoned("a1", "a"),
        zoned("b1", "b"),
        node("bare", labels={}),
        claim("data", volume="pv-data"),
        volume("pv-data", zone="a"),
        with_claims(pod("p"), "data"),
    )
    assert got["a1"].ok
    assert got["b1"] == Status(Code.UNRESOLVABLE, (ERR_ZONE_CONFLICT,))
    assert got["bare"].ok


def test_a_beta_zone_label_is_read_against_the_nodes_ga_label() -> None:
    got = statuses(
        zoned("a1", "a"),
        zoned("b1", "b"),
        claim("data", volume="pv-data"),
        volume("pv-data", beta_zone="b"),
        with_claims(pod("p"), "data"),
    )
    assert (got["a1"].ok, got["b1"].ok) == (False, True)


# -- NodeVolumeLimits ---------------------------------------------------------------------------

CSI = "csi.example.com"


def test_a_node_at_its_csi_limit_is_unschedulable() -> None:
    got = statuses(
        node("n1"),
        csinode("n1", 1),
        claim("old", volume="pv-old"),
        volume("pv-old", driver=CSI),
        claim("new", volume="pv-new"),
        volume("pv-new", driver=CSI),
        with_claims(pod("user", node="n1"), "old"),
        with_claims(pod("p"), "new"),
    )
    assert got["n1"] == Status(Code.UNSCHEDULABLE, (ERR_MAX_VOLUMES,))


def test_a_volume_already_attached_counts_once() -> None:
    got = statuses(
        node("n1"),
        csinode("n1", 1),
        claim("shared", volume="pv-shared"),
        volume("pv-shared", driver=CSI),
        with_claims(pod("user", node="n1"), "shared"),
        with_claims(pod("p"), "shared"),
    )
    assert got["n1"].ok


def test_a_driver_without_a_limit_never_fails() -> None:
    got = statuses(
        node("n1"),
        csinode("n1", None),
        claim("old", volume="pv-old"),
        volume("pv-old", driver=CSI),
        claim("new", volume="pv-new"),
        volume("pv-new", driver=CSI),
        with_claims(pod("user", node="n1"), "old"),
        with_claims(pod("p"), "new"),
    )
    assert got["n1"].ok


LIMITED = (
    node("n1"),
    csinode("n1", 1),
    claim("old", volume="pv-old"),
    volume("pv-old", driver=CSI),
    claim("new", volume="pv-new"),
    volume("pv-new", driver=CSI),
    with_claims(pod("user", node="n1", priority=1), "old"),
    with_claims(pod("p", priority=100), "new"),
)


def test_preempting_the_volumes_user_frees_the_attachment() -> None:
    decision = decide(*LIMITED, preemptor="p")
    assert (decision.verdict, victim_names(decision)) == (Verdict.PREEMPT, ["user"])


def test_an_attachment_that_outlives_the_victim_leaves_no_candidate() -> None:
    decision = decide(*LIMITED, attachment("va-old", "n1", "pv-old"), preemptor="p")
    assert decision.verdict is Verdict.UNSCHEDULABLE
    assert ERR_MAX_VOLUMES in decision.message

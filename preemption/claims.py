"""Claims: in-flight preemptions, counted by every later decision as if already done.

kube-scheduler never lets two preemptions claim the same victim or the same freed capacity
because it decides in one loop and nominates at once. Preemptions here run concurrently, so
decisions are serialized and each one respects the claims of the preemptions still in flight:
while a decision runs, each claimed preemption's victims are hidden (as if deleted) and its
preemptor is placed on its node as a nomination nobody outranks (as if bound). The next
decision therefore sees exactly what it would see had the earlier preemptions finished:
a serial run's view, whatever the interleaving.

Deliberate difference from upstream: a higher-priority preemptor cannot take capacity an
in-flight preemption has freed (upstream may, and then re-preempts the lower one). Claims are
first come, first served, so no pod is ever evicted for a preemption that is then undone.

A decision's claims are the ledger's open claims (see `ledger.claims`): a claim lasts from
its decision until its run's terminal event, however long the run waits. One whose effect the
view already shows (the preemptor bound and every victim gone) is not applied again. A
preemptor missing from the view does NOT end its claim: the view may lag, and dropping the
claim would let a second decision take the same victims; the claim's run ends it once the API
server says the preemptor is gone.

A group preemption claims the same way, over many nodes: every victim it chose, wherever it
runs, and each member it placed, on its own node (`Claim.members`). Pod and group claims are
one kind of thing to the book, so a pod decision respects a group's claim and a group
decision a pod's: no victim and no freed room is ever claimed twice, whoever claims it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from preemptctl.preemption.objects import Pod
from preemptctl.preemption.snapshot import ClusterSnapshot

# Above any priority a PriorityClass can carry (int32), so a claimed nomination counts in
# every later fit check and is never a lower-priority nomination to clear.
CLAIMED_PRIORITY = 2**31


@dataclass(frozen=True, slots=True)
class Claim:
    """What one in-flight preemption claims: its victims and the capacity they free, where
    its pods are placed; and which run of which preemption holds it (what the ledger's
    reader keys it by).

    A pod preemption places its preemptor (`preemptor_uid`) on `node`. A group preemption's
    `preemptor_uid` is its group's UID and `node` is empty: it places each member it placed
    on that member's node (`members`: (member UID, node) pairs). `holder` names the
    preemptor ("namespace/name") for the decisions that list the claims they respected."""

    preemptor_uid: str
    node: str
    victim_uids: frozenset[str]
    preemption_id: str = ""
    run_id: str = ""
    members: tuple[tuple[str, str], ...] = ()
    holder: str = ""

    @property
    def placed(self) -> tuple[tuple[str, str], ...]:
        """The pods the claim places, each with its node: the group's members, or the
        preemptor on its node."""
        if self.members:
            return self.members
        return ((self.preemptor_uid, self.node),)


class ClaimBook:
    """The in-flight preemptions one decision must respect; the caller serializes decisions
    (under the ledger's decision lock and the cluster view's lock)."""

    def __init__(self, claims: Iterable[Claim] = ()) -> None:
        self._claims: dict[str, Claim] = {claim.preemptor_uid: claim for claim in claims}

    def __len__(self) -> int:
        return len(self._claims)

    def __contains__(self, preemptor_uid: object) -> bool:
        return preemptor_uid in self._claims

    def all(self) -> list[Claim]:
        """Every claim, in the order of `holders`."""
        return [self._claims[uid] for uid in sorted(self._claims)]

    def holders(self, excluding: str = "") -> list[str]:
        """The preemptor UIDs holding a claim (what a decision counts as done)."""
        return sorted(uid for uid in self._claims if uid != excluding)

    def without(self, preemptor_uid: str) -> ClaimBook:
        """The same claims but `preemptor_uid`'s own."""
        return ClaimBook(c for uid, c in self._claims.items() if uid != preemptor_uid)

    def claim(self, claim: Claim) -> None:
        self._claims[claim.preemptor_uid] = claim

    def set_aside_fulfilled(self, snapshot: ClusterSnapshot) -> list[str]:
        """Set aside the claims whose effect the view already shows (preemptor bound, every
        victim gone); the preemptor UIDs set aside. A preemptor the view does not show keeps
        its claim: the view may lag behind the API server."""
        done = []
        for uid, claim in list(self._claims.items()):
            placed = [snapshot.pods.get(pod_uid) for pod_uid, _ in claim.placed]
            if all(pod is not None and pod.node_name for pod in placed) and not any(
                victim in snapshot.pods for victim in claim.victim_uids
            ):
                del self._claims[uid]
                done.append(uid)
        return done

    @contextmanager
    def applied(self, snapshot: ClusterSnapshot, deciding_for: str) -> Iterator[None]:
        """Overlay every claim but `deciding_for`'s own on `snapshot` for one decision,
        then put the snapshot back exactly as it was."""
        saved: list[Pod] = []
        try:
            for uid, claim in self._claims.items():
                if uid == deciding_for:
                    continue
                for victim_uid in claim.victim_uids:
                    victim = snapshot.remove_pod(victim_uid, returning=True)
                    if victim is not None:
                        saved.append(victim)
                for pod_uid, node in claim.placed:
                    pod = snapshot.pods.get(pod_uid)
                    if pod is not None:
                        saved.append(pod)
                        snapshot.upsert_pod(_placed(pod, node))
            yield
        finally:
            for pod in reversed(saved):
                snapshot.upsert_pod(pod)


PLACED_KEPT = 4096
"""At most this many placed pods are kept for reuse (`_placed`); past it, all are dropped."""

_placed_pods: dict[str, tuple[Pod, str, Pod]] = {}
"""By UID: the pod a claim placed, the node, and the placed pod made of them (`_placed`)."""


def _placed(pod: Pod, node: str) -> Pod:
    """A pod a claim places (a preemptor, or a group's member) as a nomination to `node` that
    every later decision must respect. A member leaves its group for the overlay: a member's
    priority is its group's (the snapshot would give it back), and the claimed priority
    must stand; its group, deciding again, does not meet its own claim.

    Every decision lays every claim over the view again, so the placed pod made for the same
    pod object (the view replaces a changed pod, never mutates it) and the same node is
    reused: it is a function of those two alone, and the same object lets the inputs
    recorder find the pending pods unchanged by identity instead of encoding them again."""
    kept = _placed_pods.get(pod.uid)
    if kept is not None and kept[0] is pod and kept[1] == node:
        return kept[2]
    placed = dataclasses.replace(
        pod,
        node_name="",
        nominated_node_name=node,
        priority=CLAIMED_PRIORITY,
        group="",
        spec_priority=None,
    )
    if len(_placed_pods) >= PLACED_KEPT:
        _placed_pods.clear()
    _placed_pods[pod.uid] = (pod, node, placed)
    return placed

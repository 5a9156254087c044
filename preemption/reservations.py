"""In-flight preemptions, counted by every later decision as if they had already happened.

kube-scheduler never lets two preemptions claim the same victim or the same freed capacity
because it decides in one loop and nominates at once. Preemptions here run concurrently, so
the worker serializes decisions and keeps a book of the ones still in flight: while a
decision runs, each reserved preemption's victims are hidden (as if deleted) and its
preemptor is placed on its node as a nomination nobody outranks (as if bound). The next
decision therefore sees exactly what it would see had the earlier preemptions finished:
a serial run's view, whatever the interleaving.

Deliberate difference from upstream: a higher-priority preemptor cannot take capacity an
in-flight preemption has freed (upstream may, and then re-preempts the lower one). Claims are
first come, first served, so no pod is ever evicted for a preemption that is then undone.

The reservations of a decision are the ledger's open claims (see `ledger.claims`, which also
bounds them in time); one a decision can see through — the preemptor bound and every victim
gone, or the preemptor gone — is dropped, since the cluster itself now shows its effect.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from preemptctl.preemption.objects import Pod
from preemptctl.preemption.snapshot import ClusterSnapshot

# Above any priority a PriorityClass can carry (int32), so a reserved nomination counts in
# every later fit check and is never a lower-priority nomination to clear.
RESERVED_PRIORITY = 2**31


@dataclass(frozen=True, slots=True)
class Reservation:
    """What one in-flight preemption claims: its node's capacity and its victims."""

    preemptor_uid: str
    node: str
    victim_uids: frozenset[str]


class ReservationBook:
    """The in-flight preemptions one decision must respect; the caller serializes decisions
    (under the ledger's decision lock and the cluster view's lock)."""

    def __init__(self) -> None:
        self._reservations: dict[str, Reservation] = {}

    def __len__(self) -> int:
        return len(self._reservations)

    def __contains__(self, preemptor_uid: object) -> bool:
        return preemptor_uid in self._reservations

    def holders(self, excluding: str = "") -> list[str]:
        """The preemptor UIDs holding a reservation (what a decision counts as done)."""
        return sorted(uid for uid in self._reservations if uid != excluding)

    def reserve(self, reservation: Reservation) -> None:
        self._reservations[reservation.preemptor_uid] = reservation

    def release(self, preemptor_uid: str) -> None:
        self._reservations.pop(preemptor_uid, None)

    def prune(self, snapshot: ClusterSnapshot) -> list[str]:
        """Drop the reservations the cluster already shows; the preemptor UIDs dropped."""
        dropped = []
        for uid, reservation in list(self._reservations.items()):
            preemptor = snapshot.pods.get(uid)
            settled = (
                preemptor is not None
                and bool(preemptor.node_name)
                and not any(victim in snapshot.pods for victim in reservation.victim_uids)
            )
            if preemptor is None or settled:
                del self._reservations[uid]
                dropped.append(uid)
        return dropped

    @contextmanager
    def applied(self, snapshot: ClusterSnapshot, deciding_for: str) -> Iterator[None]:
        """Overlay every reservation but `deciding_for`'s own on `snapshot` for one decision,
        then put the snapshot back exactly as it was."""
        saved: list[Pod] = []
        try:
            for uid, reservation in self._reservations.items():
                if uid == deciding_for:
                    continue
                for victim_uid in reservation.victim_uids:
                    victim = snapshot.remove_pod(victim_uid)
                    if victim is not None:
                        saved.append(victim)
                preemptor = snapshot.pods.get(uid)
                if preemptor is not None:
                    saved.append(preemptor)
                    snapshot.upsert_pod(_placed(preemptor, reservation.node))
            yield
        finally:
            for pod in reversed(saved):
                snapshot.upsert_pod(pod)


def _placed(preemptor: Pod, node: str) -> Pod:
    """The preemptor as a nomination to `node` that every later decision must respect."""
    return dataclasses.replace(
        preemptor, node_name="", nominated_node_name=node, priority=RESERVED_PRIORITY
    )

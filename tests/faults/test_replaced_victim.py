"""A decided victim replaced by a same-named pod with a new UID before its DELETE lands.

Scenario: full nodes of batch pods, one preemptor per node, two `preemptctl worker`
processes. The moment the first DELETE for a victim arrives at the API server, and before it
is served, that victim is deleted and a pod of the same name is created (pending, new UID),
as a StatefulSet recreates its pod. The DELETE, with its UID precondition, must then miss
the new pod.

After it settles, judged only from the emulator's request log and the ledger:
- the replacement is never deleted, and the ledger records the replacement with its UID;
- every invariant of the suite holds (every preemptor bound, no UID deleted twice, no pod
  deleted that was not decided, no decided victim left behind, no duplicate or missing
  ledger event, no workflow left running).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.support.fault_rig import (
    INVARIANTS,
    Audit,
    Rig,
    crowded_cluster,
    fault_rig,
    is_successful_delete,
    scale,
)
from tests.support.temporal_server import PersistentTemporal


@dataclass
class Replacement:
    namespace: str
    name: str
    old_uid: str
    new_uid: str


@dataclass
class Outcome:
    audit: Audit
    replacement: Replacement | None
    deleted_uids: set[str]
    replaced_payloads: list[dict[str, object]]


def replace_first_victim(rig: Rig, done: list[Replacement]) -> None:
    """Arm the emulator: the first pod DELETE to arrive finds its pod already replaced (and
    is appended to `done`)."""
    lock = threading.Lock()

    def on_arrival(verb: str, resource: str, namespace: str, name: str) -> None:
        if verb != "delete" or resource != "pods":
            return
        with lock:
            if done:
                return
            old = rig.cluster.emulator.pod(f"{namespace}/{name}")
            if old is None:
                return
            new_uid = rig.replace_pod(namespace, name)
            done.append(Replacement(namespace, name, old["metadata"]["uid"], new_uid))

    rig.faults.on_arrival = on_arrival


@pytest.fixture(scope="module")
def outcome(
    persistent_temporal: PersistentTemporal, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Outcome]:
    nodes = 2 * scale()
    replaced: list[Replacement] = []
    with fault_rig(
        persistent_temporal,
        tmp_path_factory.mktemp("replaced-victim"),
        crowded_cluster(nodes, nodes),
        arm=lambda rig: replace_first_victim(rig, replaced),
    ) as rig:
        rig.settle(timeout=90.0 * scale())
        deleted = {
            str(((r.body or {}).get("preconditions") or {}).get("uid"))
            for r in rig.requests
            if is_successful_delete(r)
        }
        yield Outcome(
            rig.audit(),
            replaced[0] if replaced else None,
            deleted,
            rig.ledger_payloads("victim_replaced"),
        )


def test_the_replacement_is_never_deleted(outcome: Outcome) -> None:
    assert outcome.replacement is not None, "no victim was replaced"
    assert outcome.replacement.new_uid not in outcome.deleted_uids


def test_the_ledger_records_the_replacement_uid(outcome: Outcome) -> None:
    assert outcome.replacement is not None, "no victim was replaced"
    assert [p.get("replacedByUid") for p in outcome.replaced_payloads] == [
        outcome.replacement.new_uid
    ]


@pytest.mark.parametrize("invariant", INVARIANTS)
def test_invariant_holds_when_a_victim_is_replaced(outcome: Outcome, invariant: str) -> None:
    outcome.audit.assert_holds(invariant)

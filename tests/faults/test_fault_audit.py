"""The fault suite's audit judges gangs (issue 25): each invariant it adds, shown failing on
the evidence it guards against and holding on a clean run, from made-up request logs and
ledger rows (no servers: this is the judge, not a fault run).

Scenarios:
- a pending gang bound whole, or not at all, holds; one bound in part (fewer than minCount)
  is a violation naming how many;
- nothing deleted for a gang left unbound holds; a victim deleted by its run (in the ledger)
  or a pod only its runs chose deleted (in the request log) is a violation; for a bound gang
  its deletes are expected;
- a victim unit all there or all gone holds; one with some members deleted and some left is
  a violation;
- a run with one end holds; a run with two ends (completed, then aborted) is a violation;
- two 2xx DELETEs of one UID are a violation (the existing check, the gang victims' too).
"""

from __future__ import annotations

from typing import Any

from preemptctl.emulator import Request
from tests.support.fault_rig import Audit, Gang, GangEnd, VictimUnit

GANG = Gang("ml/train-a", "uid-train-a", 2, ("ml/train-a-0", "ml/train-a-1"), fits=True)
UNIT = VictimUnit("ml/train-b", frozenset({"uid-b0", "uid-b1"}))


def delete(name: str, uid: str, code: int = 200) -> Request:
    return Request(
        "delete",
        "pods",
        "ml",
        name,
        "DELETE",
        f"/api/v1/namespaces/ml/pods/{name}",
        {},
        "application/json",
        {"preconditions": {"uid": uid}},
        code,
    )


def row(kind: str, run: str = "run-1", victim: str | None = None) -> dict[str, Any]:
    return {
        "kind": kind,
        "run_id": run,
        "preemption_id": "group-train-a",
        "preemptor_uid": "uid-train-a",
        "victim_uid": f"uid-{victim}" if victim else None,
        "victim_namespace": "ml" if victim else None,
        "victim_name": victim,
    }


def decided_for_train_b() -> list[dict[str, Any]]:
    return [row("decision_made"), row("victim_chosen", victim="b0")]


def audit(
    requests: list[Request],
    rows: list[dict[str, Any]],
    *,
    bound: int = 2,
    live: set[str] | None = None,
) -> Audit:
    return Audit.build(
        requests,
        rows,
        {"uid-b0", "uid-b1"} if live is None else live,
        [],
        [],
        1,
        [GangEnd(GANG, bound)],
        [UNIT],
    )


def test_a_gang_bound_whole_or_not_at_all_holds() -> None:
    assert audit([], [], bound=2).of("every pending gang bound whole or none of it") == []
    assert audit([], [], bound=0).of("every pending gang bound whole or none of it") == []


def test_a_gang_bound_in_part_is_a_violation() -> None:
    assert audit([], [], bound=1).of("every pending gang bound whole or none of it") == [
        "ml/train-a: 1 of 2 member(s) bound, minCount 2"
    ]


def test_a_victim_deleted_for_a_gang_left_unbound_is_a_violation() -> None:
    rows = [*decided_for_train_b(), row("victim_deleted", victim="b0"), row("completed")]
    found = audit([delete("b0", "uid-b0")], rows, bound=0, live={"uid-b1"})
    assert found.of("no victim deleted for a gang left unbound") == [
        "ml/train-a is not bound, yet its run run-1 deleted ml/b0 uid uid-b0",
        "ml/train-a is not bound, yet ml/b0 uid uid-b0, chosen by its runs only, was deleted",
    ]


def test_a_bound_gangs_victims_are_its_own_business() -> None:
    rows = [*decided_for_train_b(), row("victim_deleted", victim="b0"), row("completed")]
    found = audit([delete("b0", "uid-b0")], rows, bound=2, live={"uid-b1"})
    assert found.of("no victim deleted for a gang left unbound") == []


def test_a_victim_unit_whole_or_gone_holds() -> None:
    assert audit([], []).of("no victim unit taken in part") == []
    requests = [delete("b0", "uid-b0"), delete("b1", "uid-b1")]
    assert audit(requests, [], live=set()).of("no victim unit taken in part") == []


def test_a_victim_unit_taken_in_part_is_a_violation() -> None:
    found = audit([delete("b0", "uid-b0")], [], live={"uid-b1"})
    assert found.of("no victim unit taken in part") == [
        "ml/train-b (disruptionMode all): 1 of 2 member(s) deleted, 1 left"
    ]


def test_a_run_that_ends_twice_is_a_violation() -> None:
    assert audit([], [row("decision_made"), row("completed")]).of("each run ends once") == []
    twice = [row("decision_made"), row("completed"), row("preemption_aborted")]
    assert audit([], twice).of("each run ends once") == [
        "run run-1 (group-train-a): 2 ends: completed, preemption_aborted"
    ]


def test_a_delete_answered_2xx_twice_is_a_violation() -> None:
    found = audit([delete("b0", "uid-b0"), delete("b0", "uid-b0", 202)], decided_for_train_b())
    [violation] = found.of("no victim UID deleted twice")
    assert violation.startswith("ml/b0 uid uid-b0: 2 successful DELETEs")

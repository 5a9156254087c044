"""The rationale in words: the sentences `preemptctl explain` prints.

Scenarios:
- the node chosen by a criterion among several candidates, with each selection step
- the only candidate node
- rejected nodes are named with the dry run's reasons
- a critical-admission decision's node is the pod's own node
- a victim is explained by its priority, its rank and the reprieve that failed
- PDB violations are part of a victim's explanation when there were any
- each victim fate reads as what happened, with its delay after the decision
- durations read at a glance
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from preemptctl.ledger.events import decision_events
from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.narrative import fate_phrase, format_seconds, why_node, why_victim
from preemptctl.ledger.views import fold_preemption
from preemptctl.preemption.decision import Decision, Rationale, Strategy, Verdict
from tests.ledger.builders import (
    API,
    BATCH_7,
    BATCH_8,
    T0,
    event,
    four_candidate_decision,
    recorded,
)


def test_the_node_chosen_by_a_criterion_among_candidates() -> None:
    sentence = why_node(four_candidate_decision(), API)
    assert sentence is not None
    assert sentence.startswith(
        "node-3 was chosen by minHighestPriority (least important most-important victim) "
        "among 4 candidate nodes"
    )
    assert "minNumPDBViolations kept node-1, node-2, node-3, node-4; " in sentence
    assert "minHighestPriority kept node-3" in sentence


def test_the_only_candidate_node() -> None:
    decision = four_candidate_decision()
    rationale = decision["rationale"]
    rationale["evaluated"] = rationale["evaluated"][:1]
    rationale["selection"], rationale["decidingCriterion"] = [], "onlyCandidate"
    assert (
        why_node(decision, API) == "node-3 was the only candidate node of 6 node(s) in the cluster"
    )


def test_rejected_nodes_are_named_with_their_reasons() -> None:
    sentence = why_node(four_candidate_decision(), API)
    assert sentence is not None and sentence.endswith(
        "Rejected by the dry run: node-5 (Insufficient memory)"
    )


def test_a_critical_admission_node_is_the_pods_own() -> None:
    decision = Decision(
        preemptor=API,
        status=Verdict.PREEMPT,
        message="",
        rationale=Rationale(strategy=Strategy.CRITICAL_ADMISSION),
        nominated_node="node-9",
        victims=(BATCH_7,),
    ).to_json()
    assert why_node(decision, API) == (
        "node-9 is where prod/api-0 is bound; the kubelet's critical-pod admission only ever "
        "preempts on the pod's own node"
    )
    assert "lowest QoS class first" in why_victim(decision, BATCH_7, API, "node-9")


def test_a_victim_is_explained_by_priority_rank_and_reprieve() -> None:
    sentence = why_victim(four_candidate_decision(), BATCH_8, API, "node-3")
    assert sentence.startswith(
        "default/batch-8 (priority 50) was a victim (victim 2 of 2, most important first) "
        "because it has lower priority than prod/api-0 (priority 1000)"
    )
    assert sentence.endswith("default/batch-8 could not be reprieved")


def test_pdb_violations_are_part_of_the_explanation() -> None:
    decision = four_candidate_decision()
    decision["numPDBViolations"] = 1
    assert "violate 1 PodDisruptionBudget(s)" in why_victim(decision, BATCH_7, API, "node-3")


@pytest.mark.parametrize(
    ("kind", "payload", "phrase"),
    [
        (EventKind.VICTIM_DELETED, {}, "deleted at 2026-11-21 12:00:03Z (3.0s after the decision)"),
        (
            EventKind.VICTIM_DELETED,
            {"answerLost": True},
            "deleted at 2026-11-21 12:00:03Z (3.0s after the decision); the API server's "
            "answer was lost (worker killed or connection dropped), and the retry found it gone",
        ),
        (
            EventKind.VICTIM_ALREADY_GONE,
            {},
            "already gone at 2026-11-21 12:00:03Z (3.0s after the decision): "
            "something else removed it first",
        ),
        (
            EventKind.VICTIM_REPLACED,
            {"replacedByUid": "u2"},
            "replaced by a new pod of the same name (uid u2), which was left alone "
            "(3.0s after the decision)",
        ),
        (
            EventKind.VICTIM_FAILED,
            {"error": "403 Forbidden"},
            "could not be preempted at 2026-11-21 12:00:03Z: 403 Forbidden",
        ),
        (EventKind.VICTIM_MARKED, {}, "marked with a DisruptionTarget condition, not deleted yet"),
    ],
)
def test_each_fate_reads_as_what_happened(
    kind: EventKind, payload: dict[str, object], phrase: str
) -> None:
    story = [
        *decision_events("p", "r", API, four_candidate_decision(), T0),
        event("p", kind, T0 + timedelta(seconds=3), victim=BATCH_7, payload=payload, run_id="r"),
    ]
    view = fold_preemption(recorded(story))
    assert fate_phrase(view, view.victims[0]) == phrase


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(None, "-"), (0.25, "0.2s"), (59.9, "59.9s"), (125, "2m05s"), (7260, "2h01m")],
)
def test_durations_read_at_a_glance(seconds: float | None, shown: str) -> None:
    assert format_seconds(seconds) == shown

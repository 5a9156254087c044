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
- a preemption is told attempt by attempt, in order, the failed one too, each with how it
  was started, what changed since the one before, and a link when one is given
- what changed between attempts: the node, victims added and dropped (with their fate in
  the earlier attempt), a victim gone or replaced since, the error gone, the same or a
  different error; and "the same node and victims" when those did not change
- a victim's entry is headed by its fate (deleted, spared, failed, already gone, replaced
  by its new UID, marked, chosen), with the attempt it belongs to
- a later attempt without its `retried` event says so
- a group preemption in words: "for ml/train-a, 4 pods, minCount 4: 4 victims in 2 units on
  3 nodes, members placed on 2: ..." (each node count says what it counts), each unit with
  why it could not stay, each member placed with its nomination, each victim with its node
  and (when more than itself) its unit, and the group's scheduling; a group's victim is
  explained by its unit and who went with it; between two attempts a changed placement is
  named; every way a member's nomination can settle reads as words (never the raw
  `Unchanged`)
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from preemptctl.kube.results import WriteEffect
from preemptctl.ledger.events import LedgerEvent, decision_events
from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.narrative import (
    fate_phrase,
    format_seconds,
    how_started,
    member_lines,
    preemptor_story,
    victim_heading,
    victim_story,
    what_changed,
    why_node,
    why_victim,
)
from preemptctl.ledger.views import AttemptView, MemberView, fold_preemption
from preemptctl.preemption.decision import Decision, PodRef, Rationale, Strategy, Verdict
from tests.ledger.builders import (
    API,
    BATCH_7,
    BATCH_8,
    T0,
    TRAIN_B,
    completed_preemption,
    event,
    failed_attempt,
    four_candidate,
    four_candidate_decision,
    group_preemption,
    recorded,
    retried,
)

P = "p-1"
WEB_9 = PodRef("default", "web-9", "uid-web-9", 10)
DENIED = 'pods "batch-7" is forbidden: cannot delete (403 Forbidden)'


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
        verdict=Verdict.PREEMPT,
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
            "failed at 2026-11-21 12:00:03Z: 403 Forbidden",
        ),
        (EventKind.VICTIM_MARKED, {}, "marked with a DisruptionTarget condition, not deleted yet"),
    ],
)
def test_each_fate_reads_as_what_happened(
    kind: EventKind, payload: dict[str, object], phrase: str
) -> None:
    story = [
        *decision_events("p", "r", API, four_candidate(), T0),
        event("p", kind, T0 + timedelta(seconds=3), victim=BATCH_7, payload=payload, run_id="r"),
    ]
    attempt = fold_preemption(recorded(story)).latest
    assert fate_phrase(attempt, attempt.victims[0]) == phrase


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(None, "-"), (0.25, "0.2s"), (59.9, "59.9s"), (125, "2m05s"), (7260, "2h01m")],
)
def test_durations_read_at_a_glance(seconds: float | None, shown: str) -> None:
    assert format_seconds(seconds) == shown


def _two_attempts(second: list[LedgerEvent] | None = None) -> tuple[AttemptView, AttemptView]:
    """Attempt 1 failed on a refused delete; attempt 2 (`second`, else completed on the same
    node with the same victims), retried by a person a minute later."""
    later = T0 + timedelta(minutes=1)
    story = [
        *failed_attempt(P),
        retried(P, later, new_run="run-2", previous_run="run-1", by="person", reason="fixed"),
        *(second or completed_preemption(P, start=later, run_id="run-2")),
    ]
    first, latest = fold_preemption(recorded(story)).attempts
    return first, latest


def test_a_preemption_is_told_attempt_by_attempt() -> None:
    later = T0 + timedelta(minutes=1)
    story = [
        *failed_attempt(P),
        retried(P, later, new_run="run-2", previous_run="run-1", by="person", reason="fixed"),
        *completed_preemption(P, start=later, run_id="run-2"),
    ]
    lines = preemptor_story(fold_preemption(recorded(story)), lambda w, r: f"ui/{w}/{r}")
    assert lines[0] == "2026-11-21 12:00:00Z  p-1: completed after 2 attempts"
    headers = [line for line in lines if line.startswith("  attempt")]
    assert headers == [
        f"  attempt 1 at 2026-11-21 12:00:00Z, run run-1: failed: {DENIED} (not retryable: "
        "the cause must be fixed first), took 2.0s",
        "  attempt 2 at 2026-11-21 12:01:00Z, run run-2: completed, took 8.0s",
    ]
    second = lines[lines.index(headers[1]) :]
    assert second[1:3] == [
        "    retried by a person (preemptctl retry) after run run-1 (failed): fixed",
        "    changed since attempt 1: the same node and victims; attempt 1's error is gone",
    ]
    assert "    why node-3: as in attempt 1" in second
    assert "    see ui/p-1/run-1" in lines and lines[-1] == "    see ui/p-1/run-2"


def _other_decision(*victims: PodRef, node: str = "node-1") -> list[LedgerEvent]:
    later = T0 + timedelta(minutes=1)
    return decision_events(P, "run-2", API, four_candidate(API, victims, node), later)


@pytest.mark.parametrize(
    ("second", "changes"),
    [
        (
            _other_decision(BATCH_8, node="node-1"),
            [
                "node node-1 instead of node-3",
                "victims dropped: default/batch-7 (failed in attempt 1)",
            ],
        ),
        (
            _other_decision(BATCH_7, BATCH_8, WEB_9),
            [
                "node node-1 instead of node-3",
                "victims added: default/web-9",
            ],
        ),
        (
            [
                *_other_decision(BATCH_7, BATCH_8, node="node-3"),
                event(P, EventKind.VICTIM_ALREADY_GONE, T0, victim=BATCH_7, run_id="run-2"),
                event(
                    P,
                    EventKind.VICTIM_REPLACED,
                    T0,
                    victim=BATCH_8,
                    payload={"replacedByUid": "uid-new"},
                    run_id="run-2",
                ),
            ],
            [
                "the same node and victims",
                "default/batch-7 was already gone this time",
                "default/batch-8 had been replaced by uid uid-new",
            ],
        ),
        (
            [
                *_other_decision(BATCH_7, BATCH_8, node="node-3"),
                event(P, EventKind.FAILED, T0, payload={"error": "etcd timeout"}, run_id="run-2"),
            ],
            ["the same node and victims", "a different error from attempt 1's"],
        ),
    ],
    ids=["node-and-dropped", "added", "gone-and-replaced", "different-error"],
)
def test_what_changed_between_attempts(second: list[LedgerEvent], changes: list[str]) -> None:
    assert what_changed(*_two_attempts(second)) == changes


def test_a_deleted_victim_not_needed_again_is_dropped_as_deleted() -> None:
    first = completed_preemption(P, victims=[BATCH_7])
    story = [
        *first,
        *decision_events(P, "run-2", API, four_candidate(victims=[BATCH_8]), T0),
    ]
    before, after = fold_preemption(recorded(story)).attempts
    assert what_changed(before, after) == [
        "victims added: default/batch-8",
        "victims dropped: default/batch-7 (deleted by attempt 1)",
    ]


@pytest.mark.parametrize(
    ("kind", "payload", "heading"),
    [
        (EventKind.VICTIM_DELETED, {}, "deleted by the preemption for {by} on node-3"),
        (
            EventKind.VICTIM_FAILED,
            {"error": "403"},
            "failed: the preemption for {by} on node-3 could not delete it",
        ),
        (
            EventKind.VICTIM_ALREADY_GONE,
            {},
            "already gone: chosen by the preemption for {by} on node-3, but something else "
            "removed it first",
        ),
        (
            EventKind.VICTIM_REPLACED,
            {"replacedByUid": "uid-new"},
            "replaced by uid uid-new: chosen by the preemption for {by} on node-3, its name now "
            "belongs to another pod",
        ),
        (
            EventKind.VICTIM_MARKED,
            {},
            "marked for deletion by the preemption for {by} on node-3, not deleted yet",
        ),
        (
            EventKind.VICTIM_CHOSEN,
            {},
            "chosen by the preemption for {by} on node-3, not touched yet",
        ),
    ],
)
def test_a_victims_entry_is_headed_by_its_fate(
    kind: EventKind, payload: dict[str, object], heading: str
) -> None:
    story = [
        *decision_events(P, "r", API, four_candidate(), T0),
        event(P, kind, T0, victim=BATCH_7, payload=payload, run_id="r"),
    ]
    attempt = fold_preemption(recorded(story)).latest
    by = "prod/api-0 (priority 1000)"
    assert victim_heading(attempt, attempt.victims[0]) == heading.format(by=by)


def test_a_spared_victims_story_names_its_attempt_and_the_preemptions_end() -> None:
    later = T0 + timedelta(minutes=1)
    story = [
        *failed_attempt(P),
        retried(P, later, new_run="run-2", previous_run="run-1"),
        *completed_preemption(P, start=later, run_id="run-2", victims=[BATCH_7]),
    ]
    view = fold_preemption(recorded(story))
    spared = view.attempts[0].victims[1]
    lines = victim_story(view, spared, lambda w, r: f"ui/{w}/{r}")
    assert lines[:2] == [
        "2026-11-21 12:00:00Z  spared: chosen by the preemption for prod/api-0 (priority 1000) "
        "on node-3, which ended before deleting it",
        "  in attempt 1 of 2 of p-1 (run run-1)",
    ]
    assert "  fate: spared: the attempt ended (failed) before touching it" in lines
    assert lines[-2:] == ["  the preemption: completed after 2 attempts", "  see ui/p-1/run-1"]


def test_a_later_attempt_without_its_retried_event_says_so() -> None:
    story = [*failed_attempt(P), *completed_preemption(P, run_id="run-2")]
    second = fold_preemption(recorded(story)).attempts[1]
    assert how_started(second) == (
        "started after run run-1; its `retried` event is not recorded (yet)"
    )


def test_the_trigger_retrying_says_so() -> None:
    _, second = _two_attempts()
    assert (
        how_started(second)
        == "retried by a person (preemptctl retry) after run run-1 (failed): fixed"
    )


def test_a_refused_nomination_clear_is_told_as_refused_not_as_done() -> None:
    story = [
        *completed_preemption(P),
        event(
            P,
            EventKind.NOMINATION_CLEARED,
            T0,
            payload={"pod": "default/report-x", "uid": "u-x", "error": "403 Forbidden: patch"},
            step="clear-report-x",
        ),
        event(
            P,
            EventKind.NOMINATION_CLEARED,
            T0,
            payload={"pod": "default/report-y", "uid": "u-y", "verdict": "cleared"},
            step="clear-report-y",
        ),
    ]
    lines = preemptor_story(fold_preemption(recorded(story)))
    assert "    nominations cleared: default/report-y" in lines
    assert "    could not clear the nomination of default/report-x: 403 Forbidden: patch" in lines


# -- group preemptions --------------------------------------------------------------------------

G = "group-preemption-ml-train-a-uid-train-a"


def test_a_group_preemption_is_told_in_the_groups_words() -> None:
    view = fold_preemption(recorded(group_preemption(G)))
    assert preemptor_story(view) == [
        f"2026-11-21 12:00:00Z  {G}: completed after 1 attempt",
        "  attempt 1 at 2026-11-21 12:00:00Z, run run-1: completed, took 10.0s",
        "    decision at 2026-11-21 12:00:00Z: Preempt, preempt 4 pod(s) in 2 unit(s) on 3 "
        "node(s) to place 4 of 4 pending pod(s) (minCount 4; 0 PDB violation(s))",
        "    for ml/train-a, 4 pods, minCount 4: 4 victims in 2 units on 3 nodes, members "
        "placed on 2: podGroup ml/train-b (3 pods, taken whole, on node-1, node-2, node-3), "
        "pod default/batch-1 (on node-2)",
        "    unit podGroup ml/train-b, taken whole (priority 500): ml/train-a-0 would not fit "
        "on node-1 beside it (Insufficient cpu)",
        "    unit pod default/batch-1 (priority 100): ml/train-a-2 would not fit on node-2 "
        "beside it (Insufficient cpu)",
        "    placed ml/train-a-0 on node-1: nominated",
        "    placed ml/train-a-1 on node-1: nominated",
        "    placed ml/train-a-2 on node-2: nominated",
        "    placed ml/train-a-3 on node-2: nominated",
        "    victim ml/train-b-0 (priority 500) on node-1, with podGroup ml/train-b: deleted at "
        "2026-11-21 12:00:03Z (3.0s after the decision)",
        "    victim ml/train-b-1 (priority 500) on node-2, with podGroup ml/train-b: deleted at "
        "2026-11-21 12:00:05Z (5.0s after the decision)",
        "    victim ml/train-b-2 (priority 500) on node-3, with podGroup ml/train-b: deleted at "
        "2026-11-21 12:00:07Z (7.0s after the decision)",
        "    victim default/batch-1 (priority 100) on node-2: deleted at 2026-11-21 12:00:09Z "
        "(9.0s after the decision)",
        "    the pod group ml/train-a was not scheduled (minCount members bound), as far as the "
        "ledger knows",
    ]


def test_a_group_victim_is_explained_by_its_unit() -> None:
    view = fold_preemption(recorded(group_preemption(G)))
    lines = victim_story(view, view.latest.victims[1])
    assert lines[0] == (
        "2026-11-21 12:00:00Z  deleted by the preemption for the pod group ml/train-a "
        "(priority 1000) on node-2"
    )
    assert lines[2] == (
        "  why: ml/train-b-1 (priority 500) on node-2 was a victim (victim 2 of 4, most "
        "important first) because it has lower priority than the pod group ml/train-a "
        "(priority 1000): the planner removed every lower-priority unit, placed the group "
        "once, then reprieved the units that still let every placed member fit, most "
        "important first, and podGroup ml/train-b could not be reprieved: ml/train-a-0 would "
        "not fit on node-1 beside it (Insufficient cpu); it went with ml/train-b-0, "
        "ml/train-b-2, its unit taken whole"
    )
    assert lines[3].startswith("  the group's decision: for ml/train-a, 4 pods, minCount 4")
    assert TRAIN_B[1].key in lines[2]


def test_a_changed_placement_between_group_attempts_is_named() -> None:
    first = fold_preemption(recorded(group_preemption(G))).latest
    second_story = group_preemption(G, run_id="run-2", start=T0 + timedelta(minutes=1))
    decision = dict(second_story[0].payload)
    decision["nominations"] = {**decision["nominations"], "ml/train-a-0": "node-3"}
    second_story[0] = LedgerEvent(
        G,
        "run-2",
        second_story[0].kind,
        second_story[0].preemptor,
        payload=decision,
        occurred_at=second_story[0].occurred_at,
    )
    second = fold_preemption(recorded(second_story)).latest
    assert what_changed(first, second)[0] == (
        "placement changed: ml/train-a-0 on node-3 instead of node-1"
    )
    assert what_changed(first, first) == ["the same placement and victims"]


@pytest.mark.parametrize("effect", [effect.value for effect in WriteEffect])
def test_every_settled_nomination_reads_as_words_not_an_enum(effect: str) -> None:
    member = MemberView("ml/train-a-0", "uid-0", "node-1", effect)
    [line] = member_lines(
        replace(fold_preemption(recorded(group_preemption(G))).latest, members=(member,))
    )
    assert line.startswith("placed ml/train-a-0 on node-1: ")
    assert effect not in line.removeprefix("placed ml/train-a-0 on node-1: ")


def test_a_member_nominated_by_an_earlier_attempt_reads_as_nominated() -> None:
    member = MemberView("ml/train-a-0", "uid-0", "node-1", "Unchanged")
    attempt = replace(fold_preemption(recorded(group_preemption(G))).latest, members=(member,))
    assert member_lines(attempt) == [
        "placed ml/train-a-0 on node-1: nominated (it already was, by an earlier write)"
    ]

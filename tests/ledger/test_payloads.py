"""Typed payloads: one dataclass per event kind, written and read by the same code.

Scenarios:
- every kind but the decision kinds has exactly one payload type;
- each payload reads back what it wrote;
- a payload missing fields (an older writer) reads with the defaults, and unknown fields (a
  newer writer) are ignored;
- the JSON keys are the ledger's camelCase ones; a nomination's write effect keeps the key
  `verdict` its rows were first written with, both ways;
- a group preemption's victim names its unit, only when it has one; a placed member names
  the pod and its UID; a group's scheduling says how many members were bound.
"""

from __future__ import annotations

import pytest

from preemptctl.ledger.kinds import DECISION_KINDS, EventKind
from preemptctl.ledger.payloads import (
    PAYLOAD_OF_KIND,
    DeleteSent,
    MemberPlaced,
    Payload,
    Retried,
    Scheduled,
    Terminal,
    Throttled,
    VictimChosen,
    VictimStep,
    Write,
)


def test_every_kind_but_the_decisions_has_one_payload_type() -> None:
    assert set(PAYLOAD_OF_KIND) == set(EventKind) - DECISION_KINDS


@pytest.mark.parametrize(
    "payload",
    [
        Throttled("held back", 12.5, ["default/batch-7"]),
        Write("Done", "nominated", previous="node-2"),
        Write(error="forbidden", pod="default/low", uid="u-1"),
        VictimChosen(2),
        VictimChosen(0, "podGroup ml/train-b"),
        MemberPlaced("ml/train-a-0", "uid-train-a-0"),
        Write("Done", "nominated", pod="ml/train-a-0", uid="uid-train-a-0"),
        Scheduled(3.5, members_bound=16),
        VictimStep(message="victim deleted"),
        VictimStep(message="gone", terminating=True),
        VictimStep(message="replaced", replaced_by_uid="u-new"),
        VictimStep(error="forbidden"),
        VictimStep(message="gone on retry", answer_lost=True),
        DeleteSent(eviction=True),
        Terminal(reason="the preemptor is gone"),
        Terminal(error="victim default/b could not be preempted"),
        Terminal(preemptor_scheduled=True),
        Scheduled(1.25),
        Retried("run-2"),
        Retried("run-2", "run-1", "failed", "person", "RBAC fixed"),
    ],
    ids=repr,
)
def test_a_payload_reads_back_what_it_wrote(payload: Payload) -> None:
    assert type(payload).from_json(payload.to_json()) == payload


def test_an_older_or_newer_writers_payload_still_reads() -> None:
    assert VictimStep.from_json({}) == VictimStep()
    assert Terminal.from_json({"reason": "r", "addedLater": 1}) == Terminal(reason="r")


def test_the_keys_are_the_ledgers_camel_case() -> None:
    assert VictimStep(message="m", replaced_by_uid="u").to_json() == {
        "message": "m",
        "replacedByUid": "u",
    }
    assert Scheduled(2.0).to_json() == {"secondsSinceDecision": 2.0}
    assert Terminal("not bound", preemptor_scheduled=False).to_json() == {
        "preemptorScheduled": False,
        "reason": "not bound",
    }


def test_a_nominations_effect_keeps_its_first_key() -> None:
    row = {"verdict": "KeptOtherNomination", "message": "kept", "previous": "node-2"}
    assert Write.from_json(row) == Write("KeptOtherNomination", "kept", "node-2")
    assert Write(effect="Done", message="nominated").to_json() == {
        "verdict": "Done",
        "message": "nominated",
        "previous": None,
    }


def test_a_group_preemptions_payloads_say_units_members_and_bound_count() -> None:
    assert VictimChosen(1).to_json() == {"rank": 1}
    assert VictimChosen(1, "podGroup ml/train-b").to_json() == {
        "rank": 1,
        "unit": "podGroup ml/train-b",
    }
    assert MemberPlaced("ml/w-0", "u-0").to_json() == {"pod": "ml/w-0", "uid": "u-0"}
    assert Scheduled(2.0, 16).to_json() == {"secondsSinceDecision": 2.0, "membersBound": 16}

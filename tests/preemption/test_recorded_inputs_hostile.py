"""Recorded inputs are read as untrusted data: each problem is one `RecordedInputsError`
naming it, and counts are capped before anything is built (issue 20, finding 10).

Scenarios (each on the inputs of a real decision, then damaged):
- no decision, a decision without its verdict, victims that are not victims, a decision
  that is not an object: named, never a KeyError or TypeError
- no preemptor for a pod decision, no group for a group decision, an unknown strategy, a
  newer format, a document that is not an object
- a node declaring 20,000,000 unrecorded pods (format 1) is refused before any is built,
  and so is a total past `MAX_OBJECTS`
- an object of an unknown kind, a pod that is not a pod, a storage kind this version does
  not know, a malformed `rejected`: refused, naming what
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from preemptctl.preemption import inputs_replay
from preemptctl.preemption.decision import Strategy
from preemptctl.preemption.inputs_replay import RecordedInputsError, rebuild
from preemptctl.preemption.planner import plan
from preemptctl.preemption.recorded_inputs import capture, to_json
from tests.preemption.builders import node, pod, snapshot

Json = dict[str, Any]


def recorded() -> Json:
    view = snapshot(
        node("n0", cpu="2"),
        pod("low-0", node="n0", priority=1, cpu="2"),
        pod("p", priority=100, cpu="1"),
    )
    incoming = view.pod_by_key("default/p")
    assert incoming is not None
    decision = plan(view, incoming.key)
    document: Json = json.loads(
        json.dumps(to_json(capture(view, incoming, Strategy.DEFAULT, None, decision)))
    )
    return document


def damaged(change: Callable[[Json], Any]) -> Json:
    document = copy.deepcopy(recorded())
    change(document)
    return document


DAMAGES: dict[str, tuple[Callable[[Json], Any], str]] = {
    "no decision": (lambda d: d.pop("decision"), "recorded inputs hold no decision"),
    "no verdict": (
        lambda d: d["decision"].pop("verdict"),
        "the recorded decision's 'verdict' is missing or malformed",
    ),
    "victims without a uid": (
        lambda d: d["decision"]["victims"][0].pop("uid"),
        "the recorded decision's 'victims' are malformed",
    ),
    "a decision that is a string": (
        lambda d: d.update(decision="Preempt"),
        "recorded inputs hold no decision",
    ),
    "no preemptor": (
        lambda d: d.pop("preemptor"),
        "'preemptor' is missing or no object",
    ),
    "a group decision without its group": (
        lambda d: d.update(strategy="pod-group"),
        "recorded inputs of a group decision name no group",
    ),
    "an unknown strategy": (
        lambda d: d.update(strategy="guess"),
        "recorded inputs name no known strategy: 'guess'",
    ),
    "a newer format": (
        lambda d: d.update(format=3),
        "recorded inputs in format 3; this version reads up to 2",
    ),
    "a pod that is not a pod": (
        lambda d: d["pods"].append([1, 2]),
        "recorded inputs unreadable",
    ),
    "pods that are not a list": (
        lambda d: d.update(pods={"a": 1}),
        "'pods' is missing or not a list",
    ),
    "an unknown storage kind": (
        lambda d: d.update(storage={"secrets": []}),
        "unknown storage 'secrets'",
    ),
    "a malformed rejected": (
        lambda d: d.update(rejected={"uid": 5}),
        "'rejected' is malformed",
    ),
    "twenty million unrecorded pods": (
        lambda d: d.update(podSums={"n0": [20_000_000, {"milli_cpu": 1000}, []]}),
        "recorded inputs declare 20000000 unrecorded pods on node 'n0'; at most 10,000",
    ),
    "a count that is not a number": (
        lambda d: d.update(podSums={"n0": ["many", {}, []]}),
        "recorded inputs declare 'many' unrecorded pods",
    ),
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_inputs_are_one_error_naming_the_problem(damage: str) -> None:
    change, message = DAMAGES[damage]
    with pytest.raises(RecordedInputsError) as raised:
        rebuild(damaged(change))
    assert message in str(raised.value)


def test_a_document_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(RecordedInputsError, match="not a JSON object"):
        rebuild([1, 2, 3])  # type: ignore[arg-type]


def test_the_total_is_capped_before_the_stand_ins_are_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(inputs_replay, "MAX_OBJECTS", 100)
    document = damaged(lambda d: d.update(podSums={f"n{i}": [60, {}, []] for i in range(2)}))
    with pytest.raises(RecordedInputsError, match="more than 100 objects; refused"):
        rebuild(document)


def test_objects_past_the_cap_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inputs_replay, "MAX_OBJECTS", 1)
    with pytest.raises(RecordedInputsError, match="more than 1 objects; refused"):
        rebuild(recorded())


def test_an_object_of_an_unknown_kind_is_refused() -> None:
    document = recorded()
    objects = [("nodes", document["nodes"][0]), ("secrets", {})]
    with pytest.raises(RecordedInputsError, match="unknown kind 'secrets'"):
        rebuild(document, objects)

"""The planner against kube-scheduler's own DefaultPreemption: a bounded run of the oracle
(benchmarks/oracle.py; its full run, a few hundred cases, is by hand).

Scenarios:
- for each of a few dozen generated clusters (a fixed seed), the real scheduler's decision
  and the planner's, on a snapshot taken just before, agree on the node and the victims, or
  differ only where upstream's own criteria tie (its pick among tied nodes, or among equally
  important victims, is not specified); most of the cases preempt;
- the harness tells a disagreement from a tie: the planner's victims, or its node, changed
  on a case that preempted is reported as a disagreement.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator

import pytest

from benchmarks.oracle import (
    ORACLE_FEATURE_GATES,
    Oracle,
    Outcome,
    Result,
    classify,
    generate,
)
from preemptctl.preemption.decision import Decision
from preemptctl.preemption.planner import plan
from preemptctl.preemption.snapshot import ClusterSnapshot
from tests.support.control_plane import ControlPlane

CONTROL_PLANE = {"feature_gates": ORACLE_FEATURE_GATES}
SEED = 26
CASES = 30


@pytest.fixture(scope="module")
def results(control_plane: ControlPlane) -> Iterator[list[Result]]:
    oracle = Oracle(control_plane)
    yield [oracle.run(generate(index, SEED)) for index in range(CASES)]


def test_the_planner_decides_as_kube_scheduler(results: list[Result]) -> None:
    disagreements = [
        f"case {r.case.index} ({', '.join(r.case.features) or 'plain'}): {r.verdict}: "
        f"{r.explanation}"
        for r in results
        if r.verdict not in ("agree", "tie")
    ]
    assert disagreements == [], "\n".join(disagreements)
    preempted = [r for r in results if r.upstream.node and not r.upstream.fits]
    assert len(preempted) >= CASES // 2, Counter(r.verdict for r in results)


def _decision_of(result: Result) -> Decision:
    preemptor = f"oracle/{result.case.preemptor['metadata']['name']}"
    return plan(ClusterSnapshot.from_list(result.snapshot), preemptor)


def test_other_victims_are_a_disagreement(results: list[Result]) -> None:
    case = next(r for r in results if r.verdict == "agree" and r.upstream.victims)
    spared = sorted(case.upstream.victims)[0]
    ours = dataclasses.replace(case.ours, victims=case.ours.victims - {spared})
    verdict, explanation = classify(case.upstream, ours, _decision_of(case), case.snapshot)
    assert verdict == "victims", explanation


def test_another_node_is_a_disagreement(results: list[Result]) -> None:
    case = next(
        r
        for r in results
        if r.verdict == "agree"
        and r.upstream.victims
        and "nodeName" not in [step.criterion for step in _decision_of(r).rationale.selection]
    )
    elsewhere = Outcome("a-node-upstream-never-chose", case.ours.victims, status="Preempt")
    verdict, explanation = classify(case.upstream, elsewhere, _decision_of(case), case.snapshot)
    assert verdict == "node", explanation

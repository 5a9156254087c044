"""`preemptctl replay --decision`: a recorded decision planned again with this version.

Scenarios:
- a decision recorded by the decision path replays as `same decision` (exit 0), found by
  its run ID or its preemption ID; `-o json` says the same as one JSON object
- inputs edited as a changed planner argument (max_victims) or a lower preemptor priority
  give a different decision (exit 3), each difference on its own line
- inputs not kept (too large) cannot be replayed: one line saying why, exit 1
- a group decision recorded by the decision path replays as the same decision, its members'
  nominations compared; a changed group priority is a different decision
- recorded inputs are untrusted (issue 20, finding 10): a row without its decision, with a
  decision missing its verdict, declaring 20,000,000 pods on a node, inflating past its cap,
  or referencing a pack that is gone: one line naming the problem, exit 1, no traceback
- an unknown ID, an unprintable ID, neither or both of --decision and HISTORY.json: one
  line on stderr, exit 2
- the history replay says it checks workflow determinism only
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, delete, insert, select

from preemptctl import migrations
from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.ledger.inputs import compress, latest, serialise
from preemptctl.ledger.models import decision_input_packs, decision_inputs
from preemptctl.worker.cli import main
from tests.deciding.test_group_path import two_full_nodes
from tests.deciding.test_path import three_full_nodes

PREEMPTCTL = str(Path(sys.executable).parent / "preemptctl")
HISTORIES = Path(__file__).resolve().parents[1] / "histories"


@pytest.fixture
def url(tmp_path: Path) -> str:
    made = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    migrations.upgrade(made)
    return made


@pytest.fixture
def ledger(url: str) -> Iterator[Engine]:
    engine = create_ledger_engine(url)
    yield engine
    engine.dispose()


def decided(ledger: Engine, max_bytes: int = 1 << 20) -> None:
    """One decision, run-1 of preemption p-urgent-0: two victims on node-0."""
    view = three_full_nodes()
    path = view.path(ledger, inputs_max_bytes=max_bytes)
    path.decide(view.request("urgent-0"))
    assert path.inputs is not None
    path.inputs.wait()


def group_decided(ledger: Engine) -> None:
    """One group decision, run-1 of group preemption g-train: the gang's two members placed,
    each node's pods taken."""
    view = two_full_nodes()
    path = view.path(ledger)
    path.decide_group(view.group_request("train"))
    assert path.inputs is not None
    path.inputs.wait()


def edited(ledger: Engine, run: str, change: Any, *, whole: bool = True) -> None:
    """Append run-1's inputs again as `run`, changed by `change(document)` (append-only:
    an edit is a new row): written whole, or the row as recorded (its references kept)."""
    stored = latest(ledger, "run-1")
    assert stored is not None
    document = stored.document() if whole else stored.root()
    change(document)
    with ledger.connect() as connection:
        original = connection.execute(
            select(decision_inputs).where(decision_inputs.c.run_id == "run-1")
        ).one()
    values = dict(original._mapping)
    del values["id"]
    raw = serialise(document)
    values.update(
        run_id=run,
        idempotency_key=f"edited/{run}",
        inputs=compress(raw),
        raw_bytes=len(raw),
    )
    with ledger.begin() as connection:
        connection.execute(insert(decision_inputs), values)


def replay(url: str, *args: str) -> int:
    return main(["replay", *args, "--database-url", url])


@pytest.mark.parametrize("decision", ["run-1", "p-urgent-0"])
def test_a_recorded_decision_replays_as_the_same_decision(
    url: str, ledger: Engine, decision: str, capsys: pytest.CaptureFixture[str]
) -> None:
    decided(ledger)
    assert replay(url, "--decision", decision) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("same decision: Preempt on node-0: default/low-0-")
    assert out[1].startswith("decision for default/urgent-0 (preemption p-urgent-0, run run-1)")


def test_json_output_says_the_same(
    url: str, ledger: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    decided(ledger)
    assert replay(url, "--decision", "run-1", "-o", "json") == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["same"], report["differences"], report["runId"]) == (True, [], "run-1")
    assert report["replayed"]["victims"] == report["recorded"]["victims"]


def test_a_changed_planner_argument_is_a_different_decision(
    url: str, ledger: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    decided(ledger)
    edited(ledger, "run-capped", lambda document: document["args"].update(max_victims=1))
    assert replay(url, "--decision", "run-capped") == 3
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == [
        "different decision:",
        "  verdict: Preempt -> Unschedulable",
        "  node: node-0 -> (none)",
    ]
    assert out[3].startswith("  victims removed: default/low-0-")
    assert out[4] == "  deciding criterion: nodeName -> (none)"
    assert "needs 2 victims, more than the cap of 1" in out[6]


def test_a_lower_preemptor_priority_is_a_different_decision(
    url: str, ledger: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    decided(ledger)
    edited(ledger, "run-low", lambda document: document["preemptor"].update(priority=50))
    assert replay(url, "--decision", "run-low") == 3
    assert "  verdict: Preempt -> Unschedulable" in capsys.readouterr().out


def test_inputs_not_kept_cannot_be_replayed(
    url: str, ledger: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    decided(ledger, max_bytes=100)
    assert replay(url, "--decision", "run-1") == 1
    err = capsys.readouterr().err
    assert err.startswith("preemptctl replay: cannot replay the decision of run run-1: too large: ")
    assert err.count("\n") == 1


def test_a_recorded_group_decision_replays_as_the_same_decision(
    url: str, ledger: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    group_decided(ledger)
    assert replay(url, "--decision", "g-train", "-o", "json") == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["same"], report["preemptor"], report["replayed"]["nominations"]) == (
        True,
        "default/train",
        {"default/train-0": "node-a", "default/train-1": "node-b"},
    )
    assert replay(url, "--decision", "g-train") == 0
    assert capsys.readouterr().out.startswith(
        "same decision: Preempt: 2 pod(s) placed on 2 node(s), victims default/"
    )


def test_a_changed_group_priority_is_a_different_group_decision(
    url: str, ledger: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    group_decided(ledger)

    def lower(document: dict[str, Any]) -> None:
        for group in document["podGroups"]:
            if group["name"] == "train":
                group["priority"] = 50

    edited(ledger, "run-low", lower)
    assert replay(url, "--decision", "run-low") == 3
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == ["different decision:", "  verdict: Preempt -> Unschedulable"]
    moved = "default/train-0 node-a -> (none), default/train-1 node-b -> (none)"
    assert f"  nominations: {moved}" in out


def _without_verdict(document: dict[str, Any]) -> None:
    del document["decision"]["verdict"]


HOSTILE_ROWS: dict[str, tuple[Any, str]] = {
    "no decision": (lambda document: document.pop("decision"), "recorded inputs hold no decision"),
    "no verdict": (_without_verdict, "the recorded decision's 'verdict' is missing or malformed"),
    "twenty million pods": (
        lambda document: document.update(podSums={"node-0": [20_000_000, {}, []]}),
        "recorded inputs declare 20000000 unrecorded pods on node 'node-0'",
    ),
}


@pytest.mark.parametrize("hostile", HOSTILE_ROWS)
def test_a_hostile_row_is_one_line_naming_the_problem(
    url: str, ledger: Engine, hostile: str, capsys: pytest.CaptureFixture[str]
) -> None:
    change, message = HOSTILE_ROWS[hostile]
    decided(ledger)
    edited(ledger, "run-hostile", change, whole=False)
    assert replay(url, "--decision", "run-hostile") == 1
    err = capsys.readouterr().err
    assert err.startswith("preemptctl replay: cannot replay the decision of run run-hostile: ")
    assert (message in err, err.count("\n")) == (True, 1), err


def test_a_row_inflating_past_its_cap_is_one_line(
    url: str, ledger: Engine, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("preemptctl.ledger.inputs.MAX_DOCUMENT_BYTES", 1 << 20)
    decided(ledger)
    edited(ledger, "run-bomb", lambda document: document.update(padding=" " * (2 << 20)))
    assert replay(url, "--decision", "run-bomb") == 1
    err = capsys.readouterr().err
    assert "inputs inflate to more than 1 MiB; refused as damaged" in err
    assert err.count("\n") == 1


def test_a_row_whose_objects_were_pruned_is_one_line(
    url: str, ledger: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    decided(ledger)
    with ledger.begin() as connection:  # SQLite: a pruning DELETE is allowed
        connection.execute(delete(decision_input_packs))
    assert replay(url, "--decision", "run-1") == 1
    err = capsys.readouterr().err
    assert "recorded inputs incomplete: pack(s) " in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--decision", "run-404"], "no recorded decision for 'run-404'"),
        (["--decision", "bad\x07id"], "is not a preemption or run ID"),
        ([], "give either --decision PREEMPTION-ID|RUN-ID or HISTORY.json"),
        (["history.json", "--decision", "run-1"], "give either --decision"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(
    url: str, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert replay(url, *args) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1


def test_the_history_replay_says_it_checks_determinism_only() -> None:
    completed = subprocess.run(
        [PREEMPTCTL, "replay", str(HISTORIES / "online-offline-completed.json")],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    assert "replays cleanly on this version (this checks workflow determinism only" in (
        completed.stdout
    )

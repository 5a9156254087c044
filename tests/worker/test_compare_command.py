"""`preemptctl compare`: shadow mode's decisions beside kube-scheduler's, run as a user runs it.

One ledger (Postgres) holds, per preemptor:
- prod/agree: we and the scheduler preempted default/a1, default/a2 on n1 (agree);
- prod/victims: same node n2; we chose default/b1, the scheduler default/b2 (other-victims,
  each side's pods named);
- prod/node: we chose n3, the scheduler n4 (other-node);
- prod/ours: we would have preempted default/d1, the scheduler did not (ours-only);
- prod/theirs: the scheduler preempted default/e1; we had decided Unschedulable before it
  acted (upstream-only, our verdict shown);
- prod/late: the scheduler preempted default/f1; our only decision came after, Ineligible
  (after-upstream: listed, not counted against us);
- prod/retried: we decided Preempt, then (after the scheduler acted) Ineligible: the
  Preempt decision is the one compared, and it agrees;
- prod/old-form: the scheduler's older Event form named the preemptor by name only; joined
  by name, it agrees;
- prod/nobody: we decided FitsWithoutPreemption and nobody preempted: not listed.

Scenarios:
- the table lists disagreements first, the pods named, then the totals and the ratio
  (4 agree of 8 compared: the after-upstream case apart);
- -o json gives the same per preemptor, with both sides' nodes and victims;
- --since leaves out what is older (and then nothing is there to compare, and the command
  says compare needs shadow mode);
- after a normal run (a Preempt decision carried out, nothing recorded from kube-scheduler)
  the agreement is not measured, and the table and the JSON say that compare needs shadow
  mode and how to run it, and that our decision was carried out, not a dry run;
- what the cluster wrote (names, nodes, messages with ESC, OSC, CSI, BEL, bidi overrides)
  reaches the terminal escaped, in the table and in the JSON (which parses back to the same
  values); `printable` leaves printable text, accents and CJK included, unchanged;
- bad flags (--since, -o) exit 2 with one line; an unmigrated ledger too.

Pod groups (issue 19, item 4), in a ledger of their own: our group preemptions (the group in
the preemptor columns, `group-preemption-...`, GroupDecision payloads with their units)
beside kube-scheduler's `Preempted by podgroup <uid> on node cluster` rows, with a pod's
preemption among them, each one preemptor:
- ml/train-a: both took train-b's three pods and the notebook: agree, each unit `both`, no
  node compared (a group is placed over the whole cluster);
- ml/train-x: we took train-c whole and nb-2, the scheduler two of train-c's pods and
  web-9: other-victims, train-c `split (2 of 4 taken upstream)`, nb-2 `ours-only`, web-9
  only upstream's;
- ml/train-y: the scheduler preempted for it, we had decided Unschedulable before:
  upstream-only; ml/train-z: we would have preempted, the scheduler did not: ours-only,
  every unit `ours-only`;
- prod/solo (a pod): agree, counted beside the groups: 2 of 5 compared agree;
- `-o json` types each preemptor (`pod`, `podgroup`) and gives a group's units.

End to end (the simulated cluster's scheduler in upstream-preemption mode, a real worker
in --dry-run, Temporal, a SQLite ledger), the worker records both of the scheduler's Events
(preemptor named from its view) and `compare` shows the one preemptor in agreement:
- when our dry run decides before the scheduler preempts;
- when the scheduler preempts first (its victims terminating on the node it nominated when
  our dry run decides), because shadow mode plans on the cluster as it was before.
And for the bundled gang scenario: the worker's dry-run group preemption for ml/train-a and
the simulated scheduler's four `Preempted by podgroup` Events agree, unit by unit.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest
from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment

from preemptctl import migrations
from preemptctl.emulator import SimulatedCluster
from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.ledger.events import LedgerEvent, decision_events, group_decision_events
from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.payloads import Terminal
from preemptctl.ledger.upstream import append_upstream, decisions_since, upstream_since
from preemptctl.ledger.writer import append_batch
from preemptctl.preemption.decision import Decision, PodRef, Rationale, Strategy, Verdict
from preemptctl.preemption.group_decision import GroupDecision, GroupRef, UnitChoice
from preemptctl.preemption.upstream import UpstreamPreemption
from preemptctl.worker.cli import main
from preemptctl.worker.config import load_settings
from preemptctl.worker.connections import connect_cluster
from preemptctl.worker.ports import free_port
from preemptctl.worker.runtime import running_controller
from preemptctl.worker.scenarios import BUNDLED
from preemptctl.worker.terminal import printable
from tests.support.emulator import as_list, node, pod

NOW = datetime.now(UTC).replace(microsecond=0)
T0 = NOW - timedelta(minutes=30)


def _preemptor(name: str) -> PodRef:
    return PodRef("prod", name, f"uid-{name}", 1000)


def _decide(
    engine: Engine,
    name: str,
    verdict: str,
    at: datetime,
    node: str | None = None,
    victims: tuple[str, ...] = (),
    message: str = "",
    dry_run: bool = True,
) -> None:
    preemptor = _preemptor(name)
    run = f"run-{name}-{at.timestamp()}"
    decision = Decision(
        preemptor,
        Verdict(verdict),
        message or f"{verdict} for {name}",
        Rationale(Strategy.DEFAULT),
        nominated_node=node,
        victims=tuple(PodRef("default", v, f"uid-{v}", 0) for v in victims),
    )
    batch = decision_events(f"preemption-{name}", run, preemptor, decision, at)
    if verdict == "Preempt" and dry_run:
        batch.append(
            LedgerEvent(
                f"preemption-{name}",
                run,
                EventKind.DRY_RUN,
                preemptor,
                node=node,
                payload=Terminal(reason="dry run").to_json(),
                occurred_at=at,
            )
        )
    append_batch(engine, batch)


def _upstream(
    engine: Engine,
    name: str,
    node: str,
    victims: tuple[str, ...],
    at: datetime,
    old: bool = False,
    namespace: str = "prod",
) -> None:
    append_upstream(
        engine,
        [
            UpstreamPreemption(
                event_uid=f"event-{name}-{victim}",
                occurred_at=at,
                victim_namespace="default",
                victim_name=victim,
                victim_uid=f"uid-{victim}",
                preemptor_uid="" if old else f"uid-{name}",
                preemptor_namespace=namespace if old else None,
                preemptor_name=name if old else None,
                node=node,
                message=f"Preempted by pod uid-{name} on node {node}",
            )
            for victim in victims
        ],
    )


@pytest.fixture
def ledger(pg_engine: Engine) -> Engine:
    later = T0 + timedelta(seconds=5)
    _decide(pg_engine, "agree", "Preempt", T0, "n1", ("a1", "a2"))
    _upstream(pg_engine, "agree", "n1", ("a2", "a1"), T0)
    _decide(pg_engine, "victims", "Preempt", T0, "n2", ("b1",))
    _upstream(pg_engine, "victims", "n2", ("b2",), T0)
    _decide(pg_engine, "node", "Preempt", T0, "n3", ("c1",))
    _upstream(pg_engine, "node", "n4", ("c9",), T0)
    _decide(pg_engine, "ours", "Preempt", T0, "n1", ("d1",))
    _decide(pg_engine, "theirs", "Unschedulable", T0, message="0/4 nodes are available")
    _upstream(pg_engine, "theirs", "n2", ("e1",), later)
    _upstream(pg_engine, "late", "n3", ("f1",), T0)
    _decide(
        pg_engine,
        "late",
        "Ineligible",
        later,
        message="not eligible due to a terminating pod on the nominated node.",
    )
    _decide(pg_engine, "retried", "Preempt", T0, "n1", ("g1",))
    _upstream(pg_engine, "retried", "n1", ("g1",), later)
    _decide(pg_engine, "retried", "Ineligible", later + timedelta(seconds=10))
    _decide(pg_engine, "old-form", "Preempt", T0, "n2", ("h1",))
    _upstream(pg_engine, "old-form", "n2", ("h1",), T0, old=True)
    _decide(pg_engine, "nobody", "FitsWithoutPreemption", T0)
    return pg_engine


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["compare", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_table_names_the_pods_and_gives_the_ratio(
    ledger: Engine, migrated_postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(capsys, "--database-url", migrated_postgres_url)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    results = [line.split()[:2] for line in lines if line.startswith("prod/")]
    assert results == [
        ["prod/victims", "other-victims"],
        ["prod/node", "other-node"],
        ["prod/ours", "ours-only"],
        ["prod/theirs", "upstream-only"],
        ["prod/agree", "agree"],
        ["prod/old-form", "agree"],
        ["prod/retried", "agree"],
        ["prod/late", "after-upstream"],
    ]
    assert "only ours: default/b1" in out
    assert "only upstream: default/b2" in out
    assert "upstream: node n4, victims default/c9" in out
    assert "ours:     node n3, victims default/c1" in out
    assert "upstream: no Preempted event" in out
    assert "ours:     Unschedulable: 0/4 nodes are available" in out
    assert "both: node n1, victims default/a1, default/a2" in out
    assert lines[-2] == (
        "Preemptors: 8 (3 agree, 1 other-victims, 1 other-node, 1 ours-only, "
        "1 upstream-only, 1 after-upstream)."
    )
    assert lines[-1] == (
        "Agreement: 3/7 (43%) of the preemptors compared; "
        "1 decided after upstream acted, not compared."
    )


def test_json_gives_both_sides_per_preemptor(
    ledger: Engine, migrated_postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(capsys, "--database-url", migrated_postgres_url, "-o", "json")
    assert code == 0
    document = orjson.loads(out)
    by_name = {entry["preemptor"]: entry for entry in document["preemptors"]}
    assert "prod/nobody" not in by_name
    victims = by_name["prod/victims"]
    assert (victims["result"], victims["onlyOurs"], victims["onlyUpstream"]) == (
        "other-victims",
        ["default/b1"],
        ["default/b2"],
    )
    assert victims["ours"]["node"] == victims["upstream"]["node"] == "n2"
    assert victims["ours"]["dryRun"] is True
    assert by_name["prod/retried"]["ours"]["verdict"] == "Preempt"
    assert by_name["prod/late"]["ours"]["verdict"] == "Ineligible"
    assert by_name["prod/theirs"]["upstream"]["victims"] == ["default/e1"]
    assert document["totals"]["agree"] == 3
    assert document["totals"]["compared"] == 7
    assert document["totals"]["agreement"] == pytest.approx(3 / 7)


def test_since_leaves_out_older_decisions_and_events(
    ledger: Engine, migrated_postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(capsys, "--database-url", migrated_postgres_url, "--since", "5m")
    assert code == 0
    lines = out.splitlines()
    assert lines[1] == "no preemption by either side"
    assert lines[3:5] == [
        "Preemptors: 0 (none).",
        "Agreement: not measured (nothing from kube-scheduler to compare with).",
    ]
    assert _notices(out) == [f"Nothing was recorded from kube-scheduler since {lines[0][6:-1]}."]


SHADOW_MODE_HINT = (
    "compare needs the worker in shadow mode (PREEMPT_DRY_RUN=true, or preemptctl worker "
    "--dry-run) while kube-scheduler still preempts: it then records kube-scheduler's "
    "Preempted Events beside its own dry-run decisions. On one machine: preemptctl dev "
    '--shadow. See docs/adopting.md, "Compare, in shadow mode".'
)


def _notices(out: str) -> list[str]:
    """The notices under the table, unwrapped, the shadow-mode hint checked and left out."""
    text = " ".join(out.splitlines()[out.splitlines().index("") + 3 :])
    assert SHADOW_MODE_HINT in text
    return [part.strip() for part in text.split(SHADOW_MODE_HINT) if part.strip()]


@pytest.fixture
def normal_run(pg_engine: Engine) -> Engine:
    """What a worker out of shadow mode leaves: our Preempt decision, carried out; nothing
    recorded from kube-scheduler."""
    _decide(pg_engine, "urgent", "Preempt", T0, "n1", ("low",), dry_run=False)
    return pg_engine


def test_after_a_normal_run_the_table_says_compare_needs_shadow_mode(
    normal_run: Engine, migrated_postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(capsys, "--database-url", migrated_postgres_url)
    assert code == 0
    lines = out.splitlines()
    assert lines[2].split()[:2] == ["prod/urgent", "ours-only"]
    assert "%" not in out
    assert lines[5:7] == [
        "Preemptors: 1 (1 ours-only).",
        "Agreement: not measured (nothing from kube-scheduler to compare with).",
    ]
    assert _notices(out) == [
        f"Nothing was recorded from kube-scheduler since {lines[0][6:-1]}.",
        "Carried out, not dry runs: 1 of our compared Preempt decisions (the worker was not "
        "in shadow mode), so kube-scheduler had nothing left to preempt for them.",
    ]
    assert max(len(line) for line in lines[7:]) <= 92


def test_after_a_normal_run_the_json_has_no_ratio_and_says_why(
    normal_run: Engine, migrated_postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(capsys, "--database-url", migrated_postgres_url, "-o", "json")
    assert code == 0
    document = orjson.loads(out)
    totals = document["totals"]
    assert (totals["ours-only"], totals["compared"], totals["agreement"]) == (1, 1, None)
    assert (totals["upstreamEvents"], totals["acted"]) == (0, 1)
    assert document["notices"][1] == SHADOW_MODE_HINT
    assert len(document["notices"]) == 3


HOSTILE = "\x1b]0;owned\x07\x1b[2J\x9b31m\u202eevil"


@pytest.fixture
def hostile(pg_engine: Engine) -> Engine:
    """Rows as a forged Event (recorded before the recorder checked Events) and a decision
    message could carry them: terminal control sequences in every field shown."""
    _decide(pg_engine, "mine", "Unschedulable", T0, message=f"0/4 nodes {HOSTILE}")
    _upstream(pg_engine, "mine", f"n1{HOSTILE}", (f"v{HOSTILE}",), T0)
    _upstream(pg_engine, f"x{HOSTILE}", "n2", ("v2",), T0, old=True, namespace=f"t{HOSTILE}")
    return pg_engine


def test_what_the_cluster_wrote_reaches_the_terminal_escaped(
    hostile: Engine, migrated_postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(capsys, "--database-url", migrated_postgres_url)
    assert code == 0
    assert out.replace("\n", "").isprintable()
    escaped = "\\x1b]0;owned\\x07\\x1b[2J\\x9b31m\\u202eevil"
    assert f"ours:     Unschedulable: 0/4 nodes {escaped}" in out
    assert f"upstream: node n1{escaped}, victims default/v{escaped}" in out
    assert f"t{escaped}/x{escaped}" in out


def test_the_json_escapes_them_and_reads_back_the_same(
    hostile: Engine, migrated_postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(capsys, "--database-url", migrated_postgres_url, "-o", "json")
    assert code == 0
    assert out.replace("\n", "").isprintable()
    by_uid = {entry["preemptorUid"]: entry for entry in orjson.loads(out)["preemptors"]}
    mine = by_uid["uid-mine"]
    assert mine["ours"]["message"] == f"0/4 nodes {HOSTILE}"
    assert mine["upstream"]["victims"] == [f"default/v{HOSTILE}"]
    assert by_uid[""]["preemptor"] == f"t{HOSTILE}/x{HOSTILE}"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("default/web-0", "default/web-0"),
        ("café 日本 ✓", "café 日本 ✓"),
        ("a\x1b[31mb", "a\\x1b[31mb"),
        ("bell\x07", "bell\\x07"),
        ("csi\x9b", "csi\\x9b"),
        ("del\x7f", "del\\x7f"),
        ("two\nlines\ttab", "two\\x0alines\\x09tab"),
        ("\u202eevil\u2066", "\\u202eevil\\u2066"),
        ("sep\u2028", "sep\\u2028"),
        ("tag\U000e0041", "tag\\U000e0041"),
    ],
)
def test_printable_escapes_what_a_terminal_acts_on_and_nothing_else(text: str, shown: str) -> None:
    assert printable(text) == shown


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--since", "yesterday"], "--since 'yesterday' is neither a duration"),
        (["-o", "yaml"], "unknown --output 'yaml'"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(
    migrated_postgres_url: str,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    code, out, err = _run(capsys, "--database-url", migrated_postgres_url, *argv)
    assert (code, out) == (2, "")
    assert err.startswith("preemptctl compare: ") and message in err
    assert len(err.splitlines()) == 1


def test_an_unmigrated_ledger_is_one_line_and_exit_2(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(capsys, "--database-url", postgres_url)
    assert code == 2
    assert err.startswith("preemptctl compare: ") and len(err.splitlines()) == 1


# -- pod groups ---------------------------------------------------------------------------------


def _ml(name: str) -> PodRef:
    return PodRef("ml", name, f"uid-{name}", 10)


def _decide_group(
    engine: Engine,
    name: str,
    verdict: str,
    at: datetime,
    units: dict[str, tuple[str, ...]] | None = None,
) -> None:
    """Our dry-run group preemption for ml/<name>: its decision (units: name -> pods), its
    victims, the run's dry-run end."""
    group = GroupRef("ml", name, f"uid-{name}", 1000)
    chosen = tuple(
        UnitChoice(unit, unit.startswith("podGroup"), 10, tuple(map(_ml, pods)), ("n1",), 0, "")
        for unit, pods in (units or {}).items()
    )
    decision = GroupDecision(
        group.key,
        group.uid,
        Verdict(verdict),
        f"{verdict} for {group.key}",
        victims=tuple(pod for unit in chosen for pod in unit.pods),
        units=chosen,
    )
    preemption_id, run = f"group-preemption-ml-{name}-{group.uid}", f"run-{name}"
    batch = group_decision_events(preemption_id, run, group, decision, at)
    batch.append(
        LedgerEvent(
            preemption_id,
            run,
            EventKind.DRY_RUN,
            group.as_preemptor(),
            payload=Terminal(reason="dry run").to_json(),
            occurred_at=at,
        )
    )
    append_batch(engine, batch)


def _upstream_group(engine: Engine, name: str, victims: tuple[str, ...], at: datetime) -> None:
    """kube-scheduler's rows for its preemption for the PodGroup ml/<name>."""
    append_upstream(
        engine,
        [
            UpstreamPreemption(
                event_uid=f"event-{name}-{victim}",
                occurred_at=at,
                victim_namespace="ml",
                victim_name=victim,
                victim_uid=f"uid-{victim}",
                preemptor_uid=f"uid-{name}",
                preemptor_namespace="ml",
                preemptor_name=name,
                node=None,
                message=f"Preempted by podgroup uid-{name} on node cluster",
            )
            for victim in victims
        ],
    )


TRAIN_B = ("train-b-0", "train-b-1", "train-b-2")
TRAIN_C = ("train-c-0", "train-c-1", "train-c-2", "train-c-3")


@pytest.fixture
def groups_ledger(pg_engine: Engine) -> Engine:
    later = T0 + timedelta(seconds=5)
    units_a = {"podGroup ml/train-b": TRAIN_B, "pod ml/notebook": ("notebook",)}
    _decide_group(pg_engine, "train-a", "Preempt", T0, units_a)
    _upstream_group(pg_engine, "train-a", ("notebook", *TRAIN_B), T0)
    _decide_group(
        pg_engine,
        "train-x",
        "Preempt",
        T0,
        {"podGroup ml/train-c": TRAIN_C, "pod ml/nb-2": ("nb-2",)},
    )
    _upstream_group(pg_engine, "train-x", ("train-c-0", "train-c-1", "web-9"), T0)
    _decide_group(pg_engine, "train-y", "Unschedulable", T0)
    _upstream_group(pg_engine, "train-y", ("web-7",), later)
    _decide_group(pg_engine, "train-z", "Preempt", T0, {"pod ml/nb-3": ("nb-3",)})
    _decide(pg_engine, "solo", "Preempt", T0, "n1", ("s1",))
    _upstream(pg_engine, "solo", "n1", ("s1",), T0)
    return pg_engine


def test_group_preemptions_are_compared_by_victims_and_units(
    groups_ledger: Engine, migrated_postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(capsys, "--database-url", migrated_postgres_url)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    pad = " " * len("ml/train-x  other-victims   ")  # the detail column's indent
    assert lines[1:] == [
        "PREEMPTOR   RESULT          DETAIL",
        "ml/train-x  other-victims   ours:     pod group, over the cluster, victims "
        "ml/train-c-0, ml/train-c-1, ml/train-c-2, ml/train-c-3, ml/nb-2",
        pad + "upstream: pod group, over the cluster, victims ml/train-c-0, ml/train-c-1, ml/web-9",
        pad + "only ours: ml/train-c-2, ml/train-c-3, ml/nb-2",
        pad + "only upstream: ml/web-9",
        pad + "units: podGroup ml/train-c split (2 of 4 taken upstream), pod ml/nb-2 ours-only",
        "ml/train-z  ours-only       ours:     pod group, over the cluster, victims ml/nb-3",
        pad + "upstream: no Preempted event",
        pad + "units: pod ml/nb-3 ours-only",
        "ml/train-y  upstream-only   ours:     Unschedulable: Unschedulable for ml/train-y",
        pad + "upstream: pod group, over the cluster, victims ml/web-7",
        "ml/train-a  agree           both: pod group, over the cluster, victims "
        "ml/train-b-0, ml/train-b-1, ml/train-b-2, ml/notebook",
        pad + "units: podGroup ml/train-b both, pod ml/notebook both",
        "prod/solo   agree           both: node n1, victims default/s1",
        "",
        "Preemptors: 5 (2 agree, 1 other-victims, 1 ours-only, 1 upstream-only).",
        "Agreement: 2/5 (40%) of the preemptors compared.",
    ]


def test_the_json_types_each_preemptor_and_gives_a_groups_units(
    groups_ledger: Engine, migrated_postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(capsys, "--database-url", migrated_postgres_url, "-o", "json")
    assert code == 0
    by_name = {entry["preemptor"]: entry for entry in orjson.loads(out)["preemptors"]}
    assert {name: entry["preemptorType"] for name, entry in by_name.items()} == {
        "ml/train-a": "podgroup",
        "ml/train-x": "podgroup",
        "ml/train-y": "podgroup",
        "ml/train-z": "podgroup",
        "prod/solo": "pod",
    }
    train_x = by_name["ml/train-x"]
    assert train_x["preemptorUid"] == "uid-train-x"
    assert (train_x["ours"]["node"], train_x["upstream"]["node"]) == (None, None)
    assert train_x["upstream"]["nodes"] == []
    assert train_x["units"] == [
        {
            "unit": "podGroup ml/train-c",
            "pods": [f"ml/{pod}" for pod in TRAIN_C],
            "result": "split",
            "upstreamTook": 2,
        },
        {"unit": "pod ml/nb-2", "pods": ["ml/nb-2"], "result": "ours-only", "upstreamTook": 0},
    ]
    assert [unit["result"] for unit in by_name["ml/train-a"]["units"]] == ["both", "both"]
    assert "units" not in by_name["prod/solo"]


# -- end to end: the simulated kube-scheduler preempting, the worker in shadow mode ---------------


async def _until(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


@pytest.mark.parametrize("scheduler_first", [False, True], ids=["ours-first", "upstream-first"])
async def test_shadow_mode_records_upstream_and_compare_agrees(
    temporal: WorkflowEnvironment,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    scheduler_first: bool,
) -> None:
    """ours-first: the scheduler holds its preemption until our dry run has decided, then
    preempts. upstream-first: it preempts in the very pass that marks the pod Unschedulable,
    as kube-scheduler does, so our dry run decides with the victims already terminating on
    the nominated node (kept terminating here, 30 s, long enough for a retried dry run).
    Either way the recorder believes an Event only once it has seen its victim marked by the
    scheduler: ours-first keeps victims 2 s, as dev's simulated kubelet does."""
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    migrations.upgrade(url)
    engine = create_ledger_engine(url)
    cluster = SimulatedCluster(
        max_grace_seconds=30.0 if scheduler_first else 2.0,
        upstream_preemption=True,
        preemption_delay=0.0 if scheduler_first else 3600.0,
    )
    cluster.load(as_list(node("n1", cpu="1")))
    cluster.start()
    settings = load_settings(
        overrides={
            "kubeconfig": str(cluster.kubeconfig_path),
            "database_url": url,
            "metrics_port": free_port(),
            "probe_port": free_port(),
            "task_queue": f"shadow-{uuid.uuid4()}",
            "dry_run": True,
        },
        environ={},
    )
    try:
        async with running_controller(
            settings, temporal.client, connect_cluster(settings), engine
        ) as controller:
            assert controller.upstream is not None
            cluster.load(
                as_list(
                    pod("low-a", node_name="n1", cpu="500m", priority=10),
                    pod("low-b", node_name="n1", cpu="500m", priority=20),
                    pod("urgent", cpu="1", priority=1000),
                )
            )
            await _until(
                lambda: any(d.verdict == "Preempt" for d in decisions_since(engine)),
                "the dry-run decision",
            )
            if not scheduler_first:
                assert cluster.emulator.pod("default/low-a") is not None  # nothing touched
                cluster.scheduler.preemption_delay = 0.0  # now kube-scheduler preempts
                await _until(
                    lambda: (
                        (cluster.emulator.pod("default/urgent") or {})
                        .get("spec", {})
                        .get("nodeName")
                        == "n1"
                    ),
                    "the preemptor bound",
                )
            await _until(lambda: len(upstream_since(engine)) == 2, "the recorded Events")
            assert controller.upstream.stats.recorded == 2
            scraped = controller.metrics.registry.get_sample_value
            assert scraped("preemptctl_upstream_preemptions_recorded_total") == 2
    finally:
        cluster.stop()
        engine.dispose()
    recorded = upstream_since(create_ledger_engine(url))
    assert {(r.victim_key, r.preemptor_key, r.node) for r in recorded} == {
        ("default/low-a", "default/urgent", "n1"),
        ("default/low-b", "default/urgent", "n1"),
    }
    code, out, _ = _run(capsys, "--database-url", url)
    assert code == 0
    assert out.splitlines()[1:3] == [
        "PREEMPTOR       RESULT          DETAIL",
        "default/urgent  agree           both: node n1, victims default/low-b, default/low-a",
    ]
    assert out.splitlines()[-1] == "Agreement: 1/1 (100%) of the preemptors compared."


async def test_shadow_mode_compares_a_gang_with_the_schedulers_group_preemption(
    temporal: WorkflowEnvironment, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The bundled gang scenario: our dry-run group preemption for ml/train-a decides first
    (the scheduler holds its preemption until then), then the simulated kube-scheduler
    preempts for the PodGroup as upstream's PodGroupPostFilter does, writing a `Preempted by
    podgroup` Event on each victim; the worker records all four and compare agrees, unit by
    unit."""
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    migrations.upgrade(url)
    engine = create_ledger_engine(url)
    cluster = SimulatedCluster(
        max_grace_seconds=2.0, upstream_preemption=True, preemption_delay=3600.0
    )
    cluster.start()
    settings = load_settings(
        overrides={
            "kubeconfig": str(cluster.kubeconfig_path),
            "database_url": url,
            "metrics_port": free_port(),
            "probe_port": free_port(),
            "task_queue": f"shadow-{uuid.uuid4()}",
            "dry_run": True,
        },
        environ={},
    )
    try:
        async with running_controller(
            settings, temporal.client, connect_cluster(settings), engine
        ) as controller:
            assert controller.upstream is not None
            cluster.load(BUNDLED["gang"])
            await _until(
                lambda: any(d.by_group and d.verdict == "Preempt" for d in decisions_since(engine)),
                "the dry-run group decision",
            )
            assert cluster.emulator.pod("ml/notebook") is not None  # nothing touched
            cluster.scheduler.preemption_delay = 0.0  # now kube-scheduler preempts
            await _until(lambda: len(upstream_since(engine)) == 4, "the recorded Events")
    finally:
        cluster.stop()
        engine.dispose()
    recorded = upstream_since(create_ledger_engine(url))
    assert {(r.preemptor_key, r.node) for r in recorded} == {("ml/train-a", None)}
    assert sorted(r.victim_key for r in recorded) == [
        "ml/notebook",
        "ml/train-b-0",
        "ml/train-b-1",
        "ml/train-b-2",
    ]
    code, out, _ = _run(capsys, "--database-url", url)
    assert code == 0
    lines = out.splitlines()
    assert lines[2].startswith("ml/train-a  agree           both: pod group, over the cluster, ")
    assert lines[3].endswith("units: podGroup ml/train-b both, pod ml/notebook both")
    assert lines[-1] == "Agreement: 1/1 (100%) of the preemptors compared."

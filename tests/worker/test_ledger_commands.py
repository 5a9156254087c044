"""`preemptctl migrate`, `history` and `explain`, run the way a user runs them.

Scenarios:
- migrate brings an empty Postgres database to head and says so; running it again is harmless
- migrate with no URL creates the embedded SQLite ledger under $XDG_STATE_HOME
- with no ledger named, history, explain, compare and replay --decision read the newest
  `preemptctl dev` run's ledger, saying which on stderr, unless the embedded ledger was
  written after it
- PREEMPT_DATABASE_URL selects the database; --database-url overrides it
- a postgresql:// URL (no driver) works
- history prints a table, most recent first: a header line per preemption (preemptor, ID,
  outcome), then one line per attempt
- a preemption failed then retried by a person and completed shows both attempts, each
  with its own start, outcome and duration
- history --json (and -o json) prints one JSON object per attempt, with the preemption's ID,
  the attempt's number and total, how it was started (the first attempt by the trigger) and
  whether retrying can help; -o yaml one document per attempt; -o wide adds who started each
  attempt, where the preemptor was scheduled (a group: how many members were bound), and
  the run ID
- history --parked tells each parked pod, since when, the cause and the retry command;
  -o json the parking attempt's record with the same
- with a Temporal UI address (PREEMPT_TEMPORAL_UI_URL, --temporal-ui-url, or a settings
  file, whose database_url is then the ledger), history prints a link per preemption (-o
  wide and --json: per attempt), explain one per attempt
- explain tells every attempt of a preemptor, with what changed between them, and heads a
  victim's entry by its fate
- history on an empty ledger says nothing matches
- explain tells a victim's story: by whom, where, why, its fate
- explain tells a preemptor's story: decision, victims' fates, scheduling
- each bad input exits 2 with one line naming the problem: unparseable --since (or one
  reaching back 800000 days), unknown --outcome, bad --limit (a superscript digit, a huge
  number), malformed pod, unmigrated database, missing SQLite ledger (never sent to
  `migrate` when none is named, nor for a dev run's), unsupported URL, a URL
  with a bad port or connect_timeout (its password never shown), a pod not in the ledger,
  an unknown -o format, a settings file that cannot be read
- an unreachable database is a runtime failure: one line, exit 1
- the installed `preemptctl` script reports an unreachable database in one line, exit 1
- durations and ISO times are both accepted by --since
- a group preemption in history: its group as preemptor, "pod group" in its header with its
  victims' nodes and its members' counted apart (never their union), the NODE column where
  its members are placed (-o json: both lists); explain tells it as a preempting pod group,
  in the group's words
- a member a group preemption placed (named only in its `member_placed` events), on SQLite and
  on Postgres: explain tells each of its group's preemptions, newest first, headed by where
  it was placed and its nomination; history --pod finds them; the same name in another
  namespace, a longer name or a shorter one, is no member
- a pod group taken whole as a victim unit: explain of its name tells each attempt that took
  it, why its unit could not stay, each of its pods with its node and fate
- in shadow mode a dry run's victims read "would have been a victim (dry run)", with what
  kube-scheduler did to each (its Preempted Event, or none recorded), never "spared"; the
  preemptor's placement is said to be kube-scheduler's
- text the ledger keeps as the cluster wrote it (an admission webhook's message with ESC, OSC
  and CSI sequences, a bidi override) is printed escaped by history (table, --parked, -o
  json, -o yaml) and explain: nothing reaches the terminal raw, and JSON reads back the
  same values;
- a UI address with user info prints its links with the password masked;
- a parked group preemption offers `preemptctl retry --pod-group NS/NAME`;
- a parked pod later bound by the scheduler (recorded in the ledger) is parked no more:
  `--parked` leaves it out, `--outcome failed` says where it was bound and offers no retry,
  explain says nothing is left to retry
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest
import yaml

from preemptctl import migrations
from preemptctl.ledger.engine import DATABASE_URL_ENV, create_ledger_engine
from preemptctl.ledger.events import LedgerEvent, decision_events
from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.payloads import Terminal
from preemptctl.ledger.upstream import append_upstream
from preemptctl.ledger.vocabulary import Outcome
from preemptctl.ledger.writer import append_batch, record_bound_after_end, record_scheduled
from preemptctl.preemption.decision import PodRef
from preemptctl.preemption.upstream import UpstreamPreemption
from preemptctl.worker.cli import main
from preemptctl.worker.errors import UsageError
from preemptctl.worker.ledger_commands import NOTHING_MATCHES, parse_since
from tests.ledger.builders import (
    API,
    BATCH_8,
    T0,
    TRAIN_A,
    completed_preemption,
    event,
    failed_attempt,
    four_candidate,
    group_preemption,
    retried,
)
from tests.support.postgres import fresh_database

PREEMPTCTL = Path(sys.executable).with_name("preemptctl")
WEB = PodRef("prod", "web-1", "uid-web-1", 900)
LOW = PodRef("default", "low-1", "uid-low-1", 10)
FIX = "RBAC fixed: delete on pods granted"
DENIED = 'pods "batch-7" is forbidden: cannot delete (403 Forbidden)'
UI = "http://ui.example:8080"


@pytest.fixture(autouse=True)
def _no_ambient_ledger(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test may read or write the developer's own ledger."""
    monkeypatch.delenv(DATABASE_URL_ENV, raising=False)
    for name in ("PREEMPT_TEMPORAL_UI_URL", "PREEMPT_CONFIG", "PREEMPT_TEMPORAL_NAMESPACE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


@pytest.fixture
def empty_postgres() -> Iterator[str]:
    with fresh_database() as url:
        yield url


@pytest.fixture
def ledger_url(empty_postgres: str) -> str:
    """A migrated ledger with two preemptions by prod/api-0 on node-3: completed, then failed."""
    migrations.upgrade(empty_postgres)
    engine = create_ledger_engine(empty_postgres)
    append_batch(engine, completed_preemption("p-first", start=T0))
    append_batch(
        engine,
        completed_preemption(
            "p-second", victims=[BATCH_8], start=T0 + timedelta(hours=2), outcome=EventKind.FAILED
        ),
    )
    engine.dispose()
    return empty_postgres


@pytest.fixture
def attempts_url(empty_postgres: str) -> str:
    """A migrated ledger with prod/api-0's preemption p-retried: attempt 1 failed on a
    denied delete (not retryable), a person retried it 10 minutes later, attempt 2
    completed; and prod/web-1's p-parked, failed on a denied delete, never retried."""
    migrations.upgrade(empty_postgres)
    engine = create_ledger_engine(empty_postgres)
    later = T0 + timedelta(minutes=10)
    append_batch(
        engine,
        [
            *failed_attempt("p-retried"),
            retried(
                "p-retried", later, new_run="run-2", previous_run="run-1", by="person", reason=FIX
            ),
            *completed_preemption("p-retried", start=later, run_id="run-2"),
        ],
    )
    append_batch(
        engine,
        failed_attempt("p-parked", preemptor=WEB, victims=[LOW], start=T0 + timedelta(hours=1)),
    )
    engine.dispose()
    return empty_postgres


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_migrate_brings_postgres_to_head_twice_harmlessly(
    capsys: pytest.CaptureFixture[str], empty_postgres: str
) -> None:
    first = _run(capsys, "migrate", "--database-url", empty_postgres)
    second = _run(capsys, "migrate", "--database-url", empty_postgres)
    head = migrations.head_revision()
    assert first[0] == second[0] == 0
    assert first[1].endswith(f"is at schema revision {head} (head)\n")
    assert first[1] == second[1]


def test_migrate_without_a_url_creates_the_embedded_sqlite_ledger(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, _ = _run(capsys, "migrate")
    path = tmp_path / "state" / "preemptctl" / "ledger.sqlite"
    assert (code, path.exists()) == (0, True)
    assert str(path) in out
    assert _run(capsys, "history")[:2] == (0, "no preemptions in the ledger match\n")


def test_the_environment_selects_the_database_and_the_flag_overrides_it(
    capsys: pytest.CaptureFixture[str], ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DATABASE_URL_ENV, ledger_url)
    code, out, _ = _run(capsys, "history")
    assert (code, out.count("prod/api-0")) == (0, 2)
    code, _, err = _run(capsys, "history", "--database-url", f"sqlite:///{Path('/nonexistent/x')}")
    assert (code, err) == (
        2,
        "preemptctl history: no ledger at /nonexistent/x; run `preemptctl migrate` first\n",
    )


def test_a_postgresql_url_without_a_driver_works(
    capsys: pytest.CaptureFixture[str], ledger_url: str
) -> None:
    bare = ledger_url.replace("postgresql+psycopg://", "postgresql://")
    assert _run(capsys, "history", "--limit", "1", "--database-url", bare)[0] == 0


def test_history_prints_a_table_most_recent_first(
    capsys: pytest.CaptureFixture[str], ledger_url: str
) -> None:
    code, out, err = _run(capsys, "history", "--database-url", ledger_url)
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "PREEMPTOR / #  STARTED               NODE    VICTIMS  OUTCOME    DURATION",
        "prod/api-0     p-second: failed after 1 attempt",
        "  #1           2026-11-21 14:00:00Z  node-3  1        failed     6.0s",
        "prod/api-0     p-first: completed after 1 attempt",
        "  #1           2026-11-21 12:00:00Z  node-3  2        completed  8.0s",
    ]


def test_history_groups_attempts_under_their_preemption(
    capsys: pytest.CaptureFixture[str], attempts_url: str
) -> None:
    code, out, _ = _run(capsys, "history", "--pod", "prod/api-0", "--database-url", attempts_url)
    assert code == 0
    assert out.splitlines() == [
        "PREEMPTOR / #  STARTED               NODE    VICTIMS  OUTCOME    DURATION",
        "prod/api-0     p-retried: completed after 2 attempts",
        "  #1           2026-11-21 12:00:00Z  node-3  2        failed     2.0s",
        "  #2           2026-11-21 12:10:00Z  node-3  2        completed  8.0s",
    ]


def test_history_json_is_one_record_per_attempt(
    capsys: pytest.CaptureFixture[str], attempts_url: str
) -> None:
    code, out, _ = _run(
        capsys, "history", "--json", "--pod", "prod/api-0", "--database-url", attempts_url
    )
    first, second = (orjson.loads(line) for line in out.splitlines())
    assert code == 0
    keys = ("preemptionId", "attempt", "attempts", "runId", "outcome", "durationSeconds")
    assert [tuple(r[k] for k in keys) for r in (first, second)] == [
        ("p-retried", 1, 2, "run-1", "failed", 2.0),
        ("p-retried", 2, 2, "run-2", "completed", 8.0),
    ]
    assert (first["error"], first["retryable"], first["startedBy"]) == (DENIED, False, "trigger")
    assert [(v["name"], v["fate"]) for v in first["victims"]] == [
        ("batch-7", "failed"),
        ("batch-8", "spared"),
    ]
    assert (second["startedBy"], second["retryReason"], second["previousRunId"]) == (
        "person",
        FIX,
        "run-1",
    )
    assert (second["error"], second["retryable"], second["status"]) == (None, None, "finished")
    assert "uiUrl" not in second


def test_history_json_prints_one_object_per_line(
    capsys: pytest.CaptureFixture[str], ledger_url: str
) -> None:
    code, out, _ = _run(
        capsys, "history", "--json", "--outcome", "completed", "--database-url", ledger_url
    )
    (line,) = out.splitlines()
    shown = orjson.loads(line)
    assert code == 0
    assert (shown["preemptionId"], shown["outcome"], shown["durationSeconds"]) == (
        "p-first",
        "completed",
        8.0,
    )
    assert [v["fate"] for v in shown["victims"]] == ["deleted", "deleted"]
    assert (shown["attempt"], shown["attempts"]) == (1, 1)


def test_history_of_an_empty_ledger(capsys: pytest.CaptureFixture[str], ledger_url: str) -> None:
    code, out, _ = _run(capsys, "history", "--node", "node-42", "--database-url", ledger_url)
    assert (code, out) == (0, "no preemptions in the ledger match\n")


def test_explain_a_victim(capsys: pytest.CaptureFixture[str], ledger_url: str) -> None:
    code, out, _ = _run(capsys, "explain", "default/batch-7", "--database-url", ledger_url)
    assert code == 0
    assert out.splitlines()[:3] == [
        "default/batch-7 as a victim (1, newest first):",
        "",
        "2026-11-21 12:00:00Z  deleted by the preemption for prod/api-0 (priority 1000) on node-3",
    ]
    assert "  in attempt 1 of 1 of p-first (run run-1)" in out
    assert "node-3 was chosen by minHighestPriority" in out
    assert "fate: deleted at 2026-11-21 12:00:02Z (2.0s after the decision)" in out


def test_explain_a_preemptor(capsys: pytest.CaptureFixture[str], ledger_url: str) -> None:
    code, out, _ = _run(capsys, "explain", "prod/api-0", "--database-url", ledger_url)
    assert code == 0
    assert out.startswith("prod/api-0 as a preemptor (2, newest first):\n")
    assert out.index("  p-second: failed") < out.index("  p-first: completed")
    assert "    victim default/batch-8 (priority 50): deleted at" in out
    assert (
        "prod/api-0 was scheduled on node-3 at 2026-11-21 12:00:08Z, 8.0s after the decision" in out
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["history", "--since", "yesterday"],
            "preemptctl history: --since 'yesterday' is neither a duration (30m, 2h, 1d12h) "
            "nor an ISO 8601 time",
        ),
        (
            ["history", "--outcome", "won"],
            "preemptctl history: unknown --outcome 'won'; use one of: "
            + ", ".join(outcome.value for outcome in Outcome),
        ),
        (
            ["history", "--limit", "-3"],
            "preemptctl history: --limit must be a whole number from 1 to 100000, not '-3'",
        ),
        (
            ["history", "--limit", "²"],
            "preemptctl history: --limit must be a whole number from 1 to 100000, not '²'",
        ),
        (
            ["history", "--limit", "9" * 4000],
            f"preemptctl history: --limit must be a whole number from 1 to 100000, "
            f"not '{'9' * 4000}'",
        ),
        (
            ["history", "--limit", "100001"],
            "preemptctl history: --limit must be a whole number from 1 to 100000, not '100001'",
        ),
        (
            ["history", "--since", "800000d"],
            "preemptctl history: --since '800000d' reaches back more than 100 years",
        ),
        (
            ["history", "--since", "9" * 100 + "d"],
            f"preemptctl history: --since '{'9' * 100}d' is neither a duration (30m, 2h, 1d12h) "
            "nor an ISO 8601 time",
        ),
        (
            ["history", "-o", "xml"],
            "preemptctl history: unknown --output 'xml'; use one of: table, wide, json, yaml",
        ),
        (
            ["history", "--pod", "api-0"],
            "preemptctl history: --pod must be NAMESPACE/NAME, not 'api-0'",
        ),
        (["explain", "a/b/c"], "preemptctl explain: the pod must be NAMESPACE/NAME, not 'a/b/c'"),
        (
            ["history", "--config", "/nonexistent/settings.yaml"],
            "preemptctl history: cannot read settings file /nonexistent/settings.yaml: "
            "No such file or directory",
        ),
        (
            ["explain", "default/nobody"],
            "preemptctl explain: default/nobody is not in the ledger, as preemptor, as victim, "
            "as a member of a preempting pod group or as a pod group taken as a victim unit",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str], ledger_url: str, argv: list[str], message: str
) -> None:
    code, out, err = _run(capsys, *argv, "--database-url", ledger_url)
    assert (code, out, err) == (2, "", message + "\n")


def test_an_unreachable_database_exits_1_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"postgresql://postgres@127.0.0.1:{_closed_port()}/ledger"
    code, _, err = _run(capsys, "explain", "prod/api-0", "--database-url", url)
    assert code == 1
    assert err.startswith(
        "preemptctl explain: cannot reach the ledger database postgresql+psycopg://"
    )
    assert err.count("\n") == 1


def test_an_unmigrated_database_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str], empty_postgres: str
) -> None:
    code, _, err = _run(capsys, "history", "--database-url", empty_postgres)
    assert code == 2
    assert err.endswith("has no ledger schema; run `preemptctl migrate` first\n")
    assert err.count("\n") == 1


def test_a_missing_embedded_ledger_exits_2_and_is_not_created(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = _run(capsys, "explain", "prod/api-0")
    assert (code, err.count("\n")) == (2, 1)
    state = tmp_path / "state" / "preemptctl"
    assert err == (
        f"preemptctl explain: no ledger at {state / 'ledger.sqlite'}, and no `preemptctl dev` "
        f"run has left one in {state / 'dev'}: name the worker's ledger with --database-url or "
        "PREEMPT_DATABASE_URL, or run `preemptctl dev` (each run records in a ledger of its "
        "own)\n"
    )
    assert "migrate" not in err  # an empty ledger would answer nothing
    assert not (state / "ledger.sqlite").exists()


def _sqlite_ledger(path: Path, story: list[LedgerEvent], written: float) -> str:
    """A migrated SQLite ledger at `path` holding `story`, last written at `written`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{path}"
    migrations.upgrade(url)
    engine = create_ledger_engine(url)
    append_batch(engine, story)
    engine.dispose()
    for file in path.parent.glob(f"{path.name}*"):
        os.utime(file, (written, written))
    return url


def test_with_no_ledger_named_the_newest_dev_runs_is_read_and_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    dev = tmp_path / "state" / "preemptctl" / "dev"
    _sqlite_ledger(
        dev / "ledger-2026-12-01T100000Z-aaaa.sqlite", completed_preemption("p-old"), 1e9
    )
    newest = dev / "ledger-2026-12-02T100000Z-0000.sqlite"
    _sqlite_ledger(newest, completed_preemption("p-new"), 1e9 - 60)
    notice = (
        f"reading sqlite:///{newest}, the newest `preemptctl dev` run's ledger (none named: "
        "--database-url or PREEMPT_DATABASE_URL names another)\n"
    )
    code, out, err = _run(capsys, "history")
    assert (code, err) == (0, notice)
    assert "p-new" in out and "p-old" not in out
    code, out, err = _run(capsys, "explain", "prod/api-0")
    assert (code, err) == (0, notice)
    assert "p-new: completed after 1 attempt" in out
    code, _, err = _run(capsys, "compare")
    assert (code, err) == (0, notice)
    code, _, err = _run(capsys, "replay", "--decision", "p-new")
    assert err.startswith(notice)


def test_an_embedded_ledger_written_after_the_dev_run_is_read_instead(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    state = tmp_path / "state" / "preemptctl"
    _sqlite_ledger(
        state / "dev" / "ledger-2026-12-01T100000Z-aaaa.sqlite", completed_preemption("p-dev"), 1e9
    )
    _sqlite_ledger(state / "ledger.sqlite", completed_preemption("p-worker"), 1e9 + 60)
    code, out, err = _run(capsys, "history")
    assert (code, err) == (0, "")
    assert "p-worker" in out and "p-dev" not in out


def test_a_named_dev_ledger_that_was_removed_is_not_sent_to_migrate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    gone = tmp_path / "state" / "preemptctl" / "dev" / "ledger-2026-12-01T100000Z-aaaa.sqlite"
    code, _, err = _run(capsys, "history", "--database-url", f"sqlite:///{gone}")
    assert (code, err) == (
        2,
        f"preemptctl history: no ledger at {gone}: that `preemptctl dev` run's ledger was "
        "removed\n",
    )


def test_an_unsupported_url_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "migrate", "--database-url", "mysql://db/ledger")
    assert (code, err) == (
        2,
        "preemptctl migrate: unsupported database 'mysql': use postgresql:// or sqlite:///\n",
    )


def test_the_installed_script_reports_an_unreachable_database_in_one_line(tmp_path: Path) -> None:
    env = {**os.environ, DATABASE_URL_ENV: f"postgresql://postgres@127.0.0.1:{_closed_port()}/x"}
    done = subprocess.run(
        [str(PREEMPTCTL), "history", "--since", "2h"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith("preemptctl history: cannot reach the ledger database")
    assert done.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "postgresql://u:hunter2@127.0.0.1:abc/ledger",
            "preemptctl history: not a database URL: postgresql://u:***@127.0.0.1:abc/ledger",
        ),
        (
            "postgresql://u:hunter2@127.0.0.1:70000/ledger",
            "preemptctl history: database URL postgresql+psycopg://u:***@127.0.0.1:70000/ledger: "
            "the port must be from 1 to 65535",
        ),
        (
            "postgresql://u:hunter2@127.0.0.1/ledger?connect_timeout=abc",
            "preemptctl history: database URL "
            "postgresql+psycopg://u:***@127.0.0.1/ledger?connect_timeout=abc: "
            "connect_timeout must be whole seconds from 0 to 3600",
        ),
    ],
)
def test_a_database_url_that_cannot_work_exits_2_without_its_password(
    capsys: pytest.CaptureFixture[str], url: str, message: str
) -> None:
    code, out, err = _run(capsys, "history", "--database-url", url)
    assert (code, out, err) == (2, "", message + "\n")


def test_history_yaml_is_one_document_per_preemption(
    capsys: pytest.CaptureFixture[str], ledger_url: str
) -> None:
    code, out, _ = _run(capsys, "history", "-o", "yaml", "--database-url", ledger_url)
    documents = list(yaml.safe_load_all(out))
    assert code == 0
    assert [d["preemptionId"] for d in documents] == ["p-second", "p-first"]


def test_history_wide_adds_who_started_scheduling_and_the_run(
    capsys: pytest.CaptureFixture[str], attempts_url: str
) -> None:
    code, out, _ = _run(
        capsys, "history", "-o", "wide", "--pod", "prod/api-0", "--database-url", attempts_url
    )
    header, _, *rows = out.splitlines()
    assert code == 0
    assert header.endswith("DURATION  STARTED BY  SCHEDULED  RUN")
    assert [row.split()[-3:] for row in rows] == [
        ["trigger", "-", "run-1"],
        ["person", "node-3", "run-2"],
    ]


def test_history_parked_lists_the_pod_the_cause_and_the_command(
    capsys: pytest.CaptureFixture[str], attempts_url: str
) -> None:
    code, out, _ = _run(capsys, "history", "--parked", "--database-url", attempts_url)
    assert code == 0
    assert out.splitlines() == [
        "prod/web-1  parked since 2026-11-21 13:00:02Z, after 1 attempt (p-parked)",
        f"  cause:  failed: {DENIED}",
        "  retry:  preemptctl retry prod/web-1  (once the cause is fixed; --reason TEXT says how)",
    ]


def test_history_parked_json_is_the_parking_attempt(
    capsys: pytest.CaptureFixture[str], attempts_url: str
) -> None:
    code, out, _ = _run(capsys, "history", "--parked", "--json", "--database-url", attempts_url)
    (record,) = (orjson.loads(line) for line in out.splitlines())
    assert code == 0
    assert {k: record[k] for k in ("preemptionId", "attempt", "retryable", "parkedSince")} == {
        "preemptionId": "p-parked",
        "attempt": 1,
        "retryable": False,
        "parkedSince": "2026-11-21T13:00:02+00:00",
    }
    assert (record["cause"], record["retryCommand"]) == (
        f"failed: {DENIED}",
        "preemptctl retry prod/web-1",
    )


def test_history_parked_on_a_ledger_without_any(
    capsys: pytest.CaptureFixture[str], ledger_url: str
) -> None:
    code, out, _ = _run(capsys, "history", "--parked", "--database-url", ledger_url)
    assert (code, out) == (0, "no parked preemptions in the ledger\n")


def test_a_ui_address_gives_a_link_per_attempt(
    capsys: pytest.CaptureFixture[str], attempts_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PREEMPT_TEMPORAL_UI_URL", UI + "/")
    monkeypatch.setenv("PREEMPT_TEMPORAL_NAMESPACE", "prod ns")
    page = f"{UI}/namespaces/prod%20ns/workflows/p-retried"
    argv = ("--pod", "prod/api-0", "--database-url", attempts_url)
    _, out, _ = _run(capsys, "history", *argv)
    assert out.splitlines()[-1] == f"  ui           {page}/run-2/user-metadata"
    _, out, _ = _run(capsys, "history", "-o", "wide", *argv)
    assert [line.split()[-1] for line in out.splitlines()[2:]] == [
        f"{page}/run-1/user-metadata",
        f"{page}/run-2/user-metadata",
    ]
    _, out, _ = _run(capsys, "history", "--json", *argv)
    assert [orjson.loads(line)["uiUrl"] for line in out.splitlines()] == [
        f"{page}/run-1/user-metadata",
        f"{page}/run-2/user-metadata",
    ]
    _, out, _ = _run(capsys, "explain", "prod/api-0", "--database-url", attempts_url)
    assert f"    see {page}/run-2/user-metadata" in out.splitlines()


def test_the_ui_flag_overrides_the_environment(
    capsys: pytest.CaptureFixture[str], attempts_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PREEMPT_TEMPORAL_UI_URL", "http://elsewhere")
    argv = ("--parked", "--json", "--temporal-ui-url", UI, "--database-url", attempts_url)
    _, out, _ = _run(capsys, "history", *argv)
    assert orjson.loads(out)["uiUrl"] == (
        f"{UI}/namespaces/default/workflows/p-parked/run-1/user-metadata"
    )


def test_a_settings_file_gives_the_ui_address_and_the_ledger(
    capsys: pytest.CaptureFixture[str], attempts_url: str, tmp_path: Path
) -> None:
    settings = tmp_path / "settings.yaml"
    settings.write_text(f"temporal_ui_url: {UI}\ndatabase_url: {attempts_url}\n")
    code, out, _ = _run(capsys, "history", "--parked", "--json", "--config", str(settings))
    assert code == 0
    assert orjson.loads(out)["uiUrl"] == (
        f"{UI}/namespaces/default/workflows/p-parked/run-1/user-metadata"
    )


def test_explain_tells_every_attempt_and_what_changed(
    capsys: pytest.CaptureFixture[str], attempts_url: str
) -> None:
    code, out, _ = _run(capsys, "explain", "prod/api-0", "--database-url", attempts_url)
    lines = out.splitlines()
    assert code == 0
    assert lines[2] == "2026-11-21 12:00:00Z  p-retried: completed after 2 attempts"
    assert [line for line in lines if line.startswith("  attempt ")] == [
        f"  attempt 1 at 2026-11-21 12:00:00Z, run run-1: failed: {DENIED} (not retryable: "
        "the cause must be fixed first), took 2.0s",
        "  attempt 2 at 2026-11-21 12:10:00Z, run run-2: completed, took 8.0s",
    ]
    assert f"    retried by a person (preemptctl retry) after run run-1 (failed): {FIX}" in lines
    assert (
        "    changed since attempt 1: the same node and victims; attempt 1's error is gone" in lines
    )


def test_explain_heads_a_victims_entries_by_their_fate(
    capsys: pytest.CaptureFixture[str], attempts_url: str
) -> None:
    code, out, _ = _run(capsys, "explain", "default/batch-8", "--database-url", attempts_url)
    headings = [line for line in out.splitlines() if line.startswith("2026")]
    assert code == 0
    assert headings == [  # newest first: the retry deleted it, after attempt 1 spared it
        "2026-11-21 12:10:00Z  deleted by the preemption for prod/api-0 (priority 1000) on node-3",
        "2026-11-21 12:00:00Z  spared: chosen by the preemption for prod/api-0 (priority 1000) "
        "on node-3, which ended before deleting it",
    ]
    assert out.startswith("default/batch-8 as a victim (2, newest first):\n")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2h", datetime(2026, 1, 1, 10, tzinfo=UTC)),
        ("1d12h", datetime(2025, 12, 31, 0, tzinfo=UTC)),
        ("90m", datetime(2026, 1, 1, 10, 30, tzinfo=UTC)),
        ("2026-01-01T08:00:00Z", datetime(2026, 1, 1, 8, tzinfo=UTC)),
        ("2026-01-01T09:00:00+01:00", datetime(2026, 1, 1, 8, tzinfo=UTC)),
        ("2026-01-01", datetime(2026, 1, 1, tzinfo=UTC)),
    ],
)
def test_since_accepts_durations_and_iso_times(text: str, expected: datetime) -> None:
    assert parse_since(text, now=datetime(2026, 1, 1, 12, tzinfo=UTC)) == expected


def test_since_refuses_a_negative_or_unit_less_duration() -> None:
    for text in ("-2h", "15", "2 h"):
        with pytest.raises(UsageError):
            parse_since(text, now=datetime(2026, 1, 1, tzinfo=UTC))


@pytest.fixture
def group_url(tmp_path: Path) -> str:
    """A SQLite ledger with ml/train-a's group preemption, completed."""
    url = f"sqlite:///{tmp_path / 'groups.sqlite'}"
    migrations.upgrade(url)
    engine = create_ledger_engine(url)
    append_batch(engine, group_preemption("group-preemption-ml-train-a-uid-train-a"))
    engine.dispose()
    return url


def test_history_shows_a_group_preemption(
    capsys: pytest.CaptureFixture[str], group_url: str
) -> None:
    code, out, _ = _run(capsys, "history", "--database-url", group_url)
    assert code == 0
    assert out.splitlines() == [
        "PREEMPTOR / #  STARTED               NODE         VICTIMS  OUTCOME    DURATION",
        "ml/train-a     group-preemption-ml-train-a-uid-train-a: pod group, victims on 3 "
        "nodes, members placed on 2, completed after 1 attempt",
        "  #1           2026-11-21 12:00:00Z  placed on 2  4        completed  10.0s",
    ]
    code, out, _ = _run(capsys, "history", "--json", "--database-url", group_url)
    record = orjson.loads(out)
    assert (record["victimNodes"], record["memberNodes"]) == (
        ["node-1", "node-2", "node-3"],
        ["node-1", "node-2"],
    )


def test_history_tells_who_started_a_group_attempt_and_how_many_members_were_bound(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'bound.sqlite'}"
    migrations.upgrade(url)
    engine = create_ledger_engine(url)
    g = "group-preemption-ml-train-a-uid-train-a"
    append_batch(engine, group_preemption(g))
    bound_at = T0 + timedelta(seconds=12)
    record_scheduled(engine, g, "run-1", TRAIN_A.as_preemptor(), None, bound_at, members_bound=4)
    engine.dispose()
    code, out, _ = _run(capsys, "history", "-o", "wide", "--database-url", url)
    header, _, row = out.splitlines()
    assert code == 0
    assert header.endswith("DURATION  STARTED BY  SCHEDULED     RUN")
    assert row.endswith("trigger     4 of 4 bound  run-1")
    code, out, _ = _run(capsys, "history", "--json", "--database-url", url)
    record = orjson.loads(out)
    assert (record["startedBy"], record["membersBound"]) == ("trigger", 4)
    assert record["scheduledAt"] is not None


def test_in_shadow_mode_explain_tells_what_kube_scheduler_did_to_a_dry_runs_victims(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A dry run's victims were not spared: they would have been victims, and what
    kube-scheduler did (its Preempted Event, recorded in shadow mode) is told beside."""
    url = f"sqlite:///{tmp_path / 'shadow.sqlite'}"
    migrations.upgrade(url)
    engine = create_ledger_engine(url)
    decided = decision_events("p-dry", "run-1", API, four_candidate(), T0)
    append_batch(engine, [*decided, event("p-dry", EventKind.DRY_RUN, T0)])
    preempted = T0 + timedelta(seconds=2)
    message = "Preempted by pod uid-api-0 on node node-3"
    append_upstream(
        engine,
        [
            UpstreamPreemption(
                "e-1",
                preempted,
                "default",
                "batch-8",
                "uid-batch-8",
                "uid-api-0",
                "prod",
                "api-0",
                "node-3",
                message,
            )
        ],
    )
    engine.dispose()
    code, out, _ = _run(capsys, "explain", "default/batch-8", "--database-url", url)
    assert code == 0
    assert out.splitlines()[2] == (
        "2026-11-21 12:00:00Z  would have been a victim (dry run) of the preemption for "
        "prod/api-0 (priority 1000) on node-3; kube-scheduler preempted it at "
        f"2026-11-21 12:00:02Z (its Event: {message})"
    )
    assert "spared" not in out
    code, out, _ = _run(capsys, "explain", "prod/api-0", "--database-url", url)
    assert (
        "    victim default/batch-8 (priority 50): would have been a victim (dry run); "
        f"kube-scheduler preempted it at 2026-11-21 12:00:02Z (its Event: {message})"
    ) in out.splitlines()
    assert (
        "    victim default/batch-7 (priority 100): would have been a victim (dry run); no "
        "kube-scheduler preemption of it recorded"
    ) in out.splitlines()
    assert (
        "    prod/api-0's placement is kube-scheduler's in shadow mode, not recorded here"
        in out.splitlines()
    )


def test_explain_tells_a_group_preemption(
    capsys: pytest.CaptureFixture[str], group_url: str
) -> None:
    code, out, _ = _run(capsys, "explain", "ml/train-a", "--database-url", group_url)
    assert code == 0
    assert out.startswith("ml/train-a as a preempting pod group (1, newest first):\n")
    assert (
        "    for ml/train-a, 4 pods, minCount 4: 4 victims in 2 units on 3 nodes, members "
        "placed on 2: podGroup ml/train-b (3 pods, taken whole, on node-1, node-2, node-3), "
        "pod default/batch-1 (on node-2)\n" in out
    )
    code, out, _ = _run(capsys, "explain", "ml/train-b-2", "--database-url", group_url)
    assert "deleted by the preemption for the pod group ml/train-a (priority 1000) on node-3" in out


@pytest.fixture(params=["sqlite", "postgres"])
def members_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A ledger with two group preemptions of ml/train-a, completed: g-old at 12:00 and g-new
    at 13:00, each placing ml/train-a-0..3 (ml/train-a-2 on node-2)."""

    def load(url: str) -> str:
        migrations.upgrade(url)
        engine = create_ledger_engine(url)
        append_batch(engine, group_preemption("g-old"))
        append_batch(engine, group_preemption("g-new", start=T0 + timedelta(hours=1)))
        engine.dispose()
        return url

    if request.param == "sqlite":
        yield load(f"sqlite:///{tmp_path / 'members.sqlite'}")
        return
    with fresh_database() as url:
        yield load(url)


def test_explain_a_member_tells_its_groups_preemptions_newest_first(
    capsys: pytest.CaptureFixture[str], members_url: str
) -> None:
    code, out, _ = _run(capsys, "explain", "ml/train-a-2", "--database-url", members_url)
    assert code == 0
    lines = out.splitlines()
    assert lines[:5] == [
        "ml/train-a-2 as a member of a preempting pod group (2, newest first):",
        "",
        "2026-11-21 13:00:00Z  placed ml/train-a-2 on node-2: nominated",
        "  by the preemption for the pod group ml/train-a, in attempt 1 of 1 (run run-1):",
        "    2026-11-21 13:00:00Z  g-new: completed after 1 attempt",  # the group's story, under
    ]
    assert "        placed ml/train-a-2 on node-2: nominated" in lines
    older = lines.index("2026-11-21 12:00:00Z  placed ml/train-a-2 on node-2: nominated")
    assert lines[older + 2] == "    2026-11-21 12:00:00Z  g-old: completed after 1 attempt"
    block = lines[5 : older - 1]  # the newer entry's group story: indented under its header
    assert block and all(line.startswith("      ") for line in block), block


def test_explain_a_victim_pod_group_tells_its_unit(
    capsys: pytest.CaptureFixture[str], group_url: str
) -> None:
    code, out, _ = _run(capsys, "explain", "ml/train-b", "--database-url", group_url)
    assert code == 0
    g = "group-preemption-ml-train-a-uid-train-a"
    assert out.splitlines() == [
        "ml/train-b as a victim unit, a pod group (1, newest first):",
        "",
        "2026-11-21 12:00:00Z  taken whole by the preemption for the pod group ml/train-a "
        "(priority 1000): podGroup ml/train-b, 3 pods on 3 nodes (node-1, node-2, node-3)",
        f"  in attempt 1 of 1 of {g} (run run-1)",
        "  why: podGroup ml/train-b, taken whole (priority 500) could not be reprieved: "
        "ml/train-a-0 would not fit on node-1 beside it (Insufficient cpu)",
        "  the group's decision: for ml/train-a, 4 pods, minCount 4: 4 victims in 2 units on "
        "3 nodes, members placed on 2: podGroup ml/train-b (3 pods, taken whole, on node-1, "
        "node-2, node-3), pod default/batch-1 (on node-2)",
        "  pod ml/train-b-0 (priority 500) on node-1: deleted at 2026-11-21 12:00:03Z (3.0s "
        "after the decision)",
        "  pod ml/train-b-1 (priority 500) on node-2: deleted at 2026-11-21 12:00:05Z (5.0s "
        "after the decision)",
        "  pod ml/train-b-2 (priority 500) on node-3: deleted at 2026-11-21 12:00:07Z (7.0s "
        "after the decision)",
        "  attempt outcome: completed; the pod group ml/train-a was not scheduled (minCount "
        "members bound), as far as the ledger knows",
    ]


def test_history_pod_finds_a_members_group_preemptions(
    capsys: pytest.CaptureFixture[str], members_url: str
) -> None:
    code, out, _ = _run(
        capsys, "history", "--pod", "ml/train-a-2", "--json", "--database-url", members_url
    )
    assert code == 0
    found = [orjson.loads(line) for line in out.splitlines()]
    assert [(r["preemptionId"], r["podGroup"]) for r in found] == [
        ("g-new", "ml/train-a"),
        ("g-old", "ml/train-a"),
    ]


@pytest.mark.parametrize("pod", ["other/train-a-2", "ml/train-a-20", "ml/train"])
def test_the_same_name_elsewhere_or_a_longer_or_shorter_name_is_no_member(
    capsys: pytest.CaptureFixture[str], members_url: str, pod: str
) -> None:
    code, _, err = _run(capsys, "explain", pod, "--database-url", members_url)
    assert code == 2
    assert err.startswith(f"preemptctl explain: {pod} is not in the ledger")
    code, out, _ = _run(capsys, "history", "--pod", pod, "--database-url", members_url)
    assert (code, out) == (0, NOTHING_MATCHES + "\n")


def test_a_parked_pod_bound_later_is_parked_no_more(
    capsys: pytest.CaptureFixture[str], attempts_url: str
) -> None:
    engine = create_ledger_engine(attempts_url)
    bound = record_bound_after_end(
        engine, "p-parked", WEB, "node-2", T0 + timedelta(hours=1, minutes=5)
    )
    engine.dispose()
    assert bound
    code, out, _ = _run(capsys, "history", "--parked", "--database-url", attempts_url)
    assert (code, out) == (0, "no parked preemptions in the ledger\n")
    code, out, _ = _run(capsys, "history", "--outcome", "failed", "--database-url", attempts_url)
    assert out.splitlines()[1] == (
        "prod/web-1     p-parked: failed after 1 attempt, then bound to node-2"
    )
    assert "retry" not in out
    code, out, _ = _run(capsys, "explain", "prod/web-1", "--database-url", attempts_url)
    assert (
        "prod/web-1 was bound to node-2 after it ended, at 2026-11-21 13:05:00Z: nothing left "
        "to retry" in out
    )
    assert (
        "prod/web-1 was bound to node-2 at 2026-11-21 13:05:00Z, after this attempt ended "
        "(placed by the scheduler, not by this preemption)" in out
    )


HOSTILE = "denied \x1b]0;owned\x07\x1b[2J\x9b31m \u202egnp.exe"
SHOWN = "denied \\x1b]0;owned\\x07\\x1b[2J\\x9b31m \\u202egnp.exe"


@pytest.fixture
def hostile_url(tmp_path: Path) -> str:
    """A SQLite ledger where prod/web-1's preemption failed with a webhook message that
    carries terminal escapes (OSC retitle, clear screen, 8-bit CSI, a bidi override)."""
    url = f"sqlite:///{tmp_path / 'hostile.sqlite'}"
    migrations.upgrade(url)
    engine = create_ledger_engine(url)
    append_batch(engine, failed_attempt("p-hostile", preemptor=WEB, victims=[LOW], error=HOSTILE))
    engine.dispose()
    return url


def _raw(text: str) -> bool:
    return any(c in text for c in ("\x1b", "\x07", "\x9b", "\u202e"))


@pytest.mark.parametrize(
    "argv",
    [["history", "--parked"], ["history", "-o", "yaml"], ["explain", "prod/web-1"]],
    ids=["parked", "yaml", "explain"],
)
def test_ledger_text_with_terminal_escapes_is_printed_escaped(
    capsys: pytest.CaptureFixture[str], hostile_url: str, argv: list[str]
) -> None:
    code, out, _ = _run(capsys, *argv, "--database-url", hostile_url)
    assert code == 0 and not _raw(out)
    if argv[-1] != "yaml":
        assert SHOWN in out


def test_ledger_text_with_terminal_escapes_reads_back_from_json(
    capsysbinary: pytest.CaptureFixture[bytes], hostile_url: str
) -> None:
    code = main(["history", "--json", "--database-url", hostile_url])
    out = capsysbinary.readouterr().out.decode()
    assert code == 0 and not _raw(out)
    assert orjson.loads(out)["error"] == HOSTILE


def test_a_ui_address_with_a_password_is_printed_masked(
    capsys: pytest.CaptureFixture[str], hostile_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PREEMPT_TEMPORAL_UI_URL", "http://admin:s3cret@ui.example:8080/")
    for argv in (["history"], ["explain", "prod/web-1"]):
        code, out, _ = _run(capsys, *argv, "--database-url", hostile_url)
        assert code == 0 and "s3cret" not in out
        assert "http://admin:***@ui.example:8080/namespaces/default/workflows/p-hostile/" in out


def test_a_parked_group_preemption_offers_no_pod_retry(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'parked-group.sqlite'}"
    migrations.upgrade(url)
    engine = create_ledger_engine(url)
    gid = "group-preemption-ml-train-a-uid-train-a"
    failed = Terminal(error=DENIED, retryable=False).to_json()
    append_batch(
        engine,
        [
            *group_preemption(gid, end=None)[:9],
            event(gid, EventKind.FAILED, T0, preemptor=TRAIN_A.as_preemptor(), payload=failed),
        ],
    )
    engine.dispose()
    code, out, _ = _run(capsys, "history", "--parked", "--database-url", url)
    assert (code, out.splitlines()[2]) == (
        0,
        "  retry:  preemptctl retry --pod-group ml/train-a  (once the cause is fixed; "
        "--reason TEXT says how)",
    )
    code, out, _ = _run(capsys, "history", "--parked", "--json", "--database-url", url)
    assert orjson.loads(out)["retryCommand"] == "preemptctl retry --pod-group ml/train-a"

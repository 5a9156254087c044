"""Secrets in URL settings are never printed (issue 20, finding 6).

Scenario: one `preemptctl worker` whose ledger URL carries secrets in its query string
(`?password=...&sslpassword=...`, which libpq honours) and whose `temporal_ui_url` carries
user info (`http://admin:...@ui.example:8080`). The ledger is cut off (its proxy refuses
connections) while a preemptor arrives, then restored; the preemption completes. An
operator runs the CLI with the same environment throughout.

Judged from outside (what the CLI printed, the worker's log file):
- `preemptctl config` (YAML and JSON) shows every URL setting without its secrets;
- a CLI error about the unreachable ledger names the database in one line, its secrets
  masked, nothing else on stderr;
- a setting error that quotes a misplaced URL prints no secret;
- the worker's log during the outage reports the unreachable ledger (so the check below is
  not vacuous) and holds none of the secrets, anywhere, tracebacks included;
- `preemptctl history`'s links to the Temporal UI do not carry the UI's user info.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from subprocess import CompletedProcess

import pytest

from tests.support.fault_rig import crowded_cluster, preemptor
from tests.support.hostile_rig import hostile_rig
from tests.support.temporal_server import PersistentTemporal

DATABASE_SECRETS = ("hostile-db-secret-1", "hostile-db-secret-2")
UI_SECRET = "hostile-ui-secret"
SECRETS = (*DATABASE_SECRETS, UI_SECRET)
QUERY = f"password={DATABASE_SECRETS[0]}&sslpassword={DATABASE_SECRETS[1]}"
UI_URL = f"http://admin:{UI_SECRET}@ui.example:8080"
OUTAGE_SECONDS = 4.0  # long enough for the decision activity to fail and be retried
SETTLE_SECONDS = 40.0


@dataclass
class Outcome:
    config_yaml: CompletedProcess[str]
    config_json: CompletedProcess[str]
    unreachable: CompletedProcess[str]
    misplaced: CompletedProcess[str]
    history: CompletedProcess[str]
    worker_log: str


def leaked(*texts: str) -> list[str]:
    return [secret for secret in SECRETS if any(secret in text for text in texts)]


@pytest.fixture(scope="module")
def outcome(
    persistent_temporal: PersistentTemporal, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Outcome]:
    work = tmp_path_factory.mktemp("secrets")
    with hostile_rig(
        persistent_temporal,
        work,
        crowded_cluster(1, 0),
        database_query=QUERY,
        env={"PREEMPT_TEMPORAL_UI_URL": UI_URL},
    ) as rig:
        config_yaml = rig.preemptctl("config")
        config_json = rig.preemptctl("config", "-o", "json")
        rig.proxy.cut()
        rig.add(preemptor("urgent-0"))
        unreachable = rig.preemptctl("history")
        misplaced = rig.preemptctl(
            "config", env=rig.cli_env(PREEMPT_TEMPORAL_ADDRESS=rig.env["PREEMPT_DATABASE_URL"])
        )
        time.sleep(OUTAGE_SECONDS)  # the outage's length, not an assertion about time
        rig.proxy.restore()
        rig.settle(SETTLE_SECONDS)
        yield Outcome(
            config_yaml,
            config_json,
            unreachable,
            misplaced,
            rig.preemptctl("history"),
            rig.worker.log_text(),
        )


def test_config_prints_every_url_setting_without_its_secrets(outcome: Outcome) -> None:
    shown = json.loads(outcome.config_json.stdout)
    assert (
        leaked(outcome.config_yaml.stdout, outcome.config_yaml.stderr, outcome.config_json.stdout),
        "password=***" in shown["database_url"],
        shown["temporal_ui_url"].startswith("http://admin:"),
    ) == ([], True, True)


def test_an_unreachable_ledger_is_one_error_line_without_its_secrets(outcome: Outcome) -> None:
    done = outcome.unreachable
    lines = done.stderr.splitlines()
    assert (done.returncode, len(lines), leaked(done.stdout, done.stderr)) == (1, 1, [])
    assert "password=***" in lines[0]


def test_a_setting_error_quoting_a_url_prints_no_secret(outcome: Outcome) -> None:
    done = outcome.misplaced
    assert (done.returncode, len(done.stderr.splitlines()), leaked(done.stdout, done.stderr)) == (
        2,
        1,
        [],
    )


def test_the_worker_logged_the_ledger_outage(outcome: Outcome) -> None:
    """Without it the next check would prove nothing."""
    assert "cannot reach the ledger database" in outcome.worker_log


def test_the_worker_log_holds_no_secret(outcome: Outcome) -> None:
    assert leaked(outcome.worker_log) == []


def test_history_links_to_the_ui_without_its_user_info(outcome: Outcome) -> None:
    done = outcome.history
    assert (done.returncode, "ui.example:8080/namespaces/" in done.stdout) == (0, True)
    assert leaked(done.stdout, done.stderr) == []

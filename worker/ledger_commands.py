"""`preemptctl migrate`, `history` and `explain`: the audit ledger from a terminal.

`history` groups each preemption's attempts (one per workflow run) under it; `--json`
prints one record per attempt; `--parked` lists preemptions parked per the ledger. With a
Temporal UI address (`--temporal-ui-url`, `PREEMPT_TEMPORAL_UI_URL` or the settings file,
loaded as the worker loads them), `history` and `explain` print a link per attempt.

Everything printed goes through `worker.terminal` (`printable`; `printable_json` for `-o
json`): names, admission webhook messages and Event text in the ledger are written by whoever
may create pods, and must not act on the reader's terminal. The UI address in a link is
masked (`ledger.engine.masked_url`): a password in it is never printed.

The database is `--database-url`, else `PREEMPT_DATABASE_URL`, else (history and explain)
the settings file's `database_url`, else the embedded SQLite file
(`ledger.engine.default_sqlite_path`) or, when the newest `preemptctl dev` run's ledger was
written after it (or it does not exist), that run's, said in one line on stderr
(`ledger.engine.unnamed_ledger`): the same for `replay --decision` and `compare`.

Every flag value is validated here rather than by argparse `type=`/`choices=`, because
argparse reports a bad value in two lines (usage and error) and the CLI promises one. A
database that cannot be reached is exit 1 (a runtime failure); a URL, flag or schema that is
wrong is exit 2 (the command line must change).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import yaml
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, OperationalError

from preemptctl import migrations
from preemptctl.ledger.engine import (
    DATABASE_URL_ENV,
    configured_url,
    create_ledger_engine,
    dev_ledger_directory,
    display_url,
    masked_url,
    normalise_url,
    sqlite_path,
    translated_errors,
    unnamed_ledger,
)
from preemptctl.ledger.errors import LedgerError, LedgerUnavailableError
from preemptctl.ledger.narrative import (
    Upstream,
    format_seconds,
    format_time,
    member_lines,
    node_counts,
    parked_cause,
    preemption_phrase,
    preemptor_story,
    victim_story,
    victim_unit_story,
)
from preemptctl.ledger.queries import HistoryQuery, explain, history
from preemptctl.ledger.views import AttemptView, Link, MemberView, PreemptionView
from preemptctl.ledger.vocabulary import Outcome
from preemptctl.preemption.names import pod_key_problem
from preemptctl.worker.errors import Unavailable, UsageError, add_output_flag
from preemptctl.worker.terminal import printable, printable_json, printable_lines
from preemptctl.worker.ui_links import run_page

if TYPE_CHECKING:
    from preemptctl.worker.config import Settings

DEFAULT_HISTORY_LIMIT = 50
DEFAULT_EXPLAIN_LIMIT = 10
MAX_LIMIT = 100_000
MAX_SINCE = timedelta(days=365 * 100)
HISTORY_FORMATS = ("table", "wide", "json", "yaml")
_DURATION = re.compile(r"(?:\d+[smhdw])+")
_DURATION_PART = re.compile(r"(\d+)([smhdw])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
NOTHING_MATCHES = "no preemptions in the ledger match"


def register(subparsers: Any) -> None:
    migrate = subparsers.add_parser(
        "migrate",
        help="create or upgrade the ledger's schema (Alembic, to head)",
        description="Upgrade the ledger database to the newest schema. Safe to run again.",
    )
    _database_flag(migrate, reading=False)
    migrate.set_defaults(handler=run_migrate)

    past = subparsers.add_parser(
        "history",
        help="list recent preemptions and their attempts from the ledger",
        description="Recent preemptions, most recently active first, each with its attempts "
        "(one per workflow run) in order. --pod, --node and --since match any attempt; "
        "--outcome matches the latest attempt's. -o json prints one record per attempt.",
    )
    past.add_argument(
        "--pod",
        metavar="NAMESPACE/NAME",
        help="as preemptor, as victim, or as a member a group preemption placed",
    )
    past.add_argument("--node", metavar="NODE", help="preemptions on this node")
    past.add_argument(
        "--since", metavar="WHEN", help="a duration (30m, 2h, 1d12h) or an ISO 8601 time"
    )
    past.add_argument(
        "--outcome",
        metavar="OUTCOME",
        help="the latest attempt's outcome, one of: " + ", ".join(o.value for o in Outcome),
    )
    past.add_argument(
        "--parked",
        action="store_true",
        help="only preemptions parked per the ledger (their latest attempt ended "
        "non-retryably), with the cause and the command that runs them again",
    )
    past.add_argument("--limit", metavar="N", help=f"at most N (default {DEFAULT_HISTORY_LIMIT})")
    add_output_flag(past, HISTORY_FORMATS, default="table")
    past.add_argument(
        "--json",
        dest="output",
        action="store_const",
        const="json",
        help="the same as -o json: one JSON object per line",
    )
    _database_flag(past)
    _link_flags(past)
    past.set_defaults(handler=run_history)

    why = subparsers.add_parser(
        "explain",
        help="who preempted a pod and why, or what a preemptor did",
        description="Tell a pod's preemptions in words: as victim (its fate, by whom, where, "
        "why), as preemptor (every attempt in order, what changed between them, each "
        "decision, the victims' fates, scheduling), and as a member of a pod group a group "
        "preemption placed (where, its nomination, then the group's preemption). A pod "
        "group's name tells its preemptions, and each time it was taken whole as a victim "
        "unit (why, its pods, their nodes and fates).",
    )
    why.add_argument("pod", metavar="NAMESPACE/NAME")
    why.add_argument(
        "--limit",
        metavar="N",
        help=f"newest N preemptions per role (default {DEFAULT_EXPLAIN_LIMIT})",
    )
    _database_flag(why)
    _link_flags(why)
    why.set_defaults(handler=run_explain)


READ_DATABASE_HELP = (
    "ledger database (default: $PREEMPT_DATABASE_URL, else the embedded SQLite file, or the "
    "newest `preemptctl dev` run's ledger when it is newer)"
)


def _database_flag(parser: argparse.ArgumentParser, *, reading: bool = True) -> None:
    parser.add_argument(
        "--database-url",
        metavar="URL",
        help=READ_DATABASE_HELP
        if reading
        else "ledger database (default: $PREEMPT_DATABASE_URL, else the embedded SQLite file)",
    )


def _link_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="settings file (YAML; or $PREEMPT_CONFIG): its temporal_ui_url, "
        "temporal_namespace and database_url are used",
    )
    parser.add_argument(
        "--temporal-ui-url",
        metavar="URL",
        help="the Temporal UI, to print a link per attempt (default: $PREEMPT_TEMPORAL_UI_URL)",
    )


UI_URL_ENV = "PREEMPT_TEMPORAL_UI_URL"
CONFIG_ENV = "PREEMPT_CONFIG"


def _link_of(args: argparse.Namespace) -> Link | None:
    """The UI link builder from the worker's settings, loaded as the worker loads them (the
    ledger URL they name is used when --database-url is not given). Only when a UI address
    or a settings file is given: loading the settings imports the Temporal client, which
    would double the start-up time of every `history` that prints no link."""
    wanted = (args.temporal_ui_url, args.config, os.environ.get(UI_URL_ENV))
    if not any(wanted) and not os.environ.get(CONFIG_ENV):
        return None
    from preemptctl.worker.config import ConfigError, load_settings

    try:
        settings = load_settings(args.config, {"temporal_ui_url": args.temporal_ui_url})
    except ConfigError as error:
        raise UsageError(str(error)) from None
    if not args.database_url and settings.database_url:
        args.database_url = settings.database_url
    return ui_link(settings)


# -- flag values --------------------------------------------------------------------------------


def parse_pod(text: str, flag: str) -> tuple[str, str]:
    namespace, _, name = text.partition("/")
    if not namespace or not name or "/" in name:
        raise UsageError(f"{flag} must be NAMESPACE/NAME, not {text!r}")
    if (problem := pod_key_problem(namespace, name)) is not None:
        raise UsageError(f"{flag}: {problem}")
    return namespace, name


def parse_since(text: str, now: datetime) -> datetime:
    """`2h`, `90m`, `1d12h` back from `now`, or an ISO 8601 time (UTC when no zone is given)."""
    if len(text) <= 40 and _DURATION.fullmatch(text):
        seconds = sum(
            int(amount) * _UNIT_SECONDS[unit] for amount, unit in _DURATION_PART.findall(text)
        )
        if seconds > MAX_SINCE.total_seconds():
            raise UsageError(f"--since {text!r} reaches back more than 100 years")
        return now - timedelta(seconds=seconds)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (ValueError, OverflowError):
        raise UsageError(
            f"--since {text!r} is neither a duration (30m, 2h, 1d12h) nor an ISO 8601 time"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def parse_outcome(text: str) -> Outcome:
    try:
        return Outcome(text)
    except ValueError:
        known = ", ".join(o.value for o in Outcome)
        raise UsageError(f"unknown --outcome {text!r}; use one of: {known}") from None


def parse_limit(text: str | None, default: int) -> int:
    if text is None:
        return default
    # isdecimal() alone would take '²' and '٣'; only ASCII digits are a number here.
    if not (text.isascii() and text.isdigit()) or len(text) > 9 or int(text) < 1:
        raise UsageError(f"--limit must be a whole number from 1 to {MAX_LIMIT}, not {text!r}")
    if int(text) > MAX_LIMIT:
        raise UsageError(f"--limit must be a whole number from 1 to {MAX_LIMIT}, not {text!r}")
    return int(text)


# -- the database ------------------------------------------------------------------------------


def _url(args: argparse.Namespace) -> str:
    url = configured_url(args.database_url)
    try:
        normalise_url(url)
    except LedgerError as error:
        raise UsageError(str(error)) from None
    return url


def reading_url(args: argparse.Namespace) -> str:
    """The ledger a reading command opens: the one named (--database-url, the settings
    file's, PREEMPT_DATABASE_URL), else `unnamed_ledger`'s choice; when that is a dev run's
    ledger, one line on stderr says which, so nobody reads a ledger unaware."""
    if args.database_url or os.environ.get(DATABASE_URL_ENV):
        return _url(args)
    unnamed = unnamed_ledger()
    if unnamed.dev:
        print(
            f"reading {unnamed.url}, the newest `preemptctl dev` run's ledger (none named: "
            "--database-url or PREEMPT_DATABASE_URL names another)",
            file=sys.stderr,
        )
    return unnamed.url


def _missing(path: Path, named: bool) -> str:
    """Why a SQLite ledger that is not there cannot be read, and what to do: `migrate` only
    for a worker's ledger, never for a dev run's (a dev run makes its own)."""
    directory = dev_ledger_directory()
    if path.parent == directory:
        return f"no ledger at {path}: that `preemptctl dev` run's ledger was removed"
    if named:
        return f"no ledger at {path}; run `preemptctl migrate` first"
    return (
        f"no ledger at {path}, and no `preemptctl dev` run has left one in {directory}: "
        "name the worker's ledger with --database-url or PREEMPT_DATABASE_URL, or run "
        "`preemptctl dev` (each run records in a ledger of its own)"
    )


@contextmanager
def open_ledger(args: argparse.Namespace) -> Iterator[Engine]:
    """An engine on a reachable, migrated ledger (`reading_url`), or a one-line `UsageError`
    saying why not.

    A missing SQLite file is reported rather than created: reading must not leave an empty
    ledger behind that a later `migrate` would be mistaken to have filled.
    """
    named = bool(args.database_url or os.environ.get(DATABASE_URL_ENV))
    url = reading_url(args)
    path = sqlite_path(normalise_url(url))
    if path is not None and not path.exists():
        raise UsageError(_missing(path, named))
    engine = create_ledger_engine(url, pool_size=1)
    try:
        with translated_errors(engine):
            current = migrations.current_revision(engine)
        problem = migrations.schema_problem(current)
        if problem is not None:
            raise UsageError(f"the ledger database {display_url(url)} {problem}")
        yield engine
    except LedgerUnavailableError as error:
        raise Unavailable(str(error)) from None
    except LedgerError as error:
        raise UsageError(str(error)) from None
    finally:
        engine.dispose()


# -- the commands -----------------------------------------------------------------------------


def run_migrate(args: argparse.Namespace) -> int:
    url = _url(args)
    try:
        migrations.upgrade(url)
        engine = create_ledger_engine(url, pool_size=1)
        try:
            with translated_errors(engine):
                revision = migrations.current_revision(engine)
        finally:
            engine.dispose()
    except LedgerUnavailableError as error:
        raise Unavailable(str(error)) from None
    except LedgerError as error:
        raise UsageError(str(error)) from None
    except DBAPIError as error:
        first = str(error.orig).strip().splitlines()[0] if str(error.orig).strip() else "error"
        message = f"cannot migrate the ledger database {display_url(url)}: {first}"
        if isinstance(error, OperationalError) and not getattr(error.orig, "sqlstate", None):
            raise Unavailable(message) from None  # never connected: try again later
        raise UsageError(message) from None
    print(f"ledger {display_url(url)} is at schema revision {revision} (head)")
    return 0


HISTORY_COLUMNS = ("PREEMPTOR / #", "STARTED", "NODE", "VICTIMS", "OUTCOME", "DURATION")
WIDE_COLUMNS = (*HISTORY_COLUMNS, "STARTED BY", "SCHEDULED", "RUN")


def ui_link(settings: Settings) -> Link | None:
    """Links to a run's story in the Temporal UI (its User Metadata page: `worker.ui_links`),
    when its address is configured (its secrets masked: a link is printed, and a password
    in the address must not be)."""
    if not settings.temporal_ui_url:
        return None
    base = masked_url(settings.temporal_ui_url)
    namespace = settings.temporal_namespace

    def link(workflow_id: str, run_id: str) -> str:
        return run_page(base, namespace, workflow_id, run_id)

    return link


def retry_command(view: PreemptionView) -> str:
    """The command that runs a parked preemption again: a pod's by its name, a group's by
    the group's (`retry --pod-group`)."""
    if view.pod_group is not None:
        return f"preemptctl retry --pod-group {view.preemptor.key}"
    return f"preemptctl retry {view.preemptor.key}"


def node_cell(attempt: AttemptView) -> str:
    """The NODE column: where the preemptor goes, the node; for a group preemption, on how
    many nodes its members are placed (its header says where its victims run)."""
    if attempt.pod_group is not None:
        placed = attempt.member_nodes
        if not placed:
            return "-"
        return f"placed on {placed[0]}" if len(placed) == 1 else f"placed on {len(placed)}"
    return attempt.node or "-"


def attempt_row(attempt: AttemptView) -> tuple[str, ...]:
    return (
        f"  #{attempt.attempt}",
        format_time(attempt.started),
        node_cell(attempt),
        str(attempt.victim_count),
        str(attempt.outcome) if attempt.outcome is not None else str(attempt.status),
        format_seconds(attempt.duration_seconds),
    )


def scheduled_cell(attempt: AttemptView) -> str:
    """The SCHEDULED column: where the preemptor was bound; for a group, how many of the
    members its decision placed were bound ("4 of 4 bound"), as `preemptor_scheduled` said."""
    if attempt.scheduled_at is None:
        return "-"
    if attempt.pod_group is not None:
        bound = "?" if attempt.members_bound is None else str(attempt.members_bound)
        return f"{bound} of {len(attempt.members)} bound"
    return attempt.scheduled_node or "-"


def wide_row(attempt: AttemptView) -> tuple[str, ...]:
    """`-o wide`: the table's columns, then who started the attempt, where the preemptor
    was scheduled (a group: how many members were bound), and the run's ID."""
    return (
        *attempt_row(attempt),
        attempt.started_by or "-",
        scheduled_cell(attempt),
        attempt.run_id,
    )


def preemption_header(view: PreemptionView) -> str:
    """The line above a preemption's attempts: its ID (the Temporal workflow ID) and where
    it stands now (its latest attempt), parked when that attempt cannot be retried as is."""
    parked = ", parked" if view.parked else ""
    group = ""
    if view.pod_group is not None:
        group = (
            f"pod group, {node_counts(view.latest)}, " if view.latest.decision else "pod group, "
        )
    return f"{view.preemption_id}: {group}{preemption_phrase(view)}{parked}"


def render_grouped(
    views: Sequence[PreemptionView], columns: Sequence[str], wide: bool, link: Link | None
) -> str:
    """One header line per preemption (preemptor, ID, outcome), then one row per attempt,
    the attempt rows aligned under one column header. With a `link`, `wide` gives each
    attempt a UI column; the table prints one link per preemption, to its latest run."""
    head = [*columns, *(("UI",) if link and wide else ())]
    groups: list[tuple[PreemptionView, list[tuple[str, ...]]]] = []
    for view in views:
        rows = []
        for attempt in view.attempts:
            row = wide_row(attempt) if wide else attempt_row(attempt)
            if link is not None and wide:
                row = (*row, link(view.preemption_id, attempt.run_id))
            rows.append(row)
        groups.append((view, rows))
    cells = [head, *(row for _, rows in groups for row in rows)]
    first = max([*(len(c[0]) for c in cells), *(len(v.preemptor.key) for v in views)])
    widths = [first, *(max(len(c[i]) for c in cells) for i in range(1, len(head)))]

    def line(row: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n"

    out = [line(head)]
    for view, rows in groups:
        out.append(f"{view.preemptor.key.ljust(first)}  {preemption_header(view)}\n")
        out.extend(line(row) for row in rows)
        if link is not None and not wide:
            out.append(f"{'  ui'.ljust(first)}  {link(view.preemption_id, view.run_id)}\n")
    return "".join(out)


def render_parked(views: Sequence[PreemptionView], link: Link | None) -> str:
    """`history --parked`: per pod, since when, after how many attempts, the cause, and the
    command that runs it again once the cause is fixed."""
    blocks = []
    for view in views:
        count = len(view.attempts)
        lines = [
            f"{view.preemptor.key}  parked since {format_time(view.latest.finished)}, after "
            f"{count} attempt{'' if count == 1 else 's'} ({view.preemption_id})",
            f"  cause:  {parked_cause(view)}",
            f"  retry:  {retry_command(view)}  (once the cause is fixed; --reason TEXT says how)",
        ]
        if link is not None:
            lines.append(f"  see:    {link(view.preemption_id, view.run_id)}")
        blocks.append("".join(f"{text}\n" for text in lines))
    return "\n".join(blocks)


def parked_record(view: PreemptionView, link: Link | None) -> dict[str, Any]:
    """`history --parked -o json`: the parking attempt's record, with since, cause and the
    command that runs it again."""
    latest = view.latest
    return {
        **latest.to_json(len(view.attempts), link),
        "parkedSince": latest.finished.isoformat() if latest.finished else None,
        "cause": parked_cause(view),
        "retryCommand": retry_command(view),
    }


def _print_records(records: Sequence[dict[str, Any]], output: str) -> None:
    """One JSON object per line (escaped by `printable_json`), or YAML documents (PyYAML
    writes a string holding a control character double-quoted, escaped)."""
    if output == "json":
        for record in records:
            line = printable_json(orjson.dumps(record).decode())
            sys.stdout.buffer.write(line.encode() + b"\n")
        sys.stdout.flush()
        return
    documents = [orjson.loads(orjson.dumps(record)) for record in records]
    text = yaml.safe_dump_all(documents, sort_keys=False) if documents else ""
    sys.stdout.write(printable_lines(text))


def run_history(args: argparse.Namespace) -> int:
    query = HistoryQuery(
        pod=parse_pod(args.pod, "--pod") if args.pod else None,
        node=args.node or None,
        since=parse_since(args.since, datetime.now(UTC)) if args.since else None,
        outcome=parse_outcome(args.outcome) if args.outcome else None,
        limit=parse_limit(args.limit, DEFAULT_HISTORY_LIMIT),
        parked=args.parked,
    )
    link = _link_of(args)
    with open_ledger(args) as engine:
        views = history(engine, query)
    if args.output in ("json", "yaml"):
        if args.parked:
            _print_records([parked_record(view, link) for view in views], args.output)
        else:
            _print_records([r for view in views for r in view.to_json(link)], args.output)
        return 0
    if not views:
        print("no parked preemptions in the ledger" if args.parked else NOTHING_MATCHES)
        return 0
    if args.parked:
        sys.stdout.write(printable_lines(render_parked(views, link)))
        return 0
    wide = args.output == "wide"
    table = render_grouped(views, WIDE_COLUMNS if wide else HISTORY_COLUMNS, wide, link)
    sys.stdout.write(printable_lines(table))
    return 0


def run_explain(args: argparse.Namespace) -> int:
    namespace, name = parse_pod(args.pod, "the pod")
    limit = parse_limit(args.limit, DEFAULT_EXPLAIN_LIMIT)
    link = _link_of(args)
    with open_ledger(args) as engine:
        story = explain(engine, namespace, name, limit)
    if not story.known:
        raise UsageError(
            printable(
                f"{namespace}/{name} is not in the ledger, as preemptor, as victim, as a "
                "member of a preempting pod group or as a pod group taken as a victim unit"
            )
        )
    blocks: list[list[str]] = []
    if story.as_victim:
        count = len(story.as_victim)
        blocks.append([f"{namespace}/{name} as a victim ({count}, newest first):"])
        blocks.extend(
            victim_story(view, victim, link, story.upstream) for view, victim in story.as_victim
        )
    if story.as_preemptor:
        count = len(story.as_preemptor)
        role = (
            "a preempting pod group"
            if all(view.pod_group is not None for view in story.as_preemptor)
            else "a preemptor"
        )
        blocks.append([f"{namespace}/{name} as {role} ({count}, newest first):"])
        blocks.extend(preemptor_story(view, link, story.upstream) for view in story.as_preemptor)
    if story.as_victim_unit:
        count = len(story.as_victim_unit)
        blocks.append(
            [f"{namespace}/{name} as a victim unit, a pod group ({count}, newest first):"]
        )
        blocks.extend(
            victim_unit_story(
                told.view, told.attempt, told.unit, told.victims, link, story.upstream
            )
            for told in story.as_victim_unit
        )
    if story.as_member:
        count = len(story.as_member)
        blocks.append(
            [f"{namespace}/{name} as a member of a preempting pod group ({count}, newest first):"]
        )
        blocks.extend(
            member_story(view, member, link, story.upstream) for view, member in story.as_member
        )
    sys.stdout.write(printable_lines("\n".join("\n".join(block) + "\n" for block in blocks)))
    return 0


def member_story(
    view: PreemptionView, member: MemberView, link: Link | None, upstream: Upstream | None = None
) -> list[str]:
    """A member's part in its group's preemption (where the latest attempt that placed it
    put it, and its nomination, in the words `history` uses for every member), then the
    group's preemption as its preemptor's story tells it."""
    attempt = next(a for a in reversed(view.attempts) if member in a.members)
    [placed] = member_lines(replace(attempt, members=(member,)))
    return [
        f"{format_time(attempt.decided_at or attempt.started)}  {placed}",
        f"  by the preemption for the pod group {view.latest.pod_group or view.preemptor.key}, "
        f"in attempt {attempt.attempt} of {len(view.attempts)} (run {attempt.run_id}):",
        *(f"    {line}" for line in preemptor_story(view, link, upstream)),
    ]

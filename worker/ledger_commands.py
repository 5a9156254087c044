"""`preemptctl migrate`, `history` and `explain`: the audit ledger from a terminal.

The database is `--database-url`, else `PREEMPT_DATABASE_URL`, else the embedded SQLite
file (`ledger.engine.default_sqlite_path`). Every flag value is validated here rather than
by argparse `type=`/`choices=`, because argparse reports a bad value in two lines (usage
and error) and the CLI promises one. A database that cannot be reached is exit 1 (a runtime
failure); a URL, flag or schema that is wrong is exit 2 (the command line must change).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import yaml
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, OperationalError

from preemptctl import migrations
from preemptctl.ledger.engine import (
    configured_url,
    create_ledger_engine,
    display_url,
    normalise_url,
    sqlite_path,
    translated_errors,
)
from preemptctl.ledger.errors import LedgerError, LedgerUnavailableError
from preemptctl.ledger.narrative import format_seconds, format_time, preemptor_story, victim_story
from preemptctl.ledger.queries import HistoryQuery, explain, history
from preemptctl.ledger.views import Outcome, PreemptionView
from preemptctl.worker.errors import Unavailable, UsageError, add_output_flag

DEFAULT_HISTORY_LIMIT = 50
DEFAULT_EXPLAIN_LIMIT = 10
MAX_LIMIT = 100_000
MAX_SINCE = timedelta(days=365 * 100)
HISTORY_FORMATS = ("table", "wide", "json", "yaml")
_DURATION = re.compile(r"(?:\d+[smhdw])+")
_DURATION_PART = re.compile(r"(\d+)([smhdw])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def register(subparsers: Any) -> None:
    migrate = subparsers.add_parser(
        "migrate",
        help="create or upgrade the ledger's schema (Alembic, to head)",
        description="Upgrade the ledger database to the newest schema. Safe to run again.",
    )
    _database_flag(migrate)
    migrate.set_defaults(handler=run_migrate)

    past = subparsers.add_parser(
        "history",
        help="list recent preemptions from the ledger",
        description="Recent preemptions, most recently active first.",
    )
    past.add_argument("--pod", metavar="NAMESPACE/NAME", help="as preemptor or as victim")
    past.add_argument("--node", metavar="NODE", help="preemptions on this node")
    past.add_argument(
        "--since", metavar="WHEN", help="a duration (30m, 2h, 1d12h) or an ISO 8601 time"
    )
    past.add_argument(
        "--outcome", metavar="OUTCOME", help="one of: " + ", ".join(o.value for o in Outcome)
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
    past.set_defaults(handler=run_history)

    why = subparsers.add_parser(
        "explain",
        help="who preempted a pod and why, or what a preemptor did",
        description="Tell a pod's preemptions in words: as victim (by whom, where, why) "
        "and as preemptor (decision, victims' fates, scheduling).",
    )
    why.add_argument("pod", metavar="NAMESPACE/NAME")
    why.add_argument(
        "--limit",
        metavar="N",
        help=f"newest N preemptions per role (default {DEFAULT_EXPLAIN_LIMIT})",
    )
    _database_flag(why)
    why.set_defaults(handler=run_explain)


def _database_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        metavar="URL",
        help="ledger database (default: $PREEMPT_DATABASE_URL, else an embedded SQLite file)",
    )


# -- flag values --------------------------------------------------------------------------------


def parse_pod(text: str, flag: str) -> tuple[str, str]:
    namespace, _, name = text.partition("/")
    if not namespace or not name or "/" in name:
        raise UsageError(f"{flag} must be NAMESPACE/NAME, not {text!r}")
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


@contextmanager
def open_ledger(args: argparse.Namespace) -> Iterator[Engine]:
    """An engine on a reachable, migrated ledger, or a one-line `UsageError` saying why not.

    A missing SQLite file is reported rather than created: reading must not leave an empty
    ledger behind that a later `migrate` would be mistaken to have filled.
    """
    url = _url(args)
    path = sqlite_path(normalise_url(url))
    if path is not None and not path.exists():
        raise UsageError(f"no ledger at {path}; run `preemptctl migrate` first")
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


HISTORY_COLUMNS = ("STARTED", "PREEMPTOR", "NODE", "VICTIMS", "OUTCOME", "DURATION")
WIDE_COLUMNS = (*HISTORY_COLUMNS, "RUNS", "SCHEDULED", "PREEMPTION")


def history_row(view: PreemptionView) -> tuple[str, ...]:
    return (
        format_time(view.started),
        view.preemptor.key,
        view.node or "-",
        str(view.victim_count),
        str(view.outcome) if view.outcome is not None else str(view.status),
        format_seconds(view.duration_seconds),
    )


def wide_row(view: PreemptionView) -> tuple[str, ...]:
    """`-o wide`: the table's columns, then the runs, where the preemptor was scheduled, and
    the preemption's ID (the Temporal workflow ID, to paste into the UI's search)."""
    return (
        *history_row(view),
        str(len(view.runs)),
        view.scheduled_node or "-",
        view.preemption_id,
    )


def render_table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        + "\n"
        for row in rows
    )


def run_history(args: argparse.Namespace) -> int:
    query = HistoryQuery(
        pod=parse_pod(args.pod, "--pod") if args.pod else None,
        node=args.node or None,
        since=parse_since(args.since, datetime.now(UTC)) if args.since else None,
        outcome=parse_outcome(args.outcome) if args.outcome else None,
        limit=parse_limit(args.limit, DEFAULT_HISTORY_LIMIT),
    )
    with open_ledger(args) as engine:
        views = history(engine, query)
    if args.output == "json":
        for view in views:
            sys.stdout.buffer.write(orjson.dumps(view.to_json()) + b"\n")
        sys.stdout.flush()
        return 0
    if args.output == "yaml":
        documents = [orjson.loads(orjson.dumps(view.to_json())) for view in views]
        sys.stdout.write(yaml.safe_dump_all(documents, sort_keys=False) if documents else "")
        return 0
    if not views:
        print("no preemptions in the ledger match")
        return 0
    if args.output == "wide":
        sys.stdout.write(render_table([WIDE_COLUMNS, *(wide_row(v) for v in views)]))
        return 0
    sys.stdout.write(render_table([HISTORY_COLUMNS, *(history_row(v) for v in views)]))
    return 0


def run_explain(args: argparse.Namespace) -> int:
    namespace, name = parse_pod(args.pod, "the pod")
    limit = parse_limit(args.limit, DEFAULT_EXPLAIN_LIMIT)
    with open_ledger(args) as engine:
        story = explain(engine, namespace, name, limit)
    if not story.known:
        raise UsageError(f"{namespace}/{name} is not in the ledger, as preemptor or as victim")
    blocks: list[list[str]] = []
    if story.as_victim:
        blocks.append([f"{namespace}/{name} as a victim ({len(story.as_victim)}, newest first):"])
        blocks.extend(victim_story(view, victim) for view, victim in story.as_victim)
    if story.as_preemptor:
        count = len(story.as_preemptor)
        blocks.append([f"{namespace}/{name} as a preemptor ({count}, newest first):"])
        blocks.extend(preemptor_story(view) for view in story.as_preemptor)
    sys.stdout.write("\n".join("\n".join(block) + "\n" for block in blocks))
    return 0

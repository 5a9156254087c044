"""One SQLAlchemy engine from one URL, for Postgres (production) or SQLite (a first run).

Where the ledger lives is decided here, once: `PREEMPT_DATABASE_URL`, or else an embedded
SQLite file under the XDG state directory (`$XDG_STATE_HOME/preemptctl/ledger.sqlite`,
by default `~/.local/state/preemptctl/ledger.sqlite`). State, not cache or config: it is
the audit record, and it must survive a `cd`, which a file in the working directory would
not.

`preemptctl dev` records each run in a ledger of its own under `dev/` beside that file
(`dev_ledger_directory`). A reader given no ledger (no flag, no variable) reads the newest
dev run's when it was written after the embedded one, or when that one does not exist
(`unnamed_ledger`): after the quick start, `preemptctl history` finds its run.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import orjson
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import (
    ArgumentError,
    DBAPIError,
    InterfaceError,
    OperationalError,
)

from preemptctl.ledger.errors import (
    LedgerError,
    LedgerNotMigratedError,
    LedgerPermissionError,
    LedgerUnavailableError,
)
from preemptctl.ledger.models import EVENTS_TABLE

DATABASE_URL_ENV = "PREEMPT_DATABASE_URL"
CONNECT_TIMEOUT_SECONDS = 5
SQLITE_BUSY_TIMEOUT_MS = 10_000
MAX_CONNECT_TIMEOUT_SECONDS = 3600
# SQLSTATE classes of errors about the data itself: data exception (22: a NUL in jsonb, a
# number out of range), integrity constraint violation (23), program limit exceeded (54: a
# NUL in text, a row too big). Postgres reports 54 as an OperationalError, like a lost
# connection, so the class, not the exception type, decides.
REFUSED_DATA_CLASSES = frozenset({"22", "23", "54"})
# The connection keywords libpq treats as secrets (its `dispchar` "*": never displayed), all
# honoured in a URL's query string as in a keyword/value string; a test compares this with
# the installed libpq's own list.
LIBPQ_SECRET_KEYS = frozenset({"password", "sslpassword", "oauth_client_secret"})
# Other query keys that carry a secret in a URL, and words that mark one in any key.
SECRET_QUERY_KEYS = LIBPQ_SECRET_KEYS | {"pass", "passwd", "pwd", "api_key", "apikey", "key"}
SECRET_KEY_WORDS = ("password", "secret", "token")
MASK = "***"
# A URL inside free text (a log line, an error message): up to whitespace or a quote, and
# not ending in the punctuation of the sentence around it (`ledger URL: error`).
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]*[^\s'\"<>.,:;!?)\]]")


class LedgerRejectedError(LedgerError):
    """The database refused the data itself (a NUL byte, a value out of range, a broken
    constraint): the same append would be refused again, so retrying cannot help."""


def default_sqlite_path(environ: Mapping[str, str] | None = None) -> Path:
    """The embedded ledger's file when no URL is given (see the module docstring)."""
    environ = os.environ if environ is None else environ
    state = environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "preemptctl" / "ledger.sqlite"


def dev_ledger_directory(environ: Mapping[str, str] | None = None) -> Path:
    """Where `preemptctl dev` keeps each run's own ledger: `dev/` beside the default one."""
    return default_sqlite_path(environ).parent / "dev"


def newest_dev_ledger(environ: Mapping[str, str] | None = None) -> Path | None:
    """The ledger of the dev run started last (its name begins with its start time:
    `ledger-2026-12-06T202937Z-4c31.sqlite`), or None when no dev run has left one."""
    directory = dev_ledger_directory(environ)
    try:
        found = [path for path in directory.glob("ledger-*.sqlite") if path.is_file()]
    except OSError:
        return None
    if not found:
        return None
    started = len("ledger-2026-12-06T202937Z")
    return max(found, key=lambda path: (path.name[:started], _written(path)))


def _written(path: Path) -> float:
    """When a SQLite file was last written: its own time or its write-ahead log's."""
    times = []
    for candidate in (path, path.with_name(path.name + "-wal")):
        try:
            times.append(candidate.stat().st_mtime)
        except OSError:
            continue
    return max(times, default=0.0)


@dataclass(frozen=True, slots=True)
class UnnamedLedger:
    """The ledger a reader opens when none is named (no flag, no `PREEMPT_DATABASE_URL`):
    the embedded one, or the newest dev run's when that one was written since (`dev`)."""

    url: str
    dev: bool


def unnamed_ledger(environ: Mapping[str, str] | None = None) -> UnnamedLedger:
    """The embedded ledger (`default_sqlite_path`), unless the newest dev run's ledger was
    written after it or it does not exist: after `preemptctl dev`, `history`, `explain`,
    `replay --decision` and `compare` read that run without being told where it is."""
    default = default_sqlite_path(environ)
    dev = newest_dev_ledger(environ)
    if dev is not None and (not default.exists() or _written(dev) >= _written(default)):
        return UnnamedLedger(f"sqlite:///{dev}", dev=True)
    return UnnamedLedger(f"sqlite:///{default}", dev=False)


def configured_url(explicit: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The URL to use: an explicit one (a CLI flag), the environment's, or the SQLite default."""
    environ = os.environ if environ is None else environ
    if explicit:
        return explicit
    if environ.get(DATABASE_URL_ENV):
        return environ[DATABASE_URL_ENV]
    return f"sqlite:///{default_sqlite_path(environ)}"


def normalise_url(url: str | URL) -> URL:
    """Parse a URL and give `postgresql://` the psycopg 3 driver, which is the one installed.

    SQLAlchemy would otherwise pick psycopg2 for a bare `postgresql://`, and people copy
    URLs from `psql` and docker-compose files, which never name a driver. A URL that cannot
    work (a port that is not a number, a `connect_timeout` that is not one) is refused here,
    in one line with the password masked, rather than by the driver in a traceback.
    """
    try:
        parsed = make_url(url) if isinstance(url, str) else url
    except (ArgumentError, ValueError):
        raise LedgerError(f"not a database URL: {masked_url(url)}") from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() not in ("postgresql", "sqlite"):
        raise LedgerError(
            f"unsupported database {parsed.drivername!r}: use postgresql:// or sqlite:///"
        )
    shown = masked_url(parsed)
    if parsed.port is not None and not 1 <= parsed.port <= 65535:
        raise LedgerError(f"database URL {shown}: the port must be from 1 to 65535")
    timeout = parsed.query.get("connect_timeout")
    if timeout is not None and not (
        isinstance(timeout, str)
        and timeout.isascii()
        and timeout.isdigit()
        and int(timeout) <= MAX_CONNECT_TIMEOUT_SECONDS
    ):
        raise LedgerError(
            f"database URL {shown}: connect_timeout must be whole seconds from 0 to "
            f"{MAX_CONNECT_TIMEOUT_SECONDS}"
        )
    return parsed


def masked_url(url: str | URL) -> str:
    """`url` as it may be printed: the password of its user info and the value of every
    query parameter that carries a secret (libpq's `password`, `sslpassword`,
    `oauth_client_secret`; `token`, `api_key` and their kin) replaced by `***`; the rest as
    written. Text surgery, not parsing, so a URL no parser accepts is masked too; where the
    user info ends is ambiguous (an `@` in a password), it masks more, never less. The one
    masking function for every URL setting: the ledger's errors, `preemptctl config`, the
    CLI's error lines and the worker's logs all print URLs through it."""
    text = url.render_as_string(hide_password=True) if isinstance(url, URL) else str(url)
    scheme = text.find("://")
    if scheme >= 0:
        start = scheme + 3
        end = min(
            (i for i in (text.find("?", start), text.find("#", start)) if i >= 0), default=len(text)
        )
        at = text.rfind("@", start, end)
        user, colon, _ = text[start:at].partition(":") if at >= 0 else ("", "", "")
        if colon:
            text = f"{text[:start]}{user}:{MASK}{text[at:]}"
    query = text.find("?")
    if query < 0:
        return text
    fragment = text.find("#", query)
    end = fragment if fragment >= 0 else len(text)
    pairs = [_masked_pair(pair) for pair in text[query + 1 : end].split("&")]
    return text[: query + 1] + "&".join(pairs) + text[end:]


def _masked_pair(pair: str) -> str:
    key, equals, _ = pair.partition("=")
    name = unquote(key).strip().lower()  # libpq decodes a key's %-escapes
    secret = name in SECRET_QUERY_KEYS or any(word in name for word in SECRET_KEY_WORDS)
    return f"{key}={MASK}" if secret and equals else pair


def masked_urls(text: str) -> str:
    """`text` (an error, a log line) with every URL in it passed through `masked_url`."""
    if "://" not in text:
        return text
    return _URL_IN_TEXT.sub(lambda found: masked_url(found.group()), text)


def display_url(url: str | URL) -> str:
    """The ledger's URL as an error shows it: normalised (the driver named) and masked,
    even when it is malformed."""
    try:
        return masked_url(normalise_url(url))
    except LedgerError:
        return masked_url(url)


def sqlite_path(url: URL) -> Path | None:
    """The file behind a SQLite URL, or None for Postgres and in-memory SQLite."""
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    return Path(url.database)


def _json_serializer(value: Any) -> str:
    return orjson.dumps(value).decode()


def create_ledger_engine(
    url: str | URL,
    *,
    pool_size: int = 5,
    echo: bool = False,
    session_settings: dict[str, str] | None = None,
) -> Engine:
    """An engine for the ledger; every connection is checked before use. On Postgres,
    `session_settings` are set on each connection as it opens (`-c name=value`), so no
    statement of a transaction is spent on them.

    `pool_pre_ping` matters for the "lose the database for a while" promise: after a
    Postgres restart the pool's connections are dead, and without the ping the first
    append after recovery would fail once more for no reason.
    """
    parsed = normalise_url(url)
    options: dict[str, Any] = {
        "pool_pre_ping": True,
        "json_serializer": _json_serializer,
        "json_deserializer": orjson.loads,
        "echo": echo,
    }
    if parsed.get_backend_name() == "postgresql":
        options["pool_size"] = pool_size
        options["max_overflow"] = pool_size
        connect_args: dict[str, Any] = {}
        if "connect_timeout" not in parsed.query:
            connect_args["connect_timeout"] = CONNECT_TIMEOUT_SECONDS
        if session_settings:
            connect_args["options"] = " ".join(
                f"-c {name}={value}" for name, value in sorted(session_settings.items())
            )
        if connect_args:
            options["connect_args"] = connect_args
        return create_engine(parsed, **options)
    options["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}
    path = sqlite_path(parsed)
    if path is not None:
        prepare_private_file(path)
    engine = create_engine(parsed, **options)
    event.listen(engine, "connect", _configure_sqlite)
    return engine


def prepare_private_file(path: Path) -> None:
    """Create the SQLite ledger's directory 0700 and the file 0600, before SQLite does.

    The ledger names pods, nodes and people's workloads: on a shared machine it is nobody
    else's to read. SQLite would create the file with the umask's mode (often 0644), and its
    WAL and shared-memory files copy the main file's mode, so the main file is made first.
    Existing files keep the mode their owner gave them.
    """
    if not path.parent.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not path.exists():
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:  # another process made it first: theirs stands
            pass
        except OSError as error:
            raise LedgerError(f"cannot create the ledger file {path}: {error.strerror}") from None


def _configure_sqlite(dbapi_connection: Any, _record: Any) -> None:
    """WAL so that readers (`history`) never block the worker's appends, and the reverse."""
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    finally:
        cursor.close()


def _first_line(error: BaseException) -> str:
    original = getattr(error, "orig", None) or error
    lines = [line.strip() for line in str(original).splitlines() if line.strip()]
    return lines[0] if lines else type(original).__name__


@contextmanager
def translated_errors(engine: Engine) -> Iterator[None]:
    """Turn driver errors a user or a retry policy can act on into `LedgerError`s.

    Unreachable → `LedgerUnavailableError` (retry as is); no table → `LedgerNotMigratedError`
    (run `preemptctl migrate`); data the database refuses (a NUL byte, a broken constraint) →
    `LedgerRejectedError` (never retry: the same rows would be refused for as long as the
    retry policy lasts). Anything else is a bug and propagates unchanged.
    """
    try:
        yield
    except DBAPIError as error:
        if _sqlstate(error)[:2] in REFUSED_DATA_CLASSES:
            raise LedgerRejectedError(
                f"the ledger database {display_url(engine.url)} refused the data: "
                f"{_first_line(error)}"
            ) from error
        translated = _translated(engine, error)
        if translated is error:
            raise
        raise translated from error
    except ValueError as error:
        # psycopg refuses a NUL byte in a text parameter before sending it, as a ValueError.
        if "NUL" not in str(error):
            raise
        raise LedgerRejectedError(
            f"the ledger database {display_url(engine.url)} refused the data: {error}"
        ) from error


def _sqlstate(error: DBAPIError) -> str:
    return str(getattr(error.orig, "sqlstate", None) or "")


INSUFFICIENT_PRIVILEGE = "42501"


def _translated(engine: Engine, error: DBAPIError) -> Exception:
    """The `LedgerError` for a driver error that is not about the data, or the error itself."""
    where = display_url(engine.url)
    if _is_missing_table(error):
        return LedgerNotMigratedError(_not_migrated(engine))
    if _sqlstate(error) == INSUFFICIENT_PRIVILEGE:
        return LedgerPermissionError(
            f"the ledger database {where} refused role {engine.url.username or '(default)'}: "
            f"{_first_line(error)} (see docs/ledger.md, least-privilege roles)"
        )
    if isinstance(error, OperationalError) or (
        isinstance(error, InterfaceError) and error.connection_invalidated
    ):
        return LedgerUnavailableError(
            f"cannot reach the ledger database {where}: {_first_line(error)}"
        )
    if error.connection_invalidated:
        return LedgerUnavailableError(f"lost the ledger database {where}: {_first_line(error)}")
    return error


def _is_missing_table(error: DBAPIError) -> bool:
    text = str(error.orig)
    return "no such table" in text or (EVENTS_TABLE in text and "does not exist" in text)


def _not_migrated(engine: Engine) -> str:
    return (
        f"the ledger database {display_url(engine.url)} has no ledger schema; "
        "run `preemptctl migrate` first"
    )

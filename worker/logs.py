"""The worker's logs: one JSON object a line, as log collectors in a cluster read them.

Built on python-json-logger (maintained, and what Loki, Elasticsearch and Cloud Logging
pipelines are usually fed by). Each line carries:

- `time`: UTC, RFC 3339 with milliseconds (`2026-11-24T04:34:02.123Z`), never local time;
- `level` (`info`, `warning`, ...), `logger`, `message`;
- every `extra=` field as a field of its own (`log.info("started", extra={"pod": key})`
  gives `"pod": "ns/name"`), values as JSON values, not a Python repr;
- inside an activity: `workflowId`, `runId`, `activityId`, `activityType`, `attempt`; inside
  a workflow: `workflowId`, `runId`, `workflowType` (the Temporal SDK's own context dict,
  `temporal_activity` / `temporal_workflow`, is folded into those);
- `error` with the traceback when a record has one;
- `workerProcess` in a workflow process's lines (`workflows-0`, ...), which share the main
  process's stream.

Every URL in a line, the message, a field or a traceback, has its secrets masked
(`masked_urls`: a password in its user info or its query string), whoever wrote it: a ledger
retry's error, a library's warning.

`--log-format text` is one line a record for people at a terminal.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import Any

from pythonjsonlogger.json import JsonFormatter as _BaseJsonFormatter
from temporalio import activity, workflow

from preemptctl.ledger.engine import masked_urls

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# LogRecord attributes that are not a caller's `extra=`: never copied as fields.
_RECORD_ATTRIBUTES = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys() | {"message", "asctime"}
)
# What the Temporal SDK's logger adapters attach, replaced by the flat fields below.
_TEMPORAL_CONTEXT = frozenset({"temporal_activity", "temporal_workflow"})


def rfc3339(created: float) -> str:
    """`created` (seconds since the epoch) as UTC RFC 3339 with milliseconds and a `Z`."""
    moment = datetime.fromtimestamp(created, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def temporal_context() -> dict[str, Any]:
    """The IDs of the activity or workflow this code runs in, or nothing outside one."""
    if activity.in_activity():
        info = activity.info()
        return {
            "workflowId": info.workflow_id,
            "runId": info.workflow_run_id,
            "activityId": info.activity_id,
            "activityType": info.activity_type,
            "attempt": info.attempt,
        }
    if workflow.in_workflow():
        winfo = workflow.info()
        return {
            "workflowId": winfo.workflow_id,
            "runId": winfo.run_id,
            "workflowType": winfo.workflow_type,
        }
    return {}


class JsonFormatter(_BaseJsonFormatter):
    """One JSON object a line; see the module docstring for its fields."""

    def __init__(self) -> None:
        super().__init__(reserved_attrs=sorted(_RECORD_ATTRIBUTES | _TEMPORAL_CONTEXT))

    def add_fields(
        self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]
    ) -> None:
        log_data["time"] = rfc3339(record.created)
        log_data["level"] = record.levelname.lower()
        log_data["logger"] = record.name
        message = getattr(record, "message", None) or ""  # set by format()
        log_data["message"] = masked_urls(message)
        log_data.update(temporal_context())
        for key, value in record.__dict__.items():
            if key not in _RECORD_ATTRIBUTES and key not in _TEMPORAL_CONTEXT:
                log_data[key] = _masked(value)
        fields = dict(message_dict)  # a dict logged as the message, plus what format() added
        error = fields.pop("exc_info", None) or (
            self.formatException(record.exc_info) if record.exc_info else record.exc_text
        )
        if error:
            log_data["error"] = _masked(error)
        stack = fields.pop("stack_info", None)
        if stack:
            log_data["stack"] = stack
        log_data.update(_masked(fields))


def _masked(value: Any) -> Any:
    """`value` with every URL in its text masked (`masked_urls`), through dicts and lists."""
    if isinstance(value, str):
        return masked_urls(value)
    if isinstance(value, dict):
        return {key: _masked(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_masked(item) for item in value]
    return value


class _TextFormatter(logging.Formatter):
    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return rfc3339(record.created)

    def format(self, record: logging.LogRecord) -> str:
        return masked_urls(super().format(record))


class _ProcessField(logging.Filter):
    """Names the replica's process a record comes from (`workerProcess`): a workflow
    process's lines are told from the main process's in the one stream they share."""

    def __init__(self, process: str) -> None:
        super().__init__()
        self._process = process

    def filter(self, record: logging.LogRecord) -> bool:
        record.workerProcess = self._process
        return True


def configure_logging(
    log_format: str, level: int = logging.INFO, *, process: str | None = None
) -> None:
    """Send every logger's records to stderr as `log_format` (`json` or `text`); `process`
    names a workflow process in each line (a `workerProcess` field, or `[name]` in text)."""
    handler = logging.StreamHandler(sys.stderr)
    text = (
        TEXT_FORMAT
        if process is None
        else TEXT_FORMAT.replace(" %(name)s", f" [{process}] %(name)s")
    )
    handler.setFormatter(JsonFormatter() if log_format == "json" else _TextFormatter(text))
    if process is not None:
        handler.addFilter(_ProcessField(process))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("temporalio").setLevel(logging.WARNING)
    # The SDK appends its context to the message as a Python dict's repr; in JSON the IDs are
    # fields already (`temporal_context`), so the message stays the message.
    activity.logger.activity_info_on_message = log_format != "json"
    workflow.logger.workflow_info_on_message = log_format != "json"

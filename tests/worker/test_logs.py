"""JSON logs that log tools can read.

Scenarios:
- a line is one JSON object with the time in UTC, RFC 3339 with milliseconds, the level,
  the logger and the message;
- each `extra=` value is a field of its own, as a JSON value (a list stays a list);
- inside an activity, the workflow, run and activity IDs are fields; the SDK's own context
  dict is not repeated, and with JSON logs it is not appended to the message either;
- an exception's traceback is the `error` field;
- a dict logged as the message becomes fields;
- the text format is one line with the same UTC time;
- a URL's secrets (user info's password, `?password=`, `sslpassword=`) are masked wherever a
  line carries them: the message, an `extra=` field (nested too), a traceback, a text line.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
from collections.abc import Iterator
from datetime import datetime

import pytest
from temporalio import activity
from temporalio.testing import ActivityEnvironment

from preemptctl.worker.logs import JsonFormatter, configure_logging, rfc3339


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("preemptctl.test-logs")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield logger, stream
    logger.removeHandler(handler)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_line_is_json_with_utc_milliseconds_level_logger_and_message(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = captured
    logger.info("preemption %s", "started")
    (line,) = lines(stream)
    assert line["level"] == "info"
    assert line["logger"] == "preemptctl.test-logs"
    assert line["message"] == "preemption started"
    time = str(line["time"])
    assert time.endswith("Z") and len(time.split(".")[1]) == 4  # 3 digits and the Z
    offset = datetime.fromisoformat(time.replace("Z", "+00:00")).utcoffset()
    assert offset is not None and offset.total_seconds() == 0


def test_rfc3339_is_utc_with_milliseconds() -> None:
    assert rfc3339(0.5) == "1970-01-01T00:00:00.500Z"


def test_extra_values_are_fields_of_their_own(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = captured
    logger.info("finished", extra={"preemptor": "prod/api-0", "victims": ["a", "b"], "n": 2})
    (line,) = lines(stream)
    assert (line["preemptor"], line["victims"], line["n"]) == ("prod/api-0", ["a", "b"], 2)


def test_inside_an_activity_the_temporal_ids_are_fields(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = captured

    @activity.defn(name="delete_victim")
    def delete_victim() -> None:
        activity.logger.logger.addHandler(logger.handlers[0])
        try:
            activity.logger.warning("victim gone")
        finally:
            activity.logger.logger.removeHandler(logger.handlers[0])

    environment = ActivityEnvironment()
    environment.info = dataclasses.replace(
        environment.info, activity_type="delete_victim", workflow_id="preemption-abc"
    )
    saved = activity.logger.activity_info_on_message
    activity.logger.activity_info_on_message = False  # as configure_logging("json") sets it
    try:
        environment.run(delete_victim)
    finally:
        activity.logger.activity_info_on_message = saved
    (line,) = lines(stream)
    assert (line["activityType"], line["workflowId"]) == ("delete_victim", "preemption-abc")
    assert {"runId", "activityId", "attempt"} <= set(line)
    assert line["message"] == "victim gone"
    assert "temporal_activity" not in line


def test_a_traceback_is_the_error_field(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    try:
        raise ValueError("bad quantity")
    except ValueError:
        logger.exception("cannot plan")
    (line,) = lines(stream)
    assert line["message"] == "cannot plan"
    assert "ValueError: bad quantity" in str(line["error"])


def test_a_dict_message_becomes_fields(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    logger.info({"event": "synced", "kinds": 9})
    (line,) = lines(stream)
    assert (line["event"], line["kinds"], line["message"]) == ("synced", 9, "")


def test_the_text_format_is_one_line_in_utc(capsys: pytest.CaptureFixture[str]) -> None:
    saved = logging.getLogger().handlers[:], logging.getLogger().level
    try:
        configure_logging("text")
        logging.getLogger("preemptctl").warning("hello")
    finally:
        logging.getLogger().handlers[:], level = saved
        logging.getLogger().setLevel(level)
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith("Z WARNING preemptctl: hello")


SECRET_URL = "postgresql://w:hunter1@db/ledger?password=hunter2&sslpassword=hunter3"
MASKED_URL = "postgresql://w:***@db/ledger?password=***&sslpassword=***"


def test_a_urls_secrets_are_masked_in_the_message_fields_and_traceback(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = captured
    try:
        raise ConnectionError(f"cannot reach {SECRET_URL}")
    except ConnectionError:
        logger.exception(
            "waiting for the ledger %s: down",
            SECRET_URL,
            extra={"ledger": SECRET_URL, "tried": {"urls": [SECRET_URL]}},
        )
    (line,) = lines(stream)
    assert line["message"] == f"waiting for the ledger {MASKED_URL}: down"
    assert (line["ledger"], line["tried"]) == (MASKED_URL, {"urls": [MASKED_URL]})
    assert f"ConnectionError: cannot reach {MASKED_URL}" in str(line["error"])
    assert "hunter" not in stream.getvalue()


def test_a_urls_secrets_are_masked_in_a_text_line(capsys: pytest.CaptureFixture[str]) -> None:
    saved = logging.getLogger().handlers[:], logging.getLogger().level
    try:
        configure_logging("text")
        logging.getLogger("preemptctl").warning("ledger %s does not answer", SECRET_URL)
    finally:
        logging.getLogger().handlers[:], level = saved
        logging.getLogger().setLevel(level)
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith(f"Z WARNING preemptctl: ledger {MASKED_URL} does not answer")

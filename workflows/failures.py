"""How a failure reads in the Temporal UI: its cause and its fix, without a Python stack trace
when the cause is known.

Every failure this project raises on purpose is an `ApplicationError` whose message already
says what failed, on which object, and what to do (an RBAC denial names the verb and
resource to grant; a worker that runs dry says how to let it act; a failed preemption names
its victim and the cause). Its stack trace names only the lines of ours that classified it:
nothing a reader needs, and the UI opens a failure on it. `ClassifiedFailureConverter` drops
the stack trace of every `ApplicationError` in a failure's chain, as the activity or the
workflow raised it; any other exception (a bug, a failure nobody classified) keeps its
trace, since there it is the clue.

A client that starts workers uses it through `with_classified_failures` (the worker's
`DataConverter` then encodes every activity's, local activity's and workflow's failure
with it).
"""

from __future__ import annotations

import dataclasses

from temporalio.api.failure.v1 import Failure
from temporalio.client import Client
from temporalio.converter import DefaultFailureConverter, PayloadConverter
from temporalio.exceptions import ApplicationError


class ClassifiedFailureConverter(DefaultFailureConverter):
    """The SDK's failure converter, without the stack trace of a classified failure."""

    def to_failure(
        self,
        exception: BaseException,
        payload_converter: PayloadConverter,
        failure: Failure,
    ) -> None:
        super().to_failure(exception, payload_converter, failure)
        error: BaseException | None = exception
        level: Failure | None = failure
        while error is not None and level is not None:
            if isinstance(error, ApplicationError) and error.failure is None:
                level.stack_trace = ""
            error = _cause_of(error)
            level = level.cause if level.HasField("cause") else None


def _cause_of(error: BaseException) -> BaseException | None:
    """The exception the SDK encodes as `error`'s cause (its `__cause__`, else its context
    unless suppressed), as `DefaultFailureConverter` follows it."""
    if error.__cause__ is not None:
        return error.__cause__
    if not error.__suppress_context__:
        return error.__context__
    return None


def with_classified_failures(client: Client) -> Client:
    """`client` whose data converter encodes failures with `ClassifiedFailureConverter`
    (the same connection; every other converter as it was)."""
    converter = client.data_converter
    if converter.failure_converter_class is ClassifiedFailureConverter:
        return client
    config = client.config()
    config["data_converter"] = dataclasses.replace(
        converter, failure_converter_class=ClassifiedFailureConverter
    )
    return Client(**config)

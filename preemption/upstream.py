"""One victim kube-scheduler itself preempted: the value shadow mode compares decisions with.

The Kubernetes side parses it from a `Preempted` Event (`kube.upstream_events`), the ledger
stores and reads it back (`ledger.upstream`), and `preemptctl compare` sets it beside this
controller's decisions; one definition serves all three, so they cannot drift.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class UpstreamPreemption:
    """One victim kube-scheduler preempted, as its Event tells it. `preemptor_uid` is ""
    only for the old message form whose preemptor the worker could not resolve."""

    event_uid: str
    occurred_at: datetime
    victim_namespace: str
    victim_name: str
    victim_uid: str | None
    preemptor_uid: str
    preemptor_namespace: str | None
    preemptor_name: str | None
    node: str | None
    message: str

    @property
    def victim_key(self) -> str:
        return f"{self.victim_namespace}/{self.victim_name}"

    @property
    def preemptor_key(self) -> str | None:
        if self.preemptor_namespace and self.preemptor_name:
            return f"{self.preemptor_namespace}/{self.preemptor_name}"
        return None

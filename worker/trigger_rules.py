"""Which pods get a preemption, and when they are tried again: the trigger's pure rules.

A pod triggers a preemption when it is pending and unschedulable (`PodScheduled=False`,
reason `Unschedulable`), served by one of our scheduler names, at or above the minimum
priority, not `preemptionPolicy: Never`, not terminating (`trigger_reason`). A critical pod
the kubelet refused for lack of resources (phase Failed, reason `OutOf…`) gets the kubelet's
critical-admission strategy instead.

When a pod is tried again (`RetryBook`, on the caller's clock):
- a failed start (Temporal unavailable, a timeout) is retried after 1 s, doubling up to
  10 s, as the scheduler's backoff queue spaces retries (podInitialBackoff, podMaxBackoff);
- a preemption that ended while its pod still needs room is retried after 10 s, doubling up
  to the configured cap, as the scheduler's unschedulable queue is flushed;
- a preemption that ended non-retryable parks its pod (`Parked`) until what it asks of the
  cluster changes (`pod_signature`: its spec and labels, not its status) or a person
  retries it.

No Temporal, no threads: the trigger loop (`worker.trigger`) applies these rules, and the
tests read them alone.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime

from preemptctl.preemption.decision import Strategy
from preemptctl.preemption.objects import PREEMPT_NEVER, Pod
from preemptctl.worker.config import Settings

INITIAL_BACKOFF = 1.0  # after a start that did not happen
MAX_BACKOFF = 10.0  # cap of the start backoff; the first wait after a preemption ended

# Pod fields that change without the pod asking anything new of the cluster: a parked pod
# stays parked across them.
STATUS_FIELDS = frozenset(
    {
        "resource_version",
        "unschedulable",
        "phase",
        "status_reason",
        "start_time",
        "nominated_node_name",
        "disrupted_by_scheduler",
        "terminating",
    }
)


def trigger_reason(pod: Pod, settings: Settings) -> tuple[str, Strategy] | None:
    """Why `pod` needs a preemption now, and by which strategy; None when it does not."""
    if pod.terminating or pod.priority < settings.min_priority:
        return None
    if pod.preemption_policy == PREEMPT_NEVER:
        return None
    if (
        pod.node_name
        and pod.phase == "Failed"
        and pod.is_critical()
        and pod.status_reason.startswith("OutOf")
    ):
        return f"admission failed ({pod.status_reason})", Strategy.CRITICAL_ADMISSION
    if pod.scheduler_name not in settings.scheduler_names:
        return None
    if not pod.node_name and pod.phase == "Pending" and pod.unschedulable:
        return "Unschedulable", Strategy.DEFAULT
    return None


def pod_signature(pod: Pod) -> str:
    """What the pod asks of the cluster (spec and labels, not status): a parked pod is
    tried again when this changes."""
    return repr(
        tuple(
            (field.name, getattr(pod, field.name))
            for field in dataclasses.fields(pod)
            if field.name not in STATUS_FIELDS
        )
    )


@dataclass(frozen=True)
class Parked:
    """A pod whose preemption ended for a cause retrying cannot fix."""

    uid: str
    pod: str  # namespace/name
    reason: str
    since: datetime
    signature: str


@dataclass
class _Entry:
    starts: int = 0  # consecutive starts that did not happen
    ends: int = 0  # consecutive preemptions that ended with the pod still needing room
    next: float = 0.0
    parked: Parked | None = None


class RetryBook:
    """Per-pod retry state: when each pod may be tried next, and which pods are parked.

    Times are the caller's clock (monotonic seconds), so tests drive it with a fake one."""

    def __init__(self, maximum: float) -> None:
        self._maximum = maximum
        self._entries: dict[str, _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, uid: object) -> bool:
        return uid in self._entries

    def due(self, uid: str, now: float) -> bool:
        entry = self._entries.get(uid)
        return entry is None or (entry.parked is None and now >= entry.next)

    def start_failed(self, uid: str, now: float) -> float:
        """A start did not happen: wait 1 s, doubling up to 10 s. Returns the wait."""
        entry = self._entries.setdefault(uid, _Entry())
        entry.starts += 1
        delay = min(INITIAL_BACKOFF * 2.0 ** min(entry.starts - 1, 32), MAX_BACKOFF)
        entry.next = max(entry.next, now + delay)
        return delay

    def started(self, uid: str) -> None:
        self._entries.setdefault(uid, _Entry()).starts = 0

    def ended(self, uid: str, now: float) -> float:
        """A preemption for `uid` ended; if its pod still needs room, it waits 10 s, doubling
        with each further end, up to the cap. Returns the wait."""
        entry = self._entries.setdefault(uid, _Entry())
        entry.ends += 1
        delay = self.retry_delay(entry.ends)
        entry.next = max(entry.next, now + delay)
        return delay

    def retry_delay(self, ends: int) -> float:
        return min(MAX_BACKOFF * 2.0 ** min(max(ends - 1, 0), 32), self._maximum)

    def current_delay(self, uid: str) -> float:
        """The wait after the latest end (at least the first one)."""
        entry = self._entries.get(uid)
        return self.retry_delay(entry.ends if entry is not None else 1)

    def hold(self, uid: str, until: float) -> None:
        """Do not try `uid` before `until`."""
        entry = self._entries.setdefault(uid, _Entry())
        entry.next = max(entry.next, until)

    def tried(self, uid: str) -> bool:
        """At least one preemption for `uid` ended since it began needing room."""
        entry = self._entries.get(uid)
        return entry is not None and (entry.ends > 0 or entry.parked is not None)

    def park(self, parked: Parked) -> None:
        entry = self._entries.setdefault(parked.uid, _Entry())
        entry.ends += 1
        entry.parked = parked

    def parked(self, uid: str) -> Parked | None:
        entry = self._entries.get(uid)
        return entry.parked if entry is not None else None

    def all_parked(self) -> list[Parked]:
        return [e.parked for e in self._entries.values() if e.parked is not None]

    def unpark(self, uid: str) -> None:
        """Try `uid` again now, its backoff started over."""
        self._entries.pop(uid, None)

    def waiting(self, now: float) -> int:
        """Pods backing off (not parked) at `now`."""
        return sum(1 for e in self._entries.values() if e.parked is None and e.next > now)

    def forget(self, uid: str) -> None:
        self._entries.pop(uid, None)

    def uids(self) -> list[str]:
        return list(self._entries)


@dataclass
class PendingPod:
    pod: Pod
    reason: str
    strategy: Strategy

"""Which pods get a preemption, and when they are tried again: the trigger's pure rules.

A pod triggers a preemption when it is pending and unschedulable (`PodScheduled=False`,
reason `Unschedulable`), served by one of our scheduler names, at or above the minimum
priority, not `preemptionPolicy: Never`, not terminating (`trigger_reason`). A critical pod
the kubelet refused for lack of resources (phase Failed, reason `OutOf…`) gets the kubelet's
critical-admission strategy instead.

A pod that belongs to a group (a PodGroup it names in `spec.schedulingGroup`, else the group
the `pod_group_label` setting's label names) never gets a pod preemption: its group gets a
group preemption (`pending_groups`, `pending_group`), as upstream preempts for a gang's
members only as one group. A group is pending when it exists (its PodGroup is in the view;
a label-named group exists while it has pods), has a pending unschedulable member served by
our scheduler names, its priority is at or above the minimum, and it may preempt: not
`preemptionPolicy: Never` on the group or, when the group sets none, on any member.

When a pod is tried again (`RetryBook`, on the caller's clock):
- a failed start (Temporal unavailable, a timeout) is retried after 1 s, doubling up to
  10 s, as the scheduler's backoff queue spaces retries (podInitialBackoff, podMaxBackoff);
- a preemption that ended while its pod still needs room is retried after 10 s, doubling up
  to the configured cap, as the scheduler's unschedulable queue is flushed;
- one that found no candidate only because claims of preemptions still running held the room
  it lacked (its decision's `claimsInTheWay`: the pods those claims place) is woken as soon
  as one of those preemptions ends (`RetryBook.freed`: a claim ends with its run), at least
  `WAKE_FLOOR` after its own end, the backoff above its latest; the run a wake starts says so
  in its ledger's `retried` event (`woken_reason`), and its end does not double the backoff
  (a wake is no blind retry);
- a preemption that ended non-retryable parks its pod (`Parked`) until what it asks of the
  cluster changes (`pod_signature`: its spec and labels, not its status) or a person
  retries it.

A pending unschedulable pod of a scheduler this controller does not serve (its
`schedulerName` not one of `scheduler_names`, `PREEMPT_SCHEDULER_NAMES`) is left to that
scheduler (`left_to_another_scheduler`), as kube-scheduler leaves another profile's pods
alone; but silence would look like a controller that saw nothing, so the trigger counts
each such pod once and logs it once (`note_left_to_another_scheduler`), and the worker and
dev say at start which names they serve (`serving_line`).

No Temporal, no threads: the trigger loop (`worker.trigger`) applies these rules, and the
tests read them alone.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from preemptctl.preemption.claimed_room import CLAIMS_IN_THE_WAY
from preemptctl.preemption.decision import Strategy
from preemptctl.preemption.group_decision import GroupRef, label_group_uid
from preemptctl.preemption.objects import PREEMPT_NEVER, Pod
from preemptctl.preemption.snapshot import ClusterSnapshot
from preemptctl.worker.config import Settings

log = logging.getLogger(__name__)

INITIAL_BACKOFF = 1.0  # after a start that did not happen
MAX_BACKOFF = 10.0  # cap of the start backoff; the first wait after a preemption ended
WAKE_FLOOR = 1.0  # the least wait after an end blocked by claims, however soon they end
FREED_KEPT = 60.0  # how long an end that freed claimed room is remembered (`RetryBook.ended`)

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
    """Why `pod` needs a preemption now, and by which strategy; None when it does not (a
    member of a group among them: its group is preempted for, `pending_group`)."""
    if pod.terminating or pod.priority < settings.min_priority:
        return None
    if group_of(pod, settings) is not None:
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


def left_to_another_scheduler(pod: Pod, settings: Settings) -> str | None:
    """The `schedulerName` of a pod this controller leaves to another scheduler: pending
    and unschedulable, a preemptor by every other rule (priority, policy, not leaving), but
    of a scheduler it does not serve; None for any other pod."""
    if pod.scheduler_name in settings.scheduler_names:
        return None
    if pod.node_name or pod.phase != "Pending" or not pod.unschedulable or pod.terminating:
        return None
    if pod.priority < settings.min_priority or pod.preemption_policy == PREEMPT_NEVER:
        return None
    return pod.scheduler_name


class PodTally(Protocol):
    """A counter each pod adds to at most once (`worker.metrics.OncePerPod`)."""

    def count(self, uid: str, label: str) -> bool:
        """Count the pod `uid` under `label`; False when it was counted already."""
        ...


def note_left_to_another_scheduler(pod: Pod, settings: Settings, tally: PodTally) -> None:
    """Count and log, once per pod, a pod left to another scheduler (the trigger calls this
    for every pod it judges; a pod of a served scheduler costs one set lookup)."""
    scheduler = left_to_another_scheduler(pod, settings)
    if scheduler is None or not tally.count(pod.uid, scheduler):
        return
    # A warning: once per pod, and what a person who expected a preemption needs to see
    # (dev prints warnings; a worker whose schedulerName setting is wrong says so at once).
    log.warning(
        "%s is pending and unschedulable, but its schedulerName %r is not one this controller "
        "serves (%s): left to that scheduler; PREEMPT_SCHEDULER_NAMES names the ones served",
        pod.key,
        scheduler,
        ", ".join(settings.scheduler_names),
        extra={"pod": pod.key, "scheduler_name": scheduler},
    )


def serving_line(settings: Settings) -> str:
    """What the worker and dev say at start about the pods they serve."""
    names = ", ".join(settings.scheduler_names)
    return (
        f"serving pods of schedulerName {names} (PREEMPT_SCHEDULER_NAMES); a pending pod of "
        "another scheduler is left to it, logged once and counted in "
        "preemptctl_pods_left_to_other_schedulers_total"
    )


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


@dataclass(frozen=True)
class Woken:
    """A pod (or group) tried again early: the preemption whose run ended, and with it its
    claim on room the pod's last preemption lacked."""

    uid: str  # the pod (or group) woken
    holder: str  # the preemption that held the claim ("namespace/name": a pod or a group)
    claimed: str  # the pod its claim placed in the way ("namespace/name"; a group's member)
    ended: str  # how its run ended (its outcome)
    at: float  # when the woken pod may start (its floor, or the end itself)


def woken_reason(woken: Woken) -> str:
    """Why a wake started a run, in the words of its ledger's `retried` event and the log."""
    held = woken.holder
    if woken.claimed != woken.holder:
        held += f" (its member {woken.claimed})"
    how = f" {woken.ended}" if woken.ended else ""
    return (
        f"woken: the room claimed by {held} was freed: its preemption's run ended{how}; the "
        "last run found no candidate while that claim held it"
    )


def claims_in_the_way(decision: Mapping[str, Any] | None) -> dict[str, list[str]]:
    """What a recorded decision (its ledger payload) says held the room it lacked: its
    rationale's `claimsInTheWay`, node -> the pods claims of running preemptions placed
    there ("namespace/name"); empty when nothing did, or the record says nothing readable."""
    rationale = (decision or {}).get("rationale")
    found = rationale.get(CLAIMS_IN_THE_WAY) if isinstance(rationale, Mapping) else None
    if not isinstance(found, Mapping):
        return {}
    return {
        str(node): [str(pod) for pod in pods]
        for node, pods in found.items()
        if isinstance(pods, list) and pods
    }


@dataclass
class _Entry:
    starts: int = 0  # consecutive starts that did not happen
    ends: int = 0  # consecutive preemptions that ended with the pod still needing room
    next: float = 0.0
    parked: Parked | None = None
    # The pods claims placed in the room its last preemption lacked ("namespace/name"): the
    # end of a preemption that placed one wakes it, not before `floor`.
    blocked_by: frozenset[str] = frozenset()
    floor: float = 0.0
    woken: Woken | None = None  # the wake its next (or running) start comes from


class RetryBook:
    """Per-pod retry state: when each pod may be tried next, and which pods are parked.

    Times are the caller's clock (monotonic seconds), so tests drive it with a fake one."""

    def __init__(self, maximum: float) -> None:
        self._maximum = maximum
        self._entries: dict[str, _Entry] = {}
        # The pods whose claims ended lately ("namespace/name" -> when, the holder, how its
        # run ended), for an end booked just after them (`ended`).
        self._freed: dict[str, tuple[float, str, str]] = {}

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
        entry = self._entries.setdefault(uid, _Entry())
        entry.starts = 0
        entry.blocked_by = frozenset()  # its new run's end says what is in its way now

    def ended(
        self,
        uid: str,
        now: float,
        blocked_by: Collection[str] = (),
        since: float | None = None,
    ) -> float:
        """A preemption for `uid` ended; if its pod still needs room, it waits 10 s, doubling
        with each further end, up to the cap. Returns the wait.

        `blocked_by`: it found no candidate while claims of preemptions still running held
        the room it lacked (the pods those claims place, "namespace/name"): the end of one
        of those preemptions wakes it (`freed`), not before `WAKE_FLOOR` from now; the wait
        returned is then the longest. One that ended already, since `since` (when this run
        started), wakes it at once. The end of a run a wake started does not double the
        wait."""
        entry = self._entries.setdefault(uid, _Entry())
        if entry.woken is None:
            entry.ends += 1
        entry.woken = None
        delay = self.retry_delay(entry.ends)
        entry.next = max(entry.next, now + delay)
        entry.blocked_by = frozenset(blocked_by)
        entry.floor = now + WAKE_FLOOR
        if since is not None:
            for claimed in sorted(entry.blocked_by):
                freed = self._freed.get(claimed)
                if freed is not None and freed[0] >= since:
                    self._wake(uid, entry, claimed, freed[1], freed[2], now)
                    break
        return delay

    def freed(
        self, holder: str, placed: Collection[str], now: float, ended: str = ""
    ) -> list[Woken]:
        """The run of `holder`'s preemption ended (`ended`: how), and with it its claim on
        the pods it placed (`placed`: its preemptor, or a group's members, "namespace/name"):
        each pod or group whose latest preemption found no candidate while one of them held
        the room is woken: due now, or at its floor. Those woken, by UID order."""
        horizon = now - FREED_KEPT
        self._freed = {key: seen for key, seen in self._freed.items() if seen[0] >= horizon}
        for key in placed:
            self._freed[key] = (now, holder, ended)
        woken = []
        for uid in sorted(self._entries):
            entry = self._entries[uid]
            hit = entry.blocked_by.intersection(placed)
            if hit and entry.parked is None:
                woken.append(self._wake(uid, entry, min(hit), holder, ended, now))
        return woken

    def _wake(
        self, uid: str, entry: _Entry, claimed: str, holder: str, ended: str, now: float
    ) -> Woken:
        at = max(now, entry.floor)
        entry.next = min(entry.next, at)
        entry.blocked_by = frozenset()
        entry.woken = Woken(uid, holder, claimed, ended, at)
        return entry.woken

    def woken(self, uid: str) -> Woken | None:
        """The wake the next start of `uid` comes from, if a wake made it due."""
        entry = self._entries.get(uid)
        return entry.woken if entry is not None else None

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


# -- groups -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupKey:
    """The group a pod belongs to: a PodGroup it names, or the value of the gang label."""

    namespace: str
    name: str
    label_named: bool

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def group_of(pod: Pod, settings: Settings) -> GroupKey | None:
    """The group `pod` belongs to, or None: the PodGroup it names (`spec.schedulingGroup`),
    else the group its `pod_group_label` label names (a setting), as the planner reads it."""
    if pod.group:
        return GroupKey(pod.namespace, pod.group, False)
    label = settings.pod_group_label
    if label:
        value = pod.labels.get(label)
        if value is not None:
            return GroupKey(pod.namespace, value, True)
    return None


@dataclass
class PendingGroup:
    """A group that needs a group preemption: the group, its pending unschedulable members
    (in name order) and why, in one line."""

    group: GroupRef
    members: list[Pod]
    reason: str


def _waiting(pod: Pod, settings: Settings) -> bool:
    """A member the scheduler could not place: pending, unschedulable, ours, not leaving."""
    return (
        not pod.node_name
        and pod.phase == "Pending"
        and pod.unschedulable
        and not pod.terminating
        and pod.scheduler_name in settings.scheduler_names
    )


def pending_group(
    snapshot: ClusterSnapshot, group: GroupKey, settings: Settings
) -> PendingGroup | None:
    """Whether `group` needs a group preemption now (see the module docstring), and for
    which members; None when it does not. Read under the view's lock."""
    if group.label_named:
        label = settings.pod_group_label
        members = [
            p
            for p in (snapshot.label_group_members(label, group.key) if label else [])
            if not p.group  # a pod naming a PodGroup belongs to that one
        ]
        if not members:
            return None
        priority = max(p.priority for p in members)
        ref = GroupRef(
            group.namespace, group.name, label_group_uid(group.namespace, group.name), priority
        )
        policy = ""
    else:
        found = snapshot.pod_group(group.key)
        if found is None:  # upstream waits for the group object too
            return None
        members = snapshot.group_members(group.key)
        ref = GroupRef(group.namespace, group.name, found.uid, found.priority)
        policy = found.preemption_policy
    if ref.priority < settings.min_priority:
        return None
    if policy == PREEMPT_NEVER or (
        not policy and any(p.preemption_policy == PREEMPT_NEVER for p in members)
    ):
        return None
    waiting = sorted((p for p in members if _waiting(p, settings)), key=lambda p: p.name)
    if not waiting:
        return None
    return PendingGroup(
        ref, waiting, f"Unschedulable: {len(waiting)} of {len(members)} member(s) pending"
    )


def pending_groups(snapshot: ClusterSnapshot, settings: Settings) -> list[PendingGroup]:
    """Every group that needs a group preemption now, by group key. Walks every pod once:
    for a pass over the whole view (the trigger's resync), not for each watch event (use
    `group_of` and `pending_group` there)."""
    seen: dict[str, GroupKey] = {}
    for pod in _pending_pods(snapshot.pods.values()):
        found = group_of(pod, settings)
        if found is not None:
            seen.setdefault(found.key, found)
    pending = (pending_group(snapshot, seen[key], settings) for key in sorted(seen))
    return [group for group in pending if group is not None]


def _pending_pods(pods: Iterable[Pod]) -> Iterable[Pod]:
    return (pod for pod in pods if not pod.node_name and pod.unschedulable)

"""The payload of each event kind, as one dataclass that writers build and readers parse.

The JSON keys are camelCase, like the planner's decision JSON, and are part of the ledger's
format: add fields with defaults, never rename one. `from_json` tolerates a missing field (an
older writer) and ignores an unknown one (a newer writer). The decision kinds carry the
planner's decision JSON whole (`Decision.to_json()` plus a `context`), which has its own
contract (DESIGN.md, the planner contract) and stays a dict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from preemptctl.ledger.kinds import EventKind


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


@dataclass(frozen=True, slots=True)
class Throttled:
    """`throttled`: the eviction budget held a decision back."""

    message: str
    retry_after: float
    victims: list[str] = field(default_factory=list)  # "ns/name" of the victims it would take

    def to_json(self) -> dict[str, Any]:
        return {"message": self.message, "retryAfter": self.retry_after, "victims": self.victims}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Throttled:
        return cls(
            str(data.get("message", "")),
            float(data.get("retryAfter") or 0.0),
            [str(v) for v in data.get("victims") or ()],
        )


@dataclass(frozen=True, slots=True)
class Write:
    """`nominated`, `nomination_cleared` and `member_nominated`: a write to a pod's
    nomination, as the API server settled it (`effect`, a `kube.results.WriteEffect` value;
    `message`; the nomination it replaced or kept as `previous`), or the `error` that kept
    it from being made. `pod` and `uid` name a cleared pod, or a group's nominated member.
    The effect's JSON key is `verdict`, as rows were first written."""

    effect: str | None = None
    message: str | None = None
    previous: str | None = None
    error: str | None = None
    pod: str | None = None
    uid: str | None = None

    def to_json(self) -> dict[str, Any]:
        shown: dict[str, Any] = {}
        if self.pod is not None:
            shown.update(pod=self.pod, uid=self.uid)
        if self.error is not None:
            shown["error"] = self.error
        else:
            shown.update(verdict=self.effect, message=self.message, previous=self.previous)
        return shown

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Write:
        return cls(
            _text(data.get("verdict")),
            _text(data.get("message")),
            _text(data.get("previous")),
            _text(data.get("error")),
            _text(data.get("pod")),
            _text(data.get("uid")),
        )


@dataclass(frozen=True, slots=True)
class VictimChosen:
    """`victim_chosen`: the victim's place in the decision's order (0 = most important);
    for a group preemption, the victim unit it went with (`unit`, as the decision's
    `rationale.units` names it: "podGroup ml/train-b", "pod default/web-1")."""

    rank: int
    unit: str | None = None

    def to_json(self) -> dict[str, Any]:
        shown: dict[str, Any] = {"rank": self.rank}
        if self.unit is not None:
            shown["unit"] = self.unit
        return shown

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> VictimChosen:
        return cls(int(data.get("rank") or 0), _text(data.get("unit")))


@dataclass(frozen=True, slots=True)
class MemberPlaced:
    """`member_placed`: a pending member of the group that the decision placed on the
    event's node (`pod`: "namespace/name", and its `uid`)."""

    pod: str
    uid: str

    def to_json(self) -> dict[str, Any]:
        return {"pod": self.pod, "uid": self.uid}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MemberPlaced:
        return cls(str(data.get("pod") or ""), str(data.get("uid") or ""))


@dataclass(frozen=True, slots=True)
class VictimStep:
    """`victim_marked`, `victim_deleted`, `victim_already_gone`, `victim_replaced`,
    `victim_failed`, `victim_unmarked`: what the API server answered (`message`), or the
    `error` that failed the step for good; `terminating` when the victim was already on its way out;
    `replaced_by_uid`, the UID of the pod that now has the victim's name; `answer_lost`
    (`victim_deleted` only) when this run's DELETE was sent by an earlier attempt whose
    answer never arrived, and the retry found the victim gone."""

    message: str | None = None
    error: str | None = None
    terminating: bool = False
    replaced_by_uid: str | None = None
    answer_lost: bool = False

    def to_json(self) -> dict[str, Any]:
        shown: dict[str, Any] = {}
        if self.error is not None:
            shown["error"] = self.error
        else:
            shown["message"] = self.message
        if self.terminating:
            shown["terminating"] = True
        if self.replaced_by_uid:
            shown["replacedByUid"] = self.replaced_by_uid
        if self.answer_lost:
            shown["answerLost"] = True
        return shown

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> VictimStep:
        return cls(
            _text(data.get("message")),
            _text(data.get("error")),
            bool(data.get("terminating", False)),
            _text(data.get("replacedByUid")),
            bool(data.get("answerLost", False)),
        )


@dataclass(frozen=True, slots=True)
class DeleteSent:
    """`victim_delete_sent`: the intent recorded before a victim's DELETE is sent; whether
    it goes as an eviction (the Eviction API) or a plain DELETE."""

    eviction: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"eviction": self.eviction}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DeleteSent:
        return cls(bool(data.get("eviction", False)))


@dataclass(frozen=True, slots=True)
class Terminal:
    """The terminal events that do not carry the decision (`completed`, `dry_run`,
    `preemption_aborted`, `failed`): why the run ended (`reason`,
    or the `error` of a failure), and for `completed` after victims, whether the preemptor
    was then scheduled. A failure says whether retrying can cure it (`retryable`): one that
    cannot (an RBAC denial) parks the pod until it changes or a person runs `retry`."""

    reason: str | None = None
    error: str | None = None
    preemptor_scheduled: bool | None = None
    retryable: bool | None = None

    def to_json(self) -> dict[str, Any]:
        shown: dict[str, Any] = {}
        if self.retryable is not None:
            shown["retryable"] = self.retryable
        if self.preemptor_scheduled is not None:
            shown["preemptorScheduled"] = self.preemptor_scheduled
        if self.reason is not None:
            shown["reason"] = self.reason
        if self.error is not None:
            shown["error"] = self.error
        return shown

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Terminal:
        scheduled = data.get("preemptorScheduled")
        retryable = data.get("retryable")
        return cls(
            _text(data.get("reason")),
            _text(data.get("error")),
            None if scheduled is None else bool(scheduled),
            None if retryable is None else bool(retryable),
        )


@dataclass(frozen=True, slots=True)
class Scheduled:
    """`preemptor_scheduled`: how long after the decision the preemptor was bound; for a
    group preemption, appended once minCount members are bound, with how many are
    (`members_bound`). `after_end`: the preemptor was bound after its run had ended
    without it (a failed or aborted run, a parked pod the scheduler placed anyway),
    appended by whoever saw the bind (`ledger.writer.record_bound_after_end`)."""

    seconds_since_decision: float | None = None
    members_bound: int | None = None
    after_end: bool = False

    def to_json(self) -> dict[str, Any]:
        shown: dict[str, Any] = {"secondsSinceDecision": self.seconds_since_decision}
        if self.members_bound is not None:
            shown["membersBound"] = self.members_bound
        if self.after_end:
            shown["afterEnd"] = True
        return shown

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Scheduled:
        given = data.get("secondsSinceDecision")
        bound = data.get("membersBound")
        return cls(
            None if given is None else float(given),
            None if bound is None else int(bound),
            bool(data.get("afterEnd", False)),
        )


@dataclass(frozen=True, slots=True)
class Retried:
    """`retried`: a new run of the preemption takes over, appended by that run before its
    decision: `by` whom it was started ("trigger", or "person" from the CLI), `reason`,
    and after which run (`previous_run_id`, which ended `previous_outcome`, or None when
    it never recorded an end: a run terminated from outside)."""

    new_run_id: str | None = None
    previous_run_id: str | None = None
    previous_outcome: str | None = None
    by: str | None = None
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "newRunId": self.new_run_id,
            "previousRunId": self.previous_run_id,
            "previousOutcome": self.previous_outcome,
            "by": self.by,
            "reason": self.reason,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Retried:
        return cls(
            _text(data.get("newRunId")),
            _text(data.get("previousRunId")),
            _text(data.get("previousOutcome")),
            _text(data.get("by")),
            _text(data.get("reason")),
        )


Payload = (
    Throttled
    | Write
    | VictimChosen
    | MemberPlaced
    | VictimStep
    | DeleteSent
    | Terminal
    | Scheduled
    | Retried
)

PAYLOAD_OF_KIND: dict[EventKind, type[Payload]] = {
    EventKind.THROTTLED: Throttled,
    EventKind.DRY_RUN: Terminal,
    EventKind.NOMINATED: Write,
    EventKind.NOMINATION_CLEARED: Write,
    EventKind.MEMBER_PLACED: MemberPlaced,
    EventKind.MEMBER_NOMINATED: Write,
    EventKind.VICTIM_CHOSEN: VictimChosen,
    EventKind.VICTIM_MARKED: VictimStep,
    EventKind.VICTIM_DELETED: VictimStep,
    EventKind.VICTIM_ALREADY_GONE: VictimStep,
    EventKind.VICTIM_REPLACED: VictimStep,
    EventKind.VICTIM_FAILED: VictimStep,
    EventKind.VICTIM_DELETE_SENT: DeleteSent,
    EventKind.VICTIM_UNMARKED: VictimStep,
    EventKind.PREEMPTION_ABORTED: Terminal,
    EventKind.PREEMPTOR_SCHEDULED: Scheduled,
    EventKind.COMPLETED: Terminal,
    EventKind.FAILED: Terminal,
    EventKind.RETRIED: Retried,
}
"""The payload type of every kind but the decision kinds (`kinds.DECISION_KINDS`)."""

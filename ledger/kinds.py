"""What can happen to a preemption: the `kind` of each ledger event.

The enum values are what the `kind` column stores, so renaming a member is a data
migration, and adding one is free (the column is plain text, not a database enum, so old
rows stay valid and an older reader can be upgraded after a newer writer).
"""

from __future__ import annotations

from enum import StrEnum


class EventKind(StrEnum):
    """One thing that happened; the comment names the payload fields writers put in."""

    # The planner's decisions; the payload is `Decision.to_json()` whole.
    DECISION_MADE = "decision_made"  # verdict Preempt or FitsWithoutPreemption
    NO_CANDIDATE = "no_candidate"  # verdict Unschedulable: no node where preemption helps
    INELIGIBLE = "ineligible"  # verdict Ineligible: e.g. preemptionPolicy Never
    UNSUPPORTED = "unsupported"  # verdict Unsupported: a filter the planner does not model
    THROTTLED = "throttled"  # a decision held back by a rate budget {"message", "retryAfter"}
    DRY_RUN = "dry_run"  # the worker runs dry: decided, recorded, nothing touched

    # The preemptor's nomination and the nominations it displaces.
    NOMINATED = "nominated"  # node column: the nominated node
    NOMINATION_CLEARED = "nomination_cleared"  # {"pod": "ns/name", "uid"}

    # A group preemption's members (the preemptor columns name the group). `member_placed`
    # is appended with the decision, one per pending member it placed (node column: where),
    # so the group's claim holds that room from the write-ahead on {"pod", "uid"};
    # `member_nominated` is the nominate step's write of that member's nominatedNodeName,
    # as the API server settled it (the `nominated` payload, with {"pod", "uid"}).
    MEMBER_PLACED = "member_placed"
    MEMBER_NOMINATED = "member_nominated"

    # Each victim's fate; the victim columns name it. `victim_chosen` is appended with the
    # decision (see `ledger.events.decision_events`) so a victim is found by an index even
    # when nothing was done to it yet (or ever: a dry run). {"rank"}, and for a group
    # preemption's victim the unit it went with {"unit": "podGroup ml/train-b"}.
    VICTIM_CHOSEN = "victim_chosen"
    VICTIM_MARKED = "victim_marked"  # DisruptionTarget condition patched
    VICTIM_DELETED = "victim_deleted"  # deleted with a UID precondition
    VICTIM_ALREADY_GONE = "victim_already_gone"  # NotFound: someone else removed it
    VICTIM_REPLACED = "victim_replaced"  # same name, new UID {"replacedByUid"}
    VICTIM_FAILED = "victim_failed"  # the write failed for good {"error"}
    # An intent, appended before a victim's DELETE (or eviction) is sent: a retry of the
    # activity that finds it recorded knows an earlier attempt of this run sent the call,
    # so a victim gone by then is one this preemption deleted (its answer was lost), not
    # one someone else removed. Not a fate: the views leave it out. {"eviction"}
    VICTIM_DELETE_SENT = "victim_delete_sent"
    # A spared or failed victim's DisruptionTarget condition removed when the run stopped
    # short (kube-controller-manager would clear it after 2 minutes). Not a fate either.
    # {"message"} or {"error"}
    VICTIM_UNMARKED = "victim_unmarked"

    # How the preemption ended.
    PREEMPTION_ABORTED = "preemption_aborted"  # preemptor gone or bound elsewhere {"reason"}
    PREEMPTOR_SCHEDULED = "preemptor_scheduled"  # {"secondsSinceDecision"}; node column
    COMPLETED = "completed"
    FAILED = "failed"  # {"error"}
    RETRIED = "retried"  # a new run takes over {"newRunId"}


DECISION_KINDS = frozenset(
    {
        EventKind.DECISION_MADE,
        EventKind.NO_CANDIDATE,
        EventKind.INELIGIBLE,
        EventKind.UNSUPPORTED,
    }
)
"""Events whose payload is the planner's decision JSON."""

VICTIM_KINDS = frozenset(
    {
        EventKind.VICTIM_CHOSEN,
        EventKind.VICTIM_MARKED,
        EventKind.VICTIM_DELETED,
        EventKind.VICTIM_ALREADY_GONE,
        EventKind.VICTIM_REPLACED,
        EventKind.VICTIM_FAILED,
    }
)
"""Events about one victim, with the victim columns filled in."""

TERMINAL_KINDS = frozenset(
    {
        EventKind.COMPLETED,
        EventKind.FAILED,
        EventKind.PREEMPTION_ABORTED,
        EventKind.DRY_RUN,
        EventKind.NO_CANDIDATE,
        EventKind.INELIGIBLE,
        EventKind.UNSUPPORTED,
    }
)
"""Events after which a run does nothing more; a later `retried` reopens the preemption."""

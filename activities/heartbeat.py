"""What the cluster answered a victim's step (or a round of victims', by UID), kept in the
attempt's heartbeat details.

A Temporal concern: an attempt retried after a failed ledger append records the answer the
first attempt got (a victim it deleted is "deleted", not "already gone"), without asking the
API server again. A local activity has no heartbeat: it is retried by its own worker, which
asks again (and the ledger's intent row tells a lost answer apart, see `delete_victim`).
"""

from __future__ import annotations

from collections.abc import Callable

from temporalio import activity

from preemptctl.activities.contracts import VictimResult
from preemptctl.ledger.vocabulary import Fate


def remember(result: VictimResult) -> None:
    """Keep the cluster's answer in the attempt's heartbeat details, for a retry."""
    if activity.info().is_local:
        return
    activity.heartbeat(
        result.fate.value,
        result.message,
        result.replaced_by_uid or "",
        result.answer_lost,
        result.terminating,
    )


def answered() -> VictimResult | None:
    """The answer an earlier attempt got from the cluster, if it heartbeat one."""
    details = activity.info().heartbeat_details
    if len(details) not in (3, 4, 5):  # 3, 4: a worker from before `answer_lost`, `terminating`
        return None
    fate, message, replaced_by, *flags = details
    return VictimResult(
        Fate(str(fate)),
        str(message),
        replaced_by_uid=str(replaced_by) or None,
        answer_lost=bool(flags and flags[0]),
        terminating=len(flags) > 1 and bool(flags[1]),
    )


def remember_all(answers: dict[str, VictimResult]) -> None:
    """Keep the cluster's answers of a round of victims (by UID) in the attempt's heartbeat
    details, for a retry of the round: the victims already answered are not asked again."""
    if activity.info().is_local:
        return
    activity.heartbeat(
        {
            uid: [r.fate.value, r.message, r.replaced_by_uid or "", r.answer_lost, r.terminating]
            for uid, r in answers.items()
        }
    )


def answered_all() -> dict[str, VictimResult]:
    """The answers an earlier attempt of a round got from the cluster, by victim UID."""
    details = activity.info().heartbeat_details
    if len(details) != 1 or not isinstance(details[0], dict):
        return {}
    return {
        str(uid): VictimResult(
            Fate(str(fate)),
            str(message),
            replaced_by_uid=str(replaced_by) or None,
            answer_lost=bool(answer_lost),
            terminating=bool(terminating),
        )
        for uid, (fate, message, replaced_by, answer_lost, terminating) in details[0].items()
    }


def beat_while_waiting() -> Callable[[], object]:
    """What the select calls while it waits its turn to decide: a regular activity's
    heartbeat, so that a worker that died is noticed; nothing for a local one (its workflow
    task's timeout notices that)."""
    return (lambda: None) if activity.info().is_local else activity.heartbeat

"""The eviction budget: at most N victims chosen in any minute, across every worker.

The victims chosen are in the ledger (written ahead under the decision lock), so the budget
is counted there: a decision that would take more than the last minute leaves room for waits
until enough of those evictions are a minute old. A preemption needing more victims than a
whole minute's budget goes through when the minute has been quiet, or it would starve.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

WINDOW = timedelta(minutes=1)


def seconds_until_budget_allows(
    recent: Sequence[datetime], victims: int, per_minute: int, now: datetime
) -> float:
    """0 when `victims` more evictions fit in the budget now; else how long until they do.

    `recent` holds when each eviction of the last minute was decided, oldest first.
    """
    in_window = [moment for moment in recent if moment > now - WINDOW]
    if len(in_window) + victims <= per_minute or not in_window:
        return 0.0
    # The evictions that must age out of the window before these fit.
    must_expire = min(len(in_window), len(in_window) + victims - per_minute)
    frees_at = in_window[must_expire - 1] + WINDOW
    # Decision times come from each workflow's clock, so one may precede `now` by a moment;
    # no eviction needs more than one window to age out.
    return min(WINDOW.total_seconds(), max(0.0, (frees_at - now).total_seconds()))

"""The eviction budget: at most N victims chosen in any minute, counted from the ledger.

Scenarios:
- evictions that fit in the last minute's room go through at once;
- past the budget, a decision waits exactly until enough evictions are a minute old;
- evictions older than a minute do not count;
- a preemption bigger than the whole budget goes through after a quiet minute, so it
  cannot starve;
- no decision waits longer than one minute.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from preemptctl.preemption.budget import seconds_until_budget_allows

NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def test_evictions_within_the_budget_go_through() -> None:
    assert seconds_until_budget_allows([ago(30), ago(10)], 4, 6, NOW) == 0.0


def test_past_the_budget_a_decision_waits_for_old_evictions_to_age_out() -> None:
    recent = [ago(50), ago(40), ago(30), ago(20), ago(10), ago(5)]
    # 6 in the window, 2 more wanted, budget 6: the two oldest must age out (at +20 s).
    assert seconds_until_budget_allows(recent, 2, 6, NOW) == pytest.approx(20.0)


def test_evictions_older_than_a_minute_do_not_count() -> None:
    assert seconds_until_budget_allows([ago(90), ago(61)], 2, 2, NOW) == 0.0


def test_a_preemption_bigger_than_the_budget_passes_after_a_quiet_minute() -> None:
    assert seconds_until_budget_allows([], 5, 2, NOW) == 0.0
    assert seconds_until_budget_allows([ago(10)], 5, 2, NOW) == pytest.approx(50.0)


def test_no_decision_waits_longer_than_one_minute() -> None:
    # Another worker's clock may be a moment ahead of this decision's.
    slightly_ahead = NOW + timedelta(milliseconds=20)
    assert seconds_until_budget_allows([slightly_ahead], 1, 1, NOW) == 60.0

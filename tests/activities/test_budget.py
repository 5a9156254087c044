"""The eviction budget: a token bucket of N evictions a minute.

Scenarios:
- a full minute's budget may be spent at once;
- past it, a request waits exactly until the bucket refills enough;
- time refills the bucket, never above one minute's worth;
- a preemption needing more than a whole minute's budget goes through when the bucket is
  full, so it cannot starve.
"""

from __future__ import annotations

import pytest

from activities.budget import EvictionBudget


def test_a_full_minute_may_be_spent_at_once() -> None:
    budget = EvictionBudget(6, now=0.0)
    assert budget.take(6, now=0.0) == 0.0


def test_past_the_budget_a_request_waits_for_the_refill() -> None:
    budget = EvictionBudget(6, now=0.0)  # one eviction every 10 s
    budget.take(6, now=0.0)
    assert budget.take(2, now=0.0) == pytest.approx(20.0)
    assert budget.take(2, now=20.0) == 0.0


def test_refill_never_exceeds_one_minute() -> None:
    budget = EvictionBudget(6, now=0.0)
    budget.take(1, now=0.0)
    assert budget.take(6, now=3600.0) == 0.0
    assert budget.take(1, now=3600.0) == pytest.approx(10.0)


def test_a_preemption_bigger_than_the_budget_passes_when_the_bucket_is_full() -> None:
    budget = EvictionBudget(2, now=0.0)
    assert budget.take(5, now=0.0) == 0.0
    assert budget.take(5, now=1.0) > 0.0

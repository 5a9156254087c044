"""The decision path for pod groups, beside pod decisions (no Temporal, no API server): a
SQLite ledger, an in-memory view, and the PodGroup read as the API server would return it.

Scenarios:
- a group decision is written ahead: the decision (the group in the preemptor columns, its
  JSON and context), one `member_placed` per member it placed, on that member's node, and one
  `victim_chosen` per victim, on the victim's node, naming its unit; no end while it goes on;
- a group's claim is respected by a pod decision, in the same batch, in a later one and in
  another process (read back from the ledger): neither its victims nor its members' room
  are taken again; and a pod's claim by a later group decision;
- a batch is decided in priority order, pod or group, whatever the order of arrival: the more
  important request takes the contested room, the other meets its claim;
- a retried group run does not meet its own claim, and chooses the victims it holds;
- a group run decides once: asked again (its worker lost after the write-ahead), it is told
  to resume, nothing written, also once it no longer needs room (its PodGroup gone after
  the deletes it made: stopping would leave them unrecorded);
- 1) a group gone, replaced, or with no pending member stops the decision before the lock,
  with its reason and nothing written; a label-named group with no pod left is gone;
- the PodGroup as step 1 read it is what is planned with (not the view's older copy);
- a label-named group is decided under its synthetic UID;
- a dry run's group decision ends its run at once and claims nothing;
- a group decision over the eviction budget is held back (`throttled`, the group named).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select

from preemptctl import migrations
from preemptctl.deciding.path import (
    Decided,
    DecidedGroup,
    DecisionPath,
    DecisionRequest,
    GroupDecisionRequest,
    Resumed,
)
from preemptctl.kube.pods import PodGroupLookup, Presence
from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.ledger.events import decision_events
from preemptctl.ledger.models import events
from preemptctl.ledger.writer import append_batch
from preemptctl.preemption.decision import PodRef, Verdict
from preemptctl.preemption.decode import decode_pod_group
from preemptctl.preemption.default_preemption import PreemptionArgs
from preemptctl.preemption.group_decision import GroupRef, label_group_uid
from tests.deciding.test_path import View
from tests.ledger.builders import API, four_candidate
from tests.preemption.builders import node, pod, pod_group

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
KUEUE = "kueue.x-k8s.io/pod-group-name"


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Engine]:
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    migrations.upgrade(url)
    engine = create_ledger_engine(url)
    yield engine
    engine.dispose()


class GroupView(View):
    """The test_path view, with PodGroups."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        super().__init__(items)
        self.groups = {i["metadata"]["name"]: i for i in items if i["kind"] == "PodGroup"}

    def group_request(self, name: str, run: str = "run-1", **options: Any) -> GroupDecisionRequest:
        meta = self.groups[name]["metadata"]
        ref = GroupRef(meta["namespace"], name, meta["uid"], self.groups[name]["spec"]["priority"])
        return GroupDecisionRequest(f"g-{name}", run, NOW, ref, **options)


def two_full_nodes(*extra: dict[str, Any]) -> GroupView:
    """node-a and node-b (4 cpu), each full of four 1-cpu priority-100 pods a0..a3, b0..b3,
    the `..0` pods in a disruptionMode-all group `whole`; a pending gang `train` (priority
    1000, minCount 2) of two 4-cpu members; a pending 3-cpu pod `web` (priority 500)."""
    items = [
        node("node-a", cpu="4"),
        node("node-b", cpu="4"),
        pod_group("whole", priority=100, disruption="all"),
        *(
            pod(
                f"a{i}",
                priority=100,
                cpu="1",
                node="node-a",
                start=i,
                group="whole" if not i else None,
            )
            for i in range(4)
        ),
        *(
            pod(
                f"b{i}",
                priority=100,
                cpu="1",
                node="node-b",
                start=i,
                group="whole" if not i else None,
            )
            for i in range(4)
        ),
        pod_group("train", priority=1000, min_count=2),
        pod("train-0", priority=1000, cpu="4", group="train"),
        pod("train-1", priority=1000, cpu="4", group="train"),
        pod("web", priority=500, cpu="3"),
        *extra,
    ]
    return GroupView(items)


def rows(ledger: Engine) -> list[tuple[str, str, str | None, str | None, dict[str, Any]]]:
    with ledger.connect() as connection:
        found = connection.execute(select(events).order_by(events.c.id))
        return [(r.kind, r.preemptor_name, r.node, r.victim_name, r.payload) for r in found]


def test_a_group_decision_is_written_ahead_with_members_and_units(ledger: Engine) -> None:
    view = two_full_nodes()
    decided = view.path(ledger, identity="w").decide_group(view.group_request("train"))
    assert decided.decision is not None and decided.decision.verdict is Verdict.PREEMPT
    written = rows(ledger)
    decision = written[0]
    assert decision[:4] == ("decision_made", "train", None, None)
    assert decision[4]["podGroup"] == "default/train"
    assert decision[4]["context"] == {"worker": "w", "sequence": 1, "claims": []}
    assert [(kind, where, payload) for kind, _, where, _, payload in written[1:3]] == [
        ("member_placed", "node-a", {"pod": "default/train-0", "uid": "uid-default-train-0"}),
        ("member_placed", "node-b", {"pod": "default/train-1", "uid": "uid-default-train-1"}),
    ]
    assert [(kind, where, victim, payload) for kind, _, where, victim, payload in written[3:]] == [
        ("victim_chosen", "node-a", "a0", {"rank": 0, "unit": "podGroup default/whole"}),
        ("victim_chosen", "node-b", "b0", {"rank": 1, "unit": "podGroup default/whole"}),
        ("victim_chosen", "node-a", "a1", {"rank": 2, "unit": "pod default/a1"}),
        ("victim_chosen", "node-b", "b1", {"rank": 3, "unit": "pod default/b1"}),
        ("victim_chosen", "node-a", "a2", {"rank": 4, "unit": "pod default/a2"}),
        ("victim_chosen", "node-b", "b2", {"rank": 5, "unit": "pod default/b2"}),
        ("victim_chosen", "node-a", "a3", {"rank": 6, "unit": "pod default/a3"}),
        ("victim_chosen", "node-b", "b3", {"rank": 7, "unit": "pod default/b3"}),
    ]


def test_a_pod_decision_respects_a_groups_claim_in_a_later_batch(ledger: Engine) -> None:
    view = two_full_nodes()
    path = view.path(ledger)
    group = path.decide_group(view.group_request("train"))
    later = path.decide(view.request("web"))
    assert group.decision is not None
    assert later.decision.verdict is Verdict.UNSCHEDULABLE
    assert later.claims == ["default/train"]


def test_a_groups_claim_read_back_from_the_ledger_holds_for_a_new_path(ledger: Engine) -> None:
    view = two_full_nodes()
    view.path(ledger).decide_group(view.group_request("train"))
    later = view.path(ledger).decide(view.request("web"))  # a fresh claim reader
    assert later.decision.verdict is Verdict.UNSCHEDULABLE
    assert later.claims == ["default/train"]


def test_a_group_decision_respects_a_pods_claim(ledger: Engine) -> None:
    view = two_full_nodes()
    path = view.path(ledger)
    first = path.decide(view.request("web"))
    group = path.decide_group(view.group_request("train"))
    assert first.decision.verdict is Verdict.PREEMPT
    assert group.decision is not None and group.decision.verdict is Verdict.UNSCHEDULABLE
    assert group.claims == ["default/web"]


def decide_in_arrival_order(
    path: DecisionPath, requests: list[DecisionRequest | GroupDecisionRequest]
) -> list[Decided | DecidedGroup]:
    """Queue the requests one after another, in this order, while the turn is taken."""
    path.queue.turn.acquire()
    try:
        with ThreadPoolExecutor(max_workers=len(requests)) as pool:
            futures = []
            for count, request in enumerate(requests, start=1):
                if isinstance(request, GroupDecisionRequest):
                    futures.append(pool.submit(path.decide_group, request))
                else:
                    futures.append(pool.submit(path.decide, request))
                deadline = time.monotonic() + 10
                while len(path.queue) < count:
                    assert time.monotonic() < deadline, "the request never queued"
                    time.sleep(0.005)
            path.queue.turn.release()
            return [f.result() for f in futures]
    finally:
        if path.queue.turn.locked():
            path.queue.turn.release()


def test_a_batch_is_decided_in_priority_order_pod_or_group(ledger: Engine) -> None:
    view = two_full_nodes()
    path = view.path(ledger)
    web, train = decide_in_arrival_order(path, [view.request("web"), view.group_request("train")])
    assert isinstance(web, Decided) and isinstance(train, DecidedGroup)
    assert train.decision is not None and train.decision.verdict is Verdict.PREEMPT
    assert train.claims == []
    assert web.decision.verdict is Verdict.UNSCHEDULABLE
    assert web.claims == ["default/train"]
    assert [made for _, made in path.holds] == [2]


def test_two_pods_are_decided_in_priority_order_whatever_their_arrival(ledger: Engine) -> None:
    view = GroupView(
        [
            node("node-a", cpu="4"),
            *(pod(f"a{i}", priority=100, cpu="1", node="node-a") for i in range(4)),
            pod("low", priority=500, cpu="4"),
            pod("high", priority=1000, cpu="4"),
        ]
    )
    low, high = decide_in_arrival_order(
        view.path(ledger), [view.request("low"), view.request("high")]
    )
    assert isinstance(low, Decided) and isinstance(high, Decided)
    assert high.decision.verdict is Verdict.PREEMPT
    assert low.decision.verdict is Verdict.UNSCHEDULABLE
    assert low.claims == ["default/high"]


def test_a_retried_group_run_does_not_meet_its_own_claim(ledger: Engine) -> None:
    view = two_full_nodes()
    path = view.path(ledger)
    first = path.decide_group(view.group_request("train", run="run-1"))
    again = path.decide_group(view.group_request("train", run="run-2"))
    assert first.decision is not None and again.decision is not None
    assert again.decision.verdict is Verdict.PREEMPT
    assert again.decision.victims == first.decision.victims
    assert again.claims == []


def test_a_group_run_asked_again_resumes_from_its_decision(ledger: Engine) -> None:
    view = two_full_nodes()
    path = view.path(ledger)
    first = path.decide_group(view.group_request("train"))
    assert first.decision is not None and first.decision.verdict is Verdict.PREEMPT
    before = rows(ledger)
    assert path.decide_group(view.group_request("train")) == Resumed("g-train", "run-1")
    assert rows(ledger) == before


def test_a_group_run_asked_again_after_its_group_is_gone_resumes(ledger: Engine) -> None:
    view = two_full_nodes()
    view.path(ledger).decide_group(view.group_request("train"))
    gone = DecisionPath(
        ledger, view, view.lookup, read_group=lambda ref: PodGroupLookup(Presence.GONE, None)
    )
    assert gone.decide_group(view.group_request("train")) == Resumed("g-train", "run-1")


def nothing_written(ledger: Engine) -> bool:
    return rows(ledger) == []


@pytest.mark.parametrize(
    ("presence", "reason"),
    [
        (Presence.GONE, "the pod group default/train is gone"),
        (Presence.REPLACED, "the pod group default/train was replaced by one with another UID"),
    ],
)
def test_a_group_gone_or_replaced_stops_the_decision(
    ledger: Engine, presence: Presence, reason: str
) -> None:
    view = two_full_nodes()
    path = DecisionPath(
        ledger, view, view.lookup, read_group=lambda ref: PodGroupLookup(presence, None)
    )
    decided = path.decide_group(view.group_request("train"))
    assert decided == DecidedGroup(None, stopped=reason, message=reason)
    assert nothing_written(ledger) and not path.holds


def test_a_group_with_no_pending_member_stops_the_decision(ledger: Engine) -> None:
    view = GroupView(
        [
            node("node-a", cpu="4"),
            pod_group("train", priority=1000, min_count=1),
            pod("train-0", priority=1000, cpu="1", node="node-a", group="train"),
        ]
    )
    decided = view.path(ledger).decide_group(view.group_request("train"))
    assert decided.stopped == "no member of the pod group default/train is pending (1 bound)"
    assert decided.decision is None and nothing_written(ledger)


def test_a_label_named_group_without_pods_is_gone(ledger: Engine) -> None:
    view = two_full_nodes()
    path = view.path(ledger, planner_args=PreemptionArgs(pod_group_label=KUEUE))
    ref = GroupRef("default", "job-9", label_group_uid("default", "job-9"), 1000)
    decided = path.decide_group(GroupDecisionRequest("g-job-9", "run-1", NOW, ref))
    assert decided.stopped == "the pod group default/job-9 is gone"


def test_the_group_is_planned_as_step_1_read_it(ledger: Engine) -> None:
    view = two_full_nodes()
    fresh = decode_pod_group(pod_group("train", priority=50, min_count=2, uid="pg-train"))
    path = DecisionPath(
        ledger, view, view.lookup, read_group=lambda ref: PodGroupLookup(Presence.FOUND, fresh)
    )
    decided = path.decide_group(view.group_request("train"))
    assert decided.decision is not None
    assert decided.decision.verdict is Verdict.UNSCHEDULABLE  # at 50, nothing is below it
    with view.read() as snapshot:
        kept = snapshot.pod_group("default/train")
    assert kept is not None and kept.priority == 1000  # the view's own copy is back


def test_a_label_named_group_is_decided_under_its_synthetic_uid(ledger: Engine) -> None:
    view = two_full_nodes(
        pod("job-0", priority=1000, cpu="3", labels={KUEUE: "job"}),
        pod("job-1", priority=1000, cpu="3", labels={KUEUE: "job"}),
    )
    path = view.path(ledger, planner_args=PreemptionArgs(pod_group_label=KUEUE))
    ref = GroupRef("default", "job", label_group_uid("default", "job"), 1000)
    decided = path.decide_group(GroupDecisionRequest("g-job", "run-1", NOW, ref))
    assert decided.decision is not None and decided.decision.verdict is Verdict.PREEMPT
    with ledger.connect() as connection:
        uids = set(connection.execute(select(events.c.preemptor_uid)).scalars())
    assert uids == {ref.uid}


def test_a_dry_run_group_decision_ends_its_run_and_claims_nothing(ledger: Engine) -> None:
    view = two_full_nodes()
    path = view.path(ledger)
    group = path.decide_group(view.group_request("train", dry_run=True))
    later = path.decide(view.request("web"))
    assert group.decision is not None and group.decision.verdict is Verdict.PREEMPT
    ends = [row[4] for row in rows(ledger) if row[0] == "dry_run"]
    assert ends == [{"reason": group.decision.message}]
    assert later.decision.verdict is Verdict.PREEMPT and later.claims == []


def test_a_group_decision_over_the_eviction_budget_is_held_back(ledger: Engine) -> None:
    view = two_full_nodes()
    append_batch(ledger, decision_events("p-x", "run-x", API, four_candidate(), NOW))
    path = view.path(ledger, evictions_per_minute=3)
    decided = path.decide_group(view.group_request("train"))
    assert decided.decision is not None and decided.retry_after_seconds == 60.0
    assert decided.message.startswith("held back by the eviction budget (3/min): 8 victim(s)")
    [(kind, name, where, victim, payload)] = rows(ledger)[3:]
    assert (kind, name, where, victim) == ("throttled", "train", None, None)
    assert payload["victims"] == [v.key for v in decided.decision.victims]


def test_a_group_request_is_json_friendly() -> None:
    ref = GroupRef("ml", "train-a", "u-1", 1000)
    assert ref.to_json() == {"namespace": "ml", "name": "train-a", "uid": "u-1", "priority": 1000}
    assert ref.as_preemptor() == PodRef("ml", "train-a", "u-1", 1000)
    assert dataclasses.asdict(ref) == ref.to_json()
    assert not ref.label_named
    assert GroupRef("ml", "job", label_group_uid("ml", "job")).label_named

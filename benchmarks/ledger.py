"""How fast the ledger appends and answers, on local Postgres; prints its figures.

    .venv/bin/python -m benchmarks.ledger [--events 1000000] [--writers 8]

Targets (issue 4): >= 2,000 appended events/s from concurrent writers; `history` and
`explain` over 1,000,000 events in <= 200 ms. The benchmark creates its own database
(`preemptctl_bench_<hex>`, via `tests.support.postgres.fresh_database`) and drops it.

Appends are measured the way the worker appends: each writer a coroutine calling
`append_async` (one event, one transaction, durable commit) or `append_batch_async` (a
decision with its victims). The million events are then loaded with COPY, because the
read figures are about the indexes, not about how the rows got there.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import redirect_stdout
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import psycopg

from preemptctl import migrations
from preemptctl.ledger.engine import create_ledger_engine
from preemptctl.ledger.events import LedgerEvent, decision_events
from preemptctl.ledger.kinds import EventKind
from preemptctl.ledger.narrative import preemptor_story, victim_story
from preemptctl.ledger.queries import HistoryQuery, explain, history
from preemptctl.ledger.vocabulary import Outcome
from preemptctl.ledger.writer import append_async, append_batch_async
from preemptctl.preemption.decision import (
    Decision,
    NodeEvaluation,
    PodRef,
    Rationale,
    SelectionStep,
    Strategy,
    Verdict,
)
from preemptctl.worker.cli import main as cli_main
from tests.support.postgres import fresh_database

COLUMNS = (
    "preemption_id",
    "run_id",
    "kind",
    "occurred_at",
    "preemptor_namespace",
    "preemptor_name",
    "preemptor_uid",
    "preemptor_priority",
    "node",
    "victim_namespace",
    "victim_name",
    "victim_uid",
    "victim_priority",
    "payload",
    "idempotency_key",
)
EPOCH = datetime(2026, 10, 1, tzinfo=UTC)
NAMESPACES = [f"team-{i:02d}" for i in range(50)]
NODES = [f"node-{i:04d}" for i in range(1000)]


def decision_payload(preemptor: PodRef, node: str, victims: list[PodRef]) -> Decision:
    """A realistic decision: what the planner gives for four candidate nodes."""
    others = random.sample(NODES, 3)
    rationale = Rationale(
        strategy=Strategy.DEFAULT,
        nodes_total=len(NODES),
        filtered={"Insufficient cpu": 996},
        potential_nodes=996,
        offset=17,
        candidates_wanted=100,
        evaluated=[NodeEvaluation(n, True, victims=("x/y",)) for n in [node, *others]],
        selection=[
            SelectionStep("minNumPDBViolations", tuple(sorted([node, *others]))),
            SelectionStep("minHighestPriority", (node,)),
        ],
        deciding_criterion="minHighestPriority",
    )
    return Decision(
        preemptor,
        Verdict.PREEMPT,
        f"preempt {len(victims)} pod(s) on {node} (0 PDB violation(s)); "
        "chosen by minHighestPriority among 4 candidate node(s)",
        rationale,
        nominated_node=node,
        victims=tuple(victims),
    )


def synthetic_preemption(index: int, at: datetime) -> Iterator[tuple[Any, ...]]:
    """About ten rows of one preemption, most completed, some failed, aborted or dry runs."""
    pid, run = f"preempt-{index:07d}", "run-1"
    # team-NN/api-K recurs every 20,000 preemptions: a pod with a history of its own.
    name = index % 20000
    preemptor = PodRef(NAMESPACES[name % 50], f"api-{name}", f"uid-p-{index}", 1000)
    victims = [
        PodRef(
            random.choice(NAMESPACES),
            f"batch-{random.randrange(200000)}",
            f"uid-v-{index}-{k}",
            100 - k,
        )
        for k in range(2)
    ]
    node = random.choice(NODES)
    roll = random.random()
    ending = (
        EventKind.COMPLETED
        if roll < 0.90
        else EventKind.FAILED
        if roll < 0.95
        else EventKind.PREEMPTION_ABORTED
        if roll < 0.98
        else EventKind.DRY_RUN
    )
    story: list[LedgerEvent] = decision_events(
        pid, run, preemptor, decision_payload(preemptor, node, victims), at
    )
    story.append(LedgerEvent(pid, run, EventKind.NOMINATED, preemptor, node, occurred_at=at))
    if ending is not EventKind.DRY_RUN:
        for k, victim in enumerate(victims):
            for kind in (EventKind.VICTIM_MARKED, EventKind.VICTIM_DELETED):
                at += timedelta(milliseconds=300 + 100 * k)
                story.append(LedgerEvent(pid, run, kind, preemptor, node, victim, occurred_at=at))
        at += timedelta(seconds=3)
        story.append(
            LedgerEvent(
                pid,
                run,
                EventKind.PREEMPTOR_SCHEDULED,
                preemptor,
                node,
                payload={"secondsSinceDecision": 4.2},
                occurred_at=at,
            )
        )
    payload = {"error": "delete: 403 Forbidden"} if ending is EventKind.FAILED else {}
    story.append(LedgerEvent(pid, run, ending, preemptor, node, payload=payload, occurred_at=at))
    for ledger_event in story:
        row = ledger_event.to_row()
        row["payload"] = orjson.dumps(row["payload"]).decode()
        yield tuple(row[c] for c in COLUMNS)


def load(url: str, total: int) -> tuple[int, float, datetime]:
    """COPY about `total` events; returns (rows, seconds, newest time)."""
    random.seed(4)
    started = time.perf_counter()
    rows = 0
    at = EPOCH
    spacing = timedelta(days=30) / max(total // 10, 1)
    plain = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain) as connection, connection.cursor() as cursor:
        with cursor.copy(f"COPY preemption_events ({', '.join(COLUMNS)}) FROM STDIN") as copy:
            index = 0
            while rows < total:
                for row in synthetic_preemption(index, at):
                    copy.write_row(row)
                    rows += 1
                index += 1
                at += spacing
        connection.commit()
        connection.autocommit = True
        cursor.execute("ANALYZE preemption_events")
    return rows, time.perf_counter() - started, at


async def appends_per_second(url: str, writers: int, per_writer: int, batch: bool) -> float:
    engine = create_ledger_engine(url, pool_size=writers)
    preemptor = PodRef("bench", "api", "uid-bench", 1000)
    tag = "batch" if batch else "single"

    async def writer(w: int) -> int:
        written = 0
        for i in range(per_writer):
            at = datetime.now(UTC)
            if batch:
                victims = [PodRef("bench", f"v-{w}-{i}-{k}", f"u-{w}-{i}-{k}", 1) for k in range(3)]
                decision = decision_payload(preemptor, "node-0001", victims)
                written += await append_batch_async(
                    engine, decision_events(f"{tag}-{w}-{i}", "r", preemptor, decision, at)
                )
            else:
                event = LedgerEvent(
                    f"{tag}-{w}-{i}", "r", EventKind.VICTIM_DELETED, preemptor, "node-0001",
                    PodRef("bench", f"v-{w}-{i}", f"u-{w}-{i}", 1), occurred_at=at,
                )  # fmt: skip
                written += await append_async(engine, event)
        return written

    try:
        started = time.perf_counter()
        counts = await asyncio.gather(*(writer(w) for w in range(writers)))
        return sum(counts) / (time.perf_counter() - started)
    finally:
        engine.dispose()


def synthetic_pods(url: str) -> tuple[PodRef, PodRef]:
    """A preemptor with several preemptions, and the newest synthetic victim."""
    plain = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain) as connection:
        row = connection.execute(
            "SELECT victim_namespace, victim_name FROM preemption_events "
            "WHERE kind = 'victim_deleted' AND preemption_id LIKE 'preempt-%' "
            "ORDER BY occurred_at DESC LIMIT 1"
        ).fetchone()
    assert row is not None
    return PodRef(NAMESPACES[0], "api-0", "", 1000), PodRef(row[0], row[1], "", 0)


def timed(action: Callable[[], object], repeat: int) -> tuple[float, float]:
    """(median, worst) milliseconds over `repeat` runs, after one warm-up run."""
    action()
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples), max(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--appends", type=int, default=400, help="appends per writer")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()

    with fresh_database("preemptctl_bench") as url:
        migrations.upgrade(url)
        print(f"database: {url}")

        single = asyncio.run(appends_per_second(url, args.writers, args.appends, batch=False))
        print(f"append, one event per transaction, {args.writers} concurrent writers: "
              f"{single:,.0f} events/s (target >= 2,000)")  # fmt: skip
        batched = asyncio.run(appends_per_second(url, args.writers, args.appends // 4, batch=True))
        print(f"append, decision + 3 victims per transaction, {args.writers} writers: "
              f"{batched:,.0f} events/s")  # fmt: skip

        rows, seconds, newest = load(url, args.events)
        print(f"loaded {rows:,} events with COPY in {seconds:.1f}s")

        engine = create_ledger_engine(url)
        busy, victim = synthetic_pods(url)

        def history_of(**narrowed: Any) -> Callable[[], object]:
            return lambda: history(engine, HistoryQuery(**narrowed))

        def explain_victim() -> object:
            story = explain(engine, victim.namespace, victim.name)
            return [victim_story(view, fate) for view, fate in story.as_victim]

        def explain_preemptor() -> object:
            story = explain(engine, busy.namespace, busy.name)
            return [preemptor_story(view) for view in story.as_preemptor]

        queries: list[tuple[str, Callable[[], object]]] = [
            ("history (newest 50)", history_of()),
            (f"history --pod {busy.key}", history_of(pod=(busy.namespace, busy.name))),
            (f"history --pod {victim.key}", history_of(pod=(victim.namespace, victim.name))),
            ("history --node node-0042", history_of(node="node-0042")),
            ("history --since 2h", history_of(since=newest - timedelta(hours=2))),
            ("history --outcome failed", history_of(outcome=Outcome.FAILED)),
            ("history --outcome dry-run", history_of(outcome=Outcome.DRY_RUN)),
            (f"explain {victim.key} (+ words)", explain_victim),
            (f"explain {busy.key} (+ words)", explain_preemptor),
            ("explain nowhere/nobody", lambda: explain(engine, "nowhere", "nobody")),
        ]
        print(
            f"\nquery latency over {rows:,} events, median / worst of {args.repeat} "
            "(target <= 200 ms):"
        )
        for name, action in queries:
            median, worst = timed(action, args.repeat)
            print(f"  {name:<40} {median:7.1f} ms / {worst:7.1f} ms")

        def cli(*argv: str) -> Callable[[], object]:
            def run() -> object:
                with redirect_stdout(io.StringIO()):
                    return cli_main([*argv, "--database-url", url])

            return run

        print("\nwhole command in-process (connect, schema check, query, print):")
        for argv in (("history",), ("explain", victim.key), ("explain", busy.key)):
            median, worst = timed(cli(*argv), args.repeat)
            print(f"  preemptctl {' '.join(argv):<29} {median:7.1f} ms / {worst:7.1f} ms")
        engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`preemptctl replay --decision` on hostile recorded inputs: one clear error line, bounded
memory (issue 20, finding 10).

Scenario: a ledger holding one decision's recorded inputs as the worker records them (a
full node, a pending preemptor, the planner's Preempt), and beside it rows a person with
write access to the ledger (or a damaged backup) could leave: the same inputs without their
`decision` key; with a decision that lost its `verdict`; with a node's unrecorded pods
declared as 20,000,000 (a blob of about 1.3 KB); and 1 MB of zlib that expands to 1 GiB.
Each is replayed by `preemptctl replay --decision ID` in a process of its own (two at a
time), its resident memory watched from /proc and capped: killed once past the bound below,
so an unbounded replay fails this test rather than the machine.

Judged from outside (exit code, stdout, stderr, the process's peak resident memory):
- the untouched recording replays as the same decision (exit 0), the baseline;
- each hostile row gives exit 1 (the inputs unreadable, as `replay` documents it) and one
  line on stderr naming the run, no traceback, nothing on stdout;
- each hostile row's replay peaks at most `BOUND_ABOVE_BASELINE` above the baseline's:
  the worker records at most `decision_inputs_max_bytes` (4 MiB) compressed, about 40 MiB
  of JSON at the 10:1 ratio docs/ledger.md measures, so a reader that caps what it
  decompresses at a few times that, and caps counts before building anything, stays well
  within it; a 1 KB blob that needs more is the exhaustion the finding describes.
"""

from __future__ import annotations

import copy
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlalchemy import create_engine, insert

from preemptctl.ledger.inputs import ENCODING, RECORDING_VERSION, InputsRow, inputs_key, record
from preemptctl.ledger.models import decision_inputs
from preemptctl.migrations import upgrade
from preemptctl.preemption.decision import PodRef, Strategy
from preemptctl.preemption.planner import plan
from preemptctl.preemption.recorded_inputs import capture, dumps
from preemptctl.preemption.snapshot import ClusterSnapshot
from tests.support.fault_rig import PREEMPTCTL, crowded_cluster
from tests.support.hostile_rig import base_env
from tests.support.measured_process import Measured, run_measured
from tests.support.postgres import fresh_database

MiB = 1 << 20
BOUND_ABOVE_BASELINE = 256 * MiB
WATCHDOG_MARGIN = 32 * MiB  # a replay this far past the bound is killed: it fails anyway
PARALLEL = 2  # the machine's cores
REPLAY_SECONDS = 60.0
BOMB_CHUNKS = 1024  # MiB of spaces the bomb expands to
DECLARED_PODS = 20_000_000

HOSTILE = ("no-decision", "no-verdict", "twenty-million", "zlib-bomb")


def recorded_document() -> dict[str, Any]:
    """A decision's inputs as the worker records them: one full node, one preemptor."""
    snapshot = ClusterSnapshot.from_list(crowded_cluster(1, 1))
    preemptor = snapshot.pod_by_key("default/urgent-0")
    assert preemptor is not None
    decision = plan(snapshot, preemptor.key)
    document: dict[str, Any] = orjson.loads(
        dumps(capture(snapshot, preemptor, Strategy.DEFAULT, None, decision))
    )
    return document


def hostile_documents(valid: dict[str, Any]) -> dict[str, dict[str, Any]]:
    no_decision = copy.deepcopy(valid)
    del no_decision["decision"]
    no_verdict = copy.deepcopy(valid)
    del no_verdict["decision"]["verdict"]
    twenty_million = copy.deepcopy(valid)
    twenty_million["podSums"] = {"node-0": [DECLARED_PODS, {"milliCpu": 1000}, []]}
    return {
        "no-decision": no_decision,
        "no-verdict": no_verdict,
        "twenty-million": twenty_million,
    }


def zlib_bomb(chunks: int) -> bytes:
    """zlib of `chunks` MiB of spaces, about 1 KB per MiB, built without compressing it: one
    MiB's deflate block repeated (each starts afresh after a full flush), then the checksum
    of the whole."""
    chunk = b" " * MiB
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = compressor.compress(chunk) + compressor.flush(zlib.Z_FULL_FLUSH)
    end = compressor.flush(zlib.Z_FINISH)
    checksum = 1
    for _ in range(chunks):
        checksum = zlib.adler32(chunk, checksum)
    return b"\x78\xda" + block * chunks + end + checksum.to_bytes(4, "big")


def row(run_id: str) -> InputsRow:
    return InputsRow(
        preemption_id=f"preemption-hostile-{run_id}",
        run_id=run_id,
        preemptor=PodRef("default", "urgent-0", "uid-urgent-0"),
        recorded_at=datetime.now(UTC),
    )


@dataclass
class Replays:
    runs: dict[str, Measured]
    sizes: dict[str, int]  # stored bytes of each row


@pytest.fixture(scope="module")
def replays(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replays]:
    valid = recorded_document()
    work: Path = tmp_path_factory.mktemp("recorded-blobs")
    with fresh_database("preemptctl_hostile") as url:
        upgrade(url)
        engine = create_engine(url)
        sizes = {}
        try:
            for run_id, document in {"valid": valid, **hostile_documents(valid)}.items():
                raw = orjson.dumps(document)
                record(engine, replace(row(run_id), raw=raw), max_bytes=0)
                sizes[run_id] = len(zlib.compress(raw, 1))
            bomb = zlib_bomb(BOMB_CHUNKS)
            sizes["zlib-bomb"] = len(bomb)
            with engine.begin() as connection:
                connection.execute(
                    insert(decision_inputs).values(
                        preemption_id="preemption-hostile-zlib-bomb",
                        run_id="zlib-bomb",
                        recorded_at=datetime.now(UTC),
                        preemptor_namespace="default",
                        preemptor_name="urgent-0",
                        preemptor_uid="uid-urgent-0",
                        planner_version=RECORDING_VERSION,
                        encoding=ENCODING,
                        raw_bytes=BOMB_CHUNKS * MiB,
                        stored_bytes=len(bomb),
                        inputs=bomb,
                        omitted=None,
                        idempotency_key=inputs_key("preemption-hostile-zlib-bomb", "zlib-bomb"),
                    )
                )
        finally:
            engine.dispose()
        env = base_env(work)

        def replay(run_id: str, rss_limit: int) -> Measured:
            return run_measured(
                [PREEMPTCTL, "replay", "--decision", run_id, "--database-url", url],
                env,
                rss_limit=rss_limit,
                timeout=REPLAY_SECONDS,
            )

        valid_run = replay("valid", 1024 * MiB)
        limit = valid_run.peak_rss + BOUND_ABOVE_BASELINE + WATCHDOG_MARGIN
        with ThreadPoolExecutor(PARALLEL) as pool:
            hostile = dict(zip(HOSTILE, pool.map(lambda r: replay(r, limit), HOSTILE), strict=True))
        yield Replays({"valid": valid_run, **hostile}, sizes)


def test_the_untouched_recording_replays_as_the_same_decision(replays: Replays) -> None:
    valid = replays.runs["valid"]
    assert (valid.code, valid.stderr, valid.stdout.startswith("same decision: Preempt")) == (
        0,
        "",
        True,
    ), valid.stdout


def test_the_hostile_blobs_are_small(replays: Replays) -> None:
    """What makes them hostile: a few bytes that claim a lot."""
    assert (replays.sizes["twenty-million"] < 4096, replays.sizes["zlib-bomb"] < 2 * MiB) == (
        True,
        True,
    )


@pytest.mark.parametrize("run_id", HOSTILE)
def test_a_hostile_row_is_one_error_line_with_exit_1(replays: Replays, run_id: str) -> None:
    done = replays.runs[run_id]
    lines = done.stderr.splitlines()
    assert (done.killed, done.code, len(lines), done.stdout) == (None, 1, 1, ""), done.stderr[-600:]
    assert lines[0].startswith("preemptctl replay: ") and run_id in lines[0], lines[0]


@pytest.mark.parametrize("run_id", HOSTILE)
def test_a_hostile_row_replays_in_bounded_memory(replays: Replays, run_id: str) -> None:
    baseline = replays.runs["valid"].peak_rss
    done = replays.runs[run_id]
    assert (done.killed, done.peak_rss - baseline <= BOUND_ABOVE_BASELINE) == (None, True), (
        f"peak {done.peak_rss / MiB:.0f} MiB against a baseline of {baseline / MiB:.0f} MiB"
        + (f"; killed for {done.killed}" if done.killed else "")
    )

"""`preemptctl replay`: a recorded preemption checked against this worker's workflow code.

Scenarios:
- a history recorded from a real run replays cleanly;
- a history the code would not produce (an activity renamed in it) is reported, exit 2;
- a file that is not a preemption's history is one line, exit 2: an empty history, a
  start-only history (the SDK's replayer would wait forever on it), a history with a gap in
  its event IDs, a binary file, a device such as /dev/zero.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PREEMPTCTL = str(Path(sys.executable).parent / "preemptctl")
HISTORIES = Path(__file__).resolve().parents[1] / "histories"


def replay(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PREEMPTCTL, "replay", str(path)], capture_output=True, text=True, check=False, timeout=60
    )


def test_a_recorded_history_replays_cleanly() -> None:
    completed = replay(HISTORIES / "online-offline-completed.json")
    assert completed.returncode == 0, completed.stderr
    assert "replays cleanly on this version" in completed.stdout


def test_a_history_the_code_would_not_produce_is_reported(tmp_path: Path) -> None:
    history = json.loads((HISTORIES / "dry-run.json").read_text())
    for event in history["events"]:
        scheduled = event.get("activityTaskScheduledEventAttributes")
        if scheduled:
            scheduled["activityType"]["name"] = "some_other_activity"
            break
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(history))
    completed = replay(changed)
    assert completed.returncode == 2
    assert completed.stderr.startswith(
        f"preemptctl replay: {changed} does not replay on this version"
    )


def test_a_file_that_is_not_a_history_is_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text('{"events": []}')
    completed = replay(empty)
    assert completed.returncode == 2
    assert completed.stderr.strip() == (
        f"preemptctl replay: {empty} is not a workflow history: it does not begin with its start"
    )


def _cut(tmp_path: Path, name: str, count: int) -> Path:
    history = json.loads((HISTORIES / "dry-run.json").read_text())
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"events": history["events"][:count]}))
    return path


def test_a_start_only_history_is_one_line_not_a_hang(tmp_path: Path) -> None:
    start_only = _cut(tmp_path, "start-only", 1)
    completed = replay(start_only)
    assert completed.returncode == 2
    assert completed.stderr.strip() == (
        f"preemptctl replay: {start_only} has no workflow task yet (the run had only "
        "started): nothing to replay"
    )


def test_a_history_with_a_gap_in_its_events_is_one_line(tmp_path: Path) -> None:
    history = json.loads((HISTORIES / "dry-run.json").read_text())
    history["events"][5]["eventId"] = "99"
    corrupted = tmp_path / "corrupted.json"
    corrupted.write_text(json.dumps(history))
    completed = replay(corrupted)
    assert completed.returncode == 2
    assert completed.stderr.strip() == (
        f"preemptctl replay: {corrupted} is not a whole history: its event IDs are not 1, 2, 3, ..."
    )


def test_a_binary_file_is_one_line(tmp_path: Path) -> None:
    binary = tmp_path / "binary.json"
    binary.write_bytes(bytes(range(256)) * 4)
    completed = replay(binary)
    assert completed.returncode == 2
    assert completed.stderr.strip() == (
        f"preemptctl replay: {binary} is not a workflow history: it is not UTF-8 JSON"
    )


def test_a_device_is_refused_before_it_is_read() -> None:
    completed = replay(Path("/dev/zero"))
    assert completed.returncode == 2
    assert completed.stderr.strip() == "preemptctl replay: /dev/zero is not a regular file"

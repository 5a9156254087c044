"""Bundled cluster scenarios (`v1 List` JSON), shipped as package data, named by their file.

`online-offline.json` is the product's founding example: nodes full of low-priority batch
pods, and a `high-priority` (1000000) `nginx-a` pod asking for 5 CPU and 64Mi. Its running
pods carry the container statuses a kubelet reports, so `kubectl get pods` shows them READY
as on a real cluster.

`one-preemptor.json` is the same cluster with `nginx-a` its only pending pod: one
preemption, told the same way on every run (docs/runbook.md follows it). In the founding
example a second pending pod, `report-x`, is decided beside nginx-a, and which of the two
takes the decision lock first can differ from run to run.
"""

from __future__ import annotations

from pathlib import Path

DIRECTORY = Path(__file__).resolve().parent
ONLINE_OFFLINE = DIRECTORY / "online-offline.json"
BUNDLED = {path.stem: path for path in sorted(DIRECTORY.glob("*.json"))}


def bundled_or_file(name: str) -> Path:
    """A bundled scenario by name (`one-preemptor`), else the file named; a name that is
    neither raises FileNotFoundError naming the bundled ones."""
    path = Path(name)
    if path.is_file():
        return path
    if name in BUNDLED:
        return BUNDLED[name]
    raise FileNotFoundError(f"no such file, nor a bundled scenario ({', '.join(BUNDLED)})")

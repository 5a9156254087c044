"""Bundled cluster scenarios (`v1 List` JSON), shipped as package data, named by their file.

`online-offline.json` is the product's founding example: nodes full of low-priority batch
pods, and a `high-priority` (1000000) `nginx-a` pod asking for 5 CPU and 64Mi.

`one-preemptor.json` is the same cluster with `nginx-a` its only pending pod: one
preemption, told the same way on every run (docs/runbook.md follows it). In the founding
example a second pending pod, `report-x`, is decided beside nginx-a, and which of the two
takes the decision lock first can differ from run to run.

`gang.json` is a gang preemption (issue 19): five 8-cpu nodes; `ml/train-a`, a PodGroup of
four 4-cpu trainers (gang, minCount 4, priority 100000), is pending, with room for one of
them. Below it run two gangs taken whole (`disruptionMode: all`, priority 1000): `ml/train-c`
(four pods, one on each of node-1 to node-4) and `ml/train-b` (three, on node-1, node-2 and
node-5), and a loose low-priority `ml/notebook` pod on node-3. The planner places a trainer
on each of node-1 to node-4 and takes train-b whole (its pod on node-5 too) and the
notebook, and keeps train-c: one whole gang rather than a pod of each
(tests/worker/test_dev_scenarios.py holds that story still).

Every running pod carries the container statuses a kubelet reports (with the image digest
and container id the official client requires), so `kubectl get pods` shows them READY and
any client reads them, as on a real cluster.
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

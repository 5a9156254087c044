"""Bundled cluster scenarios (`v1 List` JSON), shipped as package data.

`online-offline.json` is the product's founding example: nodes full of low-priority batch
pods, and a `high-priority` (1000000) `nginx-a` pod asking for 5 CPU and 64Mi. Its running
pods carry the container statuses a kubelet reports, so `kubectl get pods` shows them READY
as on a real cluster.
"""

from __future__ import annotations

from pathlib import Path

DIRECTORY = Path(__file__).resolve().parent
ONLINE_OFFLINE = DIRECTORY / "online-offline.json"

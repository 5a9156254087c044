"""A kubeconfig pointing at the emulator, so callers connect exactly as they would to a real
cluster (`KUBECONFIG=...`), with no test-only code path in the client."""

from __future__ import annotations

from pathlib import Path

import yaml

CONTEXT = "emulator"


def write_kubeconfig(path: Path, server: str, token: str = "emulator-token") -> Path:
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": {"server": server}}],
        "users": [{"name": CONTEXT, "user": {"token": token}}],
        "contexts": [
            {
                "name": CONTEXT,
                "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": "default"},
            }
        ],
        "current-context": CONTEXT,
        "preferences": {},
    }
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path

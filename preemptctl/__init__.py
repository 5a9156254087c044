"""preemptctl: durable, audited Kubernetes pod preemption.

Everything this distribution installs lives under this one namespace. In the source tree the
subpackages keep the top-level folders the product's design card fixes (``workflows/``,
``activities/``, ...); ``preemptctl/`` holds a symbolic link to each, so that the interpreter,
mypy and import-linter all see the same ``preemptctl.*`` tree, and the built wheel carries the
files themselves. The layers, top to bottom (checked by ``.importlinter``)::

    worker → workflows → activities → kube | ledger → preemption

``emulator`` (the Kubernetes API emulator) serves tests, benchmarks and dev mode only.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("preemptctl")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

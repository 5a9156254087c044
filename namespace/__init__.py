"""preemptctl: durable, audited Kubernetes pod preemption.

Everything this distribution installs lives under this one namespace. In the source tree this
package is the folder ``namespace/``, and its subpackages keep the top-level folders the
product's design card fixes (``workflows/``, ``activities/``, ...): ``pyproject.toml`` maps each
onto ``preemptctl.<folder>`` (setuptools ``package-dir``). A strict editable install builds the
``preemptctl`` tree that the interpreter, mypy and import-linter read. The layers, top to bottom
(checked by ``.importlinter``)::

    worker → workflows → activities → deciding → kube | ledger → preemption

``emulator`` (the Kubernetes API emulator) serves tests, benchmarks and dev mode only.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("preemptctl")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

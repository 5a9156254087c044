"""An emulator per test and a gateway client connected to it through its kubeconfig."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from preemptctl.emulator import Emulator
from preemptctl.kube.client import KubeClient, connect
from preemptctl.preemption.decision import PodRef
from tests.support.emulator import running_emulator

READ_TIMEOUT = 0.5


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    with running_emulator(bookmark_interval=0.1) as running:
        yield running


@pytest.fixture
def kube(emulator: Emulator) -> Iterator[KubeClient]:
    client = connect(emulator.kubeconfig_path, connect_timeout=1, read_timeout=READ_TIMEOUT)
    yield client
    client.api.close()


def ref_of(emulator: Emulator, key: str) -> PodRef:
    """The PodRef of a stored pod, as a decision would carry it."""
    stored = emulator.pod(key)
    assert stored is not None, key
    meta = stored["metadata"]
    return PodRef(meta["namespace"], meta["name"], meta["uid"])

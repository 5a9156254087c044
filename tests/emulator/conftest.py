"""An emulator per test, and the official client's typed APIs pointed at it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config

from preemptctl.emulator import Emulator
from tests.support.emulator import running_emulator


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    with running_emulator(bookmark_interval=0.1) as running:
        yield running


@pytest.fixture
def api_client(emulator: Emulator) -> Iterator[Any]:
    """urllib3's retries are off: by default it silently retries a dropped GET and sleeps
    through a 429's Retry-After, which would hide the very faults these tests inject."""
    configuration = client.Configuration()
    config.load_kube_config(
        config_file=str(emulator.kubeconfig_path), client_configuration=configuration
    )
    configuration.retries = False
    api = client.ApiClient(configuration)
    yield api
    api.close()


@pytest.fixture
def core(api_client: Any) -> Any:
    return client.CoreV1Api(api_client)


@pytest.fixture
def policy(api_client: Any) -> Any:
    return client.PolicyV1Api(api_client)

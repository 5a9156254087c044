"""Deletion: preconditions and graceful termination of pods.

Scenarios:
- a pod not bound to a node is deleted at once;
- a bound pod gets deletionTimestamp and deletionGracePeriodSeconds and stays terminating;
- a terminating pod disappears when its grace period ends;
- a test can finalize a terminating pod before its grace period ends;
- gracePeriodSeconds=0 deletes a bound pod at once;
- a second delete with a shorter grace period shortens it, a longer one changes nothing;
- a UID precondition that does not hold is a 409 Conflict worded as `rest.BeforeDelete` words it;
- a resourceVersion precondition that does not hold is the same kind of 409;
- a DELETE whose body is cut short (its client killed while sending) is not served: the pod
  stays, as a real API server leaves it;
- a delete is a watch event: MODIFIED when termination starts, DELETED when the pod goes;
- a terminating pod deleted with grace period 0 (a kubelet's, or a forced, delete) is written
  with its grace period cut to 0 (MODIFIED) before it goes (DELETED), as kube-apiserver does.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any
from urllib.parse import urlsplit

import pytest
from kubernetes.client.exceptions import ApiException

from preemptctl.emulator import Emulator
from tests.support.emulator import pod


def _wait_gone(emulator: Emulator, key: str, timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if emulator.pod(key) is None:
            return True
        time.sleep(0.02)
    return False


def test_unbound_pod_is_deleted_at_once(core: Any, emulator: Emulator) -> None:
    emulator.load(pod("pending"))
    core.delete_namespaced_pod("pending", "default")
    assert emulator.pod("default/pending") is None


def test_bound_pod_terminates_gracefully(core: Any, emulator: Emulator) -> None:
    emulator.load(pod("web", node_name="n1", grace_period=30))
    answered = core.delete_namespaced_pod("web", "default")
    stored = emulator.pod("default/web")
    assert stored is not None
    assert stored["metadata"]["deletionGracePeriodSeconds"] == 30
    assert stored["metadata"]["deletionTimestamp"]
    assert answered.metadata.deletion_timestamp is not None


def test_terminating_pod_disappears_after_its_grace_period(core: Any, emulator: Emulator) -> None:
    emulator.load(pod("web", node_name="n1"))
    core.delete_namespaced_pod("web", "default", grace_period_seconds=1)
    assert emulator.pod("default/web") is not None
    assert _wait_gone(emulator, "default/web")


def test_finalize_ends_a_terminating_pod_now(core: Any, emulator: Emulator) -> None:
    emulator.load(pod("web", node_name="n1", grace_period=600))
    core.delete_namespaced_pod("web", "default")
    emulator.finalize("default/web")
    assert emulator.pod("default/web") is None


def test_zero_grace_period_deletes_a_bound_pod_at_once(core: Any, emulator: Emulator) -> None:
    emulator.load(pod("web", node_name="n1"))
    core.delete_namespaced_pod("web", "default", grace_period_seconds=0)
    assert emulator.pod("default/web") is None


def test_shorter_grace_period_shortens_termination(core: Any, emulator: Emulator) -> None:
    emulator.load(pod("web", node_name="n1"))
    core.delete_namespaced_pod("web", "default", grace_period_seconds=600)
    core.delete_namespaced_pod("web", "default", grace_period_seconds=900)
    stored = emulator.pod("default/web")
    assert stored is not None
    assert stored["metadata"]["deletionGracePeriodSeconds"] == 600
    core.delete_namespaced_pod("web", "default", grace_period_seconds=1)
    assert _wait_gone(emulator, "default/web")


def test_uid_precondition_mismatch_is_conflict(core: Any, emulator: Emulator) -> None:
    emulator.load(pod("web", node_name="n1", uid="new-uid"))
    with pytest.raises(ApiException) as raised:
        core.delete_namespaced_pod("web", "default", body={"preconditions": {"uid": "old-uid"}})
    assert raised.value.status == 409
    body = json.loads(raised.value.body)
    assert body["reason"] == "Conflict"
    assert body["message"] == (
        'Operation cannot be fulfilled on Pod "web": the UID in the precondition (old-uid) does '
        "not match the UID in record (new-uid). The object might have been deleted and then "
        "recreated"
    )
    assert emulator.pod("default/web") is not None


def test_resource_version_precondition_mismatch_is_conflict(core: Any, emulator: Emulator) -> None:
    emulator.load(pod("web"))
    with pytest.raises(ApiException) as raised:
        core.delete_namespaced_pod(
            "web", "default", body={"preconditions": {"resourceVersion": "12345"}}
        )
    assert raised.value.status == 409
    assert "the ResourceVersion in the precondition (12345) does not match" in raised.value.body


def test_graceful_delete_is_modified_then_deleted_on_the_watch(
    core: Any, emulator: Emulator
) -> None:
    emulator.load(pod("web", node_name="n1", grace_period=600))
    since = core.list_namespaced_pod("default").metadata.resource_version
    core.delete_namespaced_pod("web", "default")
    emulator.finalize("default/web")
    stream = core.list_namespaced_pod(
        "default", watch=True, resource_version=since, timeout_seconds=1, _preload_content=False
    )
    types = [json.loads(line)["type"] for line in stream if line.strip()]
    assert types == ["MODIFIED", "DELETED"]


def test_cutting_a_termination_short_is_modified_then_deleted(
    core: Any, emulator: Emulator
) -> None:
    emulator.load(pod("web", node_name="n1", grace_period=600))
    core.delete_namespaced_pod("web", "default")
    since = core.list_namespaced_pod("default").metadata.resource_version
    core.delete_namespaced_pod("web", "default", grace_period_seconds=0)
    stream = core.list_namespaced_pod(
        "default", watch=True, resource_version=since, timeout_seconds=1, _preload_content=False
    )
    events = [json.loads(line) for line in stream if line.strip()]
    assert [e["type"] for e in events] == ["MODIFIED", "DELETED"]
    assert events[0]["object"]["metadata"]["deletionGracePeriodSeconds"] == 0
    assert emulator.pod("default/web") is None


def test_a_delete_cut_short_is_not_served(emulator: Emulator) -> None:
    emulator.load(pod("victim", node_name="node-1"))
    loaded = emulator.pod("default/victim")
    assert loaded is not None
    uid = loaded["metadata"]["uid"]
    body = json.dumps({"preconditions": {"uid": uid}}).encode()
    address = urlsplit(emulator.base_url)
    with socket.create_connection((address.hostname, address.port)) as connection:
        connection.sendall(
            b"DELETE /api/v1/namespaces/default/pods/victim HTTP/1.1\r\n"
            b"Host: emulator\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body[: len(body) // 2]
        )
        connection.shutdown(socket.SHUT_WR)
        assert connection.recv(1024) == b""  # no answer: the connection is closed
    found = emulator.pod("default/victim")
    assert found is not None and "deletionTimestamp" not in found["metadata"]

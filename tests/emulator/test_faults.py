"""Fault injection and the request log.

Scenarios:
- "fail the next N calls": N matching requests get the code with a Kubernetes Status body,
  the next one is served;
- a 429 carries Retry-After and details.retryAfterSeconds;
- a fault matches its verb and resource only;
- latency delays a request and then serves it;
- a dropped connection gives the client no answer at all;
- an RBAC denial is a 403 worded exactly as the authorizer words it, for objects, subresources,
  cluster-scoped lists;
- the request log records verb, RBAC resource, object, body and answer code;
- dev mode's named faults: each denies one permission the controller's ClusterRole grants
  (its rule as deploy/base/clusterrole.yaml writes it), `deny-delete` refuses a pod DELETE with
  the authorizer's 403 until it is lifted, and lifting one fault leaves the others on.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import urllib3
import yaml
from kubernetes.client.exceptions import ApiException

from preemptctl.emulator import Emulator
from preemptctl.emulator.faults import DEV_FAULTS, NamedFaults
from tests.support.emulator import pod


@pytest.fixture
def web(emulator: Emulator) -> None:
    emulator.load(pod("web"))


@pytest.mark.usefixtures("web")
def test_fail_next_n_calls_then_serve(core: Any, emulator: Emulator) -> None:
    emulator.faults.fail("get", "pods", 503, times=2)
    codes = []
    for _ in range(2):
        with pytest.raises(ApiException) as raised:
            core.read_namespaced_pod("web", "default")
        codes.append(raised.value.status)
        assert json.loads(raised.value.body)["kind"] == "Status"
    assert codes == [503, 503]
    assert core.read_namespaced_pod("web", "default").metadata.name == "web"


@pytest.mark.usefixtures("web")
def test_throttling_carries_retry_after(core: Any, emulator: Emulator) -> None:
    emulator.faults.fail("get", "pods", 429, retry_after=7)
    with pytest.raises(ApiException) as raised:
        core.read_namespaced_pod("web", "default")
    assert raised.value.headers["Retry-After"] == "7"
    assert json.loads(raised.value.body)["details"]["retryAfterSeconds"] == 7


@pytest.mark.usefixtures("web")
def test_fault_matches_only_its_verb_and_resource(core: Any, emulator: Emulator) -> None:
    emulator.faults.fail("delete", "pods", 500, times=None)
    emulator.faults.fail("patch", "pods/status", 500, times=None)
    core.read_namespaced_pod("web", "default")
    core.patch_namespaced_pod("web", "default", {"metadata": {"labels": {"a": "b"}}})
    with pytest.raises(ApiException):
        core.delete_namespaced_pod("web", "default")


@pytest.mark.usefixtures("web")
def test_latency_delays_then_serves(core: Any, emulator: Emulator) -> None:
    emulator.faults.delay("get", "pods", 0.3, times=1)
    started = time.monotonic()
    core.read_namespaced_pod("web", "default")
    assert time.monotonic() - started >= 0.3


@pytest.mark.usefixtures("web")
def test_dropped_connection_gives_no_answer(core: Any, emulator: Emulator) -> None:
    emulator.faults.drop("get", "pods")
    with pytest.raises(urllib3.exceptions.HTTPError):
        core.read_namespaced_pod("web", "default")
    assert emulator.requests.matching("get", "pods")[0].code == 0


@pytest.mark.parametrize(
    ("call", "verb", "resource", "message"),
    [
        (
            lambda core: core.delete_namespaced_pod("web", "default"),
            "delete",
            "pods",
            'pods "web" is forbidden: User "system:serviceaccount:preemptctl:preemptctl" cannot '
            'delete resource "pods" in API group "" in the namespace "default"',
        ),
        (
            lambda core: core.patch_namespaced_pod_status("web", "default", {"status": {}}),
            "patch",
            "pods/status",
            'pods "web" is forbidden: User "system:serviceaccount:preemptctl:preemptctl" cannot '
            'patch resource "pods/status" in API group "" in the namespace "default"',
        ),
        (
            lambda core: core.list_pod_for_all_namespaces(),
            "list",
            "pods",
            'pods is forbidden: User "system:serviceaccount:preemptctl:preemptctl" cannot list '
            'resource "pods" in API group "" at the cluster scope',
        ),
    ],
)
@pytest.mark.usefixtures("web")
def test_rbac_denial_is_worded_as_the_authorizer_words_it(
    core: Any, emulator: Emulator, call: Any, verb: str, resource: str, message: str
) -> None:
    emulator.faults.deny(verb, resource)
    with pytest.raises(ApiException) as raised:
        call(core)
    body = json.loads(raised.value.body)
    assert (raised.value.status, body["reason"], body["message"]) == (403, "Forbidden", message)


def test_rbac_denial_names_the_api_group(policy: Any, emulator: Emulator) -> None:
    emulator.faults.deny("list", "poddisruptionbudgets", user="alice")
    with pytest.raises(ApiException) as raised:
        policy.list_pod_disruption_budget_for_all_namespaces()
    assert json.loads(raised.value.body)["message"] == (
        'poddisruptionbudgets.policy is forbidden: User "alice" cannot list resource '
        '"poddisruptionbudgets" in API group "policy" at the cluster scope'
    )


@pytest.mark.usefixtures("web")
def test_request_log_records_what_was_sent(core: Any, emulator: Emulator) -> None:
    core.delete_namespaced_pod("web", "default", body={"gracePeriodSeconds": 5})
    [entry] = emulator.requests.matching("delete", "pods", "web")
    assert (entry.namespace, entry.method, entry.code) == ("default", "DELETE", 200)
    assert entry.body["gracePeriodSeconds"] == 5


def test_each_dev_fault_is_a_rule_of_the_controllers_cluster_role() -> None:
    role = (
        Path(__file__).resolve().parents[2] / "deploy" / "base" / "clusterrole.yaml"
    ).read_text()
    granted = {
        (group, resource, verb)
        for rule in yaml.safe_load(role)["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert {(f.group, f.resource, f.verb) for f in DEV_FAULTS.values()} <= granted
    assert (
        DEV_FAULTS["deny-delete"].rule
        == '{apiGroups: [""], resources: ["pods"], verbs: ["delete"]}'
    )


@pytest.mark.usefixtures("web")
def test_deny_delete_refuses_a_pod_delete_until_lifted(core: Any, emulator: Emulator) -> None:
    named = NamedFaults(emulator.faults)
    assert named.apply(["deny-delete"]) == (["deny-delete"], [])
    with pytest.raises(ApiException) as raised:
        core.delete_namespaced_pod("web", "default")
    assert (raised.value.status, json.loads(raised.value.body)["reason"]) == (403, "Forbidden")
    core.read_namespaced_pod("web", "default")  # reads are still allowed
    assert named.apply([]) == ([], ["deny-delete"])
    core.delete_namespaced_pod("web", "default")
    assert named.on == []


@pytest.mark.usefixtures("web")
def test_lifting_one_dev_fault_leaves_the_others_on(core: Any, emulator: Emulator) -> None:
    named = NamedFaults(emulator.faults)
    named.apply(["deny-delete", "deny-patch", "not-a-fault"])
    assert named.on == ["deny-delete", "deny-patch"]
    assert named.apply(["deny-patch"]) == ([], ["deny-delete"])
    with pytest.raises(ApiException) as raised:
        core.patch_namespaced_pod_status("web", "default", {"status": {}})
    assert raised.value.status == 403
    core.delete_namespaced_pod("web", "default")


def test_a_client_that_hung_up_is_not_reported_as_an_error(
    emulator: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    """A client gone before its answer is written (a timeout, a killed worker) is routine for
    an API server: no traceback on the terminal; the emulator's own errors still print."""
    server = emulator._server
    assert server is not None
    try:
        raise BrokenPipeError(32, "Broken pipe")
    except BrokenPipeError:
        server.handle_error(None, ("127.0.0.1", 1))
    assert capsys.readouterr().err == ""
    try:
        raise KeyError("a bug of the emulator's")
    except KeyError:
        server.handle_error(None, ("127.0.0.1", 1))
    assert "KeyError" in capsys.readouterr().err

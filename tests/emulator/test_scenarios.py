"""Scenarios and kubeconfig: how a test, a benchmark or `preemptctl dev` seeds and reaches the
emulator.

Scenarios:
- a YAML `v1 List` of Nodes, Pods and PDBs loads, keeping the objects' uids;
- the same List as JSON loads;
- an item of an unsupported kind is refused with a message naming it;
- `with_fresh_uids` gives every item a new uid on each call, renames every reference to an
  item's old uid (owner references, claim references, an Event's object) and leaves the
  document it was given as it was; the new uids sort as the old ones did;
- `with_times_from` moves every time of the List by one amount, so that its newest
  creationTimestamp is the moment given (to the second) and every interval is kept; a List
  without creation times is left as it is;
- the generated kubeconfig is all the official client needs to connect;
- a stopped emulator releases its port and refuses connections.
"""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from kubernetes import client, config

from preemptctl.emulator import Emulator, ScenarioError
from preemptctl.emulator.resources import NODES, PDBS
from preemptctl.emulator.scenario import with_fresh_uids, with_times_from
from tests.support.emulator import as_list, node, pdb, pod, running_emulator

SCENARIO = as_list(
    node("n1"),
    pod("web", node_name="n1", uid="uid-web", labels={"app": "web"}),
    pdb("budget", match_labels={"app": "web"}, disruptions_allowed=1),
)


def test_yaml_list_loads_keeping_uids(emulator: Emulator, tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    assert emulator.load(path) == 3
    stored = emulator.pod("default/web")
    assert stored is not None and stored["metadata"]["uid"] == "uid-web"
    assert [n["metadata"]["name"] for n in emulator.store.objects(NODES)] == ["n1"]
    assert len(emulator.store.objects(PDBS)) == 1


def test_json_list_loads(emulator: Emulator, tmp_path: Path) -> None:
    path = tmp_path / "cluster.json"
    path.write_bytes(orjson.dumps(SCENARIO))
    assert emulator.load(path) == 3


def test_unsupported_kind_is_refused(emulator: Emulator) -> None:
    with pytest.raises(ScenarioError, match="item 0: unsupported kind 'Deployment'"):
        emulator.load(as_list({"kind": "Deployment", "metadata": {"name": "d"}}))


def _owner_owned_and_event() -> dict[str, Any]:
    owner = pod("owner", uid="uid-owner")
    owned = pod("owned", uid="uid-owned")
    owned["metadata"]["ownerReferences"] = [{"kind": "Pod", "name": "owner", "uid": "uid-owner"}]
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "owned.1", "namespace": "default", "uid": "uid-event"},
        "involvedObject": {"kind": "Pod", "name": "owned", "uid": "uid-owned"},
        "reason": "Started",
    }
    return as_list(owner, owned, event)


def test_fresh_uids_are_new_on_every_call_and_references_follow() -> None:
    given = _owner_owned_and_event()
    first, second = with_fresh_uids(given), with_fresh_uids(given)
    uids = [[item["metadata"]["uid"] for item in doc["items"]] for doc in (first, second)]
    assert len({*uids[0], *uids[1], "uid-owner", "uid-owned", "uid-event"}) == 9
    owner, owned, event = first["items"]
    assert owned["metadata"]["ownerReferences"][0]["uid"] == owner["metadata"]["uid"]
    assert event["involvedObject"]["uid"] == owned["metadata"]["uid"]
    assert given == _owner_owned_and_event()


def test_fresh_uids_are_sorted_as_the_old_ones_were() -> None:
    """The planner's last tie-break is the uid: fresh uids in the file's order decide ties
    alike on every load."""
    given = as_list(*(pod(f"p{i}", uid=f"uid-{9 - i}") for i in range(10)))
    for _ in range(5):
        fresh = [item["metadata"]["uid"] for item in with_fresh_uids(given)["items"]]
        assert fresh == sorted(fresh, reverse=True)  # uid-9 first, as in the file


def test_times_move_together_so_that_the_newest_creation_is_the_load() -> None:
    old, new = pod("old"), pod("new")
    old["metadata"]["creationTimestamp"] = "2026-11-21T07:10:00Z"
    old["status"] = {
        "startTime": "2026-11-21T07:10:05Z",
        "conditions": [{"type": "Ready", "lastTransitionTime": "2026-11-21T07:11:00Z"}],
    }
    new["metadata"]["creationTimestamp"] = "2026-11-21T09:00:00Z"
    given = as_list(old, new)
    moved = with_times_from(given, datetime(2026, 12, 6, 20, 0, 0, 123456, tzinfo=UTC))
    first, second = moved["items"]
    assert second["metadata"]["creationTimestamp"] == "2026-12-06T20:00:00Z"
    assert first["metadata"]["creationTimestamp"] == "2026-12-06T18:10:00Z"
    assert first["status"]["startTime"] == "2026-12-06T18:10:05Z"
    assert first["status"]["conditions"][0]["lastTransitionTime"] == "2026-12-06T18:11:00Z"
    assert given["items"][0]["metadata"]["creationTimestamp"] == "2026-11-21T07:10:00Z"


def test_a_list_without_creation_times_keeps_its_times() -> None:
    given = as_list(pod("web"))
    assert with_times_from(given, datetime(2026, 12, 6, tzinfo=UTC)) == given


def test_a_reference_to_an_object_outside_the_list_is_kept() -> None:
    lonely = pod("lonely", uid="uid-lonely")
    lonely["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "rs", "uid": "uid-rs"}]
    fresh = with_fresh_uids(as_list(lonely))["items"][0]
    assert fresh["metadata"]["ownerReferences"][0]["uid"] == "uid-rs"
    assert fresh["metadata"]["uid"] != "uid-lonely"


def test_kubeconfig_is_all_the_client_needs(emulator: Emulator) -> None:
    emulator.load(SCENARIO)
    api = config.new_client_from_config(config_file=str(emulator.kubeconfig_path))
    with api:
        names = [
            p.metadata.name for p in client.CoreV1Api(api).list_namespaced_pod("default").items
        ]
    assert names == ["web"]


def test_stopped_emulator_releases_its_port() -> None:
    with running_emulator() as emulator:
        port = int(emulator.base_url.rsplit(":", 1)[1])
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), 1):
        pass

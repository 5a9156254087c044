"""Scenarios and kubeconfig: how a test, a benchmark or `preemptctl dev` seeds and reaches the
emulator.

Scenarios:
- a YAML `v1 List` of Nodes, Pods and PDBs loads, keeping the objects' uids;
- the same List as JSON loads;
- an item of an unsupported kind is refused with a message naming it;
- `with_fresh_uids` gives every item a new uid on each call, renames every reference to an
  item's old uid (owner references, claim references, an Event's object) and leaves the
  document it was given as it was;
- the generated kubeconfig is all the official client needs to connect;
- a stopped emulator releases its port and refuses connections.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from kubernetes import client, config

from preemptctl.emulator import Emulator, ScenarioError
from preemptctl.emulator.resources import NODES, PDBS
from preemptctl.emulator.scenario import with_fresh_uids
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

"""API discovery, so `kubectl` works against the emulator's kubeconfig.

Legacy (unaggregated) discovery documents, built from the resource table: `/api`,
`/api/v1`, `/apis`, `/apis/{group}` and `/apis/{group}/{version}`. kubectl asks for the
aggregated form first and falls back to these when the answer is plain JSON, as it does
against any server that predates aggregated discovery.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from preemptctl.emulator.resources import ALL, Resource

Obj = dict[str, Any]

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
SUBRESOURCE_VERBS = {
    "status": ["get", "patch", "update"],
    "eviction": ["create"],
    "binding": ["create"],
}
SHORT_NAMES = {
    "pods": ["po"],
    "nodes": ["no"],
    "namespaces": ["ns"],
    "events": ["ev"],
    "poddisruptionbudgets": ["pdb"],
    "persistentvolumeclaims": ["pvc"],
    "persistentvolumes": ["pv"],
    "storageclasses": ["sc"],
}


def _singular(kind: str) -> str:
    return kind.lower()


def resource_list(group: str, version: str, served: Collection[Resource] = ALL) -> Obj | None:
    """The APIResourceList of one group version; None if the emulator serves none of it."""
    listed = [r for r in ALL if r in served and (r.group, r.version) == (group, version)]
    if not listed:
        return None
    resources: list[Obj] = []
    for resource in listed:
        entry: Obj = {
            "name": resource.plural,
            "singularName": _singular(resource.kind),
            "namespaced": resource.namespaced,
            "kind": resource.kind,
            "verbs": VERBS,
        }
        if resource.plural in SHORT_NAMES and group != "events.k8s.io":
            entry["shortNames"] = SHORT_NAMES[resource.plural]
        resources.append(entry)
        for sub in sorted(resource.subresources):
            resources.append(
                {
                    "name": f"{resource.plural}/{sub}",
                    "singularName": "",
                    "namespaced": resource.namespaced,
                    "kind": "Eviction" if sub == "eviction" else resource.kind,
                    "verbs": SUBRESOURCE_VERBS.get(sub, ["get"]),
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


def _groups(served: Collection[Resource]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for resource in ALL:
        if resource not in served:
            continue
        if resource.group and resource.version not in found.setdefault(resource.group, []):
            found[resource.group].append(resource.version)
    return found


def _group(name: str, versions: list[str]) -> Obj:
    listed = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": name,
        "versions": listed,
        "preferredVersion": listed[0],
    }


def discovery(path: str, served: Collection[Resource] = ALL) -> Obj | None:
    """The discovery document at `path` for the resources `served`, or None when it is not
    a discovery path (or names a group or version none of them is in)."""
    parts = [part for part in path.split("/") if part]
    if parts == ["api"]:
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}],
        }
    if parts == ["api", "v1"]:
        return resource_list("", "v1", served)
    if parts == ["apis"]:
        groups = [_group(name, versions) for name, versions in sorted(_groups(served).items())]
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
    if len(parts) == 2 and parts[0] == "apis":
        versions = _groups(served).get(parts[1])
        return _group(parts[1], versions) if versions else None
    if len(parts) == 3 and parts[0] == "apis":
        return resource_list(parts[1], parts[2], served)
    return None

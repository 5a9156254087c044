"""From an HTTP method and path to what the API server would authorize: verb, resource,
namespace, name, subresource (`RequestInfoFactory` in apiserver/pkg/endpoints/request)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from preemptctl.emulator.resources import ALL, BY_PATH, NAMESPACES, Resource


@dataclass(frozen=True, slots=True)
class Route:
    resource: Resource
    namespace: str
    name: str
    subresource: str
    verb: str

    @property
    def rbac_resource(self) -> str:
        """The resource as RBAC rules and fault rules name it (`pods/status`)."""
        if self.subresource:
            return f"{self.resource.plural}/{self.subresource}"
        return self.resource.plural


def _verb(method: str, has_name: bool, watch: bool) -> str:
    if method == "GET":
        if watch:
            return "watch"
        return "get" if has_name else "list"
    if method == "DELETE":
        return "delete" if has_name else "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())


def route(method: str, path: str, watch: bool, served: Collection[Resource] = ALL) -> Route | None:
    """The route of a resource request; None for paths that name no resource in `served`
    (the server answers those 404, as a real one does for an API it does not serve)."""
    parts = [part for part in path.split("/") if part]
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    elif rest[:1] == ["namespaces"] and len(rest) <= 2:
        resource = NAMESPACES
        name = rest[1] if len(rest) == 2 else ""
        return Route(resource, "", name, "", _verb(method, bool(name), watch))
    if not rest:
        return None
    found = BY_PATH.get((group, version, rest[0]))
    if found is None or found not in served:
        return None
    resource = found
    name = rest[1] if len(rest) >= 2 else ""
    subresource = rest[2] if len(rest) >= 3 else ""
    if subresource and subresource not in resource.subresources:
        return None
    if resource is NAMESPACES and namespace:
        return None
    return Route(resource, namespace, name, subresource, _verb(method, bool(name), watch))

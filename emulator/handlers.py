"""REST semantics per verb: what the generic registry answers to get, list, create, update,
patch, delete, evict and bind, given a parsed request. No HTTP here; `http_server` does the wire."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from preemptctl.emulator import status
from preemptctl.emulator.binding import bind
from preemptctl.emulator.eviction import evict
from preemptctl.emulator.resources import PODS
from preemptctl.emulator.routing import Route
from preemptctl.emulator.selectors import field_selector, label_selector
from preemptctl.emulator.store import Obj, Store

_CREATE_ONLY = frozenset({"eviction", "binding"})  # subresources served for POST alone


@dataclass(frozen=True)
class Response:
    code: int
    body: Any


def _int(query: Mapping[str, str], name: str) -> int | None:
    text = query.get(name)
    if text in (None, ""):
        return None
    try:
        return int(text)
    except ValueError:
        raise status.bad_request(f"{name}: invalid integer {text!r}") from None


def predicate(route: Route, query: Mapping[str, str]) -> Any:
    by_label = label_selector(query.get("labelSelector"))
    by_field = field_selector(query.get("fieldSelector"), route.resource.kind)
    return lambda obj: by_label(obj) and by_field(obj)


def handle(
    store: Store, route: Route, query: Mapping[str, str], body: Any, content_type: str
) -> Response:
    resource = route.resource
    verb = route.verb
    if route.subresource in _CREATE_ONLY and verb != "create":
        raise status.ApiError(
            405, status.status_body(405, "MethodNotAllowed", f"{verb} is not supported here")
        )
    if verb == "get":
        return Response(200, store.get(resource, route.namespace, route.name))
    if verb == "list":
        page = store.list_page(
            resource,
            route.namespace,
            predicate(route, query),
            limit=_int(query, "limit") or 0,
            continue_token=query.get("continue") or None,
        )
        metadata: dict[str, Any] = {"resourceVersion": str(page.resource_version)}
        if page.continue_token:
            metadata["continue"] = page.continue_token
            metadata["remainingItemCount"] = page.remaining
        return Response(
            200,
            {
                "kind": f"{resource.kind}List",
                "apiVersion": resource.api_version,
                "metadata": metadata,
                "items": page.items,
            },
        )
    if verb == "create" and route.subresource == "eviction":
        return Response(201, evict(store, route.namespace, route.name, _object(body)))
    if verb == "create" and route.subresource == "binding":
        return Response(201, bind(store, route.namespace, route.name, _object(body)))
    if verb == "create":
        namespace = route.namespace
        if resource.namespaced and not namespace:
            raise status.bad_request("the namespace of the object does not match the request")
        return Response(201, store.create(resource, namespace, _object(body)))
    if verb == "update":
        return Response(
            200,
            store.update(resource, route.namespace, route.name, _object(body), route.subresource),
        )
    if verb == "patch":
        return Response(
            200,
            store.patch(
                resource,
                route.namespace,
                route.name,
                content_type,
                body,
                route.subresource,
                field_manager=query.get("fieldManager") or "",
                force=query.get("force") in ("true", "1"),
            ),
        )
    if verb == "delete":
        return Response(200, _delete(store, route, query, body))
    raise status.ApiError(
        405, status.status_body(405, "MethodNotAllowed", f"{verb} is not supported here")
    )


def _object(body: Any) -> Obj:
    if not isinstance(body, dict):
        raise status.bad_request("the request body must be a JSON object")
    return body


def _delete(store: Store, route: Route, query: Mapping[str, str], body: Any) -> Obj:
    """DeleteOptions come from the body (the client's way) or the query string (kubectl's)."""
    options = body if isinstance(body, dict) else {}
    grace = options.get("gracePeriodSeconds")
    if grace is None:
        grace = _int(query, "gracePeriodSeconds")
    preconditions = options.get("preconditions") or {}
    return store.delete(
        route.resource,
        route.namespace,
        route.name,
        grace_period=grace if route.resource is PODS else None,
        uid=preconditions.get("uid"),
        resource_version=preconditions.get("resourceVersion"),
    )

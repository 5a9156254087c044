"""Registering the preemption search attributes on a Temporal server that lacks them.

The dev server that `preemptctl dev` starts registers them itself; a long-lived server (or
Temporal Cloud namespace) needs this once, by an identity allowed to change the namespace.
Idempotent: attributes already there are left as they are.
"""

from __future__ import annotations

import logging

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from preemptctl.worker.connections import StartupError, TemporalUnreachableError
from preemptctl.workflows import search_attributes

log = logging.getLogger(__name__)


async def missing_search_attributes(client: Client, namespace: str) -> list[str]:
    """The preemption search attributes the namespace does not define yet."""
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    defined = set(listed.custom_attributes) | set(listed.system_attributes)
    return [key.name for key in search_attributes.ALL if key.name not in defined]


async def register_search_attributes(client: Client, namespace: str) -> list[str]:
    """Add the missing preemption search attributes; the names that were added."""
    missing = set(await missing_search_attributes(client, namespace))
    if not missing:
        return []
    wanted = {
        key.name: IndexedValueType.ValueType(int(key.indexed_value_type))
        for key in search_attributes.ALL
        if key.name in missing
    }
    await client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(search_attributes=wanted, namespace=namespace)
    )
    return sorted(wanted)


async def check_search_attributes(client: Client, namespace: str) -> None:
    """Refuse to start on a namespace that lacks a search attribute the preemptions carry.

    Without it every start is refused by the server (and every upsert fails its workflow
    task), so the worker would run and preempt nothing, saying so only in a log line per
    pod; an upgrade that adds an attribute meets this first. An identity not allowed to list
    the namespace's attributes (some Temporal Cloud keys) is let through with a warning."""
    try:
        missing = await missing_search_attributes(client, namespace)
    except RPCError as error:
        if error.status not in (RPCStatusCode.PERMISSION_DENIED, RPCStatusCode.UNIMPLEMENTED):
            raise TemporalUnreachableError(
                f"cannot list the search attributes of Temporal namespace {namespace}: "
                f"{error.message}"
            ) from None
        log.warning(
            "cannot list the search attributes of Temporal namespace %s (%s); "
            "starting without checking them",
            namespace,
            error.message,
        )
        return
    if missing:
        raise StartupError(
            f"Temporal namespace {namespace} lacks the search attribute(s) "
            f"{', '.join(missing)} the preemptions carry: run `preemptctl setup-temporal` "
            "once, as an identity allowed to change the namespace (or set "
            "PREEMPT_SEARCH_ATTRIBUTES=false to start preemptions without any)"
        )

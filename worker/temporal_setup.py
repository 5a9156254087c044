"""Registering the preemption search attributes on a Temporal server that lacks them.

The dev server that `preemptctl dev` starts registers them itself; a long-lived server (or
Temporal Cloud namespace) needs this once, by an identity allowed to change the namespace.
Idempotent: attributes already there are left as they are.
"""

from __future__ import annotations

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client

from preemptctl.workflows import search_attributes


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

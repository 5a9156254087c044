"""A preemption's search attributes stay within what the Temporal server takes.

Scenarios:
- `within_limit` keeps the names, in order, while their list fits one value's limit, and
  all of them when they fit;
- a preemption of many victims on the real dev server completes, found by its first victims
  (the whole list, past 2 KiB, made the server refuse its workflow task for good: a gang of
  160 never got past its decision).
"""

from __future__ import annotations

import json

import pytest

from preemptctl.emulator import Emulator
from preemptctl.workflows import search_attributes as sa
from tests.support.emulator import as_list, node, pod
from tests.workflows.harness import running_stack


def test_names_are_kept_while_they_fit() -> None:
    names = [f"a-namespace/victim-with-a-long-name-{i:03d}" for i in range(160)]
    kept = sa.within_limit(names)
    assert kept == names[: len(kept)]
    assert len(json.dumps(kept).encode()) <= sa.VALUE_LIMIT
    assert 30 < len(kept) < 160
    assert sa.within_limit(names[:3]) == names[:3]


def many_victims(count: int) -> dict[str, object]:
    """node-1 with `count` cpu, full of 1-cpu victims; `urgent` needs all of it."""
    items = [node("node-1", cpu=str(count))]
    items += [
        pod(f"victim-with-a-long-name-{i:03d}", node_name="node-1", priority=100, cpu="1")
        for i in range(count)
    ]
    items.append(pod("urgent", priority=1_000_000, cpu=str(count)))
    return as_list(*items)


@pytest.mark.asyncio(loop_scope="session")
async def test_a_preemption_of_many_victims_completes(client, ledger, emulator: Emulator):
    async with running_stack(client, ledger, emulator, many_victims(80)) as stack:
        handle = await stack.start("default/urgent", local_activities=True)
        result = await handle.result()
        description = await handle.describe()
    assert (result.outcome, len(result.victims)) == ("completed", 80)
    listed = description.typed_search_attributes.get(sa.VICTIM_PODS)
    assert listed is not None and 30 < len(listed) < 80
    assert listed == [v.pod.key for v in result.victims][: len(listed)]  # the first, in order

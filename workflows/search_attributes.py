"""The custom search attributes that make every preemption findable in the Temporal UI.

Filter by `PreemptorPod = "default/nginx-a"`, `TargetNode = "node-3"`,
`VictimPods = "default/batch-7"` or `PreemptionOutcome = "failed"`. A group preemption sets
`PreemptorPod` (and `PreemptorNamespace`, `PreemptorUid`) to its group, and names it in
`PodGroup = "ml/train-a"`; `VictimGroups = "ml/train-b"` finds the preemptions, of a pod or
of a group, that took a pod group's members as victims. The dev server registers
them at start (`preemptctl dev`); an existing server needs `preemptctl setup-temporal` once.
"""

from __future__ import annotations

import json

from temporalio.common import SearchAttributeKey

PREEMPTOR_POD = SearchAttributeKey.for_keyword("PreemptorPod")
PREEMPTOR_NAMESPACE = SearchAttributeKey.for_keyword("PreemptorNamespace")
PREEMPTOR_UID = SearchAttributeKey.for_keyword("PreemptorUid")
TARGET_NODE = SearchAttributeKey.for_keyword("TargetNode")
VICTIM_PODS = SearchAttributeKey.for_keyword_list("VictimPods")
PREEMPTION_PHASE = SearchAttributeKey.for_keyword("PreemptionPhase")
PREEMPTION_OUTCOME = SearchAttributeKey.for_keyword("PreemptionOutcome")
POD_GROUP = SearchAttributeKey.for_keyword("PodGroup")
VICTIM_GROUPS = SearchAttributeKey.for_keyword_list("VictimGroups")

ALL = (
    PREEMPTOR_POD,
    PREEMPTOR_NAMESPACE,
    PREEMPTOR_UID,
    TARGET_NODE,
    VICTIM_PODS,
    PREEMPTION_PHASE,
    PREEMPTION_OUTCOME,
    POD_GROUP,
    VICTIM_GROUPS,
)


VALUE_LIMIT = 2048
"""The Temporal server's default limit on the size of one search attribute's value, in bytes
(a run whose upsert passes it has its workflow task refused: "BadSearchAttributes: search
attribute VictimPods value size 3041 exceeds size limit 2048", seen on a gang of 160)."""


def within_limit(names: list[str], limit: int = VALUE_LIMIT) -> list[str]:
    """As many of `names` as fit in one keyword list value under `limit` bytes, in order:
    a preemption of many victims (a gang of 160 on 16 nodes) is found by its first ones,
    where the whole list would make the server refuse the run's workflow task for good.
    The ledger and the `state` query name every victim."""
    kept: list[str] = []
    for name in names:
        if len(json.dumps([*kept, name]).encode()) > limit - 64:  # the encoding's own bytes
            break
        kept.append(name)
    return kept

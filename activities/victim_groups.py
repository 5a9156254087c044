"""The PodGroups a run's victims belong to, and the `Preempted` Event each one gets.

A gang taken whole (`disruptionMode: all`), or members of a PodGroup taken one by one, lose
pods to a preemption, a pod's or a pod group's; `kubectl describe podgroup` then says so,
as `kubectl describe pod` of each victim does: one Normal `Preempted` Event on the PodGroup
per run, naming the preemptor (a pod or a pod group, by namespace/name and UID) and how many
of the group's pods were preempted, which, on which node.

- The select step finds the groups (`victim_pod_groups`), from the view the decision was
  made on: a victim's PodGroup (`spec.schedulingGroup`), or, for a victim the view no longer
  shows (a run resumed after some deletes), the unit its decision recorded with it.
- The run's end, which knows every victim's fate, tells them (`tell_victim_pod_groups`):
  only the victims this run deleted count; a group none of whose pods it deleted is told
  nothing.

A group a label names has no object, so no Event; nor a PodGroup the view does not show.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from preemptctl.activities.contracts import RunRef, VictimFate, VictimPodGroup
from preemptctl.activities.recording import Recorder
from preemptctl.kube import events
from preemptctl.kube.events import ObjectRef
from preemptctl.ledger.vocabulary import Fate
from preemptctl.preemption.decision import PodRef
from preemptctl.preemption.group_decision import GroupRef
from preemptctl.preemption.snapshot import ClusterSnapshot
from preemptctl.preemption.victim_units import UnitIndex

GROUP_UNIT = "podGroup "  # a unit taken whole, as a decision records it ("podGroup ml/train-b")


def victim_pod_groups(
    snapshot: ClusterSnapshot, victims: Iterable[PodRef], units: Mapping[str, str] | None = None
) -> list[VictimPodGroup]:
    """Each PodGroup the `victims` belong to, with the UIDs of its victims, by the group's
    name; `units`: each victim's unit as recorded (by UID), for the victims the view no
    longer shows."""
    found: dict[str, list[str]] = {}
    for victim in victims:
        pod = snapshot.pods.get(victim.uid)
        if pod is not None:
            key = f"{pod.namespace}/{pod.group}" if pod.group else ""
        else:
            unit = (units or {}).get(victim.uid, "")
            key = unit.removeprefix(GROUP_UNIT) if unit.startswith(GROUP_UNIT) else ""
        if key:
            found.setdefault(key, []).append(victim.uid)
    groups: list[VictimPodGroup] = []
    for key, uids in sorted(found.items()):
        shown = snapshot.pod_group(key)
        if shown is not None:
            ref = GroupRef(shown.namespace, shown.name, shown.uid, shown.priority)
            groups.append(VictimPodGroup(ref, uids))
    return groups


def whole_units(
    snapshot: ClusterSnapshot, victims: Iterable[PodRef], group_label: str
) -> dict[str, str]:
    """The unit of several pods each victim goes with, by UID, in a decision's words
    ("podGroup ml/train-b", "compositePodGroup ml/job", "labelGroup ml/x"), as the planner
    found it (`UnitIndex.whole_group_key`); a victim taken alone, or no longer in the view,
    is not in it. The runbook finishes such a unit once begun (`workflows.runbook`)."""
    index = UnitIndex(snapshot, group_label)
    units: dict[str, str] = {}
    for victim in victims:
        pod = snapshot.pods.get(victim.uid)
        whole = index.whole_group_key(pod) if pod is not None else None
        if whole is not None:
            kind, key = whole
            units[victim.uid] = f"{kind.value} {key}"
    return units


def tell_victim_pod_groups(
    recorder: Recorder,
    run: RunRef,
    preemptor: ObjectRef,
    groups: list[VictimPodGroup],
    fates: list[VictimFate],
    *,
    related: bool = True,
) -> None:
    """`Preempted` on each of `groups` that lost pods in `run` (by `fates`: those deleted,
    listed by name), naming `preemptor` (related to it, unless `related` is off: a group a
    label names has no object); once per group and run, best effort, none when the worker
    runs dry."""
    deleted = {fate.pod.uid: fate for fate in fates if fate.result.fate is Fate.DELETED}
    for group in groups:
        taken = sorted(
            ((deleted[uid].pod, deleted[uid].node) for uid in group.victims if uid in deleted),
            key=lambda pod_on: pod_on[0].name,
        )
        if not taken:
            continue
        recorder.tell(
            ObjectRef.pod_group(group.group),
            "Preempted",
            events.pod_group_preempted_note(preemptor, taken),
            key=("Preempted", run.run_id),
            normal=True,
            related=preemptor if related else None,
        )

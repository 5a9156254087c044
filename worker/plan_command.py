"""`preemptctl plan`: the planner alone, over a snapshot file (the planner contract; pods and
pod groups)."""

from __future__ import annotations

import argparse
import gc
import os
import sys
from typing import Any

import orjson

from preemptctl.preemption.decision import Strategy
from preemptctl.preemption.default_preemption import PreemptionArgs
from preemptctl.preemption.errors import PlannerInputError
from preemptctl.preemption.explain import render_explanation, render_group_explanation
from preemptctl.preemption.names import pod_key_problem
from preemptctl.preemption.planner import plan
from preemptctl.preemption.pod_group_preemption import plan_pod_group
from preemptctl.preemption.snapshot import ClusterSnapshot
from preemptctl.worker.errors import UsageError

DESCRIPTION = """\
Print the preemption decision for one pending pod (--pod) or one pending pod group
(--pod-group) as JSON, from a snapshot file alone: no cluster, Temporal or database.

The snapshot is what `kubectl get nodes,pods,pdb,pvc,pv,storageclass,csinodes,
volumeattachments,namespaces,podgroups,compositepodgroups -A -o json` prints (a v1 List);
kinds the planner does not read are skipped.

--pod prints {"preemptor", "status", "nominatedNode", "victims", "numPDBViolations",
"nominatedPodsToClear", "message", "rationale"}: kube-scheduler's DefaultPreemption (or,
with --strategy critical-admission, the kubelet's admission preemption for a bound pod).
A pod that joins a pod group is decided only with its group: Ineligible, naming it.

--pod-group prints {"podGroup", "status", "nominations", "victims", "numPDBViolations",
"message", "rationale"}: workload-aware preemption for a PodGroup (scheduling.k8s.io/v1beta1):
every lower-priority victim unit removed, the group placed once (at least minCount pods,
or one for a basic group), then units reprieved, PDB-violating ones first, most important
first, each whole. A group with disruptionMode all is one unit, on every node it runs on;
so is the highest CompositePodGroup with disruptionMode all above PodGroups (every pod of
every PodGroup beneath it, at its root's priority). A PodGroup with a parent
CompositePodGroup is refused as a preemptor (Unsupported): kube-scheduler preempts for the
whole hierarchy then.

status is one of Preempt, FitsWithoutPreemption, Ineligible, Unschedulable, Unsupported.
Exit 0 for any decision; 2 with one line on stderr for bad input."""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="decide a preemption from a snapshot, without Temporal or a database",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--snapshot",
        required=True,
        metavar="FILE",
        help="v1 List of nodes, pods, PDBs, pod groups, and the namespaces and storage objects "
        "pods use",
    )
    preemptor = parser.add_mutually_exclusive_group(required=True)
    preemptor.add_argument("--pod", metavar="NAMESPACE/NAME", help="the preemptor pod")
    preemptor.add_argument(
        "--pod-group",
        metavar="NAMESPACE/NAME",
        help="the preemptor pod group (a PodGroup, or a group named by --pod-group-label)",
    )
    parser.add_argument(
        "--strategy",
        choices=[s.value for s in Strategy],
        default=Strategy.DEFAULT.value,
        help="default: kube-scheduler's DefaultPreemption; critical-admission: the kubelet's "
        "(--pod only)",
    )
    parser.add_argument(
        "--pod-group-label",
        metavar="LABEL",
        default="",
        help="a pod label whose value names a group (e.g. kueue.x-k8s.io/pod-group-name): "
        "such pods are taken whole as victims and preempted for as one group",
    )
    parser.add_argument(
        "--pod-group-size-annotation",
        metavar="ANNOTATION",
        default="",
        help="the annotation giving a label-named group's size (its minCount; without it, "
        "every member counts)",
    )
    parser.add_argument(
        "--explain",
        action="store_true",
        help="print the rationale as tables instead: for --pod, each filter's reasons, each "
        "node the dry run judged and the filter that rejected it, the node choice; for "
        "--pod-group, where the group is placed, each victim unit taken and why, the victims",
    )
    parser.set_defaults(handler=run)


def load_snapshot(
    path: str, kept_annotations: tuple[str, ...] = (), kept_labels: tuple[str, ...] = ()
) -> ClusterSnapshot:
    """Read and decode a snapshot file, turning every kind of bad input into a UsageError."""
    try:
        with open(path, "rb") as file:
            raw = file.read()
    except OSError as error:
        raise UsageError(f"cannot read snapshot {path}: {error.strerror}") from None
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise UsageError(f"snapshot {path} is not valid JSON: {error}") from None
    try:
        return ClusterSnapshot.from_list(document, kept_annotations, kept_labels)
    except PlannerInputError as error:
        raise UsageError(f"snapshot {path}: {error}") from None


def _check_key(flag: str, key: str) -> None:
    if key.count("/") != 1 or not all(key.split("/")):
        raise UsageError(f"{flag} must be NAMESPACE/NAME, not {key!r}")


def run(args: argparse.Namespace) -> int:
    if args.pod_group is not None:
        _check_key("--pod-group", args.pod_group)
        if args.strategy != Strategy.DEFAULT.value:
            raise UsageError("--strategy applies to --pod only; a pod group is decided by default")
    else:
        _check_key("--pod", args.pod)
        if (problem := pod_key_problem(*args.pod.split("/"))) is not None:
            raise UsageError(f"--pod: {problem}")
    # One short-lived process that allocates a whole cluster's JSON and frees nothing until
    # it exits: the cyclic collector would only rescan it, again and again.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _plan_and_write(args)
    finally:
        if collecting:
            gc.enable()


_kept: list[ClusterSnapshot] = []
"""The last snapshot planned on, kept until the process ends: `console()` exits without
interpreter teardown, so it is never freed object by object (about 5% of `plan`'s run at
150,000 pods). At most one is kept when `run` is called in-process, as the tests do."""


def _plan_and_write(args: argparse.Namespace) -> int:
    annotation = args.pod_group_size_annotation
    label = args.pod_group_label
    snapshot = load_snapshot(
        args.snapshot, (annotation,) if annotation else (), (label,) if label else ()
    )
    _kept[:] = [snapshot]
    planner_args = PreemptionArgs(
        pod_group_label=args.pod_group_label, pod_group_size_annotation=annotation
    )
    try:
        if args.pod_group is not None:
            decided: Any = plan_pod_group(snapshot, args.pod_group, planner_args)
        else:
            decided = plan(snapshot, args.pod, Strategy(args.strategy), planner_args)
    except PlannerInputError as error:
        raise UsageError(str(error)) from None
    try:
        if args.explain and args.pod_group is not None:
            sys.stdout.write(render_group_explanation(decided))
        elif args.explain:
            sys.stdout.write(render_explanation(decided))
        else:
            sys.stdout.buffer.write(orjson.dumps(decided.to_json(), option=orjson.OPT_INDENT_2))
            sys.stdout.write("\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # `preemptctl plan ... | head`: the reader has what it wanted; no traceback.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 0

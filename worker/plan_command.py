"""`preemptctl plan`: the planner alone, over a snapshot file (DESIGN.md's planner contract)."""

from __future__ import annotations

import argparse
import gc
import os
import sys
from typing import Any

import orjson

from preemptctl.preemption.decision import Strategy
from preemptctl.preemption.errors import PlannerInputError
from preemptctl.preemption.explain import render_explanation
from preemptctl.preemption.planner import plan
from preemptctl.preemption.snapshot import ClusterSnapshot
from preemptctl.worker.errors import UsageError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="decide a preemption from a snapshot, without Temporal or a database",
        description="Print the preemption decision for one pod as JSON (kubectl get "
        "nodes,pods,pdb,pvc,pv,storageclass,csinodes,volumeattachments,namespaces -A -o json "
        "makes a snapshot; docs/planner.md describes the contract).",
    )
    parser.add_argument(
        "--snapshot",
        required=True,
        metavar="FILE",
        help="v1 List of nodes, pods, PDBs, and the namespaces and storage objects pods use",
    )
    parser.add_argument("--pod", required=True, metavar="NAMESPACE/NAME", help="the preemptor")
    parser.add_argument(
        "--strategy",
        choices=[s.value for s in Strategy],
        default=Strategy.DEFAULT.value,
        help="default: kube-scheduler's DefaultPreemption; critical-admission: the kubelet's",
    )
    parser.add_argument(
        "--explain",
        action="store_true",
        help="print the rationale as tables instead: each filter's reasons, each node the dry "
        "run judged and the filter that rejected it, the node choice",
    )
    parser.set_defaults(handler=run)


def load_snapshot(path: str) -> ClusterSnapshot:
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
        return ClusterSnapshot.from_list(document)
    except PlannerInputError as error:
        raise UsageError(f"snapshot {path}: {error}") from None


def run(args: argparse.Namespace) -> int:
    if args.pod.count("/") != 1 or not all(args.pod.split("/")):
        raise UsageError(f"--pod must be NAMESPACE/NAME, not {args.pod!r}")
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
    snapshot = load_snapshot(args.snapshot)
    _kept[:] = [snapshot]
    try:
        decision = plan(snapshot, args.pod, Strategy(args.strategy))
    except PlannerInputError as error:
        raise UsageError(str(error)) from None
    try:
        if args.explain:
            sys.stdout.write(render_explanation(decision))
        else:
            sys.stdout.buffer.write(orjson.dumps(decision.to_json(), option=orjson.OPT_INDENT_2))
            sys.stdout.write("\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # `preemptctl plan ... | head`: the reader has what it wanted; no traceback.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 0

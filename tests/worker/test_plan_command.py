"""`preemptctl plan`: the planner contract of DESIGN.md, at the command line.

Scenarios:
- kinds the planner does not read (a Service, a PersistentVolume) are skipped;
- stdout is one JSON object with exactly the contract's fields (plus the rationale), victims
  named by namespace, name, uid and priority, in upstream order (most important first);
- every decision kind exits 0: Preempt, FitsWithoutPreemption, Ineligible, Unschedulable,
  and Preempt by the critical-admission strategy;
- bad input exits 2 with one line on stderr and no traceback: a missing file, a directory,
  a file that is not JSON, JSON that is not a List, an object with a field of the wrong type
  (a list or dict for nodeName, a priority beyond 32 bits), two pods with one UID, a huge
  quantity exponent, an unknown pod, a malformed quantity or a negative request
  (naming the object), a `--pod` that is not NAMESPACE/NAME;
- `--explain` prints the rationale as tables, naming the filter and its reason per node;
  a lower tenant pod asking only for ephemeral storage (two containers of `5E`, a sum
  beyond int64) beside the one victim the preemptor needs is no second victim (issue 27);
- `--pod-group` prints exactly the group contract's fields (nominations per placed pod,
  victims most important first); with `--explain`, as tables: where the group is placed,
  each unit taken with why, the victims with their units (the bundled gang); `--pod` on a
  member is Ineligible naming its group; an unknown or malformed group, or a key that is not
  NAMESPACE/NAME, is one line and exit 2; `--pod` and `--pod-group` exclude each other;
  `--pod-group-label` takes a label-named group whole, also a member whose labels exceed the
  planner's caps (the label is kept); `plan --help` states the contracts itself, pointing to
  no file;
- CompositePodGroups in the snapshot: a pod takes a composite unit whole (both its pods, on
  two nodes); a pending PodGroup with a parent is Unsupported (exit 0), naming the root;
- the installed `preemptctl` on the bundled online/offline scenario preempts the two batch
  pods on node-1 by minSumPriorities and clears the lower-priority nomination there.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from preemptctl.worker.cli import main
from preemptctl.worker.scenarios import BUNDLED
from tests.preemption.builders import (
    composite_pod_group,
    container,
    listing,
    node,
    pod,
    pod_group,
    term,
)

SCENARIO = Path(__file__).resolve().parents[2] / "worker" / "scenarios" / "online-offline.json"
PREEMPTCTL = Path(sys.executable).parent / "preemptctl"
CONTRACT_FIELDS = {
    "preemptor",
    "status",
    "schedulerDisagrees",
    "nominatedNode",
    "victims",
    "numPDBViolations",
    "nominatedPodsToClear",
    "message",
}

Json = dict[str, Any]


def write(tmp_path: Path, document: Any) -> Path:
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(document))
    return path


def run_plan(
    capsys: pytest.CaptureFixture[str], snapshot: Path, pod_key: str, *flags: str
) -> tuple[int, str, str]:
    code = main(["plan", "--snapshot", str(snapshot), "--pod", pod_key, *flags])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def plan_json(capsys: pytest.CaptureFixture[str], snapshot: Path, pod_key: str) -> Json:
    code, out, err = run_plan(capsys, snapshot, pod_key)
    assert (code, err) == (0, "")
    decided: Json = json.loads(out)
    return decided


TWO_VICTIMS = listing(
    node("n", cpu="3"),
    pod("newer", cpu="1", node="n", priority=5, start=30),
    pod("older", cpu="1", node="n", priority=5, start=10),
    pod("least", cpu="1", node="n", priority=1, start=0),
    pod("keeper", cpu="0", node="n", priority=100),
    pod("p", cpu="3", priority=10),
)


def test_the_output_has_exactly_the_contract_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    decided = plan_json(capsys, write(tmp_path, TWO_VICTIMS), "default/p")
    assert set(decided) == CONTRACT_FIELDS | {"rationale"}
    assert decided["preemptor"] == "default/p"
    assert decided["status"] == "Preempt"
    assert decided["schedulerDisagrees"] is False
    assert decided["nominatedNode"] == "n"
    assert decided["numPDBViolations"] == 0
    assert decided["nominatedPodsToClear"] == []
    assert isinstance(decided["message"], str) and decided["message"]
    assert decided["victims"][0] == {
        "namespace": "default",
        "name": "older",
        "uid": "uid-default-older",
        "priority": 5,
    }


def test_victims_are_listed_most_important_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    decided = plan_json(capsys, write(tmp_path, TWO_VICTIMS), "default/p")
    assert [v["name"] for v in decided["victims"]] == ["older", "newer", "least"]


@pytest.mark.parametrize(
    ("items", "pod_key", "status", "nominated"),
    [
        (
            [node("n", cpu="1"), pod("low", cpu="1", node="n"), pod("p", cpu="1", priority=9)],
            "default/p",
            "Preempt",
            "n",
        ),
        (
            [node("n", cpu="1"), pod("p", cpu="1", priority=9)],
            "default/p",
            "FitsWithoutPreemption",
            None,
        ),
        (
            [
                node("n", cpu="1"),
                pod("low", cpu="1", node="n"),
                pod("p", cpu="1", priority=9, preemption_policy="Never"),
            ],
            "default/p",
            "Ineligible",
            None,
        ),
        (
            [
                node("n", cpu="1"),
                pod("peer", cpu="1", node="n", priority=9),
                pod("p", cpu="1", priority=9),
            ],
            "default/p",
            "Unschedulable",
            None,
        ),
    ],
)
def test_every_decision_exits_zero(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    items: list[Json],
    pod_key: str,
    status: str,
    nominated: str | None,
) -> None:
    decided = plan_json(capsys, write(tmp_path, listing(*items)), pod_key)
    assert (decided["status"], decided["nominatedNode"]) == (status, nominated)


def test_the_critical_admission_strategy_exits_zero_with_its_victims(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot = write(
        tmp_path,
        listing(
            node("n", cpu="1"),
            pod("b", cpu="1", node="n"),
            pod("critical", cpu="1", node="n", priority=2_000_000_000),
        ),
    )
    code, out, err = run_plan(
        capsys, snapshot, "default/critical", "--strategy", "critical-admission"
    )
    assert (code, err) == (0, "")
    decided = json.loads(out)
    assert decided["status"] == "Preempt"
    assert [v["name"] for v in decided["victims"]] == ["b"]


def assert_usage_error(code: int, out: str, err: str, *expected: str) -> None:
    assert code == 2
    assert out == ""
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith("preemptctl plan: ")
    assert "Traceback" not in err
    for text in expected:
        assert text in err


def test_a_missing_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    got = run_plan(capsys, tmp_path / "absent.json", "default/p")
    assert_usage_error(*got, "cannot read snapshot", "absent.json", "No such file or directory")


def test_a_directory_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert_usage_error(*run_plan(capsys, tmp_path, "default/p"), "cannot read snapshot")


def test_a_file_that_is_not_json_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "snapshot.json"
    path.write_text("apiVersion: v1\nkind: List\n")
    assert_usage_error(*run_plan(capsys, path, "default/p"), "is not valid JSON")


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ([], "not a JSON object; expected a v1 List"),
        ({"kind": "Pod", "metadata": {"name": "p"}}, "the snapshot is a Pod, expected a v1 List"),
        ({"kind": "List", "items": {"a": 1}}, "items must be a list"),
    ],
)
def test_json_that_is_not_a_list_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], document: Any, expected: str
) -> None:
    assert_usage_error(*run_plan(capsys, write(tmp_path, document), "default/p"), expected)


def test_kinds_the_planner_does_not_read_are_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}}
    volume = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-1"}}
    items = listing(node("n"), service, volume, pod("p", cpu="1"))
    decided = plan_json(capsys, write(tmp_path, items), "default/p")
    assert decided["status"] == "FitsWithoutPreemption"


def test_two_pods_with_one_uid_are_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    items = listing(node("n"), pod("a", uid="same"), pod("b", uid="same"))
    got = run_plan(capsys, write(tmp_path, items), "default/a")
    assert_usage_error(*got, "pods default/a and default/b share the uid same")


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("nodeName", ["n"], "spec.nodeName must be a string, not list"),
        ("nodeName", {"a": 1}, "spec.nodeName must be a string, not dict"),
        ("priority", 2**64, "spec.priority must be a 32-bit integer"),
        ("schedulerName", 7, "spec.schedulerName must be a string, not int"),
    ],
)
def test_a_spec_field_of_the_wrong_type_is_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    field: str,
    value: Any,
    expected: str,
) -> None:
    hostile = pod("h", node="n")
    hostile["spec"][field] = value
    got = run_plan(capsys, write(tmp_path, listing(node("n"), hostile)), "default/h")
    assert_usage_error(*got, f"pod default/h: {expected}")


def test_a_null_nominated_node_is_no_nomination(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pending = pod("p", cpu="1")
    pending["status"]["nominatedNodeName"] = None
    decided = plan_json(capsys, write(tmp_path, listing(node("n"), pending)), "default/p")
    assert decided["status"] == "FitsWithoutPreemption"


def test_a_huge_quantity_exponent_is_bad_input_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    got = run_plan(
        capsys, write(tmp_path, listing(node("n"), pod("p", cpu="1e100000000"))), "default/p"
    )
    assert_usage_error(*got, "pod default/p", "1e100000000")


def test_a_field_of_the_wrong_type_is_a_usage_error_naming_the_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = pod("x")
    broken["spec"]["containers"] = "nginx"
    got = run_plan(capsys, write(tmp_path, listing(broken)), "default/x")
    assert_usage_error(*got, "pod default/x: a field has the wrong type")


def test_an_unknown_pod_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    got = run_plan(capsys, write(tmp_path, listing(node("n"))), "default/ghost")
    assert_usage_error(*got, "pod default/ghost is not in the snapshot")


def test_a_malformed_quantity_is_a_usage_error_naming_the_pod(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    got = run_plan(capsys, write(tmp_path, listing(node("n"), pod("x", cpu="5x"))), "default/x")
    assert_usage_error(*got, "pod default/x: malformed quantity '5x' (cpu)")


def test_a_malformed_node_quantity_is_a_usage_error_naming_the_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    got = run_plan(capsys, write(tmp_path, listing(node("n1", memory="8GB"))), "default/x")
    assert_usage_error(*got, "node n1: malformed quantity '8GB' (memory)")


def test_a_negative_request_is_a_usage_error_naming_the_pod(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    negative = pod("x", containers=[container(memory="-1Gi")])
    got = run_plan(capsys, write(tmp_path, listing(node("n"), negative)), "default/x")
    assert_usage_error(*got, "pod default/x: negative request '-1Gi' (memory)")


@pytest.mark.parametrize("pod_key", ["web", "a/b/c", "/web", "default/"])
def test_a_pod_that_is_not_namespace_slash_name_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], pod_key: str
) -> None:
    got = run_plan(capsys, write(tmp_path, listing(node("n"))), pod_key)
    assert_usage_error(*got, "--pod must be NAMESPACE/NAME")


def test_explain_prints_the_rationale_as_tables(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_plan(capsys, SCENARIO, "default/nginx-a", "--explain")
    assert (code, err) == (0, "")
    assert "Decision    Preempt on node-1" in out
    assert "NODE    RESULT     VICTIMS  PDB-VIOLATIONS  DETAIL" in out
    assert "Chosen by   minSumPriorities" in out
    assert "Lower-priority nominations to clear: default/report-x" in out
    assert not out.lstrip().startswith("{")


def test_explain_names_the_filter_and_its_reason_per_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    guarded = pod("guard", node="n2", priority=500, cpu="1", labels={"app": "db"})
    items = listing(
        node("n1", cpu="1"),
        node("n2", cpu="3"),
        pod("low", node="n1", cpu="1", priority=1),
        pod("low-2", node="n2", cpu="1", priority=1),
        guarded,
        pod(
            "p",
            cpu="2",
            priority=100,
            pod_anti_affinity=[term(match_labels={"app": "db"})],
        ),
    )
    code, out, err = run_plan(capsys, write(tmp_path, items), "default/p", "--explain")
    assert (code, err) == (0, "")
    assert "FILTER            REASON" in out
    assert "NodeResourcesFit  Insufficient cpu" in out
    assert "n2    rejected" in out
    assert "InterPodAffinity: node(s) didn't match pod anti-affinity rules" in out


def test_explain_shows_one_victim_beside_a_tenant_pod_asking_only_storage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    storage = [
        container(extra={"ephemeral-storage": "5E"}, name="a"),
        container(extra={"ephemeral-storage": "5E"}, name="b"),
    ]
    items = listing(
        node("node-1", cpu="2"),
        node("node-2", cpu="2"),
        pod("low-1", cpu="2", node="node-1", priority=1, start=0),
        pod("low-2", cpu="2", node="node-2", priority=2, start=0),
        pod("tenant", node="node-1", priority=0, start=0, containers=storage),
        pod("p", cpu="2", priority=10),
    )
    code, out, err = run_plan(capsys, write(tmp_path, items), "default/p", "--explain")
    assert (code, err) == (0, "")
    assert "node-1  candidate  1        0               default/low-1\n" in out
    assert "Victims (most important first), 0 PDB violation(s)" in out
    assert "default/tenant" not in out


def test_the_installed_command_plans_the_bundled_scenario() -> None:
    finished = subprocess.run(
        [str(PREEMPTCTL), "plan", "--snapshot", str(SCENARIO), "--pod", "default/nginx-a"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (finished.returncode, finished.stderr) == (0, "")
    decided = json.loads(finished.stdout)
    assert decided["status"] == "Preempt"
    assert decided["nominatedNode"] == "node-1"
    assert [f"{v['namespace']}/{v['name']}" for v in decided["victims"]] == [
        "default/batch-1a",
        "default/batch-1b",
    ]
    assert decided["nominatedPodsToClear"] == ["default/report-x"]
    assert decided["rationale"]["decidingCriterion"] == "minSumPriorities"


def test_the_installed_command_reports_bad_input_in_one_line(tmp_path: Path) -> None:
    finished = subprocess.run(
        [str(PREEMPTCTL), "plan", "--snapshot", str(tmp_path / "absent.json"), "--pod", "a/b"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert finished.returncode == 2
    assert finished.stdout == ""
    assert finished.stderr.count("\n") == 1 and "Traceback" not in finished.stderr


def test_output_cut_short_by_a_closed_pipe_is_not_a_traceback() -> None:
    command = (
        f"{Path(sys.executable).parent / 'preemptctl'} plan --snapshot {SCENARIO} "
        "--pod default/nginx-a | head -c 10"
    )
    completed = subprocess.run(command, shell=True, capture_output=True, text=True, check=False)
    assert completed.stdout == '{\n  "preem'
    assert "Traceback" not in completed.stderr


# -- --pod-group ----------------------------------------------------------------------------------

GROUP_CONTRACT_FIELDS = {
    "podGroup",
    "status",
    "nominations",
    "victims",
    "numPDBViolations",
    "message",
    "rationale",
}

GANG = listing(
    node("n1", cpu="1"),
    node("n2", cpu="1"),
    pod("low-1", cpu="1", node="n1", priority=1),
    pod("low-2", cpu="1", node="n2", priority=2),
    pod_group("train", priority=100, min_count=2),
    pod("t-1", cpu="1", group="train"),
    pod("t-2", cpu="1", group="train"),
)


def run_group(
    capsys: pytest.CaptureFixture[str], snapshot: Path, group: str, *flags: str
) -> tuple[int, str, str]:
    code = main(["plan", "--snapshot", str(snapshot), "--pod-group", group, *flags])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_pod_group_decision_has_exactly_the_group_contract_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_group(capsys, write(tmp_path, GANG), "default/train")
    decided = json.loads(out)
    assert (code, err, set(decided)) == (0, "", GROUP_CONTRACT_FIELDS)
    assert (decided["status"], decided["nominations"], decided["numPDBViolations"]) == (
        "Preempt",
        {"default/t-1": "n1", "default/t-2": "n2"},
        0,
    )
    assert [victim["name"] for victim in decided["victims"]] == ["low-2", "low-1"]


def test_explain_tells_a_pod_groups_placement_its_units_and_victims(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run_group(capsys, BUNDLED["gang"], "ml/train-a", "--explain")
    assert (code, err) == (0, "")
    assert out.split("\n") == [
        "Pod group   ml/train-a (priority 100000, uid 05b66ba4-e539-583f-a49f-6802667d64db; "
        "PodGroup, gang, minCount 4; 4 pending, 0 bound)",
        "Strategy    pod-group",
        "Decision    Preempt",
        "Message     preempt 4 pod(s) in 2 unit(s) on 4 node(s) to place 4 of 4 pending pod(s) "
        "on 4 node(s) (minCount 4; 0 PDB violation(s))",
        "",
        "Dry run over 5 node(s): 8 lower-priority pod(s) removed, the group placed once on "
        "what is left",
        "",
        "Placement: 4 pod(s) on 4 node(s)",
        "  POD           NODE",
        "  ml/train-a-0  node-1",
        "  ml/train-a-1  node-2",
        "  ml/train-a-2  node-3",
        "  ml/train-a-3  node-4",
        "",
        "Victim units: 3 considered, 1 reprieved, 2 taken (most important first), their pods "
        "on 4 node(s)",
        "  UNIT                 PRIORITY  WHOLE  PODS  NODES                   PDB-VIOLATIONS  "
        "WHY TAKEN",
        "  podGroup ml/train-b  1000      yes    3     node-1, node-2, node-5  0               "
        "ml/train-a-0 would not fit on node-1 beside it (Insufficient cpu)",
        "  pod ml/notebook      100       no     1     node-3                  0               "
        "ml/train-a-2 would not fit on node-3 beside it (Insufficient cpu)",
        "",
        "Victims (most important first), 0 PDB violation(s)",
        "  POD           PRIORITY  UID                                   UNIT",
        "  ml/train-b-1  1000      1b772b6f-38c0-5478-8578-1b382edbf51e  podGroup ml/train-b",
        "  ml/train-b-2  1000      33e663ee-70fb-5ef8-a6ac-4b6268d31504  podGroup ml/train-b",
        "  ml/train-b-0  1000      5c3a7f28-7d10-5d7d-86d0-20478a3a897a  podGroup ml/train-b",
        "  ml/notebook   100       e37b28b0-ff41-5161-bde4-4abb4c4d6011  pod ml/notebook",
        "",
    ]


def test_plan_pod_on_a_group_member_is_ineligible_naming_the_group(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    decided = plan_json(capsys, write(tmp_path, GANG), "default/t-1")
    assert (decided["status"], "default/train" in decided["message"]) == ("Ineligible", True)


def test_an_unknown_pod_group_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    got = run_group(capsys, write(tmp_path, GANG), "default/ghost")
    assert_usage_error(*got, "pod group default/ghost is not in the snapshot")


def test_a_malformed_pod_group_is_a_usage_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = pod_group("train", min_count=2)
    bad["spec"]["disruptionMode"] = {"sometimes": {}}
    got = run_group(capsys, write(tmp_path, listing(node("n1"), bad)), "default/train")
    assert_usage_error(*got, "podgroup default/train: spec.disruptionMode must be")


def test_a_pod_group_that_is_not_namespace_slash_name_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    got = run_group(capsys, write(tmp_path, GANG), "train")
    assert_usage_error(*got, "--pod-group must be NAMESPACE/NAME")


def test_pod_and_pod_group_are_mutually_exclusive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(write(tmp_path, GANG))
    with pytest.raises(SystemExit) as exited:
        main(["plan", "--snapshot", path, "--pod", "default/t-1", "--pod-group", "default/train"])
    assert (exited.value.code, "not allowed with argument" in capsys.readouterr().err) == (2, True)


def test_label_named_groups_are_taken_whole_with_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    label = "kueue.x-k8s.io/pod-group-name"
    items = listing(
        node("n1", cpu="1"),
        node("n2", cpu="1"),
        pod("k-1", cpu="1", node="n1", priority=1, labels={label: "job"}),
        pod("k-2", cpu="1", node="n2", priority=1, labels={label: "job"}),
        pod("p", cpu="1", priority=10),
    )
    code, out, _ = run_plan(capsys, write(tmp_path, items), "default/p", "--pod-group-label", label)
    assert (code, [v["name"] for v in json.loads(out)["victims"]]) == (0, ["k-1", "k-2"])


def test_the_group_label_is_kept_on_a_member_whose_labels_exceed_the_caps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """k-2 carries 100 labels (beyond the cap of 64): the planner keeps only the label the
    flag names, so k-2 still belongs to the group, which is taken whole."""
    label = "kueue.x-k8s.io/pod-group-name"
    crowded = {f"tenant.example.com/k{i}": "v" for i in range(100)}
    items = listing(
        node("n1", cpu="1"),
        node("n2", cpu="1"),
        pod("k-1", cpu="1", node="n1", priority=1, labels={label: "job"}),
        pod("k-2", cpu="1", node="n2", priority=1, labels={label: "job", **crowded}),
        pod("p", cpu="1", priority=10),
    )
    code, out, _ = run_plan(capsys, write(tmp_path, items), "default/p", "--pod-group-label", label)
    assert (code, [v["name"] for v in json.loads(out)["victims"]]) == (0, ["k-1", "k-2"])


def test_plan_help_describes_the_contract_without_pointing_to_a_missing_file(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    shown = capsys.readouterr().out
    assert "docs/" not in shown
    assert all(word in shown for word in ("--pod-group", "podGroup", "nominations", "minCount"))


COMPOSITE = [
    node("n1", cpu="1"),
    node("n2", cpu="1"),
    pod("a-0", cpu="1", node="n1", priority=1, group="a"),
    pod("b-0", cpu="1", node="n2", priority=1, group="b"),
    pod_group("a", priority=1, parent="job"),
    pod_group("b", priority=1, parent="job"),
    composite_pod_group("job", priority=1, disruption="all"),
]


def test_a_pod_takes_a_composite_unit_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    items = listing(*COMPOSITE, pod("p", cpu="1", priority=10))
    decided = plan_json(capsys, write(tmp_path, items), "default/p")
    assert (decided["status"], sorted(v["name"] for v in decided["victims"])) == (
        "Preempt",
        ["a-0", "b-0"],
    )


def test_a_pod_group_with_a_parent_is_unsupported_naming_the_root(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    items = listing(
        *COMPOSITE,
        pod_group("c", priority=10, min_count=1, parent="job"),
        pod("c-0", cpu="1", priority=10, group="c"),
    )
    code, out, err = run_group(capsys, write(tmp_path, items), "default/c")
    decided = json.loads(out)
    assert (code, err, decided["status"], decided["victims"]) == (0, "", "Unsupported", [])
    assert "the CompositePodGroup default/job the group belongs to" in decided["message"]

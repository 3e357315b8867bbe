"""Slips an operator makes, caught before anything changes (the sandbox).

A selector with a typo, a selector narrowed to one node, a canary as large as the fleet: each is
refused, or planned saying exactly what it does, before the DaemonSet or a pod changes. Most runs
are --check runs (nothing changes, the plan is the answer); the one real run is refused before it
changes anything.
"""

from __future__ import annotations

import json

import pytest

from tests.helpers import run_playbook

pytestmark = [pytest.mark.sandbox, pytest.mark.usefixtures("adopted")]

REPO = "registry.example.com/better-compute/bcd"
NEXT = f"{REPO}:0.5.0@sha256:{'e5' * 32}"  # a digest no other test rolls to; --check runs only
TYPO = json.dumps({"bcd_node_selector": {"nvidia.com/gpu.presnt": "true"}})
LEASE = "bcd-ansible-lock"


def flat(run) -> str:
    return " ".join((run.stdout + run.stderr).split())


def gpu_nodes(sandbox) -> list[str]:
    return sandbox.gpu_node_names()


def bcd_state(sandbox) -> tuple[int, dict[str, str]]:
    """The DaemonSet's generation and Node -> the uid of its bcd pod."""
    ds = json.loads(sandbox.kubectl("get", "daemonset", "-n", "bcd-system", "bcd", "-o", "json").stdout)
    pods = json.loads(sandbox.kubectl("get", "pods", "-n", "bcd-system", "-l", "app.kubernetes.io/name=bcd",
                                      "-o", "json").stdout)["items"]
    return ds["metadata"]["generation"], {p["spec"].get("nodeName"): p["metadata"]["uid"] for p in pods}


def test_a_selector_that_selects_no_node_is_refused_by_rollout_before_any_change(sandbox):
    """The trial's typo (nvidia.com/gpu.presnt): the plan said "5 node(s) in 5 stage(s)" with an
    empty table, then every bcd pod was deleted and the run exited 0. Now --check and the real run
    refuse it, naming the selector and the pods it would delete; nothing changes."""
    before = bcd_state(sandbox)
    assert len(before[1]) >= len(gpu_nodes(sandbox)), before
    check = run_playbook("rollout.yml", "--check", "-e", TYPO)
    out = flat(check)
    assert check.returncode != 0, out[-3000:]
    assert "bcd_node_selector nvidia.com/gpu.presnt=true selects no Node in this cluster" in out, out[-3000:]
    assert f"would delete the DaemonSet's {len(before[1])} bcd pod(s)" in out and "release-cluster.yml" in out
    run = run_playbook("rollout.yml", "-e", TYPO)
    out = flat(run)
    assert run.returncode != 0, out[-3000:]
    assert "selects no Node in this cluster" in out and "Nothing was changed" in out, out[-3000:]
    assert bcd_state(sandbox) == before, "the DaemonSet and every bcd pod as they were"
    assert sandbox.kubectl("get", "lease", "-n", "bcd-system", LEASE, check=False).returncode != 0, "no lock left"


def test_doctor_and_audit_fail_on_a_selector_that_selects_no_node(sandbox):
    """doctor.yml passed having checked no node (a warning only); it fails now, naming the
    selector, and so does audit.yml."""
    for playbook in ("doctor.yml", "audit.yml"):
        run = run_playbook(playbook, "-e", TYPO)
        out = flat(run)
        assert run.returncode != 0, (playbook, out[-3000:])
        assert "bcd_node_selector nvidia.com/gpu.presnt=true selects no Node in this cluster" in out, (playbook, out[-3000:])
        assert "Traceback" not in out


def test_a_plan_that_takes_bcd_off_nodes_names_them_and_counts_what_its_table_lists(sandbox):
    """A selector narrowed to one node, on purpose (bcd_allow_node_loss): the --check plan said
    "N node(s) in N stage(s)" and never that N - 1 nodes lose bcd. Now its headline counts the
    selected node that rolls, how many stay and each node that loses bcd; the table lists the
    same nodes; a plan of one node on one selected node warns that there is no canary."""
    nodes = gpu_nodes(sandbox)
    keep, lose = nodes[0], nodes[1:]
    narrowed = {"bcd_node_selector": {"nvidia.com/gpu.present": "true", "kubernetes.io/hostname": keep},
                "bcd_allow_node_loss": True}
    before = bcd_state(sandbox)
    run = run_playbook("rollout.yml", "--check", "-e", json.dumps(narrowed))
    out = flat(run)
    assert run.returncode == 0, out[-3000:]
    assert ("1 of 1 selected node(s) roll in 1 stage(s) (canary: 1), 0 stay as they are; "
            f"{len(lose)} node(s) LOSE bcd (their pod is deleted, not selected by bcd_node_selector): "
            f"{', '.join(lose)}") in out, out[-3000:]
    for node in lose:
        assert f"{node} - " in out and "loses bcd: not selected by bcd_node_selector" in out, (node, out[-3000:])
    assert f"{keep} canary" in out and "will roll" in out
    assert "there is no canary to prove the new pod first" in out, out[-3000:]
    assert bcd_state(sandbox) == before, "--check changes nothing"


def test_a_plan_whose_first_stage_rolls_every_node_is_refused_unless_allowed(sandbox):
    """bcd_rollout_canary as large as the fleet: one stage, no canary left. The trial's build
    crashed on all of them at once after "healthy" on each. Refused now, saying a failure hits
    the whole fleet at once and naming the variable that allows it."""
    n = len(gpu_nodes(sandbox))
    before = bcd_state(sandbox)
    run = run_playbook("rollout.yml", "--check", "-e", f"bcd_image={NEXT}", "-e", f"bcd_rollout_canary={n}")
    out = flat(run)
    assert run.returncode != 0, out[-3000:]
    assert f"the canary stage rolls all {n} node(s) to roll at once" in out, out[-3000:]
    assert "a failure hits the whole fleet at once" in out and "bcd_rollout_all_at_once: true" in out
    allowed = run_playbook("rollout.yml", "--check", "-e", f"bcd_image={NEXT}", "-e", f"bcd_rollout_canary={n}",
                           "-e", "bcd_rollout_all_at_once=true")
    out = flat(allowed)
    assert allowed.returncode == 0, out[-3000:]
    assert f"{n} of {n} selected node(s) roll in 1 stage(s) (canary: {n})" in out and "rolling anyway" in out, out[-3000:]
    assert bcd_state(sandbox) == before


def test_a_change_to_the_configmap_alone_plans_and_reports_no_node_rolling(sandbox, tmp_path):
    """A hand edit of the live ConfigMap (another field manager) changes no pod template: the
    apply puts it back and the kubelet updates the mounted files in place. The plan said "N of M
    selected node(s) roll" and the report then "rolled ... on 0 node(s)". Now both count no node
    rolling, no pod is replaced, and the ConfigMap is the render again."""
    def config() -> dict:
        return json.loads(sandbox.kubectl("get", "configmap", "-n", "bcd-system", "bcd-config", "-o", "json").stdout)["data"]

    rendered = config()
    key = "config.toml" if "config.toml" in rendered else sorted(rendered)[0]
    sandbox.kubectl("patch", "configmap", "-n", "bcd-system", "bcd-config", "--field-manager=hand-edit", "--type=merge",
                    "-p", json.dumps({"data": {key: rendered[key] + "\n# a hand edit\n"}}))
    assert config() != rendered
    before = bcd_state(sandbox)
    n = len(gpu_nodes(sandbox))
    report = tmp_path / "report.json"
    run = run_playbook("rollout.yml", "-e", f"bcd_report_out={report}")
    out = flat(run)
    assert run.returncode == 0, out[-3000:]
    assert "the pod template does not" in out and f"none of the {n} selected node(s) rolls" in out, out[-3000:]
    assert "will roll" not in out and f"of {n} selected node(s) roll in" not in out, out[-3000:]
    summary = json.loads(report.read_text())
    assert summary["result"] == "succeeded", summary
    assert summary["stages"] == [] and "no node rolled" in summary["headline"], summary["headline"]
    assert bcd_state(sandbox)[1] == before[1], "every bcd pod as it was (same uids)"
    assert config() == rendered, "the ConfigMap is the render again"

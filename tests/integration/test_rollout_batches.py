"""rollout.yml's batches, which the DaemonSet controller rolls (RollingUpdate with maxUnavailable
the batch's size, then OnDelete once it has replaced the batch's pods), against the sandbox.

With ``bcd_rollout_canary: 0`` the first stage is a batch, so a digest whose pods never turn
Ready (``dead...``: sandbox/kwok/kwok.yaml) fails a batch the controller picked: the rollout
stops at that stage naming its nodes, no further batch starts (the strategy is OnDelete), and
the rollback restores the previous image on the rolled nodes. Each starts from the cluster
adopted on the inventory's digest (3 GPU nodes by default: batches of 2 and 1), in any order.
"""

from __future__ import annotations

import json

import pytest

from tests.helpers import daemonset, image, pods, ready, run_playbook

pytestmark = [pytest.mark.sandbox, pytest.mark.usefixtures("adopted")]

REPO = "registry.example.com/better-compute/bcd"
GOOD = f"{REPO}:0.6.0@sha256:{'f6' * 32}"
DEAD = f"{REPO}:0.9.1@sha256:dead{'1b' * 30}"  # runs, never turns Ready
# no canary: the first stage is a batch of 2 (of 3 nodes), the DaemonSet controller's
BATCHES = ("-e", "bcd_rollout_canary=0", "-e", "bcd_rollout_max_unavailable=2")


def rollout(tmp_path, name: str, *args: str):
    report = tmp_path / f"{name}.json"
    run = run_playbook("rollout.yml", "-e", f"bcd_report_out={report}", *args)
    return run, json.loads(report.read_text())


def failed_first_batch(sandbox, summary: dict, nodes: list[str]) -> list[str]:
    """The first batch failed, naming its nodes (those the controller picked), and no later stage
    started; returns its nodes."""
    first = summary["stages"][0]
    assert first["name"] == "batch 1" and first["outcome"] == "failed", summary["stages"]
    assert first["size"] == 2 and len(first["nodes"]) == 2, first
    assert set(first["nodes"]) < set(nodes)
    assert sorted(f["node"] for f in summary["failed_nodes"]) == sorted(first["nodes"]), summary["failed_nodes"]
    assert all("not Ready" in f["why"] and f["stage"] == "batch 1" for f in summary["failed_nodes"]), summary
    # batches of 2 over however many GPU nodes the session's sandbox has by now (add-nodes tests grow it)
    assert [s["outcome"] for s in summary["stages"][1:]] == ["not started"] * (-(-len(nodes) // 2) - 1), summary["stages"]
    for node in first["nodes"]:
        assert node in summary["headline"]
    return first["nodes"]


def test_a_failed_batch_stops_there_naming_its_nodes_and_is_rolled_back(sandbox, tmp_path):
    nodes = sandbox.gpu_node_names()
    before = pods(sandbox)
    was = {n: image(p) for n, p in before.items()}
    strategy = daemonset(sandbox)["spec"]["updateStrategy"]
    run, summary = rollout(tmp_path, "rolled-back", "-e", f"bcd_image={DEAD}", "-e", "bcd_rollout_gate_timeout=10",
                           *BATCHES)
    assert run.returncode != 0, run.stdout[-4000:]
    assert summary["result"] == "rolled_back", summary
    rolled = failed_first_batch(sandbox, summary, nodes)
    rollback = summary["rollback"]
    assert rollback["outcome"] == "succeeded" and set(rolled) <= set(rollback["nodes"]), rollback
    # the previous image again on every node, Ready; the node no batch reached kept its pod
    after = pods(sandbox)
    assert {n: (image(p), ready(p)) for n, p in after.items()} == {n: (was[n], True) for n in nodes}
    for node in set(nodes) - set(rolled):
        assert after[node]["metadata"]["uid"] == before[node]["metadata"]["uid"], f"{node} was not in the failed batch"
    ds = daemonset(sandbox)
    assert image(ds["spec"]["template"]) == was[nodes[0]]
    assert ds["spec"]["updateStrategy"] == strategy, "the render's own strategy again"


def test_without_rollback_a_failed_batch_leaves_ondelete_and_no_other_pod_rolls(sandbox, tmp_path):
    nodes = sandbox.gpu_node_names()
    before = pods(sandbox)
    run, summary = rollout(tmp_path, "failed", "-e", f"bcd_image={DEAD}", "-e", "bcd_rollout_gate_timeout=10",
                           "-e", "bcd_rollout_rollback=false", *BATCHES)
    assert run.returncode != 0, run.stdout[-4000:]
    assert summary["result"] == "failed" and summary["rollback"] is None, summary
    rolled = failed_first_batch(sandbox, summary, nodes)
    ds = daemonset(sandbox)
    assert ds["spec"]["updateStrategy"]["type"] == "OnDelete", ds["spec"]["updateStrategy"]
    assert image(ds["spec"]["template"]) == DEAD
    # the controller has seen OnDelete, so no further batch starts: the node outside the failed
    # batch keeps its pod
    assert ds["status"]["observedGeneration"] >= ds["metadata"]["generation"]
    after = pods(sandbox)
    for node in set(nodes) - set(rolled):
        assert after[node]["metadata"]["uid"] == before[node]["metadata"]["uid"]
        assert image(after[node]) == image(before[node]) and ready(after[node])
    for node in rolled:
        assert image(after[node]) == DEAD and not ready(after[node])

    # recovery: a good digest, forced (the fleet is unhealthy), every node back to Ready
    forced = run_playbook("rollout.yml", "-e", f"bcd_image={GOOD}", "-e", "bcd_rollout_force=true",
                          "-e", "bcd_rollout_max_unavailable=100%")
    assert forced.returncode == 0, forced.stdout[-4000:]
    assert {n: (image(p), ready(p)) for n, p in pods(sandbox).items()} == {n: (GOOD, True) for n in nodes}

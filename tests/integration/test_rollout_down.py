"""rollout.yml with down nodes, against the sandbox: a NotReady Node is left behind (named, not
rolled, not waited for) within bcd_rollout_max_down, more down Nodes than that refuse the
rollout before any change, and a Node that joins meanwhile is named. Each starts from the
cluster adopted on the inventory's digest (3 GPU nodes by default), holds Nodes NotReady
(``sandbox.set_node_not_ready``) and releases them whatever happens.

A held Node behaves as a real one whose kubelet stopped (``cluster.mark_pods_down``): the node
lifecycle controller marks its pod not Ready, and a pod deleted there stays Terminating until the
Node is back. So once the stages passed and the render's RollingUpdate is applied, the held
Node's old pod waits, Terminating or not, and the next run after the Node is back finds it on
the new digest.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from tests.helpers import daemonset, image, module_config, pods, ready, run_module, run_playbook

pytestmark = [pytest.mark.sandbox, pytest.mark.usefixtures("adopted")]

REPO = "registry.example.com/better-compute/bcd"
NEXT = (f"{REPO}:0.7.0@sha256:{'a7' * 32}", f"{REPO}:0.7.1@sha256:{'b7' * 32}")


def _flat(text: str) -> str:
    return " ".join(text.split())


def rollout(tmp_path, name: str, *args: str):
    report = tmp_path / f"{name}.json"
    run = run_playbook("rollout.yml", "-e", f"bcd_report_out={report}", *args)
    return run, (json.loads(report.read_text()) if report.exists() else {})


def next_image(sandbox) -> str:
    now = image(daemonset(sandbox)["spec"]["template"])
    return next(i for i in NEXT if i != now)


def test_a_notready_node_is_left_behind_and_on_the_new_digest_after_the_next_run(sandbox, tmp_path):
    nodes = sandbox.gpu_node_names()
    down = nodes[1]
    new = next_image(sandbox)
    sandbox.set_node_not_ready(down)
    try:
        run, summary = rollout(tmp_path, "down", "-e", f"bcd_image={new}")
        out = _flat(run.stdout + run.stderr)
        assert run.returncode == 0, out[-4000:]
        assert summary["result"] == "succeeded", summary["headline"]
        assert summary["left_behind"] == [{"node": down, "why": summary["left_behind"][0]["why"]}], summary["left_behind"]
        assert summary["left_behind"][0]["why"].startswith("the Node is NotReady (KubeletNotReady: container runtime is down")
        assert f"1 down node(s) left behind ({down})" in summary["headline"]
        rolled = [n for s in summary["stages"] for n in s["nodes"]]
        assert sorted(rolled) == sorted(n for n in nodes if n != down), summary["stages"]
        row = next(r for r in summary["nodes"] if r["name"] == down)
        assert row["outcome"].startswith("left behind: the Node is NotReady (KubeletNotReady"), row
        assert row["stage"] is None and row["pod"] in ("unknown (Node NotReady)", "none"), row
        assert f"{down} " in out and "left behind: the Node is NotReady" in out  # the printed table
        running = pods(sandbox)
        for node in nodes:
            if node != down:
                assert image(running[node]) == new and ready(running[node]), node
        # as on a real cluster, nothing runs the new pod on the down Node: its old pod stays (not
        # Ready, or Terminating once the DaemonSet controller deleted it)
        assert down not in running or (image(running[down]) != new and not ready(running[down])), running.get(down)

        # meanwhile audit.yml names the Node as down and behind, and what brings it up to date
        report = tmp_path / "audit.json"
        audited = run_playbook("audit.yml", "-e", f"bcd_image={new}", "-e", f"bcd_report_out={report}")
        assert audited.returncode != 0, audited.stdout[-3000:]
        checks = [r for c in json.loads(report.read_text())["clusters"].values() for r in c["results"]]
        said = next(r["message"] for r in checks if r["check"] == "pod" and r["node"] == down)
        assert said.startswith(f"{down}: the Node is NotReady (KubeletNotReady"), said
        assert "a rollout leaves a down Node behind; fix: bring the Node back" in said, said
        assert [r["node"] for r in checks if r["check"] == "pod" and not r["ok"]] == [down], checks

        # a second rollout while the Node is still down, its old pod deleted by the first one's
        # RollingUpdate (Terminating until the kubelet is back): left behind again, not waited for
        newer = next(i for i in NEXT if i != new)
        second, summary = rollout(tmp_path, "down-again", "-e", f"bcd_image={newer}")
        assert second.returncode == 0, _flat(second.stdout + second.stderr)[-4000:]
        assert summary["result"] == "succeeded" and [b["node"] for b in summary["left_behind"]] == [down], summary
        row = next(r for r in summary["nodes"] if r["name"] == down)
        assert row["outcome"].startswith("left behind: the Node is NotReady"), row
        new = newer
    finally:
        sandbox.release_node(down)

    # back: its kubelet ends the old pod, the DaemonSet controller gives it the new one (the
    # render's RollingUpdate), and the next run finds the whole fleet on the new digest
    again, summary = rollout(tmp_path, "again", "-e", f"bcd_image={new}")
    assert again.returncode == 0, again.stdout[-4000:]
    running = pods(sandbox)
    assert {n: (image(p), ready(p)) for n, p in running.items()} == {n: (new, True) for n in nodes}, summary.get("headline")


def test_more_nodes_down_than_bcd_rollout_max_down_refuse_before_any_change(sandbox, tmp_path):
    nodes = sandbox.gpu_node_names()
    held = nodes[:2]  # 2 of 3: bcd_rollout_max_down 10% allows 1
    before = daemonset(sandbox)
    uids = {n: p["metadata"]["uid"] for n, p in pods(sandbox).items()}
    for name in held:
        sandbox.set_node_not_ready(name)
    try:
        run, summary = rollout(tmp_path, "refused", "-e", f"bcd_image={next_image(sandbox)}")
    finally:
        for name in held:
            sandbox.release_node(name)
    out = _flat(run.stdout + run.stderr)
    assert run.returncode != 0, out[-4000:]
    assert (f"2 of {len(nodes)} selected node(s) are down, more than bcd_rollout_max_down 10% allows (1)") in out, out[-4000:]
    for name in held:
        assert f"{name}: the Node is NotReady (KubeletNotReady" in out
    assert "Nothing was changed" in out and "raise bcd_rollout_max_down" in out
    # the last line: the refusal with the Nodes it names, and its own fix whole
    verdict = run.stdout.rstrip().rpartition("\n")[2]
    assert verdict.startswith(f"rollout: cluster sandbox rollout refused, nothing changed: 2 of {len(nodes)} selected "
                              f"node(s) are down, more than bcd_rollout_max_down 10% allows (1): {held[0]}, {held[1]}; "
                              "next: bring the down nodes back"), verdict
    assert verdict.endswith("down nodes are left behind), then ansible-playbook rollout.yml again"), verdict
    assert summary["result"] == "refused" and summary["changed"] is False, summary.get("headline")
    assert sorted(d["node"] for d in summary["down"]) == held, summary["down"]
    # the report's rows say what the refusal did: nothing rolls, no node is left for a later run
    outcomes = {r["name"]: r["outcome"] for r in summary["nodes"]}
    assert all(outcomes[n].startswith("down, not judged: the Node is NotReady") for n in held), outcomes
    assert outcomes[nodes[2]] == "not rolled: the rollout is refused", outcomes
    assert summary["to_roll"] == [] and summary["would_roll"] == [nodes[2]], summary
    assert {s["outcome"] for s in summary["stages"]} == {"not started"}, summary["stages"]
    assert "will roll" not in out and "left behind:" not in out, out[-4000:]
    after = daemonset(sandbox)
    assert after["metadata"]["generation"] == before["metadata"]["generation"], "the DaemonSet is unchanged"
    assert image(after["spec"]["template"]) == image(before["spec"]["template"])
    assert {n: p["metadata"]["uid"] for n, p in pods(sandbox).items()} == uids, "no pod was replaced"


def test_a_node_that_joins_during_the_rollout_is_named_not_waited_for(sandbox, tmp_path):
    """A GPU Node added once the canary's new pod exists gets a pod of the new template at once
    (the DaemonSet is OnDelete while it rolls); its bcd has no join token (add-nodes.yml's), so the
    run names it rather than gating it, and neither the gates nor the DaemonSet wait wait for it.
    The sandbox's baseline deletes the added Node before the next test."""
    new = next_image(sandbox)
    added: list[str] = []
    stop = threading.Event()

    def add_once_the_canary_rolls():
        while not stop.is_set():
            if any(image(p) == new for p in pods(sandbox).values()):
                added.extend(sandbox.add_nodes(1))
                return
            time.sleep(0.2)

    watcher = threading.Thread(target=add_once_the_canary_rolls, daemon=True)
    watcher.start()
    try:
        # a longer soak: the Node is Ready within seconds, and the run must still be rolling then
        run, summary = rollout(tmp_path, "joined", "-e", f"bcd_image={new}", "-e", "bcd_rollout_soak=15")
    finally:
        stop.set()
        watcher.join(60)
    out = _flat(run.stdout + run.stderr)
    assert added, "no Node was added"
    assert run.returncode == 0, out[-4000:]
    assert summary["joined"] == added, (summary["joined"], summary["notes"])
    row = next(r for r in summary["nodes"] if r["name"] == added[0])
    assert row["outcome"].startswith("joined during the rollout") and row["stage"] is None, row
    assert f"{added[0]} joined the cluster" in out and "add-nodes.yml joins it" in out, out[-4000:]
    assert f"1 node(s) joined during the rollout ({added[0]})" in summary["headline"]


def test_the_wait_subtracts_only_the_left_nodes_the_daemonset_still_counts(sandbox, cpvars):
    """bcd_daemonset_wait's done is desiredNumberScheduled less the left-behind Nodes the
    DaemonSet still counts: a down Node's pod is neither waited for nor named, but a Node that is
    gone (here: one that never existed) is not in desiredNumberScheduled, so naming it must not
    let the wait call the rollout done while another Node's pod is not available."""
    down = sandbox.gpu_node_names()[1]
    base = {"config": module_config(cpvars), "kubeconfig": str(sandbox.kubeconfig), "timeout": 15}
    sandbox.set_node_not_ready(down)
    try:
        deadline = time.monotonic() + 90
        while ready(pods(sandbox)[down]) and time.monotonic() < deadline:
            time.sleep(1)
        assert not ready(pods(sandbox)[down]), "the held Node's pod stays Ready"
        code, waited = run_module("bcd_daemonset_wait", {**base, "left_behind": ["gpu-node-gone"]})
        assert code == 1 and not waited.get("done"), waited
        assert f"{down}: pod " in waited["msg"], waited["msg"]
        code, waited = run_module("bcd_daemonset_wait", {**base, "left_behind": [down, "gpu-node-gone"]})
        assert code == 0 and waited["done"], waited
    finally:
        sandbox.release_node(down)

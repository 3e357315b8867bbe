"""A fleet in one run: playbooks on two clusters at once, each a small sandbox of its own
(2 GPU nodes, in <repo>/.sandbox-fleet-<name>): the fleet summary (one line per cluster), one
JSON report holding both clusters, and, in make test-long, rollout.yml in cluster waves where the
second cluster's new pods never turn Ready."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_cp import Client

from tests.helpers import ROOT, recap, run_playbook
from tests.secrets_scan import find_in_text

pytestmark = [pytest.mark.sandbox]

NAMES = ("east", "west")
REPO = "registry.example.com/better-compute/bcd"
GOOD = f"{REPO}:0.2.0@sha256:{'b2' * 32}"
DEAD = f"{REPO}:0.9.0@sha256:dead{'0f' * 30}"  # the sandbox's kubelet never makes this pod Ready


class Cluster:
    """One sandbox of the fleet and its control-plane emulator."""

    def __init__(self, name: str, sandbox):
        self.name, self.sandbox = name, sandbox
        self.cpvars = sandbox.control_plane_vars()
        self.cp = Client(self.cpvars["bcd_control_plane_url"], api_key=self.cpvars["bcd_api_key"],
                         ca_file=self.cpvars["bcd_control_plane_ca_file"])

    def tokens(self) -> list[dict]:
        return list(self.cp.list_tokens(self.cpvars["bcd_tenant"], self.cpvars["bcd_pool"]))

    def reporting(self) -> dict[str, str]:
        return {n["hostname"]: n["state"] for n in self.cp.list_nodes(self.cpvars["bcd_tenant"], self.cpvars["bcd_pool"])}

    def unadopt(self) -> None:
        self.sandbox.unadopt(self.cp, self.cpvars["bcd_tenant"], self.cpvars["bcd_pool"])

    def pods(self) -> dict[str, dict]:
        out = json.loads(self.sandbox.kubectl("get", "pods", "-n", "bcd-system", "-l", "app.kubernetes.io/name=bcd",
                                              "-o", "json").stdout)
        return {p["spec"]["nodeName"]: p for p in out["items"] if not p["metadata"].get("deletionTimestamp")}


@pytest.fixture(scope="module")
def fleet(request):
    """Two sandboxes side by side, 2 GPU nodes each (brought up when not up; brought down at the
    end when this fixture started them)."""
    from sandbox.api import Sandbox

    started, clusters = [], []
    capture = request.config.pluginmanager.getplugin("capturemanager")
    try:
        for name in NAMES:
            sb = Sandbox(ROOT / f".sandbox-fleet-{name}")
            if sb.state_or_none() is None or not sb.is_up():
                if sb.state_or_none() is None:
                    started.append(sb)
                with capture.global_and_fixture_disabled():
                    sb.up(nodes=2)
            clusters.append(Cluster(name, sb))
        yield clusters
    finally:
        if not os.environ.get("BCD_KEEP_FLEET"):
            for sb in started:
                with capture.global_and_fixture_disabled():
                    sb.down()


def inventory(clusters, tmp_path: Path, **per_cluster: dict) -> Path:
    """An inventory of ``clusters``: each the sandbox inventory's variables pointed at its own
    sandbox, with ``per_cluster[name]`` on top."""
    host = yaml.safe_load((ROOT / "inventories/sandbox/host_vars/sandbox.yml").read_text())
    common = yaml.safe_load((ROOT / "inventories/sandbox/group_vars/all.yml").read_text())
    hosts = {c.name: {**host, "sandbox_dir": str(c.sandbox.dir), **per_cluster.get(c.name, {})} for c in clusters}
    path = tmp_path / "fleet.yml"
    path.write_text(yaml.safe_dump({"all": {"vars": common}, "clusters": {"hosts": hosts}}, sort_keys=False))
    return path


def summary(stdout: str) -> str:
    """The fleet summary's lines, as printed (one string)."""
    text = " ".join(stdout.split())
    head = text.find("Fleet summary (")
    assert head >= 0, stdout[-3000:]
    return text[head:head + 2000]


def test_two_clusters_adopt_in_one_run(fleet, tmp_path):
    for c in fleet:
        c.unadopt()
    # tokens of earlier runs stay listed (revoked); count this run's
    before = {c.name: {t["id"] for t in c.tokens()} for c in fleet}
    report = tmp_path / "adopt.json"
    run = run_playbook("adopt-cluster.yml", "-i", str(inventory(fleet, tmp_path)), "-e", f"bcd_report_out={report}")
    assert run.returncode == 0, run.stdout[-4000:]
    assert {h: c["failed"] for h, c in recap(run.stdout).items()} == {"east": 0, "west": 0}

    for c in fleet:
        nodes = c.sandbox.gpu_node_names()
        assert len(nodes) == 2
        assert {n: c.reporting().get(n) for n in nodes} == {n: "adopting" for n in nodes}, c.name
        minted = [t for t in c.tokens() if t["id"] not in before[c.name]]
        assert len(minted) == 1 and minted[0]["revokedAt"], f"{c.name}: one token, revoked: {minted}"
        # "joined by this run" is the control plane's own count
        assert minted[0]["uses"] == 2, minted
        assert c.sandbox.kubectl("get", "secret", "-n", "bcd-system", "-o", "name").stdout.count("join") == 0

    lines = summary(run.stdout)
    for name in NAMES:
        assert f"{name} ok 1/1 2 of 2 selected node(s) report, 2 joined by this run" in lines, lines
    assert "2 cluster(s): all ok" in lines
    # the run's last line: its verdict
    assert run.stdout.rstrip().splitlines()[-1] == (
        "adopt-cluster: 2 of 2 clusters adopted: 4 of 4 selected nodes report to the control plane")

    doc = json.loads(report.read_text())
    assert doc["schema_version"] == 1 and all(c["report"]["schema_version"] == 1 for c in doc["clusters"])
    assert doc["playbook"] == "adopt-cluster" and doc["passed"] is True and doc["failed"] == []
    assert [c["cluster"] for c in doc["clusters"]] == list(NAMES)
    for c in doc["clusters"]:
        assert c["result"] == "ok" and c["tokens"] == {"minted": 1, "revoked": 1}
        assert c["nodes"] == {"selected": 2, "reporting": 2, "joined": 2}
        assert sorted(n["name"] for n in c["report"]["nodes"]) == ["gpu-node-1", "gpu-node-2"]
    keys = [c.cpvars["bcd_api_key"] for c in fleet]
    assert not find_in_text(run.stdout + run.stderr + report.read_text(), keys)

    # once more: nothing to do on either cluster, and the summary still says so
    again = run_playbook("adopt-cluster.yml", "-i", str(inventory(fleet, tmp_path)))
    assert again.returncode == 0, again.stdout[-3000:]
    lines = summary(again.stdout)
    for name in NAMES:
        assert f"{name} ok 0/0 2 of 2 selected node(s) report, 0 joined by this run" in lines, lines
    assert all(len(c.tokens()) == len(before[c.name]) + 1 for c in fleet), "no token minted the second time"


def image(pod: dict) -> str:
    return pod["spec"]["containers"][0]["image"]


def ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


def adopted(fleet, tmp_path) -> str:
    """Every cluster adopted on the inventory's image (unadopted first when a rollout moved it);
    returns that image."""
    start = yaml.safe_load((ROOT / "inventories/sandbox/host_vars/sandbox.yml").read_text())["bcd_image"]
    for c in fleet:
        if any(image(p) != start for p in c.pods().values()):
            c.unadopt()
    run = run_playbook("adopt-cluster.yml", "-i", str(inventory(fleet, tmp_path)))
    assert run.returncode == 0, run.stdout[-3000:]
    return start


@pytest.mark.long
def test_a_fleet_rollout_in_cluster_waves_rolls_back_the_cluster_that_fails(fleet, tmp_path):
    # east (the canary wave) rolls to a good digest; west's new pods run but never turn Ready
    start = adopted(fleet, tmp_path)
    report = tmp_path / "rollout.json"
    inv = inventory(fleet, tmp_path, east={"bcd_image": GOOD}, west={"bcd_image": DEAD})
    run = run_playbook("rollout.yml", "-i", str(inv), "-e", f"bcd_report_out={report}",
                       "-e", json.dumps({"bcd_rollout_cluster_waves": [1, "100%"], "bcd_rollout_gate_timeout": "20s"}))
    assert run.returncode != 0, run.stdout[-4000:]
    assert {h: c["failed"] for h, c in recap(run.stdout).items()} == {"east": 0, "west": 1}, run.stdout[-4000:]
    out = " ".join(run.stdout.split())
    assert "rollout on cluster west failed at" in out and "rolled back to" in out, out[-3000:]

    east, west = fleet
    assert {n: (image(p), ready(p)) for n, p in east.pods().items()} == {n: (GOOD, True) for n in east.sandbox.gpu_node_names()}
    assert {n: (image(p), ready(p)) for n, p in west.pods().items()} == {n: (start, True) for n in west.sandbox.gpu_node_names()}
    for c in fleet:
        states = c.reporting()
        assert all(states.get(n) in ("adopting", "ready") for n in c.sandbox.gpu_node_names()), (c.name, states)
        assert c.sandbox.kubectl("get", "lease", "-n", "bcd-system", "bcd-ansible-lock", check=False).returncode != 0

    lines = summary(run.stdout)
    assert "east ok 0/0 succeeded: rolled" in lines, lines
    assert "west failed 0/0 rolled_back: rollout" in lines and "2 cluster(s): 1 failed (west)" in lines, lines
    # the run's last line: its verdict, with the command that runs again on the failed cluster only
    verdict = run.stdout.rstrip().splitlines()[-1]
    assert verdict.startswith("rollout: 1 of 2 clusters rolled; FAILED: west; next: fix what failed on west (gpu-node-"), verdict
    assert verdict.endswith("), then ansible-playbook rollout.yml -l west again"), verdict

    doc = json.loads(report.read_text())
    assert doc["schema_version"] == 1 and all(c["report"]["schema_version"] == 1 for c in doc["clusters"])
    assert doc["playbook"] == "rollout" and doc["passed"] is False and doc["failed"] == ["west"]
    by_name = {c["cluster"]: c for c in doc["clusters"]}
    assert by_name["east"]["result"] == "ok" and by_name["east"]["report"]["result"] == "succeeded"
    assert by_name["east"]["nodes"]["rolled"] == 2
    assert by_name["west"]["result"] == "failed" and by_name["west"]["report"]["result"] == "rolled_back"
    assert by_name["west"]["failure"] and by_name["west"]["nodes"]["rolled"] == 0


@pytest.mark.long
def test_a_failed_canary_cluster_leaves_the_later_wave_untouched(fleet, tmp_path):
    # west first: its failure stops the wave of east, whose DaemonSet is never changed
    start = adopted(fleet, tmp_path)
    east = fleet[0]
    before = east.sandbox.kubectl("get", "daemonset", "-n", "bcd-system", "bcd", "-o", "jsonpath={.metadata.resourceVersion}").stdout
    inv = inventory(list(reversed(fleet)), tmp_path, east={"bcd_image": GOOD}, west={"bcd_image": DEAD})
    run = run_playbook("rollout.yml", "-i", str(inv),
                       "-e", json.dumps({"bcd_rollout_cluster_waves": [1, 1], "bcd_rollout_gate_timeout": "20s"}))
    assert run.returncode != 0
    assert {h: c["failed"] for h, c in recap(run.stdout).items()} == {"east": 1, "west": 1}, run.stdout[-4000:]
    lines = summary(run.stdout)
    # east never started: said so, not counted as failed (the run still fails)
    assert "east not started 0/0 not started: cluster(s) west of an earlier wave failed" in lines, lines
    assert "2 cluster(s): 1 failed (west), 1 not started (east)" in lines, lines
    after = east.sandbox.kubectl("get", "daemonset", "-n", "bcd-system", "bcd", "-o", "jsonpath={.metadata.resourceVersion}").stdout
    assert after == before
    assert {image(p) for c in fleet for p in c.pods().values()} == {start}

"""rollout.yml across clusters in waves (bcd_rollout_cluster_waves) on one sandbox: a second
inventory cluster whose kubeconfig does not exist always fails, so the waves' order decides
what runs. A failed wave stops every later one; clusters rolled before stay as they are.
(tests/integration/test_fleet.py rolls two real sandboxes, one of which fails its health gate.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT, recap, run_playbook

# Slow (several rollouts per test): make test-long.
pytestmark = [pytest.mark.sandbox, pytest.mark.long, pytest.mark.usefixtures("adopted")]


def cluster(sandbox, **overrides) -> dict:
    """The sandbox cluster's inventory variables, with ``overrides``."""
    host = yaml.safe_load((ROOT / "inventories/sandbox/host_vars/sandbox.yml").read_text())
    host["sandbox_dir"] = str(sandbox.dir)
    return {**host, **overrides}


def broken_inventory(sandbox, tmp_path: Path, *more: str) -> Path:
    """Cluster ``broken``: the sandbox's variables, but a kubeconfig that does not exist; then
    ``more`` clusters, each the sandbox again under another name."""
    hosts = {"broken": cluster(sandbox, bcd_kubeconfig=str(tmp_path / "no-such-kubeconfig"))}
    hosts.update({name: cluster(sandbox, bcd_cluster_name=name) for name in more})
    path = tmp_path / "broken.yml"
    path.write_text(yaml.safe_dump({"clusters": {"hosts": hosts}}))
    return path


def waves(*inventories: str, sizes=(1, "100%")) -> object:
    return run_playbook("rollout.yml", *[a for inv in inventories for a in ("-i", inv)],
                        "-e", json.dumps({"bcd_rollout_cluster_waves": list(sizes)}))


def test_a_failed_later_wave_leaves_the_canary_cluster_rolled(sandbox, tmp_path):
    run = waves("inventories/sandbox", str(broken_inventory(sandbox, tmp_path)))
    assert run.returncode != 0
    counts = recap(run.stdout)
    assert counts["sandbox"]["failed"] == 0 and counts["broken"]["failed"] == 1, run.stdout[-3000:]
    assert "fatal: [broken]" in run.stdout
    assert "nothing to do" in run.stdout or "unchanged" in run.stdout


def tasks_run_on(stdout: str, host: str) -> list[str]:
    """The names of the tasks that ran (ok, changed or failed) on ``host``."""
    names = []
    for block in stdout.split("TASK [")[1:]:
        title, _, body = block.partition("]")
        if any(f"{word}: [{host}]" in body for word in ("ok", "changed", "fatal")):
            names.append(title)
    return names


def test_a_failed_canary_cluster_stops_every_later_wave(sandbox, tmp_path):
    run = waves(str(broken_inventory(sandbox, tmp_path)), "inventories/sandbox")
    assert run.returncode != 0
    assert "fatal: [broken]" in run.stdout
    # the second wave never started: its cluster stopped at once, its failure noted for the
    # fleet summary, which fails it at the end
    ran = tasks_run_on(run.stdout, "sandbox")
    assert ran[0] == "Stop when a cluster of an earlier wave failed (already rolled clusters stay rolled)", ran
    assert all(t.startswith(("Stop when", "bcd.kubernetes.fleet :", "Note why", "Print the fleet summary")) for t in ran), ran
    assert recap(run.stdout)["sandbox"]["failed"] == 1
    # the summary says it never started, not that it failed
    flat = " ".join(run.stdout.split())
    assert "sandbox not started 0/0 not started: cluster(s) broken of an earlier wave failed" in flat, flat[-3000:]
    assert "2 cluster(s): 1 failed (broken), 1 not started (sandbox)" in flat, flat[-3000:]


def test_a_partly_failed_wave_stops_the_next_and_lists_what_rolled(sandbox, tmp_path):
    # waves: [sandbox], [broken, again], [last]
    run = waves("inventories/sandbox", str(broken_inventory(sandbox, tmp_path, "again", "last")), sizes=(1, 2, 1))
    assert run.returncode != 0
    counts = recap(run.stdout)
    assert counts["sandbox"]["failed"] == 0 and counts["again"]["failed"] == 0, run.stdout[-3000:]
    assert counts["broken"]["failed"] == 1 and counts["last"]["failed"] == 1
    assert "not started: cluster(s) broken of an earlier wave failed (bcd_rollout_cluster_waves); rolled in earlier " \
           "waves: sandbox, again" in " ".join(run.stdout.split()), run.stdout[-3000:]


def test_waves_are_validated(tmp_path):
    run = run_playbook("rollout.yml", "-e", json.dumps({"bcd_rollout_cluster_waves": [0]}))
    assert run.returncode != 0
    assert "INVALID_CONFIG: bcd_rollout_cluster_waves: 0 must be at least 1" in run.stdout, run.stdout[-2000:]
    # values Ansible's own serial cannot read: refused by the same validation, never a traceback
    for waves in ("abc", ["10: x"], {"10": "x"}):
        run = run_playbook("rollout.yml", "-e", json.dumps({"bcd_rollout_cluster_waves": waves}))
        out = run.stdout + run.stderr
        assert run.returncode != 0 and "Traceback" not in out and "Unexpected Exception" not in out, out[-2000:]
        assert "INVALID_CONFIG: bcd_rollout_cluster_waves" in run.stdout, (waves, run.stdout[-2000:])

"""A rollout's gates are never silent: a gate that waits longer than 10 s (here its soak) prints a
line at least every 30 s saying which stage, how many nodes are healthy or how far the soak is,
the time waited, the limit and the variable that sets it. adopt-cluster.yml's staged rollout
runs the same module, so it says the same."""

from __future__ import annotations

import pytest

from tests.helpers import run_playbook
from tests.integration.test_progress import _assert_every_30s, _waited

# a 40 s soak in each of two stages: over a minute
pytestmark = [pytest.mark.sandbox, pytest.mark.long, pytest.mark.usefixtures("adopted")]

REPO = "registry.example.com/better-compute/bcd"
DIGEST = f"{REPO}:0.7.0@sha256:{'a7' * 32}"


def test_each_gate_of_a_rollout_prints_its_progress_at_least_every_30s(sandbox, reliability):
    reliability.describe("Slips and races", "rollout.yml in 2 stages with a 40 s soak each: the gates' progress")
    reliability.runs = 1
    run = run_playbook("rollout.yml", "-e", f"bcd_image={DIGEST}", "-e", "bcd_rollout_canary=1",
                       "-e", "bcd_rollout_max_unavailable=100%", "-e", "bcd_rollout_soak=40s")
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    # the digest is named short, as docker and kubectl name it (the report has it in full)
    assert "a7" * 32 not in "\n".join(line for line in out.splitlines() if "rollout stage" in line)
    for stage, nodes in ((1, 1), (2, 2)):
        line = (rf"sandbox: rollout stage {stage} of 2 \([^,]+, {nodes} node\(s\) to bcd:0\.7\.0@sha256:(a7){{6}}\): "
                # the gate judges every node rolled so far
                r"(\d+ of \d+ node\(s\) healthy|all \d+ node\(s\) healthy, soaking \(\d+s of 40s, bcd_rollout_soak\)) "
                r"\(waited (?P<waited>\d+)s of \d+s; bcd_rollout_gate_timeout sets the limit\)")
        waited = _waited(out, line)
        _assert_every_30s(waited, 40, out)
        reliability.figures[f"stage {stage}: progress lines at (s)"] = waited
    reliability.result = "each gate printed a line within 15 s, then at least every 30 s"

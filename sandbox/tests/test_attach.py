"""`python -m sandbox attach`: the sandbox's simulated part on an existing cluster (molecule `kind`).

There is no kind here, so the existing cluster is a sandbox whose own KWOK and emulator are
stopped; attach must bring simulated nodes and an emulator back on it, and adopt-cluster.yml
must adopt it through inventories/sandbox.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT, recap, run_playbook

pytestmark = [pytest.mark.sandbox, pytest.mark.long]


def test_attach_to_an_existing_cluster_and_adopt_it(tmp_path):
    from sandbox import proc
    from sandbox.api import Sandbox
    from sandbox.control_plane import service

    base = Sandbox(tmp_path / "cluster").up(nodes=2)
    attached = tmp_path / "attached"
    try:
        proc.stop(base.dir, "kwok")
        service.stop(base.dir)
        env = {"SANDBOX_DIR": str(attached)}
        run = subprocess.run([sys.executable, "-m", "sandbox", "attach", "--kubeconfig", str(base.kubeconfig), "--nodes", "2"],
                             cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=600,
                             check=False)
        assert run.returncode == 0, run.stderr
        status = subprocess.run([sys.executable, "-m", "sandbox", "status"], cwd=ROOT,
                                env={**os.environ, **env}, capture_output=True, text=True, check=False)
        assert status.returncode == 0 and "nodes: 3 (3 Ready; 2 GPU, 1 CPU-only)" in status.stdout, status.stdout
        adopt = run_playbook("adopt-cluster.yml", env=env)
        assert adopt.returncode == 0, adopt.stdout[-3000:]
        assert "2 of 2 selected nodes report" in adopt.stdout
        again = run_playbook("adopt-cluster.yml", env=env)
        assert again.returncode == 0 and recap(again.stdout)["sandbox"]["changed"] == 0
    finally:
        subprocess.run([sys.executable, "-m", "sandbox", "down"], cwd=ROOT,
                       env={**os.environ, "SANDBOX_DIR": str(attached)}, check=False)
        base.down()

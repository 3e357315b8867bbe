"""The stdout callback concise prints the run's verdict last, after the recap (roles/fleet sets
it); a run that failed before its last play ends with a line that says so. No cluster needed:
render.yml works offline, and audit.yml refuses bcd_render_out before it reaches one."""

from __future__ import annotations

import sys

from tests.helpers import run_playbook

LOCAL = ("-e", f"ansible_python_interpreter={sys.executable}")


def inventory(tmp_path):
    path = tmp_path / "hosts.yml"
    path.write_text("clusters:\n  hosts:\n    c1: {ansible_connection: local}\n")
    return ("-i", str(path))


def test_a_failure_before_the_last_play_ends_with_a_line_naming_the_host(tmp_path):
    run = run_playbook("audit.yml", *inventory(tmp_path), *LOCAL, "-e", f"bcd_render_out={tmp_path / 'x.json'}")
    assert run.returncode != 0
    lines = run.stdout.rstrip().splitlines()
    assert lines[-1] == "audit: FAILED on c1 before its summary; next: fix the error above, then ansible-playbook audit.yml again"
    assert any(line.startswith("PLAY RECAP") for line in lines[:-1])


def test_the_verdict_is_printed_once_and_last(tmp_path):
    # render.yml needs the control plane's variables only to validate them: a failed render
    run = run_playbook("render.yml", *inventory(tmp_path), *LOCAL, "-e", f"bcd_render_out={tmp_path / 'r.json'}")
    lines = run.stdout.rstrip().splitlines()
    verdict = lines[-1]
    assert verdict.startswith("render: cluster c1 NOT rendered; next: fix "), verdict
    assert verdict.endswith(", then ansible-playbook render.yml again"), verdict
    assert run.stdout.count(verdict) == 1, "printed once: after the recap, not also where its task ran"
    assert any(line.startswith("PLAY RECAP") for line in lines[-4:-1]), lines[-6:]


def test_a_render_ends_with_where_it_wrote(tmp_path):
    dest = tmp_path / "r.json"
    run = run_playbook("render.yml", "-i", "inventories/example", "-l", "gpu-kubeadm", "-e", f"bcd_render_out={dest}")
    assert run.returncode == 0, run.stdout[-3000:]
    assert dest.exists() and run.stdout.rstrip().splitlines()[-1] == f"render: cluster gpu-kubeadm rendered to {dest}"

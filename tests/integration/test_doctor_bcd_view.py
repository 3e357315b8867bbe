"""doctor.yml on the adopted sandbox: bcd's own view of each node (its state and conditions from
nodes.list, seed: GPU isolation and The reaper) in the same per-node table and report as
Ansible's verdicts. The condition is set through the emulator's admin endpoint, as bcd would
report it."""

from __future__ import annotations

import json

import pytest

from sandbox.control_plane.admin import Admin, AdminError
from tests.helpers import run_playbook

pytestmark = pytest.mark.sandbox

MESSAGE = "runtime nvidia in /etc/containerd/config.toml accepts NVIDIA_VISIBLE_DEVICES from unprivileged pods"


def doctor(tmp_path):
    report = tmp_path / "report.json"
    run = run_playbook("doctor.yml", "-e", f"bcd_report_out={report}")
    return run, (json.loads(report.read_text()) if report.exists() else None)


@pytest.mark.usefixtures("adopted")
def test_doctor_shows_a_condition_bcd_reports_for_one_node(sandbox, tmp_path):
    admin = Admin.for_sandbox(sandbox.dir)
    name, other = sandbox.gpu_node_names()[:2]
    out = admin.set_condition(name, "ForeignGpuExposure", "True", reason="NvidiaRuntime", message=MESSAGE)
    assert out["changed"] is True
    try:
        run, data = doctor(tmp_path)
        # bcd's view is shown, not judged: the gate is Ansible's own (the adopted sandbox passes it)
        assert run.returncode == 0, run.stdout[-3000:]
        by = {n["name"]: n for n in data["nodes"]}
        view = by[name]["bcd"]
        assert view["id"].startswith("node_") and view["state"] in ("adopting", "ready")
        assert {"type": "ForeignGpuExposure", "status": "True", "reason": "NvidiaRuntime", "message": MESSAGE} in view["conditions"]
        assert all(c["type"] != "ForeignGpuExposure" for c in by[other]["bcd"]["conditions"])
        assert f"condition ForeignGpuExposure=True (NvidiaRuntime: {MESSAGE})" in run.stdout
        # the same entry carries Ansible's verdict and readiness (no node files here: unknown)
        assert by[name]["verdict"] == "isolated" and by[name]["ready"] == "unknown"
    finally:
        admin.set_condition(name, "ForeignGpuExposure", None)
    run, data = doctor(tmp_path)
    assert all(c["type"] != "ForeignGpuExposure" for n in data["nodes"] for c in n["bcd"]["conditions"])


def test_the_admin_endpoint_checks_what_it_is_given(sandbox):
    admin = Admin.for_sandbox(sandbox.dir)
    with pytest.raises(AdminError, match="404"):
        admin.set_condition("no-such-node", "ForeignGpuExposure", "True")
    with pytest.raises(AdminError, match="status: must be"):
        admin.set_condition(sandbox.gpu_node_names()[0], "ForeignGpuExposure", "yes")
    with pytest.raises(AdminError, match="400"):
        admin.request("POST", "/nodes/conditions", {"hostname": "x"})


@pytest.mark.usefixtures("adopted")
def test_a_runtime_class_the_cluster_lacks_fails_the_gate(tmp_path):
    """bcd's pod names a RuntimeClass the cluster does not have: the API server would refuse it,
    so every node is not-ready and the gate fails, whatever the isolation verdicts."""
    report = tmp_path / "report.json"
    run = run_playbook("doctor.yml", "-e", f"bcd_report_out={report}", "-e", "bcd_nvidia_runtime_class=no-such-class")
    assert run.returncode != 0 and "is not-ready" in run.stdout, run.stdout[-3000:]
    data = json.loads(report.read_text())
    assert not data["passed"] and data["ready_summary"]["not-ready"] == len(data["nodes"])
    for n in data["nodes"]:
        assert n["verdict"] == "isolated" and n["ready"] == "not-ready"
        assert "RuntimeClass/no-such-class" in {f["where"] for f in n["readiness"]}

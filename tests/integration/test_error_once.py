"""A failure is printed once: by the task that failed, not again by a report or a final `fail`
that repeats its message (ansible-core itself shows a failed task's message twice, in its
[ERROR] line and its result; both belong to that one task). The run's verdict, its last line,
restates the reason cut short, as what to fix next."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest

from tests.helpers import run_playbook

pytestmark = [pytest.mark.sandbox, pytest.mark.usefixtures("adopted")]

REPO = "registry.example.com/better-compute/bcd"
OTHER_IMAGE = f"{REPO}:0.7.0@sha256:{'a7' * 32}"
LEASE = "bcd-ansible-lock"


def without_verdict(run) -> tuple[str, str]:
    """(the output but the run's last line, that line): the verdict restates the reason, cut
    short, as the next step's (roles/fleet); every other line says it once."""
    body, _, verdict = run.stdout.rstrip().rpartition("\n")
    return body + "\n" + run.stderr, verdict


def tasks_saying(out: str, text: str) -> list[str]:
    """The banners of the task sections of ``out`` whose output holds ``text`` (whitespace folded)."""
    sections = re.split(r"\n(?=(?:TASK|RUNNING HANDLER|PLAY RECAP|PLAY) )", out)
    needle = " ".join(text.split())
    return [s.splitlines()[0] for s in sections if needle in " ".join(s.split())]


def test_a_lock_held_elsewhere_is_said_once_by_rollout(sandbox, tmp_path):
    holder = "ops@scheduler-3 pid=4343 run=20260102T000000Z-2"
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    doc = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": LEASE, "namespace": "bcd-system"},
           "spec": {"holderIdentity": holder, "leaseDurationSeconds": 900, "acquireTime": stamp, "renewTime": stamp}}
    sandbox.kubectl("delete", "lease", "-n", "bcd-system", LEASE, "--ignore-not-found")
    sandbox.kubectl("create", "-f", "-", input=json.dumps(doc))
    report = tmp_path / "rollout.json"
    try:
        run = run_playbook("rollout.yml", "-e", f"bcd_image={OTHER_IMAGE}", "-e", f"bcd_report_out={report}")
    finally:
        sandbox.kubectl("delete", "lease", "-n", "bcd-system", LEASE, "--ignore-not-found")
    out, verdict = without_verdict(run)
    assert verdict.startswith("rollout: cluster sandbox rollout not started") and "wait for the run" in verdict, verdict
    assert run.returncode != 0, out[-3000:]
    said = tasks_saying(out, f"locked by {holder}")
    assert len(said) == 1, said
    assert "Take the cluster's lock" in said[0]
    assert "rollout not started: another run holds the cluster lock (the error is above)" in " ".join(out.split())
    summary = json.loads(report.read_text())
    assert summary["result"] == "locked" and f"locked by {holder}" in summary["headline"], "the report keeps it whole"


def test_an_audit_that_cannot_run_says_why_once(sandbox, tmp_path):
    from sandbox.control_plane.admin import Admin

    admin = Admin.for_sandbox(sandbox.dir)
    admin.set_faults({"errorRate": 1.0, "errorStatus": 500})
    report = tmp_path / "audit.json"
    try:
        run = run_playbook("audit.yml", "-e", f"bcd_report_out={report}")
    finally:
        admin.clear_faults()
    out, verdict = without_verdict(run)
    assert verdict.startswith("audit: cluster sandbox: the audit could not run"), verdict
    assert run.returncode != 0, out[-3000:]
    said = tasks_saying(out, "injected fault: INTERNAL")
    assert len(said) == 1, said
    flat = " ".join(out.split())
    assert "the audit could not run (the error is above" in flat
    # its closing line names the connection, as every playbook's does
    assert f"every output records it; cluster: kubeconfig {sandbox.kubeconfig}, context " in flat, flat[-2000:]
    assert "injected fault: INTERNAL" in report.read_text(), "the report records it"

"""Long waits are never silent: a control-plane call retried through a burst of 503 answers, and
another run's lock on the cluster, each print a line at least every 30 s saying what is waited
for, how far it is, the limit and the variable that sets it."""

from __future__ import annotations

import datetime as dt
import json
import re
import threading

import pytest

from tests.helpers import run_playbook

pytestmark = [pytest.mark.sandbox, pytest.mark.usefixtures("adopted")]

LEASE = "bcd-ansible-lock"


def _waited(text: str, pattern: str) -> list[int]:
    return [int(m.group("waited")) for m in re.finditer(pattern, text)]


def _assert_every_30s(waited: list[int], until: float, text: str) -> None:
    """A first line once the wait passed 10 s (with a little slack for the poll), then one at
    least every 30 s until ``until`` (seconds into the wait)."""
    assert waited, text[-4000:]
    assert waited[0] <= 15, waited
    gaps = [b - a for a, b in zip(waited, [*waited[1:], until], strict=True)]
    assert max(gaps) <= 30, (waited, gaps)


@pytest.mark.long  # a 50 s burst, then the run: over a minute
def test_a_burst_of_503_answers_prints_each_retry_with_its_next_attempt_and_limit(sandbox):
    """Every control-plane request answers 503 for 50 s; the first call of the run retries
    through it (bcd_control_plane_timeout 90) and the run then completes."""
    from sandbox.control_plane.admin import Admin

    admin = Admin.for_sandbox(sandbox.dir)
    admin.set_faults({"errorRate": 1.0, "errorStatus": 503})
    timer = threading.Timer(50, admin.clear_faults)
    timer.start()
    try:
        run = run_playbook("adopt-cluster.yml", "-e", "bcd_control_plane_timeout=90")
    finally:
        timer.cancel()
        admin.clear_faults()
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    line = (r"sandbox: control plane (?P<proc>\S+): (still retrying: )?attempt \d+ failed \(UNAVAILABLE HTTP 503[^\n]*?\); "
            r"(next attempt at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ|attempt \d+ sent at \S+, waiting for its answer) "
            r"\(waited (?P<waited>\d+)s of 90s; bcd_control_plane_timeout sets the limit\)")
    waited = _waited(out, line)
    answered = re.search(r"sandbox: control plane \S+: answered at attempt \d+ \(after (\d+)s of retries\)", out)
    assert answered, out[-4000:]
    _assert_every_30s(waited, int(answered.group(1)), out)
    assert int(answered.group(1)) > 30, answered.group(0)  # the burst outlasted 30 s of retries


def _lease(sandbox, holder: str, seconds: int) -> None:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    doc = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": LEASE, "namespace": "bcd-system"},
           "spec": {"holderIdentity": holder, "leaseDurationSeconds": seconds, "acquireTime": stamp, "renewTime": stamp}}
    sandbox.kubectl("delete", "lease", "-n", "bcd-system", LEASE, "--ignore-not-found")
    sandbox.kubectl("create", "-f", "-", input=json.dumps(doc))


@pytest.mark.long  # slow: make test-long keeps make test within its budget
def test_a_lock_another_run_holds_is_waited_for_with_progress(sandbox):
    """Another live run holds the lock; adopt-cluster.yml (with a change to make) waits for it up
    to bcd_lock_ttl (30 s here), saying so at least every 30 s, then refuses naming the holder."""
    holder = "ops@scheduler-2 pid=4242 run=20260101T000000Z-1"
    _lease(sandbox, holder, 600)
    try:
        run = run_playbook("adopt-cluster.yml", "-e", "bcd_log_level=debug", "-e", "bcd_lock_ttl=30")
    finally:
        sandbox.kubectl("delete", "lease", "-n", "bcd-system", LEASE, "--ignore-not-found")
    out = run.stdout + run.stderr
    assert run.returncode != 0, out[-4000:]
    line = (rf"sandbox: waiting for Lease bcd-system/{LEASE}, which another bcd-ansible run holds: {re.escape(holder)} "
            r"\(since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ, until \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\) "
            r"\(waited (?P<waited>\d+)s of 30s; bcd_lock_ttl sets the limit\)")
    waited = _waited(out, line)
    _assert_every_30s(waited, 30, out)
    assert f"locked by {holder}" in " ".join(out.split())

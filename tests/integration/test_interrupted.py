"""A run interrupted during the node wait (Ctrl-C: SIGINT; or SIGTERM, as a CI job's timeout sends)
cleans up as it exits: Ansible runs no always: section on an interruption, so the left_behind
callback revokes the token, deletes the Secret and releases the lock. What it cannot clean up it
names: the live join token (id, the uses the control plane says it has left, expiry), its
Secret, the lock and until when, the one command that cleans them up, and, last, the cause.

A node whose bcd stops reporting once joined (the emulator's muteReports, with an offline grace of
1 s) holds the node wait open.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time

import pytest

from tests.helpers import ROOT, VENV_BIN, ansible_env, left_in_tmpdir, run_playbook

# each adopts the cluster from scratch twice: a minute or more on the shared sandbox
pytestmark = [pytest.mark.sandbox, pytest.mark.long, pytest.mark.usefixtures("fresh")]

LEASE = "bcd-ansible-lock"


@pytest.fixture
def fresh(sandbox, cp, cpvars):
    """Each test starts from a cluster not adopted yet (as the unadopted fixture leaves it)."""
    from sandbox.control_plane.admin import Admin

    Admin.for_sandbox(sandbox.dir).clear_faults()
    sandbox.unadopt(cp, cpvars["bcd_tenant"], cpvars["bcd_pool"])
    sandbox.kubectl("delete", "lease", "-n", "bcd-system", LEASE, "--ignore-not-found", check=False)


def live_tokens(cp, cpvars) -> list[dict]:
    return [t for t in cp.list_tokens(cpvars["bcd_tenant"], cpvars["bcd_pool"]) if not t.get("revokedAt")]


def interrupt_node_wait(sandbox, signum: int, log, faults: dict | None = None, tmpdir=None) -> tuple[int, float]:
    """Run adopt-cluster.yml (with ``tmpdir`` as its TMPDIR), send ``signum`` during the node wait
    (``faults`` set then), wait for its exit; returns its exit code and the seconds from the
    signal to the exit."""
    from sandbox.control_plane.admin import Admin

    admin = Admin.for_sandbox(sandbox.dir)
    admin.set_faults({"muteReports": ["gpu-node-1"], "offlineGraceSeconds": 1})
    proc = None
    try:
        with log.open("w") as fh:
            proc = subprocess.Popen([str(VENV_BIN / "ansible-playbook"), "adopt-cluster.yml"], cwd=str(ROOT),
                                    env=ansible_env(**({"TMPDIR": str(tmpdir)} if tmpdir else {})),
                                    stdout=fh, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 300
        # the node wait's first progress line (a task's banner prints with its first result)
        while "nodes report to the control plane (waited" not in log.read_text():
            assert proc.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(0.5)
        assert proc.poll() is None, log.read_text()[-4000:]
        if faults:
            admin.set_faults({"muteReports": ["gpu-node-1"], "offlineGraceSeconds": 1, **faults})
        proc.send_signal(signum)
        sent = time.monotonic()
        rc = proc.wait(timeout=120)
        return rc, time.monotonic() - sent
    finally:
        admin.clear_faults()
        if proc is not None and proc.poll() is None:  # a failed assert: no run outlives the test
            proc.kill()
            proc.wait(timeout=30)


def minted(out: str) -> tuple[str, str, str]:
    found = re.search(r"Minted join token (\S+) for (\d+) node\(s\), expiring at (\S+),", " ".join(out.split()))
    assert found, out[-4000:]
    return found.groups()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_an_interrupted_node_wait_cleans_up_what_it_holds(sandbox, cp, cpvars, tmp_path, signum, reliability):
    """Ansible runs no always: on an interruption; the left_behind callback cleans up as
    ansible-playbook exits: the token is revoked, the Secret deleted, the lock released."""
    reliability.describe("Slips and races", f"adopt-cluster.yml sent {signal.Signals(signum).name} during the node wait")
    reliability.runs = 2  # the interrupted run, and the next one that finds nothing left to clean up
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    rc, ended = interrupt_node_wait(sandbox, signum, tmp_path / "adopt.log", tmpdir=tmpdir)
    out = (tmp_path / "adopt.log").read_text()
    assert rc != 0, out[-4000:]
    assert "Traceback" not in out, out[-4000:]
    # the workers the signal ended left their copies of the kubeconfig's key: the run took them
    assert left_in_tmpdir(tmpdir) == []
    token, _uses, _expires = minted(out)
    # what the lines say is done is done, on the control plane and the cluster
    [revoked] = [t for t in cp.list_tokens(cpvars["bcd_tenant"], cpvars["bcd_pool"]) if t["id"] == token]
    assert revoked.get("revokedAt"), revoked
    assert live_tokens(cp, cpvars) == []
    assert sandbox.kubectl("get", "secret", "-n", "bcd-system", "bcd-join", check=False).returncode != 0
    assert sandbox.kubectl("get", "lease", "-n", "bcd-system", LEASE, check=False).returncode != 0
    last = out.strip().splitlines()[-5:]
    text = "\n".join(last)
    name = "SIGINT (Ctrl-C)" if signum == signal.SIGINT else "SIGTERM"
    assert f"sandbox: join token {token} revoked" in text, text
    assert "sandbox: Secret bcd-system/bcd-join deleted" in text, text
    assert f"sandbox: the lock Lease bcd-system/{LEASE} released" in text, text
    assert f"interrupted by {name} during \"Wait for every selected node to report" in last[-1], last[-1]
    assert "nothing of this run is left" in last[-1], last[-1]
    assert "left behind" not in text

    again = run_playbook("adopt-cluster.yml")
    flat = " ".join((again.stdout + again.stderr).split())
    assert again.returncode == 0, flat[-4000:]
    assert "took over Lease" not in flat and "stale token(s)" not in flat, flat[-4000:]
    reliability.result = "the callback revoked the token, deleted the Secret and released the lock as the run exited"
    reliability.figures.update({"exit": rc, "seconds from the signal to the exit": round(ended, 1)})


def test_an_interrupted_run_whose_revocation_fails_names_the_token_and_its_true_uses_left(sandbox, cp, cpvars, tmp_path,
                                                                                          reliability):
    """SIGINT during the node wait while every revocation answers 503: the Secret is deleted and
    the lock released; the last lines name the token as live with the uses the control plane
    says it has left, its expiry, and the command; the last line keeps the cause. The next run
    revokes it."""
    reliability.describe("Slips and races", "adopt-cluster.yml sent SIGINT during the node wait, every revocation "
                                            "answering 503, then run again")
    reliability.runs = 2
    faults = {"errorRate": 1.0, "errorStatus": 503, "procedures": ["joinTokens.revoke"]}
    rc, _ended = interrupt_node_wait(sandbox, signal.SIGINT, tmp_path / "adopt.log", faults)
    out = (tmp_path / "adopt.log").read_text()
    assert rc != 0, out[-4000:]
    token, _uses, expires = minted(out)
    [live] = live_tokens(cp, cpvars)
    assert live["id"] == token
    left = live["maxUses"] - (live.get("uses") or 0)
    assert sandbox.kubectl("get", "secret", "-n", "bcd-system", "bcd-join", check=False).returncode != 0
    assert sandbox.kubectl("get", "lease", "-n", "bcd-system", LEASE, check=False).returncode != 0
    last = out.strip().splitlines()[-4:]
    text = "\n".join(last)
    assert f"join token {token} is still live: {left} of {live['maxUses']} use(s) left, until {expires}" in text, text
    assert "Secret bcd-system/bcd-join holds it" not in text
    assert "is held until" not in text, text
    assert "`ansible-playbook adopt-cluster.yml` cleans them up" in last[-1]
    assert 'interrupted by SIGINT (Ctrl-C) during "Wait for every selected node to report' in last[-1], last[-1]
    assert f"FAILED: revoking join token {token}" in out

    again = run_playbook("adopt-cluster.yml")
    flat = " ".join((again.stdout + again.stderr).split())
    assert again.returncode == 0, flat[-4000:]
    assert token not in [t["id"] for t in live_tokens(cp, cpvars)]
    reliability.result = (f"the Secret deleted and the lock released; the token named live with {left} of "
                          f"{live['maxUses']} use(s) left (the control plane's count); the next run revoked it")
    reliability.figures["exit"] = rc


def test_a_token_whose_revocation_fails_is_named_with_its_uses_and_time_left_and_the_first_cause_last(sandbox, cp, cpvars,
                                                                                                       reliability):
    """gpu-node-3's join is refused (the first cause: the node wait fails), then every revocation
    answers 503: the failure says the token stays usable (uses left, time left), and the last
    line names the token and keeps the first cause. The next run revokes it."""
    from sandbox.control_plane.admin import Admin

    reliability.describe("Slips and races", "a node's join refused, then every revocation answers 503")
    reliability.runs = 2
    admin = Admin.for_sandbox(sandbox.dir)
    admin.set_faults({"refuseJoin": {"gpu-node-3": "maintenance"}, "errorRate": 1.0, "errorStatus": 503,
                      "procedures": ["joinTokens.revoke"]})
    try:
        run = run_playbook("adopt-cluster.yml", "-e", "bcd_control_plane_timeout=5", "-e", "bcd_join_timeout=60")
    finally:
        admin.clear_faults()
    out = run.stdout + run.stderr
    flat = " ".join(out.split())
    assert run.returncode != 0, flat[-4000:]
    [token] = [t["id"] for t in live_tokens(cp, cpvars)]
    assert re.search(rf"revoking token {token}: .*UNAVAILABLE.*; it stays usable to join a node: 1 of 3 use\(s\) left, "
                     r"until \S+ \(\d+ h \d+ min left\), when it lapses", flat), flat[-4000:]
    last = run.stdout.strip().splitlines()[-1]  # stderr's warnings come before it in a terminal
    assert f"token {token} (until" in last and "gpu-node-3" in last and "Refused: maintenance" in last, last
    assert "`ansible-playbook adopt-cluster.yml` cleans them up" in last

    again = run_playbook("adopt-cluster.yml")
    assert again.returncode == 0, again.stdout[-4000:]
    assert token not in [t["id"] for t in live_tokens(cp, cpvars)]
    reliability.result = ("failed naming the token as usable (1 of 3 uses, time left); the last line kept the first "
                          "cause; the next run revoked it")
    reliability.figures["exit"] = run.returncode

"""A run interrupted during the node wait (Ctrl-C: SIGINT; or SIGTERM, as a CI job's timeout sends)
ends naming what it leaves: the live join token (id, uses left, expiry), its Secret, the lock and
until when, the one command that cleans them up, and, last, the cause. Ansible runs no always:
section on an interruption; the next run cleans up, taking over at once the lock whose process
on this host is gone.

A node whose bcd stops reporting once joined (the emulator's muteReports, with an offline grace of
1 s) holds the node wait open.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time

import pytest

from tests.helpers import ROOT, VENV_BIN, ansible_env, run_playbook

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


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_an_interrupted_node_wait_names_what_it_leaves_and_the_next_run_cleans_it_up(sandbox, cp, cpvars, tmp_path,
                                                                                    signum, reliability):
    from sandbox.control_plane.admin import Admin

    reliability.describe("Slips and races", f"adopt-cluster.yml sent {signal.Signals(signum).name} during the node wait, "
                                            "then run again")
    reliability.runs = 2
    admin = Admin.for_sandbox(sandbox.dir)
    admin.set_faults({"muteReports": ["gpu-node-1"], "offlineGraceSeconds": 1})
    log = tmp_path / "adopt.log"
    try:
        with log.open("w") as fh:
            proc = subprocess.Popen([str(VENV_BIN / "ansible-playbook"), "adopt-cluster.yml"], cwd=str(ROOT),
                                    env=ansible_env(), stdout=fh, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 300
        # the node wait's first progress line (a task's banner prints with its first result)
        while "nodes report to the control plane (waited" not in log.read_text():
            assert proc.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(0.5)
        assert proc.poll() is None, log.read_text()[-4000:]
        proc.send_signal(signum)
        sent = time.monotonic()
        rc = proc.wait(timeout=120)
        ended = time.monotonic() - sent
    finally:
        admin.clear_faults()
    out = log.read_text()
    assert rc != 0, out[-4000:]
    minted = re.search(r"Minted join token (\S+) for (\d+) node\(s\), expiring at (\S+),", " ".join(out.split()))
    assert minted, out[-4000:]
    token, uses, expires = minted.groups()
    assert [t["id"] for t in live_tokens(cp, cpvars)] == [token]
    last = out.strip().splitlines()[-6:]
    text = "\n".join(last)
    name = "SIGINT (Ctrl-C)" if signum == signal.SIGINT else "SIGTERM"
    assert f"join token {token} is still live: at most {uses} use(s) left, until {expires}" in text, out[-4000:]
    assert "Secret bcd-system/bcd-join holds it, until the next run deletes it" in text
    assert re.search(rf"the lock Lease bcd-system/{LEASE} \(\S+@\S+ pid={proc.pid} run=\S+\) is held until \S+Z", text), text
    assert "`ansible-playbook adopt-cluster.yml` cleans them up" in last[-1]
    assert f"interrupted by {name} during \"Wait for every selected node to report" in last[-1], last[-1]
    # what the lines say is there is there
    assert sandbox.kubectl("get", "secret", "-n", "bcd-system", "bcd-join", check=False).returncode == 0
    assert sandbox.kubectl("get", "lease", "-n", "bcd-system", LEASE, check=False).returncode == 0

    again = run_playbook("adopt-cluster.yml")
    flat = " ".join((again.stdout + again.stderr).split())
    assert again.returncode == 0, flat[-4000:]
    assert f"took over Lease bcd-system/{LEASE}" in flat and "its process is gone" in flat, flat[-4000:]
    assert token not in [t["id"] for t in live_tokens(cp, cpvars)]
    assert sandbox.kubectl("get", "secret", "-n", "bcd-system", "bcd-join", check=False).returncode != 0
    assert sandbox.kubectl("get", "lease", "-n", "bcd-system", LEASE, check=False).returncode != 0
    assert "this run left behind" not in flat
    reliability.result = ("the last lines named the live token (uses, expiry), its Secret, the lock and the command; "
                          "the next run revoked it, deleted the Secret and took the dead run's lock over at once")
    reliability.figures.update({"exit": rc, "seconds from the signal to the exit": round(ended, 1),
                                "lines naming what was left": sum("left" in line or "still live" in line for line in last)})


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

"""Two runs on one cluster at once: adopt-cluster.yml and rollout.yml to a new digest, in both
orders. Whatever the order, a digest the rollout rolled stays: adopt judges the image (and the
fleet, and the template) again from a read under the cluster's lock, and refuses rather than roll
the fleet back to the inventory's image. The exits say which run did what.

adopt-cluster.yml needs work to do to reach the lock: a Secret an interrupted earlier run left
(the join Secret) gives it that without changing the DaemonSet.
"""

from __future__ import annotations

import datetime as dt
import getpass
import json
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT, VENV_BIN, ansible_env

# each runs two playbooks, one of them a rollout of every node: minutes on the shared sandbox
pytestmark = [pytest.mark.sandbox, pytest.mark.long, pytest.mark.usefixtures("adopted")]

REPO = "registry.example.com/better-compute/bcd"
NEW = [f"{REPO}:0.5.0@sha256:{'e5' * 32}", f"{REPO}:0.6.0@sha256:{'f6' * 32}"]
LEASE = "bcd-ansible-lock"
# a canary of one node, then the rest: quick, and a plan with a canary left
QUICK = ["-e", "bcd_rollout_canary=1", "-e", "bcd_rollout_max_unavailable=100%"]


def inventory_image() -> str:
    return yaml.safe_load((ROOT / "inventories" / "sandbox" / "host_vars" / "sandbox.yml").read_text())["bcd_image"]


def kget(sandbox, *args) -> dict:
    return json.loads(sandbox.kubectl("get", *args, "-o", "json").stdout)


def fleet_images(sandbox) -> tuple[str, set[str]]:
    """The DaemonSet's image and the images of its live pods."""
    ds = kget(sandbox, "daemonset", "-n", "bcd-system", "bcd")
    pods = kget(sandbox, "pods", "-n", "bcd-system", "-l", "app.kubernetes.io/name=bcd")["items"]
    return (ds["spec"]["template"]["spec"]["containers"][0]["image"],
            {p["spec"]["containers"][0]["image"] for p in pods if not p["metadata"].get("deletionTimestamp")})


def leftover_secret(sandbox) -> None:
    """The join Secret an interrupted run left behind: adopt-cluster.yml has work to do."""
    sandbox.kubectl("delete", "secret", "-n", "bcd-system", "bcd-join", "--ignore-not-found")
    sandbox.kubectl("create", "secret", "generic", "-n", "bcd-system", "bcd-join", "--from-literal=token=left-behind")
    sandbox.kubectl("label", "secret", "-n", "bcd-system", "bcd-join", "app.kubernetes.io/managed-by=bcd-ansible")


def lease(sandbox, holder: str) -> None:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    doc = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": LEASE, "namespace": "bcd-system"},
           "spec": {"holderIdentity": holder, "leaseDurationSeconds": 600, "acquireTime": stamp, "renewTime": stamp}}
    sandbox.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(doc))


class Run:
    """ansible-playbook in the background, its output in a file (read while it runs)."""

    def __init__(self, tmp_path: Path, name: str, playbook: str, *args: str):
        self.out = tmp_path / f"{name}.log"
        with self.out.open("w") as fh:
            self.proc = subprocess.Popen([str(VENV_BIN / "ansible-playbook"), playbook, *args], cwd=str(ROOT),
                                         env=ansible_env(), stdout=fh, stderr=subprocess.STDOUT, text=True)

    def text(self) -> str:
        return " ".join(self.out.read_text().split())

    def wait_for(self, text: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.text():
            assert self.proc.poll() is None, f"ended before {text!r}: {self.text()[-3000:]}"
            assert time.monotonic() < deadline, f"no {text!r} after {timeout}s: {self.text()[-3000:]}"
            time.sleep(0.5)

    def finish(self, timeout: float = 600) -> int:
        return self.proc.wait(timeout=timeout)


def stop(*runs: Run | None) -> None:
    """Kill what is still running of ``runs``: no playbook outlives its test."""
    for run in runs:
        if run is not None and run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait(timeout=30)


@pytest.fixture
def clean(sandbox):
    yield
    sandbox.kubectl("delete", "lease", "-n", "bcd-system", LEASE, "--ignore-not-found")
    sandbox.kubectl("delete", "secret", "-n", "bcd-system", "bcd-join", "--ignore-not-found")


def test_adopt_waiting_for_the_lock_never_rolls_back_the_rollout_that_held_it(sandbox, clean, tmp_path, reliability):
    """adopt-cluster.yml starts first and passes its image guard; rollout.yml takes the lock and
    rolls every node to a new digest while adopt waits. Under the lock adopt reads the DaemonSet
    again and refuses (naming the running digest and rollout.yml): the new digest stays."""
    reliability.describe("Slips and races", "adopt-cluster.yml started first; rollout.yml to a new digest takes the lock "
                         "while adopt waits for it")
    reliability.runs = 2
    inventory = inventory_image()
    assert fleet_images(sandbox) == (inventory, {inventory})
    leftover_secret(sandbox)
    # another run holds the lock: adopt waits for it, after its checks before the lock
    lease(sandbox, "ops@elsewhere pid=1 run=gate")
    adopt, rollout = Run(tmp_path, "adopt", "adopt-cluster.yml"), None
    try:
        adopt.wait_for("which another bcd-ansible run holds")
        # hand the lock to the rollout as it starts (its holder identity: this user and host, its
        # ansible-playbook's pid, the run id it is given), so that it, not adopt, takes it
        rollout = Run(tmp_path, "rollout", "rollout.yml", "-e", f"bcd_image={NEW[0]}", "-e", "rollout_run=race", *QUICK)
        lease(sandbox, f"{getpass.getuser()}@{socket.gethostname()} pid={rollout.proc.pid} run=race")
        assert rollout.finish() == 0, rollout.text()[-4000:]
        assert fleet_images(sandbox) == (NEW[0], {NEW[0]})
        assert adopt.finish() != 0, adopt.text()[-4000:]
    finally:
        stop(adopt, rollout)
    out = adopt.text()
    assert f"runs {NEW[0]}, but bcd_image in the inventory is {inventory}" in out, out[-4000:]
    assert "read under the lock of the cluster" in out and "Nothing was changed and no token minted" in out
    assert fleet_images(sandbox) == (NEW[0], {NEW[0]}), "adopt rolled the rollout back"
    reliability.result = ("the rollout rolled every node; adopt, under the lock, read the new digest and refused "
                          "(nothing changed, no token): the rollout's digest stayed")
    reliability.figures.update({"rollout exit": 0, "adopt exit": adopt.proc.returncode,
                                "bcd pods on the rollout's digest after both": sum(
                                    p["spec"]["containers"][0]["image"] == NEW[0]
                                    for p in kget(sandbox, "pods", "-n", "bcd-system", "-l", "app.kubernetes.io/name=bcd")["items"])})


def test_a_rollout_started_first_keeps_its_digest_whichever_run_takes_the_lock(sandbox, clean, tmp_path, reliability):
    """rollout.yml to a new digest, then adopt-cluster.yml 2 s later (its inventory at the running
    digest). Whichever takes the lock first, the end state is one run's promise, never a mix: the
    rollout rolled and adopt refused, or adopt held the lock and the rollout said "locked by"."""
    reliability.describe("Slips and races", "rollout.yml to a new digest, adopt-cluster.yml started 2 s later")
    reliability.runs = 2
    running, _ = fleet_images(sandbox)
    leftover_secret(sandbox)
    rollout, adopt = Run(tmp_path, "rollout", "rollout.yml", "-e", f"bcd_image={NEW[1]}", *QUICK), None
    try:
        time.sleep(2)
        adopt = Run(tmp_path, "adopt", "adopt-cluster.yml", "-e", f"bcd_image={running}")
        rolled, adopted = rollout.finish(), adopt.finish()
    finally:
        stop(rollout, adopt)
    image, pods = fleet_images(sandbox)
    if rolled == 0:
        assert (image, pods) == (NEW[1], {NEW[1]}), adopt.text()[-4000:]
        assert adopted != 0, adopt.text()[-4000:]
        assert f"runs {NEW[1]}, but bcd_image in the inventory is {running}" in adopt.text(), adopt.text()[-4000:]
        reliability.result = "the rollout took the lock and rolled; adopt refused the new digest: it stayed"
    else:
        assert "locked by" in rollout.text(), rollout.text()[-4000:]
        assert adopted == 0, adopt.text()[-4000:]
        assert (image, pods) == (running, {running})
        reliability.result = "adopt took the lock first; the rollout said locked by and rolled nothing"
    reliability.figures.update({"rollout exit": rolled, "adopt exit": adopted})

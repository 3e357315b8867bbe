"""The kind test bed's stand-in bcd (sandbox/kind/bcd) against a running control-plane emulator.

The real binary (built from sandbox/kind/bcd with Go) runs the commands the DaemonSet calls, with
a ``config.toml`` rendered by our own renderer from the emulator's variables, against the
emulator's node side over pinned TLS (docs/control-plane-api.md, "The node side"): a join spends
one use and writes the identity 0600; a second join spends nothing; each refusal exits 1 naming
its reason, before any use is spent where the node can tell (pins, site, the token file's mode);
``bcd node`` reports (a node that went offline comes back), exits when the control plane removed
the node, and the bad build exits after its delay; ``bcd status`` answers. No secret reaches the
output. On the kind nodes themselves: sandbox/tests/test_kind_bcd.py.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from sandbox.control_plane import service
from sandbox.tests.test_control_plane import Emulator
from tests.helpers import TEMPLATE

pytestmark = pytest.mark.sandbox


@pytest.fixture(scope="module")
def bcd() -> Path:
    if not shutil.which("go"):
        pytest.skip("building the stand-in bcd needs Go on PATH")
    from sandbox.kind import standin

    return standin.binary(say=lambda _msg: None)


@pytest.fixture(scope="module")
def cp(tmp_path_factory):
    sdir = tmp_path_factory.mktemp("cp-standin")
    # short grace, so that a node that stops reporting turns offline within the test
    (sdir / "control-plane").mkdir(mode=0o700)
    seed = yaml.safe_load((Path(service.__file__).parent / "seed.yml").read_text())
    seed["offline_grace_seconds"] = 3
    (sdir / "control-plane" / "seed.yml").write_text(yaml.safe_dump(seed))
    service.start(sdir, None)
    try:
        yield Emulator(sdir)
    finally:
        service.stop(sdir)


def config_toml(cp: Emulator, **overrides) -> str:
    from ansible_collections.bcd.kubernetes.plugins.module_utils import bcd_model, bcd_render

    v = cp.vars
    variables = {"bcd_image": "localhost/bcd:0.1.0@sha256:" + "0" * 64, "bcd_gateway_url": v["bcd_gateway_url"],
                 "bcd_site_id": v["bcd_site_id"], "bcd_control_plane_url": v["bcd_control_plane_url"],
                 "bcd_pins": dict(v["bcd_pins"])}
    for k, val in overrides.items():
        if k.startswith("pins_"):
            variables["bcd_pins"][k[5:]] = val
        else:
            variables[k] = val
    return bcd_render.render_config_toml(bcd_model.load(variables), TEMPLATE.read_text())


class Node:
    """One simulated host: its own /var/lib/bcd, /run/bcd and files, and the bcd binary."""

    def __init__(self, bcd: Path, root: Path, name: str):
        self.bcd, self.root, self.name = bcd, root, name
        for d in ("state", "run", "etc", "secrets"):
            (root / d).mkdir(parents=True, exist_ok=True)
        self.config = root / "etc" / "config.toml"
        self.token_file = root / "secrets" / "token"

    def env(self, **extra) -> dict:
        return {"PATH": os.environ.get("PATH", ""), "NODE_NAME": self.name, "BCD_STATE_DIR": str(self.root / "state"),
                "BCD_RUN_DIR": str(self.root / "run"), "BCD_KUBECTL": "/bin/false",
                "BCD_CRASH_MARKER": str(self.root / "crash-after-seconds"),
                "BCD_TERMINATION_LOG": str(self.root / "termination-log"), **extra}

    def write(self, config: str, token: str | None, mode: int = 0o400) -> None:
        self.config.write_text(config)
        self.token_file.unlink(missing_ok=True)
        if token is not None:
            self.token_file.write_text(token)
            os.chmod(self.token_file, mode)

    def run(self, *args: str, timeout: float = 60, **env) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.bcd), *args, "--config", str(self.config)], env=self.env(**env),
                              capture_output=True, text=True, timeout=timeout, check=False)

    def join(self) -> subprocess.CompletedProcess:
        return self.run("join", "--token-file", str(self.token_file))

    @property
    def identity(self) -> Path:
        return self.root / "state" / "node.json"


def _uses(cp: Emulator, token_id: str) -> int:
    return cp.ok("joinTokens.get", {"tenant": cp.tenant, "id": token_id})["uses"]


def _node(cp: Emulator, hostname: str) -> dict | None:
    items = cp.ok("nodes.list", {"tenant": cp.tenant, "limit": 500})["items"]
    return next((n for n in items if n["hostname"] == hostname), None)


def _no_secret(out: subprocess.CompletedProcess, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in out.stdout + out.stderr


def test_join_spends_one_use_writes_the_identity_and_rejoins_for_free(cp, bcd, tmp_path):
    token = cp.create(f"standin-{time.time_ns()}", maxUses=2)
    node = Node(bcd, tmp_path, f"standin-{time.time_ns()}")
    node.write(config_toml(cp), token["token"])

    first = node.join()
    assert first.returncode == 0, first.stderr
    assert "joined as node_" in first.stdout and "spent one use" in first.stdout
    assert _uses(cp, token["id"]) == 1
    mode = stat.S_IMODE(node.identity.stat().st_mode)
    assert mode == 0o600, oct(mode)
    ident = yaml.safe_load(node.identity.read_text())
    assert ident["hostname"] == node.name and ident["id"].startswith("node_")
    listed = _node(cp, node.name)
    assert listed is not None and listed["id"] == ident["id"] and listed["state"] == "adopting"

    # The identity exists: exit 0 without a token, nothing spent (the Secret is gone by then).
    node.write(config_toml(cp), None)
    again = node.join()
    assert again.returncode == 0, again.stderr
    assert "joined before" in again.stdout and ident["id"] in again.stdout
    assert _uses(cp, token["id"]) == 1
    _no_secret(first, token["token"], ident["credential"])
    _no_secret(again, token["token"], ident["credential"])


def _refused(node: Node, reason: str) -> str:
    out = node.join()
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert f"bcd join: {reason}: " in out.stderr, out.stderr
    assert not node.identity.exists()
    message = (node.root / "termination-log").read_text()
    assert message.startswith(f"{reason}: "), message
    return out.stderr


@pytest.mark.parametrize("override,reason,spent", [
    ({"pins_serving_ca": "sha256/" + "A" * 43 + "="}, "PinMismatch", False),
    ({"pins_join_encryption": "sha256/" + "C" * 43 + "="}, "PinMismatch", False),
    ({"pins_join_signing": "sha256/" + "B" * 43 + "="}, "PinMismatch", False),
    ({"bcd_site_id": "site_elsewhere"}, "ConfigMismatch", False),
])
def test_a_wrong_pin_or_site_is_refused_before_any_use_is_spent(cp, bcd, tmp_path, override, reason, spent):
    token = cp.create(f"standin-{time.time_ns()}")
    node = Node(bcd, tmp_path, f"standin-{time.time_ns()}")
    node.write(config_toml(cp, **override), token["token"])
    err = _refused(node, reason)
    key = next(iter(override)).replace("pins_", "pins.").replace("bcd_site_id", "site")
    assert key in err
    assert _uses(cp, token["id"]) == 0
    assert _node(cp, node.name) is None
    _no_secret(subprocess.CompletedProcess([], 1, "", err), token["token"])


def test_token_refusals_name_their_reason(cp, bcd, tmp_path):
    good = config_toml(cp)
    node = Node(bcd, tmp_path, f"standin-{time.time_ns()}")
    token = cp.create(f"standin-{time.time_ns()}", maxUses=1)

    node.write(good, token["token"], mode=0o444)
    assert "0444" in _refused(node, "TokenFileMode")
    node.write(good, None)
    _refused(node, "NoToken")
    node.write(good, "bcdjt_forged.AAAA")
    _refused(node, "TokenInvalid")

    # one use: the first node spends it, the second finds it exhausted
    other = Node(bcd, tmp_path / "other", f"standin-{time.time_ns()}")
    other.write(good, token["token"])
    assert other.join().returncode == 0
    node.write(good, token["token"])
    assert "no use left" in _refused(node, "TokenExhausted")

    revoked = cp.create(f"standin-{time.time_ns()}")
    cp.ok("joinTokens.revoke", {"tenant": cp.tenant, "id": revoked["id"]})
    node.write(good, revoked["token"])
    _refused(node, "TokenRevoked")
    assert _uses(cp, revoked["id"]) == 0
    # a refused join of a node the control plane does not know leaves no node behind
    assert _node(cp, node.name) is None


def test_node_reports_comes_back_from_offline_and_stops_when_removed(cp, bcd, tmp_path):
    token = cp.create(f"standin-{time.time_ns()}")
    node = Node(bcd, tmp_path, f"standin-{time.time_ns()}")
    node.write(config_toml(cp), token["token"])
    assert node.join().returncode == 0
    node_id = yaml.safe_load(node.identity.read_text())["id"]

    # no report for longer than the grace: offline
    deadline = time.monotonic() + 30
    while _node(cp, node.name)["state"] != "offline":
        assert time.monotonic() < deadline, _node(cp, node.name)
        time.sleep(0.5)

    before = cp.admin.counters()
    proc = subprocess.Popen([str(bcd), "node", "--config", str(node.config)], env=node.env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while _node(cp, node.name)["state"] != "adopting":
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, _node(cp, node.name)
            time.sleep(0.5)
        status = node.run("status")
        assert status.returncode == 0, status.stderr
        assert node_id in status.stdout and "last report" in status.stdout
        assert "Reporting" not in {c["type"] for c in _node(cp, node.name)["conditions"]}

        cp.ok("nodes.remove", {"tenant": cp.tenant, "id": node_id})
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1
    assert "NodeUnknown" in err and node_id in err
    assert cp.admin.counters() != before
    _no_secret(subprocess.CompletedProcess([], 1, out, err), token["token"],
               yaml.safe_load(node.identity.read_text())["credential"])


def test_status_fails_before_node_runs_and_the_bad_build_exits(cp, bcd, tmp_path):
    token = cp.create(f"standin-{time.time_ns()}")
    node = Node(bcd, tmp_path, f"standin-{time.time_ns()}")
    node.write(config_toml(cp), token["token"])
    assert node.run("status").returncode == 1  # not joined
    assert node.join().returncode == 0
    status = node.run("status")
    assert status.returncode == 1 and "NotRunning" in status.stderr

    (node.root / "crash-after-seconds").write_text("1\n")
    t0 = time.monotonic()
    out = node.run("node", timeout=30)
    assert out.returncode == 1
    assert "BadBuild" in out.stderr
    assert time.monotonic() - t0 >= 1  # it ran, then crashed (run's own timeout bounds the other side)


def test_the_stand_ins_own_go_tests_pass(bcd):
    """Its config.toml reader (sandbox/kind/bcd/toml_test.go): escapes, comments, and a clear
    error for what it does not read."""
    from sandbox.kind import standin

    out = subprocess.run(["go", "test", "./..."], cwd=standin.SOURCE, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "CGO_ENABLED": "0", "GOWORK": "off", "GOFLAGS": "-mod=readonly"}, check=False)
    assert out.returncode == 0, out.stdout + out.stderr

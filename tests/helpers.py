"""Helpers shared by the tests: base inventories, running our modules and playbooks."""

from __future__ import annotations

import copy
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "templates" / "config.toml.j2"
VENV_BIN = Path(sys.executable).parent

DIGEST = "5d3f2a1c9b8e7d6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f"
BASE_VARS = {
    "bcd_image": f"registry.example.com/better-compute/bcd:0.1.0@sha256:{DIGEST}",
    "bcd_gateway_url": "https://gw.example.com:7443",
    "bcd_site_id": "site_01",
    "bcd_control_plane_url": "https://compute.example.com",
    "bcd_pins": {
        "serving_ca": "sha256/" + "A" * 43 + "=",
        "join_signing": "sha256/" + "B" * 43 + "=",
        "join_encryption": "sha256/" + "C" * 43 + "=",
    },
    "bcd_node_selector": {"nvidia.com/gpu.present": "true"},
}


def base_vars(**overrides) -> dict:
    """A valid inventory (deep copy) with ``overrides`` applied; a value of None removes the key."""
    out = copy.deepcopy(BASE_VARS)
    for k, v in overrides.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def run_module(name: str, args: dict, check_mode: bool = False) -> tuple[int, dict]:
    """Run plugins/modules/<name>.py in-process through AnsibleModule (ansible-core's patch_module_args).

    Returns (exit code, the JSON result the module printed).
    """
    from ansible.module_utils import _internal
    from ansible.module_utils.common import warnings
    from ansible.module_utils.testing import patch_module_args

    # a module runs in a fresh process: no warning of an earlier in-process run carries over
    warnings._global_warnings.clear()
    warnings._global_deprecations.clear()
    # nor is it the controller, even when another test imported controller code into this process
    # (ansible-core then prints a module's warnings instead of returning them in the result)
    was_controller, _internal.is_controller = _internal.is_controller, False
    path = ROOT / "plugins" / "modules" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"bcd_test_module_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if check_mode:
        args = {**args, "_ansible_check_mode": True}
    out = io.StringIO()
    code = 0
    try:
        with patch_module_args(args), redirect_stdout(out):
            try:
                module.main()
            except SystemExit as exc:
                code = exc.code or 0
    finally:
        _internal.is_controller = was_controller
    return code, json.loads(out.getvalue())


def ansible_env(**extra) -> dict:
    env = dict(os.environ)
    env.update({
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "collections"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "PATH": f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
    })
    env.update(extra)
    return env


def mitogen_env() -> dict:
    """The environment that runs ansible-playbook under mitogen's strategy, the opt-in persistent
    interpreter (docs/benchmarks.md): the strategy and where the installed package keeps it."""
    import ansible_mitogen

    strategy = Path(ansible_mitogen.__file__).parent / "plugins" / "strategy"
    return {"ANSIBLE_STRATEGY": "mitogen_linear", "ANSIBLE_STRATEGY_PLUGINS": str(strategy)}


def run_playbook(playbook: str, *args: str, env: dict | None = None, timeout: int = 900,
                 cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``ansible-playbook <playbook> <args>`` from the repository root; capture its output."""
    return subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), playbook, *args],
        cwd=str(cwd or ROOT), env=ansible_env(**(env or {})), capture_output=True, text=True,
        timeout=timeout, check=False,
    )


def left_in_tmpdir(tmpdir: Path) -> list[str]:
    """What a run left in its own TMPDIR that it must not: all but kubernetes.core's API discovery
    cache (``k8srcp-<hash>.json``, kept by design). Raises AssertionError when any file there holds
    a private key (the kubeconfig's client key, written for TLS)."""
    keys = [str(p) for p in tmpdir.rglob("*") if p.is_file() and "PRIVATE KEY" in p.read_text(errors="replace")]
    assert keys == [], f"copies of a private key left in TMPDIR: {keys}"
    left = sorted(str(p.relative_to(tmpdir)) for p in tmpdir.rglob("*"))
    return [f for f in left if not re.fullmatch(r"k8srcp-[0-9a-f]+\.json", f)]


def recap(stdout: str) -> dict[str, dict[str, int]]:
    """The PLAY RECAP counters per host, e.g. {'sandbox': {'ok': 12, 'changed': 0, ...}}."""
    hosts = {}
    seen = False
    for line in stdout.splitlines():
        if line.startswith("PLAY RECAP"):
            seen = True
            continue
        if seen and ":" in line and "=" in line:
            host, _, rest = line.partition(":")
            hosts[host.strip()] = {k: int(v) for k, v in (p.split("=") for p in rest.split())}
    return hosts


def client_side_applied(sandbox, tmp_path, kinds: tuple[str, ...] | None = None) -> None:
    """bcd's objects as an operator who followed the seed's `kubectl apply` leaves them: the
    render (only ``kinds`` of it, when given), plus a hostPath volume /var/log in the DaemonSet and
    a key in the ConfigMap, applied client-side over what the cluster has."""
    out = tmp_path / "render.json"
    run = run_playbook("render.yml", "-e", f"bcd_render_out={out}")
    assert run.returncode == 0, run.stdout[-2000:]
    doc = json.loads(out.read_text())
    cm = next(i for i in doc["items"] if i["kind"] == "ConfigMap")
    cm["data"]["extra.toml"] = "# kept by hand\n"
    ds = next(i for i in doc["items"] if i["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    pod["volumes"].append({"name": "varlog", "hostPath": {"path": "/var/log", "type": "Directory"}})
    pod["containers"][0]["volumeMounts"].append({"name": "varlog", "mountPath": "/host/var/log", "readOnly": True})
    if kinds is not None:
        doc["items"] = [i for i in doc["items"] if i["kind"] in kinds]
    out.write_text(json.dumps(doc))
    sandbox.kubectl("apply", "-f", str(out))


def bcd_objects(sandbox) -> tuple[dict, dict]:
    """bcd's DaemonSet and ConfigMap as the API server has them, with their managedFields."""
    ds = json.loads(sandbox.kubectl("get", "daemonset", "-n", "bcd-system", "bcd", "-o", "json",
                                    "--show-managed-fields").stdout)
    cm = json.loads(sandbox.kubectl("get", "configmap", "-n", "bcd-system", "bcd-config", "-o", "json",
                                    "--show-managed-fields").stdout)
    return ds, cm


def assert_takeover_previewed(stdout: str) -> None:
    """A --check --diff run over client_side_applied objects shows what taking them over removes
    (the extra volume, the extra key, the last-applied annotation) and does not say "nothing to do"."""
    removed = [line for line in stdout.splitlines() if line.startswith("-")]
    assert any("/var/log" in line for line in removed), stdout[-6000:]
    assert any("extra.toml" in line for line in removed)
    assert any("last-applied-configuration" in line for line in removed)
    assert "nothing to do" not in stdout


def crash_shown(text: str, node: str | None, name: str) -> bool:
    """Whether ``text`` names the pod and its bcd container as a crash loop shows it: waiting in
    CrashLoopBackOff, or for the second after each exit (a kubelet shows it so too) terminated."""
    lead = re.escape(f"{node}: " if node else "") + re.escape(f"pod {name} not Ready: container bcd ")
    return re.search(lead + r"(waiting: CrashLoopBackOff|terminated), \d+ restarts?", text) is not None


def node_rows(stdout: str, name: str) -> list[tuple[str, str, str, str]]:
    """Each row of `name` in the per-node isolation table (NODE VERDICT READY SOURCE NODE FILES)
    printed in a playbook's output, as (verdict, ready, source, node files). Parsed by column, so a
    new or wider column does not make a test miss the row."""
    row = re.compile(rf"^\s*{re.escape(name)}\s+(\S+)\s+(\S+)\s+(\S+)\s+(.+?)\s*$", re.M)
    return [(m[1], m[2], m[3], m[4]) for m in row.finditer(stdout) if m[4].startswith(("over SSH", "from "))]


def install_debian_packages(packages: list[str]) -> str | None:
    """Install Debian ``packages`` with apt-get (updating the package lists once if the install
    fails on stale ones). None when done; else why they cannot be, for a test to skip or fail on."""
    names = " ".join(packages)
    if os.geteuid() != 0:
        return f"{names} is not installed, and installing it needs root"
    if not shutil.which("apt-get"):
        return f"{names} is not installed, and this machine has no apt-get to install it"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
    if run.returncode != 0:  # a stale package list: update it once and try again
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, timeout=600, check=False)
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
    if run.returncode != 0:
        return f"apt-get install {names} failed: {(run.stdout + run.stderr)[-500:]}"
    return None


# The bcd DaemonSet and its pods as kubectl shows them (rollout tests)
def kget(sandbox, *args) -> dict:
    return json.loads(sandbox.kubectl("get", *args, "-o", "json").stdout)


def daemonset(sandbox) -> dict:
    return kget(sandbox, "daemonset", "-n", "bcd-system", "bcd")


def pods(sandbox) -> dict[str, dict]:
    """node -> its bcd pod, for every bound pod not being deleted (a pod the DaemonSet controller
    has just created is on no node until the scheduler binds it)."""
    items = kget(sandbox, "pods", "-n", "bcd-system", "-l", "app.kubernetes.io/name=bcd")["items"]
    return {p["spec"]["nodeName"]: p for p in items
            if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")}


def ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


def image(pod: dict) -> str:
    return pod["spec"]["containers"][0]["image"]


def module_config(cpvars: dict) -> dict:
    """The ``config`` option of a bcd module run in-process against the sandbox: the control
    plane's variables (``cpvars``, without the API key) and the sandbox inventory's image, node
    selector and soak."""
    import yaml

    inventory = yaml.safe_load((ROOT / "inventories" / "sandbox" / "host_vars" / "sandbox.yml").read_text())
    out = {k: v for k, v in cpvars.items() if k != "bcd_api_key"}
    out.update({k: inventory[k] for k in ("bcd_image", "bcd_node_selector", "bcd_rollout_soak")})
    return out

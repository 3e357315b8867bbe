"""Packages mode on node roots in folders: gpu-stack.yml for real, on gpu_nodes hosts whose root
is a folder (a local connection with bcd_node_root as the root prefix), then doctor.yml on each
folder. No cluster: -e gpu_stack_verify=false skips the cluster gate of gpu-stack.yml.

nvidia-ctk is the real one, built from the Go module proxy into
$XDG_CACHE_HOME/bcd-ansible/bin (outside the repository), once.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_containerd import VERSION_FILE
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_gpu_isolation import (
    KEY,
    VOLUME_KEY,
    verify_node_root,
)

from tests.helpers import ROOT, recap, run_playbook

try:
    import tomllib
except ImportError:  # pragma: no cover
    tomllib = None

CASES = ROOT / "tests" / "fixtures" / "gpu-isolation"
NVIDIA_CTK_MODULE = "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk"
NVIDIA_CTK_VERSION = "v1.20.2"
# node name -> the shared case its root starts as (all exposed before gpu-stack.yml)
NODES = {
    "gpu-node-1": "01-containerd-v2-nvidia-no-toolkit-config",
    "gpu-node-2": "03b-operator-false-but-package-config-true",
    "gpu-node-3": "07-crio-dropin-key-commented",
    "gpu-node-4": "12-crio-oci-hook-always",
}


def nvidia_ctk() -> Path:
    """The pinned nvidia-ctk, built into the cache on first use (about two minutes on two cores)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bcd-ansible" / "bin"
    binary, stamp = cache / "nvidia-ctk", cache / "nvidia-ctk.stamp"
    if binary.is_file() and stamp.is_file() and stamp.read_text().strip() == NVIDIA_CTK_VERSION:
        return binary
    go = shutil.which("go")
    if not go:
        pytest.fail("packages-mode tests need nvidia-ctk: install Go (the Go module proxy builds it) or put "
                    f"nvidia-ctk {NVIDIA_CTK_VERSION} at {binary} with {NVIDIA_CTK_VERSION} in {stamp}")
    cache.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOBIN": str(cache), "CGO_ENABLED": os.environ.get("CGO_ENABLED", "1"),
           "GOFLAGS": "-buildvcs=false -trimpath"}
    print(f"building nvidia-ctk {NVIDIA_CTK_VERSION} into {cache}", file=sys.stderr)
    run = subprocess.run([go, "install", f"{NVIDIA_CTK_MODULE}@{NVIDIA_CTK_VERSION}"], env=env, cwd=str(cache),
                         capture_output=True, text=True, timeout=1800, check=False)
    if run.returncode != 0:
        pytest.fail(f"building nvidia-ctk failed: {run.stderr[-2000:]}")
    stamp.write_text(NVIDIA_CTK_VERSION + "\n")
    return binary


def tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        h.update(str(p.relative_to(root)).encode())
        if p.is_file():
            h.update(p.read_bytes())
            h.update(oct(p.stat().st_mode).encode())
    return h.hexdigest()


@pytest.fixture
def folder_nodes(tmp_path):
    """Four GPU node roots in folders, each a copy of an exposed case, and an inventory for them."""
    roots = {}
    for name, case in NODES.items():
        roots[name] = tmp_path / "nodes" / name
        shutil.copytree(CASES / case, roots[name])
    python = sys.executable
    inventory = {
        "clusters": {"hosts": {"folder-cluster": {
            "ansible_connection": "local", "ansible_python_interpreter": python,
            "bcd_nvidia_toolkit": "packages", "bcd_container_runtime": "containerd",
        }}},
        "gpu_nodes": {"hosts": {
            name: {"ansible_connection": "local", "ansible_python_interpreter": python, "bcd_node_root": str(root)}
            for name, root in roots.items()
        }},
    }
    inv = tmp_path / "hosts.yml"
    inv.write_text(json.dumps(inventory))
    return inv, roots


def gpu_stack(inv: Path, *extra: str):
    return run_playbook(
        "gpu-stack.yml", "-i", str(inv), "-e", f"gpu_stack_nvidia_ctk={nvidia_ctk()}", "-e", "gpu_stack_verify=false",
        *extra,
    )


LOCAL = ("-i", "localhost,", "-e", "ansible_connection=local", "-e", f"ansible_python_interpreter={sys.executable}")


def doctor(root: Path, report: Path):
    return run_playbook("doctor.yml", *LOCAL, "-e", f"bcd_node_root={root}", "-e", f"bcd_report_out={report}")


def test_packages_mode_on_folders(folder_nodes, tmp_path):
    inv, roots = folder_nodes
    for name, root in roots.items():
        assert verify_node_root(str(root))["verdict"] == "exposed", name
    before = {name: tree_digest(root) for name, root in roots.items()}

    # --check changes nothing, but says what it would change.
    check = gpu_stack(inv, "--check", "--diff")
    assert check.returncode == 0, check.stdout + check.stderr
    assert {name: tree_digest(root) for name, root in roots.items()} == before
    assert recap(check.stdout)["folder-cluster"]["changed"] > 0
    assert KEY in check.stdout  # --diff shows the toolkit key going in

    first = gpu_stack(inv)
    assert first.returncode == 0, first.stdout + first.stderr
    assert recap(first.stdout)["folder-cluster"]["changed"] > 0
    # No driver under a folder: the CDI step says so plainly instead of pretending, as an
    # Ansible warning (printed on stderr, counted by AWX).
    warning = " ".join((first.stdout + first.stderr).split())
    assert "[WARNING]" in warning and "was NOT generated" in warning

    second = gpu_stack(inv)
    assert second.returncode == 0, second.stdout + second.stderr
    assert recap(second.stdout)["folder-cluster"]["changed"] == 0, second.stdout

    for name, root in roots.items():
        # The toolkit config the runtime reads sets the key false, written by nvidia-ctk.
        config = root / "etc/nvidia-container-runtime/config.toml"
        doc = tomllib.loads(config.read_text())
        assert doc[KEY] is False and doc[VOLUME_KEY] is False
        assert "nvidia-container-runtime" in doc  # nvidia-ctk's full layout, not a hand-written line
        env = (root / "etc/nvidia-container-toolkit/nvidia-cdi-refresh.env").read_text().splitlines()
        assert "NVIDIA_CTK_CDI_GENERATE_DEVICE_NAME_STRATEGIES=uuid" in env
        assert "NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=/etc/cdi/nvidia.yaml" in env
        assert not (root / "etc/cdi/nvidia.yaml").exists()
        assert verify_node_root(str(root))["verdict"] == "isolated", name

    # doctor.yml agrees (one folder is enough: it runs the same verifier). Isolated is not enough
    # for it to pass: bcd hands GPUs out by CDI name, and no driver under a folder means no CDI
    # specification, so the node is not-ready until one naming GPUs by UUID is there.
    report = tmp_path / "gpu-node-1.json"
    run = doctor(roots["gpu-node-1"], report)
    assert run.returncode != 0 and "gpu-node-1 is not-ready" in run.stdout, run.stdout
    (node,) = json.loads(report.read_text())["nodes"]
    assert node["verdict"] == "isolated" and node["ready"] == "not-ready"
    assert {f["check"] for f in node["readiness"]} == {"cdi-spec"}
    (roots["gpu-node-1"] / "var/run/cdi").mkdir(parents=True)
    (roots["gpu-node-1"] / "var/run/cdi/nvidia.yaml").write_text(
        "cdiVersion: 0.6.0\nkind: nvidia.com/gpu\ndevices:\n- name: GPU-0f1e2d3c-aaaa-bbbb-cccc-0123456789ab\n")
    run = doctor(roots["gpu-node-1"], report)
    assert run.returncode == 0, run.stdout + run.stderr
    assert [(n["verdict"], n["ready"]) for n in json.loads(report.read_text())["nodes"]] == [("isolated", "ready")]

    # Backups: a file that existed was copied before it changed; a new file has no backup.
    backups = list((roots["gpu-node-2"] / "etc/nvidia-container-runtime").glob("config.toml.*~"))
    assert len(backups) == 1
    assert backups[0].read_text() == (CASES / NODES["gpu-node-2"] / "etc/nvidia-container-runtime/config.toml").read_text()
    assert not list((roots["gpu-node-1"] / "etc/nvidia-container-runtime").glob("config.toml.*~"))


def test_operator_directory_config_is_fixed_too(tmp_path):
    """A runtime in the operator's toolkit directory with the key true (case 04), in packages mode."""
    root = tmp_path / "n"
    shutil.copytree(CASES / "04-containerd-v3-operator-key-true", root)
    # a version 3 configuration is containerd 2.x's: the collected root says which release runs it
    (root / VERSION_FILE).write_text("containerd github.com/containerd/containerd/v2 v2.1.4 x\n")
    inv = tmp_path / "hosts.yml"
    inv.write_text(json.dumps({
        "clusters": {"hosts": {"c": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                                     "bcd_nvidia_toolkit": "packages"}}},
        "gpu_nodes": {"hosts": {"gpu-node-9": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                                               "bcd_node_root": str(root)}}},
    }))
    run = gpu_stack(inv)
    assert run.returncode == 0, run.stdout + run.stderr
    assert verify_node_root(str(root))["verdict"] == "isolated"


def test_doctor_fails_on_an_exposed_folder_and_writes_the_report(tmp_path):
    report = tmp_path / "r.json"
    run = doctor(CASES / "07-crio-dropin-key-commented", report)
    assert run.returncode != 0
    assert "GPU isolation: 07-crio-dropin-key-commented is exposed" in run.stdout
    data = json.loads(report.read_text())
    assert data["schema_version"] == 1  # docs/reports.md
    (node,) = data["nodes"]
    assert node["verdict"] == "exposed" and not data["passed"]
    assert node["findings"][0]["where"] == "/etc/nvidia-container-runtime/config.toml"
    assert node["findings"][0]["fix"]
    # the last line: the verdict, with the command that configures isolation
    assert run.stdout.rstrip().splitlines()[-1] == (
        "doctor: cluster localhost FAILED; 0 of 1 selected nodes isolated; next: ansible-playbook gpu-stack.yml "
        "(it configures GPU isolation), then ansible-playbook doctor.yml again")


def test_doctor_warns_instead_when_not_enforced(tmp_path):
    report = tmp_path / "r.json"
    run = run_playbook("doctor.yml", *LOCAL, "-e", f"bcd_node_root={CASES / '08-invalid-toml'}",
                       "-e", f"bcd_report_out={report}", "-e", "bcd_gpu_isolation_enforce=false")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "[WARNING]" in run.stdout + run.stderr and "only a warning" in run.stdout + run.stderr
    assert json.loads(report.read_text())["nodes"][0]["verdict"] == "unverifiable"


def test_packages_mode_without_gpu_nodes_is_refused(tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text(json.dumps({"clusters": {"hosts": {"c": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable, "bcd_nvidia_toolkit": "packages"}}}}))
    run = run_playbook("gpu-stack.yml", "-i", str(inv), "-e", "gpu_stack_verify=false")
    assert run.returncode != 0
    assert "inventory group gpu_nodes is empty" in run.stdout


def test_a_typo_in_a_variable_is_refused(tmp_path):
    run = run_playbook("doctor.yml", *LOCAL, "-e", f"bcd_node_root={CASES / '10-runc-only'}",
                       "-e", "bcd_gpu_isolation_enforced=false")
    assert run.returncode != 0
    assert "INVALID_CONFIG: bcd_gpu_isolation_enforced: unknown variable" in run.stdout
    assert "did you mean bcd_gpu_isolation_enforce?" in run.stdout

"""Packages mode over real SSH: gpu-stack.yml configures the hosts of group gpu_nodes through
Debian's OpenSSH server with become (sudo), as on real GPU nodes, and pytest-testinfra checks
what it left on each node over the same SSH server, user and keys.

The nodes are inventory hosts pointing at one sshd on 127.0.0.1 (tests/sshnodes.py), each with
its own root folder (bcd_node_root) holding a copy of a shared case, and named after one of the
sandbox's GPU Nodes, so the gate (roles/gpu_stack/tasks/verify.yml) reads their files over SSH
too. The login user has passwordless sudo; for the failure scenario one node's user has a sudo
that asks for a password, and another node's known_hosts holds another key for the server.

nvidia-ctk is the real one the other packages-mode tests build. The nodes have no NVIDIA driver
(no GPU on this machine), so the CDI step must say, naming the node, that no specification was
generated; the generation itself is checked with a stand-in in tests/unit/test_gpu_isolation_modules.py.
"""

from __future__ import annotations

import copy
import itertools
import os
import re
import shutil
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s

from tests.helpers import ROOT, node_rows, recap, run_playbook
from tests.secrets_scan import find_in_files, find_in_text
from tests.sshnodes import SshServer, ensure_packages

# about four minutes on two cores: make test-long
pytestmark = [pytest.mark.sandbox, pytest.mark.long]

CASES = ROOT / "tests" / "fixtures" / "gpu-isolation"
# The first starts with a toolkit config.toml that sets the key true: it is backed up, then set.
NODE_CASES = ("03b-operator-false-but-package-config-true", "01-containerd-v2-nvidia-no-toolkit-config",
              "07-crio-dropin-key-commented")
KEY_LINE = "accept-nvidia-visible-devices-envvar-when-unprivileged = false"
TOOLKIT = "/etc/nvidia-container-runtime/config.toml"
REFRESH_ENV = "/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env"
USER, PW_USER = "bcdnode", "bcdnode-pw"
DEFAULT_SPEC = {"devicePlugin": {"enabled": True}, "toolkit": {"enabled": True, "installDir": "/usr/local/nvidia"},
                "cdi": {"default": False, "enabled": False}}


@pytest.fixture(scope="module")
def server():
    if os.geteuid() != 0:
        pytest.skip("gpu_nodes over SSH needs root: it adds users, a sudoers rule and runs sshd")
    why = ensure_packages()
    if why:
        pytest.skip(why)
    srv = SshServer()
    try:
        srv.add_user(USER, "nopasswd")
        srv.add_user(PW_USER, "password")
        srv.start()
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def isolated_policy(sandbox):
    """The ClusterPolicy isolated (gpu-stack.yml in operator mode), so the gate judges the nodes'
    files; what was there is put back afterwards."""
    with sandbox.api_client() as api:
        custom = k8s.CustomObjectsApi(api)
        args = ("nvidia.com", "v1", "clusterpolicies", "cluster-policy")
        saved = copy.deepcopy(custom.get_cluster_custom_object(*args)["spec"])
        run = run_playbook("gpu-stack.yml")
        assert run.returncode == 0, run.stdout[-3000:]
        yield
        obj = custom.get_cluster_custom_object(*args)
        obj["spec"] = saved
        custom.replace_cluster_custom_object(*args, obj)


@pytest.fixture(scope="module")
def ctk():
    from tests.unit.plugins.modules.test_gpu_isolation_packages import nvidia_ctk

    return nvidia_ctk()


def node_vars(srv: SshServer, user: str, root: Path, known_hosts: Path | None = None) -> dict:
    return {
        "ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": srv.port, "ansible_user": user,
        "ansible_ssh_private_key_file": str(srv.client_key), "ansible_ssh_common_args": srv.ssh_args(known_hosts),
        "ansible_become": True, "ansible_python_interpreter": "/usr/bin/python3", "bcd_node_root": str(root),
    }


def make_roots(srv: SshServer, names: list[str], tag: str) -> dict[str, Path]:
    roots = {}
    for name, case in zip(names, itertools.cycle(NODE_CASES)):
        roots[name] = srv.dir / "roots" / tag / name
        shutil.copytree(CASES / case, roots[name])
        # the CDI specification a node's driver generates (none loads under a folder): without it
        # the node is rightly not-ready, and this test is about configuring isolation over SSH
        (roots[name] / "var/run/cdi").mkdir(parents=True, exist_ok=True)
        (roots[name] / "var/run/cdi/nvidia.yaml").write_text(
            "cdiVersion: 0.6.0\nkind: nvidia.com/gpu\ndevices:\n- name: GPU-0f1e2d3c-aaaa-bbbb-cccc-0123456789ab\n")
    for d in (srv.dir / "roots", srv.dir / "roots" / tag):
        d.chmod(0o755)
    return roots


def write_inventory(srv: SshServer, hosts: dict[str, dict], tag: str) -> Path:
    path = srv.dir / f"gpu_nodes-{tag}.yml"
    path.write_text(yaml.safe_dump({"gpu_nodes": {"hosts": hosts}}))
    return path


def gpu_stack(inv: Path, ctk: Path, *extra: str):
    return run_playbook("gpu-stack.yml", "-i", "inventories/sandbox", "-i", str(inv), "-e", "bcd_nvidia_toolkit=packages",
                        "-e", f"gpu_stack_nvidia_ctk={ctk}", *extra, timeout=900)


def infra_host(srv: SshServer, user: str):
    """A testinfra host over the same sshd, user, key and known_hosts as the inventory host."""
    import testinfra

    config = srv.dir / f"ssh_config-{user}"
    config.write_text(f"Host 127.0.0.1\n  Port {srv.port}\n  User {user}\n  IdentityFile {srv.client_key}\n"
                      f"  IdentitiesOnly yes\n  UserKnownHostsFile {srv.known_hosts}\n  GlobalKnownHostsFile /dev/null\n"
                      "  StrictHostKeyChecking yes\n  BatchMode yes\n")
    return testinfra.get_host(f"ssh://{user}@127.0.0.1:{srv.port}", ssh_config=str(config), sudo=True)


def remote_tmp_files(srv: SshServer) -> list[Path]:
    return [p for home in srv.users.values() for p in (home / ".ansible").rglob("*") if p.is_file()]


def secrets_of(sandbox) -> list[str]:
    from tests.reliability.harness import World

    return World(sandbox).secrets()


def assert_isolated_over_ssh(stdout: str, name: str) -> None:
    """The node is isolated, its files read over SSH from its own host, in every row naming it."""
    rows = node_rows(stdout, name)
    assert rows and all((r[0], r[3]) == ("isolated", f"over SSH from {name}") for r in rows), (name, rows, stdout[-3000:])


def test_gpu_stack_over_ssh_with_become_then_testinfra(sandbox, server, isolated_policy, ctk, reliability):
    srv = server
    reliability.describe("Secrets", "gpu-stack.yml packages mode over real SSH (OpenSSH, sudo), -vvvv; "
                                    "nodes checked with testinfra", unit="SSH playbook runs")
    names = sandbox.gpu_node_names()
    roots = make_roots(srv, names, "ok")
    inv = write_inventory(srv, {n: node_vars(srv, USER, roots[n]) for n in names}, "ok")
    started = time.monotonic()

    first = gpu_stack(inv, ctk, "-vvvv")
    out = first.stdout + first.stderr
    assert first.returncode == 0, out[-5000:]
    assert recap(first.stdout)["sandbox"]["changed"] > 0
    for name in names:
        assert_isolated_over_ssh(first.stdout, name)
    assert f"ESTABLISH SSH CONNECTION FOR USER: {USER}" in out, "really over SSH"
    flat = " ".join(out.split())
    for name in names:  # no driver on these nodes: said plainly, naming the node
        assert f"{name}: no NVIDIA driver is loaded under {roots[name]}" in flat

    second = gpu_stack(inv, ctk)
    assert second.returncode == 0, (second.stdout + second.stderr)[-4000:]
    assert recap(second.stdout)["sandbox"]["changed"] == 0, second.stdout[-3000:]
    runs = 2

    # the node state, read over SSH by testinfra as the same user with sudo
    host = infra_host(srv, USER)
    assert host.user().name == "root" and host.run("printenv SUDO_USER").stdout.strip() == USER
    for name, root in roots.items():
        config = host.file(f"{root}{TOOLKIT}")
        assert config.exists and config.contains(f"^{KEY_LINE}$"), name
        assert config.user == "root" and config.mode == 0o644, (name, config.user, oct(config.mode))
        env = host.file(f"{root}{REFRESH_ENV}")
        assert env.contains("^NVIDIA_CTK_CDI_GENERATE_DEVICE_NAME_STRATEGIES=uuid$")
        assert env.contains("^NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=/etc/cdi/nvidia.yaml$")
        assert env.user == "root" and env.mode == 0o644
        assert not host.file(f"{root}/etc/cdi/nvidia.yaml").exists, "no driver: no specification"
        backups = host.run(f"ls {root}/etc/nvidia-container-runtime/").stdout.split()
        backups = [b for b in backups if b.startswith("config.toml.") and b.endswith("~")]
        original = CASES / NODE_CASES[names.index(name) % len(NODE_CASES)] / TOOLKIT.lstrip("/")
        if original.exists():  # a file that existed was copied before it changed, once
            assert len(backups) == 1, (name, backups)
            backup = host.file(f"{root}/etc/nvidia-container-runtime/{backups[0]}")
            assert backup.content_string == original.read_text() and backup.user == "root"
        else:
            assert backups == [], (name, backups)

    secrets = secrets_of(sandbox)
    tmp_files = remote_tmp_files(srv)
    leaks = {k: v for k, v in {
        "output": find_in_text(out + second.stdout + second.stderr, secrets),
        "remote ~/.ansible/tmp": find_in_files(tmp_files, secrets),
        "sshd log": find_in_text(srv.log.read_text(errors="replace"), secrets),
    }.items() if v}
    assert not leaks, f"a secret leaked: {leaks}"
    reliability.runs += runs
    reliability.result = (f"{len(names)} nodes configured and isolated over SSH with sudo, second run changed nothing, "
                          "testinfra agrees; no secret in the output, the remote ~/.ansible/tmp or sshd's log")
    reliability.figures.update({"nodes": len(names), "output bytes": len(out), "remote tmp files": len(tmp_files),
                                "testinfra checks": 9 * len(names), "seconds": round(time.monotonic() - started, 1)})


def test_a_node_with_a_sudo_password_or_a_changed_host_key_is_unverifiable_and_the_others_go_on(
        sandbox, server, isolated_policy, ctk, reliability):
    srv = server
    reliability.describe("Faults", "gpu-stack.yml over SSH: one node's sudo asks for a password, another's host "
                                   "key changed", unit="SSH playbook runs")
    names = sandbox.gpu_node_names()
    assert len(names) >= 3, names
    roots = make_roots(srv, names, "faults")
    pw_node, key_node, good = names[0], names[1], names[2:]
    hosts = {n: node_vars(srv, USER, roots[n]) for n in good}
    hosts[pw_node] = node_vars(srv, PW_USER, roots[pw_node])
    hosts[key_node] = node_vars(srv, USER, roots[key_node], known_hosts=srv.changed_known_hosts)
    inv = write_inventory(srv, hosts, "faults")
    untouched = {n: sorted((p.relative_to(roots[n]), p.read_bytes()) for p in roots[n].rglob("*") if p.is_file())
                 for n in (pw_node, key_node)}

    run = gpu_stack(inv, ctk)
    out = run.stdout + run.stderr
    flat = " ".join(out.split())
    assert run.returncode != 0, "the gate fails: two nodes could not be verified"
    assert f"{pw_node}: GPU isolation could not be configured on the node" in flat and "sudo password" in flat
    assert f"{key_node}: GPU isolation could not be configured on the node" in flat
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in out or "Host key verification failed" in out
    assert f"GPU isolation: {pw_node} is unverifiable" in flat or f"{pw_node} is unverifiable" in flat, flat[-3000:]
    assert f"{key_node} is unverifiable" in flat, flat[-3000:]
    # the cluster check itself names why each node could not be read, not only the configure step
    for name in (pw_node, key_node):
        rows = node_rows(run.stdout, name)
        assert rows and all(r[0] == "unverifiable" for r in rows), (name, rows)
    assert re.search(rf"the node files of {pw_node} could not be read \(over SSH from {pw_node}\): [^()]*sudo password",
                     flat), flat[-3000:]
    assert f"the node files of {key_node} could not be read (over SSH from {key_node}): " in flat, flat[-3000:]
    for name in good:  # the others were configured and verified
        assert_isolated_over_ssh(run.stdout, name)
        assert KEY_LINE in (roots[name] / TOOLKIT.lstrip("/")).read_text()
    for name, files in untouched.items():
        now = sorted((p.relative_to(roots[name]), p.read_bytes()) for p in roots[name].rglob("*") if p.is_file())
        assert now == files, f"{name} was changed"
    assert "Traceback" not in out

    # without the gate (gpu_stack_verify=false, as under --check) the configuration step itself fails, naming both
    check = gpu_stack(inv, ctk, "-e", "gpu_stack_verify=false")
    cflat = " ".join((check.stdout + check.stderr).split())
    assert check.returncode != 0
    assert f"GPU isolation could not be configured on {pw_node}, {key_node}" in cflat, cflat[-3000:]
    leaks = find_in_text(out + check.stdout + check.stderr, secrets_of(sandbox))
    assert not leaks, leaks
    reliability.runs += 2
    reliability.result = (f"{pw_node} (sudo asks for a password) and {key_node} (host key changed) named and "
                          f"unverifiable, left untouched; {len(good)} other node(s) configured and isolated; exit 2")

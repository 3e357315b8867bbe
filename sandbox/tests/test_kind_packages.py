"""Packages mode on the kind test bed's real nodes: gpu-stack.yml configures the toolkit files in
the worker containers over SSH, and doctor.yml reads them there.

``python -m sandbox kind up`` starts sshd in each worker, lets root in with the test bed's key
only, and writes the workers as inventory group gpu_nodes (``<kind dir>/gpu_nodes.yml``: each
worker's address on the kind network, the key, a known_hosts file with the host keys ``up``
read through podman, checked strictly). The toolkit's ``nvidia-ctk`` is copied into each worker,
as the toolkit's package would install it (the real one the other packages-mode tests build).

The workers' containerd runs the ``nvidia`` handler through ``/usr/local/bin/nvidia-container-runtime``,
so the toolkit config.toml it reads is ``/etc/nvidia-container-runtime/config.toml``: missing
(exposed) before gpu-stack.yml, set after it. The workers have no NVIDIA driver, so no CDI
specification can be generated: gpu-stack.yml says so naming each worker, and doctor.yml judges
the workers isolated but not ready for bcd's pod (no CDI specification), and fails, as it would
on a real node without one. Packages mode restarts no runtime: containerd keeps its process and
the ``nvidia`` handler's snippet. pytest-testinfra checks the files over the same SSH, key and
known_hosts. A second gpu-stack.yml changes nothing.
"""

from __future__ import annotations

import copy
import json
import subprocess

import pytest
import yaml

from sandbox import kind
from sandbox.tests.test_kind import kind_bed
from tests.helpers import recap, run_playbook

pytestmark = [pytest.mark.sandbox, pytest.mark.long]

TOOLKIT = "/etc/nvidia-container-runtime/config.toml"
REFRESH_ENV = "/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env"
KEY_LINE = "accept-nvidia-visible-devices-envvar-when-unprivileged = false"
CTK = "/usr/local/bin/nvidia-ctk"
# What packages mode may leave on a worker, removed before and after the test so the other kind
# tests see the test bed as `up` left it.
LEFT = ("/etc/nvidia-container-runtime", "/etc/nvidia-container-toolkit", "/etc/cdi", CTK)


def clean(workers: list[str]) -> None:
    for node in workers:
        kind.node_exec(node, f"rm -rf {' '.join(LEFT)}")


@pytest.fixture(scope="module")
def bed():
    from kubernetes import client

    from tests.unit.plugins.modules.test_gpu_isolation_packages import nvidia_ctk

    with kind_bed(attach=True) as api:
        workers = kind.node_names()[1:]
        ctk = nvidia_ctk()
        clean(workers)
        for node in workers:
            kind.podman("cp", str(ctk), f"{node}:{CTK}")
            kind.node_exec(node, f"chmod 0755 {CTK}")
        # The test bed's ClusterPolicy is the GPU operator's default (device plugin on): isolate it
        # first (gpu-stack.yml in operator mode), so the verdicts judge the workers' files; it is
        # put back afterwards.
        custom = client.CustomObjectsApi(api)
        args = ("nvidia.com", "v1", "clusterpolicies", "cluster-policy")
        saved = copy.deepcopy(custom.get_cluster_custom_object(*args)["spec"])
        try:
            run = run_playbook("gpu-stack.yml", "-i", "inventories/kind", env=kind_env())
            assert run.returncode == 0, run.stdout[-3000:]
            yield {"workers": workers, "inventory": yaml.safe_load(kind.gpu_nodes_file().read_text())}
        finally:
            obj = custom.get_cluster_custom_object(*args)
            obj["spec"] = saved
            custom.replace_cluster_custom_object(*args, obj)
            clean(workers)


def kind_env() -> dict[str, str]:
    """The kind directory and cluster name, for the playbooks run here."""
    return {"KIND_DIR": str(kind.kind_dir()), "KIND_CLUSTER_NAME": kind.cluster_name()}


def play(playbook: str, *args: str):
    return run_playbook(playbook, "-i", "inventories/kind", "-i", str(kind.gpu_nodes_file()),
                        "-e", "bcd_nvidia_toolkit=packages", *args, env=kind_env())


def doctor(tmp_path, name: str, *args: str):
    report = tmp_path / f"{name}.json"
    run = play("doctor.yml", "-e", f"bcd_report_out={report}", *args)
    return run, {n["name"]: n for n in json.loads(report.read_text())["nodes"]}


def infra_host(bed, node: str, tmp_path):
    """A testinfra host over the SSH the inventory gives the worker: its address, root, the key
    and the known_hosts file, checked strictly."""
    import testinfra

    vars_ = bed["inventory"]["gpu_nodes"]["hosts"][node]
    addr = vars_["ansible_host"]
    config = tmp_path / f"ssh_config-{node}"
    config.write_text(f"Host {addr}\n  User root\n  IdentityFile {vars_['ansible_ssh_private_key_file']}\n"
                      f"  IdentitiesOnly yes\n  UserKnownHostsFile {kind.ssh_dir() / 'known_hosts'}\n"
                      "  GlobalKnownHostsFile /dev/null\n  StrictHostKeyChecking yes\n  BatchMode yes\n")
    return testinfra.get_host(f"ssh://root@{addr}", ssh_config=str(config))


def over_ssh(out: str, addr: str) -> bool:
    """Ansible really logged in to ``addr`` over SSH (-vvv), and never ran a task for it locally."""
    return (f"<{addr}> ESTABLISH SSH CONNECTION FOR USER: root" in out
            and f"<{addr}> ESTABLISH LOCAL CONNECTION" not in out)


def containerd_state(node: str) -> tuple[str, str]:
    """containerd's process and its config file's digest in the worker."""
    pid = kind.node_exec(node, "systemctl show -p MainPID --value containerd").stdout.strip()
    digest = kind.node_exec(node, "sha256sum /etc/containerd/config.toml").stdout.split()[0]
    return pid, digest


def test_the_inventory_reaches_each_worker_over_ssh_with_a_checked_host_key(bed):
    inv = bed["inventory"]["gpu_nodes"]
    assert sorted(inv["hosts"]) == bed["workers"]
    key = kind.ssh_dir() / "id_ed25519"
    assert key.stat().st_mode & 0o777 == 0o600
    known = (kind.ssh_dir() / "known_hosts").read_text().splitlines()
    for node, host in inv["hosts"].items():
        args = host["ansible_ssh_common_args"]
        assert "StrictHostKeyChecking=yes" in args and f"UserKnownHostsFile={kind.ssh_dir() / 'known_hosts'}" in args
        assert host["ansible_connection"] == "ssh" and host["ansible_python_interpreter"] == "/usr/bin/python3"
        assert host["ansible_host"] == kind.node_address(node)
        pub = kind.node_exec(node, "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[:2]
        assert f"{host['ansible_host']} {pub[0]} {pub[1]}" in known
    # each worker has host keys of its own, not the image's
    assert len({line.split()[2] for line in known}) == len(bed["workers"])
    # a password is refused: key logins only
    addr = inv["hosts"][bed["workers"][0]]["ansible_host"]
    refused = subprocess.run(["ssh", "-o", f"UserKnownHostsFile={kind.ssh_dir() / 'known_hosts'}",
                              "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "PubkeyAuthentication=no",
                              "-o", "ConnectTimeout=10", f"root@{addr}", "true"],
                             capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode == 255 and "Permission denied (publickey)" in refused.stderr, refused.stderr


def test_gpu_stack_in_packages_mode_configures_the_workers_and_doctor_reads_them_there(bed, tmp_path):
    workers = bed["workers"]
    before_run, before = doctor(tmp_path, "before")
    assert before_run.returncode != 0
    for node in workers:  # the handler's runtime reads a toolkit config.toml that does not exist yet
        assert before[node]["verdict"] == "exposed", before[node]
        assert any(f["check"] == "toolkit-config-missing" and f["where"] == TOOLKIT
                   for f in before[node]["findings"]), before[node]["findings"]
    containerd = {node: containerd_state(node) for node in workers}

    first = play("gpu-stack.yml", "-vvv")
    out = first.stdout + first.stderr
    flat = " ".join(out.split())
    assert recap(first.stdout)["kind"]["changed"] > 0, first.stdout[-3000:]
    for node, host in bed["inventory"]["gpu_nodes"]["hosts"].items():
        assert over_ssh(out, host["ansible_host"]), node
        # no driver in a kind node: no CDI specification, said naming the node
        assert f"{node}: no NVIDIA driver is loaded under /" in flat, flat[-3000:]
    # the gate judges the workers isolated, and not ready for bcd's pod: no CDI specification
    assert first.returncode != 0
    for node in workers:
        assert f"{node}  isolated" in first.stdout, first.stdout[-3000:]

    for node in workers:
        host = infra_host(bed, node, tmp_path)
        assert host.user().name == "root"
        config = host.file(TOOLKIT)
        assert config.exists and config.contains(f"^{KEY_LINE}$"), node
        assert config.user == "root" and config.mode == 0o644, (node, config.user, oct(config.mode))
        env = host.file(REFRESH_ENV)
        assert env.contains("^NVIDIA_CTK_CDI_GENERATE_DEVICE_NAME_STRATEGIES=uuid$")
        assert env.contains("^NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=/etc/cdi/nvidia.yaml$")
        assert env.user == "root" and env.mode == 0o644
        assert not host.file("/etc/cdi/nvidia.yaml").exists, "no driver: no specification"
        # the GPU operator's config.toml up wrote is left as it was (its key already false)
        operator = host.file(kind.TOOLKIT_CONFIG[0])
        assert operator.content_string == kind.TOOLKIT_CONFIG[1]
        # no runtime restarted, the nvidia handler's snippet untouched
        assert containerd_state(node) == containerd[node], node
        assert host.service("containerd").is_running
        assert host.file("/etc/containerd/config.toml").contains("^# BEGIN bcd nvidia handler")

    after_run, after = doctor(tmp_path, "after", "-vvv")
    assert after_run.returncode != 0, "not ready for bcd's pod: doctor fails"
    for host in bed["inventory"]["gpu_nodes"]["hosts"].values():
        assert over_ssh(after_run.stdout + after_run.stderr, host["ansible_host"])
    for node in workers:
        assert after[node]["verdict"] == "isolated", after[node]
        assert "SSH" in after[node]["node_files"], after[node]["node_files"]
        assert after[node]["ready"] == "not-ready", after[node]
        assert {f["check"] for f in after[node]["readiness"]} == {"cdi-spec"}, after[node]["readiness"]
        assert f"{node}  isolated" in after_run.stdout

    second = play("gpu-stack.yml")
    assert recap(second.stdout)["kind"]["changed"] == 0, second.stdout[-3000:]
    assert "Traceback" not in out + second.stdout + second.stderr

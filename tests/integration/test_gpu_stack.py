"""gpu-stack.yml and doctor.yml against the sandbox: a real API server, KWOK GPU nodes, the
ClusterPolicy CRD with one object in the GPU operator's default state.

Each test states the ClusterPolicy it starts from: ``before`` (the operator's default state) or
``configured`` (as gpu-stack.yml leaves it), so they pass in any order. The module fixture puts
back what it found at the end, so other test files see the sandbox as it was.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import shutil
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s

from tests.helpers import ROOT, node_rows, recap, run_playbook

pytestmark = pytest.mark.sandbox

CASES = ROOT / "tests" / "fixtures" / "gpu-isolation"
ENV = "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED"
DEFAULT_SPEC = {"devicePlugin": {"enabled": True}, "toolkit": {"enabled": True, "installDir": "/usr/local/nvidia"},
                "cdi": {"default": False, "enabled": False}}


# --- helpers ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def api(sandbox):
    with sandbox.api_client() as a:
        yield a


def read_policy(api) -> dict:
    return k8s.CustomObjectsApi(api).get_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "cluster-policy")


def replace_spec(api, spec: dict) -> None:
    obj = read_policy(api)
    obj["spec"] = spec
    k8s.CustomObjectsApi(api).replace_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "cluster-policy", obj)


@pytest.fixture(scope="module", autouse=True)
def saved_policy(api):
    """The ClusterPolicy's spec as it was before these tests, put back after them."""
    saved = copy.deepcopy(read_policy(api)["spec"])
    yield saved
    replace_spec(api, saved)


@pytest.fixture
def before(api, saved_policy):
    """The ClusterPolicy in the operator's default state (as a cluster bcd never configured has it)."""
    spec = copy.deepcopy(saved_policy)
    spec.update(copy.deepcopy(DEFAULT_SPEC))
    spec["toolkit"].pop("env", None)
    spec["cdi"].pop("nriPluginEnabled", None)
    replace_spec(api, spec)


@pytest.fixture
def configured(api, saved_policy):
    """The ClusterPolicy as gpu-stack.yml configures it (run when it is not)."""
    spec = read_policy(api)["spec"]
    if not (spec.get("devicePlugin", {}).get("enabled") is False and {"name": ENV, "value": "false"} in spec["toolkit"].get("env", [])
            and spec.get("cdi", {}).get("enabled") is True and spec["cdi"].get("nriPluginEnabled") is False):
        run = run_playbook("gpu-stack.yml")
        assert run.returncode == 0, run.stdout[-3000:]


@pytest.fixture(scope="module")
def gpu_names(sandbox):
    return sandbox.gpu_node_names()


def doctor(tmp_path: Path, *extra: str, inventories: tuple[str, ...] = ()):
    report = tmp_path / f"report-{time.monotonic_ns()}.json"
    inv = [a for i in inventories for a in ("-i", i)]
    if inv:
        inv = ["-i", "inventories/sandbox", *inv]
    run = run_playbook("doctor.yml", *inv, "-e", f"bcd_report_out={report}", *extra)
    data = json.loads(report.read_text()) if report.exists() else None
    return run, data


def verdicts(data) -> dict[str, str]:
    return {n["name"]: n["verdict"] for n in data["nodes"]}


def checks_of(data, name) -> set[str]:
    return {f["check"] for n in data["nodes"] if n["name"] == name for f in n["findings"]}


def gate_playbook(tmp_path: Path) -> Path:
    """A play shaped as adopt-cluster.yml's preflight: the gate, then a task standing for the mint."""
    path = tmp_path / "gate.yml"
    path.write_text(yaml.safe_dump([{
        "name": "Gate then mint", "hosts": "clusters", "gather_facts": False,
        "module_defaults": {"group/bcd.kubernetes.bcd": {"config": "{{ lookup('bcd.kubernetes.bcd_inventory') }}"}},
        "tasks": [
            {"name": "The GPU isolation gate", "ansible.builtin.include_role": {"name": "gpu_stack", "tasks_from": "verify"}},
            {"name": "Mint", "ansible.builtin.debug": {"msg": "MINTING-A-TOKEN-NOW"}},
        ],
    }]))
    return path


def run_gate(tmp_path: Path, *extra: str):
    return run_playbook(str(gate_playbook(tmp_path)), "-i", "inventories/sandbox", *extra,
                        env={"ANSIBLE_ROLES_PATH": str(ROOT / "roles")})


def gpu_nodes_inventory(tmp_path: Path, roots: dict[str, Path], unreachable: tuple[str, ...] = ()) -> str:
    hosts = {name: {"bcd_node_root": str(root)} for name, root in roots.items()}
    for name in unreachable:  # a node Ansible cannot log in to
        hosts[name] = {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 1,
                       "ansible_ssh_common_args": "-o ConnectTimeout=2 -o BatchMode=yes"}
    path = tmp_path / "gpu_nodes.yml"
    path.write_text(yaml.safe_dump({"gpu_nodes": {"hosts": hosts}}))
    return str(path)


# --- configure and verify -----------------------------------------------------------------------

@pytest.mark.usefixtures("before")
def test_doctor_shows_the_cluster_level_findings_before(sandbox, tmp_path, gpu_names):
    run, data = doctor(tmp_path)
    assert run.returncode != 0, run.stdout[-3000:]
    assert "GPU isolation:" in run.stdout and "is exposed" in run.stdout
    assert set(verdicts(data)) == set(gpu_names), "every selected node, and only those (no cpu-node)"
    for name in gpu_names:
        assert verdicts(data)[name] == "exposed"
        assert checks_of(data, name) == {"operator-device-plugin", "operator-toolkit-env", "operator-cdi"}
        node = next(n for n in data["nodes"] if n["name"] == name)
        assert node["node_files"] == "not read" and all(f["where"] == "ClusterPolicy/cluster-policy" for f in node["findings"])
    assert data["resource_slices"].startswith("resource.k8s.io/")
    assert data["cluster_policies"] == ["cluster-policy"]


@pytest.mark.usefixtures("before")
def test_check_mode_changes_nothing(api):
    before = read_policy(api)
    run = run_playbook("gpu-stack.yml", "--check", "--diff")
    assert run.returncode == 0, run.stdout[-3000:]
    assert recap(run.stdout)["sandbox"]["changed"] == 1, "it says it would patch the ClusterPolicy"
    assert ENV in run.stdout, "--diff shows the env entry going in"
    after = read_policy(api)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert after["spec"] == before["spec"]


@pytest.mark.usefixtures("before")
def test_gpu_stack_isolates_the_cluster_and_a_second_run_changes_nothing(api, gpu_names):
    run = run_playbook("gpu-stack.yml", "--diff")
    out = run.stdout
    assert run.returncode == 0, out[-3000:]
    assert recap(out)["sandbox"]["changed"] == 1
    spec = read_policy(api)["spec"]
    assert spec["devicePlugin"]["enabled"] is False
    assert spec["toolkit"]["env"] == [{"name": ENV, "value": "false"}]
    assert spec["cdi"]["enabled"] is True and spec["cdi"]["nriPluginEnabled"] is False
    # the fields gpu-stack.yml does not own are left alone
    assert spec["toolkit"]["installDir"] == "/usr/local/nvidia" and spec["driver"] == {"enabled": True}
    # the Helm warning and the values to keep
    flat = " ".join(out.split())
    assert "helm upgrade" in flat and "Keep these values in your Helm values file" in flat
    assert "nriPluginEnabled: false" in out
    # the gate ran after configuring, and every node is isolated on the ClusterPolicy's evidence
    for name in gpu_names:
        assert f"{name}  isolated" in out

    second = run_playbook("gpu-stack.yml")
    assert second.returncode == 0, second.stdout[-3000:]
    assert recap(second.stdout)["sandbox"]["changed"] == 0


@pytest.mark.usefixtures("configured")
def test_doctor_shows_no_finding_after(tmp_path, gpu_names):
    run, data = doctor(tmp_path)
    assert run.returncode == 0, run.stdout[-3000:]
    assert verdicts(data) == {name: "isolated" for name in gpu_names}
    assert data["passed"] is True and data["cluster_findings"] == []
    assert all(n["findings"] == [] for n in data["nodes"])
    assert all(any("NOT read" in note for note in n["notes"]) for n in data["nodes"]), "says the files were not read"


@pytest.mark.usefixtures("configured")
def test_env_entries_already_there_are_kept(api):
    spec = read_policy(api)["spec"]
    spec["toolkit"]["env"] = [{"name": "CONTAINERD_SOCKET", "value": "/run/k3s/containerd/containerd.sock"},
                              {"name": ENV, "value": "true"},
                              {"name": "RUNTIME_CONFIG_SOURCE", "value": "file"}]
    replace_spec(api, spec)
    run = run_playbook("gpu-stack.yml")
    assert run.returncode == 0, run.stdout[-3000:]
    assert read_policy(api)["spec"]["toolkit"]["env"] == [
        {"name": "CONTAINERD_SOCKET", "value": "/run/k3s/containerd/containerd.sock"},
        {"name": "RUNTIME_CONFIG_SOURCE", "value": "file"},
        {"name": ENV, "value": "false"},
    ]
    assert recap(run_playbook("gpu-stack.yml").stdout)["sandbox"]["changed"] == 0


# --- the gate -----------------------------------------------------------------------------------

@pytest.mark.usefixtures("configured")
def test_a_node_with_allocatable_nvidia_gpu_fails_the_gate_before_the_mint(sandbox, api, tmp_path, gpu_names):
    core = k8s.CoreV1Api(api)
    name = gpu_names[1]
    core.patch_node_status(name, {"status": {"allocatable": {"nvidia.com/gpu": "8"}}})
    try:
        run = run_gate(tmp_path)
        assert run.returncode != 0
        assert f"GPU isolation: {name} is exposed" in run.stdout
        assert "MINTING-A-TOKEN-NOW" not in run.stdout, "the play stopped at the gate"
        run, data = doctor(tmp_path)
        assert run.returncode != 0
        assert verdicts(data)[name] == "exposed" and checks_of(data, name) == {"device-plugin"}
        finding = next(f for n in data["nodes"] if n["name"] == name for f in n["findings"])
        assert finding["where"] == f"Node/{name}" and "nvidia.com/gpu=8" in finding["message"]
        assert all(v == "isolated" for n, v in verdicts(data).items() if n != name)

        # bcd_gpu_isolation_enforce: false turns the gate into a warning
        run = run_gate(tmp_path, "-e", "bcd_gpu_isolation_enforce=false")
        assert run.returncode == 0, run.stdout[-3000:]
        assert "MINTING-A-TOKEN-NOW" in run.stdout
        assert "only a warning" in run.stdout + run.stderr
    finally:
        core.patch_node_status(name, [{"op": "remove", "path": "/status/allocatable/nvidia.com~1gpu"}])
    assert "nvidia.com/gpu" not in (core.read_node(name).status.allocatable or {})
    assert run_gate(tmp_path).returncode == 0


def _slice(name, driver, node=None):
    spec = {"driver": driver, "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0"}]}
    if node:
        spec["nodeName"] = node
    else:
        spec["allNodes"] = True
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}, "spec": spec}


@pytest.mark.usefixtures("configured")
def test_a_gpu_nvidia_com_resource_slice_fails_the_gate(api, tmp_path, gpu_names):
    custom = k8s.CustomObjectsApi(api)
    target = gpu_names[-1]
    made = []
    try:
        for body in (_slice("nvidia-gpu-on-one", "gpu.nvidia.com", target), _slice("bcd-own", "gpu.bcd.dev", target)):
            custom.create_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", body)
            made.append(body["metadata"]["name"])
        run = run_gate(tmp_path)
        assert run.returncode != 0 and "MINTING-A-TOKEN-NOW" not in run.stdout
        run, data = doctor(tmp_path)
        assert verdicts(data)[target] == "exposed" and checks_of(data, target) == {"dra-driver"}
        assert all(v == "isolated" for n, v in verdicts(data).items() if n != target), "bcd's own driver is no finding"
        assert [f["where"] for f in data["cluster_findings"]] == ["ResourceSlice/nvidia-gpu-on-one"]

        # a slice with no nodeName concerns every node
        custom.create_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", _slice("nvidia-gpu-all", "gpu.nvidia.com"))
        made.append("nvidia-gpu-all")
        run, data = doctor(tmp_path)
        assert set(verdicts(data).values()) == {"exposed"}
    finally:
        for name in made:
            custom.delete_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", name)
    assert run_gate(tmp_path).returncode == 0


@pytest.mark.usefixtures("configured")
def test_other_device_plugins_gpu_resources_fail_the_gate(api, tmp_path, gpu_names):
    """Volcano's vGPU, Alibaba's GPU sharing and HAMi's memory resources on Node allocatable are
    another device plugin's GPUs; bcd_foreign_gpu_resources adds a resource of the operator's own."""
    core = k8s.CoreV1Api(api)
    given = {gpu_names[0]: "volcano.sh/vgpu-number", gpu_names[1]: "aliyun.com/gpu-mem",
             gpu_names[2]: "example.com/vgpu-slice"}
    if len(gpu_names) > 3:
        given[gpu_names[3]] = "nvidia.com/gpumem"
    for name, resource in given.items():
        core.patch_node_status(name, {"status": {"allocatable": {resource: "4"}}})
    try:
        run, data = doctor(tmp_path)
        assert run.returncode != 0
        for name, resource in given.items():
            if resource.startswith("example.com/"):
                assert verdicts(data)[name] == "isolated", "not a known GPU resource without the variable"
                continue
            assert verdicts(data)[name] == "exposed" and checks_of(data, name) == {"device-plugin"}
            (f,) = next(n["findings"] for n in data["nodes"] if n["name"] == name)
            assert f"{resource}=4" in f["message"] and f["where"] == f"Node/{name}"
        run, data = doctor(tmp_path, "-e", json.dumps({"bcd_foreign_gpu_resources": ["example.com/vgpu-*"]}))
        assert verdicts(data)[gpu_names[2]] == "exposed"
        assert "bcd_foreign_gpu_resources (example.com/vgpu-*)" in next(
            f["message"] for n in data["nodes"] if n["name"] == gpu_names[2] for f in n["findings"])
        # a bad pattern is refused, naming the variable, before anything is read
        run, _ = doctor(tmp_path, "-e", json.dumps({"bcd_foreign_gpu_resources": ["vgpu"]}))
        assert run.returncode != 0 and "INVALID_CONFIG: bcd_foreign_gpu_resources" in run.stdout
    finally:
        for name, resource in given.items():
            core.patch_node_status(name, [{"op": "remove", "path": "/status/allocatable/" + resource.replace("/", "~1")}])
    run, data = doctor(tmp_path)
    assert set(verdicts(data).values()) == {"isolated"}, data["nodes"]


@pytest.mark.usefixtures("configured")
def test_several_cluster_policies_are_judged_by_the_one_the_operator_acts_on(api, tmp_path):
    """The operator acts on the oldest ClusterPolicy and marks the others ignored: gpu-stack.yml
    configures every one, the verdict follows the active one, a note names the ignored one."""
    custom = k8s.CustomObjectsApi(api)
    second = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "zz-second"},
              "spec": copy.deepcopy(DEFAULT_SPEC)}
    custom.create_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", second)
    try:
        # the operator's mark (the sandbox has no operator to set it)
        custom.patch_cluster_custom_object_status("nvidia.com", "v1", "clusterpolicies", "zz-second",
                                                  {"status": {"state": "ignored"}})
        run, data = doctor(tmp_path)
        assert run.returncode == 0, run.stdout[-3000:]
        assert set(verdicts(data).values()) == {"isolated"}
        assert data["active_cluster_policy"] == "cluster-policy" and data["cluster_findings"] == []
        assert all(any("ignores ClusterPolicy/zz-second" in x for x in n["notes"]) for n in data["nodes"])

        run = run_playbook("gpu-stack.yml")
        assert run.returncode == 0, run.stdout[-3000:]
        configured = custom.get_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "zz-second")["spec"]
        assert configured["devicePlugin"]["enabled"] is False and configured["cdi"]["enabled"] is True
    finally:
        custom.delete_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "zz-second")


@pytest.mark.usefixtures("configured")
def test_the_toolkit_preset_follows_the_install_dir(api, tmp_path):
    """A ClusterPolicy whose toolkit.installDir is not the default (GKE COS): the gpu-operator
    preset would mount the wrong directory, so the gate says not-ready with the fix; the preset
    with install_dir mounts the right one."""
    policy = read_policy(api)
    spec = copy.deepcopy(policy["spec"])
    spec["toolkit"]["installDir"] = "/home/kubernetes/bin/nvidia"
    replace_spec(api, spec)
    try:
        run, data = doctor(tmp_path)
        assert run.returncode != 0
        for n in data["nodes"]:
            (f,) = [f for f in n["readiness"] if f["check"] == "toolkit-install-dir"]
            assert n["ready"] == "not-ready" and f["where"] == "ClusterPolicy/cluster-policy"
            assert "set bcd_nvidia_toolkit: {preset: gpu-operator, install_dir: /home/kubernetes/bin/nvidia}" in f["fix"]
        value = {"preset": "gpu-operator", "install_dir": "/home/kubernetes/bin/nvidia"}
        run, data = doctor(tmp_path, "-e", json.dumps({"bcd_nvidia_toolkit": value}))
        assert run.returncode == 0, run.stdout[-3000:]
        assert not [f for n in data["nodes"] for f in n["readiness"] if f["check"] == "toolkit-install-dir"]
    finally:
        spec["toolkit"]["installDir"] = policy["spec"]["toolkit"].get("installDir", "/usr/local/nvidia")
        replace_spec(api, spec)


def test_an_api_error_is_an_error_not_no_findings(sandbox, tmp_path):
    bad = tmp_path / "kubeconfig"
    config = yaml.safe_load(Path(sandbox.kubeconfig).read_text())
    for c in config["clusters"]:
        c["cluster"]["server"] = "https://127.0.0.1:1"
    bad.write_text(yaml.safe_dump(config))
    run = run_gate(tmp_path, "-e", f"bcd_kubeconfig={bad}")
    assert run.returncode != 0 and "MINTING-A-TOKEN-NOW" not in run.stdout
    # the gate chooses the cluster first (its settings step reads /version), and fails there
    out = " ".join(run.stdout.split())
    assert f"GET /version: cannot reach the Kubernetes API (kubeconfig {bad}, context" in out, out[-3000:]
    assert "Traceback" not in run.stdout + run.stderr


# --- node files -----------------------------------------------------------------------------------

@pytest.mark.usefixtures("configured")
def test_node_files_from_gpu_nodes_hosts_and_collected_roots(tmp_path, gpu_names):
    n1, n2, n3 = gpu_names[:3]
    roots = {n1: tmp_path / n1, n2: tmp_path / n2}
    shutil.copytree(CASES / "01-containerd-v2-nvidia-no-toolkit-config", roots[n1])
    shutil.copytree(CASES / "03a-operator-toolkit-dir-false", roots[n2])
    collected = tmp_path / "collected" / n3
    shutil.copytree(CASES / "12-crio-oci-hook-always", collected)
    inv = gpu_nodes_inventory(tmp_path, roots, unreachable=("gpu-node-99",))
    run, data = doctor(tmp_path, "-e", json.dumps({"bcd_node_roots": {n3: str(collected)}}), inventories=(inv,))
    assert run.returncode != 0
    by = {n["name"]: n for n in data["nodes"]}
    # the folders are read under the sandbox inventory's local connection, and the report says so
    assert by[n1]["verdict"] == "exposed" and by[n1]["node_files"] == f"from {n1} (connection local)"
    assert by[n1]["findings"][0]["where"] == "/etc/nvidia-container-runtime/config.toml"
    assert by[n2]["verdict"] == "isolated" and by[n2]["node_files"] == f"from {n2} (connection local)"
    assert by[n3]["verdict"] == "exposed" and by[n3]["node_files"] == f"from {collected}"
    # a gpu_nodes host that is not one of the cluster's selected Nodes is reported, not checked
    assert data["unmatched_node_files"] == ["gpu-node-99"]


@pytest.mark.usefixtures("configured")
def test_an_unreachable_gpu_node_is_unverifiable(tmp_path, gpu_names):
    n1 = gpu_names[0]
    inv = gpu_nodes_inventory(tmp_path, {}, unreachable=(n1,))
    run, data = doctor(tmp_path, inventories=(inv,))
    assert run.returncode != 0
    node = next(n for n in data["nodes"] if n["name"] == n1)
    assert node["verdict"] == "unverifiable" and node["findings"][0]["check"] == "node-files"


@pytest.mark.usefixtures("configured")
@pytest.mark.long  # slow: make test-long keeps make test within its budget
def test_packages_mode_on_the_sandbox(tmp_path, gpu_names):
    """Packages mode end to end: nvidia-ctk on each gpu_nodes host (folders), then the gate passes
    on node files read on the nodes; a node without access is unverifiable."""
    from tests.unit.plugins.modules.test_gpu_isolation_packages import nvidia_ctk

    # the cluster level isolated first (the ClusterPolicy; changes nothing after the tests above)
    first = run_playbook("gpu-stack.yml")
    assert first.returncode == 0, first.stdout[-3000:]
    roots = {}
    # exposed cases whose runtime handler bcd's RuntimeClass names (nvidia) is defined, so that once
    # isolated they are ready too; no GPU here, so each gets the UUID-named CDI specification the
    # driver would give nvidia-ctk
    cases = ("01-containerd-v2-nvidia-no-toolkit-config", "07-crio-dropin-key-commented", "05-containerd-imports-dropin")
    for name, case in zip(gpu_names, itertools.cycle(cases)):  # every GPU node (earlier tests may have added some)
        roots[name] = tmp_path / name
        shutil.copytree(CASES / case, roots[name])
        # the node's containerd release, as a collected root records it (case 05's drop-in has no
        # runc, which containerd 1.7 would need)
        (roots[name] / "containerd-version").write_text("containerd github.com/containerd/containerd/v2 v2.1.4 x\n")
        (roots[name] / "var/run/cdi").mkdir(parents=True)
        (roots[name] / "var/run/cdi/nvidia.yaml").write_text(
            "cdiVersion: 0.6.0\nkind: nvidia.com/gpu\ndevices:\n- name: GPU-0f1e2d3c-aaaa-bbbb-cccc-0123456789ab\n")
    inv = gpu_nodes_inventory(tmp_path, roots)
    args = ("-i", "inventories/sandbox", "-i", inv, "-e", "bcd_nvidia_toolkit=packages",
            "-e", f"gpu_stack_nvidia_ctk={nvidia_ctk()}")
    run = run_playbook("gpu-stack.yml", *args)
    assert run.returncode == 0, run.stdout[-4000:]
    for name in roots:
        rows = node_rows(run.stdout, name)
        assert rows and all((r[0], r[1], r[3]) == ("isolated", "ready", f"from {name} (connection local)")
                            for r in rows), (name, rows, run.stdout[-3000:])
    assert recap(run_playbook("gpu-stack.yml", *args).stdout)["sandbox"]["changed"] == 0

    # without node access, packages mode cannot prove anything
    run, data = doctor(tmp_path, "-e", "bcd_nvidia_toolkit=packages")
    assert run.returncode != 0
    assert set(verdicts(data).values()) == {"unverifiable"}
    assert all(checks_of(data, n) == {"no-node-access"} for n in verdicts(data))


# --- the toolkit DaemonSet ------------------------------------------------------------------------

def _toolkit_daemonset(env_value: str | None) -> dict:
    env = [{"name": ENV, "value": env_value}] if env_value is not None else []
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "nvidia-container-toolkit-daemonset", "namespace": "gpu-operator",
                     "labels": {"app": "nvidia-container-toolkit-daemonset"}},
        "spec": {
            "selector": {"matchLabels": {"app": "nvidia-container-toolkit-daemonset"}},
            "template": {
                "metadata": {"labels": {"app": "nvidia-container-toolkit-daemonset"}},
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.present": "true"},
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "nvidia-container-toolkit-ctr", "image": "nvcr.io/nvidia/k8s/container-toolkit:v1.17.8",
                                    "env": env}],
                },
            },
        },
    }


def test_gpu_stack_waits_for_the_toolkit_daemonset(sandbox, api):
    """The operator rolls its toolkit DaemonSet with the new env; gpu-stack.yml waits for that. The
    sandbox has no operator, so the test plays it: a DaemonSet already rolled with the env passes,
    one that never gets the env times out with a failure."""
    apps = k8s.AppsV1Api(api)
    core = k8s.CoreV1Api(api)
    try:
        core.read_namespace("gpu-operator")
    except k8s.ApiException:
        sandbox.create_namespace("gpu-operator")
    apps.create_namespaced_daemon_set("gpu-operator", _toolkit_daemonset("false"))
    try:
        # every ok item printed (the shipped ansible.cfg prints an ok task only for what it says)
        run = run_playbook("gpu-stack.yml", "-e", "gpu_stack_toolkit_rollout_timeout=120", env={"ANSIBLE_DISPLAY_OK_HOSTS": "true"})
        assert run.returncode == 0, run.stdout[-3000:]
        assert "ok: [sandbox] => (item=gpu-operator/nvidia-container-toolkit-daemonset)" in run.stdout

        apps.replace_namespaced_daemon_set("nvidia-container-toolkit-daemonset", "gpu-operator", _toolkit_daemonset(None))
        run = run_playbook("gpu-stack.yml", "-e", "gpu_stack_toolkit_rollout_timeout=10")
        assert run.returncode != 0
        assert "Wait for the toolkit DaemonSet to roll out with the variable false" in run.stdout
        # the failure names the DaemonSet and what it lacks, not only the task
        assert (f"DaemonSet gpu-operator/nvidia-container-toolkit-daemonset has a pod template that does not set {ENV} "
                "(kubectl -n gpu-operator rollout status daemonset/nvidia-container-toolkit-daemonset)") in run.stdout, run.stdout[-3000:]

        # adopt-cluster.yml: its preflight lists the toolkit DaemonSets (the ClusterPolicy has bcd's
        # values, so the gpu_stack role does not list them again) and the wait still judges them,
        # before any token exists
        run = run_playbook("adopt-cluster.yml", "-e", "gpu_stack_toolkit_rollout_timeout=10",
                           env={"ANSIBLE_DISPLAY_SKIPPED_HOSTS": "true"})
        assert run.returncode != 0, run.stdout[-3000:]
        find = run.stdout.split("Find the operator's toolkit DaemonSet (unless the caller's preflight just did)", 1)[1]
        assert find.split("\n", 1)[1].split("TASK [", 1)[0].strip().startswith("skipping: [sandbox]"), find[:500]
        assert "failed at Name each toolkit DaemonSet that did not roll out, and why" in run.stdout, run.stdout[-3000:]
        assert f"nvidia-container-toolkit-daemonset has a pod template that does not set {ENV}" in run.stdout
        assert "item=gpu-operator/nvidia-container-toolkit-daemonset" in run.stdout, run.stdout[-6000:]
        # the failed item is one line, not the DaemonSet it read at every attempt
        assert re.search(r"failed: \[sandbox\] \(item=gpu-operator/nvidia-container-toolkit-daemonset\): its condition did "
                         r"not hold after \d+ attempt\(s\) \(-v shows its whole result\)", run.stdout), run.stdout[-6000:]
        assert "nvcr.io/nvidia/k8s/container-toolkit" not in run.stdout, run.stdout[-6000:]
        assert "Mint" not in run.stdout.split("Wait for the toolkit DaemonSet", 1)[1].split("PLAY RECAP", 1)[0]
    finally:
        apps.delete_namespaced_daemon_set("nvidia-container-toolkit-daemonset", "gpu-operator")



# --- included from another play (as adopt-cluster.yml does) -------------------------------------

def test_both_entry_points_work_included_from_another_play(api, tmp_path):
    """Configure, then the gate, then the mint, in one play shaped like adopt-cluster.yml's."""
    spec = read_policy(api)["spec"]
    spec.update(copy.deepcopy(DEFAULT_SPEC))
    replace_spec(api, spec)
    play = tmp_path / "adopt-like.yml"
    play.write_text(yaml.safe_dump([{
        "name": "Adopt-like", "hosts": "clusters", "gather_facts": False,
        "vars": {"ansible_python_interpreter": "{{ ansible_playbook_python }}"},
        "module_defaults": {"group/kubernetes.core.k8s": {"kubeconfig": "{{ bcd_kubeconfig | default(omit) }}"},
                            "group/bcd.kubernetes.bcd": {"config": "{{ lookup('bcd.kubernetes.bcd_inventory') }}"}},
        "tasks": [
            {"name": "Configure GPU isolation", "ansible.builtin.include_role": {"name": "gpu_stack"}},
            {"name": "The GPU isolation gate", "ansible.builtin.include_role": {"name": "gpu_stack", "tasks_from": "verify"}},
            {"name": "Mint", "ansible.builtin.debug": {"msg": "MINTING-A-TOKEN-NOW"}},
        ],
    }]))
    before = read_policy(api)["metadata"]["resourceVersion"]
    # --check: nothing changes; the gate judges the cluster as it is, and says it does not stop a dry run
    run = run_playbook(str(play), "-i", "inventories/sandbox", "--check", env={"ANSIBLE_ROLES_PATH": str(ROOT / "roles")})
    assert run.returncode == 0, run.stdout[-3000:]
    assert "the GPU isolation configuration above was not applied" in " ".join((run.stdout + run.stderr).split())
    assert read_policy(api)["metadata"]["resourceVersion"] == before
    # for real: configured, verified, then the mint
    run = run_playbook(str(play), "-i", "inventories/sandbox", env={"ANSIBLE_ROLES_PATH": str(ROOT / "roles")})
    assert run.returncode == 0, run.stdout[-3000:]
    assert "MINTING-A-TOKEN-NOW" in run.stdout
    assert read_policy(api)["spec"]["devicePlugin"]["enabled"] is False


# --- the GPU operator's DRA install: no ClusterPolicy ----------------------------------------------

def test_dra_without_a_cluster_policy_reports_the_driver_and_creates_none(api, tmp_path, gpu_names):
    """The GPU operator installed for DRA only: ResourceSlices of gpu.nvidia.com, no
    ClusterPolicy. doctor.yml reports the driver; gpu-stack.yml stops naming it and creates no
    ClusterPolicy. (The ClusterPolicy is deleted and made again.)"""
    custom = k8s.CustomObjectsApi(api)
    saved = read_policy(api)
    custom.delete_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "cluster-policy")
    target = gpu_names[0]
    custom.create_cluster_custom_object("resource.k8s.io", "v1", "resourceslices",
                                        _slice("gpu-nvidia-dra", "gpu.nvidia.com", target))
    try:
        run, data = doctor(tmp_path)
        assert run.returncode != 0
        assert verdicts(data)[target] == "exposed" and "dra-driver" in checks_of(data, target)
        assert [f["where"] for f in data["cluster_findings"]] == ["ResourceSlice/gpu-nvidia-dra"]
        assert "gpu.nvidia.com" in data["cluster_findings"][0]["message"]

        run = run_playbook("gpu-stack.yml")
        assert run.returncode != 0
        said = " ".join(run.stdout.split())
        assert "has no ClusterPolicy" in said and "bcd creates none" in said
        assert "The DRA driver gpu.nvidia.com hands out GPUs here (ResourceSlices gpu-nvidia-dra)" in said
        assert custom.list_cluster_custom_object("nvidia.com", "v1", "clusterpolicies")["items"] == []
    finally:
        custom.delete_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", "gpu-nvidia-dra")
        meta = saved["metadata"]
        custom.create_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", {
            "apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
            "metadata": {k: meta[k] for k in ("name", "labels", "annotations") if meta.get(k)},
            "spec": saved["spec"]}, field_manager="helm")
        # and its status, which the operator writes (the sandbox has no operator to write it)
        custom.patch_cluster_custom_object_status("nvidia.com", "v1", "clusterpolicies", "cluster-policy",
                                                  {"status": saved.get("status") or {"state": "ready"}})

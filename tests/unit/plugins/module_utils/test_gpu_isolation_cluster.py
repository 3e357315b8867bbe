"""The cluster-level rules and how they combine with node files, on objects shaped as the API
returns them. (Reading them from a real API server is tested in tests/integration/test_gpu_stack.py.)
"""

from __future__ import annotations

import copy

import pytest
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_gpu_isolation import (
    EXPOSED,
    ISOLATED,
    UNVERIFIABLE,
    cluster_policy_findings,
    combine,
    is_gpu_dra_driver,
    node_allocatable_findings,
    resource_slice_findings,
    table,
    verify_node_root,
)

from tests.helpers import ROOT

CASES = ROOT / "tests" / "fixtures" / "gpu-isolation"
ENV = "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED"
DEFAULT_POLICY = {  # the operator's default state, as the sandbox has it
    "metadata": {"name": "cluster-policy"},
    "spec": {"devicePlugin": {"enabled": True}, "toolkit": {"enabled": True}, "cdi": {"enabled": False}},
}
ISOLATED_POLICY = {
    "metadata": {"name": "cluster-policy"},
    "spec": {
        "devicePlugin": {"enabled": False},
        "toolkit": {"enabled": True, "env": [{"name": "X", "value": "1"}, {"name": ENV, "value": "false"}]},
        "cdi": {"enabled": True, "nriPluginEnabled": False},
    },
}


def node(name, allocatable=None):
    return {"metadata": {"name": name}, "status": {"allocatable": allocatable or {"cpu": "8"}}}


def checks(findings) -> set[str]:
    return {f["check"] for f in findings}


def policy(**spec_changes):
    p = copy.deepcopy(ISOLATED_POLICY)
    for path, value in spec_changes.items():
        target = p["spec"]
        keys = path.split("__")
        for k in keys[:-1]:
            target = target.setdefault(k, {})
        if value is None:
            target.pop(keys[-1], None)
        else:
            target[keys[-1]] = value
    return p


# --- ClusterPolicy ------------------------------------------------------------------------------

def test_default_cluster_policy_fails_every_requirement():
    found = cluster_policy_findings(DEFAULT_POLICY, operator_mode=True)
    assert checks(found) == {"operator-device-plugin", "operator-toolkit-env", "operator-cdi"}
    assert all(f["where"] == "ClusterPolicy/cluster-policy" and f["fix"] for f in found)


def test_isolated_cluster_policy_has_no_findings():
    assert cluster_policy_findings(ISOLATED_POLICY, operator_mode=True) == []


def test_device_plugin_absent_means_on():
    found = cluster_policy_findings(policy(devicePlugin__enabled=None), operator_mode=True)
    assert checks(found) == {"operator-device-plugin"} and "absent" in found[0]["message"]


def test_nri_plugin_on_is_exposure():
    found = cluster_policy_findings(policy(cdi__nriPluginEnabled=True), operator_mode=True)
    assert [(f["check"], f["status"]) for f in found] == [("operator-nri-plugin", EXPOSED)]


@pytest.mark.parametrize("value,ok", [("false", True), ("0", True), ("False", True), ("true", False),
                                      ("no", False), (None, False)])
def test_toolkit_env_values(value, ok):
    env = [{"name": "X", "value": "1"}] + ([{"name": ENV, "value": value}] if value is not None else [])
    found = cluster_policy_findings(policy(toolkit__env=env), operator_mode=True)
    assert (found == []) is ok


def test_toolkit_env_last_entry_wins():
    env = [{"name": ENV, "value": "false"}, {"name": ENV, "value": "true"}]
    assert checks(cluster_policy_findings(policy(toolkit__env=env), operator_mode=True)) == {"operator-toolkit-env"}


def test_operator_toolkit_off_makes_env_irrelevant_and_cdi_matters_only_in_operator_mode():
    p = policy(toolkit__enabled=False, toolkit__env=None, cdi__enabled=False)
    assert cluster_policy_findings(p, operator_mode=False) == []
    assert checks(cluster_policy_findings(p, operator_mode=True)) == {"operator-cdi"}
    assert cluster_policy_findings(p, operator_mode=True)[0]["status"] == UNVERIFIABLE


# --- device plugins and DRA drivers ---------------------------------------------------------------

def test_allocatable_nvidia_resources():
    assert node_allocatable_findings(node("n", {"nvidia.com/gpu": "0", "cpu": "8"})) == []
    found = node_allocatable_findings(node("n", {"nvidia.com/gpu": "8", "nvidia.com/mig-1g.10gb": "2"}))
    assert [f["where"] for f in found] == ["Node/n", "Node/n"] and all(f["status"] == EXPOSED for f in found)
    assert node_allocatable_findings(node("n", {"bcd.dev/gpu": "8"})) == []


@pytest.mark.parametrize("driver,gpu", [("gpu.nvidia.com", True), ("gpu.amd.com", True), ("gpu.bcd.dev", False),
                                        ("compute-domain.nvidia.com", False), ("nvidia-gpu.example.com", True)])
def test_gpu_dra_driver_names(driver, gpu):
    assert is_gpu_dra_driver(driver) is gpu


def test_resource_slices_per_node_and_for_all_nodes():
    slices = [
        {"metadata": {"name": "a"}, "spec": {"driver": "gpu.nvidia.com", "nodeName": "n1", "devices": [{"name": "gpu-0"}]}},
        {"metadata": {"name": "b"}, "spec": {"driver": "gpu.nvidia.com", "allNodes": True, "devices": [{"name": "gpu-0"}]}},
        {"metadata": {"name": "c"}, "spec": {"driver": "gpu.nvidia.com", "nodeName": "n2", "devices": []}},
        {"metadata": {"name": "d"}, "spec": {"driver": "gpu.bcd.dev", "nodeName": "n2", "devices": [{"name": "x"}]}},
    ]
    found = resource_slice_findings(slices, "v1")
    assert [(target, f["where"]) for target, f in found] == [("n1", "ResourceSlice/a"), (None, "ResourceSlice/b")]


# --- per node -----------------------------------------------------------------------------------

def test_operator_mode_without_node_files_takes_the_cluster_policy_as_evidence():
    out = combine(nodes=[node("n1")], slices=[], slice_api="v1", policies=[ISOLATED_POLICY], mode="gpu-operator",
                  node_files={})
    (n,) = out["nodes"]
    assert n["verdict"] == ISOLATED and n["node_files"] == "not read"
    assert any("NOT read" in note for note in n["notes"])


def test_operator_mode_without_a_cluster_policy_is_unverifiable():
    out = combine(nodes=[node("n1")], slices=None, slice_api=None, policies=None, mode="gpu-operator", node_files={})
    assert out["nodes"][0]["verdict"] == UNVERIFIABLE


def test_packages_mode_without_node_files_is_unverifiable():
    out = combine(nodes=[node("n1")], slices=[], slice_api="v1", policies=None, mode="packages", node_files={})
    assert out["nodes"][0]["verdict"] == UNVERIFIABLE
    assert checks(out["nodes"][0]["findings"]) == {"no-node-access"}


def test_findings_go_to_the_nodes_they_concern():
    files = {
        "n1": {"source": "from x", "result": verify_node_root(str(CASES / "01-containerd-v2-nvidia-no-toolkit-config"))},
        "n2": {"source": "from y", "result": verify_node_root(str(CASES / "02-containerd-v2-nvidia-toolkit-false"))},
        "n3": {"source": "over SSH from n3", "error": "unreachable"},
    }
    slices = [{"metadata": {"name": "s"}, "spec": {"driver": "gpu.nvidia.com", "nodeName": "n4", "devices": [{"name": "g"}]}}]
    out = combine(
        nodes=[node("n1"), node("n2"), node("n3"), node("n4"), node("n5", {"nvidia.com/gpu": "1"})],
        slices=slices, slice_api="v1beta1", policies=[ISOLATED_POLICY], mode="packages", node_files=files,
    )
    verdicts = {n["name"]: n["verdict"] for n in out["nodes"]}
    assert verdicts == {"n1": EXPOSED, "n2": ISOLATED, "n3": UNVERIFIABLE, "n4": EXPOSED, "n5": EXPOSED}
    by = {n["name"]: n for n in out["nodes"]}
    assert checks(by["n4"]["findings"]) == {"dra-driver", "no-node-access"}
    assert checks(by["n5"]["findings"]) == {"device-plugin", "no-node-access"}
    assert by["n3"]["findings"][0]["message"].endswith("unreachable")
    assert [f["where"] for f in out["cluster_findings"]] == ["ResourceSlice/s"]


def test_cluster_policy_findings_apply_to_every_node():
    files = {"n1": {"source": "from x", "result": verify_node_root(str(CASES / "02-containerd-v2-nvidia-toolkit-false"))}}
    out = combine(nodes=[node("n1"), node("n2")], slices=None, slice_api=None, policies=[DEFAULT_POLICY],
                  mode="gpu-operator", node_files=files)
    for n in out["nodes"]:
        assert n["verdict"] == EXPOSED
        assert {"operator-device-plugin", "operator-toolkit-env"} <= checks(n["findings"])


def test_table_lists_every_finding_and_its_fix():
    out = combine(nodes=[node("n1", {"nvidia.com/gpu": "8"})], slices=[], slice_api="v1", policies=[ISOLATED_POLICY],
                  mode="gpu-operator", node_files={})
    lines = table(out["nodes"])
    assert lines[1].split()[:2] == ["n1", EXPOSED]
    assert any("Node/n1" in line for line in lines) and any(line.strip().startswith("fix:") for line in lines)
    assert table([]) == ["(no node selected)"]


# --- other device plugins, several ClusterPolicies -------------------------------------------------

@pytest.mark.parametrize(("resource", "who"), [
    ("volcano.sh/vgpu-number", "Volcano"), ("volcano.sh/vgpu-memory", "Volcano"),
    ("nvidia.com/gpumem", "HAMi"), ("nvidia.com/gpucores", "HAMi"),
    ("aliyun.com/gpu-mem", "Alibaba"), ("aliyun.com/gpu-count", "Alibaba"), ("tencent.com/vcuda-core", "Tencent"),
])
def test_other_device_plugins_gpu_resources_are_exposure(resource, who):
    (f,) = node_allocatable_findings(node("n1", {"cpu": "8", resource: "4"}))
    assert f["status"] == EXPOSED and f["check"] == "device-plugin" and f["resource"] == resource
    assert f"{resource}=4" in f["message"] and who in f["message"]


def test_the_operator_extends_the_list_and_zero_is_nothing():
    n = node("n1", {"example.com/vgpu-slice": "2", "example.com/other": "1", "volcano.sh/vgpu-cores": "0",
                    "amd.com/gpu": "1"})
    assert node_allocatable_findings(n) == []
    (f,) = node_allocatable_findings(n, ["example.com/vgpu-*"])
    assert f["resource"] == "example.com/vgpu-slice" and "bcd_foreign_gpu_resources (example.com/vgpu-*)" in f["message"]


def _aged(p, name, created, state=None):
    p = copy.deepcopy(p)
    p["metadata"] = {"name": name, "creationTimestamp": created}
    if state:
        p["status"] = {"state": state}
    return p


def test_several_cluster_policies_judged_by_the_one_the_operator_acts_on():
    active = _aged(ISOLATED_POLICY, "cluster-policy", "2025-01-01T00:00:00Z", "ready")
    ignored = _aged(DEFAULT_POLICY, "zz-second", "2025-06-01T00:00:00Z", "ignored")
    out = combine(nodes=[node("n1")], slices=[], slice_api="v1", policies=[ignored, active], mode="gpu-operator",
                  node_files={})
    (n,) = out["nodes"]
    assert n["verdict"] == ISOLATED and out["cluster_findings"] == []
    assert any("ClusterPolicy/cluster-policy" in x and "ignores ClusterPolicy/zz-second" in x for x in n["notes"])
    # the other way round: the one it acts on lets GPUs out, the ignored one would not
    out = combine(nodes=[node("n1")], slices=[], slice_api="v1", mode="gpu-operator", node_files={},
                  policies=[_aged(ISOLATED_POLICY, "zz-second", "2025-06-01T00:00:00Z", "ignored"),
                            _aged(DEFAULT_POLICY, "cluster-policy", "2025-01-01T00:00:00Z")])
    assert out["nodes"][0]["verdict"] == EXPOSED
    assert {f["where"] for f in out["cluster_findings"]} == {"ClusterPolicy/cluster-policy"}
    # without the operator's status (not reconciled yet): the oldest
    out = combine(nodes=[node("n1")], slices=[], slice_api="v1", mode="gpu-operator", node_files={},
                  policies=[_aged(DEFAULT_POLICY, "b", "2025-06-01T00:00:00Z"), _aged(ISOLATED_POLICY, "a", "2025-06-01T00:00:00Z")])
    assert out["nodes"][0]["verdict"] == ISOLATED


def test_dra_without_a_cluster_policy_reports_the_driver():
    s = {"metadata": {"name": "gpu-nvidia-n1"}, "spec": {"driver": "gpu.nvidia.com", "nodeName": "n1",
                                                          "devices": [{"name": "gpu-0"}]}}
    out = combine(nodes=[node("n1")], slices=[s], slice_api="v1", policies=[], mode="gpu-operator", node_files={})
    (n,) = out["nodes"]
    assert n["verdict"] == EXPOSED and {f["check"] for f in n["findings"]} == {"dra-driver", "no-evidence"}
    assert "gpu.nvidia.com" in next(f["message"] for f in n["findings"] if f["check"] == "dra-driver")

"""The loading rules the verifier models, one by one (bcd_runtime_config), and readiness."""

from __future__ import annotations

import pytest
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_containerd import FAMILIES
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_gpu_isolation import (
    DEFAULT_TOOLKIT_CONFIG,
    EXPOSED,
    ISOLATED,
    KEY,
    NOT_READY,
    UNVERIFIABLE,
    table,
    verify_node_root,
)

from tests.helpers import run_module
from tests.unit.plugins.module_utils.test_gpu_isolation_node import RUNC_ONLY, make_root

SAFE = f"{KEY} = false\n"
V2 = 'plugins."io.containerd.grpc.v1.cri"'
NV = "/usr/bin/nvidia-container-runtime"
UUID_SPEC = "cdiVersion: 0.6.0\nkind: nvidia.com/gpu\ndevices:\n- name: GPU-0f1e2d3c-aaaa-bbbb-cccc-0123456789ab\n"


def ignored(r) -> dict[str, str]:
    return {i["file"]: i["why"] for i in r["ignored_files"]}


# --- containerd ----------------------------------------------------------------------------------

def test_imports_load_breadth_first_relative_to_the_importing_file(tmp_path):
    root = make_root(tmp_path, {
        "/etc/containerd/config.toml": 'version = 2\nimports = ["d/a.toml", "/etc/containerd/d/b.toml"]\n',
        "/etc/containerd/d/a.toml": 'version = 2\nimports = ["nested.toml"]\n',
        "/etc/containerd/d/b.toml": "version = 2\n",
        "/etc/containerd/d/nested.toml": "version = 2\n",
    })
    (c, *_) = verify_node_root(root)["runtime_configs"]
    assert c["files"] == ["/etc/containerd/config.toml", "/etc/containerd/d/a.toml", "/etc/containerd/d/b.toml",
                          "/etc/containerd/d/nested.toml"]


# Each family's reading of these configurations is what the real releases answered (containerd
# 1.7.35, 2.2.9, 2.3.4 and 2.4.2 booted on them, sandbox/containerd.py): (state, handlers).
F17, F20, F23, F235 = FAMILIES
SCENARIOS = {
    # a later file's CRI section without the nvidia runtime: 1.7 replaces the section whole, 2.x
    # merges key by key
    "later-section": ({
        "/etc/containerd/config.toml": f'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
                                       f'[{V2}.containerd.runtimes.nvidia.options]\n  BinaryName = "{NV}"\n',
        "/etc/containerd/conf.d/50-runc.toml": f'version = 2\n[{V2}.containerd]\n  default_runtime_name = "runc"\n',
    }, {F17: ("serving", {"runc"}), F20: ("serving", {"nvidia", "runc"}), F23: ("serving", {"nvidia", "runc"}),
        F235: ("serving", {"nvidia", "runc"})}),
    # a version 3 root and an older drop-in: 2.x migrates it; 1.7 reads version 2 (the last file's)
    # and the drop-in's runtimes table replaces runc, the default runtime
    "older-dropin": ({
        "/etc/containerd/config.toml": "version = 3\nimports = ['/etc/containerd/conf.d/*.toml']\n"
                                       "[plugins.'io.containerd.cri.v1.runtime'.containerd]\n  default_runtime_name = 'runc'\n",
        "/etc/containerd/conf.d/nv.toml": f'version = 2\n[{V2}.containerd.runtimes.nvidia.options]\n  BinaryName = "{NV}"\n',
    }, {F17: ("failed", None), F20: ("serving", {"nvidia", "runc"}), F23: ("serving", {"nvidia", "runc"}),
        F235: ("serving", {"nvidia", "runc"})}),
    # a drop-in of a higher version than the root's: refused by 2.3.0-2.3.4 only among 2.x
    "higher-dropin": ({
        "/etc/containerd/config.toml": 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n',
        "/etc/containerd/conf.d/v3.toml": f"version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia.options]\n"
                                          f"  BinaryName = '{NV}'\n",
    }, {F17: ("refused", None), F20: ("serving", {"nvidia", "runc"}), F23: ("refused", None),
        F235: ("serving", {"nvidia", "runc"})}),
    # a version no release reads
    "version-7": ({
        "/etc/containerd/config.toml": f"version = 7\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia.options]\n"
                                       f"  BinaryName = '{NV}'\n",
    }, {F17: ("refused", None), F20: ("refused", None), F23: ("refused", None), F235: ("refused", None)}),
}
VERSIONS = {F17: "1.7.35", F20: "2.2.9", F23: "2.3.4", F235: "2.4.2"}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_each_family_reads_as_the_release_does(tmp_path, scenario):
    files, expected = SCENARIOS[scenario]
    root = make_root(tmp_path, files, containerd=None)
    r = verify_node_root(root)
    got = {c["family"]: (c["state"], set(c["handlers"]) if c["serves_cri"] else None) for c in r["runtime_configs"]}
    assert got == expected
    # without the node's version every family is judged, the worst counts, and a note says so
    assert any("version is unknown" in n and "worst verdict counts" in n for n in r["notes"])
    for family, (state, handlers) in expected.items():
        known = make_root(tmp_path / family, files,
                          containerd=f"containerd github.com/containerd/containerd v{VERSIONS[family]} x\n")
        one = verify_node_root(known)
        assert [c["family"] for c in one["runtime_configs"]] == [family]
        if state == "serving":
            assert one["verdict"] == (EXPOSED if "nvidia" in handlers else ISOLATED)
            assert one["ready"] == (NOT_READY if "nvidia" not in handlers else one["ready"])
        else:
            assert one["verdict"] == UNVERIFIABLE and one["ready"] == NOT_READY
            checks = {f["check"] for f in one["findings"]}
            assert checks == {"containerd-refuses" if state == "refused" else "cri-not-loaded"}


def test_the_refusal_names_the_reason(tmp_path):
    files, _ = SCENARIOS["higher-dropin"]
    root = make_root(tmp_path, files, containerd="containerd github.com/containerd/containerd/v2 v2.3.2 x\n")
    r = verify_node_root(root)
    (f,) = r["findings"]
    assert f["where"] == "/etc/containerd/conf.d/v3.toml"
    assert "drop-in config version 3 higher than root config version 2" in f["message"]
    assert next(x["check"] for x in r["readiness"] if x["status"] == NOT_READY) == "containerd-refuses"


def test_disabled_cri_in_a_dropin_disables_it_for_the_whole_containerd(tmp_path):
    root = make_root(tmp_path, {
        "/etc/containerd/config.toml": f'version = 2\nimports = ["off.toml"]\n[{V2}.containerd.runtimes.nvidia.options]\n'
                                       f'  BinaryName = "{NV}"\n',
        "/etc/containerd/off.toml": 'version = 2\ndisabled_plugins = ["io.containerd.grpc.v1.cri"]\n',
    })
    r = verify_node_root(root)
    assert r["verdict"] == UNVERIFIABLE and {f["check"] for f in r["findings"]} == {"no-cri-runtime"}
    assert [f["status"] for f in r["readiness"] if f["check"] == "runtime-handler"] == ["unknown"]


def test_a_missing_import_is_unverifiable(tmp_path):
    root = make_root(tmp_path, {"/etc/containerd/config.toml": 'version = 2\nimports = ["/etc/containerd/gone.toml"]\n'})
    r = verify_node_root(root)
    assert r["verdict"] == UNVERIFIABLE and r["findings"][0]["where"] == "/etc/containerd/gone.toml"


def test_dropins_without_a_config_toml_are_not_loaded(tmp_path):
    root = make_root(tmp_path, {"/etc/containerd/conf.d/nv.toml": f'version = 2\n[{V2}.containerd.runtimes.nvidia.options]\n'
                                                                    f'  BinaryName = "{NV}"\n'})
    r = verify_node_root(root)
    assert r["verdict"] == UNVERIFIABLE and {f["check"] for f in r["findings"]} == {"no-runtime-config"}
    assert "does not exist" in ignored(r)["/etc/containerd/conf.d/nv.toml"]


# --- k3s and RKE2 ------------------------------------------------------------------------------

@pytest.mark.parametrize("distro", ["k3s", "rke2"])
def test_v3_template_takes_precedence(tmp_path, distro):
    d = f"/var/lib/rancher/{distro}/agent/etc/containerd"
    root = make_root(tmp_path, {
        f"{d}/config-v3.toml.tmpl": "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]\n"
                                    "  runtime_type = 'io.containerd.runc.v2'\n",
        f"{d}/config.toml.tmpl": f'version = 2\n[{V2}.containerd.runtimes.nvidia.options]\n  BinaryName = "{NV}"\n',
    })
    r = verify_node_root(root)
    assert r["verdict"] == ISOLATED
    assert "takes precedence" in ignored(r)[f"{d}/config.toml.tmpl"]


def test_template_with_an_unreadable_base_judges_the_runtimes_k3s_would_add(tmp_path):
    d = "/var/lib/rancher/k3s/agent/etc/containerd"
    root = make_root(tmp_path, {
        f"{d}/config-v3.toml.tmpl": '{{ template "base" . }}\n',
        "/usr/local/nvidia/toolkit/nvidia-container-runtime": "binary",
    })
    r = verify_node_root(root)
    assert r["verdict"] == EXPOSED
    assert r["runtimes"][0]["binary"] == "/usr/local/nvidia/toolkit/nvidia-container-runtime"
    assert any("built-in base template" in n and "nvidia: /usr/local/nvidia/toolkit" in n for n in r["notes"])


def test_config_yaml_d_sets_the_default_runtime_last_wins(tmp_path):
    root = make_root(tmp_path, {
        "/var/lib/rancher/rke2/agent/etc/containerd/config.toml": f'version = 2\n[{V2}.containerd.runtimes.nvidia.options]\n'
                                                                   f'  BinaryName = "{NV}"\n',
        "/etc/rancher/rke2/config.yaml": "default-runtime: runc\n",
        "/etc/rancher/rke2/config.yaml.d/50-gpu.yaml": "default-runtime: nvidia\n",
        DEFAULT_TOOLKIT_CONFIG: SAFE,
    })
    r = verify_node_root(root)
    assert {c["default_runtime"] for c in r["runtime_configs"]} == {"nvidia"}
    assert r["verdict"] == ISOLATED


# --- CRI-O -----------------------------------------------------------------------------------------

def test_crio_dropins_in_lexical_order_the_last_value_wins(tmp_path):
    root = make_root(tmp_path, {
        "/etc/crio/crio.conf": f'[crio.runtime.runtimes.nvidia]\nruntime_path = "{NV}"\n',
        "/etc/crio/crio.conf.d/10-a.conf": '[crio.runtime]\ndefault_runtime = "nvidia"\n',
        "/etc/crio/crio.conf.d/20-b.conf": '[crio.runtime]\ndefault_runtime = "crun"\n'
                                           '[crio.runtime.runtimes.nvidia]\nruntime_path = "/usr/bin/crun"\n',
    })
    r = verify_node_root(root)
    (c,) = r["runtime_configs"]
    assert c["files"] == ["/etc/crio/crio.conf", "/etc/crio/crio.conf.d/10-a.conf", "/etc/crio/crio.conf.d/20-b.conf"]
    assert c["default_runtime"] == "crun" and c["handlers"]["nvidia"]["nvidia"] is False
    assert r["verdict"] == ISOLATED and "/etc/crio/crio.conf.d/10-a.conf" in ignored(r)


# --- readiness -------------------------------------------------------------------------------------

def test_ready_node_and_dra_registration(tmp_path):
    files = {
        "/etc/containerd/config.toml": f'version = 2\n[{V2}.containerd.runtimes.nvidia.options]\n  BinaryName = "{NV}"\n',
        DEFAULT_TOOLKIT_CONFIG: SAFE,
        "/var/run/cdi/nvidia.yaml": UUID_SPEC,
    }
    root = make_root(tmp_path, files)
    assert verify_node_root(root)["ready"] == "ready"
    r = verify_node_root(root, gpu_api="dra")
    assert r["ready"] == NOT_READY and {f["check"] for f in r["readiness"]} == {"dra-registration"}
    (tmp_path / "root/var/lib/kubelet/plugins_registry").mkdir(parents=True)
    assert verify_node_root(root, gpu_api="dra")["ready"] == "ready"
    # bcd_nvidia_runtime_class: null, no handler to check
    assert verify_node_root(root, handler=None)["ready"] == "ready"


def test_the_table_has_a_ready_column():
    lines = table([{"name": "n1", "verdict": "isolated", "ready": "not-ready", "node_files": "from /x", "findings": [],
                    "readiness": [{"status": "not-ready", "where": "/etc/cdi", "message": "m", "fix": "f"}]}])
    assert lines[0].split() == ["NODE", "VERDICT", "READY", "SOURCE", "NODE", "FILES"]
    assert lines[1].split() == ["n1", "isolated", "not-ready", "files", "from", "/x"]
    assert lines[2] == "  - [not-ready] /etc/cdi: m"


def test_node_module_reports_readiness_and_gates_on_it(tmp_path):
    from tests.unit.plugins.module_utils.test_gpu_runtime_effective_cases import CASES

    code, out = run_module("bcd_gpu_isolation_node", {"root": str(CASES / "19-no-nvidia-handler"), "node_name": "n19"})
    assert code == 0 and out["passed"] is False
    (node,) = out["report"]["nodes"]
    assert node["verdict"] == "isolated" and node["ready"] == NOT_READY
    assert {f["check"] for f in node["readiness"]} == {"runtime-handler", "cdi-spec"}
    assert "READY" in out["table"][0]


def test_deprecated_node_scope_gives_the_node_modules_answer_and_says_so():
    """bcd_gpu_isolation scope=node keeps working until 2.0.0, with a deprecation naming its successor."""
    from tests.unit.plugins.module_utils.test_gpu_runtime_effective_cases import CASES

    args = {"root": str(CASES / "19-no-nvidia-handler"), "node_name": "n19"}
    code, old = run_module("bcd_gpu_isolation", {"scope": "node", **args})
    _, new = run_module("bcd_gpu_isolation_node", args)
    assert code == 0
    (deprecation,) = old.pop("deprecations")
    assert "use module bcd.kubernetes.bcd_gpu_isolation_node" in str(deprecation) and deprecation["version"] == "2.0.0", deprecation
    assert {k: v for k, v in old.items() if k != "invocation"} == {k: v for k, v in new.items() if k != "invocation"}


def test_a_handler_whose_binary_a_template_computes_is_unknown(tmp_path):
    root = make_root(tmp_path, {
        "/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl":
            f'version = 2\n[{V2}.containerd.runtimes.nvidia.options]\n  BinaryName = "{{{{ .NodeConfig.Nvidia }}}}"\n',
        "/etc/cdi/nvidia.yaml": UUID_SPEC,
    })
    r = verify_node_root(root)
    assert r["verdict"] == UNVERIFIABLE and r["ready"] == "unknown"
    assert [(f["check"], f["status"]) for f in r["readiness"]] == [("runtime-handler", "unknown")]


def test_custom_runtime_files_are_read_as_given(tmp_path):
    """bcd_container_runtime names a file the known locations do not cover: it is a configuration
    of its own (CRI-O's format here), judged and checked for the handler."""
    root = make_root(tmp_path, {
        "/opt/crio/crio.toml": f'[crio.runtime.runtimes.nvidia]\nruntime_path = "{NV}"\n',
        DEFAULT_TOOLKIT_CONFIG: SAFE,
        "/etc/cdi/nvidia.yaml": UUID_SPEC,
    })
    r = verify_node_root(root, runtime_paths={"files": ["/opt/crio/crio.toml"], "dirs": []})
    assert r["verdict"] == ISOLATED and r["ready"] == "ready", r["readiness"]
    assert r["runtimes"][0]["file"] == "/opt/crio/crio.toml"


def test_bcd_view_lines():
    from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_gpu_isolation import bcd_lines

    assert bcd_lines(None) == []
    assert bcd_lines({"error": "UNAVAILABLE"}) == ["  - [bcd] the control plane's view could not be read: UNAVAILABLE"]
    assert "does not know this node" in bcd_lines({"id": None, "state": None, "conditions": []})[0]
    lines = bcd_lines({"id": "node_1", "state": "ready", "conditions": [
        {"type": "KubernetesReleaseStuck", "status": "True", "reason": "Timeout", "message": "kubelet stuck"}]})
    assert lines == ["  - [bcd] node_1: ready", "      condition KubernetesReleaseStuck=True (Timeout: kubelet stuck)"]


def test_combine_gives_readiness_per_node(tmp_path):
    from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_gpu_isolation import NOT_READY as NR
    from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_gpu_isolation import combine, finding

    from tests.unit.plugins.module_utils.test_gpu_runtime_effective_cases import CASES

    nodes = [{"metadata": {"name": n}, "status": {"allocatable": {}}} for n in ("a", "b")]
    policy = {"metadata": {"name": "cluster-policy"}, "spec": {
        "devicePlugin": {"enabled": False}, "cdi": {"enabled": True},
        "toolkit": {"env": [{"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED", "value": "false"}]}}}
    files = {"a": {"source": "from x", "result": verify_node_root(str(CASES / "18-cdi-spec-index-names"))}}
    out = combine(nodes=nodes, slices=[], slice_api="v1", policies=[policy], mode="gpu-operator", node_files=files)
    by = {n["name"]: n for n in out["nodes"]}
    assert (by["a"]["verdict"], by["a"]["ready"]) == ("isolated", NR)
    assert (by["b"]["verdict"], by["b"]["ready"]) == ("isolated", "unknown")
    # the handler as the cluster's RuntimeClass names it: 18 defines nvidia, not gpu
    out = combine(nodes=nodes, slices=[], slice_api="v1", policies=[policy], mode="gpu-operator", node_files=files,
                  handler="gpu")
    assert "runtime-handler" in {f["check"] for f in out["nodes"][0]["readiness"]}
    # a cluster-level readiness finding (no RuntimeClass) makes every node not-ready
    missing = finding(NR, "runtime-class", "RuntimeClass/nvidia", "m", "f")
    out = combine(nodes=nodes, slices=[], slice_api="v1", policies=[policy], mode="gpu-operator", node_files={},
                  cluster_readiness=[missing])
    assert {n["ready"] for n in out["nodes"]} == {NR}


# --- containerd.service ------------------------------------------------------------------------

BCM = "/cm/local/apps/containerd/var/etc/config.toml"


def test_the_units_config_flag_is_followed(tmp_path):
    """Base Command Manager starts containerd with another --config, set in a systemd drop-in;
    /etc/containerd/config.toml is a runc-only leftover containerd never reads."""
    root = make_root(tmp_path, {
        "/etc/containerd/config.toml": f'version = 2\n[{V2}.containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n',
        "/lib/systemd/system/containerd.service": "[Service]\nExecStart=/usr/bin/containerd\n",
        "/etc/systemd/system/containerd.service.d/10-cm.conf":
            f"[Service]\nExecStart=\nExecStart=-/usr/bin/containerd \\\n  --config {BCM}\n",
        BCM: f'version = 2\n[{V2}.containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n'
             f'[{V2}.containerd.runtimes.nvidia.options]\n  BinaryName = "{NV}"\n',
        "/etc/cdi/nvidia.yaml": UUID_SPEC,
    })
    r = verify_node_root(root, runtime_paths={"files": ["/etc/containerd/config.toml"], "dirs": []})
    assert r["verdict"] == EXPOSED and r["containerd_config"] == BCM
    assert r["runtimes"][0]["file"] == BCM
    assert "--config" in ignored(r)["/etc/containerd/config.toml"]
    (f,) = [f for f in r["readiness"] if f["check"] == "runtime-config-not-mounted"]
    assert BCM in f["message"] and BCM in f["fix"] and r["ready"] == NOT_READY
    # mounted: no readiness finding about it
    r = verify_node_root(root, runtime_paths={"files": [BCM], "dirs": []})
    assert not [f for f in r["readiness"] if f["check"] == "runtime-config-not-mounted"]


@pytest.mark.parametrize("exec_start", [
    f"/usr/bin/containerd -c {BCM}", f"/usr/bin/containerd --config={BCM}", f"@/usr/bin/containerd containerd -c={BCM}",
    f'/usr/local/bin/containerd --log-level debug --config "{BCM}"',
])
def test_config_flag_forms(tmp_path, exec_start):
    root = make_root(tmp_path, {
        "/etc/systemd/system/containerd.service": f"[Unit]\nDescription=x\n[Service]\nExecStart={exec_start}\n",
        BCM: RUNC_ONLY,
    })
    assert verify_node_root(root)["containerd_config"] == BCM


def test_a_config_flag_systemd_expands_is_unverifiable(tmp_path):
    root = make_root(tmp_path, {
        "/etc/systemd/system/containerd.service": "[Service]\nExecStart=/usr/bin/containerd --config ${CONF}\n",
        "/etc/containerd/config.toml": RUNC_ONLY,
    })
    r = verify_node_root(root)
    assert r["verdict"] == UNVERIFIABLE and "expands at run time" in r["findings"][0]["message"]


def test_a_missing_config_named_by_the_unit_is_unverifiable(tmp_path):
    root = make_root(tmp_path, {"/etc/systemd/system/containerd.service": f"[Service]\nExecStart=/usr/bin/containerd -c {BCM}\n",
                                "/etc/containerd/config.toml": RUNC_ONLY})
    r = verify_node_root(root)
    assert r["verdict"] == UNVERIFIABLE and r["findings"][0]["where"] == BCM


def test_a_version_file_that_says_nothing_leaves_every_family(tmp_path):
    root = make_root(tmp_path, {"/etc/containerd/config.toml": RUNC_ONLY}, containerd="not a version\n")
    r = verify_node_root(root)
    assert len(r["runtime_configs"]) == 4 and r["containerd_version"] is None
    assert any("does not hold `containerd --version` output" in n for n in r["notes"])

"""The renderer: exact host mounts per preset, a golden render, determinism, the contract."""

from __future__ import annotations

import hashlib
import json
import os
import tomllib

import pytest
import yaml
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_model import load
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_render import as_list, dumps, render

from tests.helpers import ROOT, TEMPLATE, base_vars

GOLDEN = ROOT / "tests" / "golden"
TEMPLATE_TEXT = TEMPLATE.read_text()
COMMON = {
    # host path: (mountPath, readOnly, hostPath type) -- seed 000, Host mounts
    "/dev": ("/dev", False, "Directory"),
    "/sys": ("/sys", False, "Directory"),
    "/var/lib/bcd": ("/var/lib/bcd", False, "DirectoryOrCreate"),
    "/etc/cdi": ("/etc/cdi", False, "DirectoryOrCreate"),
    "/var/run/cdi": ("/var/run/cdi", True, "DirectoryOrCreate"),
    "/var/lib/kubelet/device-plugins": ("/var/lib/kubelet/device-plugins", False, "Directory"),
    "/var/lib/kubelet/pod-resources": ("/var/lib/kubelet/pod-resources", True, "Directory"),
}
DRA = {
    "/var/lib/kubelet/plugins_registry": ("/var/lib/kubelet/plugins_registry", False, "DirectoryOrCreate"),
    "/var/lib/kubelet/plugins/gpu.bcd.dev": ("/var/lib/kubelet/plugins/gpu.bcd.dev", False, "DirectoryOrCreate"),
}
KUBELET = {
    "kubeadm": {"/etc/kubernetes/kubelet.conf": ("/etc/kubernetes/kubelet.conf", True, "File"),
                "/var/lib/kubelet/pki": ("/var/lib/kubelet/pki", True, "Directory")},
    "k3s": {"/var/lib/rancher/k3s/agent/kubelet.kubeconfig": ("/etc/kubernetes/kubelet.conf", True, "File"),
            "/var/lib/rancher/k3s/agent": ("/var/lib/rancher/k3s/agent", True, "Directory")},
    "rke2": {"/var/lib/rancher/rke2/agent/kubelet.kubeconfig": ("/etc/kubernetes/kubelet.conf", True, "File"),
             "/var/lib/rancher/rke2/agent": ("/var/lib/rancher/rke2/agent", True, "Directory")},
}
RUNTIME = {
    "containerd": {"/etc/containerd/config.toml": ("/etc/containerd/config.toml", True, "File")},
    # k3s and RKE2 with containerd 2.x import config-v3.toml.d; a drop-in directory may not exist yet
    "k3s": {"/var/lib/rancher/k3s/agent/etc/containerd/config.toml": ("/var/lib/rancher/k3s/agent/etc/containerd/config.toml", True, "File"),
            "/var/lib/rancher/k3s/agent/etc/containerd/config-v3.toml.d": ("/var/lib/rancher/k3s/agent/etc/containerd/config-v3.toml.d", True, "DirectoryOrCreate")},
    "rke2": {"/var/lib/rancher/rke2/agent/etc/containerd/config.toml": ("/var/lib/rancher/rke2/agent/etc/containerd/config.toml", True, "File"),
             "/var/lib/rancher/rke2/agent/etc/containerd/config-v3.toml.d": ("/var/lib/rancher/rke2/agent/etc/containerd/config-v3.toml.d", True, "DirectoryOrCreate")},
    "cri-o": {"/etc/crio/crio.conf": ("/etc/crio/crio.conf", True, "File"),
              "/etc/crio/crio.conf.d": ("/etc/crio/crio.conf.d", True, "DirectoryOrCreate")},
}
TOOLKIT = {
    "gpu-operator": {"/usr/local/nvidia/toolkit/.config": ("/usr/local/nvidia/toolkit/.config", True, "Directory")},
    "packages": {"/etc/nvidia-container-runtime": ("/etc/nvidia-container-runtime", True, "Directory")},
}


def objects(**overrides) -> dict[str, dict]:
    return {o["kind"]: o for o in render(load(base_vars(**overrides)), TEMPLATE_TEXT)}


def host_mount_set(ds: dict) -> dict[str, tuple[str, bool, str]]:
    """host path -> (mountPath in the bcd container, readOnly, hostPath type)."""
    spec = ds["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    (bcd,) = spec["containers"]
    out = {}
    for m in bcd["volumeMounts"]:
        v = volumes[m["name"]]
        if "hostPath" in v:
            out[v["hostPath"]["path"]] = (m["mountPath"], bool(m.get("readOnly")), v["hostPath"]["type"])
    # no other container mounts a host path but /var/lib/bcd (the join init container)
    for c in spec["initContainers"]:
        for m in c["volumeMounts"]:
            if "hostPath" in volumes[m["name"]]:
                assert volumes[m["name"]]["hostPath"]["path"] == "/var/lib/bcd"
    # and no hostPath volume goes unmounted
    assert {v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v} == set(out)
    return out


@pytest.mark.parametrize("kubelet", list(KUBELET))
@pytest.mark.parametrize("runtime", list(RUNTIME))
@pytest.mark.parametrize("toolkit", list(TOOLKIT))
def test_exact_host_mounts_for_each_preset(kubelet, runtime, toolkit):
    ds = objects(bcd_kubelet_credentials=kubelet, bcd_container_runtime=runtime, bcd_nvidia_toolkit=toolkit)["DaemonSet"]
    assert host_mount_set(ds) == {**COMMON, **KUBELET[kubelet], **RUNTIME[runtime], **TOOLKIT[toolkit]}


def test_exact_host_mounts_with_dra():
    ds = objects(bcd_gpu_api="dra")["DaemonSet"]
    assert host_mount_set(ds) == {**COMMON, **DRA, **KUBELET["kubeadm"], **RUNTIME["containerd"], **TOOLKIT["gpu-operator"]}


def test_exact_host_mounts_for_custom_paths():
    ds = objects(
        bcd_kubelet_credentials={"kubeconfig": "/etc/kubelet/kubeconfig", "certificate_dirs": ["/etc/kubelet/pki", "/opt/kubelet/certs"]},
        bcd_container_runtime={"files": ["/etc/containerd/config.toml"], "dirs": ["/etc/containerd/conf.d"]},
        bcd_nvidia_toolkit={"files": ["/opt/nvidia/toolkit/.config/nvidia-container-runtime/config.toml"], "dirs": []},
    )["DaemonSet"]
    assert host_mount_set(ds) == {
        **COMMON,
        "/etc/kubelet/kubeconfig": ("/etc/kubernetes/kubelet.conf", True, "File"),
        "/etc/kubelet/pki": ("/etc/kubelet/pki", True, "Directory"),
        "/opt/kubelet/certs": ("/opt/kubelet/certs", True, "Directory"),
        "/etc/containerd/config.toml": ("/etc/containerd/config.toml", True, "File"),
        "/etc/containerd/conf.d": ("/etc/containerd/conf.d", True, "DirectoryOrCreate"),
        "/opt/nvidia/toolkit/.config/nvidia-container-runtime/config.toml":
            ("/opt/nvidia/toolkit/.config/nvidia-container-runtime/config.toml", True, "File"),
    }


def test_never_var_lib_kubelet_or_etc_kubernetes_whole():
    for preset in KUBELET:
        mounts = host_mount_set(objects(bcd_kubelet_credentials=preset, bcd_gpu_api="dra")["DaemonSet"])
        assert "/var/lib/kubelet" not in mounts and "/etc/kubernetes" not in mounts
        assert not any(m[0] in ("/var/lib/kubelet", "/etc/kubernetes") for m in mounts.values())


def test_pod_shape_follows_the_seed():
    ds = objects()["DaemonSet"]
    spec = ds["spec"]
    pod = spec["template"]["spec"]
    assert spec["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
    assert pod["hostNetwork"] is True and pod["hostPID"] is False
    assert pod["automountServiceAccountToken"] is False
    assert pod["tolerations"] == [{"operator": "Exists"}]
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    (join,) = pod["initContainers"]
    assert join["name"] == "join"
    sc = join["securityContext"]
    assert sc["runAsUser"] == 0 and sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["privileged"] is False
    volumes = {v["name"]: v for v in pod["volumes"]}
    token_mount = next(m for m in join["volumeMounts"] if m["name"] == "join-token")
    assert token_mount["readOnly"] is True
    secret = volumes["join-token"]["secret"]
    assert secret["optional"] is True and secret["secretName"] == "bcd-join"
    assert secret["items"] == [{"key": "token", "path": "token", "mode": 0o400}] and secret["defaultMode"] == 0o400
    (bcd,) = pod["containers"]
    assert bcd["name"] == "bcd" and bcd["securityContext"]["privileged"] is True
    assert not any(m["name"] == "join-token" for m in bcd["volumeMounts"]), "the bcd container never sees the token"
    env = {e["name"]: e for e in bcd["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"
    assert bcd["resources"] == {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}}
    assert volumes["run-bcd"]["emptyDir"] == {"medium": "Memory"} and volumes["tmp"]["emptyDir"] == {}
    mounts = {m["mountPath"]: m["name"] for m in bcd["volumeMounts"]}
    assert mounts["/run/bcd"] == "run-bcd" and mounts["/tmp"] == "tmp" and mounts["/etc/bcd"] == "config"
    assert "bcd.dev/requires" in ds["metadata"]["annotations"]
    requires = ds["metadata"]["annotations"]["bcd.dev/requires"]
    for phrase in ("devicePlugin.enabled=false", "accept-nvidia-visible-devices-envvar-when-unprivileged = false",
                   "--device-name-strategy=uuid", "Pod Security", "revoke"):
        assert phrase in requires


def test_namespace_is_privileged_and_optional():
    ns = objects()["Namespace"]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert "Namespace" not in objects(bcd_create_namespace=False)


def test_nulls_drop_priority_and_runtime_class():
    v = base_vars()
    v.update(bcd_priority_class_name=None, bcd_nvidia_runtime_class=None)
    pod = {o["kind"]: o for o in render(load(v), TEMPLATE_TEXT)}["DaemonSet"]["spec"]["template"]["spec"]
    assert "priorityClassName" not in pod and "runtimeClassName" not in pod


def test_config_toml_parses_and_holds_the_inventory():
    cm = objects(bcd_gateway_server_name="gw.example.com", bcd_gpu_api="dra", bcd_log_level="debug")["ConfigMap"]
    cfg = tomllib.loads(cm["data"]["config.toml"])
    assert cfg["site"] == "site_01" and cfg["log_level"] == "debug"
    assert cfg["gateway"] == {"url": "https://gw.example.com:7443", "server_name": "gw.example.com"}
    assert cfg["pins"]["join_encryption"] == base_vars()["bcd_pins"]["join_encryption"]
    assert cfg["join"] == {"hosted": "kubernetes", "server": "https://compute.example.com"}
    assert cfg["host"] == {"units": False} and cfg["kubernetes"] == {"gpu_api": "dra"}
    assert "update" not in cfg
    assert "host" not in tomllib.loads(objects(bcd_host_units=True)["ConfigMap"]["data"]["config.toml"])


def test_golden_render_byte_for_byte():
    text = dumps(as_list(render(load(base_vars()), TEMPLATE_TEXT)))
    golden = GOLDEN / "render-default.json"
    if os.environ.get("BCD_UPDATE_GOLDEN") == "1":
        golden.write_text(text)
    assert text == golden.read_text()


def test_same_inputs_render_byte_identical_output():
    a = dumps(as_list(render(load(base_vars()), TEMPLATE_TEXT)))
    b = dumps(as_list(render(load(base_vars()), TEMPLATE_TEXT)))
    assert a == b


def test_only_a_config_toml_change_moves_the_config_hash():
    def sha(**o):
        objs = objects(**o)
        ann = objs["DaemonSet"]["spec"]["template"]["metadata"]["annotations"]["bcd.dev/config-sha256"]
        assert ann == hashlib.sha256(objs["ConfigMap"]["data"]["config.toml"].encode()).hexdigest()
        return ann

    base = sha()
    # DaemonSet-only changes keep it
    for o in ({"bcd_image": "registry.example.com/bcd@sha256:" + "b" * 64}, {"bcd_tolerations": []},
              {"bcd_resources": {"requests": {"cpu": "200m"}}}, {"bcd_node_selector": {}},
              {"bcd_container_runtime": "cri-o"}, {"bcd_priority_class_name": "high"}):
        assert sha(**o) == base, o
    # config.toml changes move it
    for o in ({"bcd_log_level": "debug"}, {"bcd_site_id": "site_02"}, {"bcd_gpu_api": "dra"}, {"bcd_host_units": True},
              {"bcd_gateway_url": "https://gw2.example.com"}):
        assert sha(**o) != base, o


def test_contract_file_matches_the_render():
    contract = yaml.safe_load((ROOT / "docs" / "bcd-contract.yml").read_text())
    objs = objects()
    pod = objs["DaemonSet"]["spec"]["template"]["spec"]
    (join,), (bcd,) = pod["initContainers"], pod["containers"]
    assert join["command"] == contract["commands"]["join"]
    assert bcd["command"] == contract["commands"]["node"]
    assert bcd["livenessProbe"]["exec"]["command"] == contract["commands"]["status"]
    # the files the commands name are where the volumes put them
    cfg_dir, cfg_name = os.path.split(contract["files"]["config"])
    tok_dir, tok_name = os.path.split(contract["files"]["token"])
    assert {"name": "config", "mountPath": cfg_dir, "readOnly": True} in bcd["volumeMounts"]
    assert {"name": "join-token", "mountPath": tok_dir, "readOnly": True} in join["volumeMounts"]
    assert cfg_name in objs["ConfigMap"]["data"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["join-token"]["secret"]["items"][0]["path"] == tok_name
    for name, container in (("join", join), ("bcd", bcd)):
        env = {e["name"]: e.get("value", e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")) for e in container["env"]}
        assert env == contract["env"][name]
    # config.toml keys: the always-keys are there, nothing outside always+optional ever is
    def keys(doc, prefix=""):
        for k, v in doc.items():
            if isinstance(v, dict):
                yield from keys(v, f"{prefix}{k}.")
            else:
                yield f"{prefix}{k}"

    allowed = set(contract["config_toml"]["always"]) | set(contract["config_toml"]["optional"])
    for o in ({}, {"bcd_gateway_server_name": "gw.example.com", "bcd_gpu_api": "dra"}, {"bcd_host_units": True}):
        got = set(keys(tomllib.loads(objects(**o)["ConfigMap"]["data"]["config.toml"])))
        assert set(contract["config_toml"]["always"]) <= got <= allowed
        assert not got & set(contract["config_toml"]["never"])
    assert contract["annotations"]["pod"][0] in objs["DaemonSet"]["spec"]["template"]["metadata"]["annotations"]
    assert list(objs["DaemonSet"]["metadata"]["annotations"]) == contract["annotations"]["daemonset"]


def test_jwk_goes_into_the_configmap():
    from tests.unit.plugins.module_utils.test_model import _jwk

    jwk, pin = _jwk()
    pins = dict(base_vars()["bcd_pins"], join_encryption=pin)
    objs = objects(bcd_join_encryption_jwk=jwk, bcd_pins=pins, bcd_control_plane_url=None)
    assert json.loads(objs["ConfigMap"]["data"]["join-encryption.jwk"]) == jwk
    cfg = tomllib.loads(objs["ConfigMap"]["data"]["config.toml"])
    assert cfg["join"] == {"hosted": "kubernetes", "encryption_key_file": "/etc/bcd/join-encryption.jwk"}

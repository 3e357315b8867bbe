"""The presets GPU isolation mounts and reads: k3s/RKE2's drop-in directory of their version 3
template, and the GPU operator's toolkit under another toolkit.installDir."""

from __future__ import annotations

import pytest
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_model import ConfigError, load_some

from tests.unit.plugins.module_utils.test_render import host_mount_set, objects

K3S = "/var/lib/rancher/k3s/agent/etc/containerd"


def test_k3s_preset_mounts_the_import_directory_of_its_version_3_template():
    rt = load_some({"bcd_container_runtime": "k3s"}, ["bcd_container_runtime"]).bcd_container_runtime
    assert rt.files == [f"{K3S}/config.toml"] and rt.dirs == [f"{K3S}/config-v3.toml.d"]
    mounts = host_mount_set(objects(bcd_container_runtime="k3s", bcd_kubelet_credentials="k3s")["DaemonSet"])
    # created empty where k3s has no drop-in directory yet, so bcd's pod still starts
    assert mounts[f"{K3S}/config-v3.toml.d"] == (f"{K3S}/config-v3.toml.d", True, "DirectoryOrCreate")


def test_gpu_operator_preset_follows_the_install_dir():
    value = {"preset": "gpu-operator", "install_dir": "/home/kubernetes/bin/nvidia"}
    tk = load_some({"bcd_nvidia_toolkit": value}, ["bcd_nvidia_toolkit"]).bcd_nvidia_toolkit
    assert tk.preset == "gpu-operator" and tk.dirs == ["/home/kubernetes/bin/nvidia/toolkit/.config"]
    mounts = host_mount_set(objects(bcd_nvidia_toolkit=value)["DaemonSet"])
    assert mounts["/home/kubernetes/bin/nvidia/toolkit/.config"] == (
        "/home/kubernetes/bin/nvidia/toolkit/.config", True, "Directory")
    assert "/usr/local/nvidia/toolkit/.config" not in mounts


@pytest.mark.parametrize(("value", "says"), [
    ({"preset": "packages", "install_dir": "/opt/nvidia"}, "install_dir goes with preset gpu-operator only"),
    ({"preset": "gpu-operator", "install_dir": "opt/nvidia"}, "not an absolute path"),
    ({"preset": "gpu-operator", "install_dir": "/opt/nvidia", "dirs": []}, "install_dir goes with preset gpu-operator only"),
    ({"preset": "gpu-operator", "install_dir": 5}, "must be an absolute directory path"),
])
def test_a_bad_install_dir_is_refused_naming_the_variable(value, says):
    with pytest.raises(ConfigError) as err:
        load_some({"bcd_nvidia_toolkit": value}, ["bcd_nvidia_toolkit"])
    assert err.value.lines[0].startswith("INVALID_CONFIG: bcd_nvidia_toolkit: ") and says in err.value.lines[0]


def test_a_k3s_on_a_version_2_template_needs_its_own_dropin_directory_mounted(tmp_path):
    """The k3s preset mounts config-v3.toml.d; a k3s whose config is version 2 imports
    config.toml.d: readiness names the files bcd_container_runtime must list."""
    from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_gpu_isolation import verify_node_root

    from tests.unit.plugins.module_utils.test_gpu_isolation_node import make_root

    preset = load_some({"bcd_container_runtime": "k3s"}, ["bcd_container_runtime"]).bcd_container_runtime
    paths = {"files": preset.files, "dirs": preset.dirs}
    v2 = make_root(tmp_path / "v2", {
        f"{K3S}/config.toml": f'version = 2\nimports = ["{K3S}/config.toml.d/*.toml"]\n',
        f"{K3S}/config.toml.d/10-nvidia.toml": "version = 2\n",
    })
    r = verify_node_root(v2, runtime_paths=paths)
    (f,) = [f for f in r["readiness"] if f["check"] == "runtime-config-not-mounted"]
    assert f"{K3S}/config.toml.d/10-nvidia.toml" in f["message"] and f"dirs: [{K3S}/config.toml.d]" in f["fix"]
    v3 = make_root(tmp_path / "v3", {
        f"{K3S}/config.toml": f'version = 3\nimports = ["{K3S}/config-v3.toml.d/*.toml"]\n',
        f"{K3S}/config-v3.toml.d/10-nvidia.toml": "version = 3\n",
    })
    assert not [f for f in verify_node_root(v3, runtime_paths=paths)["readiness"]
                if f["check"] == "runtime-config-not-mounted"]

"""The node-level verifier beyond the shared cases: every configuration the runtime reads."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_containerd import VERSION_FILE
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_gpu_isolation import (
    DEFAULT_TOOLKIT_CONFIG,
    EXPOSED,
    ISOLATED,
    KEY,
    UNVERIFIABLE,
    NodeRootError,
    verify_node_root,
)

SAFE = f"{KEY} = false\n"
UNSAFE = f"{KEY} = true\n"
V2_NVIDIA = """version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
  BinaryName = "{binary}"
"""
RUNC_ONLY = """version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
"""


# The containerd release a test root's node runs (its VERSION_FILE), as a collected root has it:
# the tests below are about what the files say, read by one loader family (2.0-2.2).
CONTAINERD = "containerd github.com/containerd/containerd/v2 v2.1.4 75cb2b7193e4e490e9fbdc236c0e811ccaba3376\n"
CONTAINERD_17 = "containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da\n"
CONTAINERD_24 = "containerd github.com/containerd/containerd/v2 v2.4.2 0d3a8a1b6d04e0e0b2b8f3e2b6f5d1b8d5f1c0e2\n"


def make_root(tmp_path: Path, files: dict[str, str], modes: dict[str, int] | None = None,
              containerd: str | None = CONTAINERD) -> str:
    """A node root holding ``files`` and, unless ``containerd`` is None, ``containerd --version``
    output in its VERSION_FILE."""
    root = tmp_path / "root"
    root.mkdir(parents=True, exist_ok=True)
    if containerd is not None:
        (root / VERSION_FILE).write_text(containerd)
    for path, text in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        if modes and path in modes:
            target.chmod(modes[path])
    return str(root)


def checks(result) -> set[str]:
    return {f["check"] for f in result["findings"]}


# --- containerd versions 1 to 4 ------------------------------------------------------------

def test_containerd_v1_cri_runtimes_and_default_runtime(tmp_path):
    """containerd 1.7 runs the deprecated default_runtime table as runtime ``default``."""
    root = make_root(tmp_path, {
        "/etc/containerd/config.toml": """
[plugins.cri.containerd.default_runtime]
  runtime_type = "io.containerd.runtime.v1.linux"
  runtime_engine = "/usr/bin/nvidia-container-runtime"
""",
    }, containerd=CONTAINERD_17)
    r = verify_node_root(root)
    assert r["verdict"] == EXPOSED
    assert r["runtimes"][0]["name"] == "default_runtime"
    assert r["runtimes"][0]["key"] == "plugins.cri.containerd.default_runtime.runtime_engine"


def test_containerd_v1_plugins_linux_runtime_on_path(tmp_path):
    """[plugins.linux] runtime (containerd 1.7's v1 runtime) names a binary looked up on $PATH."""
    root = make_root(tmp_path, {
        "/etc/containerd/config.toml": '[plugins.linux]\n  runtime = "nvidia-container-runtime"\n',
        DEFAULT_TOOLKIT_CONFIG: SAFE,
    }, containerd=CONTAINERD_17)
    r = verify_node_root(root)
    assert r["verdict"] == ISOLATED
    assert r["runtimes"][0]["binary"] == "/usr/bin/nvidia-container-runtime"
    assert r["runtimes"][0]["name"] == "linux runtime"


def test_containerd_v1_options_runtime(tmp_path):
    root = make_root(tmp_path, {
        "/etc/containerd/config.toml": """
[plugins.cri.containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runtime.v1.linux"
  [plugins.cri.containerd.runtimes.nvidia.options]
    Runtime = "/usr/bin/nvidia-container-runtime"
""",
        DEFAULT_TOOLKIT_CONFIG: UNSAFE,
    })
    r = verify_node_root(root)
    assert r["verdict"] == EXPOSED and "toolkit-accepts-envvar" in checks(r)


def test_containerd_v3_and_v4(tmp_path):
    """Config version 4 is containerd 2.3's: 2.4 reads both."""
    for version, plugin in ((3, "io.containerd.cri.v1.runtime"), (4, "io.containerd.cri.v1.runtime")):
        root = make_root(tmp_path / str(version), {
            "/etc/containerd/config.toml": f"""version = {version}
[plugins.'{plugin}'.containerd.runtimes.nvidia.options]
  BinaryName = '/usr/bin/nvidia-container-runtime'
""",
        }, containerd=CONTAINERD_24)
        assert verify_node_root(root)["verdict"] == EXPOSED


def test_containerd_v4_is_refused_by_2_2(tmp_path):
    root = make_root(tmp_path, {"/etc/containerd/config.toml": "version = 4\n"})
    r = verify_node_root(root)
    assert r["verdict"] == UNVERIFIABLE and r["ready"] == "not-ready"
    (f,) = r["findings"]
    assert f["check"] == "containerd-refuses" and "equal to or less than `3`, got `4`" in f["message"]


def test_runc_only_with_no_toolkit_is_isolated(tmp_path):
    root = make_root(tmp_path, {"/etc/containerd/config.toml": RUNC_ONLY})
    assert verify_node_root(root)["verdict"] == ISOLATED


# --- imports and drop-in directories -------------------------------------------------------

def test_imports_relative_to_the_config_file_and_recursive(tmp_path):
    root = make_root(tmp_path, {
        "/etc/containerd/config.toml": 'version = 2\nimports = ["extra/*.toml"]\n',
        "/etc/containerd/extra/a.toml": 'version = 2\nimports = ["/opt/more/b.toml"]\n',
        "/opt/more/b.toml": V2_NVIDIA.format(binary="/usr/bin/nvidia-container-runtime"),
    })
    r = verify_node_root(root)
    assert r["verdict"] == EXPOSED
    assert {"/etc/containerd/extra/a.toml", "/opt/more/b.toml"} <= set(r["files_read"])
    assert r["runtimes"][0]["file"] == "/opt/more/b.toml"


def test_imports_never_leave_the_root(tmp_path):
    """An absolute import is taken relative to the node root, not this machine's /."""
    root = make_root(tmp_path, {"/etc/containerd/config.toml": 'version = 2\nimports = ["/etc/passwd"]\n' + RUNC_ONLY[12:]})
    r = verify_node_root(root)
    assert "/etc/passwd" not in r["files_read"]


@pytest.mark.parametrize("dropin", ["/etc/containerd/conf.d/99-nvidia.toml", "/etc/containerd/config.d/nvidia.conf"])
def test_containerd_dropin_dirs_are_not_loaded_without_imports(tmp_path, dropin):
    """containerd loads config.toml and what its imports name, nothing else: a drop-in no import
    names is a note, never an exposure."""
    root = make_root(tmp_path, {
        "/etc/containerd/config.toml": RUNC_ONLY,
        dropin: V2_NVIDIA.format(binary="/usr/bin/nvidia-container-runtime"),
    })
    r = verify_node_root(root)
    assert r["verdict"] == ISOLATED and dropin not in r["files_read"]
    (ignored,) = r["ignored_files"]
    assert ignored["file"] == dropin and "not imported" in ignored["why"]
    assert any(n.startswith(f"{dropin} is not in effect: not imported") for n in r["notes"])


@pytest.mark.parametrize("dropin", ["/etc/containerd/conf.d/99-nvidia.toml", "/etc/containerd/config.d/nvidia.conf"])
def test_containerd_dropin_dirs_are_loaded_when_imported(tmp_path, dropin):
    root = make_root(tmp_path, {
        "/etc/containerd/config.toml": f'version = 2\nimports = ["{dropin.rsplit("/", 1)[0]}/*"]\n' + RUNC_ONLY[12:],
        dropin: V2_NVIDIA.format(binary="/usr/bin/nvidia-container-runtime"),
    })
    r = verify_node_root(root)
    assert r["verdict"] == EXPOSED and dropin in r["files_read"] and r["ignored_files"] == []


def test_dropin_dir_ignores_other_suffixes(tmp_path):
    root = make_root(tmp_path, {
        "/etc/containerd/config.toml": RUNC_ONLY,
        "/etc/containerd/conf.d/README.md": "not toml at all [",
    })
    assert verify_node_root(root)["verdict"] == ISOLATED


# --- k3s and RKE2 --------------------------------------------------------------------------

@pytest.mark.parametrize("distro", ["k3s", "rke2"])
@pytest.mark.parametrize("name", ["config.toml.tmpl", "config-v3.toml.tmpl"])
def test_rancher_templates_with_go_template_actions(tmp_path, distro, name):
    path = f"/var/lib/rancher/{distro}/agent/etc/containerd/{name}"
    root = make_root(tmp_path, {
        path: '{{ template "base" . }}\n\n'
        + V2_NVIDIA.format(binary="/usr/local/nvidia/toolkit/nvidia-container-runtime"),
    })
    r = verify_node_root(root)
    assert r["verdict"] == EXPOSED
    assert r["runtimes"][0]["toolkit_configs"] == ["/usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml"]


def test_template_computing_the_binary_is_unverifiable(tmp_path):
    root = make_root(tmp_path, {
        "/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl":
            V2_NVIDIA.format(binary="{{ .NodeConfig.AgentConfig.Runtime }}"),
    })
    r = verify_node_root(root)
    assert r["verdict"] == UNVERIFIABLE and "templated" in checks(r)


@pytest.mark.parametrize(("version", "dirname"), [(2, "config.toml.d"), (3, "config-v3.toml.d")])
def test_rancher_dropin_dirs(tmp_path, version, dirname):
    """k3s and RKE2 write an import of the drop-in directory of their template's version into the
    config.toml they generate (k3s PR #13680): that one is loaded, the other is not."""
    d = "/var/lib/rancher/rke2/agent/etc/containerd"
    other = "config-v3.toml.d" if dirname == "config.toml.d" else "config.toml.d"
    section = "io.containerd.grpc.v1.cri" if version == 2 else "io.containerd.cri.v1.runtime"
    nvidia = f'version = {version}\n[plugins."{section}".containerd.runtimes.nvidia.options]\n  BinaryName = "{{b}}"\n'
    root = make_root(tmp_path, {
        f"{d}/config.toml": f'version = {version}\nimports = ["{d}/{dirname}/*.toml"]\n'
                            f'[plugins."{section}".containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n',
        f"{d}/{dirname}/10-nvidia.toml": nvidia.format(b="/usr/bin/nvidia-container-runtime"),
        f"{d}/{other}/10-nvidia.toml": nvidia.format(b="/opt/other/nvidia-container-runtime"),
        DEFAULT_TOOLKIT_CONFIG: SAFE,
    })
    r = verify_node_root(root)
    assert r["verdict"] == ISOLATED and [rt["binary"] for rt in r["runtimes"]] == ["/usr/bin/nvidia-container-runtime"]
    assert f"{d}/{other}/10-nvidia.toml" in {i["file"] for i in r["ignored_files"]}


def test_rancher_generated_config_without_imports_loads_no_dropin(tmp_path):
    """An older k3s writes no imports: its drop-in directories are not loaded."""
    d = "/var/lib/rancher/k3s/agent/etc/containerd"
    root = make_root(tmp_path, {
        f"{d}/config.toml": RUNC_ONLY,
        f"{d}/config.toml.d/10-nvidia.toml": V2_NVIDIA.format(binary="/usr/bin/nvidia-container-runtime"),
    })
    r = verify_node_root(root)
    assert r["verdict"] == ISOLATED and r["runtimes"] == []
    assert "not imported" in {i["file"]: i["why"] for i in r["ignored_files"]}[f"{d}/config.toml.d/10-nvidia.toml"]


# --- CRI-O -----------------------------------------------------------------------------------

def test_crio_runtime_without_runtime_path_runs_its_name(tmp_path):
    root = make_root(tmp_path, {
        "/etc/crio/crio.conf": "[crio.runtime.runtimes.nvidia-container-runtime]\nruntime_type = 'oci'\n",
    })
    r = verify_node_root(root)
    assert r["verdict"] == EXPOSED
    assert r["runtimes"][0]["binary"] == "/usr/bin/nvidia-container-runtime"


def test_crio_hooks_dir_setting_is_followed(tmp_path):
    root = make_root(tmp_path, {
        "/etc/crio/crio.conf": '[crio.runtime]\nhooks_dir = ["/opt/hooks"]\n',
        "/opt/hooks/nvidia.json": '{"version": "1.0.0", "hook": {"path": "/usr/bin/nvidia-container-runtime-hook", '
                                  '"args": ["nvidia-container-runtime-hook", "prestart"]}, "when": {"always": true}, '
                                  '"stages": ["prestart"]}',
        DEFAULT_TOOLKIT_CONFIG: SAFE,
    })
    r = verify_node_root(root)
    assert r["verdict"] == ISOLATED and r["hooks"][0]["file"] == "/opt/hooks/nvidia.json"


# --- OCI hooks ------------------------------------------------------------------------------

def test_conditional_hook_is_still_reachable_by_pods(tmp_path):
    root = make_root(tmp_path, {
        "/etc/crio/crio.conf": "[crio.runtime]\n",
        "/etc/containers/oci/hooks.d/nv.json": '{"version": "1.0.0", "hook": {"path": "/usr/bin/nvidia-container-toolkit"}, '
                                               '"when": {"annotations": {"^gpu$": ".*"}}, "stages": ["prestart"]}',
        DEFAULT_TOOLKIT_CONFIG: UNSAFE,
    })
    r = verify_node_root(root)
    assert r["verdict"] == EXPOSED and r["hooks"][0]["always"] is False


def test_hook_config_flag_points_elsewhere(tmp_path):
    root = make_root(tmp_path, {
        "/etc/crio/crio.conf": "[crio.runtime]\n",
        "/usr/share/containers/oci/hooks.d/nv.json": '{"version": "1.0.0", "hook": {"path": "/usr/bin/nvidia-container-runtime-hook",'
                                                     ' "args": ["nvidia-container-runtime-hook", "-config=/opt/nv/config.toml", "prestart"]},'
                                                     ' "when": {"always": true}, "stages": ["prestart"]}',
        "/opt/nv/config.toml": SAFE,
    })
    r = verify_node_root(root)
    assert r["verdict"] == ISOLATED and r["hooks"][0]["toolkit_configs"] == ["/opt/nv/config.toml"]


def test_legacy_hook_format_and_unparsable_hook(tmp_path):
    root = make_root(tmp_path, {
        "/etc/crio/crio.conf": "[crio.runtime]\n",
        "/usr/share/containers/oci/hooks.d/old.json": '{"hook": "/usr/bin/nvidia-container-toolkit", "stages": ["prestart"]}',
        "/etc/containers/oci/hooks.d/broken.json": '{"hook": ',
    })
    r = verify_node_root(root)
    assert r["verdict"] == EXPOSED
    assert "/etc/containers/oci/hooks.d/broken.json" in {f["where"] for f in r["findings"] if f["status"] == UNVERIFIABLE}


def test_unrelated_hook_is_ignored(tmp_path):
    root = make_root(tmp_path, {
        "/etc/crio/crio.conf": "[crio.runtime]\n",
        "/usr/share/containers/oci/hooks.d/x.json": '{"version": "1.0.0", "hook": {"path": "/usr/libexec/oci/hooks.d/oci-systemd-hook"},'
                                                    ' "when": {"always": true}, "stages": ["prestart"]}',
    })
    assert verify_node_root(root)["verdict"] == ISOLATED


# --- wrapper scripts -------------------------------------------------------------------------

OPERATOR_WRAPPER = """#! /bin/sh
cat /proc/modules | grep -e "^nvidia " >/dev/null 2>&1
if [ "${?}" != "0" ]; then
	exec runc "$@"
fi
NVIDIA_CTK_CONFIG_FILE_PATH=/run/nvidia/toolkit-config/config.toml \\
PATH=/usr/local/nvidia/toolkit:$PATH \\
	/usr/local/nvidia/toolkit/nvidia-container-runtime.real \\
		"$@"
"""


def test_wrapper_setting_config_file_path(tmp_path):
    root = make_root(tmp_path, {
        "/etc/containerd/config.toml": V2_NVIDIA.format(binary="/usr/local/nvidia/toolkit/nvidia-container-runtime"),
        "/usr/local/nvidia/toolkit/nvidia-container-runtime": OPERATOR_WRAPPER,
        "/run/nvidia/toolkit-config/config.toml": SAFE,
    })
    r = verify_node_root(root)
    assert r["runtimes"][0]["toolkit_configs"] == ["/run/nvidia/toolkit-config/config.toml"]
    assert r["verdict"] == ISOLATED


def test_wrapper_setting_xdg_config_home(tmp_path):
    root = make_root(tmp_path, {
        "/etc/containerd/config.toml": V2_NVIDIA.format(binary="/usr/local/bin/gpu-runtime"),
        "/usr/local/bin/gpu-runtime": "#!/bin/sh\nexport XDG_CONFIG_HOME=/opt/gpu\nexec /usr/bin/nvidia-container-runtime \"$@\"\n",
        "/opt/gpu/nvidia-container-runtime/config.toml": UNSAFE,
        DEFAULT_TOOLKIT_CONFIG: SAFE,
    })
    r = verify_node_root(root)
    assert r["verdict"] == EXPOSED
    assert {f["where"] for f in r["findings"]} == {"/opt/gpu/nvidia-container-runtime/config.toml"}


def test_wrapper_computing_the_path_is_unverifiable(tmp_path):
    root = make_root(tmp_path, {
        "/etc/containerd/config.toml": V2_NVIDIA.format(binary="/usr/local/bin/gpu-runtime"),
        "/usr/local/bin/gpu-runtime": '#!/bin/sh\nXDG_CONFIG_HOME="$(dirname "$0")/.config" exec nvidia-container-runtime "$@"\n',
    })
    r = verify_node_root(root)
    assert r["verdict"] == UNVERIFIABLE and "wrapper" in checks(r)


# --- toolkit configurations --------------------------------------------------------------------

def test_volume_mounts_true_is_exposure(tmp_path):
    root = make_root(tmp_path, {
        "/etc/containerd/config.toml": RUNC_ONLY,
        DEFAULT_TOOLKIT_CONFIG: SAFE + "accept-nvidia-visible-devices-as-volume-mounts = true\n",
    })
    r = verify_node_root(root)
    assert r["verdict"] == EXPOSED and checks(r) == {"toolkit-accepts-volume-mounts"}


def test_key_of_the_wrong_type_is_unverifiable(tmp_path):
    root = make_root(tmp_path, {
        "/etc/containerd/config.toml": RUNC_ONLY,
        DEFAULT_TOOLKIT_CONFIG: f'{KEY} = "false"\n',
    })
    assert verify_node_root(root)["verdict"] == UNVERIFIABLE


def test_key_inside_a_table_does_not_count(tmp_path):
    root = make_root(tmp_path, {
        "/etc/containerd/config.toml": V2_NVIDIA.format(binary="/usr/bin/nvidia-container-runtime"),
        DEFAULT_TOOLKIT_CONFIG: f"[nvidia-container-runtime]\n{KEY} = false\n",
    })
    assert verify_node_root(root)["verdict"] == EXPOSED


def test_unparsable_toolkit_config_is_unverifiable(tmp_path):
    root = make_root(tmp_path, {
        "/etc/containerd/config.toml": V2_NVIDIA.format(binary="/usr/bin/nvidia-container-runtime"),
        DEFAULT_TOOLKIT_CONFIG: "accept = [\n",
    })
    r = verify_node_root(root)
    assert r["verdict"] == UNVERIFIABLE
    (f,) = r["findings"]
    assert f["where"] == DEFAULT_TOOLKIT_CONFIG and f["readers"]


def test_custom_toolkit_and_runtime_paths(tmp_path):
    root = make_root(tmp_path, {
        "/opt/runtime/containerd.toml": V2_NVIDIA.format(binary="/opt/nv/bin/nvidia-container-runtime"),
        "/opt/toolkit/config.toml": UNSAFE,
        DEFAULT_TOOLKIT_CONFIG: SAFE,
    })
    # Without bcd_container_runtime naming it, the node has no runtime configuration we know of.
    assert checks(verify_node_root(root)) == {"no-runtime-config"}
    r = verify_node_root(root, runtime_paths={"files": ["/opt/runtime/containerd.toml"], "dirs": []},
                         toolkit_paths={"files": [], "dirs": ["/opt/toolkit"]})
    assert r["verdict"] == EXPOSED
    assert {f["where"] for f in r["findings"]} == {"/opt/toolkit/config.toml"}


def test_pod_annotations_reaching_the_nvidia_runtime(tmp_path):
    root = make_root(tmp_path, {
        "/etc/containerd/config.toml": """version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
  pod_annotations = ["cdi.k8s.io/*"]
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
  BinaryName = "/usr/bin/nvidia-container-runtime"
""",
        DEFAULT_TOOLKIT_CONFIG: SAFE,
    })
    r = verify_node_root(root)
    assert r["verdict"] == EXPOSED and checks(r) == {"cdi-annotations"}


# --- the root ---------------------------------------------------------------------------------

def test_absolute_symlinks_stay_inside_the_root(tmp_path):
    """/etc/containerd -> /srv/containerd on the node resolves inside the folder, not here."""
    root = Path(make_root(tmp_path, {
        "/srv/containerd/config.toml": V2_NVIDIA.format(binary="/usr/bin/nvidia-container-runtime"),
        "/srv/nv/config.toml": SAFE,
    }))
    (root / "etc").mkdir()
    os.symlink("/srv/containerd", root / "etc" / "containerd")
    (root / "etc" / "nvidia-container-runtime").mkdir()
    os.symlink("/srv/nv/config.toml", root / "etc" / "nvidia-container-runtime" / "config.toml")
    r = verify_node_root(str(root))
    assert r["verdict"] == ISOLATED
    assert "/etc/containerd/config.toml" in r["files_read"]


def test_dangling_symlink_is_a_missing_config(tmp_path):
    root = Path(make_root(tmp_path, {"/etc/containerd/config.toml": V2_NVIDIA.format(binary="/usr/bin/nvidia-container-runtime")}))
    (root / "etc" / "nvidia-container-runtime").mkdir()
    os.symlink("/nowhere/config.toml", root / "etc" / "nvidia-container-runtime" / "config.toml")
    assert "toolkit-config-missing" in checks(verify_node_root(str(root)))


def test_root_must_be_a_directory(tmp_path):
    with pytest.raises(NodeRootError):
        verify_node_root(str(tmp_path / "missing"))


def test_cdi_spec_notes(tmp_path):
    root = make_root(tmp_path, {
        "/etc/containerd/config.toml": RUNC_ONLY,
        "/etc/cdi/nvidia.yaml": "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n- name: all\n",
    })
    r = verify_node_root(root)
    assert r["verdict"] == ISOLATED and any("by index" in n for n in r["notes"])
    root2 = make_root(tmp_path / "b", {
        "/etc/containerd/config.toml": RUNC_ONLY,
        "/var/run/cdi/nvidia.yaml": "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: GPU-0f1e2d3c-aaaa-bbbb-cccc-0123456789ab\n",
    })
    assert not [n for n in verify_node_root(root2)["notes"] if "CDI" in n or "cdi" in n or "index" in n]

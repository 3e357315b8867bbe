"""The packages-mode modules on their own (bcd_nvidia_toolkit_config, bcd_nvidia_cdi_spec), the
settings scope of bcd_gpu_isolation, and bcd_model.load_some."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_model import ConfigError, load_some

from tests.helpers import run_module
from tests.unit.plugins.modules.test_gpu_isolation_packages import nvidia_ctk

KEY = "accept-nvidia-visible-devices-envvar-when-unprivileged"


# --- bcd_nvidia_toolkit_config (the real nvidia-ctk) -------------------------------------------------

def test_toolkit_config_sets_the_key_backs_up_and_is_idempotent(tmp_path):
    path = tmp_path / "etc/nvidia-container-runtime/config.toml"
    path.parent.mkdir(parents=True)
    original = f"#{KEY} = false\n\n[nvidia-container-runtime]\nlog-level = \"debug\"\n"
    path.write_text(original)
    path.chmod(0o640)
    args = {"path": str(path), "node_path": "/etc/nvidia-container-runtime/config.toml", "nvidia_ctk": str(nvidia_ctk()),
            "_ansible_diff": True}

    code, out = run_module("bcd_nvidia_toolkit_config", args, check_mode=True)
    assert code == 0 and out["changed"] and f"{KEY} = false" in out["diff"]["after"]
    assert path.read_text() == original, "check mode writes nothing"

    code, out = run_module("bcd_nvidia_toolkit_config", args)
    assert code == 0 and out["changed"] and not out["created"]
    assert f"\n{KEY} = false" in "\n" + path.read_text() and 'log-level = "debug"' in path.read_text()
    assert oct(path.stat().st_mode & 0o777) == "0o640", "the file keeps its mode"
    assert Path(out["backup_file"]).read_text() == original

    code, out = run_module("bcd_nvidia_toolkit_config", args)
    assert code == 0 and not out["changed"]
    assert len(list(path.parent.glob("config.toml.*~"))) == 1, "no second backup"


def test_toolkit_config_refuses_an_unparsable_file(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("accept = [\n")
    code, out = run_module("bcd_nvidia_toolkit_config", {"path": str(path), "nvidia_ctk": str(nvidia_ctk())})
    assert code != 0 and "does not parse as TOML" in out["msg"] and "left as it is" in out["msg"]
    assert path.read_text() == "accept = [\n"


def test_toolkit_config_without_nvidia_ctk_says_so(tmp_path):
    code, out = run_module("bcd_nvidia_toolkit_config", {"path": str(tmp_path / "c.toml"), "nvidia_ctk": "no-such-nvidia-ctk"})
    assert code != 0 and "not found on this node" in out["msg"] and "gpu_stack_nvidia_ctk" in out["msg"]


# --- bcd_nvidia_cdi_spec -----------------------------------------------------------------------------

STUB = """#!/bin/sh
# A stand-in for nvidia-ctk on a machine without GPUs: records its arguments, writes a spec.
echo "$@" >> "{log}"
for a in "$@"; do case "$a" in --output=*) out="${{a#--output=}}";; esac; done
printf 'cdiVersion: 0.5.0\\nkind: nvidia.com/gpu\\ndevices:\\n- name: GPU-11111111-2222-3333-4444-555555555555\\n' > "$out"
"""


def test_cdi_spec_without_a_driver_generates_nothing_and_says_so(tmp_path):
    code, out = run_module("bcd_nvidia_cdi_spec", {"root": str(tmp_path), "nvidia_ctk": "/nonexistent"})
    assert code == 0 and not out["changed"] and out["generated"] is False
    assert "was NOT generated" in out["msg"] and out["warnings"]
    assert not (tmp_path / "etc/cdi").exists()


def test_cdi_spec_with_a_driver_uses_uuid_names_and_is_idempotent(tmp_path):
    root = tmp_path / "root"
    (root / "proc/driver/nvidia").mkdir(parents=True)
    (root / "proc/driver/nvidia/version").write_text("NVRM version: 550\n")
    log = tmp_path / "calls.log"
    stub = tmp_path / "nvidia-ctk"
    stub.write_text(STUB.format(log=log))
    stub.chmod(0o755)
    args = {"root": str(root), "nvidia_ctk": str(stub)}

    code, out = run_module("bcd_nvidia_cdi_spec", args, check_mode=True)
    assert code == 0 and out["changed"] and not (root / "etc/cdi/nvidia.yaml").exists()

    code, out = run_module("bcd_nvidia_cdi_spec", args)
    assert code == 0 and out["changed"] and out["generated"]
    assert "GPU-11111111" in (root / "etc/cdi/nvidia.yaml").read_text()
    calls = log.read_text().splitlines()
    assert all("--device-name-strategy=uuid" in c and f"--driver-root={root}" in c for c in calls)
    assert not [p for p in (root / "etc/cdi").iterdir() if p.name.startswith(".bcd-cdi-")], "no temporary file left"

    code, out = run_module("bcd_nvidia_cdi_spec", args)
    assert code == 0 and not out["changed"]


# --- settings and load_some -------------------------------------------------------------------------

SETTINGS_ARGS = {"config": {"bcd_nvidia_toolkit": "packages", "bcd_node_root": "n1", "bcd_report_out": "r.json",
                            "bcd_node_roots": {"gpu-node-1": "/srv/n1"}, "bcd_image": "anything: not checked here"}}


def test_settings_module_validates_only_its_variables(tmp_path):
    code, out = run_module("bcd_gpu_isolation_settings", {**SETTINGS_ARGS, "base_dir": str(tmp_path)})
    assert code == 0, out
    s = out["settings"]
    assert s["mode"] == "packages" and s["toolkit_paths"] == {"files": [], "dirs": ["/etc/nvidia-container-runtime"]}
    assert s["node_root"] == os.path.join(tmp_path, "n1") and s["report_out"] == os.path.join(tmp_path, "r.json")
    assert s["node_roots"] == {"gpu-node-1": "/srv/n1"}


def test_deprecated_settings_scope_gives_the_settings_modules_answer_and_says_so(tmp_path):
    code, old = run_module("bcd_gpu_isolation", {**SETTINGS_ARGS, "base_dir": str(tmp_path), "scope": "settings"})
    _, new = run_module("bcd_gpu_isolation_settings", {**SETTINGS_ARGS, "base_dir": str(tmp_path)})
    assert code == 0, old
    (deprecation,) = old.pop("deprecations")
    assert "use module bcd.kubernetes.bcd_gpu_isolation_settings" in str(deprecation) and deprecation["version"] == "2.0.0", deprecation
    assert {k: v for k, v in old.items() if k != "invocation"} == {k: v for k, v in new.items() if k != "invocation"}


def test_the_cluster_check_wants_the_inventory():
    code, out = run_module("bcd_gpu_isolation", {})
    assert code == 1 and "config" in out["msg"], out


@pytest.mark.parametrize("variables,line", [
    ({"bcd_nvidia_toolkit": "operator"}, "INVALID_CONFIG: bcd_nvidia_toolkit: unknown preset 'operator'"),
    ({"bcd_node_roots": {"Node_1": "/x"}}, "INVALID_CONFIG: bcd_node_roots: 'Node_1' is not a DNS-1123 subdomain"),
    ({"bcd_node_rots": {}}, "INVALID_CONFIG: bcd_node_rots: unknown variable (a typo is never ignored); did you mean bcd_node_roots?"),
    ({"bcd_gpu_isolation_enforce": "maybe"}, "INVALID_CONFIG: bcd_gpu_isolation_enforce: must be true or false"),
    ({"kubeconfig": "/x"}, "INVALID_CONFIG: kubeconfig: not a bcd_* variable"),
])
def test_load_some_refuses_with_the_model_rules(variables, line):
    with pytest.raises(ConfigError) as exc:
        load_some(variables, ("bcd_nvidia_toolkit", "bcd_node_roots", "bcd_gpu_isolation_enforce"))
    assert any(x.startswith(line) for x in exc.value.lines), exc.value.lines


def test_load_some_fills_defaults_and_ignores_other_model_variables():
    got = load_some({"bcd_image": "not validated here"}, ("bcd_gpu_isolation_enforce", "bcd_container_runtime"))
    assert got.bcd_gpu_isolation_enforce is True
    assert got.bcd_container_runtime.files == ["/etc/containerd/config.toml"]

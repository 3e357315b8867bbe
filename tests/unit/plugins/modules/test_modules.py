"""Our modules through Ansible's module machinery (ansible-core 2.19 patch_module_args), check mode included."""

from __future__ import annotations

import json
import stat

from tests.helpers import TEMPLATE, base_vars, recap, run_module, run_playbook


def test_bcd_manifests_returns_normalised_values():
    # what the retired bcd_config returned, the product's path returns (bcd_manifests, without dest)
    code, result = run_module("bcd_manifests", {"config": base_vars(bcd_resources={"requests": {"cpu": "1000m"}}, bcd_token_ttl="90m"),
                                                "template": str(TEMPLATE)})
    assert code == 0 and result["changed"] is False
    assert result["config"]["bcd_resources"]["requests"] == {"cpu": "1"}
    assert result["config"]["bcd_token_ttl"] == 5400
    assert result["label_selector"] == "nvidia.com/gpu.present=true"
    assert result["configmap"]["metadata"]["name"] == "bcd-config"


def test_bcd_manifests_refuses_with_invalid_config_lines():
    code, result = run_module("bcd_manifests", {"config": base_vars(bcd_image="nginx:latest", bcd_typo=1), "required": ["bcd_tenant"],
                                                "template": str(TEMPLATE)})
    assert code == 1 and result["failed"] is True
    assert result["errors"] == [
        "INVALID_CONFIG: bcd_image: 'nginx:latest' is not pinned by digest: use registry/repo[:tag]@sha256:<64 hex digits>",
        "INVALID_CONFIG: bcd_typo: unknown variable (a typo is never ignored)",
        "INVALID_CONFIG: bcd_tenant: is required by this playbook",
    ]
    assert result["msg"] == "\n".join(result["errors"])
    assert "Traceback" not in json.dumps(result)


def test_bcd_manifests_never_returns_the_api_key():
    secret = "bcdk_live_0123456789abcdef"
    code, result = run_module("bcd_manifests", {"config": base_vars(bcd_api_key=secret), "template": str(TEMPLATE)})
    assert code == 0 and secret not in json.dumps(result)


RETIRED = {"bcd_config": "bcd.kubernetes.bcd_manifests", "bcd_control_plane": "bcd.kubernetes.bcd_preflight",
           "bcd_pod_security": "bcd.kubernetes.bcd_preflight"}
# renamed: the old name runs the new module, through its action plugin when it has one
RENAMED = {"bcd_nodes": "bcd.kubernetes.bcd_nodes_info"}


def _book(tmp_path, name: str, extra: str = "") -> object:
    book = tmp_path / f"{name}.yml"
    book.write_text(f"""
- name: {name}
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Run {name}
      bcd.kubernetes.{name}:
        config: {{bcd_typo: 1}}
        {extra}
      ignore_errors: true
""")
    return book


def test_retired_modules_still_run_and_name_their_successor(tmp_path):
    """meta/runtime.yml's deprecation routing: each retired or renamed name still runs its module
    (here to its INVALID_CONFIG refusal, before any connection) and warns, naming what replaces it."""
    book = tmp_path / "retired.yml"
    book.write_text("".join(f"""
- name: {name}
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Run {name}
      bcd.kubernetes.{name}:
        config: {{bcd_typo: 1}}
      ignore_errors: true
""" for name in {**RETIRED, **RENAMED}))
    run = run_playbook(str(book), "-i", "localhost,", "-c", "local", "-e", "ansible_python_interpreter={{ ansible_playbook_python }}")
    out = " ".join(run.stdout.split() + run.stderr.split())
    assert run.returncode == 0, out[-3000:]
    for name, successor in RETIRED.items():
        assert f"bcd.kubernetes.{name} has been deprecated." in out, name
        assert f"use {successor}" in out, name
        assert "removed from collection 'bcd.kubernetes' version 2.0.0" in out
    for name, successor in RENAMED.items():
        assert f"bcd.kubernetes.{name} has been deprecated. renamed to {successor}" in out, name
    # each ran, and refused the typo
    assert recap(run.stdout)["localhost"]["ignored"] == len(RETIRED) + len(RENAMED)
    assert "INVALID_CONFIG: bcd_typo: unknown variable" in out


def test_a_renamed_module_keeps_its_action_plugin(tmp_path):
    """ansible-core picks the action plugin by the name the task uses: the old name of a renamed
    module must reach the new action plugin (its wait and progress), not run the module bare."""
    run = run_playbook(str(_book(tmp_path, "bcd_nodes", "wait: true")), "-i", "localhost,", "-c", "local", "-vvvv",
                       "-e", "ansible_python_interpreter={{ ansible_playbook_python }}")
    out = " ".join(run.stdout.split() + run.stderr.split())
    assert "redirecting (type: action) bcd.kubernetes.bcd_nodes to bcd.kubernetes.bcd_nodes_info" in out, out[-3000:]
    assert "INVALID_CONFIG: bcd_typo: unknown variable" in out


def test_bcd_manifests_renders_without_dest(tmp_path):
    code, result = run_module("bcd_manifests", {"config": base_vars(), "template": str(TEMPLATE)})
    assert code == 0 and result["changed"] is False
    assert [o["kind"] for o in result["objects"]] == ["Namespace", "ConfigMap", "DaemonSet"]
    assert result["daemonset"]["spec"]["template"]["metadata"]["annotations"]["bcd.dev/config-sha256"] == result["config_sha256"]


def test_bcd_manifests_writes_a_new_file_and_is_idempotent(tmp_path):
    dest = tmp_path / "bcd.json"
    args = {"config": base_vars(), "template": str(TEMPLATE), "dest": str(dest)}
    code, result = run_module("bcd_manifests", args)
    assert code == 0 and result["changed"] is True
    data = json.loads(dest.read_text())
    assert data["apiVersion"] == "v1" and data["kind"] == "List" and len(data["items"]) == 3
    assert stat.S_IMODE(dest.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["bcd.json"], "no temporary file is left"
    code, again = run_module("bcd_manifests", args)
    assert code == 0 and again["changed"] is False


def test_bcd_manifests_refuses_an_existing_file(tmp_path):
    dest = tmp_path / "bcd.json"
    dest.write_text("mine\n")
    code, result = run_module("bcd_manifests", {"config": base_vars(), "template": str(TEMPLATE), "dest": str(dest)})
    assert code == 1 and "exists" in result["msg"] and "bcd_render_out" in result["msg"]
    assert dest.read_text() == "mine\n"


def test_bcd_manifests_check_mode_writes_nothing(tmp_path):
    dest = tmp_path / "bcd.json"
    code, result = run_module("bcd_manifests", {"config": base_vars(), "template": str(TEMPLATE), "dest": str(dest)}, check_mode=True)
    assert code == 0 and result["changed"] is True
    assert not dest.exists()


def test_bcd_manifests_invalid_input_writes_nothing(tmp_path):
    dest = tmp_path / "bcd.json"
    code, result = run_module("bcd_manifests", {"config": base_vars(bcd_image="registry.example.com/bcd:1"), "template": str(TEMPLATE), "dest": str(dest)})
    assert code == 1 and result["msg"].startswith("INVALID_CONFIG: bcd_image:")
    assert not dest.exists()


def test_bcd_manifests_names_a_missing_template(tmp_path):
    code, result = run_module("bcd_manifests", {"config": base_vars(), "template": str(tmp_path / "nope.j2")})
    assert code == 1 and "template" in result["msg"] and "Traceback" not in result["msg"]

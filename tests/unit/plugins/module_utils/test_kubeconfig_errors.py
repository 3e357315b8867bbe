"""The cluster's kubeconfig as operators meet it: a path that does not exist is refused with the
inputs, and every connection error names the kubeconfig file(s) and the context (and its server)."""

from __future__ import annotations

import socket

import yaml

from tests.helpers import BASE_VARS, run_module, run_playbook


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kubeconfig(path, server: str, contexts=("gpu-east", "gpu-west"), current="gpu-east"):
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": current,
        "clusters": [{"name": c, "cluster": {"server": server, "insecure-skip-tls-verify": True}} for c in contexts],
        "users": [{"name": "u", "user": {"token": "not-a-secret-test-token"}}],
        "contexts": [{"name": c, "context": {"cluster": c, "user": "u"}} for c in contexts],
    }))
    return path


def test_missing_kubeconfig_is_refused_with_the_inputs(tmp_path):
    """Before the control plane is reached (its URL here resolves nowhere) and before any change."""
    vars_file = tmp_path / "vars.yml"
    vars_file.write_text(yaml.safe_dump({**BASE_VARS, "bcd_tenant": "root", "bcd_pool": "pool_1",
                                         "bcd_kubeconfig": str(tmp_path / "no-such-kubeconfig.yaml")}))
    (tmp_path / "hosts.yml").write_text("clusters:\n  hosts:\n    gpu-east: {ansible_connection: local}\n")
    run = run_playbook("adopt-cluster.yml", "-i", str(tmp_path / "hosts.yml"), "-e", f"@{vars_file}")
    text = run.stdout + run.stderr
    assert run.returncode != 0
    assert f"INVALID_CONFIG: bcd_kubeconfig: {tmp_path / 'no-such-kubeconfig.yaml'} does not exist" in text, text[-3000:]
    assert "No configuration found" not in text and "Control plane" not in text
    assert "Reach the control plane" not in text  # stopped at validation


def test_render_playbook_needs_no_kubeconfig(tmp_path):
    vars_file = tmp_path / "vars.yml"
    vars_file.write_text(yaml.safe_dump({**BASE_VARS, "bcd_kubeconfig": str(tmp_path / "absent.yaml")}))
    run = run_playbook("render.yml", "-i", "localhost,", "-c", "local", "-e", f"@{vars_file}",
                       "-e", f"bcd_render_out={tmp_path / 'out.json'}")
    assert run.returncode == 0, run.stdout[-2000:]


def test_unreachable_server_names_the_kubeconfig_and_the_current_context(tmp_path):
    server = f"https://127.0.0.1:{_closed_port()}"
    kc = _kubeconfig(tmp_path / "kubeconfig.yaml", server)
    code, result = run_module("bcd_nodes_info", {"config": {**BASE_VARS, "bcd_tenant": "root", "bcd_pool": "p",
                                                       "bcd_kubeconfig": str(kc)}})
    assert code != 0
    msg = result["msg"]
    assert "cannot reach the Kubernetes API" in msg
    assert f"kubeconfig {kc}" in msg and "context gpu-east" in msg and f"server {server}" in msg, msg
    assert "not-a-secret-test-token" not in msg


def test_unreachable_server_names_the_chosen_context(tmp_path):
    server = f"https://127.0.0.1:{_closed_port()}"
    kc = _kubeconfig(tmp_path / "kubeconfig.yaml", server)
    code, result = run_module("bcd_nodes_info", {"config": {**BASE_VARS, "bcd_tenant": "root", "bcd_pool": "p",
                                                       "bcd_kubeconfig": str(kc), "bcd_kube_context": "gpu-west"}})
    assert code != 0 and "context gpu-west" in result["msg"] and f"kubeconfig {kc}" in result["msg"], result["msg"]


def test_unknown_context_names_the_kubeconfig(tmp_path):
    kc = _kubeconfig(tmp_path / "kubeconfig.yaml", "https://127.0.0.1:1")
    code, result = run_module("bcd_nodes_info", {"config": {**BASE_VARS, "bcd_tenant": "root", "bcd_pool": "p",
                                                       "bcd_kubeconfig": str(kc), "bcd_kube_context": "gpu-north"}})
    assert code != 0 and f"kubeconfig {kc}" in result["msg"] and "gpu-north" in result["msg"], result["msg"]

"""render.yml as an operator runs it (issue 2 acceptance), through ansible-playbook."""

from __future__ import annotations

import json

import yaml

from tests.helpers import BASE_VARS, recap, run_playbook


def _vars(tmp_path, **extra) -> str:
    path = tmp_path / "vars.yml"
    path.write_text(yaml.safe_dump({**BASE_VARS, **extra}))
    return str(path)


def test_render_writes_the_list(tmp_path):
    out = tmp_path / "out.json"
    run = run_playbook("render.yml", "-i", "localhost,", "-c", "local", "-e", f"@{_vars(tmp_path)}", "-e", f"bcd_render_out={out}")
    assert run.returncode == 0, run.stdout + run.stderr
    data = json.loads(out.read_text())
    assert data["kind"] == "List" and [i["kind"] for i in data["items"]] == ["Namespace", "ConfigMap", "DaemonSet"]
    assert recap(run.stdout)["localhost"]["changed"] == 1
    again = run_playbook("render.yml", "-i", "localhost,", "-c", "local", "-e", f"@{_vars(tmp_path)}", "-e", f"bcd_render_out={out}")
    assert again.returncode == 0 and recap(again.stdout)["localhost"]["changed"] == 0
    assert out.read_text() == json.dumps(data, indent=2) + "\n"


def test_render_refuses_an_image_without_digest_and_writes_nothing(tmp_path):
    out = tmp_path / "out.json"
    run = run_playbook("render.yml", "-i", "localhost,", "-c", "local", "-e", f"@{_vars(tmp_path)}",
                       "-e", f"bcd_render_out={out}", "-e", "bcd_image=registry.example.com/better-compute/bcd:0.1.0")
    text = run.stdout + run.stderr
    assert run.returncode != 0
    assert "INVALID_CONFIG: bcd_image:" in text
    assert "Traceback" not in text
    assert not out.exists() and list(tmp_path.iterdir()) == [tmp_path / "vars.yml"]


def test_render_refuses_an_existing_file(tmp_path):
    out = tmp_path / "out.json"
    out.write_text("{}\n")
    run = run_playbook("render.yml", "-i", "localhost,", "-c", "local", "-e", f"@{_vars(tmp_path)}", "-e", f"bcd_render_out={out}")
    assert run.returncode != 0 and "exists" in run.stdout and out.read_text() == "{}\n"


def test_render_needs_bcd_render_out(tmp_path):
    run = run_playbook("render.yml", "-i", "localhost,", "-c", "local", "-e", f"@{_vars(tmp_path)}")
    assert run.returncode != 0 and "INVALID_CONFIG: bcd_render_out: is required by this playbook" in run.stdout


def test_render_check_mode_writes_nothing(tmp_path):
    out = tmp_path / "out.json"
    run = run_playbook("render.yml", "--check", "-i", "localhost,", "-c", "local", "-e", f"@{_vars(tmp_path)}", "-e", f"bcd_render_out={out}")
    assert run.returncode == 0, run.stdout
    assert not out.exists()


def test_example_inventory_renders_every_cluster(tmp_path):
    run = run_playbook("render.yml", "-i", "inventories/example", "-e", f"bcd_render_out={tmp_path}/{{{{ inventory_hostname }}}}.json")
    assert run.returncode == 0, run.stdout[-3000:]
    rendered = {p.stem: json.loads(p.read_text()) for p in tmp_path.glob("*.json")}
    assert set(rendered) == {"gpu-kubeadm", "gpu-k3s", "gpu-rke2"}
    paths = {name: {v["hostPath"]["path"] for v in doc["items"][2]["spec"]["template"]["spec"]["volumes"] if "hostPath" in v}
             for name, doc in rendered.items()}
    assert "/var/lib/rancher/k3s/agent/kubelet.kubeconfig" in paths["gpu-k3s"]
    assert "/etc/nvidia-container-runtime" in paths["gpu-k3s"]
    assert "/var/lib/rancher/rke2/agent/etc/containerd/config.toml" in paths["gpu-rke2"]
    assert "/etc/kubernetes/kubelet.conf" in paths["gpu-kubeadm"]

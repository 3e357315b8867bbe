"""render.yml as an operator runs it, through ansible-playbook."""

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


def test_render_yaml_documents_with_config_toml_as_a_block(tmp_path):
    out_json, out_yaml = tmp_path / "out.json", tmp_path / "out.yaml"
    for out, fmt in ((out_json, "json"), (out_yaml, "yaml")):
        run = run_playbook("render.yml", "-i", "localhost,", "-c", "local", "-e", f"@{_vars(tmp_path)}",
                           "-e", f"bcd_render_out={out}", "-e", f"bcd_render_format={fmt}")
        assert run.returncode == 0, run.stdout[-2000:]
    docs = list(yaml.safe_load_all(out_yaml.read_text()))
    assert docs == json.loads(out_json.read_text())["items"]
    text = out_yaml.read_text()
    assert text.startswith("---\napiVersion: v1\nkind: Namespace\n") and text.count("\n---\n") == 2
    assert "  config.toml: |\n    # config.toml of bcd" in text


def test_render_same_content_is_a_no_op_other_content_needs_force(tmp_path):
    out = tmp_path / "out.yaml"
    args = ("render.yml", "-i", "localhost,", "-c", "local", "-e", f"@{_vars(tmp_path)}", "-e", f"bcd_render_out={out}",
            "-e", "bcd_render_format=yaml")
    assert run_playbook(*args).returncode == 0
    first = out.read_text()
    mtime = out.stat().st_mtime_ns
    again = run_playbook(*args)
    assert again.returncode == 0 and recap(again.stdout)["localhost"]["changed"] == 0 and out.stat().st_mtime_ns == mtime
    other = run_playbook(*args, "-e", "bcd_log_level=debug")
    assert other.returncode != 0 and "exists with other content" in other.stdout and "bcd_render_force" in other.stdout
    assert out.read_text() == first
    forced = run_playbook(*args, "-e", "bcd_log_level=debug", "-e", "bcd_render_force=true")
    assert forced.returncode == 0 and recap(forced.stdout)["localhost"]["changed"] == 1, forced.stdout[-2000:]
    assert 'log_level = "debug"' in out.read_text() and oct(out.stat().st_mode & 0o777) == "0o644"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".bcd-")] == []


def test_render_without_gpu_nodes_group_prints_no_warning(tmp_path):
    run = run_playbook("render.yml", "-i", "localhost,", "-c", "local", "-e", f"@{_vars(tmp_path)}",
                       "-e", f"bcd_render_out={tmp_path / 'out.json'}")
    assert run.returncode == 0
    text = run.stdout + run.stderr
    assert "Could not match" not in text and "[WARNING]" not in text, text


def test_readme_per_cluster_render_command_runs_from_the_repository_root():
    """README's render command, exactly as written, from the repository root on the example
    inventory (three clusters, a gpu_nodes group): its relative out/ is the root's, where
    ansible-playbook runs, never playbooks/out/ (where the module itself runs)."""
    import shlex

    from tests.helpers import ROOT

    readme = (ROOT / "README.md").read_text()
    line = next(line for line in readme.splitlines() if line.startswith("ansible-playbook bcd.kubernetes.render "))
    playbook, *args = shlex.split(line.split("#", 1)[0])[1:]
    assert args == ["-i", "inventories/prod", "-e", "bcd_render_out=out/{{ inventory_hostname }}.json"], line
    args[1] = "inventories/example"  # the README's prod inventory is the operator's own
    names = ["gpu-k3s.json", "gpu-kubeadm.json", "gpu-rke2.json"]
    out = ROOT / "out"
    made_out = not out.exists()
    out.mkdir(exist_ok=True)
    assert not any((out / n).exists() for n in names), "leftovers of another run in out/"
    try:
        run = run_playbook(playbook, *args, cwd=ROOT)
        assert run.returncode == 0, run.stdout[-2000:]
        assert sorted(p.name for p in out.iterdir() if p.name in names) == names
        assert not (ROOT / "playbooks" / "out").exists()
        assert "Could not match" not in run.stderr
    finally:
        for name in names:
            (out / name).unlink(missing_ok=True)
        if made_out:
            out.rmdir()


def test_a_relative_render_out_is_taken_against_where_ansible_playbook_runs(tmp_path):
    """Run from another directory, a relative bcd_render_out lands there (the README's promise),
    and a missing directory is named with the absolute path."""
    from tests.helpers import ROOT

    (tmp_path / "out").mkdir()
    run = run_playbook(str(ROOT / "render.yml"), "-i", str(ROOT / "inventories/example"), "--limit", "gpu-k3s",
                       "-e", "bcd_render_out=out/{{ inventory_hostname }}.json", cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-2000:]
    assert json.loads((tmp_path / "out" / "gpu-k3s.json").read_text())["kind"] == "List"
    missing = run_playbook(str(ROOT / "render.yml"), "-i", str(ROOT / "inventories/example"), "--limit", "gpu-k3s",
                           "-e", "bcd_render_out=nowhere/x.json", cwd=tmp_path)
    assert missing.returncode != 0 and f"cannot write {tmp_path}/nowhere/x.json" in missing.stdout, missing.stdout[-2000:]

"""The kind test bed's generated configuration (sandbox/kind), without starting anything."""

from __future__ import annotations

import resource

import pytest
import yaml

from sandbox import kind


def test_kind_config_carries_the_fixes_for_these_machines():
    cfg = kind.kind_config("localhost/bcd-kind/node:v1.36.3")
    assert [n["role"] for n in cfg["nodes"]] == ["control-plane", "worker", "worker"]
    assert {n["image"] for n in cfg["nodes"]} == {"localhost/bcd-kind/node:v1.36.3"}
    assert cfg["networking"]["disableDefaultCNI"] is True
    patches = [yaml.safe_load(p) for p in cfg["kubeadmConfigPatches"]]
    kubelet = next(p for p in patches if p["kind"] == "KubeletConfiguration")
    assert kubelet["failCgroupV1"] is False
    etcd = next(p for p in patches if p["kind"] == "ClusterConfiguration")["etcd"]["local"]["imageTag"]
    assert etcd == f"{kind.etcd_version()}-0"


def test_containers_conf_stays_within_the_hard_limits(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    text = kind.containers_conf().read_text()
    assert kind.containers_conf().parent == tmp_path / "bcd-ansible" / "kind"
    assert 'runtime = "runc"' in text and 'network_backend = "netavark"' in text
    nofile = int(text.split('"nofile=')[1].split(":")[0])
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert hard == resource.RLIM_INFINITY or nofile <= hard
    assert kind.podman_env()["CONTAINERS_CONF"] == str(tmp_path / "bcd-ansible" / "kind" / "containers.conf")


def test_without_root_it_names_the_packages_to_install(monkeypatch):
    monkeypatch.setattr(kind, "missing_host_packages", lambda: ["podman", "mmdebstrap"])
    monkeypatch.setattr(kind.os, "geteuid", lambda: 1000)
    with pytest.raises(kind.KindError, match=r"missing podman, mmdebstrap; install them .*apt-get install "
                                             r"--no-install-recommends podman mmdebstrap"):
        kind.ensure_host(say=lambda msg: None)


def test_the_wrapper_modules_pin_one_kubernetes_release():
    assert kind.build.pinned_version("node", "k8s.io/kubernetes", kind.kube_minor()) == kind.kube_version()
    assert "-X k8s.io/component-base/version.gitVersion=v" + kind.kube_version() in kind.build.ldflags(
        "node", kind.kube_minor())


def test_check_tells_a_cold_cache_from_one_a_build_cannot_warm(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(kind.os, "geteuid", lambda: 1000)
    reason, buildable = kind.why_not_warm()
    assert "not root" in reason and buildable is False
    monkeypatch.setattr(kind.os, "geteuid", lambda: 0)
    monkeypatch.setattr(kind, "missing_host_packages", lambda: ["mmdebstrap"])
    reason, buildable = kind.why_not_warm()
    assert "mmdebstrap" in reason and buildable is True
    monkeypatch.setattr(kind, "missing_host_packages", lambda: [])
    # an empty cache: every binary is missing, which `build` makes
    reason, buildable = kind.why_not_warm()
    assert reason.startswith(f"binaries not built into {tmp_path}") and "kubelet" in reason and buildable is True
    assert kind.not_warm() == reason

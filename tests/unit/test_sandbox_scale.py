"""The sandbox's settings by size (sandbox/cluster.py), without starting anything: a small
sandbox runs exactly as it always did; above SCALE_ABOVE GPU nodes KWOK's node lease and the
node lifecycle controller's grace period grow together."""

from __future__ import annotations

import yaml

from sandbox import cluster


def _state(nodes: int) -> dict:
    return {"gpu_nodes": nodes, "binaries": {k: k for k in ("kwok", "kube-controller-manager")},
            "ports": {"controller_manager": 1}}


def test_small_sandboxes_keep_the_shipped_kwok_config_and_default_grace(tmp_path):
    for nodes in (3, 100, cluster.SCALE_ABOVE):
        assert cluster.kwok_config(tmp_path, _state(nodes)) == cluster.KWOK_CONFIG
        kcm = cluster.argv("kube-controller-manager", tmp_path, _state(nodes))
        assert not any(a.startswith("--node-monitor-grace-period") for a in kcm)
    assert not (tmp_path / "kwok.yaml").exists()


def test_5000_nodes_renew_leases_no_faster_than_1000_and_stay_ready(tmp_path):
    scale = cluster.scale_settings(5000)
    lease = scale["nodeLeaseDurationSeconds"]
    # KWOK renews a quarter of the lease apart: 5,000 nodes ask for fewer writes than 1,000 did at 40 s
    assert 5000 / (lease / 4) < 1000 / (40 / 4)
    path = cluster.kwok_config(tmp_path, _state(5000))
    assert path == tmp_path / "kwok.yaml"
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    shipped = [d for d in yaml.safe_load_all(cluster.KWOK_CONFIG.read_text()) if d]
    assert docs[0]["options"]["nodeLeaseDurationSeconds"] == lease
    assert docs[1:] == shipped[1:]  # the same stages
    kwok = cluster.argv("kwok", tmp_path, _state(5000))
    assert f"--config={path}" in kwok
    kcm = cluster.argv("kube-controller-manager", tmp_path, _state(5000))
    grace = next(a for a in kcm if a.startswith("--node-monitor-grace-period="))
    assert int(grace.split("=")[1].rstrip("s")) >= 2 * lease  # a late renewal does not make a node NotReady


def test_the_api_server_waits_longer_for_a_request_only_above_1000_nodes(tmp_path):
    state = {"binaries": {"kube-apiserver": "kube-apiserver"}, "ports": {"apiserver": 1, "etcd_client": 2}}
    small = cluster.argv("kube-apiserver", tmp_path, {**state, "gpu_nodes": cluster.SCALE_ABOVE})
    assert not any(a.startswith("--request-timeout") for a in small)
    big = cluster.argv("kube-apiserver", tmp_path, {**state, "gpu_nodes": 5000})
    # a page of 500 pods outlasted the default 60 s at 5,000 nodes on 2 shared cores
    assert "--request-timeout=180s" in big

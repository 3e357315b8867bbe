"""bcd_runtime_info's live path on a real CRI-O: the probe (plugins/module_utils/bcd_runtime_live.py)
finds the running daemon, asks it (``crio status config`` on its socket, ``crio config`` with its
flags, ``crio --version``), and :func:`reconcile` folds its answer into the file judge's.

Each test starts CRI-O (sandbox/crio.py ``serve``: the released daemon on a copy of a node root, in
a private mount namespace and chroot) and runs the probe's commands as on that node (``nsenter``
into the daemon's namespace and root); the file judge reads the same copy. Runs on each built
release; skips one that is not built, saying so (``python -m sandbox crio build``).
"""

from __future__ import annotations

import pytest
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_gpu_isolation import (
    ISOLATED,
    NOT_READY,
    READY,
    SOURCE_BOTH,
    SOURCE_RUNTIME,
    readiness,
    ready_of,
    verify_node_root,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_model import RUNTIME_PRESETS
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_runtime_live import Probe, reconcile

from sandbox import crio as oracle
from tests.containerd_configs import CDI_SPEC, KEY, PACKAGES_TOOLKIT, write_root

PRESET = RUNTIME_PRESETS["cri-o"]
NVIDIA = "/usr/bin/nvidia-container-runtime"
DROPIN = "/etc/crio/crio.conf.d/99-nvidia.conf"
HANDLER = f'[crio.runtime.runtimes.nvidia]\nruntime_path = "{NVIDIA}"\nruntime_type = "oci"\n'


@pytest.fixture(params=oracle.VERSIONS)
def binaries(request):
    reason = oracle.can_run()
    if reason:
        pytest.skip(f"real CRI-O cannot run here: {reason}")
    found = oracle.cached(request.param)
    if found is None:
        pytest.skip(f"CRI-O {request.param} is not built (`python -m sandbox crio build`)")
    return request.param, found


def node(tmp_path, dropin: str | None = HANDLER, binary: bool = True, crio_binary: bool = True):
    """A CRI-O node root: the NVIDIA handler's drop-in, its binary, the toolkit's configuration
    (key false), a CDI spec; ``crio_binary``: CRI-O's own (absent: a folder of collected files)."""
    files = {PACKAGES_TOOLKIT: f"{KEY} = false\n", "/etc/cdi/nvidia.yaml": CDI_SPEC,
             "/etc/crio/crio.conf.d/10-crio.conf": '[crio.runtime]\ndefault_runtime = "crun"\n'}
    if dropin is not None:
        files[DROPIN] = dropin
    if binary:
        files[NVIDIA] = "the NVIDIA runtime's stand-in\n"
    if crio_binary:
        files["/usr/bin/crio"] = "CRI-O's stand-in (the oracle runs the real one)\n"
    return write_root(tmp_path / "node", files)


def asked(daemon) -> tuple[dict, dict]:
    """(the probe's answer, the one runtime it found) on the daemon's node."""
    live = Probe(daemon.run).run_all()
    found = [r for r in live["runtimes"] if r["pid"] == daemon.pid]
    assert len(found) == 1, live
    return live, found[0]


def test_the_probe_asks_the_running_crio_and_agrees_with_the_files(binaries, tmp_path):
    version, paths = binaries
    with oracle.serve(paths, version, node(tmp_path)) as daemon:
        live, r = asked(daemon)
        judged = verify_node_root(str(daemon.root), PRESET)
    assert r["kind"] == "cri-o" and r["version"] == version, r
    assert r["running_source"] == "`crio status config` (the running daemon)", r
    assert r["running"] == {"default_runtime": "crun", "handlers": {"crun": "/usr/bin/crun", "nvidia": NVIDIA}}
    assert r["files"]["default_runtime"] == "crun" and r["files"]["handlers"]["nvidia"] == NVIDIA, r["files"]
    assert live["findings"] == [], live["findings"]
    out = reconcile(judged, live, PRESET)
    assert (out["source"], out["verdict"], judged["ready"]) == (SOURCE_BOTH, ISOLATED, READY), out["findings"]


def test_a_handler_added_after_the_start_is_judged_as_crio_runs(binaries, tmp_path):
    """The drop-in is written while CRI-O runs: its files say nvidia, the daemon does not have it."""
    version, paths = binaries
    with oracle.serve(paths, version, node(tmp_path, dropin=None)) as daemon:
        (daemon.root / DROPIN.lstrip("/")).write_text(HANDLER)
        live, r = asked(daemon)
        judged = verify_node_root(str(daemon.root), PRESET)
    assert "nvidia" not in r["running"]["handlers"] and r["files"]["handlers"]["nvidia"] == NVIDIA, r
    assert [f["check"] for f in live["findings"]] == ["runtime-not-restarted"], live["findings"]
    assert "restart cri-o on the node (systemctl restart crio)" in live["findings"][0]["fix"]
    assert judged["ready"] == READY, "the files alone say the handler is there"
    out = reconcile(judged, live, PRESET)
    assert out["source"] == SOURCE_RUNTIME, out
    assert any(f["check"] == "runtime-not-restarted" for f in out["findings"]), out["findings"]


@pytest.mark.parametrize("crio_binary", [True, False], ids=["node-root", "collected-files"])
def test_a_handler_whose_binary_is_missing_is_not_running(binaries, tmp_path, crio_binary):
    """CRI-O drops the handler as it starts. The file judge says so itself on a node's root; on
    collected files (no binaries to judge) it takes the handler as configured, and the running
    daemon's answer decides."""
    version, paths = binaries
    with oracle.serve(paths, version, node(tmp_path, binary=False, crio_binary=crio_binary)) as daemon:
        live, r = asked(daemon)
        log = daemon.log()
        judged = verify_node_root(str(daemon.root), PRESET)
    assert "nvidia" in oracle.parse(log, None)["dropped"], log[-2000:]  # "is being ignored due to"
    assert r["running"]["handlers"] == {"crun": "/usr/bin/crun"}, r
    out = reconcile(judged, live, PRESET)
    if crio_binary:
        assert judged["ready"] == NOT_READY and out["source"] == SOURCE_BOTH, out["findings"]
        assert any("CRI-O drops the runtime handler 'nvidia'" in n for n in judged["notes"]), judged["notes"]
    else:
        assert judged["ready"] == READY and out["source"] == SOURCE_RUNTIME, out["findings"]
    found = readiness(out, "nvidia")
    assert ready_of(found) == NOT_READY, found
    if not crio_binary:
        assert any(f["check"] == "runtime-handler-not-running" for f in found), found
        assert any(f["check"] == "runtime-disagrees" for f in out["findings"]), out["findings"]

"""The live judge (module_utils bcd_runtime_live, module bcd_runtime_info) on real containerd output.

Every output parsed here is real: tests/fixtures/containerd-live/<release>/ holds, for each release
of the sandbox's cache (1.7.35, 2.2.9, 2.3.4, 2.4.2) and each configuration there, what
``containerd --config <file> config dump`` printed and the CRI plugin's start-up line of the
daemon's own log (capture.py there made them, booting the real daemon), and what ``crictl info``
(sandbox/crictl.py's build) answered over CRI from that daemon. ``1.6.20/kind-worker.*`` are the
same, asked of a kind test bed worker's containerd (Debian's 1.6.20 under systemd) as ``kind up``
left it, its start-up line from its journal. The probe tests run the
real binaries themselves (``--version``, ``config dump``) from the cache, on a process table that
names them; only the journal, which holds the daemon's start-up line on a node, is given that
captured line.
"""

from __future__ import annotations

import os
import shutil
import tomllib
from pathlib import Path

import pytest
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_containerd import family_of, parse_version
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_gpu_isolation import (
    NOT_READY,
    READY,
    UNVERIFIABLE,
    readiness,
    ready_of,
    verify_node_root,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_runtime_live import (
    Probe,
    cri_from_crictl,
    cri_from_dump,
    cri_from_log,
    differences,
    judge_cri,
    reconcile,
)

from sandbox import containerd as oracle

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "containerd-live"
VERSIONS = oracle.VERSIONS
CASES = ("runc", "nvidia", "nvidia-default")
NVIDIA = "/usr/local/bin/nvidia-container-runtime"
EXPECTED = {
    "runc": {"default_runtime": "runc", "handlers": {"runc": None}},
    "nvidia": {"default_runtime": "runc", "handlers": {"runc": None, "nvidia": NVIDIA}},
    "nvidia-default": {"default_runtime": "nvidia", "handlers": {"runc": None, "nvidia": NVIDIA}},
}
PRESET = {"files": ["/etc/containerd/config.toml"], "dirs": []}


def dump(version: str, case: str) -> dict:
    return cri_from_dump(tomllib.loads((FIXTURES / version / f"{case}.dump.toml").read_text()))


def logged(version: str, case: str) -> dict:
    return cri_from_log((FIXTURES / version / f"{case}.cri-log.txt").read_text().splitlines())


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", CASES)
def test_config_dump_and_the_start_up_log_read_the_same_runtimes(version, case):
    files, running = dump(version, case), logged(version, case)
    for got in (files, running):
        assert {k: got[k] for k in ("default_runtime", "handlers")} == EXPECTED[case]
    assert differences(running, files) == []
    judged = judge_cri(running)
    assert judged["nvidia_handlers"] == ([] if case == "runc" else ["nvidia"])
    assert judged["default_is_nvidia"] is (case == "nvidia-default")


def test_the_dump_keeps_the_cri_runtimes_where_each_release_does():
    # 1.x dumps version 2 (io.containerd.grpc.v1.cri), 2.x version 3+ (io.containerd.cri.v1.runtime)
    for version in VERSIONS:
        doc = tomllib.loads((FIXTURES / version / "nvidia.dump.toml").read_text())
        key = "io.containerd.grpc.v1.cri" if version.startswith("1.") else "io.containerd.cri.v1.runtime"
        assert "runtimes" in doc["plugins"][key]["containerd"], version
        assert parse_version((FIXTURES / version / "version.txt").read_text()) == tuple(map(int, version.split(".")))


def crictl_said(version: str, case: str) -> dict | None:
    return cri_from_crictl((FIXTURES / version / f"{case}.crictl-info.json").read_text())


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", CASES)
def test_crictl_info_reads_what_the_daemon_logged_and_the_dump_says(version, case):
    running = crictl_said(version, case)
    assert running == EXPECTED[case]
    assert differences(running, logged(version, case)) == []
    assert differences(running, dump(version, case)) == []


def test_crictl_info_keeps_the_configuration_where_each_release_puts_it():
    # the parser must not depend on one release's layout: say which one each release has
    import json

    for version in VERSIONS:
        info = json.loads((FIXTURES / version / "nvidia.crictl-info.json").read_text())
        assert isinstance(info.get("config"), dict), (version, sorted(info))
        assert "runtimes" in info["config"]["containerd"], version
    assert cri_from_crictl("not json") is None
    assert cri_from_crictl('{"status": {}}') is None


KIND = FIXTURES / "1.6.20"


def test_crictl_info_on_a_kind_worker_agrees_with_its_journal_and_its_dump():
    running = cri_from_crictl((KIND / "kind-worker.crictl-info.json").read_text())
    assert running is not None and running["default_runtime"] == "runc" and running["handlers"]["runc"] is None
    # 1.6's start-up line is Go's %+v, parsed apart from crictl's JSON: both must read the same
    assert running == cri_from_log((KIND / "kind-worker.cri-log.txt").read_text().splitlines())
    files = cri_from_dump(tomllib.loads((KIND / "kind-worker.dump.toml").read_text()))
    assert differences(running, files) == []
    assert parse_version((KIND / "version.txt").read_text()) == (1, 6, 20)


def test_differences_name_both_sides():
    diff = differences(logged("2.4.2", "nvidia"), dump("2.4.2", "runc"))
    assert diff == [f"handler 'nvidia' ({NVIDIA}) only in the first"]
    diff = differences(logged("1.7.35", "nvidia-default"), dump("1.7.35", "nvidia"))
    assert diff == ["default runtime 'nvidia' against 'runc'"]


# --- the probe, running the real binaries -------------------------------------------------------

def fake_proc(tmp_path: Path, binary: Path, argv: list[str]) -> Path:
    """A process table with one containerd: comm, cmdline and exe as the kernel gives them, and
    this test process's own stat (a real start time) and the real /proc/stat."""
    proc = tmp_path / "proc"
    pid = proc / "4242"
    pid.mkdir(parents=True)
    (pid / "comm").write_text("containerd\n")
    (pid / "cmdline").write_text("\0".join(argv) + "\0")
    (pid / "exe").symlink_to(binary)
    (pid / "stat").write_text(Path(f"/proc/{os.getpid()}/stat").read_text())
    (proc / "stat").write_text(Path("/proc/stat").read_text())
    (proc / "self").mkdir()  # not a pid: skipped
    return proc


def runner(journal: str | None):
    import subprocess

    def run(argv):
        if argv[0] == "journalctl":
            return (0, journal, "") if journal is not None else (1, "", "No journal files were found.")
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        return p.returncode, p.stdout, p.stderr
    return run


def binary(version: str) -> Path:
    # built here when Go is at hand, as the differential test does, so that whether these run
    # does not depend on that test having run first on a cold cache
    b = oracle.cached(version)
    if b is None and shutil.which("go"):
        b = oracle.resolve((version,))[0][version]
    if b is None:
        pytest.skip(f"containerd {version} is not built in the sandbox's cache and `go` is not on PATH "
                    "to build it (python -m sandbox containerd build)")
    return b


@pytest.mark.parametrize("version", VERSIONS)
def test_the_probe_asks_the_real_binary_and_the_journal(tmp_path, version):
    config = tmp_path / "etc/bcd-live/config.toml"
    config.parent.mkdir(parents=True)
    config.write_text((FIXTURES / version / "nvidia.config.toml").read_text())
    b = binary(version)
    proc = fake_proc(tmp_path, b, ["/usr/bin/containerd", "--config", str(config)])
    journal = (FIXTURES / version / "nvidia.cri-log.txt").read_text()
    live = Probe(runner(journal), str(proc), tools={"journalctl": "journalctl", "crictl": None, "k3s": None,
                                                    "rke2-crictl": None}).run_all()
    (r,) = live["runtimes"]
    assert r["pid"] == 4242 and r["binary"] == str(b) and r["config"] == str(config) and r["config_from"] == "--config"
    assert parse_version(r["version"]) == tuple(map(int, version.split(".")))
    assert {k: r["files"][k] for k in ("default_runtime", "handlers")} == EXPECTED["nvidia"]
    assert r["running"] == EXPECTED["nvidia"] and "start-up log" in r["running_source"]
    assert r["loaded_files"][0] == str(config)
    # written after this process (the "daemon") started
    assert [c["file"] for c in r["changed_since_start"]] == [str(config)]
    assert r["judged"]["nvidia_handlers"] == ["nvidia"]
    assert live["findings"] == [], "running and files agree"


@pytest.mark.parametrize("crictl_works", [True, False])
def test_the_probe_takes_crictls_answer_before_the_journal(tmp_path, crictl_works):
    config = tmp_path / "etc/containerd/config.toml"
    config.parent.mkdir(parents=True)
    config.write_text((FIXTURES / "2.4.2" / "nvidia.config.toml").read_text())
    proc = fake_proc(tmp_path, binary("2.4.2"), ["containerd", "-c", str(config)])
    info = (FIXTURES / "2.4.2" / "nvidia-default.crictl-info.json").read_text()
    journal = (FIXTURES / "2.4.2" / "nvidia.cri-log.txt").read_text()
    real = runner(journal)
    asked = []

    def run(argv):
        if argv[0] == "/usr/local/bin/crictl":  # what crictl answered, captured from the real daemon
            asked.append(argv)
            return (0, info, "") if crictl_works else (1, "", "connect: connection refused")
        return real(argv)

    live = Probe(run, str(proc), tools={"journalctl": "journalctl", "crictl": "/usr/local/bin/crictl",
                                        "k3s": None, "rke2-crictl": None}).run_all()
    (r,) = live["runtimes"]
    assert asked == [["/usr/local/bin/crictl", "--runtime-endpoint", "unix:///run/containerd/containerd.sock", "info"]]
    if crictl_works:
        assert r["running"] == EXPECTED["nvidia-default"]
        assert r["running_source"] == "`/usr/local/bin/crictl info` on unix:///run/containerd/containerd.sock"
        # crictl's default runtime (nvidia) is not the files' (runc): the running one is reported
        assert [f["check"] for f in live["findings"]] == ["runtime-not-restarted"]
    else:
        assert r["running"] == EXPECTED["nvidia"] and "start-up log" in r["running_source"]
        assert live["findings"] == []


def test_the_probe_finds_a_runtime_not_restarted_since_its_files_changed(tmp_path):
    config = tmp_path / "etc/containerd/config.toml"
    config.parent.mkdir(parents=True)
    config.write_text((FIXTURES / "2.4.2" / "runc.config.toml").read_text())  # the nvidia runtime removed
    proc = fake_proc(tmp_path, binary("2.4.2"), ["containerd", "-c", str(config)])
    journal = (FIXTURES / "2.4.2" / "nvidia.cri-log.txt").read_text()  # what it started with
    live = Probe(runner(journal), str(proc), tools={"journalctl": "journalctl", "crictl": None, "k3s": None,
                                                    "rke2-crictl": None}).run_all()
    (f,) = live["findings"]
    assert f["status"] == UNVERIFIABLE and f["check"] == "runtime-not-restarted"
    assert f"nvidia={NVIDIA}" in f["message"] and "was not restarted since" in f["message"]
    assert str(config) in f["message"] and "systemctl restart containerd" in f["fix"]


def test_the_probe_says_what_it_could_not_ask(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("version = 2\n")
    proc = fake_proc(tmp_path, binary("1.7.35"), ["containerd", "--config", str(config)])
    live = Probe(runner(None), str(proc), tools={"journalctl": None, "crictl": None, "k3s": None,
                                                 "rke2-crictl": None}).run_all()
    (r,) = live["runtimes"]
    assert r["running"] is None and "crictl is not installed" in r["running_error"]
    assert "no journalctl" in r["running_error"]
    # changed after start, and what runs cannot be asked: not judged from the files alone
    assert [f["check"] for f in live["findings"]] == ["runtime-not-restarted"]
    # nothing runs at all: a note, never an error
    empty = tmp_path / "empty"
    empty.mkdir()
    none = Probe(runner(None), str(empty)).run_all()
    assert none["runtimes"] == [] and "no containerd or CRI-O process" in none["notes"][0]


# --- against the file judge ----------------------------------------------------------------------

def node_root(tmp_path: Path, case: str, version: str, where: str = "/etc/containerd/config.toml") -> Path:
    root = tmp_path / "root"
    f = root / where.lstrip("/")
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text((FIXTURES / version / f"{case}.config.toml").read_text())
    (root / "usr/local/bin").mkdir(parents=True, exist_ok=True)
    (root / "usr/local/bin/nvidia-container-runtime").write_text("#!/bin/sh\n")
    return root


def live_of(version: str, running: str | None, files: str, config: str = "/etc/containerd/config.toml",
            loaded: list[str] | None = None) -> dict:
    """What Probe.run_all returns for one containerd, from the captured outputs."""
    r = {
        "kind": "containerd", "pid": 7, "argv": ["containerd"], "binary": "/usr/bin/containerd",
        "version": (FIXTURES / version / "version.txt").read_text().strip(), "started": "2026-12-01T20:00:00Z",
        "started_epoch": 0.0, "config": config, "config_from": "default" if config.startswith("/etc/containerd/") else "--config",
        "address": "/run/containerd/containerd.sock",
        "running": logged(version, running) if running else None,
        "running_source": "containerd's own start-up log" if running else None,
        "running_error": None if running else "crictl is not installed",
        "files": dump(version, files), "files_error": None, "loaded_files": loaded or [config],
        "changed_since_start": [],
    }
    r["judged"] = judge_cri(r["running"] or r["files"])
    from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_runtime_live import live_findings

    return {"runtimes": [r], "notes": [], "findings": live_findings([r])}


@pytest.mark.parametrize("version", VERSIONS)
def test_runtime_and_files_agree(tmp_path, version):
    node = verify_node_root(str(node_root(tmp_path, "nvidia", version)), PRESET,
                            containerd_version=(FIXTURES / version / "version.txt").read_text())
    assert node["runtime_configs"][0]["family"] == family_of(parse_version(version))
    out = reconcile(node, live_of(version, "nvidia", "nvidia"), PRESET)
    assert out["source"] == "both"
    assert out["findings"] == node["findings"] and out["runtime_mount"] == []
    assert any("NVIDIA handlers: nvidia" in n for n in out["notes"])
    assert out["live"]["running_handlers"]["nvidia"]["binary"] == NVIDIA


def test_a_config_edited_but_not_loaded_is_judged_as_it_runs(tmp_path):
    # the files now say runc only (the file judge agrees), containerd still runs the nvidia runtime
    version = "2.4.2"
    node = verify_node_root(str(node_root(tmp_path, "runc", version)), PRESET, handler="nvidia",
                            containerd_version=version)
    assert not any(c["check"] == "runtime-not-restarted" for c in node["findings"])
    out = reconcile(node, live_of(version, "nvidia", "runc"), PRESET)
    assert out["source"] == "runtime" and out["verdict"] == UNVERIFIABLE
    (f,) = [f for f in out["findings"] if f["check"] == "runtime-not-restarted"]
    assert f"nvidia={NVIDIA}" in f["message"] and "files now (config dump)" in f["message"]
    # the runtime wins for readiness too: it runs the nvidia handler, so bcd's pod can start today
    ready = readiness(out, "nvidia")
    assert not any(r["check"] == "runtime-handler-not-running" for r in ready)


def test_a_handler_in_the_files_but_not_running_is_not_ready(tmp_path):
    version = "1.7.35"
    node = verify_node_root(str(node_root(tmp_path, "nvidia", version)), PRESET, handler="nvidia",
                            containerd_version=version)
    out = reconcile(node, live_of(version, "runc", "nvidia"), PRESET)
    checks = {r["check"] for r in readiness(out, "nvidia")}
    assert "runtime-handler-not-running" in checks
    assert ready_of(readiness(out, "nvidia")) == NOT_READY
    assert out["source"] == "runtime"


def test_the_file_judge_and_containerd_disagreeing_is_a_finding_naming_both(tmp_path):
    # the node root holds runc only; containerd's own dump and its running config hold nvidia
    version = "2.2.9"
    node = verify_node_root(str(node_root(tmp_path, "runc", version)), PRESET, containerd_version=version)
    out = reconcile(node, live_of(version, "nvidia", "nvidia"), PRESET)
    (f,) = [f for f in out["findings"] if f["check"] == "runtime-disagrees"]
    assert "the file judge read /etc/containerd/config.toml" in f["message"]
    assert f"nvidia={NVIDIA}" in f["message"] and "runtime's answer wins" in f["message"]
    assert out["verdict"] == UNVERIFIABLE and out["source"] == "runtime"


def test_a_config_outside_the_preset_names_the_files_to_mount(tmp_path):
    # containerd runs with --config elsewhere; the unit the file judge reads does not say so
    version = "2.3.4"
    node = verify_node_root(str(node_root(tmp_path, "runc", version)), PRESET, containerd_version=version)
    assert node["containerd_config"] == "/etc/containerd/config.toml"
    live = live_of(version, "nvidia", "nvidia", config="/etc/bcd-live/config.toml")
    out = reconcile(node, live, PRESET)
    (path,) = [f for f in out["findings"] if f["check"] == "runtime-config-path"]
    assert "runs with --config /etc/bcd-live/config.toml" in path["message"]
    assert "the files (containerd.service and its drop-ins) say /etc/containerd/config.toml" in path["message"]
    (mount,) = [f for f in out["runtime_mount"] if f["check"] == "runtime-config-not-mounted"]
    assert mount["status"] == NOT_READY
    assert "bcd_container_runtime: {files: [/etc/bcd-live/config.toml]" in mount["fix"]
    assert ready_of(readiness(out, "nvidia")) == NOT_READY
    assert out["source"] == "runtime"


def test_a_unit_drop_in_config_found_by_both_is_said_once(tmp_path):
    version = "2.4.2"
    root = node_root(tmp_path, "nvidia", version, where="/etc/bcd-live/config.toml")
    dropin = root / "etc/systemd/system/containerd.service.d/10-bcd-live.conf"
    dropin.parent.mkdir(parents=True)
    dropin.write_text("[Service]\nExecStart=\nExecStart=/usr/bin/containerd --config /etc/bcd-live/config.toml\n")
    node = verify_node_root(str(root), PRESET, containerd_version=version)
    assert node["containerd_config"] == "/etc/bcd-live/config.toml"
    out = reconcile(node, live_of(version, "nvidia", "nvidia", config="/etc/bcd-live/config.toml"), PRESET)
    (mount,) = out["runtime_mount"]
    assert mount["check"] == "runtime-config-not-mounted" and "/etc/bcd-live/config.toml" in mount["fix"]
    assert "The running containerd (pid 7, containerd github.com/containerd/containerd/v2 v2.4.2) confirms it: it runs " \
           "with --config /etc/bcd-live/config.toml." in mount["message"]
    assert not any(f["check"] in ("runtime-config-path", "runtime-disagrees") for f in out["findings"])
    assert out["source"] == "both"


def test_without_the_runtime_the_files_are_the_source(tmp_path):
    version = "2.4.2"
    node = verify_node_root(str(node_root(tmp_path, "nvidia", version)), PRESET, containerd_version=version)
    out = reconcile(node, {"runtimes": [], "notes": ["no containerd or CRI-O process runs"], "findings": []}, PRESET)
    assert out["source"] == "files" and out["verdict"] == node["verdict"]
    assert readiness(out, "nvidia") == readiness(node, "nvidia")
    assert ready_of([]) == READY


def test_the_module_answers_on_this_machine_in_check_mode_too():
    from tests.helpers import run_module

    for check in (False, True):
        code, out = run_module("bcd_runtime_info", {}, check_mode=check)
        assert code == 0 and out["changed"] is False, out
        live = out["runtime"]
        assert set(live) == {"runtimes", "notes", "findings"}
        # each runtime found here was asked, or says why not; none found is a note
        for r in live["runtimes"]:
            assert r["files"] is not None or r["files_error"]
            assert r["running"] is not None or r["running_error"]
        if not live["runtimes"]:
            # none at all, or only containers' own (the kind test bed's nodes, when it is up)
            assert ("no containerd or CRI-O process" in live["notes"][0]
                    or "run in another PID namespace" in live["notes"][0]), live["notes"]


def test_a_runtime_in_a_container_of_the_node_is_not_the_nodes(tmp_path):
    # kind nodes and Docker-in-Docker run containerd in a PID namespace of their own
    proc = fake_proc(tmp_path, binary("2.4.2"), ["containerd"])
    (proc / "self/ns").mkdir(parents=True)
    (proc / "self/ns/pid").symlink_to("pid:[4026531836]")
    (proc / "4242/ns").mkdir()
    (proc / "4242/ns/pid").symlink_to("pid:[4026532999]")
    live = Probe(runner(None), str(proc)).run_all()
    assert live["runtimes"] == []
    assert "containerd (pid 4242) run in another PID namespace" in live["notes"][0]
    # the same namespace: asked
    (proc / "4242/ns/pid").unlink()
    (proc / "4242/ns/pid").symlink_to("pid:[4026531836]")
    assert [r["pid"] for r in Probe(runner(None), str(proc)).run_all()["runtimes"]] == [4242]

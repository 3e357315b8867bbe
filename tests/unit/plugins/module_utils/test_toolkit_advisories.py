"""Known container escapes of the NVIDIA Container Toolkit: the table, the release a node runs,
and how a node, a ClusterPolicy and an operator's waiver are judged."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_containerd import VERSION_FILE
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_gpu_isolation import (
    EXPOSED,
    ISOLATED,
    KEY,
    VOLUME_KEY,
    apply_waivers,
    cluster_policy_findings,
    verify_node_root,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_model import ConfigError, load_some
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_toolkit_advisories import (
    ADVISORIES,
    exposures,
    parse_release,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_toolkit_advisories import (
    VERSION_FILE as TOOLKIT_VERSION_FILE,
)

# What the binaries print (the toolkit's internal/runtime/runtime.go, cmd/nvidia-container-runtime-hook,
# nvidia-ctk's urfave/cli app name; libnvidia-container's src/cli/main.c).
RUNTIME = "NVIDIA Container Runtime version {v}\ncommit: 0b1c2d3\nspec: 1.2.1\n\nrunc version 1.2.5\n"
HOOK = "NVIDIA Container Runtime Hook version {v}\ncommit: 0b1c2d3\n"
CTK = "NVIDIA Container Toolkit CLI version {v}\ncommit: 0b1c2d3\n"
CLI = "cli-version: {v}\nlib-version: {v}\nbuild date: 2025-07-10T15:05+00:00\n"
CONTAINERD = "containerd github.com/containerd/containerd/v2 v2.1.4 75cb2b7193e4e490e9fbdc236c0e811ccaba3376\n"
# the settings gpu-stack.yml writes in packages mode, and the runtime that reads them
REQUIRED = f"{KEY} = false\n{VOLUME_KEY} = false\n"
NVIDIA_DEFAULT = """version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
  BinaryName = "/usr/bin/nvidia-container-runtime"
"""


def root_with(tmp_path: Path, version: str | None, toolkit: str = REQUIRED) -> str:
    root = tmp_path / "root"
    files = {VERSION_FILE: CONTAINERD, "etc/containerd/config.toml": NVIDIA_DEFAULT,
             "etc/nvidia-container-runtime/config.toml": toolkit}
    if version is not None:
        files[TOOLKIT_VERSION_FILE] = RUNTIME.format(v=version) + CLI.format(v=version)
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return str(root)


def cves(result) -> list[str]:
    return [f["cve"] for f in result["findings"] if f["check"] == "toolkit-cve"]


@pytest.mark.parametrize(("text", "want"), [
    (RUNTIME.format(v="1.17.8"), (1, 17, 8, 0)),
    (HOOK.format(v="1.19.1"), (1, 19, 1, 0)),
    (CTK.format(v="1.20.0"), (1, 20, 0, 0)),
    ("NVIDIA Container Runtime version 1.18.0-rc.2\ncommit: x\n", (1, 18, 0, -998)),
    ("v1.17.8-ubuntu20.04", (1, 17, 8, 0)),
    ("v1.18.0", (1, 18, 0, 0)),
    ("sha256:0123abcd", None),
    ("runc version 1.2.5\ncommit: v1.2.5-0-g59923ef1\n", None),
])
def test_release_from_version_output_and_image_tags(text, want):
    assert parse_release(text) == want


def test_libnvidia_container_release_is_read_apart():
    text = RUNTIME.format(v="1.17.8") + CLI.format(v="1.17.2")
    assert parse_release(text) == (1, 17, 8, 0)
    assert parse_release(text, cli=True) == (1, 17, 2, 0)
    # nvidia-container-cli 1.17.2 has the libnvidia-container escapes fixed in 1.17.3
    found = {e["cve"] for e in exposures(parse_release(text), parse_release(text, cli=True))}
    assert found == {"CVE-2024-0136", "CVE-2024-0137", "CVE-2025-23359", "CVE-2026-24260"}


@pytest.mark.parametrize("advisory", ADVISORIES, ids=lambda a: a["cve"])
def test_each_advisory_holds_up_to_its_fix_and_not_after(advisory):
    major, minor, patch = (int(x) for x in advisory["fixed"].split("."))
    fixed = (major, minor, patch, 0)
    before = (major, minor, patch - 1, 0) if patch else (major, minor - 1, 9, 0)
    assert advisory["cve"] in {e["cve"] for e in exposures(before)}
    assert advisory["cve"] not in {e["cve"] for e in exposures(fixed)}
    # an rc of the fixing release is older than the release
    assert advisory["cve"] in {e["cve"] for e in exposures((major, minor, patch, -99))}
    assert advisory["sources"][0].startswith("https://nvidia.custhelp.com/app/answers/detail/a_id/")
    assert advisory["operator"].startswith("v")


def test_a_collected_root_with_toolkit_1_17_7_is_not_isolated(tmp_path):
    """The required settings do not help against an escape in the toolkit's own hooks."""
    result = verify_node_root(root_with(tmp_path, "1.17.7"))
    assert result["verdict"] == EXPOSED
    assert result["toolkit_version"] == "1.17.7"
    assert cves(result) == ["CVE-2025-23266", "CVE-2025-23267", "CVE-2026-24260"]
    nvidiascape = next(f for f in result["findings"] if f.get("cve") == "CVE-2025-23266")
    assert nvidiascape["where"] == f"/{TOOLKIT_VERSION_FILE}" and nvidiascape["fixed"] == "1.17.8"
    assert "fixed in toolkit 1.17.8" in nvidiascape["message"]
    assert "1.17.8 or later (GPU operator v25.3.1 or later" in nvidiascape["fix"]
    # one upgrade clears all three: said in each fix
    assert "1.19.1 or later (GPU operator v26.3.2) clears all 3 known escapes found here" in nvidiascape["fix"]
    assert "bcd_toolkit_cve_waivers" in nvidiascape["fix"]


def test_the_same_root_with_toolkit_1_20_0_is_isolated(tmp_path):
    result = verify_node_root(root_with(tmp_path, "1.20.0"))
    assert result["verdict"] == ISOLATED, result["findings"]
    assert result["toolkit_version"] == "1.20.0" and not cves(result)
    assert any(n.startswith("toolkit 1.20.0, libnvidia-container 1.20.0") and "none of the" in n for n in result["notes"])


def test_two_toolkit_installs_are_judged_by_the_older(tmp_path):
    """A node with the operator's toolkit and an old package's hook: the old hook still runs."""
    root = root_with(tmp_path, "1.20.0")
    with open(f"{root}/{TOOLKIT_VERSION_FILE}", "a") as f:
        f.write(CTK.format(v="1.17.7"))
    result = verify_node_root(root)
    assert result["verdict"] == EXPOSED and result["toolkit_version"] == "1.17.7"
    assert "CVE-2025-23266" in cves(result)


def test_libnvidia_container_alone_is_judged_for_its_own(tmp_path):
    root = root_with(tmp_path, None)
    with open(f"{root}/{TOOLKIT_VERSION_FILE}", "w") as f:
        f.write(CLI.format(v="1.17.2"))
    result = verify_node_root(root)
    assert cves(result) == ["CVE-2024-0136", "CVE-2024-0137", "CVE-2025-23359"]
    assert any("only libnvidia-container's known container escapes were checked" in n for n in result["notes"])


def test_an_unknown_release_is_a_note_not_a_verdict(tmp_path):
    result = verify_node_root(root_with(tmp_path, None))
    assert result["verdict"] == ISOLATED and result["toolkit_version"] is None
    assert any("release is unknown" in n and TOOLKIT_VERSION_FILE in n for n in result["notes"])


def test_the_withdrawn_mitigation_does_not_clear_nvidiascape(tmp_path):
    """NVIDIA's first bulletin gave features.disable-cuda-compat-lib-hook; its revision dropped it."""
    toolkit = REQUIRED + "[features]\ndisable-cuda-compat-lib-hook = true\n"
    result = verify_node_root(root_with(tmp_path, "1.17.7", toolkit))
    nvidiascape = next(f for f in result["findings"] if f.get("cve") == "CVE-2025-23266")
    assert nvidiascape["status"] == EXPOSED
    assert "no longer does" in nvidiascape["message"]


def test_the_version_output_given_on_the_node_wins_over_the_file(tmp_path):
    result = verify_node_root(root_with(tmp_path, "1.20.0"), toolkit_version=HOOK.format(v="1.17.3"))
    assert "CVE-2025-23359" in cves(result)
    assert result["findings"][0]["where"] == "the toolkit binaries' --version"


def test_the_binaries_the_runtimes_run_are_the_ones_asked(tmp_path):
    asked = []

    def ask(binaries):
        asked.append(binaries)
        return RUNTIME.format(v="1.17.3")

    result = verify_node_root(root_with(tmp_path, "1.20.0"), toolkit_version=ask)
    assert asked == [["/usr/bin/nvidia-container-runtime"]]
    assert "CVE-2025-23359" in cves(result)


def test_no_toolkit_in_use_no_release_check(tmp_path):
    root = tmp_path / "root"
    (root / "etc/containerd").mkdir(parents=True)
    (root / VERSION_FILE).write_text(CONTAINERD)
    (root / "etc/containerd/config.toml").write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
                                                     '  runtime_type = "io.containerd.runc.v2"\n')
    (root / TOOLKIT_VERSION_FILE).write_text(RUNTIME.format(v="1.16.0"))
    result = verify_node_root(str(root))
    assert not cves(result)


POLICY = {"metadata": {"name": "cluster-policy"},
          "spec": {"devicePlugin": {"enabled": False}, "cdi": {"enabled": True},
                   "toolkit": {"env": [{"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED", "value": "false"}]}}}


def policy(**toolkit):
    return {**POLICY, "spec": {**POLICY["spec"], "toolkit": {**POLICY["spec"]["toolkit"], **toolkit}}}


@pytest.mark.parametrize(("toolkit", "want"), [
    ({"version": "v1.17.7-ubuntu20.04"}, ["CVE-2025-23266", "CVE-2025-23267", "CVE-2026-24260"]),
    ({"version": "v1.19.0"}, ["CVE-2026-24260"]),
    ({"version": "v1.19.1"}, []),
    ({"image": "nvcr.io/nvidia/k8s/container-toolkit:v1.18.1"}, ["CVE-2026-24260"]),
    ({"version": "sha256:0123abcd"}, []),  # a digest names no release: the nodes' files decide
    ({"version": "v1.17.7-ubuntu20.04", "env": [*POLICY["spec"]["toolkit"]["env"],
      {"name": "NVIDIA_CONTAINER_TOOLKIT_OPT_IN_FEATURES", "value": "disable-cuda-compat-lib-hook"}]},
     ["CVE-2025-23266", "CVE-2025-23267", "CVE-2026-24260"]),
])
def test_the_operators_toolkit_image(toolkit, want):
    found = [f for f in cluster_policy_findings(policy(**toolkit), True) if f["check"] == "toolkit-cve"]
    assert [f["cve"] for f in found] == want
    for f in found:
        assert f["where"] == "ClusterPolicy/cluster-policy" and "spec.toolkit.version" in f["fix"]


def node(name, version_cves):
    return {"name": name, "verdict": EXPOSED, "ready": "ready", "notes": [],
            "findings": [{"status": EXPOSED, "check": "toolkit-cve", "where": "/x", "message": f"has {c}", "fix": "up",
                          "cve": c} for c in version_cves]}


def test_a_waiver_takes_a_named_node_and_cve_out_of_the_verdict_until_its_date():
    waiver = {"node": "gpu-node-1", "cve": "CVE-2025-23266", "until": "2027-01-31", "reason": "change 4711"}
    nodes = [node("gpu-node-1", ["CVE-2025-23266"]), node("gpu-node-2", ["CVE-2025-23266"]),
             node("gpu-node-3", ["CVE-2025-23266", "CVE-2026-24260"])]
    apply_waivers(nodes, [waiver, {**waiver, "node": "gpu-node-3"}], "2027-01-31")
    assert nodes[0]["verdict"] == ISOLATED and nodes[0]["waived"][0]["waiver"] == waiver
    assert any("waived until 2027-01-31 (change 4711)" in n for n in nodes[0]["notes"])
    assert nodes[1]["verdict"] == EXPOSED and "waived" not in nodes[1]  # another node
    assert nodes[2]["verdict"] == EXPOSED and [f["cve"] for f in nodes[2]["findings"]] == ["CVE-2026-24260"]


def test_an_expired_waiver_gives_the_finding_back_saying_so():
    nodes = [node("gpu-node-1", ["CVE-2025-23266"])]
    apply_waivers(nodes, [{"node": "*", "cve": "CVE-2025-23266", "until": "2027-01-31", "reason": "r"}], "2027-02-01")
    assert nodes[0]["verdict"] == EXPOSED and "waived" not in nodes[0]
    assert "its waiver expired after 2027-01-31" in nodes[0]["findings"][0]["message"]


def test_a_waiver_for_a_cve_the_table_does_not_know_is_refused():
    with pytest.raises(ConfigError) as err:
        load_some({"bcd_toolkit_cve_waivers": [{"node": "n", "cve": "CVE-2025-2326", "until": "2027-01-31",
                                                "reason": "r"}]}, ("bcd_toolkit_cve_waivers",))
    assert "bcd_toolkit_cve_waivers" in "\n".join(err.value.lines)
    assert "CVE-2025-23266" in "\n".join(err.value.lines)


class _Module:
    """What toolkit_version needs of an AnsibleModule: run_command."""

    def run_command(self, argv):
        import subprocess

        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        return done.returncode, done.stdout, done.stderr


def test_on_the_node_the_binaries_the_runtimes_run_are_asked(tmp_path):
    from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_isolation_node import toolkit_version

    runtime = tmp_path / "nvidia-container-runtime"
    runtime.write_text("#!/bin/sh\n[ \"$1\" = --version ] && printf 'NVIDIA Container Runtime version 1.17.7\\n'\n")
    runtime.chmod(0o755)
    binaries = [str(runtime), "nvidia-container-runtime-hook"]
    text = toolkit_version(_Module(), "/", binaries)
    assert parse_release(text) == (1, 17, 7, 0)
    # only on the node itself: a collected root's binaries are never run
    assert toolkit_version(_Module(), str(tmp_path), binaries) is None

"""Every case of shared/cases/gpu-runtime-effective reaches its verdict, its readiness where the
cases' table gives one, and names each file that is not in effect (one test per case).

The cases are kept in tests/fixtures/gpu-runtime-effective (a copy, so a fresh checkout tests
itself); when the shared originals sit next to the repository, the copy must not have drifted.
"""

from __future__ import annotations

import filecmp
from pathlib import Path

import pytest
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_containerd import FAMILIES
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_gpu_isolation import (
    EXPOSED,
    ISOLATED,
    NOT_READY,
    READINESS,
    UNVERIFIABLE,
    VERDICTS,
    verify_node_root,
)

from tests.helpers import ROOT

CASES = ROOT / "tests" / "fixtures" / "gpu-runtime-effective"
SHARED = ROOT.parent / "shared" / "cases" / "gpu-runtime-effective"
ISOLATION_CASES = ROOT / "tests" / "fixtures" / "gpu-isolation"

# case -> (verdict, ready or None for no claim, {ignored file: words its reason holds}, checks among the
# isolation findings, checks among the readiness findings)
EXPECTED = {
    "13-containerd-dropin-not-imported": (
        ISOLATED, None, {"/etc/containerd/conf.d/99-nvidia.toml": "not imported"}, set(), set(),
    ),
    "14-containerd-cri-disabled": (
        UNVERIFIABLE, None,
        {"/etc/containerd/config.toml": "disables the CRI plugin", "/etc/containerd/conf.d/nvidia.toml": "disables the CRI plugin"},
        {"no-cri-runtime"}, set(),
    ),
    "15-containerd-imports-override": (
        ISOLATED, None, {"/etc/containerd/conf.d/10-operator.toml": "overridden"}, set(), set(),
    ),
    "16-crio-confd-not-read": (
        ISOLATED, None, {"/etc/crio/conf.d/99-nvidia.toml": "never reads /etc/crio/conf.d"}, set(), set(),
    ),
    "17-k3s-default-runtime-in-config-yaml": (EXPOSED, None, {}, {"toolkit-config-missing"}, set()),
    "18-cdi-spec-index-names": (ISOLATED, NOT_READY, {}, set(), {"cdi-spec-names"}),
    "19-no-nvidia-handler": (ISOLATED, NOT_READY, {}, set(), {"runtime-handler"}),
}


def _table(readme: Path) -> dict[str, tuple[str, str | None]]:
    out = {}
    for line in readme.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[1] in VERDICTS:
            out[cells[0]] = (cells[1], None if cells[2] == "-" else cells[2])
    return out


def test_expected_table_is_the_readme_table():
    table = _table(CASES / "README.md")
    assert table == {k: (v[0], v[1]) for k, v in EXPECTED.items()}
    assert all(r is None or r in READINESS for _, r in table.values())


@pytest.mark.skipif(not SHARED.is_dir(), reason="the shared cases are not next to this checkout")
def test_fixtures_match_the_shared_cases():
    def same(a: Path, b: Path):
        cmp = filecmp.dircmp(a, b)
        assert not cmp.left_only and not cmp.right_only, (a, cmp.left_only, cmp.right_only)
        _, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
        assert not mismatch and not errors, (a, mismatch, errors)
        for sub in cmp.common_dirs:
            same(a / sub, b / sub)

    same(CASES, SHARED)


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_case_reaches_its_verdict_readiness_and_notes(case):
    verdict, ready, ignored, checks, ready_checks = EXPECTED[case]
    r = verify_node_root(str(CASES / case))
    assert r["verdict"] == verdict, r["findings"]
    assert checks <= {f["check"] for f in r["findings"]}, r["findings"]
    if verdict == ISOLATED:
        assert r["findings"] == []
    if ready is not None:
        assert r["ready"] == ready, r["readiness"]
        assert ready_checks <= {f["check"] for f in r["readiness"]}, r["readiness"]
    got = {i["file"]: i["why"] for i in r["ignored_files"]}
    assert set(got) == set(ignored), r["ignored_files"]
    for file, words in ignored.items():
        assert words in got[file]
        # the note names the file and why, and the file's runtimes are never judged
        assert any(n.startswith(f"{file} is not in effect: ") and words in n for n in r["notes"])
        assert all(rt["file"] != file for rt in r["runtimes"])
    for f in r["findings"] + r["readiness"]:
        assert f["where"].startswith("/") and str(CASES) not in f["where"] and f["fix"] and f["message"]


def test_13_the_unimported_dropin_is_not_read():
    r = verify_node_root(str(CASES / "13-containerd-dropin-not-imported"))
    assert r["files_read"] == ["/etc/containerd/config.toml", "/etc/containerd/conf.d/10-base.toml"]


def test_15_the_runtime_in_effect_is_the_packages_one_under_every_loader_family():
    """Without the node's containerd version every loader family reads it: 1.7 replaces the CRI
    section whole, 2.x merges key by key; 90-packages.toml's BinaryName wins under each."""
    r = verify_node_root(str(CASES / "15-containerd-imports-override"))
    assert [c["family"] for c in r["runtime_configs"]] == list(FAMILIES)
    for c in r["runtime_configs"]:
        assert c["files"] == ["/etc/containerd/config.toml", "/etc/containerd/conf.d/10-operator.toml",
                              "/etc/containerd/conf.d/90-packages.toml"]
        assert c["handlers"]["nvidia"] == {"binary": "/usr/bin/nvidia-container-runtime", "nvidia": True}
    assert [rt["file"] for rt in r["runtimes"]] == ["/etc/containerd/conf.d/90-packages.toml"]
    assert any("replaced whole by /etc/containerd/conf.d/90-packages.toml" in n for n in r["notes"])


def test_17_the_finding_names_config_yaml():
    r = verify_node_root(str(CASES / "17-k3s-default-runtime-in-config-yaml"))
    assert any("/etc/rancher/k3s/config.yaml" in f["message"] for f in r["findings"])
    assert {c["default_runtime"] for c in r["runtime_configs"]} == {"nvidia"}


def test_18_and_19_are_ready_once_fixed(tmp_path):
    """The readiness findings name what is missing: with it in place, the same node is ready."""
    import shutil

    root = tmp_path / "18"
    shutil.copytree(CASES / "18-cdi-spec-index-names", root)
    (root / "etc/cdi/nvidia.yaml").write_text(
        "cdiVersion: 0.6.0\nkind: nvidia.com/gpu\ndevices:\n- name: GPU-0f1e2d3c-aaaa-bbbb-cccc-0123456789ab\n"
        "  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\n- name: all\n"
    )
    r = verify_node_root(str(root))
    assert r["ready"] == "ready" and r["readiness"] == []
    # a handler bcd's RuntimeClass does not name is no help: 19 defines only runc
    r = verify_node_root(str(CASES / "19-no-nvidia-handler"), handler="runc")
    assert {f["check"] for f in r["readiness"]} == {"runtime-handler-not-nvidia", "cdi-spec"}


@pytest.mark.parametrize("case", sorted(p.name for p in ISOLATION_CASES.iterdir() if p.is_dir()))
def test_isolation_cases_have_every_file_in_effect(case):
    """The first cases' files are all loaded: none is reported as ignored."""
    assert verify_node_root(str(ISOLATION_CASES / case))["ignored_files"] == []

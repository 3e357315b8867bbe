"""Every case of shared/cases/gpu-isolation reaches its stated verdict, one test per case.

The cases are kept in tests/fixtures/gpu-isolation (a copy, so a fresh checkout tests itself);
when the shared originals sit next to the repository, the copy must not have drifted from them.
``09-no-runtime-config`` is an empty root, which git cannot store: the test makes it.
"""

from __future__ import annotations

import filecmp
from pathlib import Path

import pytest
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_gpu_isolation import (
    DEFAULT_TOOLKIT_CONFIG,
    EXPOSED,
    ISOLATED,
    OPERATOR_TOOLKIT_CONFIG,
    UNVERIFIABLE,
    verify_node_root,
)

from tests.helpers import ROOT

CASES = ROOT / "tests" / "fixtures" / "gpu-isolation"
SHARED = ROOT.parent / "shared" / "cases" / "gpu-isolation"

# case -> (verdict, files a finding must name (``where``), checks that must be among the findings)
EXPECTED = {
    "01-containerd-v2-nvidia-no-toolkit-config": (EXPOSED, {DEFAULT_TOOLKIT_CONFIG}, {"toolkit-config-missing"}),
    "02-containerd-v2-nvidia-toolkit-false": (ISOLATED, set(), set()),
    "03a-operator-toolkit-dir-false": (ISOLATED, set(), set()),
    "03b-operator-false-but-package-config-true": (EXPOSED, {DEFAULT_TOOLKIT_CONFIG}, {"toolkit-accepts-envvar"}),
    "04-containerd-v3-operator-key-true": (EXPOSED, {OPERATOR_TOOLKIT_CONFIG}, {"toolkit-accepts-envvar"}),
    "05-containerd-imports-dropin": (EXPOSED, {DEFAULT_TOOLKIT_CONFIG}, {"toolkit-config-missing"}),
    "06-k3s-nvidia-toolkit-false": (ISOLATED, set(), set()),
    "07-crio-dropin-key-commented": (EXPOSED, {DEFAULT_TOOLKIT_CONFIG}, {"toolkit-accepts-envvar"}),
    "08-invalid-toml": (UNVERIFIABLE, {"/etc/containerd/config.toml"}, {"unparsable"}),
    "09-no-runtime-config": (UNVERIFIABLE, {"/"}, {"no-runtime-config"}),
    "10-runc-only": (ISOLATED, set(), set()),
    "11-cdi-variant-key-absent": (EXPOSED, {DEFAULT_TOOLKIT_CONFIG}, {"toolkit-config-missing"}),
    "12-crio-oci-hook-always": (EXPOSED, {DEFAULT_TOOLKIT_CONFIG}, {"toolkit-config-missing"}),
}


def _verdicts_in_readme(readme: Path) -> dict[str, str]:
    out = {}
    for line in readme.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[1] in (EXPOSED, ISOLATED, UNVERIFIABLE):
            out[cells[0]] = cells[1]
    return out


def _root(case: str, tmp_path: Path) -> Path:
    if case == "09-no-runtime-config":
        empty = tmp_path / case
        empty.mkdir()
        return empty
    return CASES / case


def test_expected_table_is_the_readme_table():
    """The verdicts tested here are exactly those the cases' README states."""
    assert _verdicts_in_readme(CASES / "README.md") == {k: v[0] for k, v in EXPECTED.items()}


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
def test_case_reaches_its_verdict(case, tmp_path):
    verdict, files, checks = EXPECTED[case]
    result = verify_node_root(str(_root(case, tmp_path)))
    assert result["verdict"] == verdict, result["findings"]
    wheres = {f["where"] for f in result["findings"]}
    assert files <= wheres, result["findings"]
    assert checks <= {f["check"] for f in result["findings"]}
    for f in result["findings"]:
        # Every finding names a file as on the node (never the folder it was read from) and a fix.
        assert f["where"].startswith("/") and str(CASES) not in f["where"] and str(tmp_path) not in f["where"]
        assert f["fix"] and f["message"]
    if verdict == ISOLATED:
        assert result["findings"] == []


def test_exposed_cases_name_the_runtime_that_causes_it():
    r = verify_node_root(str(CASES / "05-containerd-imports-dropin"))
    # (containerd 1.7 would not load the CRI plugin: the drop-in's runtimes table replaces the
    # default runc, the default runtime; the case root does not say which release the node runs)
    (f,) = [f for f in r["findings"] if f["check"] == "toolkit-config-missing"]
    assert "/etc/containerd/conf.d/99-nvidia.toml" in f["message"] and "'nvidia'" in f["message"]
    assert "/etc/containerd/conf.d/99-nvidia.toml" in r["files_read"]

    r = verify_node_root(str(CASES / "11-cdi-variant-key-absent"))
    assert r["runtimes"][0]["binary"] == "/usr/bin/nvidia-container-runtime.cdi"

    r = verify_node_root(str(CASES / "12-crio-oci-hook-always"))
    assert r["hooks"][0]["always"] is True
    assert "oci-nvidia-hook.json" in r["findings"][0]["message"]


def test_operator_directory_config_is_derived_for_both_runtimes():
    r = verify_node_root(str(CASES / "03a-operator-toolkit-dir-false"))
    assert {rt["name"] for rt in r["runtimes"]} == {"nvidia", "nvidia-cdi"}
    assert all(rt["toolkit_configs"] == [OPERATOR_TOOLKIT_CONFIG] for rt in r["runtimes"])

"""The GPU-isolation file judge against real CRI-O: for each release (sandbox/crio.py), every
generated node root (tests/crio_configs.py, fixed seed) is started by the real daemon and judged
by verify_node_root; verdict and readiness must agree.

CRI-O's answer becomes a verdict the way the judge's rules say it must: the daemon does not
start -> ``unverifiable`` and ``not-ready`` (no pod runs, and what the kubelet uses instead is
unknown); else ``exposed`` when a runtime handler CRI-O kept runs an NVIDIA binary whose toolkit
configuration is missing (the generator writes only key = false ones), ``isolated`` otherwise;
``ready`` when CRI-O kept the ``nvidia`` handler and it runs the NVIDIA runtime.

Cost: CRI-O's answers are cached by (version, hash of the root) beside the binaries
(``~/.cache/bcd-ansible/bin/crio-oracle``), so a rerun takes seconds; a cold one starts the daemon
once per root and release (half a second each). The releases are not built here (about 8
minutes each): as kind's test bed, used when built, skipped with the reason when not, and built
by `.ci/run` when time is left (`python -m sandbox crio build`).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_gpu_isolation import (
    NOT_READY,
    UNVERIFIABLE,
    verify_node_root,
)

from sandbox import crio as oracle
from tests.crio_configs import digest, generate, write_root
from tests.oracle import verdicts

SEED = 20261206
COUNT = 160
WORKERS = 4


def expected(answer: dict, files: dict) -> tuple[str, str]:
    """CRI-O's answer as a verdict and readiness (see the module docstring)."""
    if not answer["started"]:
        return UNVERIFIABLE, NOT_READY
    return verdicts.of_handlers(answer["runtimes"], files)


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    base = tmp_path_factory.mktemp("crio-configs")
    return [{**case, "root": write_root(base / case["name"], case["files"]), "digest": digest(case["files"])}
            for case in generate(SEED, COUNT)]


@pytest.fixture(scope="module")
def binaries():
    reason = oracle.can_run()
    if reason:
        pytest.skip(f"real CRI-O cannot run here: {reason}")
    return {v: oracle.cached(v) for v in oracle.VERSIONS}


def test_the_generated_roots_cover_what_decides_the_handlers(cases):
    """The generator reaches each rule the judge models (so the agreement below says something)."""
    texts = [case["files"] for case in cases]
    assert sum("/etc/crio/crio.conf" in f for f in texts) >= COUNT // 3
    assert sum(any(p.startswith("/etc/crio/crio.conf.d/gpu/") for p in f) for f in texts) >= 10
    assert sum(any(p.rsplit("/", 1)[-1].startswith(".") for p in f) for f in texts) >= 10
    assert sum("/etc/crio/conf.d/99-nvidia.toml" in f for f in texts) >= 10
    assert sum(any("default_runtime" in t for t in f.values()) for f in texts) >= COUNT // 2


@pytest.mark.parametrize("version", oracle.VERSIONS)
def test_file_judge_agrees_with_real_crio(version, binaries, cases):
    if binaries[version] is None:
        pytest.skip(f"CRI-O {version} is not built (`python -m sandbox crio build`, about 8 minutes a version; "
                    ".ci/run builds it when time is left)")
    start = time.monotonic()
    with ThreadPoolExecutor(WORKERS) as pool:
        answers = list(pool.map(lambda c: oracle.ask(binaries[version], version, c["root"], c["digest"]), cases))
    asked = sum(1 for a in answers if not a["cached"])
    kinds = {"started": sum(a["started"] for a in answers), "dropped a handler": sum(bool(a["dropped"]) for a in answers)}
    disagree = []
    for case, answer in zip(cases, answers, strict=True):
        result = verify_node_root(str(case["root"]))
        ours = (result["verdict"], result["ready"])
        theirs = expected(answer, case["files"])
        if ours != theirs:
            disagree.append((case, answer, ours, theirs, result))
    print(f"\nCRI-O {version}: {len(cases) - len(disagree)}/{len(cases)} configurations agree ({kinds['started']} "
          f"started, {len(cases) - kinds['started']} refused, {kinds['dropped a handler']} dropped a handler); "
          f"{asked} started now, {len(cases) - asked} from the cache, {time.monotonic() - start:.1f}s")
    # the daemon's answers vary as the rules do: some starts refused, some handlers dropped
    assert 0 < kinds["started"] < len(cases) and kinds["dropped a handler"] > 0, kinds
    lines = []
    for case, answer, ours, theirs, result in disagree[:5]:
        lines.append(f"--- {case['name']}: ours {ours}, CRI-O {theirs}")
        for path, text in sorted(case["files"].items()):
            if path.startswith("/etc/crio") or "toolkit" in path or path.startswith("/etc/nvidia"):
                lines.append(f"# {path}\n{text}")
        lines.append(f"CRI-O: {answer}")
        lines.append(f"ours: {[(f['check'], f['message']) for f in result['findings'] + result['readiness']]}")
    assert not disagree, f"{len(disagree)} of {len(cases)} disagree with CRI-O {version}:\n" + "\n".join(lines)

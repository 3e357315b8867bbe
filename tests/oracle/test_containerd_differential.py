"""The GPU-isolation file judge against real containerd: for each loader family's release, every
generated configuration (tests/containerd_configs.py, fixed seed) is booted by the real daemon
(sandbox/containerd.py) and judged by verify_node_root; verdict and readiness must agree.

containerd's answer becomes a verdict the way the judge's rules say it must: containerd refuses
its configuration, or its CRI plugin fails to load -> ``unverifiable`` and ``not-ready`` (no pod
runs, and what the kubelet uses instead is unknown); the CRI plugin disabled -> ``unverifiable``
and ``unknown`` (the kubelet's runtime is another one); else ``exposed`` when
a CRI runtime runs an NVIDIA binary whose toolkit configuration is missing (the generator writes
only key = false ones), ``isolated`` otherwise; ``ready`` when the ``nvidia`` handler exists and
runs the NVIDIA runtime.

Cost: containerd's answers are cached by (version, hash of the configuration) beside the binaries
(``~/.cache/bcd-ansible/bin/containerd-oracle``); a cold run builds the four releases (about two
minutes each on two cores) and boots each configuration once per release, a few at a time. The
test skips, saying why, only where the daemon cannot run: not root, no ``unshare --mount``, or no
Go to build a missing release.
"""

from __future__ import annotations

import shutil
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_containerd import VERSION_FILE
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_gpu_isolation import (
    NOT_READY,
    UNKNOWN,
    UNVERIFIABLE,
    verify_node_root,
)

from sandbox import containerd as oracle
from tests.containerd_configs import digest, generate, write_root
from tests.oracle import verdicts

SEED = 20261201
COUNT = 320
WORKERS = 8

# Deliberate exceptions: (what, why). None today; a disagreement the judge keeps on purpose goes here
# with a predicate over (case files, containerd's answer) and the reason.
EXCEPTIONS: list[tuple[str, str, object]] = []


def expected(answer: dict, files: dict) -> tuple[str, str]:
    """containerd's answer as a verdict and readiness (see the module docstring)."""
    if answer["booted"] and answer["cri"] == "absent":
        return UNVERIFIABLE, UNKNOWN  # disabled: the kubelet's runtime is another one
    if not answer["booted"] or answer["cri"] != "loaded":
        return UNVERIFIABLE, NOT_READY
    return verdicts.of_handlers(answer["runtimes"], files)


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    base = tmp_path_factory.mktemp("containerd-configs")
    out = []
    for case in generate(SEED, COUNT):
        root = write_root(base / case["name"], case["files"])
        out.append({**case, "root": root, "digest": digest(case["files"])})
    return out


@pytest.fixture(scope="module")
def binaries():
    reason = oracle.can_run()
    if reason:
        pytest.skip(f"real containerd cannot run here: {reason}")
    missing = [v for v in oracle.VERSIONS if oracle.cached(v) is None]
    if missing and not shutil.which("go"):
        pytest.skip(f"containerd {', '.join(missing)} not built and `go` is not on PATH to build them")
    start = time.monotonic()
    paths, spent = oracle.resolve()
    print(f"\ncontainerd releases ready in {time.monotonic() - start:.0f}s ({spent:.0f}s building)")
    return paths


@pytest.mark.parametrize("version", oracle.VERSIONS)
def test_file_judge_agrees_with_real_containerd(version, binaries, cases):
    start = time.monotonic()
    with ThreadPoolExecutor(WORKERS) as pool:
        answers = list(pool.map(lambda c: oracle.ask(binaries[version], version, c["root"], c["digest"]), cases))
    asked = sum(1 for a in answers if not a["cached"])
    disagree, excepted = [], {}
    for case, answer in zip(cases, answers, strict=True):
        # the node's release, as a collected root records it (containerd ignores the file)
        (case["root"] / VERSION_FILE).write_text(f"containerd github.com/containerd/containerd v{version} oracle\n")
        result = verify_node_root(str(case["root"]))
        ours = (result["verdict"], result["ready"])
        theirs = expected(answer, case["files"])
        if ours == theirs:
            continue
        why = next((what for what, _, pred in EXCEPTIONS if pred(case["files"], answer)), None)
        if why:
            excepted[why] = excepted.get(why, 0) + 1
            continue
        disagree.append((case, answer, ours, theirs, result))
    agreed = len(cases) - len(disagree) - sum(excepted.values())
    print(f"\ncontainerd {version}: {agreed}/{len(cases)} configurations agree"
          f"{''.join(f', {n} excepted ({w})' for w, n in excepted.items())}; {asked} booted now, "
          f"{len(cases) - asked} from the cache, {time.monotonic() - start:.1f}s")
    kinds: dict[tuple, int] = {}
    for _, _, ours, theirs, _ in disagree:
        kinds[(ours, theirs)] = kinds.get((ours, theirs), 0) + 1
    lines = [f"ours {o} / containerd {t}: {n}" for (o, t), n in sorted(kinds.items(), key=lambda x: -x[1])]
    for case, answer, ours, theirs, result in disagree[:5]:
        lines.append(f"--- {case['name']}: ours {ours}, containerd {theirs}")
        for path, text in sorted(case["files"].items()):
            if path.startswith("/etc/containerd") or "toolkit" in path or path.startswith("/etc/nvidia"):
                lines.append(f"# {path}\n{text}")
        lines.append(f"containerd: {answer}")
        lines.append(f"ours: {[(f['check'], f['message']) for f in result['findings'] + result['readiness']]}")
    assert not disagree, f"{len(disagree)} of {len(cases)} disagree with containerd {version}:\n" + "\n".join(lines)

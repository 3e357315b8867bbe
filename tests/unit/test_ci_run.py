"""`.ci/run`'s decisions, with `make` and the venv's python replaced by stubs that log their calls."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _ci(tmp_path: Path, kind_rc: int, fail: str = "", root_rc: int = 0, crio_rc: int = 0, kube_rc: int = 0,
        **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run a copy of .ci/run in ``tmp_path``: `kind check` exits ``kind_rc``, `pyroot check`
    ``root_rc``, `crio check` ``crio_rc``, `build --check` (the second Kubernetes release, 1.33)
    ``kube_rc``; the step named in ``fail`` (a make target, ``kind-build``, ``pyroot-build``,
    ``crio-build``, ``kube-build`` or ``crio-test``) exits 1. Returns the run and the logged calls."""
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "run", tmp_path / ".ci" / "run")
    log = tmp_path / "calls.log"
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "make").write_text(
        "#!/bin/bash\n"
        f'echo "make $*" >> {log}\n'
        'if [ "$1" = test ]; then mkdir -p out; echo "make test: SKIPPED molecule scenario kind: cold" > out/kind-scenario.txt; fi\n'
        'if [ "$1" = test-long ]; then echo "deadline ${BCD_LONG_DEADLINE:-none}" >> ' f"{log}; fi\n"
        f'[ "$1" = "{fail}" ] && exit 1; exit 0\n')
    venv = tmp_path / ".venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").write_text(
        "#!/bin/bash\n"
        f'echo "python $*" >> {log}\n'
        f'[ "$3 $4" = "kind check" ] && exit {kind_rc}\n'
        f'[ "$3 $4" = "pyroot check" ] && {{ echo "pyroot: cannot be built here: not root"; exit {root_rc}; }}\n'
        f'[ "$3 $4" = "crio check" ] && {{ echo "crio: not warm: CRI-O 1.36.3 not built"; exit {crio_rc}; }}\n'
        f'[ "$4" = build ] && [ "{fail}" = "$3-build" ] && exit 1\n'
        '[ "$3 $4" = "build --rotation" ] && { echo 1.33; exit 0; }\n'
        f'[ "$3 $4" = "build --check" ] && exit {kube_rc}\n'
        f'[ "$3 $4" = "build --kube-version" ] && [ "{fail}" = kube-build ] && exit 1\n'
        "exit 0\n")
    (venv / "pytest").write_text(
        "#!/bin/bash\n"
        f'echo "pytest $*" >> {log}\n'
        f'[ "{fail}" = crio-test ] && exit 1; exit 0\n')
    for f in (stubs / "make", venv / "python", venv / "pytest"):
        f.chmod(0o755)
    # the job's own settings (CI_MINUTES, KIND_MIN_MINUTES, ...) come from the test, never from
    # the environment the suite runs in (a .ci/run with CI_MINUTES set runs this very test)
    inherited = {k: v for k, v in os.environ.items() if not k.endswith("_MINUTES")}
    run_env = {**inherited, "PATH": f"{stubs}:{os.environ['PATH']}", **env}
    done = subprocess.run(["bash", str(tmp_path / ".ci" / "run")], env=run_env, capture_output=True, text=True,
                          timeout=60, check=False)
    return done, log.read_text().splitlines()


def test_cold_kind_cache_builds_and_runs_the_scenario_before_the_long_tests(tmp_path):
    t0 = time.time()
    done, calls = _ci(tmp_path, kind_rc=2)
    assert done.returncode == 0, done.stderr
    assert [c for c in calls if not c.startswith("deadline")] == [
        "make test", "python -m sandbox pyroot check", "python -m sandbox kind check",
        "python -m sandbox kind build", "make test-kind", "python -m sandbox build --rotation ",
        "python -m sandbox build --check --kube-version 1.33", "python -m sandbox crio check", "make test-long"]
    assert "ci: kind build took 0m0" in done.stdout and "ci: molecule scenario kind took 0m0" in done.stdout
    assert "ci: timings: make test 0m0" in done.stdout and "kind build 0m0" in done.stdout
    # the long tests' deadline keeps LONG_TAIL_MINUTES (15) of the 90 free
    deadline = int(next(c for c in calls if c.startswith("deadline")).split()[1])
    assert 75 * 60 - 5 <= deadline - t0 <= 75 * 60 + 1


@pytest.mark.parametrize("kind_rc", [0, 1])
def test_no_kind_build_when_warm_or_not_possible(tmp_path, kind_rc):
    done, calls = _ci(tmp_path, kind_rc=kind_rc)
    assert done.returncode == 0, done.stderr
    assert "python -m sandbox kind build" not in calls and "make test-kind" not in calls
    assert "make test-long" in calls


def test_too_little_time_left_skips_the_kind_build_and_says_so(tmp_path):
    done, calls = _ci(tmp_path, kind_rc=2, CI_MINUTES="40", KIND_MIN_MINUTES="45")
    assert "python -m sandbox kind build" not in calls
    assert "only 40 min are left (under 45): kind build and the molecule scenario kind skipped" in done.stdout
    assert "make test-long" in calls


@pytest.mark.parametrize("fail", ["kind-build", "test-kind", "test-long"])
def test_a_check_that_ran_and_failed_fails_the_job_after_the_rest_ran(tmp_path, fail):
    done, calls = _ci(tmp_path, kind_rc=2, fail=fail)
    assert done.returncode == 1, done.stdout + done.stderr
    named = {"kind-build": "kind build", "test-kind": "molecule scenario kind", "test-long": "make test-long"}[fail]
    assert f"ci: FAILED: {named}" in done.stderr and "WARNING" not in done.stderr
    assert ("make test-kind" in calls) == (fail != "kind-build")
    # the rest still runs, so one CI log shows every failure
    assert "make test-long" in calls and "ci: timings:" in done.stdout


def test_make_test_failure_fails_the_job(tmp_path):
    done, calls = _ci(tmp_path, kind_rc=2, fail="test")
    assert done.returncode != 0
    assert calls == ["make test"]


def test_a_cold_trixie_root_is_built_and_the_matrix_run_before_kind(tmp_path):
    done, calls = _ci(tmp_path, kind_rc=0, root_rc=2)
    assert done.returncode == 0, done.stderr
    assert calls[:5] == ["make test", "python -m sandbox pyroot check", "python -m sandbox pyroot build",
                         "make test-matrix", "python -m sandbox kind check"]
    assert "ci: pyroot build took 0m0" in done.stdout and "ci: the ansible-core matrix took 0m0" in done.stdout
    assert "pyroot build 0m0" in done.stdout


@pytest.mark.parametrize("root_rc", [0, 1])
def test_no_root_build_when_built_or_not_possible(tmp_path, root_rc):
    done, calls = _ci(tmp_path, kind_rc=0, root_rc=root_rc)
    assert done.returncode == 0, done.stderr
    assert "python -m sandbox pyroot build" not in calls and "make test-matrix" not in calls
    assert ("ci: the ansible-core matrix cannot run on this machine: pyroot: cannot be built here: not root"
            in done.stdout) == (root_rc == 1)


def test_too_little_time_left_skips_the_root_build_and_says_so(tmp_path):
    done, calls = _ci(tmp_path, kind_rc=0, root_rc=2, CI_MINUTES="10")
    assert "python -m sandbox pyroot build" not in calls
    assert "only 10 min are left (under 12): its build and the ansible-core matrix skipped" in done.stdout


@pytest.mark.parametrize("fail", ["pyroot-build", "test-matrix"])
def test_a_failed_root_build_or_matrix_fails_the_job_after_the_rest_ran(tmp_path, fail):
    done, calls = _ci(tmp_path, kind_rc=2, root_rc=2, fail=fail)
    assert done.returncode == 1, done.stdout + done.stderr
    named = {"pyroot-build": "pyroot build", "test-matrix": "ansible-core matrix"}[fail]
    assert f"ci: FAILED: {named}" in done.stderr
    assert "make test-kind" in calls and "make test-long" in calls


CRIO_TEST = "pytest -p no:randomly tests/oracle/test_crio_differential.py"


def test_unbuilt_crio_is_built_and_its_differential_test_run_before_the_long_tests(tmp_path):
    done, calls = _ci(tmp_path, kind_rc=0, crio_rc=2)
    assert done.returncode == 0, done.stderr
    at = calls.index("python -m sandbox crio check")
    assert calls[at:at + 4] == ["python -m sandbox crio check", "python -m sandbox crio build", CRIO_TEST, "make test-long"]
    assert "crio build 0m0" in done.stdout and "CRI-O differential test 0m0" in done.stdout


@pytest.mark.parametrize("crio_rc", [0, 1])
def test_no_crio_build_when_built_or_not_possible(tmp_path, crio_rc):
    done, calls = _ci(tmp_path, kind_rc=0, crio_rc=crio_rc)
    assert done.returncode == 0, done.stderr
    assert "python -m sandbox crio build" not in calls and CRIO_TEST not in calls
    assert ("ci: the CRI-O differential test cannot run on this machine: not warm: CRI-O 1.36.3 not built"
            in done.stdout) == (crio_rc == 1)


def test_the_crio_build_never_takes_make_test_longs_minimum(tmp_path):
    done, calls = _ci(tmp_path, kind_rc=0, crio_rc=2, CI_MINUTES="45")
    assert "python -m sandbox crio build" not in calls and "make test-long" in calls
    assert ("not warm: CRI-O 1.36.3 not built; only 45 min are left (under 20 + 30): the CRI-O build and its "
            "differential test skipped") in done.stdout


@pytest.mark.parametrize("fail", ["crio-build", "crio-test"])
def test_a_failed_crio_build_or_differential_test_fails_the_job_after_the_rest_ran(tmp_path, fail):
    done, calls = _ci(tmp_path, kind_rc=0, crio_rc=2, fail=fail)
    assert done.returncode == 1, done.stdout + done.stderr
    named = {"crio-build": "crio build", "crio-test": "CRI-O differential test"}[fail]
    assert f"ci: FAILED: {named}" in done.stderr
    assert (CRIO_TEST in calls) == (fail == "crio-test") and "make test-long" in calls


def test_an_unbuilt_second_kubernetes_release_is_built_and_its_scenario_run(tmp_path):
    done, calls = _ci(tmp_path, kind_rc=0, kube_rc=2)
    assert done.returncode == 0, done.stderr
    build = calls.index("python -m sandbox build --kube-version 1.33")
    assert calls[build + 1] == "make test-kube", calls
    assert calls.index("make test-kube") < calls.index("make test-long"), calls
    assert "(at least 16): building Kubernetes 1.33, then the compatibility scenario on it" in done.stdout, done.stdout


@pytest.mark.parametrize("kube_rc", [0, 1])
def test_no_kubernetes_build_when_built_or_when_the_check_fails(tmp_path, kube_rc):
    done, calls = _ci(tmp_path, kind_rc=0, kube_rc=kube_rc)
    assert "python -m sandbox build --kube-version 1.33" not in calls and "make test-kube" not in calls
    # a check that cannot answer is a failure of the job, not a skip
    assert done.returncode == (0 if kube_rc == 0 else 1), done.stderr
    if kube_rc:
        assert "Kubernetes 1.33 check" in done.stderr, done.stderr


def test_too_little_time_left_skips_the_kubernetes_build_and_says_so(tmp_path):
    done, calls = _ci(tmp_path, kind_rc=0, kube_rc=2, CI_MINUTES="10")
    assert done.returncode == 0, done.stderr
    assert "python -m sandbox build --kube-version 1.33" not in calls and "make test-kube" not in calls
    assert ("ci: Kubernetes 1.33 is not built and only 10 min are left (under 16): its build and the compatibility "
            "scenario on it skipped") in done.stdout, done.stdout


@pytest.mark.parametrize("fail", ["kube-build", "test-kube"])
def test_a_failed_kubernetes_build_or_scenario_fails_the_job_after_the_rest_ran(tmp_path, fail):
    done, calls = _ci(tmp_path, kind_rc=0, kube_rc=2, fail=fail)
    assert done.returncode == 1
    assert "make test-long" in calls, calls
    assert "ci: FAILED:" in done.stderr and "Kubernetes 1.33" in done.stderr, done.stderr

"""The ansible-core matrix's wiring: which make target's marker expression selects the
compatibility scenario (tests/compat), and why the scenario skips or fails before it starts."""

from __future__ import annotations

import re
import subprocess
import sys
from types import SimpleNamespace

import pytest

from tests.compat import test_scenario
from tests.helpers import ROOT

MAKEFILE = (ROOT / "Makefile").read_text()


def marker_expression(target: str) -> str:
    """The ``-m`` expression of the first pytest call in ``target``'s recipe."""
    recipe = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", MAKEFILE, re.M)
    assert recipe, f"no target {target} in the Makefile"
    found = re.search(r'pytest .*?-m ("[^"]+"|\S+)', recipe.group(1))
    assert found, f"no pytest -m in {target}'s recipe"
    return found.group(1).strip('"')


def selected(expression: str) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", "--collect-only", "-q",
                           "-m", expression, "tests/compat"], cwd=str(ROOT), capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode in (0, 5), done.stdout + done.stderr  # 5: nothing selected
    return [line for line in done.stdout.splitlines() if "::" in line]


@pytest.mark.parametrize("target", ["test-unit", "test-sandbox", "test-long"])
def test_the_suite_targets_leave_the_scenario_to_the_matrix(target):
    assert selected(marker_expression(target)) == []


def test_the_matrix_runs_the_whole_scenario():
    scenario = re.search(r"^MATRIX_SCENARIO \?= (.*)$", MAKEFILE, re.M).group(1)
    assert "-m compat" in scenario and "$(ORDER)" in scenario
    got = selected("compat")
    assert got and all(line.startswith("tests/compat/test_scenario.py::") for line in got)
    # make test on the current release; make test-long on the lines either side of it
    assert re.search(r"^MATRIX_CORE \?= 2\.21$", MAKEFILE, re.M)
    assert re.search(r"^MATRIX_LONG_SCENARIO_CORES \?= 2\.20 2\.22$", MAKEFILE, re.M)
    assert re.search(r"^test: .*\btest-matrix\b", MAKEFILE, re.M)


def _check(monkeypatch, rc: int, line: str) -> list[list[str]]:
    calls = []

    def fake_run(argv, **kw):
        calls.append(argv)
        return SimpleNamespace(returncode=rc, stdout=line + "\n", stderr="")

    monkeypatch.setattr(test_scenario.subprocess, "run", fake_run)
    return calls


def test_a_root_that_is_not_built_is_the_reason_to_skip(monkeypatch):
    calls = _check(monkeypatch, 2, "pyroot: cold: no root in /x; `python -m sandbox pyroot build` makes it")
    assert test_scenario.skip_reason("2.21") == "pyroot: cold: no root in /x; `python -m sandbox pyroot build` makes it"
    assert calls[0][-2:] == ["pyroot", "check"]


def test_a_built_root_runs_and_the_host_needs_no_root(monkeypatch):
    calls = _check(monkeypatch, 0, "pyroot: built: /x")
    assert test_scenario.skip_reason("2.22") is None
    assert test_scenario.skip_reason("host") is None and len(calls) == 1
    assert test_scenario.controller("host") == [str(test_scenario.VENV_BIN / "ansible-playbook")]
    assert test_scenario.controller("2.20")[-5:] == ["run", "--core", "2.20", "--", "ansible-playbook"]


def test_a_line_the_root_does_not_have_fails_rather_than_skips(monkeypatch):
    _check(monkeypatch, 0, "pyroot: built: /x")
    with pytest.raises(AssertionError, match=re.escape("BCD_MATRIX_CORE=2.18: the trixie root has ansible-core 2.19")):
        test_scenario.skip_reason("2.18")

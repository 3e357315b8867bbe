"""make test-long's rotation under a deadline (tests/reliability/plugin.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.reliability.plugin import rotate_by_file, rotation_start

ROOT = Path(__file__).resolve().parents[2]


def _items(*nodeids: str) -> list:
    return [SimpleNamespace(nodeid=n) for n in nodeids]


def test_rotation_starts_at_a_file_and_keeps_each_files_order():
    items = _items("a.py::t1", "a.py::t2", "b.py::t1", "c.py::t1", "c.py::t2")
    assert [i.nodeid for i in rotate_by_file(items, 1)] == ["b.py::t1", "c.py::t1", "c.py::t2", "a.py::t1", "a.py::t2"]
    assert [i.nodeid for i in rotate_by_file(items, 0)] == [i.nodeid for i in items]


def test_the_start_follows_the_commit_unless_overridden():
    files = ["a.py", "b.py", "c.py"]
    assert rotation_start(files, "00000005deadbeef") == 5 % 3
    assert rotation_start(files, "0000000a") == 10 % 3
    assert rotation_start(files, "00000005", "7") == 7 % 3
    assert rotation_start(files, "") == 0 and rotation_start([], "00000005") == 0
    with pytest.raises(ValueError):
        rotation_start(files, "00000005", "x")


def _collected(tmp_path: Path, *order: str, **env: str) -> subprocess.CompletedProcess:
    """pytest --collect-only of two files of long tests and one of fast ones, in a copy of the
    plugin, with ``env`` added; ``order``: pytest-randomly's options (default: off)."""
    (tmp_path / "tests" / "reliability").mkdir(parents=True)
    (tmp_path / "tests" / "__init__.py").write_text("")
    (tmp_path / "tests" / "reliability" / "__init__.py").write_text("")
    (tmp_path / "tests" / "reliability" / "plugin.py").write_text((ROOT / "tests" / "reliability" / "plugin.py").read_text())
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["tests.reliability.plugin"]\n')
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n  long: slow\n")
    for name in ("test_a", "test_b"):
        (tmp_path / f"{name}.py").write_text("import pytest\n\n" + "".join(
            f"@pytest.mark.long\ndef test_{k}():\n    pass\n\n" for k in (1, 2)))
    (tmp_path / "test_fast.py").write_text("def test_fast():\n    pass\n")
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("BCD_LONG")}
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           *(order or ("-p", "no:randomly"))], cwd=tmp_path, env={**run_env, **env}, capture_output=True, text=True,
                          timeout=120, check=False)


def test_a_run_under_a_deadline_says_where_it_starts_and_runs_every_long_test(tmp_path):
    run = _collected(tmp_path, BCD_LONG_DEADLINE="9999999999", BCD_LONG_ROTATION="1")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "long tests: 2 files in rotation from test_b.py (BCD_LONG_ROTATION=1 repeats this order" in run.stdout
    ids = [ln for ln in run.stdout.splitlines() if "::" in ln]
    # the long tests move among the places they held; the fast one keeps its own
    assert ids == ["test_b.py::test_1", "test_b.py::test_2", "test_a.py::test_1", "test_a.py::test_2",
                   "test_fast.py::test_fast"], ids


def test_without_a_deadline_the_order_is_the_files_own(tmp_path):
    run = _collected(tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "rotation" not in run.stdout
    assert next(ln for ln in run.stdout.splitlines() if "::" in ln) == "test_a.py::test_1"


def test_a_bad_rotation_is_a_usage_error_naming_the_variable(tmp_path):
    run = _collected(tmp_path, BCD_LONG_ROTATION="two")
    assert run.returncode != 0
    assert "BCD_LONG_ROTATION must be an integer, not 'two'" in run.stdout + run.stderr


def test_a_shuffled_run_under_a_deadline_keeps_the_shuffle(tmp_path):
    # make test-long's order: pytest-randomly's, which the seed changes; no rotation on top
    runs = [_collected(tmp_path / str(seed), "-p", "randomly", f"--randomly-seed={seed}",
                       BCD_LONG_DEADLINE="9999999999") for seed in range(8)]
    orders = set()
    for run in runs:
        assert run.returncode == 0, run.stdout + run.stderr
        assert "rotation" not in run.stdout
        orders.add(tuple(ln for ln in run.stdout.splitlines() if "::" in ln))
    assert len(orders) > 1, orders

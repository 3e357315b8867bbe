"""pytest plugin: collect what each reliability scenario did and regenerate docs/reliability.md.

A test takes the ``reliability`` fixture and says what it shows::

    def test_x(reliability):
        reliability.describe("Faults", "control plane 503 burst while minting")
        ...                                   # runs are counted by harness.Runner
        reliability.result = "succeeded after 3 retries"
        reliability.figures["joinTokens.create requests"] = 4

When the session ends, every scenario that ran is merged into ``docs/reliability.json`` (the
last result of each scenario, by test id) and ``docs/reliability.md`` is written from it, so a
``make test`` run updates the fast scenarios and ``make test-long`` the long ones. A failed
test is recorded as FAILED. ``BCD_RELIABILITY_DOC=0`` turns the writing off.

It also keeps ``make test-long`` within the CI job's time: with ``BCD_LONG_DEADLINE`` set (epoch
seconds; ``.ci/run`` sets it), a test marked ``long`` that would start after it is skipped. So that
the tests past the deadline are not always the same ones, their order changes with the commit.
A run that pytest-randomly shuffles (``-p randomly --randomly-seed=<n>``, as ``make test-long``
runs) keeps its shuffled order, which the seed already changes. A run in file order
(``-p no:randomly``) under the deadline takes the long tests' files in a rotation that starts at a
file chosen by the checkout's commit (the same order for the same commit, in every xdist worker);
``BCD_LONG_ROTATION=<k>`` starts it at the k-th file instead, to repeat such a run's order, and
rotates a shuffled run too. The run's first lines say where it started.

Loaded by ``tests/conftest.py`` (``pytest_plugins``).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "reliability.json"
DOC = ROOT / "docs" / "reliability.md"
PROMISES = ("Secrets", "Faults", "Interruption", "Bad input", "TLS", "Concurrency", "False success", "Slips and races")
_KEY = pytest.StashKey["Recorder"]()


@dataclass
class Recorder:
    """What one test shows: its promise, scenario, how many runs, the result and figures."""

    test: str
    promise: str = ""
    scenario: str = ""
    runs: int = 0
    unit: str = "playbook runs"
    result: str = ""
    figures: dict = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def describe(self, promise: str, scenario: str, unit: str = "playbook runs") -> Recorder:
        if promise not in PROMISES:
            raise ValueError(f"promise {promise!r} is not one of {PROMISES}")
        self.promise, self.scenario, self.unit = promise, scenario, unit
        return self


@pytest.fixture
def reliability(request) -> Recorder:
    """The recorder of this test's scenario (see the module docstring)."""
    rec = Recorder(test=request.node.nodeid)
    request.node.stash[_KEY] = rec
    return rec


def rotation_start(files: list[str], commit: str, override: str | None = None) -> int:
    """Index into ``files`` (the long tests' files, in collection order) at which a run under a
    deadline starts: ``override`` (``BCD_LONG_ROTATION``) modulo their number, else the commit's
    first 8 hex digits modulo it. 0 for no files or an unknown commit."""
    if not files:
        return 0
    if override not in (None, ""):
        return int(override) % len(files)
    try:
        return int(commit[:8], 16) % len(files)
    except ValueError:
        return 0


def rotate_by_file(items: list, start: int) -> list:
    """``items`` with their files rotated to begin at the ``start``-th file; each file's tests
    keep their order (a file's tests may build on each other's state)."""
    files: dict[str, list] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    order = list(files)
    order = order[start:] + order[:start]
    return [item for f in order for item in files[f]]


def shuffled(config) -> bool:
    """Whether pytest-randomly reorders this run's tests (``-p randomly``, as ``make test-long``
    runs them): the order then changes with the seed, and the rotation is not needed."""
    return config.pluginmanager.hasplugin("randomly") and bool(config.getoption("randomly_reorganize", False))


def pytest_collection_modifyitems(config, items):
    if not os.environ.get("BCD_LONG_DEADLINE") and not os.environ.get("BCD_LONG_ROTATION"):
        return
    if shuffled(config) and not os.environ.get("BCD_LONG_ROTATION"):
        return
    long_items = [i for i in items if i.get_closest_marker("long")]
    if not long_items:
        return
    files = list(dict.fromkeys(i.nodeid.split("::", 1)[0] for i in long_items))
    commit = _commit(full=True)
    override = os.environ.get("BCD_LONG_ROTATION")
    try:
        start = rotation_start(files, commit, override)
    except ValueError:
        raise pytest.UsageError(f"BCD_LONG_ROTATION must be an integer, not {override!r}") from None
    rotated = iter(rotate_by_file(long_items, start))
    # the long tests take the places they held, in the rotated order; the others stay put
    items[:] = [next(rotated) if i.get_closest_marker("long") else i for i in items]
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"long tests: {len(files)} files in rotation from {files[start]} "
                            f"(BCD_LONG_ROTATION={start} repeats this order; commit {commit[:12] or '?'})")


def pytest_runtest_setup(item):
    deadline = os.environ.get("BCD_LONG_DEADLINE")
    if deadline and item.get_closest_marker("long") and time.time() > float(deadline):
        pytest.skip("the CI job's time for make test-long is used up (BCD_LONG_DEADLINE)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    rec = item.stash.get(_KEY, None)
    if rec is None or not rec.promise:
        return
    state = item.config.stash.setdefault(_RESULTS, {})
    entry = state.setdefault(rec.test, {"outcome": "passed"})
    if report.when == "call" or report.failed:
        if report.failed:
            entry["outcome"] = "FAILED" if report.when == "call" else f"ERROR in {report.when}"
            entry["error"] = _short(report.longreprtext)
        elif report.skipped:
            entry["outcome"] = "skipped"
    if report.when == "teardown":
        suite = "make test-long" if item.get_closest_marker("long") else "make test"
        entry.update(promise=rec.promise, scenario=rec.scenario, runs=rec.runs, unit=rec.unit, result=rec.result,
                     figures=rec.figures, seconds=round(time.monotonic() - rec.started, 1), suite=suite,
                     date=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), commit=_commit())


_RESULTS = pytest.StashKey[dict]()


def _short(text: str, n: int = 300) -> str:
    """The first error line of a failure report (pytest's ``E`` lines), and where it was raised."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln[1:].strip() for ln in lines if ln.startswith("E ") and ln[1:].strip()]
    where = next((ln for ln in reversed(lines) if ln.startswith("tests/") and ":" in ln), "")
    first = errors[0] if errors else (lines[-1] if lines else "")
    return (first[:n] + (" ..." if len(first) > n else "")) + (f" ({where})" if where else "")


def _commit(full: bool = False) -> str:
    """HEAD's commit, abbreviated unless ``full``; ``"?"`` (``""`` when ``full``) outside git."""
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", *([] if full else ["--short"]), "HEAD"],
                              capture_output=True, text=True, check=False, timeout=10).stdout.strip() or ("" if full else "?")
    except (OSError, subprocess.SubprocessError):
        return "" if full else "?"


def pytest_sessionfinish(session):
    results = session.config.stash.get(_RESULTS, {})
    results = {k: v for k, v in results.items() if "scenario" in v}
    if not results or os.environ.get("BCD_RELIABILITY_DOC", "1") == "0":
        return
    # make test's sandbox tests run in several pytest-xdist workers, each ending its own session:
    # each merges its results under a lock, so no worker's rows are lost to another's write
    with (ROOT / "docs" / ".reliability.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            data = json.loads(DATA.read_text()) if DATA.exists() else {}
        except ValueError:
            data = {}
        data.update(results)
        DATA.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        DOC.write_text(render(data))


def _figures(figures: dict) -> str:
    return "; ".join(f"{k}: {v}" for k, v in figures.items())


def _cell(text: str) -> str:
    # "<ident>" would be an HTML tag to a markdown renderer, and vanish
    return str(text).replace("|", "\\|").replace("\n", " ").replace("<", "&lt;")


def render(data: dict) -> str:
    """docs/reliability.md from the recorded results."""
    out = [
        "# Reliability: what the toolkit promises, and what the suite measured",
        "",
        "Generated by the test suite (`tests/reliability/plugin.py`) from `docs/reliability.json`; do not edit by",
        "hand. `make test` refreshes the fast scenarios, `make test-long` the long ones; each row keeps the result of",
        "the last run of its scenario, with the commit and date it ran at.",
        "",
        "Every scenario runs the real playbooks (`ansible-playbook`) against the sandbox: a real Kubernetes API server",
        "with KWOK nodes, and the control-plane emulator, whose fault injection and request counters the figures come",
        "from. Bad input is also checked in process, through the inventory model and the modules, for volume.",
        "Some scenarios run the playbooks as operators do: under ansible-runner, the engine of AWX and AAP (the job's",
        "whole private data directory, events included, is scanned), and on GPU nodes behind a real OpenSSH server",
        "with sudo (tests/integration/test_gpu_nodes_ssh.py).",
        "",
        "| Promise | Scenarios | Runs | Passed | Failed |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    by_promise: dict[str, list[tuple[str, dict]]] = {p: [] for p in PROMISES}
    for key, entry in data.items():
        by_promise.setdefault(entry.get("promise", "?"), []).append((key, entry))
    for promise, entries in by_promise.items():
        if not entries:
            continue
        passed = sum(1 for _, e in entries if e.get("outcome") == "passed")
        failed = sum(1 for _, e in entries if e.get("outcome", "").startswith(("FAILED", "ERROR")))
        runs = sum(int(e.get("runs") or 0) for _, e in entries)
        out.append(f"| {promise} | {len(entries)} | {runs} | {passed} | {failed} |")
    out.append("")
    out.append("Runs count playbook runs, or generated inputs where the unit says so.")
    for promise, entries in by_promise.items():
        if not entries:
            continue
        out += ["", f"## {promise}", "", "| Scenario | Runs | Outcome | What happened | Figures | Suite, last run |",
                "| --- | ---: | --- | --- | --- | --- |"]
        for key, e in sorted(entries, key=lambda kv: (kv[1].get("suite", ""), kv[0])):
            outcome = e.get("outcome", "?")
            if outcome != "passed" and e.get("error"):
                outcome += f": {e['error']}"
            runs = f"{e.get('runs', 0)} {e.get('unit', '')}".strip()
            out.append(
                f"| {_cell(e.get('scenario', key))} | {_cell(runs)} | {_cell(outcome)} | {_cell(e.get('result', ''))} | "
                f"{_cell(_figures(e.get('figures') or {}))} | {_cell(e.get('suite', ''))}, {_cell(e.get('date', ''))} "
                f"({_cell(e.get('commit', ''))}, {e.get('seconds', '?')} s) |")
    out += ["", "Tests: `tests/reliability/` (scenarios against the sandbox) and `tests/unit/plugins/module_utils/test_model_property.py`",
            "(hypothesis). Run one with `.venv/bin/pytest tests/reliability/test_secrets.py`; the row is updated when it",
            "ends.", ""]
    return "\n".join(out)

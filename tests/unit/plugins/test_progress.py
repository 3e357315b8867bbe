"""The progress lines of plugin_utils/bcd_progress.py, driven by the events a module writes."""

from __future__ import annotations

import json
import os
import time

from ansible_collections.bcd.kubernetes.plugins.module_utils import bcd_module
from ansible_collections.bcd.kubernetes.plugins.plugin_utils import bcd_progress
from ansible_collections.bcd.kubernetes.plugins.plugin_utils.bcd_progress import (
    PROGRESS_ENV,
    Progress,
    RetryWatch,
    Step,
    poll_in_slices,
)


def _lines(monkeypatch) -> list[str]:
    said: list[str] = []
    monkeypatch.setattr(bcd_progress, "say", lambda host, text: said.append(f"{host}: {text}"))
    return said


def test_a_retried_call_is_said_once_it_passes_10_s_with_the_next_attempt_and_the_limit(monkeypatch):
    said = _lines(monkeypatch)
    with RetryWatch("c1"):
        report = bcd_module.retry_reporter()
        assert report is not None and os.environ[PROGRESS_ENV]
        base = {"procedure": "joinTokens.create", "code": "UNAVAILABLE", "status": 503, "message": "try later",
                "budget": 120, "request_timeout": 30}
        report({**base, "kind": "retry", "attempt": 1, "waited": 0.1, "delay": 0.4})  # short: not said
        report({**base, "kind": "retry", "attempt": 5, "waited": 8.0, "delay": 6.0})
        report({**base, "kind": "ended", "attempt": 6, "waited": 14.5, "delay": 0.0, "code": None})
        time.sleep(1.2)
    assert PROGRESS_ENV not in os.environ
    assert len(said) == 2, said
    assert said[0].startswith("c1: control plane joinTokens.create: attempt 5 failed (UNAVAILABLE HTTP 503: try later); "
                              "next attempt at ")
    # the time waited when the line is printed (the event's, plus the watcher's poll)
    assert said[0].endswith(("(waited 8s of 120s; bcd_control_plane_timeout sets the limit)",
                             "(waited 9s of 120s; bcd_control_plane_timeout sets the limit)")), said[0]
    assert said[1] == "c1: control plane joinTokens.create: answered at attempt 6 (after 14s of retries)"


def test_a_call_still_retried_is_said_again_within_30_s(monkeypatch):
    said = _lines(monkeypatch)
    monkeypatch.setattr(bcd_progress, "PROGRESS_EVERY", 1.0)  # the timer's period, shortened
    with RetryWatch("c1"):
        report = bcd_module.retry_reporter()
        report({"kind": "retry", "procedure": "nodes.list", "code": "UNREACHABLE", "status": None, "message": "refused",
                "attempt": 7, "waited": 40.0, "delay": 30.0, "budget": 120, "request_timeout": 30})
        time.sleep(2.8)
    assert said[0].startswith("c1: control plane nodes.list: attempt 7 failed (UNREACHABLE: refused); next attempt at ")
    assert any(line.startswith("c1: control plane nodes.list: still retrying: attempt 7 failed") for line in said[1:]), said


def test_without_the_watch_a_module_reports_nothing():
    os.environ.pop(PROGRESS_ENV, None)
    assert bcd_module.retry_reporter() is None


def test_poll_in_slices_says_each_change_and_passes_the_slices(monkeypatch):
    said = _lines(monkeypatch)
    runs = []
    answers = iter([{"n": 0}, {"n": 0}, {"n": 2}, {"n": 3, "done": True}])

    def execute(slice_s, extra):
        runs.append((slice_s, extra))
        return next(answers)

    def step(res, _progress):
        if res.get("done"):
            return Step(done=res, text=f"{res['n']} of 3", state=res["n"], limit=60, variable="bcd_x")
        return Step(text=f"{res['n']} of 3", state=res["n"], limit=60, variable="bcd_x", extra={"since": "t0"})

    assert poll_in_slices(execute, step, Progress("c1")) == {"n": 3, "done": True}
    assert runs[0][0] == 0.0 and all(0 < r[0] <= 25 for r in runs[1:])
    assert runs[1][1] == {"since": "t0"}
    assert said == ["c1: 0 of 3 (waited 0s of 60s; bcd_x sets the limit)", "c1: 2 of 3 (waited 0s of 60s; bcd_x sets the limit)",
                    "c1: 3 of 3 (waited 0s of 60s; bcd_x sets the limit)"]


def test_events_are_json_lines_without_a_secret(tmp_path, monkeypatch):
    path = tmp_path / "p.jsonl"
    path.write_text("")
    monkeypatch.setenv(PROGRESS_ENV, str(path))
    bcd_module.retry_reporter()({"kind": "retry", "procedure": "pools.get", "attempt": 1, "waited": 0, "delay": 1.5})
    event = json.loads(path.read_text())
    assert event["variable"] == "bcd_control_plane_timeout" and event["next_at"] - event["at"] == 1.5

"""make bench's stage plan limit (bench/stages.py) and the rows that carry it (bench/report.py),
from made-up reports, pods and runs: no sandbox."""

from __future__ import annotations

import pytest

from bench import report, stages
from bench.run import BenchError, Config, Run

NEW, OLD = "bcd@sha256:" + "b" * 64, "bcd@sha256:" + "a" * 64


def _pod(node: str, image: str, ready_at: str | None) -> dict:
    conditions = [{"type": "Ready", "status": "True", "lastTransitionTime": ready_at}] if ready_at else []
    return {"spec": {"nodeName": node, "containers": [{"image": image}]}, "status": {"conditions": conditions}}


REPORT = {"stages": [
    {"name": "canary", "nodes": ["n1"], "started_at": "2026-12-05T10:00:00Z"},
    {"name": "batch 1", "nodes": ["n2", "n3"], "started_at": "2026-12-05T10:00:20Z"},
    {"name": "batch 2", "nodes": [], "started_at": "2026-12-05T10:00:40Z"},
]}


def test_the_limit_is_stages_times_the_slowest_pod_and_the_soak():
    pods = [_pod("n1", NEW, "2026-12-05T10:00:04Z"), _pod("n2", NEW, "2026-12-05T10:00:27Z"),
            _pod("n3", NEW, "2026-12-05T10:00:23Z"), _pod("n4", OLD, "2026-12-05T09:00:00Z")]
    got = stages.stage_limit(REPORT, pods, NEW, 5.0)
    # two stages rolled a node (batch 2 none); the slowest pod took 7 s from its stage's start
    assert got == {"stages": 2, "slowest_pod_s": 7.0, "slowest": {"node": "n2", "stage": "batch 1"},
                   "soak_s": 5.0, "limit_s": 24.0}


def test_a_rolled_node_without_a_ready_pod_on_the_image_has_no_limit():
    pods = [_pod("n1", NEW, "2026-12-05T10:00:04Z"), _pod("n2", OLD, "2026-12-05T10:00:27Z"),
            _pod("n3", NEW, None)]
    with pytest.raises(ValueError, match=r"n2 \(batch 1\) has no Ready pod on bcd@sha256:b"):
        stages.stage_limit(REPORT, pods, NEW, 5.0)


def _run(scenario, who, seconds, nodes=100, **extra):
    return Run(scenario, nodes, who, 1, seconds, 150.0, 120.0, {"total": 3, "by_procedure": {}}, {"total": 7},
               (0.5, 0.6), "log", dict(extra))


LIMIT = {"stages": 11, "slowest_pod_s": 4.0, "soak_s": 5.0, "limit_s": 99.0, "slowest": None}


def test_rollout_rows_carry_the_limit_and_the_down_row_has_no_floor():
    runs = [_run("rollout", "ours", 118.8, stage_limit=LIMIT), _run("rollout", "floor", 80.0),
            _run("rollout-down", "ours", 110.0, stage_limit=LIMIT, down=5),
            _run("rollout-down", "return", 12.0, down=5),
            _run("rollout-down", "floor", 111.0, down=5, returncode=1, timeout_s=110)]
    res = report.results(runs, {}, None, {})
    rollout, down = res["results"]
    assert rollout["stage_limit"] == {"limit_s": 99.0, "ratio": 1.2, "stages": 11, "slowest_pod_s": 4.0, "soak_s": 5.0}
    assert down == {**down, "scenario": "rollout-down", "down": 5, "ours_s": 110.0, "floor_s": None,
                    "ratio": None, "return_s": 12.0, "floor_down": {"runs": 1, "finished": 0, "timeout_s": 110}}
    assert down["stage_limit"]["ratio"] == 1.11
    table = report.table(res).splitlines()
    assert table[2].endswith("| 99.0 (11 x (4 + 5)) | 1.20 |"), table[2]
    assert table[3].startswith("| rollout, 5 down | 100 | 110.0; back: 12.0 | finished 0 of 1 in 110 s | - |"), table[3]
    assert {line.count("|") for line in table} == {table[0].count("|")}


def test_bench_down_is_a_count_or_a_percentage_rounded_up(monkeypatch):
    monkeypatch.setenv("BENCH_MITOGEN", "0")
    cfg = Config.from_env()
    assert cfg.down == "5%" and [cfg.down_count(n) for n in (3, 10, 100, 1000)] == [1, 1, 5, 50]
    monkeypatch.setenv("BENCH_DOWN", "2")
    assert Config.from_env().down_count(1000) == 2
    monkeypatch.setenv("BENCH_DOWN", "five")
    with pytest.raises(BenchError, match="BENCH_DOWN"):
        Config.from_env()

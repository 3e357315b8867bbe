"""make bench's report of the `make demo` row (bench/report.py), from made-up runs: no sandbox."""

from __future__ import annotations

import pytest

from bench import report
from bench.run import BenchError, Config, Run


def _run(scenario: str, who: str, seconds: float, nodes: int = 10, **extra) -> Run:
    cp = {"total": 3, "by_procedure": {"nodes.list": 1}}
    return Run(scenario, nodes, who, 1, seconds, 150.0, 120.0, cp if scenario != "demo" else {},
               {"total": 7} if scenario != "demo" else {}, (0.5, 0.6), "log", dict(extra))


def test_demo_row_reports_the_median_against_sixty_seconds():
    runs = [_run("adopt", "ours", 20), _run("adopt", "floor", 10),
            _run("demo", "ours", 50, nodes=3, playbook_s=30), _run("demo", "ours", 70, nodes=3, playbook_s=40),
            _run("demo", "ours", 55, nodes=3, playbook_s=33)]
    res = report.results(runs, {}, None, {})
    demo = next(r for r in res["results"] if r["scenario"] == "demo")
    assert demo == {**demo, "nodes": 3, "ours_s": 55.0, "target_s": 60, "met": True, "runs": 3, "playbook_s": 33,
                    "floor_s": None, "ratio": None, "peak_rss_mb": None}
    table = report.table(res).splitlines()
    assert table[-1].startswith("| make demo, warm, from a stopped sandbox | 3 | 55.0 (adopt-cluster.yml 33) ✓ | - |")
    assert table[-1].count("|") == table[0].count("|")
    assert "make demo: median of 3 runs." in report.generated({**res, "machine": {}}, runs, None)


def test_demo_row_over_its_target_is_marked():
    res = report.results([_run("demo", "ours", 75, nodes=3)], {}, None, {})
    assert res["results"][0]["met"] is False
    assert " 75.0 ✗ |" in report.table(res)


def test_bench_scenarios_accepts_demo_alone_and_rejects_unknown(monkeypatch):
    monkeypatch.setenv("BENCH_MITOGEN", "0")
    monkeypatch.setenv("BENCH_SCENARIOS", "demo")
    cfg = Config.from_env()
    assert cfg.scenarios == ["demo"] and cfg.demo_cmd == ["make", "demo"]
    assert cfg.demo_dir.name == ".sandbox-bench-demo"
    monkeypatch.setenv("BENCH_SCENARIOS", "demo boot")
    with pytest.raises(BenchError, match="BENCH_SCENARIOS"):
        Config.from_env()

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


def test_peak_memory_is_judged_on_pss_at_every_size_with_a_target():
    runs = [_run("adopt", "ours", 200, nodes=5000), _run("adopt", "floor", 190, nodes=5000)]
    runs[0].peak_pss_mb, runs[0].peak_rss_mb = 280.0, 450.0
    res = report.results(runs, {}, None, {})
    row = res["results"][0]
    assert (row["peak_pss_mb"], row["peak_rss_mb"]) == (280.0, 450.0)
    line = report.table(res).splitlines()[-1]
    assert "| ≤ 1.1 | 280 ✓ | 450 |" in line  # the 5,000 point's targets: ratio 1.1, PSS under 300 MB
    assert line.count("|") == report.table(res).splitlines()[0].count("|")


def test_merge_keeps_the_earlier_points_this_run_did_not_measure():
    new = report.results([_run("adopt", "ours", 200, nodes=5000), _run("adopt", "floor", 190, nodes=5000)], {}, None,
                         {"finished_at": "now"})
    old = {"results": [{**report.results([_run("adopt", "ours", 20), _run("adopt", "floor", 10)], {}, None, {})["results"][0],
                        "nodes": 100},
                       {**new["results"][0], "ours_s": 1.0}],
           "machine": {"finished_at": "then", "runs_per_point": {"100": 3}}}
    res = report.merged(new, old)
    assert [(r["scenario"], r["nodes"], r["ours_s"]) for r in res["results"]] == [("adopt", 100, 20.0), ("adopt", 5000, 200.0)]
    assert res["results"][0]["measured"] == "then" and "measured" not in res["results"][1]
    assert res["machine"]["earlier"]["finished_at"] == "then"
    doc = report.generated(res, [], None)
    assert "the run of then: adopt at 100" in doc and "The latest of them (then)" in doc
    # a row kept before keeps its own date
    again = report.merged(report.results([_run("render", "ours", 1), _run("render", "floor", 1)], {}, None, {}), res)
    assert [r.get("measured") for r in again["results"] if r["scenario"] == "adopt"] == ["then", "now"]
    assert report.table(res).count("\n") == 3  # head, rule, two rows; the old point's PSS shows "-"

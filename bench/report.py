"""make bench's outputs: bench/results/latest.json (the medians), latest-runs.json (every run)
and the generated part of docs/benchmarks.md (between its ``bench:begin``/``bench:end`` marks)."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LATEST = ROOT / "bench" / "results" / "latest.json"
RUNS = ROOT / "bench" / "results" / "latest-runs.json"
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- bench:begin (written by make bench) -->", "<!-- bench:end -->"
SCENARIOS = ("render", "adopt", "rollout")
# make demo warm (binaries cached, venv present), from a stopped sandbox: seconds, reported only
DEMO_TARGET_S = 60
# The targets (reported, never asserted).
RATIO_TARGET = {100: 1.3, 1000: 1.15, 5000: 1.1}
# the rollout's own targets (same maxUnavailable and minReadySeconds for ours and the floor)
ROLLOUT_RATIO_TARGET = {100: 1.5, 1000: 1.2, 5000: 1.15}
# peak PSS summed over the process tree (forked workers' shared pages counted once)
MEMORY_TARGET_MB = {100: 300, 1000: 300, 5000: 300}


def per_poll_target(nodes: int) -> int:
    return math.ceil(nodes / 500) + 1


def _median(values):
    return statistics.median(values) if values else None


def results(runs, probes: dict, cfg, machine: dict) -> dict:
    """``{"results": [...], "machine": {...}}`` in the issue's shape: medians of the runs."""
    out = []
    sizes = sorted({r.nodes for r in runs})
    for scenario in SCENARIOS:
        for size in sizes:
            ours = [r for r in runs if r.scenario == scenario and r.nodes == size and r.who == "ours"]
            floor = [r for r in runs if r.scenario == scenario and r.nodes == size and r.who == "floor"]
            if not ours or not floor:
                continue
            mitogen = [r for r in runs if r.scenario == scenario and r.nodes == size and r.who == "mitogen"]
            ours_s, floor_s = _median([r.seconds for r in ours]), _median([r.seconds for r in floor])
            cp = {"ours": round(_median([r.cp["total"] for r in ours])), "floor": round(_median([r.cp["total"] for r in floor]))}
            if scenario == "adopt":
                floor_pp = [r.cp["by_procedure"].get("nodes.list", 0) / r.extra["polls"] for r in floor if r.extra.get("polls")]
                cp["per_poll"] = {"ours": probes.get(size, {}).get("per_poll"),
                                  "floor": _median(floor_pp), "target_max": per_poll_target(size)}
            out.append({
                "scenario": scenario,
                "nodes": size,
                "ours_s": round(ours_s, 1),
                "floor_s": round(floor_s, 1),
                "ratio": round(ours_s / floor_s, 2) if floor_s else None,
                "peak_rss_mb": round(max(r.peak_rss_mb for r in ours), 1),
                "peak_pss_mb": round(max(r.peak_pss_mb for r in ours), 1),
                "cp_requests": cp,
                "kube_requests": {"ours": round(_median([r.kube["total"] for r in ours])),
                                  "floor": round(_median([r.kube["total"] for r in floor]))},
                # CPU seconds of each command's whole process tree (bench.measure); None before it was kept
                "cpu_s": _cpu(ours, floor),
                # ours under mitogen's strategy (BENCH_MITOGEN), against the same floor
                "mitogen": _mitogen_point(mitogen, floor_s),
                "stage_limit": _stage_limit(ours, ours_s),
            })
    for size in sizes:
        down = [r for r in runs if r.scenario == "rollout-down" and r.nodes == size and r.who == "ours"]
        if down:
            back = [r for r in runs if r.scenario == "rollout-down" and r.nodes == size and r.who == "return"]
            ours_s = _median([r.seconds for r in down])
            floor = [r for r in runs if r.scenario == "rollout-down" and r.nodes == size and r.who == "floor"]
            out.append({
                "scenario": "rollout-down", "nodes": size, "down": down[0].extra.get("down"),
                "ours_s": round(ours_s, 1), "floor_s": None, "ratio": None,
                # kubectl rollout status with the same nodes down, given ours' time: how many of its
                # runs finished in it (0: the floor cannot roll a fleet with nodes down)
                "floor_down": {"runs": len(floor), "finished": sum(1 for r in floor if r.extra.get("returncode") == 0),
                               "timeout_s": _median([r.extra.get("timeout_s") or 0 for r in floor])} if floor else None,
                "peak_rss_mb": round(max(r.peak_rss_mb for r in down), 1),
                "peak_pss_mb": round(max(r.peak_pss_mb for r in down), 1),
                "cp_requests": {"ours": round(_median([r.cp["total"] for r in down])), "floor": None},
                "kube_requests": {"ours": round(_median([r.kube["total"] for r in down])), "floor": None},
                "cpu_s": None, "mitogen": None,
                "stage_limit": _stage_limit(down, ours_s),
                # the run after the down nodes returned, which leaves the whole fleet on the new digest
                "return_s": round(_median([r.seconds for r in back]), 1) if back else None,
            })
    demo = [r for r in runs if r.scenario == "demo"]
    if demo:
        s = _median([r.seconds for r in demo])
        playbook = [r.extra["playbook_s"] for r in demo if r.extra.get("playbook_s") is not None]
        out.append({
            "scenario": "demo",
            "nodes": max(r.nodes for r in demo),
            "ours_s": round(s, 1),
            "floor_s": None,
            "ratio": None,
            "target_s": DEMO_TARGET_S,
            "met": s < DEMO_TARGET_S,
            "runs": len(demo),
            # of which adopt-cluster.yml (ansible.posix.timer, whole seconds); the rest is make,
            # setup's check and python -m sandbox up
            "playbook_s": _median(playbook),
            # peak RSS is left out: the tree of make demo holds the sandbox's own servers while
            # `sandbox up` starts them (latest-runs.json keeps the raw figure)
            "peak_rss_mb": None,
            "peak_pss_mb": None,
            "cp_requests": None,
            "kube_requests": None,
            "mitogen": None,
        })
    return {"results": out, "machine": machine}


def _stage_limit(ours: list, ours_s: float) -> dict | None:
    """The median stage plan limit of the runs that kept one (bench.stages), and ours beside it."""
    limits = [r.extra["stage_limit"] for r in ours if r.extra.get("stage_limit")]
    if not limits:
        return None
    limit_s = _median([x["limit_s"] for x in limits])
    return {"limit_s": round(limit_s, 1), "ratio": round(ours_s / limit_s, 2) if limit_s else None,
            "stages": _median([x["stages"] for x in limits]),
            "slowest_pod_s": _median([x["slowest_pod_s"] for x in limits]), "soak_s": limits[0]["soak_s"]}


def _cpu(ours: list, floor: list) -> dict | None:
    """The median CPU seconds of ours and of the floor, or None when a run did not record it."""
    if any("cpu_s" not in r.extra for r in ours + floor):
        return None
    return {"ours": round(_median([r.extra["cpu_s"] for r in ours]), 1),
            "floor": round(_median([r.extra["cpu_s"] for r in floor]), 1)}


def merged(res: dict, previous: dict | None) -> dict:
    """``res`` with the points of ``previous`` (an earlier latest.json) that ``res`` did not
    measure, so a run of one size (BENCH_MERGE=1) keeps the committed table's other sizes. The
    earlier run's machine is kept under ``machine.earlier`` (its date, load and runs)."""
    if not previous:
        return res
    have = {(r["scenario"], r["nodes"]) for r in res["results"]}
    # a row kept before keeps its own date: it may be older than the previous run
    kept = [dict(r, measured=r.get("measured") or previous["machine"].get("finished_at")) for r in previous.get("results") or []
            if (r["scenario"], r["nodes"]) not in have]
    if not kept:
        return res
    order = {s: i for i, s in enumerate((*SCENARIOS, "rollout-down", "demo"))}
    rows = sorted([*res["results"], *kept], key=lambda r: (order.get(r["scenario"], 9), r["nodes"]))
    earlier = {k: v for k, v in (previous.get("machine") or {}).items() if k != "earlier"}
    return {"results": rows, "machine": {**res["machine"], "earlier": earlier}}


def _mitogen_point(runs, floor_s):
    if not runs:
        return None
    s = _median([r.seconds for r in runs])
    return {"s": round(s, 1), "ratio": round(s / floor_s, 2) if floor_s else None,
            "peak_rss_mb": round(max(r.peak_rss_mb for r in runs), 1),
            "cp_requests": round(_median([r.cp["total"] for r in runs])),
            "kube_requests": round(_median([r.kube["total"] for r in runs]))}


def write(res: dict, runs, probes: dict, failed: str | None) -> None:
    LATEST.parent.mkdir(parents=True, exist_ok=True)
    LATEST.write_text(json.dumps(res, indent=2) + "\n")
    RUNS.write_text(json.dumps({"runs": [asdict(r) for r in runs], "poll_probes": probes, "failed": failed},
                               indent=2, default=str) + "\n")
    write_doc(res, runs, failed)


def table(res: dict) -> str:
    """The Markdown table of the results."""
    head = ("| scenario | nodes | ours (s) | floor (s) | ours/floor | target | peak PSS (MB) | peak RSS (MB) "
            "| CP requests ours / floor "
            "| CP per poll ours / floor (max) | Kubernetes requests ours / floor | stage plan limit (s) | ours/limit |")
    mitogen = any(r.get("mitogen") for r in res["results"])
    if mitogen:
        head += " mitogen (s) | mitogen/floor | mitogen peak RSS (MB) |"
    lines = [head, "|" + "---|" * (16 if mitogen else 13)]
    for r in res["results"]:
        if r["scenario"] == "demo":
            lines.append(_demo_row(r) + (" - | - | - |" if mitogen else ""))
            continue
        if r["scenario"] == "rollout-down":
            lines.append(_down_row(r) + (" - | - | - |" if mitogen else ""))
            continue
        target = (ROLLOUT_RATIO_TARGET if r["scenario"] == "rollout" else RATIO_TARGET).get(r["nodes"])
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"
        mark = "" if target is None else (" ✓" if r["ratio"] is not None and r["ratio"] <= target else " ✗")
        mem_target = MEMORY_TARGET_MB.get(r["nodes"])
        # the target is on PSS; a point measured before PSS was reported shows "-" there
        pss = r.get("peak_pss_mb")
        mem = "-" if pss is None else f"{pss:.0f}" + ("" if mem_target is None else (" ✓" if pss < mem_target else " ✗"))
        mem += f" | {r['peak_rss_mb']:.0f}"
        pp = r["cp_requests"].get("per_poll")
        per_poll = "-"
        if pp:
            ok = pp["ours"] is not None and pp["ours"] <= pp["target_max"]
            per_poll = f"{_fmt(pp['ours'])} / {_fmt(pp['floor'])} (≤ {pp['target_max']}){' ✓' if ok else ' ✗'}"
        lines.append(f"| {r['scenario']} | {r['nodes']} | {r['ours_s']:.1f} | {r['floor_s']:.1f} | {ratio}{mark} | "
                     f"{'≤ ' + str(target) if target else '-'} | {mem} | {r['cp_requests']['ours']} / "
                     f"{r['cp_requests']['floor']} | {per_poll} | {r['kube_requests']['ours']} / {r['kube_requests']['floor']} | "
                     f"{_limit_cells(r)} |")
        if mitogen:
            m = r.get("mitogen")
            if m:
                m_mark = "" if target is None else (" ✓" if m["ratio"] is not None and m["ratio"] <= target else " ✗")
                m_mem = f"{m['peak_rss_mb']:.0f}" + ("" if mem_target is None else (" ✓" if m["peak_rss_mb"] < mem_target else " ✗"))
                m_ratio = "-" if m["ratio"] is None else f"{m['ratio']:.2f}"
                lines[-1] += f" {m['s']:.1f} | {m_ratio}{m_mark} | {m_mem} |"
            else:
                lines[-1] += " - | - | - |"
    return "\n".join(lines)


def _limit_cells(r: dict) -> str:
    """The stage plan limit and ours beside it: ``"52.0 (10 x (0 + 5)) | 1.08"``, or dashes."""
    lim = r.get("stage_limit")
    if not lim:
        return "- | -"
    ratio = "-" if lim["ratio"] is None else f"{lim['ratio']:.2f}"
    return f"{lim['limit_s']:.1f} ({lim['stages']:g} x ({lim['slowest_pod_s']:g} + {lim['soak_s']:g})) | {ratio}"


def _down_row(r: dict) -> str:
    """rollout-down's row: the floor's column says whether kubectl rollout status, with the same
    nodes down and ours' time, finished."""
    back = "" if r.get("return_s") is None else f"; back: {r['return_s']:.1f}"
    fd = r.get("floor_down")
    floor = "-" if not fd else f"finished {fd['finished']} of {fd['runs']} in {fd['timeout_s']:g} s"
    pss = "-" if r.get("peak_pss_mb") is None else f"{r['peak_pss_mb']:.0f}"
    return (f"| rollout, {r['down']} down | {r['nodes']} | {r['ours_s']:.1f}{back} | {floor} | - | - | {pss} | "
            f"{r['peak_rss_mb']:.0f} | {r['cp_requests']['ours']} / - | - | {r['kube_requests']['ours']} / - | "
            f"{_limit_cells(r)} |")


def _demo_row(r: dict) -> str:
    """make demo's row: its time against its own target (no floor, no request counts)."""
    mark = " ✓" if r["met"] else " ✗"
    playbook = "" if r.get("playbook_s") is None else f" (adopt-cluster.yml {r['playbook_s']:g})"
    return (f"| make demo, warm, from a stopped sandbox | {r['nodes']} | {r['ours_s']:.1f}{playbook}{mark} | - | - | "
            f"< {r['target_s']} s | - | - | - | - | - | - | - |")


def _runs(per_point) -> str:
    if isinstance(per_point, dict):
        counts = set(per_point.values())
        if len(counts) == 1:
            return _plural(counts.pop())
        return "runs (" + ", ".join(f"{v} at {k} nodes" for k, v in per_point.items()) + ")"
    return _plural(per_point)


def _plural(n) -> str:
    return "1 run (the median of one run is that run)" if n == 1 else f"{n} runs"


def _fmt(x) -> str:
    return "-" if x is None else f"{x:g}"


def generated(res: dict, runs, failed: str | None) -> str:
    m = res["machine"]
    load = m.get("load_average_1m") or {}
    parts = [
        BEGIN,
        "",
        f"Measured {m.get('finished_at', '?')} on {m.get('cpu')} ({m.get('cores')} cores, {m.get('memory_gib')} GiB), "
        f"{m.get('os')}; Python {m.get('python')}, ansible-core {m.get('ansible_core')}, kubernetes client "
        f"{m.get('kubernetes_client')}"
        + (f", mitogen {m['mitogen']} (the mitogen columns: our playbooks under ANSIBLE_STRATEGY=mitogen_linear)"
           if m.get("mitogen") else "")
        + f", Kubernetes {m.get('kubernetes_server')} with {m.get('simulated_nodes', 'KWOK')} nodes. "
        f"Medians of {_runs(m.get('runs_per_point'))}; rollouts with maxUnavailable {m.get('max_unavailable')} for ours "
        f"and the floor. 1-minute load average during the runs: min {load.get('min')}, median {load.get('median')}, "
        f"max {load.get('max')}"
        + (" (above the core count: something else was running, read the figures with care)."
           if (load.get("median") or 0) > (m.get("cores") or 1) else "."),
        "",
        table(res),
        "",
    ]
    earlier = m.get("earlier")
    if earlier:
        # merged runs keep rows from several earlier runs: each row says when it was measured
        kept = sorted((r for r in res["results"] if r.get("measured")),
                      key=lambda r: (r["measured"], (*SCENARIOS, "rollout-down", "demo").index(r["scenario"]), r["nodes"]))
        by_run: dict[str, list[str]] = {}
        for r in kept:
            by_run.setdefault(r["measured"], []).append(f"{r['scenario']} at {r['nodes']}")
        no_pss = [f"{r['scenario']} at {r['nodes']}" for r in kept
                  if r["scenario"] in ("adopt", "rollout") and not r.get("peak_pss_mb")]
        eload = earlier.get("load_average_1m") or {}
        parts += ["Kept from earlier runs (BENCH_MERGE=1), each row as its run measured it: "
                  + "; ".join(f"the run of {when}: {', '.join(points)}" for when, points in by_run.items()) + ". "
                  f"The latest of them ({earlier.get('finished_at', '?')}): medians of "
                  f"{_runs(earlier.get('runs_per_point'))}, 1-minute load min {eload.get('min')}, median "
                  f"{eload.get('median')}, max {eload.get('max')}."
                  + (f" Peak PSS was not recorded yet for {', '.join(no_pss)}." if no_pss else ""), ""]
    if failed:
        parts += [f"**The run stopped early:** {failed.splitlines()[0]}", ""]
    demo = next((r for r in res["results"] if r["scenario"] == "demo"), None)
    if demo:
        parts += [f"make demo: median of {_plural(demo['runs'])}.", ""]
    slow = {}
    for r in runs:
        if r.who == "ours" and r.extra.get("slowest_tasks") and r.scenario in SCENARIOS:
            slow[(r.scenario, r.nodes)] = r
    if slow:
        parts += ["Where ours spends its time (profile_tasks, the slowest tasks of the last run of each point):", ""]
        for (scenario, nodes), r in sorted(slow.items(), key=lambda kv: (SCENARIOS.index(kv[0][0]), kv[0][1])):
            parts += [f"<details><summary>{scenario}, {nodes} nodes ({r.seconds:.1f} s)</summary>", "", "```"]
            parts += r.extra["slowest_tasks"][:10]
            parts += ["```", "", "</details>", ""]
    parts.append(END)
    return "\n".join(parts)


def write_doc(res: dict, runs, failed: str | None) -> None:
    text = DOC.read_text() if DOC.exists() else f"# Benchmarks\n\n{BEGIN}\n{END}\n"
    if BEGIN not in text or END not in text:
        text = text.rstrip() + f"\n\n## Latest results\n\n{BEGIN}\n{END}\n"
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOC.write_text(head + generated(res, runs, failed) + tail)

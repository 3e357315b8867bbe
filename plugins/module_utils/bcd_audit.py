"""audit.yml's outputs: a check result, the per-node table, JUnit XML and a Prometheus textfile.

A check result is a mapping ``{cluster, check, node, ok, message, warning}``: ``node`` is the
Kubernetes Node name for a per-node check and ``""`` for a cluster-level one; ``ok`` is a bool;
``message`` says what was found (and, when not ok, the cause and the fix); ``warning`` is true
for a passing check that still has something to say (Pod Security without
``bcd_require_pod_security``). Its ``status`` (``status()``) is ``failed`` when not ok, else
``warning`` when it warns, else ``ok``: the printed table, the JSON report, the JUnit XML and the
metrics all say it from that one function, so they never disagree.

JUnit: one ``<testsuite>`` per cluster (its name, ``id`` from 0, ``package`` ``bcd.audit``), one
``<testcase>`` per check and node (``classname`` ``bcd.audit.<cluster>.<check>``, ``name`` the
Node or ``cluster``), a failed check a ``<failure type="<check>" message="...">`` with the full
message as text; a check that warns passes and is a ``WARNING <check> <node>: <message>`` line of
the suite's ``system-out``. Every attribute the Apache Ant JUnit schema requires is written (``timestamp``
without a zone, ``hostname``, ``tests``, ``failures``, ``errors``, ``time``, ``properties``,
``system-out``, ``system-err``), so Jenkins, GitLab and AWX all read it.

Prometheus (node-exporter textfile collector format, written with ``prometheus_client``):
``bcd_audit_check_ok{cluster,check,node}`` 1 (passed: ok or warning) or 0 (failed) per check and
node, ``bcd_audit_check_warning{cluster,check,node}`` 1 when it passed with a warning, else 0, and
``bcd_audit_last_run_timestamp_seconds`` (Unix time of the run), and the extra host paths a drift
check found (a hostPath volume of bcd's DaemonSet the render does not have, whoever set it):
``bcd_audit_extra_host_paths{cluster}`` (their count, 0 when none) and
``bcd_audit_extra_host_path{cluster,object,volume,path,managers}`` 1 each. The file is written atomically.

Extra host paths come first everywhere: on the first line of the drift check's message (the JUnit
failure's ``message``), in the metrics above, and in audit.yml's closing lines.
"""

from __future__ import annotations

import datetime
import socket
import xml.etree.ElementTree as ET

CLUSTER_NODE = "cluster"
# What the printed table says for each status.
WORDS = {"ok": "ok", "warning": "WARNING", "failed": "FAILED"}


def status(r: dict) -> str:
    """``failed``, ``warning`` or ``ok``: a check that failed is failed, whatever it also warns."""
    if not r["ok"]:
        return "failed"
    return "warning" if r.get("warning") else "ok"


def extra_host_paths(results: list[dict]) -> list[tuple[str, dict]]:
    """``(cluster, finding)`` of each extra host path a failed drift check found (one per volume)."""
    out, seen = [], set()
    for r in results:
        if r["ok"]:
            continue
        for f in r.get("findings") or []:
            key = (r["cluster"], f.get("object"), f.get("volume"))
            if f.get("host_path") and not f.get("allowed") and key not in seen:
                seen.add(key)
                out.append((r["cluster"], f))
    return out


def junit_xml(results: list[dict], started: float, duration: float) -> str:
    """The JUnit XML document of ``results`` (a run that started at Unix time ``started``)."""
    stamp = datetime.datetime.fromtimestamp(started, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    host = socket.gethostname() or "localhost"
    root = ET.Element("testsuites")
    clusters = sorted({r["cluster"] for r in results})
    for i, cluster in enumerate(clusters):
        mine = [r for r in results if r["cluster"] == cluster]
        failed = [r for r in mine if not r["ok"]]
        suite = ET.SubElement(root, "testsuite", {
            "name": cluster, "package": "bcd.audit", "id": str(i), "timestamp": stamp, "hostname": host,
            "tests": str(len(mine)), "failures": str(len(failed)), "errors": "0", "skipped": "0",
            "time": f"{duration:.3f}"})
        ET.SubElement(suite, "properties")
        for r in mine:
            case = ET.SubElement(suite, "testcase", {"classname": f"bcd.audit.{cluster}.{r['check']}",
                                                     "name": r["node"] or CLUSTER_NODE, "time": "0"})
            if not r["ok"]:
                failure = ET.SubElement(case, "failure", {"type": r["check"], "message": r["message"].splitlines()[0]})
                failure.text = r["message"]
        out = ET.SubElement(suite, "system-out")
        out.text = "\n".join(f"WARNING {r['check']} {r['node'] or CLUSTER_NODE}: {r['message']}" for r in mine
                             if status(r) == "warning")
        ET.SubElement(suite, "system-err").text = ""
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_metrics(path: str, results: list[dict], started: float) -> None:
    """Write the Prometheus textfile ``path`` (atomically, via prometheus_client)."""
    from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

    registry = CollectorRegistry()
    ok = Gauge("bcd_audit_check_ok", "1 when the bcd audit check passed (ok or warning) for the cluster and node "
               "(node empty: the cluster), 0 when it failed", ["cluster", "check", "node"], registry=registry)
    warning = Gauge("bcd_audit_check_warning", "1 when the bcd audit check passed with a warning for the cluster and node "
                    "(node empty: the cluster), else 0", ["cluster", "check", "node"], registry=registry)
    for r in results:
        ok.labels(r["cluster"], r["check"], r["node"]).set(0 if status(r) == "failed" else 1)
        warning.labels(r["cluster"], r["check"], r["node"]).set(1 if status(r) == "warning" else 0)
    # extra host paths first: a count per cluster (0 when none, for alerting) and one series each
    count = Gauge("bcd_audit_extra_host_paths", "How many hostPath volumes of bcd's DaemonSet the render does not have "
                  "(any field manager set them)", ["cluster"], registry=registry)
    each = Gauge("bcd_audit_extra_host_path", "1 for each hostPath volume of bcd's DaemonSet the render does not have",
                 ["cluster", "object", "volume", "path", "managers"], registry=registry)
    for cluster in sorted({r["cluster"] for r in results}):
        count.labels(cluster).set(0)
    for cluster, f in extra_host_paths(results):
        count.labels(cluster).inc()
        each.labels(cluster, f.get("object") or "", f.get("volume") or "", f["host_path"], ",".join(f.get("managers") or [])).set(1)
    Gauge("bcd_audit_last_run_timestamp_seconds", "Unix time the bcd audit ran", registry=registry).set(started)
    write_to_textfile(path, registry)


def table(results: list[dict]) -> list[str]:
    """The per-node table: one row per Node (its per-node checks), then the cluster-level checks."""
    per_node = [r for r in results if r["node"]]
    checks = sorted({r["check"] for r in per_node})
    nodes = sorted({r["node"] for r in per_node})
    width = max([4] + [len(n) for n in nodes])
    lines = []
    if nodes:
        lines.append("NODE".ljust(width) + "  " + "  ".join(c.upper().ljust(14) for c in checks))
        for n in nodes:
            row = {r["check"]: r for r in per_node if r["node"] == n}
            lines.append(n.ljust(width) + "  " + "  ".join(
                WORDS[status(row[c])].ljust(14) if c in row else "-".ljust(14) for c in checks))
    for r in results:
        if status(r) != "ok" and r["node"]:
            lines.append(f"{WORDS[status(r)]} {r['check']} {r['node']}: {r['message']}")
    for r in results:
        if not r["node"]:
            lines.append(f"{WORDS[status(r)]} {r['check']}: {r['message']}")
    return lines

"""audit.yml's outputs (module_utils/bcd_audit.py): JUnit XML against the JUnit schema, the
Prometheus textfile through prometheus_client's parser, the per-node table."""

from __future__ import annotations

import pytest
import xmlschema
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_audit import junit_xml, table, write_metrics
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import ROOT

SCHEMA = ROOT / "tests" / "fixtures" / "junit" / "junit.xsd"

RESULTS = [
    {"cluster": "east", "check": "drift-daemonset", "node": "", "ok": False, "warning": False,
     "message": "DaemonSet bcd-system/bcd differs\nimage: a@sha256:1 runs, the render has a@sha256:2"},
    {"cluster": "east", "check": "reporting", "node": "gpu-node-1", "ok": True, "warning": False, "message": "adopting"},
    {"cluster": "east", "check": "reporting", "node": "gpu-node-2", "ok": False, "warning": False, "message": "offline <&>"},
    {"cluster": "east", "check": "pod-security", "node": "", "ok": True, "warning": True, "message": "default is open"},
    {"cluster": "west", "check": "join-secret", "node": "", "ok": True, "warning": False, "message": "none"},
]


def junit_schema() -> xmlschema.XMLSchema:
    return xmlschema.XMLSchema(str(SCHEMA))


def test_junit_validates_and_has_one_case_per_check_and_node():
    doc = junit_xml(RESULTS, 1_800_000_000.0, 2.5)
    junit_schema().validate(doc)
    data = junit_schema().to_dict(doc)
    suites = {s["@name"]: s for s in data["testsuite"]}
    assert set(suites) == {"east", "west"}
    assert suites["east"]["@tests"] == 4 and suites["east"]["@failures"] == 2
    cases = {(c["@classname"], c["@name"]): c for c in suites["east"]["testcase"]}
    assert set(cases) == {("bcd.audit.east.drift-daemonset", "cluster"), ("bcd.audit.east.reporting", "gpu-node-1"),
                          ("bcd.audit.east.reporting", "gpu-node-2"), ("bcd.audit.east.pod-security", "cluster")}
    assert cases[("bcd.audit.east.reporting", "gpu-node-2")]["failure"]["@message"] == "offline <&>"
    assert "failure" not in cases[("bcd.audit.east.reporting", "gpu-node-1")]
    assert "image: a@sha256:1" in cases[("bcd.audit.east.drift-daemonset", "cluster")]["failure"]["$"]


def test_the_schema_refuses_what_a_strict_reader_refuses():
    bad = junit_xml(RESULTS, 1_800_000_000.0, 2.5).replace(' hostname="', ' host="')
    with pytest.raises(xmlschema.XMLSchemaValidationError):
        junit_schema().validate(bad)


def test_metrics_parse(tmp_path):
    out = tmp_path / "bcd_audit.prom"
    write_metrics(str(out), RESULTS, 1_800_000_000.0)
    families = {f.name: f for f in text_string_to_metric_families(out.read_text())}
    samples = {tuple(sorted(s.labels.items())): s.value for s in families["bcd_audit_check_ok"].samples}
    assert samples[(("check", "reporting"), ("cluster", "east"), ("node", "gpu-node-2"))] == 0
    assert samples[(("check", "reporting"), ("cluster", "east"), ("node", "gpu-node-1"))] == 1
    assert samples[(("check", "drift-daemonset"), ("cluster", "east"), ("node", ""))] == 0
    assert len(samples) == len(RESULTS)
    assert families["bcd_audit_last_run_timestamp_seconds"].samples[0].value == 1_800_000_000.0
    assert out.stat().st_mode & 0o777 == 0o644


def test_table_has_a_row_per_node_and_names_failures():
    lines = table(RESULTS)
    assert lines[0].split() == ["NODE", "REPORTING"]
    assert lines[1].split() == ["gpu-node-1", "ok"] and lines[2].split() == ["gpu-node-2", "FAILED"]
    assert "FAILED reporting gpu-node-2: offline <&>" in lines
    assert any(line.startswith("FAILED drift-daemonset: DaemonSet") for line in lines)


def test_every_output_says_the_same_status_for_every_check(tmp_path):
    """ok, warning or failed, per check and node: the table, the JUnit XML and the metrics agree
    (a failed check that also carries warning=True is failed everywhere, never a warning)."""
    from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_audit import status

    results = [*RESULTS, {"cluster": "west", "check": "pod-security", "node": "", "ok": False, "warning": True,
                          "message": "required"},
               {"cluster": "west", "check": "reporting", "node": "gpu-node-9", "ok": True, "warning": True, "message": "slow"}]
    want = {(r["cluster"], r["check"], r["node"]): status(r) for r in results}
    assert sorted(set(want.values())) == ["failed", "ok", "warning"]
    out = tmp_path / "bcd_audit.prom"
    write_metrics(str(out), results, 1_800_000_000.0)
    families = {f.name: f for f in text_string_to_metric_families(out.read_text())}
    ok = {(s.labels["cluster"], s.labels["check"], s.labels["node"]): s.value for s in families["bcd_audit_check_ok"].samples}
    warn = {(s.labels["cluster"], s.labels["check"], s.labels["node"]): s.value
            for s in families["bcd_audit_check_warning"].samples}
    assert {k: "failed" if ok[k] == 0 else "warning" if warn[k] == 1 else "ok" for k in ok} == want
    data = junit_schema().to_dict(junit_xml(results, 1_800_000_000.0, 2.5))
    junit = {}
    for suite in data["testsuite"]:
        warned = suite.get("system-out") or ""
        for case in suite["testcase"]:
            check, node = case["@classname"].rsplit(".", 1)[1], "" if case["@name"] == "cluster" else case["@name"]
            line = f"WARNING {check} {case['@name']}: "
            junit[(suite["@name"], check, node)] = "failed" if "failure" in case else "warning" if line in warned else "ok"
    assert junit == want
    word = {"ok": "ok", "warning": "WARNING", "failed": "FAILED"}
    for cluster in ("east", "west"):
        lines = table([r for r in results if r["cluster"] == cluster])
        for r in results:
            if r["cluster"] == cluster and not r["node"]:
                assert f"{word[want[(cluster, r['check'], '')]]} {r['check']}: {r['message']}" in lines
    assert "WARNING reporting gpu-node-9: slow" in table(results)

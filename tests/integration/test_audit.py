"""audit.yml against an adopted sandbox: every check passes; then, after each of a hand edit to
the DaemonSet, the ClusterPolicy's toolkit env set back by another field manager, a join Secret
left behind, an unrevoked token, and a node that stops reporting, exactly the right check fails
and names the cause. The JUnit file validates against the JUnit schema and the textfile parses
with prometheus_client's parser.

Each test starts from the cluster as bcd-ansible alone adopts it (the ``adopted`` fixture) and
undoes its fault, so the tests pass in any order.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

import pytest
import xmlschema
from kubernetes import client as k8s
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import ROOT, recap, run_playbook

pytestmark = [pytest.mark.sandbox, pytest.mark.usefixtures("adopted")]

NS = "bcd-system"
SCHEMA = ROOT / "tests" / "fixtures" / "junit" / "junit.xsd"
OTHER_DIGEST = "0" * 64


@pytest.fixture(scope="module")
def admin(sandbox):
    from sandbox.control_plane.admin import Admin

    a = Admin.for_sandbox(sandbox.dir)
    a.clear_faults()
    yield a
    a.clear_faults()


def audit(tmp_path: Path, *extra: str) -> tuple:
    """Run audit.yml writing every output; return (run, report, junit text, metrics text)."""
    report, junit, metrics = tmp_path / "audit.json", tmp_path / "audit.xml", tmp_path / "bcd_audit.prom"
    run = run_playbook("audit.yml", "-e", f"bcd_report_out={report}", "-e", f"bcd_junit_out={junit}",
                       "-e", f"bcd_metrics_out={metrics}", *extra)
    assert report.exists(), run.stdout[-3000:]
    doc = json.loads(report.read_text())
    assert doc["schema_version"] == 1  # docs/reports.md
    return run, doc, junit.read_text(), metrics.read_text()


def failed(report: dict) -> set[tuple[str, str]]:
    return {(r["check"], r["node"]) for c in report["clusters"].values() for r in c["results"] if not r["ok"]}


def message(report: dict, check: str, node: str = "") -> str:
    return next(r["message"] for c in report["clusters"].values() for r in c["results"]
                if r["check"] == check and r["node"] == node)


def test_every_check_passes_on_an_adopted_cluster(sandbox, tmp_path, cp, cpvars):
    tokens_before = len(list(cp.list_tokens(cpvars["bcd_tenant"], cpvars["bcd_pool"])))
    run, report, junit, metrics = audit(tmp_path)
    assert run.returncode == 0, run.stdout[-4000:]
    assert failed(report) == set() and report["passed"] is True
    assert recap(run.stdout)["sandbox"]["changed"] == 0
    assert len(list(cp.list_tokens(cpvars["bcd_tenant"], cpvars["bcd_pool"]))) == tokens_before, "an audit mints nothing"
    # the report names the cluster connection it audited
    assert f"Reached through kubeconfig {sandbox.kubeconfig}, context " in " ".join(run.stdout.split()), run.stdout[-3000:]
    gpu = sandbox.gpu_node_names()
    results = report["clusters"]["sandbox"]["results"]
    checks = {(r["check"], r["node"]) for r in results}
    for node in gpu:
        assert {("reporting", node), ("gpu-isolation", node)} <= checks
    assert {"drift-namespace", "drift-configmap", "drift-daemonset", "clusterpolicy", "join-tokens", "join-secret",
            "pod-security"} <= {c for c, _ in checks}
    # Pod Security of namespace default is a warning, as in adopt-cluster.yml, not a failure.
    assert "default" in message(report, "pod-security")
    # JUnit: valid, one test case per check and node.
    schema = xmlschema.XMLSchema(str(SCHEMA))
    schema.validate(junit)
    suite = schema.to_dict(junit)["testsuite"][0]
    assert suite["@name"] == "sandbox" and suite["@tests"] == len(results) and suite["@failures"] == 0
    assert len(suite["testcase"]) == len(results)
    # Prometheus: one gauge per check and node, all 1, and the time of the run.
    families = {f.name: f for f in text_string_to_metric_families(metrics)}
    samples = families["bcd_audit_check_ok"].samples
    assert len(samples) == len(results) and all(s.value == 1 for s in samples)
    assert abs(families["bcd_audit_last_run_timestamp_seconds"].samples[0].value - time.time()) < 600
    # The per-node table.
    assert "NODE" in run.stdout and "GPU-ISOLATION" in run.stdout


def printed_statuses(stdout: str) -> dict[tuple[str, str], str]:
    """(check, node) -> ok/warning/failed as the printed report says it: the per-node table's cells
    and the cluster-level lines (``ok|WARNING|FAILED <check>: ...``)."""
    words = {"ok": "ok", "WARNING": "warning", "FAILED": "failed"}
    out, columns = {}, []
    for raw in stdout.splitlines():
        tokens = raw.strip().removeprefix("- ").strip("'\"").split()
        if not tokens:
            continue
        if tokens[0] == "NODE":
            columns = [c.lower() for c in tokens[1:]]
        elif columns and len(tokens) == len(columns) + 1 and all(w in words or w == "-" for w in tokens[1:]):
            out.update({(c, tokens[0]): words[w] for c, w in zip(columns, tokens[1:], strict=True) if w != "-"})
        elif tokens[0] in words and len(tokens) > 1 and tokens[1].endswith(":"):
            out[(tokens[1][:-1], "")] = words[tokens[0]]
    return out


def test_the_printed_report_json_junit_and_metrics_agree_on_every_check(sandbox, tmp_path):
    """On a run with a warning (Pod Security of namespace default), every check has one status,
    ok, warning or failed, in all four outputs."""
    run, report, junit, metrics = audit(tmp_path)
    assert run.returncode == 0, run.stdout[-4000:]
    results = report["clusters"]["sandbox"]["results"]
    from_json = {(r["check"], r["node"]): r["status"] for r in results}
    assert from_json[("pod-security", "")] == "warning"
    assert all(r["status"] == ("failed" if not r["ok"] else "warning" if r["warning"] else "ok") for r in results)
    assert printed_statuses(run.stdout) == from_json, run.stdout[-4000:]
    suite = xmlschema.XMLSchema(str(SCHEMA)).to_dict(junit)["testsuite"][0]
    from_junit = {}
    for case in suite["testcase"]:
        check, node = case["@classname"].rsplit(".", 1)[1], "" if case["@name"] == "cluster" else case["@name"]
        warned = f"WARNING {check} {case['@name']}: " in (suite.get("system-out") or "")
        from_junit[(check, node)] = "failed" if "failure" in case else "warning" if warned else "ok"
    assert from_junit == from_json
    families = {f.name: f for f in text_string_to_metric_families(metrics)}
    ok = {(s.labels["check"], s.labels["node"]): s.value for s in families["bcd_audit_check_ok"].samples}
    warning = {(s.labels["check"], s.labels["node"]): s.value for s in families["bcd_audit_check_warning"].samples}
    assert {k: "failed" if v == 0 else "warning" if warning[k] == 1 else "ok" for k, v in ok.items()} == from_json


@contextlib.contextmanager
def hand_edited_image(sandbox, digest: str):
    """The DaemonSet's bcd image edited by hand to ``digest`` (field manager kubectl-edit), with
    updateStrategy OnDelete so no pod moves while the edit is there; yields (edited, image) and
    puts the image and the rolling update back afterwards."""
    with sandbox.api_client() as api:
        ds = k8s.AppsV1Api(api).read_namespaced_daemon_set("bcd", NS)
    image = next(c.image for c in ds.spec.template.spec.containers if c.name == "bcd")
    edited = image.split("@sha256:")[0] + "@sha256:" + digest
    patch = {"spec": {"updateStrategy": {"type": "OnDelete", "rollingUpdate": None},
                      "template": {"spec": {"containers": [{"name": "bcd", "image": edited}]}}}}
    undo = {"spec": {"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
                     "template": {"spec": {"containers": [{"name": "bcd", "image": image}]}}}}
    sandbox.kubectl("-n", NS, "patch", "daemonset", "bcd", "--field-manager=kubectl-edit", "-p", json.dumps(patch))
    try:
        yield edited, image
    finally:
        sandbox.kubectl("-n", NS, "patch", "daemonset", "bcd", "--field-manager=kubectl-edit", "-p", json.dumps(undo))


def test_drift_names_only_what_the_render_sets(sandbox, tmp_path):
    """A hand edit of the image moves the DaemonSet's template generation (the server's
    deprecated.daemonset.template.generation annotation and metadata.generation): the drift names
    the image and the update strategy, never what the API server or a controller sets."""
    with hand_edited_image(sandbox, "1" * 64):
        run, report, _, _ = audit(tmp_path, "-e", "bcd_audit_report_only=true")
    assert run.returncode == 0, run.stdout[-3000:]  # bcd_audit_report_only: the outputs are the alert
    assert failed(report) == {("drift-daemonset", "")}, failed(report)
    first = message(report, "drift-daemonset").splitlines()[0]
    fields = first.split(" differs from the render in ", 1)[1].split(", ")
    assert fields == ["spec.template.spec.containers[bcd].image", "spec.updateStrategy.rollingUpdate.maxSurge",
                      "spec.updateStrategy.rollingUpdate.maxUnavailable", "spec.updateStrategy.type"], first


def test_refuses_variables_that_would_change_something(tmp_path):
    out = tmp_path / "render.json"
    run = run_playbook("audit.yml", "-e", f"bcd_render_out={out}")
    assert run.returncode != 0
    assert "INVALID_CONFIG: bcd_render_out: audit.yml changes nothing" in run.stdout, run.stdout[-3000:]
    assert not out.exists()


@pytest.mark.long  # one audit run per fault: make test-long
def test_a_hand_edit_to_the_daemonset(sandbox, tmp_path):
    with hand_edited_image(sandbox, OTHER_DIGEST) as (edited, image):
        run, report, _, metrics = audit(tmp_path)
    assert run.returncode != 0
    assert failed(report) == {("drift-daemonset", "")}, failed(report)
    text = message(report, "drift-daemonset")
    assert f"image: {edited} runs, the render has {image} (container bcd)" in text.splitlines(), text
    assert "kubectl-edit" in text and "updateStrategy" in text
    assert "drift-daemonset" in run.stdout
    zero = [s for f in text_string_to_metric_families(metrics) if f.name == "bcd_audit_check_ok" for s in f.samples if s.value == 0]
    assert [s.labels["check"] for s in zero] == ["drift-daemonset"]


@pytest.mark.long  # one audit run per fault: make test-long
def test_the_clusterpolicy_set_back_by_another_field_manager(sandbox, tmp_path):
    group, version, plural, name = "nvidia.com", "v1", "clusterpolicies", "cluster-policy"
    with sandbox.api_client() as api:
        before = k8s.CustomObjectsApi(api).get_cluster_custom_object(group, version, plural, name)["spec"]["toolkit"]["env"]
    reverted = [e for e in before if e["name"] != "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED"]
    sandbox.kubectl("patch", "clusterpolicy", name, "--type=merge", "--field-manager=helm",
                    "-p", json.dumps({"spec": {"toolkit": {"env": reverted}}}))
    try:
        run, report, junit, _ = audit(tmp_path)
    finally:
        sandbox.kubectl("patch", "clusterpolicy", name, "--type=merge", "--field-manager=helm",
                        "-p", json.dumps({"spec": {"toolkit": {"env": before}}}))
    assert run.returncode != 0
    assert failed(report) == {("clusterpolicy", "")}, failed(report)
    text = message(report, "clusterpolicy")
    assert "spec.toolkit.env reverted (set by field manager helm)" in text
    xmlschema.XMLSchema(str(SCHEMA)).validate(junit)
    assert 'type="clusterpolicy"' in junit


@pytest.mark.long  # one audit run per fault: make test-long
def test_a_join_secret_left_behind(sandbox, tmp_path):
    with sandbox.api_client() as api:
        core = k8s.CoreV1Api(api)
        core.create_namespaced_secret(NS, {"metadata": {"name": "bcd-join", "labels": {"app.kubernetes.io/managed-by": "bcd-ansible"},
                                                        "annotations": {"bcd.dev/join-token-id": "jt_left"}},
                                           "stringData": {"token": "not-a-token"}})
        try:
            run, report, _, _ = audit(tmp_path)
        finally:
            core.delete_namespaced_secret("bcd-join", NS)
    assert run.returncode != 0
    assert failed(report) == {("join-secret", "")}, failed(report)
    assert "bcd-system/bcd-join left behind (token jt_left)" in message(report, "join-secret")
    assert "not-a-token" not in run.stdout + json.dumps(report)


@pytest.mark.long  # one audit run per fault: make test-long
def test_an_unrevoked_token(tmp_path, cp, cpvars):
    tenant, pool = cpvars["bcd_tenant"], cpvars["bcd_pool"]
    tok = cp.create_token(tenant, pool, 1, 3600, f"audit-test-{time.time()}", "bcd-ansible cluster=sandbox run=killed-run playbook=adopt-cluster")
    try:
        run, report, _, _ = audit(tmp_path)
    finally:
        cp.revoke_token(tenant, tok["id"])
    assert run.returncode != 0
    assert failed(report) == {("join-tokens", "")}, failed(report)
    assert f"{tok['id']} (run killed-run" in message(report, "join-tokens")
    assert tok["token"] not in run.stdout + json.dumps(report)


def wait_state(cp, cpvars, host: str, states: tuple[str, ...], timeout: float = 90) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        node = next((n for n in cp.list_nodes(cpvars["bcd_tenant"], cpvars["bcd_pool"]) if n["hostname"] == host), None)
        if node and node["state"] in states:
            return node
        assert time.monotonic() < deadline, f"{host} is {node and node['state']}, not {states}"
        time.sleep(2)


@pytest.mark.long  # one audit run per fault: make test-long
def test_a_node_that_stops_reporting(sandbox, tmp_path, admin, cp, cpvars):
    node = sandbox.gpu_node_names()[0]
    admin.patch_faults({"refuseJoin": {node: "host under maintenance"}})
    try:
        with sandbox.api_client() as api:
            core = k8s.CoreV1Api(api)
            for pod in core.list_namespaced_pod(NS, field_selector=f"spec.nodeName={node}").items:
                core.delete_namespaced_pod(pod.metadata.name, NS)
        wait_state(cp, cpvars, node, ("offline",))
        run, report, _, _ = audit(tmp_path)
        # Report only: the same failure, exit 0.
        quiet_dir = tmp_path / "quiet"
        quiet_dir.mkdir()
        quiet, quiet_report, _, _ = audit(quiet_dir, "-e", "bcd_audit_report_only=true")
    finally:
        admin.patch_faults({"refuseJoin": None})
        wait_state(cp, cpvars, node, ("adopting", "ready"))
    assert run.returncode != 0
    # both sides: the control plane's (offline) and the cluster's (its pod's join refused)
    assert failed(report) == {("reporting", node), ("pod", node)}, failed(report)
    assert "bcd join exited 1: Refused: host under maintenance" in message(report, "pod", node)
    text = message(report, "reporting", node)
    assert "offline" in text and "Reporting=False (NoReadyPod" in text and "JoinRefused=True (Refused: host under maintenance)" in text
    assert f"reporting {node} failed" in run.stdout
    assert quiet.returncode == 0, quiet.stdout[-3000:]
    assert failed(quiet_report) == {("reporting", node), ("pod", node)}

"""The fleet summary's filters (plugins/filter/bcd_fleet.py) on the facts each playbook sets."""

from __future__ import annotations

import os

import pytest
from ansible_collections.bcd.kubernetes.plugins.filter.bcd_fleet import (
    bcd_fleet_lines,
    bcd_fleet_records,
    bcd_fleet_reports,
    bcd_fleet_shares_report,
    bcd_kube_source,
)

ISO = {"cluster": "x", "nodes": [{"name": "gpu-node-1", "verdict": "isolated"}]}
# role gpu_stack registers its verdict (verify.yml): the report inside, as the module returns it
VERDICT = {"changed": False, "passed": True, "nodes": [{"name": "gpu-node-1", "verdict": "isolated"}], "report": ISO}


def adopted(name: str, **more) -> dict:
    return {"adopt_cluster": name, "bcd_report_out": "fleet.json",
            "bcd_daemonset_render": {"config": {"bcd_report_out": "/abs/fleet.json"}},
            "join_token_minted": {"id": "jt_1", "max_uses": 2}, "bcd_daemonset_missing": ["a", "b"],
            "join_token_revoked": {"revoked": ["jt_1"], "uses": {"jt_1": 2}}, "join_token_stale": {"revoked": []},
            "bcd_daemonset_joined": {"nodes": [{}, {}], "selected": 2, "reporting": 2},
            "gpu_stack_verify_folder": {"skipped": True}, "gpu_stack_verify_cluster": VERDICT, **more}


def test_adoption_counts_nodes_and_tokens_and_names_the_failure():
    hv = {"east": adopted("east"),
          "west": adopted("west", join_token_stale={"revoked": ["jt_0"]}, bcd_daemonset_joined={},
                          bcd_daemonset_report={"selected": 2, "reporting": 0},
                          fleet_failure={"task": "Wait for every selected node", "msg": "gpu-node-2 did not report"}),
          "idle": {"inventory_hostname": "idle"}}
    recs = bcd_fleet_records(hv, ["east", "west", "idle"], "adopt-cluster")
    assert [r["cluster"] for r in recs] == ["east", "west"], "a host whose play never ran is not a cluster of the run"
    east, west = recs
    assert east["result"] == "ok" and east["tokens"] == {"minted": 1, "revoked": 1}
    assert east["nodes"] == {"selected": 2, "reporting": 2, "joined": 2} and east["report"] == ISO
    assert west["result"] == "failed" and west["failure"] == "Wait for every selected node: gpu-node-2 did not report"
    assert west["tokens"] == {"minted": 1, "revoked": 2} and west["nodes"]["reporting"] == 0

    lines = bcd_fleet_lines(recs)
    assert lines[1].split() == ["east", "ok", "1/1", "2", "of", "2", "selected", "node(s)", "report,", "2", "joined", "by",
                                "this", "run"]
    assert "west" in lines[2] and "FAILED at Wait for every selected node: gpu-node-2 did not report" in lines[2]
    assert lines[-1] == "2 cluster(s): 1 failed (west)"

    (report,) = bcd_fleet_reports(recs, "2026-01-01T00:00:00Z")
    assert report["path"] == "/abs/fleet.json"
    doc = report["document"]
    assert doc["playbook"] == "adopt-cluster" and doc["passed"] is False and doc["failed"] == ["west"]
    assert doc["schema_version"] == 1  # docs/reports.md
    assert [c["cluster"] for c in doc["clusters"]] == ["east", "west"] and doc["summary"] == lines


def test_rollout_records_what_rolled_and_what_rolled_back():
    ok = {"result": "succeeded", "headline": "rolled a -> b on 2 node(s)", "failed_nodes": [],
          "nodes": [{"name": "n1", "outcome": "rolled, healthy after 5s"}, {"name": "n2", "outcome": "rolled"}]}
    back = {"result": "rolled_back", "headline": "rollout a -> c FAILED and was rolled back",
            "failed_nodes": [{"node": "n1", "why": "not Ready"}],
            "nodes": [{"name": "n1", "outcome": "FAILED: not Ready"}, {"name": "n2", "outcome": "not rolled"}]}
    hv = {"a": {"rollout_cluster": "a", "bcd_daemonset_fleet_report": ok},
          "b": {"rollout_cluster": "b", "bcd_daemonset_fleet_report": back, "fleet_failure": {"task": "Fail the run", "msg": "x"}}}
    a, b = bcd_fleet_records(hv, ["a", "b"], "rollout")
    assert a["nodes"] == {"selected": 2, "rolled": 2, "failed": []} and a["detail"].startswith("succeeded: rolled")
    assert b["nodes"] == {"selected": 2, "rolled": 0, "failed": ["n1"]} and b["result"] == "failed"
    assert b["report"] == back and b["tokens"] == {"minted": 0, "revoked": 0}


@pytest.mark.parametrize(("playbook", "facts", "detail"), [
    ("doctor", {"gpu_stack_verify_cluster": {"skipped": True},
                "gpu_stack_verify_folder": {"passed": False, "nodes": [{"verdict": "isolated"}, {"verdict": "exposed"}]}},
     "1 of 2 node(s) isolated"),
    ("gpu-stack", {"gpu_stack_verify_folder": {"skipped": True},
                   "gpu_stack_verify_cluster": {"passed": True, "nodes": [{"verdict": "isolated"}]}}, "1 of 1 node(s) isolated"),
    # the verdict task failed: no verdict to count
    ("doctor", {"gpu_stack_verify_cluster": {"failed": True, "msg": "x"}}, None),
    ("audit", {"audit_cluster": "c", "audit_result": {"results": [{"ok": True}, {"ok": False}]}}, "1 of 2 check(s) failed"),
    ("release-cluster", {"release_cluster_name": "c", "release_cluster_nodes": {"removed": [{}], "already_removed": []}},
     "1 node(s) removed from the control plane"),
    ("render", {"bcd_daemonset_render": {"dest": "/out/c.json", "config": {}}}, "rendered to /out/c.json"),
])
def test_every_playbook_has_its_line(playbook, facts, detail):
    (rec,) = bcd_fleet_records({"c": facts}, ["c"], playbook)
    assert rec["cluster"] == "c" and rec["detail"] == detail


def test_a_failed_render_is_not_said_to_have_rendered():
    facts = {"bcd_daemonset_render": {"dest": "/out/c.json"}, "fleet_failure": {"task": "Render", "msg": "INVALID_CONFIG: x"}}
    (rec,) = bcd_fleet_records({"c": facts}, ["c"], "render")
    assert rec["detail"] is None and rec["failure"] == "Render: INVALID_CONFIG: x"
    assert "rendered" not in bcd_fleet_lines([rec])[1]


def test_an_audit_that_could_not_run_is_a_failure_and_writes_no_second_report():
    hv = {h: {"audit_cluster": h, "bcd_report_out": "a.json", "audit_error": {"message": "no API server"}} for h in "xy"}
    recs = bcd_fleet_records(hv, ["x", "y"], "audit")
    assert [r["failure"] for r in recs] == ["the audit could not run: no API server"] * 2
    assert bcd_fleet_reports(recs) == [], "audit.yml writes every cluster into bcd_report_out itself"


def test_release_counts_the_tokens_it_revoked():
    (rec,) = bcd_fleet_records({"c": {"release_cluster_name": "c", "join_token_stale": {"revoked": ["t1", "t2"]}}},
                               ["c"], "release-cluster")
    assert rec["tokens"] == {"minted": 0, "revoked": 2}


def test_one_report_per_shared_path_and_none_for_a_cluster_of_its_own():
    hv = {"a": adopted("a"), "b": adopted("b"),
          "c": adopted("c", bcd_report_out="c.json", bcd_daemonset_render={"config": {"bcd_report_out": "/abs/c.json"}})}
    reports = bcd_fleet_reports(bcd_fleet_records(hv, ["a", "b", "c"], "adopt-cluster"))
    assert [(r["path"], [c["cluster"] for c in r["document"]["clusters"]]) for r in reports] == [("/abs/fleet.json", ["a", "b"])]
    assert bcd_fleet_shares_report(hv, ["a", "b", "c"], "a") is True
    assert bcd_fleet_shares_report(hv, ["a", "b", "c"], "c") is False
    assert bcd_fleet_shares_report({"a": {}, "b": {}}, ["a", "b"], "a") is False


def test_a_relative_path_is_the_same_file_as_its_absolute_form():
    hv = {"a": {"bcd_report_out": "r.json"}, "b": {"bcd_report_out": os.path.abspath("r.json")}}
    assert bcd_fleet_shares_report(hv, ["a", "b"], "a")


def test_an_unknown_playbook_is_refused():
    with pytest.raises(ValueError, match="unknown playbook 'deploy'"):
        bcd_fleet_records({}, [], "deploy")


def test_the_connection_is_the_render_s_else_the_inputs_with_their_defaults():
    hv = {"a": {"bcd_daemonset_render": {"cluster": "kubeconfig /k, context c, server https://x"}},
          "b": {"bcd_kubeconfig": "/etc/bcd/kube", "bcd_kube_context": "east"},
          "c": {}}
    assert bcd_kube_source(hv, "a") == "kubeconfig /k, context c, server https://x"
    assert bcd_kube_source(hv, "b") == "kubeconfig /etc/bcd/kube, context east"
    assert bcd_kube_source(hv, "c") == ("kubeconfig from K8S_AUTH_KUBECONFIG, KUBECONFIG or ~/.kube/config, "
                                      "context from K8S_AUTH_CONTEXT or its current context")


def test_a_cluster_a_failed_wave_stopped_is_not_started_not_failed():
    hv = {"west": {"rollout_run": "r1", "fleet_failure": {"task": "Wait for the gate", "msg": "gpu-node-1 crashed"}},
          "east": {"rollout_run": "r2", "fleet_failure": {
              "task": "Stop when a cluster of an earlier wave failed (already rolled clusters stay rolled)",
              "msg": "not started: cluster(s) west of an earlier wave failed (bcd_rollout_cluster_waves); rolled in "
                     "earlier waves: none"}}}
    recs = bcd_fleet_records(hv, ["west", "east"], "rollout")
    assert [r["result"] for r in recs] == ["failed", "not started"]
    lines = bcd_fleet_lines(recs)
    assert lines[-1] == "2 cluster(s): 1 failed (west), 1 not started (east)"
    assert " ".join(lines[2].split()).startswith("east not started 0/0 not started: cluster(s) west of an earlier wave")


def test_joined_by_this_run_is_the_control_plane_s_count_of_the_token_s_uses():
    # gpu-node-2 was known to the control plane (offline): it rejoins without spending a use
    hv = {"east": adopted("east", join_token_minted={"id": "jt_1", "max_uses": 1}, bcd_daemonset_missing=["n1", "n2"],
                          bcd_daemonset_to_join=["n1"], join_token_revoked={"revoked": ["jt_1"], "uses": {"jt_1": 1}},
                          bcd_daemonset_joined={"selected": 2, "reporting": 2, "nodes": [
                              {"name": "n1", "reporting": True}, {"name": "n2", "reporting": True}]})}
    [rec] = bcd_fleet_records(hv, ["east"], "adopt-cluster")
    assert rec["nodes"]["joined"] == 1
    assert rec["detail"] == "2 of 2 selected node(s) report, 1 joined by this run"


def test_a_refused_join_is_not_counted_though_its_node_was_to_join():
    # west's only new node was refused: the token records no use, whatever the node list says
    hv = {"west": adopted("west", join_token_minted={"id": "jt_1", "max_uses": 1}, bcd_daemonset_to_join=["n3"],
                          join_token_revoked={"revoked": ["jt_1"], "uses": {"jt_1": 0}},
                          bcd_daemonset_joined={"selected": 1, "reporting": 1,
                                                "nodes": [{"name": "n3", "reporting": True}]})}
    [rec] = bcd_fleet_records(hv, ["west"], "adopt-cluster")
    assert rec["nodes"]["joined"] == 0
    assert rec["detail"] == "1 of 1 selected node(s) report, 0 joined by this run"


@pytest.mark.parametrize("revoked", [{}, {"revoked": []}, {"revoked": ["jt_1"], "uses": {"jt_1": None}}])
def test_an_unread_token_record_makes_the_count_unknown_not_a_guess(revoked):
    hv = {"east": adopted("east", join_token_revoked=revoked)}
    [rec] = bcd_fleet_records(hv, ["east"], "adopt-cluster")
    assert rec["nodes"]["joined"] is None
    assert rec["detail"] == ("2 of 2 selected node(s) report, how many joined by this run is unknown (its token's "
                             "record could not be read)")


@pytest.mark.parametrize(("playbook", "facts"), [
    ("release-cluster", {"release_cluster_name": "c", "join_token_stale": {"revoked": []}}),
    ("render", {"bcd_daemonset_render": {"config": {"bcd_report_out": "/abs/r.json"}}}),
])
def test_release_and_render_write_the_fleet_report_for_one_cluster_too(playbook, facts):
    """They have no report of their own: bcd_report_out gets the fleet report (docs/reports.md)."""
    recs = bcd_fleet_records({"c": {"bcd_report_out": "/abs/r.json", **facts}}, ["c"], playbook)
    (report,) = bcd_fleet_reports(recs, "2026-01-01T00:00:00Z")
    assert report["path"] == "/abs/r.json"
    assert report["document"]["playbook"] == playbook and report["document"]["passed"] is True
    assert [c["host"] for c in report["document"]["clusters"]] == ["c"]


def test_a_playbook_with_a_report_of_its_own_writes_no_fleet_report_for_one_cluster():
    recs = bcd_fleet_records({"east": adopted("east")}, ["east"], "adopt-cluster")
    assert bcd_fleet_reports(recs) == [], "the cluster's own report is written there"

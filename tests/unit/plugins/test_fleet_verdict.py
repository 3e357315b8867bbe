"""The run's verdict (filter bcd_fleet_verdict, plugins/filter/bcd_fleet.py): one line, derived from
the records the fleet summary counts, naming the next command when anything is left or failed."""

from __future__ import annotations

import pytest
from ansible_collections.bcd.kubernetes.plugins.filter.bcd_fleet import bcd_fleet_records, bcd_fleet_verdict

DIGEST = "registry.example.com/better-compute/bcd:0.7.0@sha256:" + "0123456789ab" + "c" * 52


def adopted(name: str, reporting: int = 3, selected: int = 3, **more) -> dict:
    return {"adopt_cluster": name, "join_token_minted": {"id": "jt_1"}, "bcd_daemonset_to_join": ["n1", "n2", "n3"],
            "join_token_revoked": {"revoked": ["jt_1"], "uses": {"jt_1": 3}},
            "bcd_daemonset_joined": {"selected": selected, "reporting": reporting,
                                     "nodes": [{"name": f"n{i + 1}", "reporting": i < reporting} for i in range(selected)]},
            **more}


def verdict(hv: dict, playbook: str, check_mode: bool = False) -> str:
    return bcd_fleet_verdict(bcd_fleet_records(hv, list(hv), playbook), playbook, check_mode)


def test_a_first_adoption_says_adopted_and_how_many_nodes_report():
    assert verdict({"sandbox": adopted("sandbox")}, "adopt-cluster") == (
        "adopt-cluster: cluster sandbox adopted: 3 of 3 selected nodes report to the control plane, "
        "3 joined by this run")


def test_an_adoption_with_nothing_to_do_joins_none():
    hv = {"sandbox": {"adopt_cluster": "sandbox", "bcd_daemonset_report": {"selected": 2, "reporting": 2}}}
    assert verdict(hv, "adopt-cluster") == (
        "adopt-cluster: cluster sandbox adopted: 2 of 2 selected nodes report to the control plane")


def test_nodes_left_to_join_name_add_nodes():
    hv = {"sandbox": {"adopt_cluster": "sandbox", "bcd_daemonset_report": {"selected": 3, "reporting": 2}}}
    assert verdict(hv, "adopt-cluster").endswith(
        "2 of 3 selected nodes report to the control plane; next: ansible-playbook add-nodes.yml")


def test_a_failed_adoption_says_not_adopted_and_what_to_fix():
    hv = {"sandbox": adopted("sandbox", reporting=2, fleet_failure={
        "task": "Wait for every selected node", "msg": "gpu-node-3: join refused (maintenance)"})}
    assert verdict(hv, "adopt-cluster") == (
        "adopt-cluster: cluster sandbox NOT adopted; 2 of 3 selected nodes report to the control plane, 3 joined by "
        "this run; next: fix gpu-node-3: join refused (maintenance), then ansible-playbook adopt-cluster.yml again")


def test_a_long_reason_is_cut_at_a_word():
    hv = {"c": {"adopt_cluster": "c", "fleet_failure": {"task": "t", "msg": "word " * 100}}}
    line = verdict(hv, "adopt-cluster")
    reason = line.split("next: fix ", 1)[1].split(", then ", 1)[0]
    assert reason.endswith("word ...") and len(reason) <= 165, reason


def test_a_failed_rollout_names_the_node_and_why_and_runs_rollout_again():
    back = {"result": "rolled_back", "headline": "rollout a -> b FAILED and was rolled back: ...",
            "from": {"image": DIGEST.replace("0.7.0", "0.6.0").replace("0123456789ab", "fedcba987654")},
            "to": {"image": DIGEST, "digest": DIGEST.rsplit("@", 1)[1]},
            "failed_nodes": [{"node": "gpu-node-1", "why": "pod bcd-x is CrashLoopBackOff"}],
            "nodes": [{"name": "gpu-node-1", "outcome": "FAILED"}]}
    hv = {"sandbox": {"rollout_cluster": "sandbox", "bcd_daemonset_fleet_report": back,
                      "fleet_failure": {"task": "Fail the run", "msg": "rollout on sandbox did not complete; the reason is above"}}}
    assert verdict(hv, "rollout") == (
        "rollout: cluster sandbox rollout to bcd:0.7.0@sha256:0123456789ab FAILED and was rolled back: every node on "
        "bcd:0.6.0@sha256:fedcba987654; next: find out why the new image failed (gpu-node-1: pod bcd-x is "
        "CrashLoopBackOff: the image, or those nodes), then ansible-playbook rollout.yml again")


def test_a_reason_names_images_short_so_the_cut_keeps_what_it_says():
    running, wanted = DIGEST.replace("0.7.0", "0.8.0"), DIGEST
    msg = (f"DaemonSet bcd-system/bcd runs {running}, but bcd_image in the inventory is {wanted}. adopt-cluster.yml "
           "never changes the image of a running DaemonSet")
    hv = {"c": {"adopt_cluster": "c", "fleet_failure": {"task": "Read the live DaemonSet", "msg": msg}}}
    line = verdict(hv, "adopt-cluster")
    assert ("next: fix DaemonSet bcd-system/bcd runs bcd:0.8.0@sha256:0123456789ab, but bcd_image in the inventory is "
            "bcd:0.7.0@sha256:0123456789ab") in line, line
    assert "c" * 52 not in line


@pytest.mark.parametrize("result", ["rollback_failed", "failed"])
def test_a_rollout_left_incomplete_says_to_run_again_forced(result):
    # some nodes took the new pod and were not rolled back: the next rollout refuses an incomplete
    # one unless forced, so the verdict's command says so
    left = {"result": result, "headline": "rollout a -> b FAILED; rollback incomplete: ...",
            "to": {"image": DIGEST, "digest": DIGEST.rsplit("@", 1)[1]},
            "stages": [{"name": "canary", "nodes": ["gpu-node-1"], "outcome": "failed"}],
            "failed_nodes": [{"node": "gpu-node-1", "why": "cannot check: the Kubernetes API is unreachable"}],
            "nodes": [{"name": "gpu-node-1", "outcome": "FAILED"}]}
    hv = {"sandbox": {"rollout_cluster": "sandbox", "bcd_daemonset_fleet_report": left,
                      "fleet_failure": {"task": "Fail the run", "msg": "rollout on sandbox did not complete; the reason is above"}}}
    assert verdict(hv, "rollout").endswith(
        "; next: fix gpu-node-1: cannot check: the Kubernetes API is unreachable, then ansible-playbook rollout.yml again "
        "with -e bcd_rollout_force=true (a rollout left incomplete is refused without it)")
    left["stages"] = [{"name": "canary", "nodes": [], "outcome": "failed"}]
    assert verdict(hv, "rollout").endswith("then ansible-playbook rollout.yml again")


def test_a_rollout_names_the_digest_short():
    ok = {"result": "succeeded", "to": {"image": DIGEST}, "failed_nodes": [],
          "nodes": [{"name": "n1", "outcome": "rolled"}, {"name": "n2", "outcome": "rolled"}]}
    line = verdict({"c": {"rollout_cluster": "c", "bcd_daemonset_fleet_report": ok}}, "rollout")
    assert line == "rollout: cluster c rolled to bcd:0.7.0@sha256:0123456789ab: 2 of 2 selected node(s) rolled"
    assert "c" * 52 not in line


def test_a_locked_rollout_says_to_wait_for_the_holder():
    locked = {"result": "locked", "headline": "rollout not started: locked by run r9", "holder": "run r9",
              "failed_nodes": [], "nodes": []}
    hv = {"c": {"rollout_cluster": "c", "bcd_daemonset_fleet_report": locked,
                "fleet_failure": {"task": "Fail the run", "msg": "rollout on c did not complete; the reason is above"}}}
    assert verdict(hv, "rollout").endswith(
        "next: wait for the run that holds the cluster's lock (run r9) to finish, then ansible-playbook rollout.yml again")


def test_check_mode_says_nothing_changed_and_to_run_without_check():
    hv = {"c": {"adopt_cluster": "c", "bcd_daemonset_report": {"selected": 2, "reporting": 0}}}
    assert verdict(hv, "adopt-cluster", check_mode=True) == (
        "adopt-cluster --check: cluster c: nothing changed; next: ansible-playbook adopt-cluster.yml without --check")


def test_gpu_stack_under_check_counts_the_cluster_it_checked():
    """Under --check the gate does not run: the cluster still ran (its settings were read)."""
    hv = {"c": {"gpu_stack_settings": {"changed": False, "kube": {"kubeconfig": "k", "context": "x"}}}, "idle": {}}
    assert verdict(hv, "gpu-stack", check_mode=True) == (
        "gpu-stack --check: cluster c: nothing changed; next: ansible-playbook gpu-stack.yml without --check")


def test_check_mode_of_a_rollout_counts_its_plan():
    plan = {"result": "planned", "headline": "rollout a -> b: ...", "to_roll": ["n1", "n2"], "staying": ["n3"],
            "stages": [{"name": "canary"}, {"name": "batch 1"}], "failed_nodes": [], "nodes": []}
    hv = {"c": {"rollout_cluster": "c", "bcd_daemonset_fleet_report": plan}}
    assert verdict(hv, "rollout", check_mode=True) == (
        "rollout --check: cluster c: nothing changed; 2 of 3 selected node(s) would roll in 2 stage(s); "
        "next: ansible-playbook rollout.yml without --check")


@pytest.mark.parametrize(("playbook", "facts", "line"), [
    ("doctor", {"gpu_stack_verify_cluster": {"passed": True, "nodes": [{"verdict": "isolated"}] * 2}},
     "doctor: cluster c: 2 of 2 selected nodes isolated"),
    ("gpu-stack", {"gpu_stack_verify_cluster": {"passed": False, "nodes": [{"verdict": "isolated"}, {"verdict": "exposed"}]}},
     "gpu-stack: cluster c: 1 of 2 selected nodes isolated; next: fix the findings the table above names "
     "(ansible-playbook gpu-stack.yml applies the settings), then ansible-playbook doctor.yml"),
    ("doctor", {"gpu_stack_verify_cluster": {"passed": False, "nodes": [{"verdict": "exposed"}]},
                "fleet_failure": {"task": "Stop on any node that is not isolated", "msg": "GPU isolation: n1 is exposed"}},
     "doctor: cluster c FAILED; 0 of 1 selected nodes isolated; next: ansible-playbook gpu-stack.yml (it configures GPU isolation), then "
     "ansible-playbook doctor.yml again"),
    ("audit", {"audit_cluster": "c", "audit_result": {"results": [{"ok": True}] * 5}}, "audit: cluster c: all 5 checks passed"),
    ("audit", {"audit_cluster": "c", "audit_result": {"results": [{"ok": True}, {"ok": False}]}},
     "audit: cluster c: 1 of 2 checks FAILED; next: fix what the table above names, then ansible-playbook audit.yml again"),
    ("audit", {"audit_cluster": "c", "audit_error": {"message": "no API server"}},
     "audit: cluster c: the audit could not run: no API server; next: fix no API server, then ansible-playbook audit.yml again"),
    ("release-cluster", {"release_cluster_name": "c", "release_cluster_nodes": {"removed": [{}, {}]}},
     "release-cluster: cluster c released: 2 node(s) removed from the control plane"),
    # a second release removes none: the verdict says why
    ("release-cluster", {"release_cluster_name": "c", "release_cluster_nodes": {"removed": [], "already_removed": [{}] * 3}},
     "release-cluster: cluster c released: 0 node(s) removed from the control plane (3 already removed)"),
    ("render", {"bcd_daemonset_render": {"dest": "/out/c.json", "config": {}}}, "render: cluster c rendered to /out/c.json"),
    ("add-nodes", adopted("c", reporting=3) | {"bcd_daemonset_to_join": ["n3"],
                                                "join_token_revoked": {"revoked": ["jt_1"], "uses": {"jt_1": 1}}},
     "add-nodes: cluster c: 1 node(s) joined by this run: 3 of 3 selected nodes report to the control plane"),
])
def test_every_playbook_has_its_verdict(playbook, facts, line):
    assert verdict({"c": facts}, playbook) == line


def test_several_clusters_one_line_naming_the_failed_and_the_command_for_them():
    hv = {"east": adopted("east"),
          "west": adopted("west", reporting=0, fleet_failure={"task": "Preflight", "msg": "control plane unreachable"}),
          "north": adopted("north")}
    assert verdict(hv, "adopt-cluster") == (
        "adopt-cluster: 2 of 3 clusters adopted: 6 of 6 selected nodes report to the control plane; FAILED: west; "
        "next: fix what failed on west (control plane unreachable), then ansible-playbook adopt-cluster.yml -l west again")


def test_a_verdict_is_never_success_for_a_failed_cluster():
    hv = {"c": adopted("c", fleet_failure={"task": "t", "msg": "m"})}
    for playbook in ("adopt-cluster", "add-nodes", "release-cluster", "render", "gpu-stack"):
        line = verdict(hv | {"c": hv["c"] | {"release_cluster_name": "c"}}, playbook)
        assert "next: fix m, then" in line and (" NOT " in line or " FAILED" in line), line


def test_no_cluster_ran():
    assert bcd_fleet_verdict([], "audit") == "audit: no cluster ran (check the inventory's group clusters and --limit)"


def test_a_render_under_check_writes_nothing_and_does_not_say_rendered():
    hv = {"c": {"bcd_daemonset_render": {"dest": "/out/c.json", "config": {}}}}
    assert verdict(hv, "render", check_mode=True) == (
        "render --check: cluster c: nothing changed; next: ansible-playbook render.yml without --check")
    # read-only playbooks judge the same under --check
    iso = {"c": {"gpu_stack_verify_cluster": {"passed": True, "nodes": [{"verdict": "isolated"}]}}}
    assert verdict(iso, "doctor", check_mode=True) == "doctor --check: cluster c: 1 of 1 selected nodes isolated"


def test_several_clusters_audited_count_the_failed_checks_and_name_where():
    hv = {"east": {"audit_cluster": "east", "audit_result": {"results": [{"ok": True}, {"ok": False}]}},
          "west": {"audit_cluster": "west", "audit_result": {"results": [{"ok": True}] * 3}}}
    assert verdict(hv, "audit") == (
        "audit: 2 of 2 clusters audited: 1 of 5 checks FAILED; next: on east: fix what the table above names, "
        "then ansible-playbook audit.yml again")


def test_an_audit_verdict_counts_extra_host_paths_first():
    hv = {"c": {"audit_cluster": "c", "audit_result": {"results": [{"ok": False}, {"ok": True}],
                                                       "host_paths": ["EXTRA HOST PATH / (volume host-root ...)"]}}}
    assert verdict(hv, "audit").startswith("audit: cluster c: 1 of 2 checks FAILED, 1 EXTRA HOST PATH(S); next: ")


def test_a_rollout_that_left_nodes_behind_says_so_and_when_to_run_again():
    ok = {"result": "succeeded", "to": {"image": DIGEST}, "failed_nodes": [],
          "nodes": [{"name": "n1", "outcome": "rolled, healthy"}, {"name": "n3", "outcome": "rolled, not verified: ..."},
                    {"name": "n2", "outcome": "left behind: the Node is NotReady (...)"}],
          "left_behind": [{"node": "n2", "why": "the Node is NotReady (...)"}],
          "not_verified": [{"node": "n3", "why": "the Node went NotReady (...) during batch 1"}], "joined": ["n9"]}
    line = verdict({"c": {"rollout_cluster": "c", "bcd_daemonset_fleet_report": ok}}, "rollout")
    assert line == (
        "rollout: cluster c rolled to bcd:0.7.0@sha256:0123456789ab: 2 of 3 selected node(s) rolled; 1 down node(s) left "
        "behind (n2); 1 rolled but not verified (their Node went down) (n3); 1 joined during the rollout, not judged (n9); "
        "next: ansible-playbook rollout.yml with the same bcd_image once the down Nodes are back (audit.yml names each "
        "node still behind meanwhile); then ansible-playbook add-nodes.yml (a Node that joined has no join token yet)")


def test_a_rollout_whose_every_node_to_roll_is_down_does_not_say_the_template_did_not_change():
    ok = {"result": "succeeded", "to": {"image": DIGEST}, "failed_nodes": [],
          "nodes": [{"name": "n1", "outcome": "left behind: the Node is cordoned (spec.unschedulable)"}],
          "left_behind": [{"node": "n1", "why": "the Node is cordoned (spec.unschedulable)"}]}
    line = verdict({"c": {"rollout_cluster": "c", "bcd_daemonset_fleet_report": ok}}, "rollout")
    assert line.startswith("rollout: cluster c: applied on bcd:0.7.0@sha256:0123456789ab; no node rolled; "
                           "1 down node(s) left behind (n1); next: ansible-playbook rollout.yml"), line
    assert "did not change" not in line


def test_nodes_joined_by_add_nodes_unknown_when_the_token_could_not_be_read():
    facts = adopted("c") | {"bcd_daemonset_to_join": ["n3"], "join_token_revoked": {"revoked": ["jt_1"], "uses": None}}
    line = verdict({"c": facts}, "add-nodes")
    assert line.startswith("add-nodes: cluster c: an unknown number of node(s) joined by this run"), line
    assert "None" not in line
    assert "how many joined by this run is unknown" in verdict({"c": facts}, "adopt-cluster")


def test_run_from_the_installed_collection_the_next_command_names_the_playbook_by_fqcn():
    hv = {"c": adopted("c", reporting=2), "d": {"fleet_failure": {"task": "t", "msg": "boom"}, "adopt_cluster": "d"}}
    records = bcd_fleet_records(hv, list(hv), "adopt-cluster")
    installed = "/home/op/.ansible/collections/ansible_collections/bcd/kubernetes/playbooks"
    line = bcd_fleet_verdict(records, "adopt-cluster", False, installed)
    assert "ansible-playbook bcd.kubernetes.adopt_cluster -l d again" in line, line
    assert "ansible-playbook bcd.kubernetes.add_nodes -l c" in line, line
    assert ".yml" not in line, line
    # from a checkout, the playbook's file
    assert bcd_fleet_verdict(records, "adopt-cluster", False, "/src/bcd-ansible") == bcd_fleet_verdict(records, "adopt-cluster")


def test_a_refused_rollout_says_why_and_its_fix_as_the_next_step():
    headline = ("rollout refused: 2 of 3 selected node(s) are down, more than bcd_rollout_max_down 10% allows (1): "
                "gpu-node-2: the Node is NotReady (KubeletNotReady); gpu-node-3: the Node is NotReady (KubeletNotReady). "
                "Nothing was changed. Bring the down nodes back (or uncordon them), or raise bcd_rollout_max_down, or run "
                "again with bcd_rollout_force=true to roll anyway.")
    hv = {"c": {"rollout_cluster": "c", "bcd_daemonset_fleet_report": {"result": "refused", "headline": headline},
                "fleet_failure": {"task": "Fail the run", "msg": "rollout on c did not complete; the reason is above"}}}
    line = verdict(hv, "rollout")
    assert line.startswith("rollout: cluster c rollout refused, nothing changed: 2 of 3 selected node(s) are down, "
                           "more than bcd_rollout_max_down 10% allows (1): gpu-node-2, gpu-node-3; next: "), line
    assert line.endswith("; next: bring the down nodes back (or uncordon them), or raise bcd_rollout_max_down, or run "
                         "again with bcd_rollout_force=true to roll anyway, then ansible-playbook rollout.yml again"), line


def test_a_refusals_fix_is_whole_in_the_next_step():
    # the engine's own wording: the fix is longer than a reason may be
    headline = ("rollout refused: 2 of 3 selected node(s) are down, more than bcd_rollout_max_down 10% allows (1): "
                "gpu-node-2: the Node is NotReady (KubeletNotReady). Nothing was changed. Bring the down nodes back "
                "(or uncordon them), or raise bcd_rollout_max_down; fix the unhealthy nodes (or finish or undo the "
                "previous rollout), or run again with bcd_rollout_force=true to roll anyway (the gate still applies "
                "to every rolled node; down nodes are left behind).")
    hv = {"c": {"rollout_cluster": "c", "bcd_daemonset_fleet_report": {"result": "refused", "headline": headline},
                "fleet_failure": {"task": "Fail the run", "msg": "rollout on c did not complete; the reason is above"}}}
    nxt = verdict(hv, "rollout").split("; next: ", 1)[1]
    # the fix is the refusal's own, whole: a cut fix is no fix
    assert nxt == ("bring the down nodes back (or uncordon them), or raise bcd_rollout_max_down; fix the unhealthy "
                   "nodes (or finish or undo the previous rollout), or run again with bcd_rollout_force=true to roll "
                   "anyway (the gate still applies to every rolled node; down nodes are left behind), then "
                   "ansible-playbook rollout.yml again"), nxt


def test_a_reason_ending_in_a_full_stop_is_followed_by_the_verdict_without_it():
    hv = {"c": {"release_cluster_name": "c", "fleet_failure": {
        "task": "Delete the bcd objects", "msg": "the API server refused the deletion (403). Nothing was changed."}}}
    line = verdict(hv, "release-cluster")
    assert line.endswith("; next: fix the API server refused the deletion (403). Nothing was changed, then "
                         "ansible-playbook release-cluster.yml again"), line


def test_a_long_aside_from_the_start_is_closed_not_dropped():
    hv = {"c": {"adopt_cluster": "c", "fleet_failure": {"task": "t", "msg": "x (" + "word " * 60 + ")"}}}
    reason = verdict(hv, "adopt-cluster").split("next: fix ", 1)[1].split(", then ", 1)[0]
    assert reason.startswith("x (word word") and reason.endswith("word ...)"), reason


def test_a_long_reason_cut_inside_an_aside_ends_before_it():
    msg = "the API server refused " + "the object " * 12 + "(the gate still applies to every rolled node; " + "x " * 40 + ")"
    hv = {"c": {"adopt_cluster": "c", "fleet_failure": {"task": "t", "msg": msg}}}
    reason = verdict(hv, "adopt-cluster").split("next: fix ", 1)[1].split(", then ", 1)[0]
    assert reason.endswith("the object ...") and "(" not in reason, reason


def test_several_clusters_name_a_refusals_nodes_not_each_why():
    headline = ("rollout refused: 1 of 2 selected node(s) unhealthy: gpu-node-2: pod bcd-x is CrashLoopBackOff "
                "(back-off 5m0s restarting failed container). Nothing was changed. Fix the unhealthy nodes, or run "
                "again with bcd_rollout_force=true.")
    ok = {"rollout_cluster": "a", "bcd_daemonset_fleet_report": {"result": "unchanged", "to": {"image": DIGEST}}}
    hv = {"a": ok, "b": {"rollout_cluster": "b", "bcd_daemonset_fleet_report": {"result": "refused", "headline": headline},
                         "fleet_failure": {"task": "Fail the run", "msg": "rollout on b did not complete"}}}
    line = verdict(hv, "rollout")
    assert "fix what failed on b (1 of 2 selected node(s) unhealthy: gpu-node-2)" in line, line

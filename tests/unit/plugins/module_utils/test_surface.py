"""The pod surface (bcd_surface): field paths, what differs from the render, who owns it, taking
the fields over, and which Nodes a new template would leave. No cluster: the live objects are the
render with the edits a foreign field manager makes, and their managedFields as the API server
writes them; the sandbox tests (tests/integration/test_surface.py) ask the real API server."""

from __future__ import annotations

import copy

import pytest
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_audit import extra_host_paths, write_metrics
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_model import ConfigError, load
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_ownership import (
    prune,
    removed_after_takeover,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_render import render
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_surface import (
    MISSING,
    canonical_path,
    check_allowed_path,
    diff,
    failing,
    foreign,
    judge_configmap,
    judge_daemonset,
    judge_namespace,
    node_loss,
    owners,
    path_text,
    show,
    take_over,
    unfit,
)
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import TEMPLATE, base_vars

ROOT_VOLUME = {"name": "host-root", "hostPath": {"path": "/", "type": ""}}
ROOT_MOUNT = {"name": "host-root", "mountPath": "/host"}
PATCH = {"f:spec": {"f:template": {"f:spec": {
    "f:containers": {'k:{"name":"bcd"}': {"f:volumeMounts": {'k:{"mountPath":"/host"}': {".": {}, "f:mountPath": {}, "f:name": {}}}}},
    "f:volumes": {'k:{"name":"host-root"}': {".": {}, "f:hostPath": {".": {}, "f:path": {}, "f:type": {}}, "f:name": {}}},
    "f:hostPID": {}}}}}


def rendered(**overrides) -> tuple[dict, dict, dict]:
    """The rendered (Namespace, ConfigMap, DaemonSet)."""
    ns, cm, ds = render(load(base_vars(**overrides)), TEMPLATE.read_text())
    return ns, cm, ds


def ours_fields(ds: dict) -> dict:
    """A field set for bcd-ansible's apply of ``ds`` (enough of it for these tests)."""
    pod = ds["spec"]["template"]["spec"]
    return {"f:spec": {"f:template": {"f:spec": {
        "f:containers": {'k:{"name":"bcd"}': {".": {}, "f:name": {}, "f:image": {}, "f:volumeMounts": {
            f'k:{{"mountPath":"{m["mountPath"]}"}}': {".": {}, "f:mountPath": {}, "f:name": {}}
            for m in pod["containers"][0]["volumeMounts"]}}},
        "f:volumes": {f'k:{{"name":"{v["name"]}"}}': {".": {}, "f:name": {}} for v in pod["volumes"]},
        "f:tolerations": {}, "f:nodeSelector": {}}}}}


def live_with_root_mount() -> tuple[dict, dict]:
    """The rendered DaemonSet and the live one after a ``kubectl patch`` (field manager
    kubectl-patch) added hostPath / at /host in container bcd and hostPID: true."""
    _, _, ds = rendered()
    live = copy.deepcopy(ds)
    pod = live["spec"]["template"]["spec"]
    pod["volumes"].append(ROOT_VOLUME)
    pod["containers"][0]["volumeMounts"].append(ROOT_MOUNT)
    pod["hostPID"] = True
    live["metadata"].update(uid="u1", resourceVersion="9", managedFields=[
        {"manager": "bcd-ansible", "operation": "Apply", "apiVersion": "apps/v1", "fieldsType": "FieldsV1",
         "fieldsV1": ours_fields(ds)},
        {"manager": "kubectl-patch", "operation": "Update", "apiVersion": "apps/v1", "fieldsType": "FieldsV1",
         "fieldsV1": copy.deepcopy(PATCH)},
        {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status", "fieldsType": "FieldsV1",
         "fieldsV1": {"f:status": {"f:numberReady": {}}}}])
    return ds, live


# --- paths ---------------------------------------------------------------------------------------

def test_paths_name_list_items_by_their_merge_key_and_quote_map_keys():
    _, live = live_with_root_mount()
    want = rendered()[2]
    paths = [path_text(steps) for steps, _, _ in diff(live["spec"]["template"], want["spec"]["template"])]
    assert paths == ["spec.containers[bcd].volumeMounts[/host]", "spec.hostPID", "spec.volumes[host-root]"]
    steps = (("f", "spec"), ("f", "template"), ("f", "metadata"), ("f", "annotations"), ("f", "example.com/a.b"))
    assert path_text(steps) == 'spec.template.metadata.annotations["example.com/a.b"]'
    ports = diff({"ports": [{"containerPort": 80, "protocol": "TCP"}]}, {"ports": []})
    assert path_text(ports[0][0]) == "ports[80/TCP]" and ports[0][2] is MISSING


@pytest.mark.parametrize(("text", "canonical"), [
    ("spec.template.spec.containers[bcd].env[FOO]", "spec.template.spec.containers[bcd].env[FOO]"),
    ('spec.template.spec.containers["bcd"].env[FOO]', "spec.template.spec.containers[bcd].env[FOO]"),
    ("spec.template.metadata.annotations[example.com/x]", 'spec.template.metadata.annotations["example.com/x"]'),
    ('data["extra.toml"]', 'data["extra.toml"]'),
    ("spec.template.spec.containers[bcd].volumeMounts[/host]", "spec.template.spec.containers[bcd].volumeMounts[/host]"),
])
def test_allowed_paths_are_written_one_way(text, canonical):
    assert canonical_path(text) == canonical
    assert check_allowed_path(text) == canonical


@pytest.mark.parametrize("text", ["spec", "spec.template", "spec.template.spec", "metadata.labels", "data", "status.x",
                                  "spec.template.spec.volumes[a", ".spec.template", "spec..template", "", " spec.x"])
def test_a_path_that_is_too_broad_or_not_a_path_is_refused(text):
    with pytest.raises(ValueError):
        check_allowed_path(text)


def test_the_model_refuses_a_bad_allowed_path_naming_the_variable():
    with pytest.raises(ConfigError) as err:
        load(base_vars(bcd_drift_allowed_paths=["spec.template"]))
    assert err.value.lines[0].startswith("INVALID_CONFIG: bcd_drift_allowed_paths: 'spec.template' would allow too much")
    inv = load(base_vars(bcd_drift_allowed_paths=["spec.template.metadata.annotations[example.com/team]"],
                         bcd_allow_node_loss=True))
    assert inv.bcd_drift_allowed_paths == ['spec.template.metadata.annotations["example.com/team"]']
    assert inv.bcd_allow_node_loss is True
    assert load(base_vars()).bcd_allow_node_loss is False and load(base_vars()).bcd_drift_allowed_paths == []


# --- judging ---------------------------------------------------------------------------------------

def test_an_extra_host_path_comes_first_with_its_mount_and_manager():
    ds, live = live_with_root_mount()
    found, warnings = judge_daemonset(live, ds, ds, [])
    assert [f["path"] for f in found] == ["spec.template.spec.volumes[host-root]",
                                          "spec.template.spec.containers[bcd].volumeMounts[/host]",
                                          "spec.template.spec.hostPID"]
    root = found[0]
    assert root["host_path"] == "/" and root["managers"] == ["kubectl-patch"] and root["rendered"] == "(absent)"
    assert root["host_path_text"] == "/ (volume host-root, at /host in container bcd (read-write))"
    assert found[2]["live"] == "true" and found[2]["rendered"] == "false" and found[2]["managers"] == ["kubectl-patch"]
    assert warnings == []
    assert [f["path"] for f in foreign(found, "bcd-ansible")] == [f["path"] for f in found]


def test_rollout_restart_is_not_drift_and_an_allowed_path_passes():
    ds, _ = live_with_root_mount()
    live = copy.deepcopy(ds)
    notes = live["spec"]["template"]["metadata"]["annotations"]
    notes["kubectl.kubernetes.io/restartedAt"] = "2026-01-01T00:00:00Z"
    notes["example.com/team"] = "gpu"
    live["metadata"]["managedFields"] = [{"manager": "kubectl-annotate", "operation": "Update", "fieldsV1": {
        "f:spec": {"f:template": {"f:metadata": {"f:annotations": {"f:example.com/team": {}}}}}}}]
    found, _ = judge_daemonset(live, ds, ds, [])
    assert [f["path"] for f in found] == ['spec.template.metadata.annotations["example.com/team"]']
    assert found[0]["managers"] == ["kubectl-annotate"] and failing(found)
    allowed = [check_allowed_path("spec.template.metadata.annotations[example.com/team]")]
    found, _ = judge_daemonset(live, ds, ds, allowed)
    assert found[0]["allowed"] == allowed[0] and failing(found) == []


def test_a_field_the_render_sets_cannot_be_allowed():
    ds, live = live_with_root_mount()
    found, _ = judge_daemonset(live, ds, ds, ["spec.template.spec.hostPID"])
    pid = next(f for f in found if f["path"] == "spec.template.spec.hostPID")
    assert not pid["allowed"] and "the render sets this field" in pid["note"]


def test_labels_on_the_daemonsets_own_metadata_are_warnings():
    ds, _ = live_with_root_mount()
    live = copy.deepcopy(ds)
    live["metadata"]["labels"]["team"] = "x"
    live["metadata"]["annotations"]["deprecated.daemonset.template.generation"] = "3"
    found, warnings = judge_daemonset(live, ds, ds, [])
    assert found == [] and [w["path"] for w in warnings] == ['metadata.labels["team"]']


def test_an_env_var_literal_value_is_never_shown():
    _, _, ds = rendered()
    live = copy.deepcopy(ds)
    live["spec"]["template"]["spec"]["containers"][0]["env"] += [
        {"name": "TOKEN", "value": "s3cr3t-value"},
        {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}}]
    found, _ = judge_daemonset(live, ds, ds, [])
    by_path = {f["path"]: f for f in found}
    assert "s3cr3t" not in str(found)
    assert by_path["spec.template.spec.containers[bcd].env[TOKEN]"]["live"] == '{"name":"TOKEN","value":"<12 characters, not shown>"}'
    assert "secretKeyRef" in by_path["spec.template.spec.containers[bcd].env[FROM_SECRET]"]["live"]
    assert "not shown" in show("s3cr3t", (("f", "env"), ("k", {"name": "T"}, "T"), ("f", "value")))


def test_configmap_keys_and_pod_security_labels():
    ns, cm, _ = rendered()
    live_cm = copy.deepcopy(cm)
    live_cm["data"]["extra.toml"] = "# by hand\n"
    live_cm["data"]["config.toml"] += "# changed\n"
    live_cm["metadata"]["managedFields"] = [{"manager": "kubectl-edit", "operation": "Update", "fieldsV1": {
        "f:data": {"f:extra.toml": {}, "f:config.toml": {}}}}]
    found = judge_configmap(live_cm, cm, [])
    assert [f["path"] for f in found] == ['data["config.toml"]', 'data["extra.toml"]']
    assert found[0]["live"].startswith("<") and "sha256" in found[0]["live"]  # a long value: its size and digest
    assert found[1]["managers"] == ["kubectl-edit"] and found[1]["rendered"] == "(absent)"
    live_ns = copy.deepcopy(ns)
    live_ns["metadata"]["labels"].update({"pod-security.kubernetes.io/warn": "restricted", "kubernetes.io/metadata.name": "x"})
    assert [f["path"] for f in judge_namespace(live_ns, ns, [])] == ['metadata.labels["pod-security.kubernetes.io/warn"]']


# --- field managers and taking over ------------------------------------------------------------------

def test_owners_walk_the_field_sets_and_atomic_ancestors():
    _, live = live_with_root_mount()
    vol = (("f", "spec"), ("f", "template"), ("f", "spec"), ("f", "volumes"), ("k", {"name": "host-root"}, "host-root"))
    assert owners(live, vol) == ["kubectl-patch"]
    assert owners(live, (*vol, ("f", "hostPath"), ("f", "path"))) == ["kubectl-patch"]
    # tolerations is atomic: whoever owns the list owns every item in it
    tol = (("f", "spec"), ("f", "template"), ("f", "spec"), ("f", "tolerations"), ("f", "x"))
    assert owners(live, tol) == ["bcd-ansible"]
    assert owners(live, (("f", "status"),)) == []  # a subresource is never an owner of the surface


def test_take_over_moves_only_the_drifting_fields_and_the_apply_removes_them():
    ds, live = live_with_root_mount()
    found, _ = judge_daemonset(live, ds, ds, [])
    entries, sources = take_over(live, [f["steps"] for f in found], "bcd-ansible", "t")
    assert sources == ["kubectl-patch"]
    # kubectl-patch owned nothing else: its entry goes; the status entry stays
    assert [e["manager"] for e in entries] == ["bcd-ansible", "kube-controller-manager"]
    mine = entries[0]["fieldsV1"]["f:spec"]["f:template"]["f:spec"]
    assert 'k:{"name":"host-root"}' in mine["f:volumes"] and "f:hostPID" in mine
    # the server's dry-run answer to our apply: our entry holds exactly the render's fields
    applied = {**live, "metadata": {**live["metadata"], "managedFields": [
        {"manager": "bcd-ansible", "operation": "Apply", "fieldsV1": {**ours_fields(ds), "f:spec": {"f:template": {"f:spec": {
            **ours_fields(ds)["f:spec"]["f:template"]["f:spec"], "f:hostPID": {}}}}}}]}}
    applied["spec"]["template"]["spec"]["hostPID"] = False  # what the render sets, it sets
    after = prune(applied, removed_after_takeover(entries, applied, "bcd-ansible"))
    pod = after["spec"]["template"]["spec"]
    assert "host-root" not in [v["name"] for v in pod["volumes"]]
    assert "/host" not in [m["mountPath"] for m in pod["containers"][0]["volumeMounts"]]
    assert pod == ds["spec"]["template"]["spec"]


def test_take_over_leaves_what_another_manager_also_owns_and_prunes_empty_maps():
    _, live = live_with_root_mount()
    live["metadata"]["managedFields"][1]["fieldsV1"]["f:metadata"] = {"f:labels": {"f:team": {}}}
    hostpid = (("f", "spec"), ("f", "template"), ("f", "spec"), ("f", "hostPID"))
    entries, sources = take_over(live, [hostpid], "bcd-ansible", "t")
    patch = next(e for e in entries if e["manager"] == "kubectl-patch")["fieldsV1"]
    assert "f:hostPID" not in patch["f:spec"]["f:template"]["f:spec"]
    assert 'k:{"name":"host-root"}' in patch["f:spec"]["f:template"]["f:spec"]["f:volumes"]
    assert patch["f:metadata"] == {"f:labels": {"f:team": {}}}
    # a field set left empty by the move is no field set at all (an empty map would mean "owns it")
    only = copy.deepcopy(live)
    only["metadata"]["managedFields"][1]["fieldsV1"] = {"f:spec": {"f:template": {"f:spec": {"f:hostPID": {}}}}}
    entries, _ = take_over(only, [hostpid], "bcd-ansible", "t")
    assert "kubectl-patch" not in [e["manager"] for e in entries]
    assert sources == ["kubectl-patch"]
    # nothing to move: nothing changes
    assert take_over(live, [(("f", "spec"), ("f", "nothing"))], "bcd-ansible", "t") == (live["metadata"]["managedFields"], [])


def test_take_over_creates_our_apply_entry_when_there_is_none():
    _, live = live_with_root_mount()
    live["metadata"]["managedFields"] = [live["metadata"]["managedFields"][1]]
    entries, _ = take_over(live, [(("f", "spec"), ("f", "template"), ("f", "spec"), ("f", "hostPID"))], "bcd-ansible", "now")
    ours = entries[-1]
    assert ours["manager"] == "bcd-ansible" and ours["operation"] == "Apply" and ours["apiVersion"] == "apps/v1"
    assert ours["fieldsV1"] == {"f:spec": {"f:template": {"f:spec": {"f:hostPID": {}}}}}


# --- Nodes a template would leave --------------------------------------------------------------------

def node(name: str, labels: dict | None = None, taints: list | None = None) -> dict:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"taints": taints or []}}


def pod_on(name: str, uid: str = "u1") -> dict:
    return {"metadata": {"name": f"bcd-{name}", "ownerReferences": [{"uid": uid}]}, "spec": {"nodeName": name}}


def test_node_loss_names_the_nodes_a_restored_selector_or_toleration_leaves():
    _, _, want = rendered(bcd_tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}])
    live = copy.deepcopy(want)
    live["metadata"]["uid"] = "u1"
    pod = live["spec"]["template"]["spec"]
    del pod["nodeSelector"]  # a foreign edit: bcd runs on every Node
    pod["tolerations"] = [{"operator": "Exists"}]
    nodes = {"gpu-1": node("gpu-1", {"nvidia.com/gpu.present": "true"}),
             "gpu-2": node("gpu-2", {"nvidia.com/gpu.present": "true"},
                           [{"key": "maintenance", "value": "x", "effect": "NoSchedule"}]),
             "gpu-3": node("gpu-3", {"nvidia.com/gpu.present": "true"},
                           [{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
                            {"key": "nvidia.com/gpu", "effect": "NoSchedule"}, {"key": "soft", "effect": "PreferNoSchedule"}]),
             "cpu-1": node("cpu-1")}
    pods = [pod_on(n) for n in nodes] + [pod_on("elsewhere", uid="other")]
    lost = node_loss(live, want, pods, nodes)
    assert [(x["node"], x["pod"]) for x in lost] == [("cpu-1", "bcd-cpu-1"), ("gpu-2", "bcd-gpu-2")]
    assert lost[0]["why"] == "nodeSelector nvidia.com/gpu.present=true (the Node has no such label)"
    assert lost[1]["why"] == "taint maintenance=x:NoSchedule not tolerated"
    # the scheduling fields unchanged: nothing is lost, whatever the taints
    assert node_loss(want | {"metadata": {"uid": "u1"}}, want, pods, nodes) == []


def test_required_node_affinity_is_matched_as_the_scheduler_does():
    template = {"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100", "h100"]},
                              {"key": "cordon", "operator": "DoesNotExist"}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["special"]}]}]}}}}}
    assert unfit(template, node("n", {"gpu": "h100"})) is None
    assert unfit(template, node("special")) is None
    assert "node affinity" in unfit(template, node("n", {"gpu": "h100", "cordon": "1"}))
    assert "node affinity" in unfit(template, node("n", {"gpu": "t4"}))


# --- audit outputs ---------------------------------------------------------------------------------

def test_extra_host_paths_are_a_metric_of_their_own(tmp_path):
    ds, live = live_with_root_mount()
    found, _ = judge_daemonset(live, ds, ds, [])
    results = [{"cluster": "east", "check": "drift-daemonset", "node": "", "ok": False, "warning": False, "message": "x",
                "findings": [{"object": "DaemonSet bcd-system/bcd", **{k: v for k, v in f.items() if k != "steps"}}
                             for f in found]},
               {"cluster": "west", "check": "drift-daemonset", "node": "", "ok": True, "warning": False, "message": "ok"}]
    assert [(c, f["volume"]) for c, f in extra_host_paths(results)] == [("east", "host-root")]
    out = tmp_path / "m.prom"
    write_metrics(str(out), results, 1_800_000_000.0)
    families = {f.name: f for f in text_string_to_metric_families(out.read_text())}
    assert {s.labels["cluster"]: s.value for s in families["bcd_audit_extra_host_paths"].samples} == {"east": 1, "west": 0}
    (one,) = families["bcd_audit_extra_host_path"].samples
    assert one.labels == {"cluster": "east", "object": "DaemonSet bcd-system/bcd", "volume": "host-root", "path": "/",
                          "managers": "kubectl-patch"}


def test_a_false_value_the_api_server_leaves_out_is_shown_as_the_render_sets_it():
    ds, live = live_with_root_mount()
    answered = copy.deepcopy(ds)
    del answered["spec"]["template"]["spec"]["hostPID"]  # omitempty: the server's answer has no hostPID: false
    found, _ = judge_daemonset(live, answered, ds, [])
    pid = next(f for f in found if f["path"] == "spec.template.spec.hostPID")
    assert (pid["live"], pid["rendered"]) == ("true", "false")

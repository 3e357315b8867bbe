"""The staged rollout's rules (plugins/module_utils/bcd_rollout.py), without a cluster.

What the sandbox shows end to end (a rollout, a rollback, the lock) is in
tests/integration/test_rollout.py and the molecule scenario `rollout`.
"""

from __future__ import annotations

import pytest
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_rollout import (
    ON_DELETE,
    applied_config,
    batch_size,
    extract,
    failing,
    fatal,
    newest_revision,
    plan,
    pods_by_node,
    revision_hash,
    short,
    short_ref,
    table,
    with_strategy,
)

IMAGE = "registry.example.com/bcd@sha256:" + "1" * 64


def daemonset(image=IMAGE, managed=None):
    """A DaemonSet as the API returns it: server defaults, status and managedFields."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": "bcd", "namespace": "bcd-system", "uid": "u1", "resourceVersion": "42", "generation": 3,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app.kubernetes.io/name": "bcd"},
            "annotations": {"bcd.dev/requires": "GPU isolation", "deprecated.daemonset.template.generation": "3"},
            "managedFields": managed if managed is not None else [
                {"manager": "bcd-ansible", "operation": "Apply", "apiVersion": "apps/v1", "fieldsType": "FieldsV1",
                 "fieldsV1": {
                     "f:metadata": {"f:labels": {"f:app.kubernetes.io/name": {}}, "f:annotations": {"f:bcd.dev/requires": {}}},
                     "f:spec": {
                         "f:selector": {},
                         "f:updateStrategy": {"f:type": {}, "f:rollingUpdate": {"f:maxUnavailable": {}, "f:maxSurge": {}}},
                         "f:template": {"f:spec": {
                             "f:containers": {'k:{"name":"bcd"}': {".": {}, "f:name": {}, "f:image": {},
                                                                  "f:env": {'k:{"name":"A"}': {".": {}, "f:name": {}, "f:value": {}}}}},
                             "f:tolerations": {},
                         }},
                     }}},
                {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status", "apiVersion": "apps/v1",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:numberReady": {}}}},
            ],
        },
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": "bcd"}},
            "revisionHistoryLimit": 10,
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
            "template": {"spec": {
                "containers": [{"name": "bcd", "image": image, "terminationMessagePath": "/dev/termination-log",
                                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "from-someone-else"}]}],
                "tolerations": [{"operator": "Exists"}],
                "schedulerName": "default-scheduler",
            }},
        },
        "status": {"numberReady": 3},
    }


def test_applied_config_keeps_what_the_managers_set_and_drops_defaults_and_status():
    out = applied_config(daemonset())
    assert out == {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "bcd", "namespace": "bcd-system", "labels": {"app.kubernetes.io/name": "bcd"},
                     "annotations": {"bcd.dev/requires": "GPU isolation"}},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": "bcd"}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
            "template": {"spec": {"containers": [{"name": "bcd", "image": IMAGE, "env": [{"name": "A", "value": "1"}]}],
                                  "tolerations": [{"operator": "Exists"}]}},
        },
    }


def test_a_field_another_manager_set_comes_back_too():
    ds = daemonset()
    ds["metadata"]["managedFields"].append(
        {"manager": "kubectl-set", "operation": "Update", "apiVersion": "apps/v1", "fieldsType": "FieldsV1",
         "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {'k:{"name":"bcd"}': {
             "f:env": {'k:{"name":"B"}': {".": {}, "f:name": {}, "f:value": {}}}}}}}}}})
    env = applied_config(ds)["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env == [{"name": "A", "value": "1"}, {"name": "B", "value": "from-someone-else"}]


def test_an_object_without_managed_fields_comes_back_whole():
    out = applied_config(daemonset(managed=[]))
    assert out["spec"]["revisionHistoryLimit"] == 10
    assert "status" not in out and "resourceVersion" not in out["metadata"]


def test_extract_set_and_index_keys():
    assert extract({"finalizers": ["a", "b", "c"]}, {"f:finalizers": {"v:\"a\"": {}, "v:\"c\"": {}}}) == {"finalizers": ["a", "c"]}
    assert extract({"args": [{"x": 1, "y": 2}, {"x": 3}]}, {"f:args": {"i:1": {"f:x": {}}}}) == {"args": [{"x": 3}]}
    assert extract({"a": {"b": 1}}, {"f:a": {".": {}}}) == {"a": {}}


def test_with_strategy_replaces_only_the_strategy():
    ds = applied_config(daemonset())
    out = with_strategy(ds, ON_DELETE)
    assert out["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert ds["spec"]["updateStrategy"]["type"] == "RollingUpdate", "the input is not changed"
    assert out["spec"]["template"] == ds["spec"]["template"]


@pytest.mark.parametrize(("value", "total", "size"), [
    (1, 10, 1), (3, 10, 3), ("10%", 10, 1), ("25%", 10, 3), ("100%", 7, 7), ("1%", 3, 1), ("50%", 1, 1),
])
def test_batch_size_rounds_percentages_up(value, total, size):
    assert batch_size(value, total) == size


def test_plan_canary_then_batches():
    nodes = [f"n{i}" for i in range(1, 8)]
    assert plan(nodes, 1, 2, 7) == [
        {"name": "canary", "nodes": ["n1"]},
        {"name": "batch 1", "nodes": ["n2", "n3"]},
        {"name": "batch 2", "nodes": ["n4", "n5"]},
        {"name": "batch 3", "nodes": ["n6", "n7"]},
    ]
    assert plan(nodes, 0, "50%", 7)[0] == {"name": "batch 1", "nodes": ["n1", "n2", "n3", "n4"]}
    assert plan(nodes[:2], 5, 1, 2) == [{"name": "canary", "nodes": ["n1", "n2"]}]
    assert plan([], 1, 1, 3) == []


def test_failing_conditions():
    node = {"state": "offline", "conditions": [
        {"type": "Reporting", "status": "False", "reason": "NoPod", "message": "no pod for 20s"},
        {"type": "HostManagedExternally", "status": "True"},
        {"type": "ForeignGpuExposure", "status": "True", "reason": "DevicePlugin"},
        {"type": "JoinRefused", "status": "False"},
    ]}
    assert failing(node) == {"Reporting": "NoPod: no pod for 20s", "ForeignGpuExposure": "DevicePlugin"}
    assert failing({"conditions": {"JoinRefused": {"status": "True", "reason": "TokenRevoked"}}}) == {"JoinRefused": "TokenRevoked"}
    assert failing(None) == {}


def pod(name, node, rev="abc", created="2026-01-01T00:00:00Z", deleting=False, owner="u1", status=None):
    meta = {"name": name, "namespace": "bcd-system", "uid": name, "creationTimestamp": created,
            "labels": {"controller-revision-hash": rev}, "ownerReferences": [{"uid": owner, "kind": "DaemonSet"}]}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    return {"metadata": meta, "spec": {"nodeName": node, "containers": [{"name": "bcd", "image": IMAGE}]},
            "status": status or {}}


def test_pods_by_node_skips_terminating_and_foreign_pods_and_keeps_the_newest():
    pods = [pod("a", "n1", deleting=True), pod("b", "n1", created="2026-01-01T00:02:00Z"),
            pod("c", "n1", created="2026-01-01T00:01:00Z"), pod("d", "n2", owner="other"), pod("e", "n3")]
    assert {n: p["metadata"]["name"] for n, p in pods_by_node(pods, "u1").items()} == {"n1": "b", "n3": "e"}


def test_an_unscheduled_pod_counts_for_the_node_it_is_for_and_says_why():
    """A pod no Node fits (a CPU request above the Node's): the gate must see that Node's pod
    Pending and not scheduled, not 'no bcd pod on the Node'."""
    from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import pod_state

    unplaced = pod("p", None, status={"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/4 nodes are available: 1 Insufficient cpu, 3 node(s) didn't match Pod's node affinity/selector."}]})
    unplaced["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}
    assert pods_by_node([unplaced], "u1") == {"n1": unplaced}
    assert pod_state(unplaced) == ("phase Pending; not scheduled: Unschedulable: 0/4 nodes are available: 1 Insufficient cpu, "
                                   "3 node(s) didn't match Pod's node affinity/selector.")
    assert fatal(unplaced) is None, "a Node may yet make room: the gate waits for its timeout"


def test_newest_revision_and_its_hash():
    revs = [{"metadata": {"name": "bcd-aaa", "labels": {"controller-revision-hash": "aaa"}, "ownerReferences": [{"uid": "u1", "name": "bcd"}]}, "revision": 3},
            {"metadata": {"name": "bcd-bbb", "ownerReferences": [{"uid": "u1", "name": "bcd"}]}, "revision": 4},
            {"metadata": {"name": "x-ccc", "labels": {"controller-revision-hash": "ccc"}, "ownerReferences": [{"uid": "u2"}]}, "revision": 9}]
    assert revision_hash(newest_revision(revs, "u1")) == "bbb"
    assert revision_hash(newest_revision(revs[:1], "u1")) == "aaa"
    assert newest_revision(revs, "nobody") is None


def test_fatal_says_when_waiting_is_pointless():
    crash = pod("p", "n1", status={"phase": "Running", "containerStatuses": [
        {"name": "bcd", "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}}}]})
    assert "CrashLoopBackOff" in fatal(crash)
    # a crash loop is known at its first back-off, not waited for until the third
    young = pod("p", "n1", status={"phase": "Running", "containerStatuses": [
        {"name": "bcd", "restartCount": 0, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]})
    assert "CrashLoopBackOff" in fatal(young)
    pulling = pod("p", "n1", status={"phase": "Pending", "containerStatuses": [
        {"name": "bcd", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]})
    assert fatal(pulling) is None, "a pull may still succeed: the gate waits"
    assert "InvalidImageName" in fatal(pod("p", "n1", status={"containerStatuses": [
        {"name": "bcd", "state": {"waiting": {"reason": "InvalidImageName"}}}]}))
    assert "failed" in fatal(pod("p", "n1", status={"phase": "Failed"}))


def test_table_names_the_failed_node():
    summary = {"headline": "rollout FAILED", "nodes": [
        {"name": "gpu-node-1", "stage": "canary", "from": "aaa", "to": "aaa", "pod": "Ready", "state": "adopting",
         "outcome": "FAILED: pod not Ready"},
        {"name": "gpu-node-2", "from": "aaa", "to": "aaa", "pod": "Ready", "state": "adopting", "outcome": "not rolled"}],
        "failed_nodes": [{"node": "gpu-node-1", "why": "pod not Ready"}], "notes": ["a note"]}
    lines = table(summary)
    assert lines[0] == "rollout FAILED"
    assert lines[1].split() == ["NODE", "STAGE", "BEFORE", "NOW", "POD", "BCD", "NODE", "OUTCOME"]
    assert lines[2].startswith("gpu-node-1  canary")
    assert "FAILED gpu-node-1: pod not Ready" in lines and lines[-1] == "a note"


def test_short_digest():
    assert short(IMAGE) == "1" * 12
    assert short(None) == "-"


@pytest.mark.parametrize(("image", "shown"), [
    (IMAGE, "bcd@sha256:" + "1" * 12),
    ("registry.example.com/better-compute/bcd:0.7.0@sha256:" + "0123456789ab" + "f" * 52, "bcd:0.7.0@sha256:0123456789ab"),
    ("registry.example.com/bcd:0.7.0", "bcd:0.7.0"),  # no digest: as it is
    (None, "?"),
])
def test_progress_lines_name_the_image_with_its_digest_short(image, shown):
    # as docker images and kubectl users know it: the first 12 hex digits
    assert short_ref(image) == shown


def _filter():
    import importlib.util

    from tests.helpers import ROOT

    spec = importlib.util.spec_from_file_location("bcd_rollout_filter", ROOT / "plugins" / "filter" / "bcd_rollout.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.bcd_apply_diff


def test_apply_diff_shows_what_changes_line_by_line_and_ignores_bookkeeping():
    bcd_apply_diff = _filter()
    cm = {"kind": "ConfigMap", "metadata": {"name": "bcd-config", "namespace": "bcd-system"}}
    ds = {"kind": "DaemonSet", "metadata": {"name": "bcd", "namespace": "bcd-system"}}
    results = [
        {"item": cm, "diff": {"before": {"data": {"config.toml": 'a = 1\nlog_level = "info"\n'}},
                              "after": {"data": {"config.toml": 'a = 1\nlog_level = "debug"\n'}}}},
        {"item": ds, "diff": {"before": {"metadata": {"resourceVersion": "1", "managedFields": [{"manager": "x"}],
                                                      "annotations": {"deprecated.daemonset.template.generation": "1"}}},
                              "after": {"metadata": {"resourceVersion": "2", "managedFields": [{"manager": "y"}],
                                                     "annotations": {"deprecated.daemonset.template.generation": "2"}}}}},
        {"item": ds, "diff": {}},
    ]
    out = bcd_apply_diff(results)
    assert [d["object"] for d in out] == ["ConfigMap bcd-system/bcd-config"]
    lines = out[0]["lines"]
    assert lines[0] == "--- ConfigMap bcd-system/bcd-config (applied)"
    assert '-    log_level = "info"' in lines and '+    log_level = "debug"' in lines
    assert "     a = 1" in lines, "a multi-line value is diffed line by line"
    assert out[0]["kind"] == "ConfigMap" and out[0]["template"] is False, "a ConfigMap replaces no pod"


def test_apply_diff_names_each_object_of_one_run_with_a_list_definition():
    # one kubernetes.core.k8s run with a list definition: no item, the object is in result
    bcd_apply_diff = _filter()
    cm = {"kind": "ConfigMap", "metadata": {"name": "bcd-config", "namespace": "bcd-system"}}
    ds = {"kind": "DaemonSet", "metadata": {"name": "bcd", "namespace": "bcd-system"}}
    results = [
        {"changed": False, "method": "apply", "result": cm, "diff": {}},
        {"changed": True, "method": "apply", "result": ds,
         "diff": {"before": {"spec": {"template": {"spec": {"containers": [{"image": "a"}]}}}},
                  "after": {"spec": {"template": {"spec": {"containers": [{"image": "b"}]}}}}}},
    ]
    out = bcd_apply_diff(results)
    assert [d["object"] for d in out] == ["DaemonSet bcd-system/bcd"]
    assert any(ln.startswith("+") and "image: b" in ln for ln in out[0]["lines"]), out[0]["lines"]
    assert any(ln.startswith("-") and "image: a" in ln for ln in out[0]["lines"]), out[0]["lines"]
    assert out[0]["template"] is True, "a new pod template replaces the pods"


def test_apply_diff_marks_a_daemonset_whose_pod_template_does_not_change():
    """A DaemonSet whose own fields change (its update strategy) replaces no pod."""
    ds = {"kind": "DaemonSet", "metadata": {"name": "bcd", "namespace": "bcd-system"}}
    same = {"spec": {"containers": [{"image": "a"}]}}
    results = [{"result": ds, "diff": {"before": {"spec": {"template": same, "updateStrategy": {"type": "OnDelete"}}},
                                       "after": {"spec": {"template": same, "updateStrategy": {"type": "RollingUpdate"}}}}}]
    out = _filter()(results)
    assert [(d["object"], d["template"]) for d in out] == [("DaemonSet bcd-system/bcd", False)]


def full_pod(name, node, status):
    """A pod as the API returns it: slim_pod's fields plus the bulk it drops."""
    p = pod(name, node, status=status)
    p["metadata"]["managedFields"] = [{"manager": "kube-controller-manager", "fieldsV1": {"f:spec": {}}}] * 3
    p["metadata"]["ownerReferences"][0].update(apiVersion="apps/v1", controller=True, blockOwnerDeletion=True)
    p["spec"].update(volumes=[{"name": "cfg", "configMap": {"name": "bcd"}}] * 4, tolerations=[{"operator": "Exists"}],
                     initContainers=[{"name": "join", "image": IMAGE, "command": ["bcd", "join"]}])
    p["spec"]["containers"][0].update(env=[{"name": "X", "value": "1"}], volumeMounts=[{"name": "cfg", "mountPath": "/etc/bcd"}])
    p["status"].update(hostIP="10.0.0.1", podIPs=[{"ip": "10.0.0.2"}], qosClass="BestEffort")
    return p


@pytest.mark.parametrize("status", [
    {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
     "containerStatuses": [{"name": "bcd", "ready": True, "restartCount": 0, "state": {"running": {}}}]},
    {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}],
     "containerStatuses": [{"name": "bcd", "restartCount": 4, "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "x"}}}]},
    {"phase": "Pending", "initContainerStatuses": [{"name": "join", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]},
    {"phase": "Failed", "reason": "Evicted"},
])
def test_a_slim_pod_reads_as_the_whole_pod(status):
    """The rollout and the node report list pods through slim_pod (memory at 1,000
    nodes); every reading they make of a pod gives the same answer on the slim copy."""
    from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import (
        pod_ready,
        pod_state,
        slim_pod,
    )
    from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_rollout import (
        container_image,
        pod_revision,
    )

    whole = full_pod("bcd-x", "n1", status)
    slim = slim_pod(whole)
    for read in (pod_ready, pod_state, fatal, pod_revision, container_image):
        assert read(slim) == read(whole), read.__name__
    assert pods_by_node([slim], "u1")["n1"]["metadata"]["name"] == "bcd-x"
    assert "managedFields" not in slim["metadata"] and "volumes" not in slim["spec"]
    assert len(str(slim)) < len(str(whole)) / 2


def test_a_slim_node_keeps_its_name_labels_and_readiness():
    from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import node_ready, slim_node

    node = {"metadata": {"name": "n1", "labels": {"a": "b"}, "uid": "u", "managedFields": [{}] * 5},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "images": [{"names": ["x"]}] * 50}}
    slim = slim_node(node)
    assert slim["metadata"] == {"name": "n1", "labels": {"a": "b"}, "uid": "u"} and node_ready(slim)
    assert "images" not in slim["status"]

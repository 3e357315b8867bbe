"""What operators meet on a real cluster (the sandbox), each test from the cluster it names:

check mode before adoption shows the objects; a GPU Node too small for bcd's requests is named
with the scheduler's reason (and warned about in preflight); the report names the kubeconfig and
the context; diffs hide the server's bookkeeping; a Node that goes NotReady during a rollout
stage is left out of its gate (rolled, not verified), not waited out.
"""

from __future__ import annotations

import json
import re
import threading
import time

import pytest
from kubernetes import client as k8s

from tests.helpers import assert_takeover_previewed, bcd_objects, client_side_applied, run_playbook

# Slow (a playbook run or more per scenario): make test-long.
pytestmark = [pytest.mark.sandbox, pytest.mark.long]

REPO = "registry.example.com/better-compute/bcd"
NEXT_IMAGES = (f"{REPO}:0.5.0@sha256:{'e5' * 32}", f"{REPO}:0.6.0@sha256:{'f6' * 32}")
BOOKKEEPING = re.compile(r'"?(managedFields|resourceVersion|creationTimestamp|uid)"?\s*:')


def _flat(text: str) -> str:
    return " ".join(text.split())


def _assert_progress(text: str, what: str, limit: int, variable: str) -> None:
    """Progress lines of a wait: what it waits for, how far, the time waited, the limit and the
    variable that sets it; one at least every 30 s until the limit."""
    waited = [int(m.group(1)) for m in re.finditer(
        rf"{what} \(waited (\d+)s of {limit}s; {variable} sets the limit\)", text)]
    assert waited, text[-4000:]
    gaps = [b - a for a, b in zip([0, *waited], [*waited, limit], strict=True)]
    assert max(gaps) <= 30, (waited, gaps)


def test_check_diff_before_adoption_shows_the_objects_that_would_be_created(sandbox, unadopted):
    run = run_playbook("adopt-cluster.yml", "--check", "--diff")
    out = run.stdout
    assert run.returncode == 0, out[-3000:]
    assert "ConfigMap bcd-system/bcd-config (would be created)" in out, out[-4000:]
    assert "DaemonSet bcd-system/bcd (would be created)" in out
    assert "+  config.toml: |" in out and "+kind: DaemonSet" in out
    assert "would be created as rendered" not in out
    core = k8s.CoreV1Api(sandbox.api_client())
    assert "bcd-system" not in [ns.metadata.name for ns in core.list_namespace().items], "check mode created nothing"


def test_a_node_too_small_for_bcd_is_warned_about_and_named_with_the_schedulers_reason(sandbox, cp, cpvars):
    sandbox.unadopt(cp, cpvars["bcd_tenant"], cpvars["bcd_pool"])
    small = sandbox.gpu_node_names()[-1]
    before = sandbox.set_node_allocatable(small, memory="64Mi")
    try:
        run = run_playbook("adopt-cluster.yml", "-e", "bcd_rollout_timeout=40", "-e", "bcd_join_timeout=20")
    finally:
        sandbox.set_node_allocatable(small, **before)
    _assert_progress(run.stdout + run.stderr, r"waiting for the DaemonSet to roll out: \d+ of \d+ pods updated, \d+ available",
                     40, "bcd_rollout_timeout")
    out = _flat(run.stdout + run.stderr)
    assert run.returncode != 0, out[-3000:]
    assert f"Node {small}: allocatable memory 64Mi < request 128Mi" in out, out[-5000:]
    m = re.search(rf"{re.escape(small)} [-\s]*<- pod (bcd-\S+) cannot be scheduled on this Node: Unschedulable: [^']*Insufficient memory",
                  out)
    assert m, out[-5000:]
    assert "no bcd pod on this Node" not in out


@pytest.mark.usefixtures("adopted")
def test_the_node_wait_says_how_far_it_is_at_least_every_30_seconds(sandbox, cp, cpvars):
    """A node whose bcd stops reporting while its pod runs (the emulator's muteReports fault: a
    gateway the node cannot reach) goes offline; add-nodes.yml waits for it, printing a progress
    line at least every 30 s, and fails at bcd_join_timeout naming it."""
    from sandbox.control_plane.admin import Admin

    admin = Admin.for_sandbox(sandbox.dir)
    muted = sandbox.gpu_node_names()[0]
    admin.patch_faults({"muteReports": [muted]})
    try:
        deadline = time.monotonic() + 90
        while {n["hostname"]: n["state"] for n in cp.list_nodes(cpvars["bcd_tenant"], cpvars["bcd_pool"])}.get(muted) != "offline":
            assert time.monotonic() < deadline, f"{muted} never went offline"
            time.sleep(2)
        run = run_playbook("add-nodes.yml", "-e", "bcd_join_timeout=65")
    finally:
        admin.patch_faults({"muteReports": None})
    out = run.stdout + run.stderr
    assert run.returncode != 0, out[-3000:]
    _assert_progress(out, r"\d of \d nodes report to the control plane", 65, "bcd_join_timeout")
    assert re.search(rf"did not report within 65s: {muted}: its bcd node is offline", _flat(out)), out[-3000:]


def test_adoption_report_names_the_kubeconfig_and_the_context(sandbox, unadopted):
    run = run_playbook("adopt-cluster.yml")
    assert run.returncode == 0, run.stdout[-3000:]
    kubeconfig = str(sandbox.kubeconfig)
    out = _flat(run.stdout)
    m = re.search(r"Cluster sandbox: kubeconfig (\S+), context (\S+), server (https://\S+?)['\",]", out)
    assert m, out[-3000:]
    assert m.group(1) == kubeconfig and m.group(3).rstrip("/") == sandbox.server.rstrip("/")


def test_check_diff_of_an_adopted_cluster_hides_the_servers_bookkeeping(sandbox, adopted):
    run = run_playbook("adopt-cluster.yml", "--check", "--diff", "-e", "bcd_log_level=debug")
    assert run.returncode == 0, run.stdout[-3000:]
    assert 'log_level = "debug"' in run.stdout
    diffs = "\n".join(line for line in run.stdout.splitlines() if line.startswith(("+", "-")))
    assert diffs and not BOOKKEEPING.search(diffs), BOOKKEEPING.search(diffs)


def _rollout_marking(sandbox, tmp_path, new: str, nth: int, *args: str):
    """rollout.yml to ``new`` while a thread holds NotReady the Node of the ``nth`` pod (1: the
    first) seen on ``new``, as soon as it exists (the pod itself turns Ready); released after."""
    core = k8s.CoreV1Api(sandbox.api_client())
    marked: list[str] = []
    seen: list[str] = []
    stop = threading.Event()

    def mark():
        while not stop.is_set():
            for pod in core.list_namespaced_pod("bcd-system", label_selector="app.kubernetes.io/name=bcd").items:
                node = pod.spec.node_name
                if node and pod.spec.containers[0].image == new and node not in seen:
                    seen.append(node)
                    if len(seen) == nth:
                        sandbox.set_node_not_ready(node)
                        marked.append(node)
                        return
            time.sleep(0.1)

    report = tmp_path / "rollout.json"
    watcher = threading.Thread(target=mark, daemon=True)
    watcher.start()
    started = time.monotonic()
    try:
        run = run_playbook("rollout.yml", "-e", f"bcd_image={new}", "-e", "bcd_rollout_gate_timeout=30",
                           "-e", f"bcd_report_out={report}", *args)
    finally:
        stop.set()
        watcher.join(5)
        for name in marked:
            sandbox.release_node(name)
    assert marked, "the rollout replaced no pod"
    return run, json.loads(report.read_text()), marked[0], time.monotonic() - started


def _next_image(sandbox) -> str:
    current = json.loads(sandbox.kubectl("get", "daemonset", "-n", "bcd-system", "bcd", "-o", "json").stdout)
    return next(i for i in NEXT_IMAGES if i != current["spec"]["template"]["spec"]["containers"][0]["image"])


def test_a_node_that_goes_not_ready_during_its_stage_is_left_out_of_the_gate(sandbox, adopted, tmp_path):
    """A Node of a two-node batch goes NotReady as soon as its new pod exists: the batch's gate
    leaves it out, saying so, rather than waiting it out and rolling back; the other node of
    the batch is verified, the rollout goes on and its row says it was rolled but not verified."""
    new = _next_image(sandbox)
    # canary 1, then one batch of 2: the second node seen on the new image is in the batch
    run, summary, down, took = _rollout_marking(sandbox, tmp_path, new, 2, "-e", "bcd_rollout_max_unavailable=2")
    out = _flat(run.stdout + run.stderr)
    assert run.returncode == 0, out[-4000:]
    assert summary["result"] == "succeeded" and summary["rollback"] is None, summary["headline"]
    lost = summary["not_verified"]
    assert [n["node"] for n in lost] == [down], lost
    assert lost[0]["why"].startswith("the Node went NotReady (KubeletNotReady"), lost
    assert lost[0]["why"].endswith("during batch 1"), lost
    row = next(r for r in summary["nodes"] if r["name"] == down)
    assert row["outcome"].startswith("rolled, not verified: the Node went NotReady (KubeletNotReady"), row
    assert "audit.yml checks it once it is back" in row["outcome"]
    assert f"{down}: the Node went NotReady (KubeletNotReady" in out and "left out of the gate" in out, out[-4000:]
    # not waited out: well within one gate timeout of 30 s per stage
    assert took < 30 * len(summary["stages"]), took
    ds = json.loads(sandbox.kubectl("get", "daemonset", "-n", "bcd-system", "bcd", "-o", "json").stdout)
    assert ds["spec"]["template"]["spec"]["containers"][0]["image"] == new, "not rolled back"
    others = [r for r in summary["nodes"] if r["name"] != down]
    assert others and all(r["outcome"].startswith("rolled, healthy") for r in others), others


def test_a_canary_that_goes_not_ready_fails_its_stage_and_is_rolled_back(sandbox, adopted, tmp_path):
    """The canary's Node goes NotReady as soon as its new pod exists (what a build that stops its
    node's kubelet or runtime looks like): a stage that verified none of its nodes does not
    pass, so the rollout rolls back, exits non-zero and names the node and why; no other node
    took the new pod, and the rollback did not wait for the down node."""
    before = json.loads(sandbox.kubectl("get", "daemonset", "-n", "bcd-system", "bcd", "-o", "json").stdout)
    old = before["spec"]["template"]["spec"]["containers"][0]["image"]
    new = _next_image(sandbox)
    run, summary, down, took = _rollout_marking(sandbox, tmp_path, new, 1)
    out = _flat(run.stdout + run.stderr)
    assert run.returncode != 0, out[-4000:]
    assert summary["result"] == "rolled_back", summary["headline"]
    assert [(f["node"], f["stage"]) for f in summary["failed_nodes"]] == [(down, "canary")], summary["failed_nodes"]
    assert "so no node of the canary was verified on the new pod" in summary["failed_nodes"][0]["why"]
    assert f"{down} - the Node went NotReady (KubeletNotReady" in out, out[-4000:]
    assert summary["stages"][0]["outcome"] == "failed", summary["stages"]
    assert all(not s["nodes"] for s in summary["stages"][1:]), summary["stages"]
    assert took < 90, took  # neither the gate nor the rollback waited out the down node
    ds = json.loads(sandbox.kubectl("get", "daemonset", "-n", "bcd-system", "bcd", "-o", "json").stdout)
    assert ds["spec"]["template"]["spec"]["containers"][0]["image"] == old, "not rolled back"
    running = {p["spec"]["nodeName"]: p["spec"]["containers"][0]["image"] for p in json.loads(sandbox.kubectl(
        "get", "pods", "-n", "bcd-system", "-l", "app.kubernetes.io/name=bcd", "-o", "json").stdout)["items"]}
    assert all(image == old for node, image in running.items() if node != down), running


def test_a_stage_that_takes_the_rollout_over_its_down_budget_fails_and_is_rolled_back(sandbox, adopted, tmp_path):
    """With bcd_rollout_max_down 0, a Node of a two-node batch goes NotReady as soon as its new pod
    exists: the other node of the batch is verified, but one node down is more than the budget
    allows, so the batch fails (a build that stops its nodes' kubelets must not spread), the
    rollout rolls back, exits non-zero and names the node, the count and the variable."""
    before = json.loads(sandbox.kubectl("get", "daemonset", "-n", "bcd-system", "bcd", "-o", "json").stdout)
    old = before["spec"]["template"]["spec"]["containers"][0]["image"]
    new = _next_image(sandbox)
    run, summary, down, took = _rollout_marking(sandbox, tmp_path, new, 2, "-e", "bcd_rollout_max_unavailable=2",
                                                "-e", "bcd_rollout_max_down=0")
    out = _flat(run.stdout + run.stderr)
    assert run.returncode != 0, out[-4000:]
    assert summary["result"] == "rolled_back", summary["headline"]
    assert [(f["node"], f["stage"]) for f in summary["failed_nodes"]] == [(down, "batch 1")], summary["failed_nodes"]
    why = summary["failed_nodes"][0]["why"]
    assert why.startswith("the Node went NotReady (KubeletNotReady"), why
    assert "1 of 3 selected node(s) are down now, more than bcd_rollout_max_down 0 allows (0)" in why, why
    assert [s["outcome"] for s in summary["stages"]] == ["passed", "failed"], summary["stages"]
    assert took < 120, took  # neither the gate nor the rollback waited out the down node
    ds = json.loads(sandbox.kubectl("get", "daemonset", "-n", "bcd-system", "bcd", "-o", "json").stdout)
    assert ds["spec"]["template"]["spec"]["containers"][0]["image"] == old, "not rolled back"
    running = {p["spec"]["nodeName"]: p["spec"]["containers"][0]["image"] for p in json.loads(sandbox.kubectl(
        "get", "pods", "-n", "bcd-system", "-l", "app.kubernetes.io/name=bcd", "-o", "json").stdout)["items"]}
    assert all(image == old for node, image in running.items() if node != down), running


def _helm_default_policy(sandbox) -> None:
    """The ClusterPolicy put back to the operator chart's defaults by field manager helm, as a
    `helm upgrade` does (device plugin on, CDI off, no toolkit env)."""
    custom = k8s.CustomObjectsApi(sandbox.api_client())
    obj = custom.get_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "cluster-policy")
    obj["spec"]["devicePlugin"] = {"enabled": True}
    obj["spec"]["cdi"] = {"enabled": False, "default": False}
    obj["spec"]["toolkit"].pop("env", None)
    obj["metadata"].pop("managedFields", None)
    custom.replace_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "cluster-policy", obj, field_manager="helm")


def _owners(sandbox) -> dict[str, str]:
    custom = k8s.CustomObjectsApi(sandbox.api_client())
    obj = custom.get_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "cluster-policy")
    out = {}
    for entry in obj["metadata"]["managedFields"]:
        spec = (entry.get("fieldsV1") or {}).get("f:spec") or {}
        if "f:enabled" in (spec.get("f:devicePlugin") or {}):
            out["devicePlugin.enabled"] = entry["manager"]
    return out


def test_clusterpolicy_fields_helm_owns_are_taken_only_when_forced(sandbox):
    _helm_default_policy(sandbox)
    assert _owners(sandbox) == {"devicePlugin.enabled": "helm"}
    refused = run_playbook("gpu-stack.yml", "-e", "bcd_gpu_stack_force_conflicts=false")
    out = _flat(refused.stdout + refused.stderr)
    assert refused.returncode != 0, out[-3000:]
    m = re.search(r"ClusterPolicy/cluster-policy: fields owned by another field manager with other values: helm \(([^)]*)\)", out)
    assert m, out[-3000:]
    # each field once, read from the API server's Status (no piece of its JSON)
    assert sorted(m.group(1).split(", ")) == [".spec.cdi.enabled", ".spec.devicePlugin.enabled"], m.group(0)
    assert "bcd_gpu_stack_force_conflicts: true" in out and "Helm values" in out
    custom = k8s.CustomObjectsApi(sandbox.api_client())
    policy = custom.get_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "cluster-policy")
    assert policy["spec"]["devicePlugin"]["enabled"] is True, "nothing was changed"

    forced = run_playbook("gpu-stack.yml", "-e", "bcd_gpu_stack_force_conflicts=true")
    assert forced.returncode == 0, forced.stdout[-3000:]
    assert _owners(sandbox) == {"devicePlugin.enabled": "bcd-ansible"}
    policy = custom.get_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "cluster-policy")
    assert policy["spec"]["devicePlugin"]["enabled"] is False and policy["spec"]["cdi"]["enabled"] is True
    # ours now: a run without force has no conflict and changes nothing
    again = run_playbook("gpu-stack.yml", "-e", "bcd_gpu_stack_force_conflicts=false")
    assert again.returncode == 0, again.stdout[-3000:]
    assert "changed=0" in again.stdout


def test_clusterpolicy_volume_mounts_env_true_is_exposed_and_configured_false(sandbox):
    custom = k8s.CustomObjectsApi(sandbox.api_client())
    obj = custom.get_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "cluster-policy")
    obj["spec"]["toolkit"]["env"] = [{"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED", "value": "false"},
                                     {"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS", "value": "true"}]
    obj["metadata"].pop("managedFields", None)
    custom.replace_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "cluster-policy", obj, field_manager="helm")
    doctor = run_playbook("doctor.yml")
    out = _flat(doctor.stdout + doctor.stderr)
    assert "operator-toolkit-volume-mounts" in out or "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS 'true'" in out, out[-3000:]
    assert "exposed" in out
    run = run_playbook("gpu-stack.yml", "-e", "bcd_gpu_stack_force_conflicts=true")
    assert run.returncode == 0, run.stdout[-3000:]
    env = custom.get_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "cluster-policy")["spec"]["toolkit"]["env"]
    assert {"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS", "value": "false"} in env


def test_objects_from_client_side_kubectl_apply_are_taken_over(sandbox, cp, cpvars, tmp_path):
    sandbox.unadopt(cp, cpvars["bcd_tenant"], cpvars["bcd_pool"])
    client_side_applied(sandbox, tmp_path)
    tokens_before = len(list(cp.list_tokens(cpvars["bcd_tenant"], cpvars["bcd_pool"])))

    refused = run_playbook("adopt-cluster.yml", "-e", "bcd_adopt_foreign_objects=false")
    out = _flat(refused.stdout + refused.stderr)
    assert refused.returncode != 0, out[-3000:]
    assert "DaemonSet bcd-system/bcd: fields managed by kubectl-client-side-apply" in out, out[-3000:]
    assert "ConfigMap bcd-system/bcd-config: fields managed by kubectl-client-side-apply" in out
    assert len(list(cp.list_tokens(cpvars["bcd_tenant"], cpvars["bcd_pool"]))) == tokens_before, "no token minted"

    check = run_playbook("adopt-cluster.yml", "--check", "--diff")
    assert check.returncode == 0, check.stdout[-3000:]
    assert_takeover_previewed(check.stdout)
    ds, cm = bcd_objects(sandbox)
    assert "extra.toml" in cm["data"], "check mode changed nothing"

    run = run_playbook("adopt-cluster.yml")
    assert run.returncode == 0, run.stdout[-3000:]
    ds, cm = bcd_objects(sandbox)
    assert "varlog" not in [v["name"] for v in ds["spec"]["template"]["spec"]["volumes"]]
    assert "extra.toml" not in cm["data"]
    for obj in (ds, cm):
        assert "kubectl.kubernetes.io/last-applied-configuration" not in (obj["metadata"].get("annotations") or {})
        assert "kubectl-client-side-apply" not in [e["manager"] for e in obj["metadata"]["managedFields"]]

    again = run_playbook("adopt-cluster.yml")
    assert again.returncode == 0 and "nothing to do" in _flat(again.stdout), again.stdout[-3000:]

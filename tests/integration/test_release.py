"""release-cluster.yml against the sandbox: take bcd out of an adopted cluster, then adopt it again.

Each test starts from the cluster it names (``released_from``: adopted from the GPU operator's
default ClusterPolicy; ``released``: then released), so they pass in any order: refusals (no
confirmation, a node holding an allocation), --check, the release itself, a second run that
changes nothing, a new adoption, a pod that outlives the DaemonSet.
"""

from __future__ import annotations

import base64
import json
import re
import time

import pytest
from kubernetes import client as k8s

from tests.helpers import recap, run_playbook

# Slow (a release and a re-adoption per test): make test-long.
pytestmark = [pytest.mark.sandbox, pytest.mark.long]

NS = "bcd-system"
POLICY = ("nvidia.com", "v1", "clusterpolicies", "cluster-policy")
PREVIOUS = "bcd.dev/gpu-stack-previous"


@pytest.fixture(scope="module")
def admin(sandbox):
    from sandbox.control_plane.admin import Admin

    a = Admin.for_sandbox(sandbox.dir)
    a.clear_faults()
    yield a
    a.clear_faults()


# What gpu_stack records it changed on the GPU operator's default ClusterPolicy.
DEFAULT_PREVIOUS = {"devicePlugin": {"enabled": True}, "toolkit": {"env": None},
                    "cdi": {"enabled": False, "nriPluginEnabled": None}}


@pytest.fixture
def released_from(sandbox, cp, cpvars):
    """A cluster adopted from its ClusterPolicy in the GPU operator's default state (so gpu_stack
    records what it changes), every node reporting: adopted again from scratch unless it is so."""
    from tests.sandbox_fixtures import ensure_adopted, ensure_unadopted

    recorded = (policy(sandbox)["metadata"].get("annotations") or {}).get(PREVIOUS)
    if recorded is None or json.loads(recorded) != DEFAULT_PREVIOUS:
        ensure_unadopted(sandbox, cp, cpvars)  # the ClusterPolicy as the chart creates it, too
        with sandbox.api_client() as api:
            group, version, plural, name = POLICY
            k8s.CustomObjectsApi(api).patch_cluster_custom_object(group, version, plural, name, {
                "spec": {"devicePlugin": {"enabled": True}, "toolkit": {"env": None},
                         "cdi": {"enabled": False, "nriPluginEnabled": None}}})
    ensure_adopted(sandbox, cp, cpvars)
    return policy(sandbox)


@pytest.fixture
def released(sandbox, released_from):
    """The cluster above, released (release-cluster.yml with the ClusterPolicy put back)."""
    run = release("-e", "bcd_release_confirm=sandbox", "-e", "bcd_release_restore_gpu_stack=true")
    assert run.returncode == 0, run.stdout[-3000:]


def policy(sandbox) -> dict:
    with sandbox.api_client() as api:
        return k8s.CustomObjectsApi(api).get_cluster_custom_object(*POLICY)


def release(*args: str):
    return run_playbook("release-cluster.yml", *args)


def cp_nodes(cp, cpvars) -> dict[str, dict]:
    return {n["hostname"]: n for n in cp.list_nodes(cpvars["bcd_tenant"], cpvars["bcd_pool"])}


def daemonset(sandbox):
    with sandbox.api_client() as api:
        found = k8s.AppsV1Api(api).list_namespaced_daemon_set(NS).items
    return found[0] if found else None


def bcd_labels(sandbox) -> dict[str, list[str]]:
    with sandbox.api_client() as api:
        nodes = k8s.CoreV1Api(api).list_node().items
    return {n.metadata.name: sorted(k for k in (n.metadata.labels or {}) if k.startswith("bcd.dev/"))
            for n in nodes if any(k.startswith("bcd.dev/") for k in (n.metadata.labels or {}))}


def test_adoption_records_what_it_created(sandbox, released_from):
    with sandbox.api_client() as api:
        ns = k8s.CoreV1Api(api).read_namespace(NS)
    assert (ns.metadata.annotations or {}).get("bcd.dev/created-by") == "bcd-ansible"
    previous = json.loads(released_from["metadata"]["annotations"][PREVIOUS])
    assert previous == {"devicePlugin": {"enabled": True}, "toolkit": {"env": None},
                        "cdi": {"enabled": False, "nriPluginEnabled": None}}


def test_refused_without_the_confirmation(sandbox, released_from, cp, cpvars):
    before = cp_nodes(cp, cpvars)
    for extra in ((), ("-e", "bcd_release_confirm=another-cluster")):
        run = release(*extra)
        assert run.returncode != 0
        assert "INVALID_CONFIG: bcd_release_confirm: must be this cluster's name, sandbox" in run.stdout, run.stdout[-3000:]
        assert "Nothing was changed" in run.stdout
    assert daemonset(sandbox) is not None
    assert cp_nodes(cp, cpvars) == before


def test_a_node_holding_an_allocation_stops_it(sandbox, released_from, admin, cp, cpvars):
    gpu = sandbox.gpu_node_names()
    admin.set_allocation(gpu[0], "alloc_test_1")
    try:
        run = release("-e", "bcd_release_confirm=sandbox")
    finally:
        admin.set_allocation(gpu[0], None)
    assert run.returncode != 0
    assert f"{gpu[0]} (" in run.stdout and "holds alloc_test_1" in run.stdout, run.stdout[-3000:]
    assert "bcd_release_force" in run.stdout
    assert all(n["state"] != "removed" for n in cp_nodes(cp, cpvars).values()), "no node was removed"
    assert daemonset(sandbox) is not None, "the DaemonSet stays when the run stops"


def test_check_mode_shows_it_all_and_changes_nothing(sandbox, released_from, cp, cpvars, tmp_path):
    """--check --diff shows every change the release would make: the tokens revoked and the join
    Secret deleted (never a secret's value), the nodes that leave the control plane, the
    DaemonSet, ConfigMap and Namespace deleted, the labels removed, the ClusterPolicy put back
    (without the server's bookkeeping); and changes nothing."""
    tenant, pool = cpvars["bcd_tenant"], cpvars["bcd_pool"]
    # a new idempotency key each run: the same key would give back the token an earlier run revoked
    left = cp.create_token(tenant, pool, 1, 3600, f"left-before-a-check-{time.time_ns()}",
                           "bcd-ansible cluster=sandbox run=killed-check playbook=adopt-cluster")
    with sandbox.api_client() as api:
        k8s.CoreV1Api(api).create_namespaced_secret(NS, {
            "metadata": {"name": "bcd-join", "labels": {"app.kubernetes.io/managed-by": "bcd-ansible"}},
            "stringData": {"token": "not-a-real-token-in-check"}})
    try:
        before = cp_nodes(cp, cpvars)
        labels = bcd_labels(sandbox)
        policy_before = policy(sandbox)
        report = tmp_path / "release.json"
        run = release("-e", "bcd_release_confirm=sandbox", "-e", "bcd_release_restore_gpu_stack=true", "--check", "--diff",
                      "-e", f"bcd_report_out={report}")
        assert run.returncode == 0, run.stdout[-3000:]
        assert not report.exists(), "--check writes no report"
        out = run.stdout
        gpu = sandbox.gpu_node_names()
        assert f"Would remove {len(gpu)} node(s) from the control plane" in out
        assert "bcd.dev/node-id=" in out, "--diff shows the labels that go"
        assert f"-join token {left['id']} (bcd-ansible cluster=sandbox run=killed-check" in out, out[-8000:]
        assert f"+join token {left['id']} (bcd-ansible cluster=sandbox run=killed-check playbook=adopt-cluster): revoked" in out
        assert "-Secret bcd-system/bcd-join (holds the join token under key token)" in out
        for node in gpu:
            assert f"+{node} {before[node]['id']}: removed" in out, out[-5000:]
        for gone in ("DaemonSet bcd-system/bcd", "ConfigMap bcd-system/bcd-config", "Namespace bcd-system"):
            assert f"-# {gone}" in out, gone
        assert re.search(r"^-\s+bcd\.dev/gpu-stack-previous:", out, re.M), "the annotation dropped"
        assert "managedFields" not in out
        # no secret in the output, at any place
        assert "not-a-real-token-in-check" not in out and base64.b64encode(b"not-a-real-token-in-check").decode() not in out
        assert cpvars["bcd_api_key"] not in out + run.stderr
        assert recap(out)["sandbox"]["changed"] >= 6
        assert daemonset(sandbox) is not None
        assert cp_nodes(cp, cpvars) == before
        assert bcd_labels(sandbox) == labels
        assert policy(sandbox)["spec"] == policy_before["spec"]
        assert not cp.get_token(tenant, left["id"]).get("revokedAt")
        with sandbox.api_client() as api:
            assert k8s.CoreV1Api(api).read_namespaced_secret("bcd-join", NS).metadata.name == "bcd-join"
    finally:
        cp.revoke_token(tenant, left["id"])
        with sandbox.api_client() as api:
            k8s.CoreV1Api(api).delete_namespaced_secret("bcd-join", NS)


def test_release(sandbox, released_from, cp, cpvars, tmp_path):
    tenant, pool = cpvars["bcd_tenant"], cpvars["bcd_pool"]
    # An unrevoked token a killed run left, and its Secret.
    left = cp.create_token(tenant, pool, 1, 3600, "left-by-a-killed-run", "bcd-ansible cluster=sandbox run=killed playbook=adopt-cluster")
    with sandbox.api_client() as api:
        k8s.CoreV1Api(api).create_namespaced_secret(NS, {
            "metadata": {"name": "bcd-join", "labels": {"app.kubernetes.io/managed-by": "bcd-ansible"}},
            "stringData": {"token": "not-a-real-token"}})
    gpu = sandbox.gpu_node_names()
    # Two GPU nodes Ansible reaches (their roots are folders here), with bcd's host state.
    roots = {name: tmp_path / name for name in gpu[:2]}
    for root in roots.values():
        (root / "var/lib/bcd").mkdir(parents=True)
        (root / "var/lib/bcd/node.key").write_text("key")
    inv = tmp_path / "gpu_nodes.yml"
    inv.write_text(json.dumps({"gpu_nodes": {"hosts": {n: {"bcd_node_root": str(r)} for n, r in roots.items()}}}))
    report = tmp_path / "release.json"
    run = release("-i", "inventories/sandbox", "-i", str(inv), "-e", "bcd_release_confirm=sandbox",
                  "-e", "bcd_release_restore_gpu_stack=true", "-e", "bcd_release_host_state=true", "--diff",
                  "-e", f"bcd_report_out={report}")
    assert run.returncode == 0, run.stdout[-4000:]
    # one cluster: its bcd_report_out gets the fleet report (release has no report of its own)
    doc = json.loads(report.read_text())
    assert doc["playbook"] == "release-cluster" and doc["passed"] is True and doc["failed"] == []
    (rec,) = doc["clusters"]
    assert rec["cluster"] == "sandbox" and rec["result"] == "ok" and rec["nodes"]["removed"] == len(gpu), rec
    assert all(not (root / "var/lib/bcd").exists() and root.exists() for root in roots.values())
    assert f"Removed {len(gpu)} node(s) from the control plane" in run.stdout
    assert "Cluster sandbox is released" in run.stdout
    assert "not-a-real-token" not in run.stdout
    # No bcd object, label, Secret or live token remains; the emulator lists the nodes as removed.
    with sandbox.api_client() as api:
        names = [n.metadata.name for n in k8s.CoreV1Api(api).list_namespace().items]
    assert NS not in names
    assert bcd_labels(sandbox) == {}
    assert cp.get_token(tenant, left["id"])["revokedAt"]
    assert not [t for t in cp.list_tokens(tenant, pool) if not t.get("revokedAt") and "cluster=sandbox " in (t.get("description") or "")]
    nodes = cp_nodes(cp, cpvars)
    assert {h: n["state"] for h, n in nodes.items() if h in gpu} == dict.fromkeys(gpu, "removed")
    assert all(nodes[h]["removedAt"] for h in gpu)
    # The ClusterPolicy is as the GPU operator's chart left it.
    spec = policy(sandbox)
    assert PREVIOUS not in (spec["metadata"].get("annotations") or {})
    assert spec["spec"]["devicePlugin"] == {"enabled": True}
    assert spec["spec"]["cdi"] == {"enabled": False, "default": False}
    assert "env" not in spec["spec"]["toolkit"]


def test_second_run_changes_nothing(sandbox, released):
    run = release("-e", "bcd_release_confirm=sandbox", "-e", "bcd_release_restore_gpu_stack=true")
    assert run.returncode == 0, run.stdout[-3000:]
    assert recap(run.stdout)["sandbox"]["changed"] == 0, run.stdout[-3000:]
    n = len(sandbox.gpu_node_names())
    assert f"Removed 0 node(s) from the control plane; {n} already removed" in run.stdout
    # the closing line and the verdict say none went now, not that n did
    text = " ".join(run.stdout.split())
    assert f"every node of it removed from the control plane (0 node(s) removed by this run, {n} already removed)" in text
    assert f"released: 0 node(s) removed from the control plane ({n} already removed)" in text, run.stdout[-3000:]


def test_the_closing_line_names_a_cluster_policy_left_changed(sandbox, released_from):
    """Without bcd_release_restore_gpu_stack, the ClusterPolicy keeps adoption's values: the
    closing line says so and how to put the earlier ones back (under --check: changes nothing)."""
    run = release("-e", "bcd_release_confirm=sandbox", "--check")
    assert run.returncode == 0, run.stdout[-3000:]
    text = " ".join(run.stdout.split())
    assert ("no bcd DaemonSet, ConfigMap or Node label left. ClusterPolicy/cluster-policy keeps the values adoption "
            "set (the device plugin off, CDI on): -e bcd_release_restore_gpu_stack=true puts back the earlier ones.") in text, text[-3000:]
    assert PREVIOUS in (policy(sandbox)["metadata"].get("annotations") or {})
    assert daemonset(sandbox) is not None


def test_adopt_again(sandbox, released, cp, cpvars):
    run = run_playbook("adopt-cluster.yml")
    assert run.returncode == 0, run.stdout[-3000:]
    nodes = cp_nodes(cp, cpvars)
    gpu = sandbox.gpu_node_names()
    assert all(nodes[h]["state"] == "adopting" for h in gpu)
    assert set(bcd_labels(sandbox)) == set(gpu)


def test_a_pod_that_stays_stops_the_release_naming_it(sandbox, released_from):
    """A bcd pod a finalizer holds outlives the DaemonSet: the release stops at its wait naming the
    pod, its Node and the finalizer, and what it has not done yet; once the pod goes, a second run
    completes. The cluster is adopted again after, as the other tests leave it."""
    with sandbox.api_client() as api:
        core = k8s.CoreV1Api(api)
        pod = core.list_namespaced_pod(NS).items[0]
        name, node = pod.metadata.name, pod.spec.node_name
        core.patch_namespaced_pod(name, NS, {"metadata": {"finalizers": ["example.com/hold"]}})
        try:
            run = release("-e", "bcd_release_confirm=sandbox", "-e", '{"release_cluster_delete_timeout": 4}')
            assert run.returncode != 0, run.stdout[-3000:]
            flat = " ".join(run.stdout.split())
            assert f"1 pod(s) of DaemonSet {NS}/bcd are still there 4s after its deletion" in run.stdout.replace("\n        ", " ")
            assert (f"1 pod(s) of DaemonSet {NS}/bcd are still there 4s after its deletion "
                    f"(release_cluster_delete_timeout): pod {name} on Node {node}, deleted at ") in flat, flat[-3000:]
            assert "finalizers example.com/hold" in flat
            assert "Not done: the ConfigMap, the bcd.dev/* Node labels" in flat
            # foreground deletion: the DaemonSet goes once its pods have
            assert daemonset(sandbox).metadata.deletion_timestamp is not None
            assert bcd_labels(sandbox)  # not removed yet: the run stopped before
        finally:
            core.patch_namespaced_pod(name, NS, {"metadata": {"finalizers": None}})
    run = release("-e", "bcd_release_confirm=sandbox")
    assert run.returncode == 0, run.stdout[-3000:]
    assert bcd_labels(sandbox) == {} and daemonset(sandbox) is None
    run = run_playbook("adopt-cluster.yml")
    assert run.returncode == 0, run.stdout[-3000:]


def test_an_identity_that_may_not_read_cluster_policies_still_releases_and_says_so(sandbox, released_from, tmp_path):
    """A release run by an identity whose RBAC covers bcd's objects but not nvidia.com: the
    ClusterPolicy read that only informs the closing line is refused (403), the release goes on
    (--check: nothing changes) and the closing line says what is not known and how to see it."""
    import yaml

    name = f"releaser-{int(time.time())}"
    role = {"metadata": {"name": name}, "rules": [
        {"apiGroups": ["", "apps", "coordination.k8s.io", "node.k8s.io", "policy", "scheduling.k8s.io",
                       "admissionregistration.k8s.io", "apiextensions.k8s.io", "authorization.k8s.io"],
         "resources": ["*"], "verbs": ["*"]},
        {"nonResourceURLs": ["*"], "verbs": ["get"]}]}
    with sandbox.api_client() as api:
        core, rbac = k8s.CoreV1Api(api), k8s.RbacAuthorizationV1Api(api)
        core.create_namespaced_service_account("default", {"metadata": {"name": name}})
        rbac.create_cluster_role(role)
        rbac.create_cluster_role_binding({
            "metadata": {"name": name}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                                    "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "default"}]})
        try:
            token = core.create_namespaced_service_account_token(
                name, "default", {"spec": {"expirationSeconds": 3600}}).status.token
            admin = yaml.safe_load((sandbox.dir / "kubeconfig").read_text())
            admin["users"] = [{"name": name, "user": {"token": token}}]
            admin["contexts"] = [{"name": name, "context": {"cluster": admin["clusters"][0]["name"], "user": name}}]
            admin["current-context"] = name
            kubeconfig = tmp_path / "releaser.kubeconfig"
            kubeconfig.write_text(yaml.safe_dump(admin))
            kubeconfig.chmod(0o600)
            run = release("-e", "bcd_release_confirm=sandbox", "--check", "-e", f"bcd_kubeconfig={kubeconfig}")
        finally:
            rbac.delete_cluster_role_binding(name)
            rbac.delete_cluster_role(name)
            core.delete_namespaced_service_account(name, "default")
    assert run.returncode == 0, run.stdout[-5000:]
    text = " ".join(run.stdout.split())
    assert token not in run.stdout
    # the API server's own reason, unquoted from its response
    assert ("no bcd DaemonSet, ConfigMap or Node label left. ClusterPolicies could not be read (clusterpolicies.nvidia.com "
            f'is forbidden: User "system:serviceaccount:default:{name}" cannot list resource "clusterpolicies" in API '
            'group "nvidia.com" at the cluster scope), so whether one keeps the values adoption set (the device plugin '
            "off, CDI on) is not known: kubectl get clusterpolicies.nvidia.com -o yaml, with an identity that may, shows "
            f"the annotation {PREVIOUS} on one that does.") in text, text[-3000:]
    assert PREVIOUS in (policy(sandbox)["metadata"].get("annotations") or {})
    assert daemonset(sandbox) is not None

"""The sandbox is a real Kubernetes control plane with simulated GPU nodes.

Every test talks to the real kube-apiserver of the sandbox (the session fixture ``sandbox``), or
to a sandbox of its own (lifecycle, failure, 1000 nodes) brought up with ``python -m sandbox``.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import ssl
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from kubernetes import client
from kubernetes.client.rest import ApiException

from sandbox import build, cluster, proc
from sandbox.api import Sandbox

ROOT = Path(__file__).resolve().parents[2]
DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64
DIGEST_DEAD = "sha256:dead" + "0" * 60
IMAGE = "registry.example.com/sandbox/app@{}"

pytestmark = pytest.mark.sandbox


def wait_for(what: str, check, timeout: float = 120, interval: float = 0.5):
    """Poll ``check()`` until it returns a truthy value; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


@pytest.fixture
def namespace(sandbox):
    """A fresh namespace (privileged by default Pod Security), deleted afterwards."""
    names = []

    def make(prefix: str = "t", labels: dict | None = None) -> str:
        name = unique(prefix)
        sandbox.create_namespace(name, labels)
        names.append(name)
        return name

    yield make
    with sandbox.api_client() as api:
        for name in names:
            client.CoreV1Api(api).delete_namespace(name)


def run_sandbox(sdir: Path, *args: str, env: dict | None = None, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sandbox", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "SANDBOX_DIR": str(sdir), **(env or {})}, check=False)


# ---------------------------------------------------------------------------------- nodes, version


def test_kubectl_lists_every_node_ready_on_the_release_it_was_made_with(sandbox):
    gpu_count = sandbox.state["gpu_nodes"]
    if os.environ.get("SANDBOX_NODES"):
        assert gpu_count >= int(os.environ["SANDBOX_NODES"])
    out = sandbox.kubectl("get", "nodes", "-o", "json").stdout
    nodes = {n["metadata"]["name"]: n for n in json.loads(out)["items"]}
    expected = {f"gpu-node-{i}" for i in range(1, gpu_count + 1)} | {"cpu-node-1"}
    assert expected <= set(nodes)
    kwok_nodes = {name for name, n in nodes.items() if n["metadata"]["labels"].get("type") == "kwok"}
    assert kwok_nodes == expected, "exactly SANDBOX_NODES GPU nodes plus one CPU node"
    for name in expected:
        conds = {c["type"]: c["status"] for c in nodes[name]["status"]["conditions"]}
        assert conds["Ready"] == "True", name
    table = sandbox.kubectl("get", "nodes", "--no-headers").stdout.splitlines()
    assert sum(1 for line in table if line.split()[1] == "Ready") >= gpu_count + 1

    # the release SANDBOX_KUBE_VERSION asks for, else the newest supported one
    want = build.version_of(build.BY_NAME["kube-apiserver"], build.kube_minor())
    version = json.loads(sandbox.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == f"v{want}" == f"v{sandbox.kube_version()}"
    assert version["serverVersion"]["minor"] == want.split(".")[1]
    assert version["clientVersion"]["gitVersion"] == version["serverVersion"]["gitVersion"]
    node = nodes[sorted(expected)[0]]
    assert node["status"]["nodeInfo"]["kubeletVersion"] == f"v{want}"


def test_gpu_nodes_are_labelled_with_capacity_but_no_allocatable_gpus(sandbox):
    with sandbox.api_client() as api:
        nodes = {n.metadata.name: n for n in client.CoreV1Api(api).list_node(label_selector="type=kwok").items}
    gpu = [n for name, n in nodes.items() if name.startswith("gpu-node-")]
    assert gpu
    for node in gpu:
        labels = node.metadata.labels
        assert labels["nvidia.com/gpu.present"] == "true"
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        assert labels["nvidia.com/gpu.count"] == "8"
        assert node.metadata.annotations["kwok.x-k8s.io/node"] == "fake"
        assert node.status.capacity["nvidia.com/gpu"] == "8"
        assert "nvidia.com/gpu" not in node.status.allocatable
        assert not node.spec.taints
        assert {a.type for a in node.status.addresses} >= {"InternalIP", "Hostname"}
    cpu = nodes["cpu-node-1"]
    assert not any(k.startswith("nvidia.com/") for k in cpu.metadata.labels)
    assert "nvidia.com/gpu" not in cpu.status.capacity
    ips = [a.address for n in nodes.values() for a in n.status.addresses if a.type == "InternalIP"]
    assert len(ips) == len(set(ips)), "every node has its own InternalIP"


def test_runtimeclass_and_cluster_policy_in_the_gpu_operator_default_state(sandbox):
    """The sandbox creates the ClusterPolicy in the GPU operator's default state. Earlier tests of
    the session configure it (adopt-cluster.yml does), so it is deleted and created again first."""
    with sandbox.api_client() as api:
        try:
            client.CustomObjectsApi(api).delete_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "cluster-policy")
        except client.exceptions.ApiException as exc:
            assert exc.status == 404, exc
        wait_for("the ClusterPolicy to go", lambda: _no_policy(api), timeout=30)
    cluster.ensure_objects(sandbox.dir)
    with sandbox.api_client() as api:
        rc = client.NodeV1Api(api).read_runtime_class("nvidia")
        assert rc.handler == "nvidia"
        crd = client.ApiextensionsV1Api(api).read_custom_resource_definition("clusterpolicies.nvidia.com")
        assert crd.spec.scope == "Cluster"
        assert [v.name for v in crd.spec.versions] == ["v1"]
        policy = client.CustomObjectsApi(api).get_cluster_custom_object(
            "nvidia.com", "v1", "clusterpolicies", "cluster-policy")
    spec = policy["spec"]
    assert spec["devicePlugin"]["enabled"] is True
    assert spec["toolkit"]["enabled"] is True
    assert "env" not in spec["toolkit"]
    assert spec["cdi"]["enabled"] is False
    assert "nriPluginEnabled" not in spec["cdi"]


def _no_policy(api) -> bool:
    try:
        client.CustomObjectsApi(api).get_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "cluster-policy")
    except client.exceptions.ApiException as exc:
        return exc.status == 404
    return False


# ---------------------------------------------------------------------------------- DaemonSets


def _daemonset(name: str, image: str) -> dict:
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"nodeSelector": {"nvidia.com/gpu.present": "true"},
                         "containers": [{"name": "app", "image": image}]},
            },
        },
    }


def test_daemonset_on_gpu_nodes_becomes_available_and_rolls_an_image_change(sandbox, namespace):
    ns = namespace("ds")
    n = len(sandbox.gpu_node_names())
    assert n >= 1
    with sandbox.api_client() as api:
        apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
        apps.create_namespaced_daemon_set(ns, _daemonset("gpu-ds", IMAGE.format(DIGEST_A)))

        def settled(image: str, rolling: bool = False):
            ds = apps.read_namespaced_daemon_set("gpu-ds", ns)
            s = ds.status
            # maxUnavailable bounds an update, not the first creation (every new pod starts unavailable)
            if rolling:
                assert (s.number_unavailable or 0) <= 1, f"maxUnavailable 1 exceeded: {s}"
            done = (s.observed_generation == ds.metadata.generation and s.desired_number_scheduled == n
                    and s.number_available == n and s.updated_number_scheduled == n)
            return ds if done else None

        ds = wait_for(f"DaemonSet gpu-ds available on {n} GPU nodes", lambda: settled(DIGEST_A))
        assert ds.status.number_available == ds.status.desired_number_scheduled == n
        pods = core.list_namespaced_pod(ns, label_selector="app=gpu-ds").items
        assert sorted(p.spec.node_name for p in pods) == sorted(sandbox.gpu_node_names())

        apps.patch_namespaced_daemon_set("gpu-ds", ns, {"spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": IMAGE.format(DIGEST_B)}]}}}})
        ds = wait_for("RollingUpdate to the new image", lambda: settled(DIGEST_B, rolling=True))
        assert ds.status.updated_number_scheduled == n
        pods = [p for p in core.list_namespaced_pod(ns, label_selector="app=gpu-ds").items
                if not p.metadata.deletion_timestamp]
        assert len(pods) == n
        assert {p.spec.containers[0].image for p in pods} == {IMAGE.format(DIGEST_B)}
        assert all(c.status == "True" for p in pods for c in p.status.conditions if c.type == "Ready")


def test_dead_digest_pod_runs_but_never_turns_ready(sandbox, namespace):
    ns = namespace("dead")
    with sandbox.api_client() as api:
        core = client.CoreV1Api(api)
        for name, digest in (("good", DIGEST_A), ("dead", DIGEST_DEAD)):
            core.create_namespaced_pod(ns, {"metadata": {"name": name}, "spec": {
                "nodeSelector": {"nvidia.com/gpu.present": "true"},
                "initContainers": [{"name": "init", "image": IMAGE.format(digest)}],
                "containers": [{"name": "app", "image": IMAGE.format(digest)}]}})

        def ready(pod) -> str | None:
            return next((c.status for c in pod.status.conditions or [] if c.type == "Ready"), None)

        wait_for("pod good Ready", lambda: ready(core.read_namespaced_pod("good", ns)) == "True")
        dead = wait_for("pod dead Running", lambda: (p := core.read_namespaced_pod("dead", ns)).status.phase
                        == "Running" and p)
        time.sleep(3)  # KWOK played the good pod's stage long ago: the dead one has no stage left
        dead = core.read_namespaced_pod("dead", ns)
        assert dead.status.phase == "Running"
        assert ready(dead) == "False"
        status = dead.status.container_statuses[0]
        assert status.ready is False and status.state.running is not None
        assert dead.status.init_container_statuses[0].state.terminated.reason == "Completed"


def test_a_pod_marked_not_ready_turns_ready_again_unless_its_containers_are_not(sandbox, namespace):
    """While a node's lease lapses the node lifecycle controller sets its pods' Ready to False;
    once the node is back the kubelet (here KWOK) reports them Ready again, but not a dead one."""
    ns = namespace("again")
    with sandbox.api_client() as api:
        core = client.CoreV1Api(api)
        for name, digest in (("good", DIGEST_A), ("dead", DIGEST_DEAD)):
            core.create_namespaced_pod(ns, {"metadata": {"name": name}, "spec": {
                "nodeSelector": {"nvidia.com/gpu.present": "true"},
                "containers": [{"name": "app", "image": IMAGE.format(digest)}]}})

        def ready(name: str) -> str | None:
            pod = core.read_namespaced_pod(name, ns)
            if pod.status.phase != "Running":
                return None
            return next((c.status for c in pod.status.conditions or [] if c.type == "Ready"), None)

        wait_for("pod good Ready", lambda: ready("good") == "True")
        wait_for("pod dead Running", lambda: ready("dead") == "False")
        not_ready = {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "NodeNotReady"}]}}
        core.patch_namespaced_pod_status("good", ns, not_ready)
        core.patch_namespaced_pod_status("dead", ns, not_ready)
        wait_for("pod good Ready again", lambda: ready("good") == "True", timeout=30)
        time.sleep(2)
        assert ready("dead") == "False"


def test_node_down_and_node_up_from_the_command_line(sandbox):
    """What the docs tell a user to type to try a rollout with a node down."""
    node = sandbox.gpu_node_names()[-1]

    def ready() -> str:
        got = client.CoreV1Api(sandbox.api_client()).read_node(node)
        return next(c.status for c in got.status.conditions if c.type == "Ready")

    down = run_sandbox(sandbox.dir, "--dir", str(sandbox.dir), "node-down", node)
    try:
        assert down.returncode == 0, down.stderr
        assert f"{node} is NotReady" in down.stdout and ready() != "True"
        # the way back names the same sandbox
        assert f"`python -m sandbox --dir {sandbox.dir} node-up {node}`" in down.stdout, down.stdout
        time.sleep(2)  # KWOK's next heartbeat does not bring it back
        assert ready() != "True"
    finally:
        up = run_sandbox(sandbox.dir, "node-up", node)
    assert up.returncode == 0, up.stderr
    assert ready() == "True"
    missing = run_sandbox(sandbox.dir, "node-down", "no-such-node")
    assert missing.returncode == 1 and "no node no-such-node (its nodes: " in missing.stderr, missing.stderr


def test_the_baseline_keeps_its_own_hold_policy_and_takes_a_foreign_one_away(sandbox):
    """Between tests the baseline deletes admission policies a test left, but not the sandbox's
    own (the hold), which it puts back when a test took it away."""
    from sandbox import baseline

    own = baseline.HOLD_POLICY
    with sandbox.api_client() as api:
        admission = client.AdmissionregistrationV1Api(api)
        admission.create_validating_admission_policy({
            "metadata": {"name": "left-by-a-test"},
            "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                             "operations": ["CREATE"], "resources": ["configmaps"]}]},
                     "validations": [{"expression": "true"}]}})
        admission.delete_validating_admission_policy_binding(own)
        done = baseline.restore(sandbox.dir)
        names = {p.metadata.name for p in admission.list_validating_admission_policy().items}
        bindings = {b.metadata.name for b in admission.list_validating_admission_policy_binding().items}
    assert names == {own} and bindings == {own}, (names, bindings, done)
    assert "deleted validatingadmissionpolicies left-by-a-test" in done and f"created the hold policy {own} again" in done


def test_a_heartbeat_written_while_the_hold_is_taken_does_not_undo_it(sandbox):
    """KWOK can fire a heartbeat (Ready) it queued before it saw the hold, minutes later under
    load: the API server refuses it (a stopped kubelet never reports Ready), so the Node stays
    NotReady until node-up, and then turns Ready again."""
    node = sandbox.gpu_node_names()[0]
    core = client.CoreV1Api(sandbox.api_client())

    def ready() -> str:
        return next(c.status for c in core.read_node_status(node).status.conditions if c.type == "Ready")

    cond = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}
    sandbox.set_node_not_ready(node)
    try:
        # as KWOK's queued job does, after the hold has settled
        with pytest.raises(ApiException) as refused:
            core.patch_node_status(node, {"status": {"conditions": [cond]}})
        assert refused.value.status == 422, refused.value
        assert "the sandbox holds this Node NotReady" in refused.value.body, refused.value.body
        assert ready() == "False", "the stale heartbeat's Ready stayed"
        # what a kubelet may write while down (Ready False) is still taken
        core.patch_node_status(node, {"status": {"conditions": [{**cond, "status": "False"}]}})
    finally:
        sandbox.release_node(node)
    assert ready() == "True"


def test_a_pod_on_a_down_node_is_not_ready_and_stays_terminating_until_the_node_is_back(sandbox, namespace):
    """As on a real cluster whose kubelet cannot run pods: on a Node ``set_node_not_ready`` holds,
    its pod is marked not Ready (as the node lifecycle controller marks a NotReady Node's pods)
    and nothing readies it again, and a deleted pod stays Terminating. Once ``release_node``
    brings the Node back, the pod is deleted."""
    ns = namespace("down")
    node = sandbox.gpu_node_names()[0]
    with sandbox.api_client() as api:
        core = client.CoreV1Api(api)
        core.create_namespaced_pod(ns, {"metadata": {"name": "p"}, "spec": {
            "nodeName": node, "containers": [{"name": "app", "image": IMAGE.format(DIGEST_A)}]}})

        def ready() -> str | None:
            pod = core.read_namespaced_pod("p", ns)
            return next((c.status for c in pod.status.conditions or [] if c.type == "Ready"), None)

        wait_for("pod p Ready", lambda: ready() == "True")
        sandbox.set_node_not_ready(node)
        try:
            assert ready() == "False"
            time.sleep(3)  # KWOK's stages had time to ready it again: none may
            assert ready() == "False"
            core.delete_namespaced_pod("p", ns)
            time.sleep(3)
            pod = core.read_namespaced_pod("p", ns)  # still there: no kubelet confirms the delete
            assert pod.metadata.deletion_timestamp is not None
        finally:
            sandbox.release_node(node)
        wait_for("pod p gone once the node is back", lambda: not core.list_namespaced_pod(
            ns, field_selector="metadata.name=p").items)
        assert not [p for p in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
                    if (p.metadata.annotations or {}).get(cluster.NODE_DOWN)]


def test_daemonset_rollout_to_a_dead_digest_stalls_at_max_unavailable(sandbox, namespace):
    ns = namespace("stall")
    n = len(sandbox.gpu_node_names())
    with sandbox.api_client() as api:
        apps = client.AppsV1Api(api)
        apps.create_namespaced_daemon_set(ns, _daemonset("gpu-ds", IMAGE.format(DIGEST_A)))
        wait_for("DaemonSet available", lambda: apps.read_namespaced_daemon_set("gpu-ds", ns).status.number_available == n)
        apps.patch_namespaced_daemon_set("gpu-ds", ns, {"spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": IMAGE.format(DIGEST_DEAD)}]}}}})

        def stalled():
            s = apps.read_namespaced_daemon_set("gpu-ds", ns).status
            return s if s.updated_number_scheduled == 1 and (s.number_unavailable or 0) == 1 else None

        wait_for("one updated pod that never turns available", stalled)
        time.sleep(3)
        s = apps.read_namespaced_daemon_set("gpu-ds", ns).status
        assert s.updated_number_scheduled == 1
        assert s.number_available == n - 1


# ---------------------------------------------------------------------------------- admission


def _privileged_hostpath_pod(name: str) -> dict:
    return {"metadata": {"name": name}, "spec": {
        "containers": [{"name": "app", "image": IMAGE.format(DIGEST_A), "securityContext": {"privileged": True},
                        "volumeMounts": [{"name": "host", "mountPath": "/host"}]}],
        "volumes": [{"name": "host", "hostPath": {"path": "/", "type": "Directory"}}]}}


def test_pod_security_refuses_privileged_hostpath_in_restricted_and_admits_it_in_privileged(sandbox, namespace):
    restricted = namespace("restricted", {"pod-security.kubernetes.io/enforce": "restricted"})
    privileged = namespace("privileged", {"pod-security.kubernetes.io/enforce": "privileged"})
    with sandbox.api_client() as api:
        core = client.CoreV1Api(api)
        with pytest.raises(ApiException) as refused:
            core.create_namespaced_pod(restricted, _privileged_hostpath_pod("priv"))
        assert refused.value.status == 403
        message = json.loads(refused.value.body)["message"]
        assert 'violates PodSecurity "restricted:latest"' in message
        assert "privileged" in message and "hostPath" in message
        with pytest.raises(ApiException):
            core.read_namespaced_pod("priv", restricted)

        core.create_namespaced_pod(privileged, _privileged_hostpath_pod("priv"))
        pod = wait_for("admitted privileged pod Running",
                       lambda: (p := core.read_namespaced_pod("priv", privileged)).status.phase == "Running" and p)
        assert pod.spec.containers[0].security_context.privileged is True


def test_kubectl_apply_server_side_dry_run(sandbox, namespace):
    ns = namespace("dry")
    manifest = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "probe", "namespace": ns},
                           "data": {"k": "v"}})
    out = sandbox.kubectl("apply", "--dry-run=server", "-f", "-", input=manifest)
    assert "configmap/probe created (server dry run)" in out.stdout
    got = sandbox.kubectl("get", "configmap", "probe", "-n", ns, check=False)
    assert got.returncode != 0 and "NotFound" in got.stderr

    bad = _daemonset("bad", IMAGE.format(DIGEST_A))
    bad["metadata"]["namespace"] = ns
    bad["spec"]["selector"]["matchLabels"] = {"app": "other"}
    refused = sandbox.kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(bad), check=False)
    assert refused.returncode != 0
    assert "selector` does not match template `labels`" in refused.stderr


def test_new_namespace_gets_a_service_account_whose_token_authenticates(sandbox, namespace):
    ns = namespace("sa")
    token = sandbox.kubectl("create", "token", "default", "-n", ns).stdout.strip()
    who = subprocess.run(
        [str(sandbox.kubectl_path), f"--server={sandbox.server}", f"--certificate-authority={sandbox.ca_file}",
         f"--token={token}", "--kubeconfig=/dev/null", "auth", "whoami", "-o", "json"],
        capture_output=True, text=True, check=True)
    assert json.loads(who.stdout)["status"]["userInfo"]["username"] == f"system:serviceaccount:{ns}:default"
    ca = sandbox.kubectl("get", "configmap", "kube-root-ca.crt", "-n", ns, "-o", "jsonpath={.data.ca\\.crt}").stdout
    assert ca.strip() == sandbox.ca_file.read_text().strip()


# ---------------------------------------------------------------------------------- PKI


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost", "kubernetes", "kubernetes.default",
                                  "kubernetes.default.svc", "10.0.0.1"])
def test_api_server_certificate_passes_strict_tls_for_each_name(sandbox, name):
    ctx = ssl.create_default_context(cafile=str(sandbox.ca_file))
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT
    port = sandbox.state["ports"]["apiserver"]
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname=name) as tls:
        assert tls.version() in ("TLSv1.2", "TLSv1.3")


def test_pki_extensions_and_private_file_modes(sandbox):
    pki = sandbox.dir / "pki"
    ca = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    bc = ca.extensions.get_extension_for_class(x509.BasicConstraints)
    assert bc.critical and bc.value.ca
    assert ca.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    ca_ski = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    for leaf, eku in (("apiserver", ExtendedKeyUsageOID.SERVER_AUTH), ("admin", ExtendedKeyUsageOID.CLIENT_AUTH),
                      ("kube-controller-manager", ExtendedKeyUsageOID.CLIENT_AUTH),
                      ("kube-scheduler", ExtendedKeyUsageOID.CLIENT_AUTH), ("kwok", ExtendedKeyUsageOID.CLIENT_AUTH)):
        cert = x509.load_pem_x509_certificate((pki / f"{leaf}.crt").read_bytes())
        assert eku in cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value, leaf
        aki = cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
        assert aki.key_identifier == ca_ski.digest, leaf
        cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
    admin = x509.load_pem_x509_certificate((pki / "admin.crt").read_bytes())
    assert [a.value for a in admin.subject.get_attributes_for_oid(x509.NameOID.ORGANIZATION_NAME)] == ["system:masters"]
    for secret in [*pki.glob("*.key"), *pki.glob("*.kubeconfig"), sandbox.kubeconfig]:
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600, secret
    assert stat.S_IMODE(sandbox.dir.stat().st_mode) == 0o700


def test_components_listen_on_loopback_only(sandbox):
    pids = {proc.pid_of(sandbox.dir, name) for name in cluster.COMPONENTS} - {None}
    inodes = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    listening = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                listening.append(fields[1].split(":")[0])
    assert listening, "the components listen somewhere"
    assert set(listening) <= {"0100007F", "00000000000000000000000001000000"}, listening


# ---------------------------------------------------------------------------------- lifecycle


def _pids(sdir: Path) -> dict[str, int]:
    return {name: proc.pid_of(sdir, name) for name in proc.names(sdir)}


def _pgid_members(pgids: set[int]) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[2]) in pgids:
                found.append(int(entry.name))
    return found


def test_lifecycle_up_twice_status_add_nodes_down(tmp_path_factory):
    sdir = tmp_path_factory.mktemp("lifecycle") / "sandbox"
    first = run_sandbox(sdir, "up", env={"SANDBOX_NODES": "1"})
    try:
        assert first.returncode == 0, first.stdout + first.stderr
        pids = _pids(sdir)
        assert set(cluster.COMPONENTS) <= set(pids) and all(pids.values())

        second = run_sandbox(sdir, "up", env={"SANDBOX_NODES": "1"})
        assert second.returncode == 0, second.stdout + second.stderr
        assert _pids(sdir) == pids, "a second up starts nothing new"
        assert "started" not in second.stdout

        # another release for a running sandbox is refused, never silently ignored
        running = cluster.kube_minor_of(sdir)
        other = next(m for m in build.kube_versions() if m != running)
        refused = run_sandbox(sdir, "up", env={"SANDBOX_KUBE_VERSION": other})
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert (f"runs Kubernetes {cluster.kube_version_of(sdir)}, not the {build.kube_versions()[other]} "
                "SANDBOX_KUBE_VERSION asks for; bring it down first") in refused.stderr, refused.stderr
        assert _pids(sdir) == pids

        st = run_sandbox(sdir, "status")
        assert st.returncode == 0, st.stdout + st.stderr
        assert "nodes: 2 (2 Ready; 1 GPU, 1 CPU-only)" in st.stdout

        added = run_sandbox(sdir, "add-nodes", "2")
        assert added.returncode == 0, added.stdout + added.stderr
        assert "gpu-node-2, gpu-node-3" in added.stdout
        nodes = {n["name"]: n for n in cluster.list_nodes(sdir)}
        assert set(nodes) == {"gpu-node-1", "gpu-node-2", "gpu-node-3", "cpu-node-1"}
        assert all(n["ready"] for n in nodes.values())
        assert nodes["gpu-node-3"]["labels"]["nvidia.com/gpu.present"] == "true"
        assert cluster.load_state(sdir)["gpu_nodes"] == 3

        env = run_sandbox(sdir, "env")
        assert f"export KUBECONFIG={sdir / 'kubeconfig'}" in env.stdout

        audited = run_sandbox(sdir, "up", env={"SANDBOX_AUDIT": "1"})
        assert audited.returncode == 0, audited.stdout + audited.stderr
        now = _pids(sdir)
        assert now["kube-apiserver"] != pids["kube-apiserver"], "the API server restarts with the audit log"
        assert {k: v for k, v in now.items() if k != "kube-apiserver"} == {
            k: v for k, v in pids.items() if k != "kube-apiserver"}
        assert "default" in Sandbox(sdir).kubectl("get", "ns", "default").stdout
        audit = sdir / "logs" / "audit.log"

        def audit_events() -> list[dict]:
            text = audit.read_text()
            return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]

        # The ResponseComplete event is written once the response is out: poll for it.
        wait_for("kubectl's request in the audit log", lambda: any(
            e.get("userAgent", "").startswith("kubectl/") and e["requestURI"] == "/api/v1/namespaces/default"
            for e in audit_events()), timeout=20)
        assert all(e["level"] == "Metadata" for e in audit_events())
        assert not any("/leases/" in e["requestURI"] and "kube-node-lease" in e["requestURI"]
                       for e in audit_events())
        assert stat.S_IMODE(audit.stat().st_mode) == 0o600
    finally:
        pids = _pids(sdir) if sdir.exists() else {}
        down = run_sandbox(sdir, "down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert not sdir.exists()
    assert pids
    assert _pgid_members({p for p in pids.values() if p}) == [], "no process the sandbox started is left"
    after = run_sandbox(sdir, "status")
    assert after.returncode != 0


def test_a_component_that_fails_to_start_is_named_with_its_log(tmp_path_factory):
    base = tmp_path_factory.mktemp("failing")
    fake = base / "etcd"
    fake.write_text('#!/bin/sh\nif [ "$1" = "--version" ]; then echo "etcd Version: 3.6.16"; exit 0; fi\n'
                    'echo "fake etcd: cannot open the data directory" >&2\nexit 3\n')
    fake.chmod(0o755)
    sdir = base / "sandbox"
    result = run_sandbox(sdir, "up", env={"SANDBOX_ETCD": str(fake), "SANDBOX_NODES": "1"})
    try:
        assert result.returncode == 1
        assert "sandbox: etcd failed to start" in result.stderr
        assert "fake etcd: cannot open the data directory" in result.stderr
        assert "Traceback" not in result.stderr
    finally:
        down = run_sandbox(sdir, "down")
    assert down.returncode == 0, down.stderr
    assert not sdir.exists()


# ---------------------------------------------------------------------------------- scale


@pytest.mark.long
def test_a_thousand_nodes_come_up_and_a_daemonset_reaches_them_all(tmp_path_factory):
    sdir = tmp_path_factory.mktemp("thousand") / "sandbox"
    t0 = time.monotonic()
    result = run_sandbox(sdir, "up", env={"SANDBOX_NODES": "1000"}, timeout=1800)
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        t_up = time.monotonic() - t0
        with cluster.api_client(sdir) as api:
            apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
            core.create_namespace({"metadata": {"name": "scale"}})
            wait_for("default ServiceAccount", lambda: core.list_namespaced_service_account("scale").items)
            apps.create_namespaced_daemon_set("scale", _daemonset("gpu-ds", IMAGE.format(DIGEST_A)))
            t1 = time.monotonic()

            def done():
                s = apps.read_namespaced_daemon_set("gpu-ds", "scale").status
                return s if s.desired_number_scheduled == 1000 and s.number_available == 1000 else None

            wait_for("1000 available pods", done, timeout=1800, interval=2)
            t_ds = time.monotonic() - t1
        pids = [pid for pid in _pids(sdir).values() if pid]
        rss, peak = sum(_mem_kib(p, "VmRSS") for p in pids), sum(_mem_kib(p, "VmHWM") for p in pids)
        print(f"\n1000 nodes: up in {t_up:.0f}s, DaemonSet available on 1000 nodes in {t_ds:.0f}s; "
              f"sandbox processes RSS {rss / 1024:.0f} MiB now, sum of their peaks {peak / 1024:.0f} MiB")
    finally:
        down = run_sandbox(sdir, "down")
    assert down.returncode == 0, down.stderr


def _mem_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0

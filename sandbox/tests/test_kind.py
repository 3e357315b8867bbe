"""The kind test bed (``python -m sandbox kind up``): real kubelets under podman.

Brings the kind cluster up (building what the cache lacks: a cold build takes minutes) and checks
it against what the real nodes do: three nodes Ready with the pinned kubelet; a pod with
``runtimeClassName: nvidia`` runs on a worker through the stand-in ``nvidia-container-runtime``;
the same pod on the control-plane node, whose containerd has no ``nvidia`` handler, fails with the
kubelet's own error; pods on different nodes reach each other; CoreDNS resolves; PodSecurity
admission enforces a namespace's level; the RuntimeClass and ClusterPolicy exist. Skipped, with
the reason, where the test bed cannot run (never built here and BCD_KIND=1 not set, not root, packages missing and no apt-get, no Go, or
too few of root's inotify instances free for the kubelets).
A cluster that was up before the test is left up; one the test started is deleted afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
import uuid

import pytest

from sandbox import cluster, kind

pytestmark = pytest.mark.long


def _cannot_run() -> str | None:
    # A cold build takes about 20 minutes on 2 cores: more than a CI job can spare beside make
    # test, so it only starts when asked for (make kind builds and caches it first).
    if os.environ.get("BCD_KIND") != "1" and not (kind.cache() / "stamps").is_dir():
        return "the kind test bed is not built here: run `make kind` once, or set BCD_KIND=1 to build it"
    if os.geteuid() != 0:
        return "the kind test bed runs rootful podman: run as root"
    missing = kind.missing_host_packages()
    if missing and not shutil.which("apt-get"):
        return f"the kind test bed needs {', '.join(missing)} and there is no apt-get to install them"
    if not shutil.which("go") and not (kind.build.cache_dir() / "kind").exists():
        return "the kind test bed builds kind, kubelet and CoreDNS with Go, which is not on PATH"
    return None


@contextlib.contextmanager
def kind_bed(attach: bool = False):
    """The kind test bed up (``attach``: with the emulator and KWOK nodes); yields its API client.
    Skips, with the reason, where it cannot run; a cluster this started is deleted afterwards."""
    reason = _cannot_run()
    if reason:
        pytest.skip(reason)
    was_up = kind.exists()
    if not was_up and kind.inotify_shortfall():
        pytest.skip(kind.inotify_shortfall())
    kind.up(attach=attach)
    api = cluster.api_client(kind.kind_dir())
    try:
        yield api
    finally:
        api.close()
        if not was_up:
            assert kind.down() == []


@pytest.fixture(scope="module")
def bed():
    with kind_bed() as api:
        yield api


@pytest.fixture(scope="module")
def core(bed):
    from kubernetes import client

    return client.CoreV1Api(bed)


@pytest.fixture
def ns(core):
    name = f"kind-test-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def _pod(name: str, node: str, command: str, runtime_class: str | None = None) -> dict:
    spec = {
        "nodeName": node, "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
        "tolerations": [{"operator": "Exists"}],
        "containers": [{"name": "main", "image": kind.TOOLBOX, "imagePullPolicy": "Never",
                        "command": ["sh", "-c", command]}],
    }
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    return {"metadata": {"name": name}, "spec": spec}


def _wait_phase(core, ns: str, name: str, phases: set[str], timeout: float = 120):
    deadline = time.monotonic() + timeout
    while True:
        pod = core.read_namespaced_pod(name, ns)
        if pod.status.phase in phases:
            return pod
        if time.monotonic() > deadline:
            events = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
            raise AssertionError(f"pod {name} is {pod.status.phase}, not {phases}, after {timeout}s; events: "
                                 f"{[(e.reason, e.message) for e in events]}")
        time.sleep(1)


def _run(core, ns: str, name: str, node: str, command: str, runtime_class: str | None = None) -> str:
    core.create_namespaced_pod(ns, _pod(name, node, command, runtime_class))
    pod = _wait_phase(core, ns, name, {"Succeeded", "Failed"})
    logs = core.read_namespaced_pod_log(name, ns)
    assert pod.status.phase == "Succeeded", f"{name} on {node}: {pod.status.phase}: {logs}"
    return logs


def test_three_real_nodes_ready(core):
    nodes = {n.metadata.name: n for n in core.list_node().items}
    assert sorted(nodes) == sorted(kind.node_names())
    for name, node in nodes.items():
        ready = [c for c in node.status.conditions if c.type == "Ready"]
        assert ready and ready[0].status == "True", f"{name}: {ready}"
        assert node.status.node_info.kubelet_version == f"v{kind.kube_version()}"
        assert node.status.node_info.container_runtime_version.startswith("containerd://")
        assert node.spec.pod_cidr, f"{name} has no pod CIDR"


def test_nvidia_pod_runs_on_a_worker_through_the_handler(core, ns):
    worker = kind.node_names()[1]
    before = kind.node_exec(worker, "cat /var/log/nvidia-container-runtime.log 2>/dev/null | wc -l").stdout
    assert _run(core, ns, "gpu", worker, "echo through-nvidia", runtime_class="nvidia").strip() == "through-nvidia"
    log = kind.node_exec(worker, "cat /var/log/nvidia-container-runtime.log").stdout.splitlines()
    assert len(log) > int(before), "the nvidia handler's stand-in runtime was not called"
    assert any(" create " in line for line in log[int(before):]), log[-5:]


def _assert_no_handler(core, ns: str, node: str, name: str) -> None:
    core.create_namespaced_pod(ns, _pod(name, node, "true", runtime_class="nvidia"))
    deadline = time.monotonic() + 90
    while True:
        events = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
        failed = [e for e in events if e.reason == "FailedCreatePodSandBox"]
        if failed:
            break
        assert time.monotonic() < deadline, f"no FailedCreatePodSandBox; events: {[(e.reason, e.message) for e in events]}"
        time.sleep(1)
    # The kubelet's own message, relaying containerd's CRI error.
    assert 'no runtime for "nvidia" is configured' in failed[0].message, failed[0].message
    assert failed[0].source.component == "kubelet"
    assert failed[0].source.host == node
    assert core.read_namespaced_pod(name, ns).status.phase == "Pending"


def test_nvidia_pod_fails_where_containerd_lacks_the_handler(core, ns):
    _assert_no_handler(core, ns, kind.node_names()[0], "gpu")


def test_a_worker_without_the_handler_fails_the_pod_and_gets_it_back(core, ns):
    worker = kind.node_names()[2]
    kind.set_nvidia_handler(worker, False)
    try:
        _assert_no_handler(core, ns, worker, "gpu-off")
    finally:
        kind.set_nvidia_handler(worker, True)
    assert _run(core, ns, "gpu-on", worker, "echo back", runtime_class="nvidia").strip() == "back"


def test_pods_on_different_nodes_reach_each_other_and_dns_resolves(core, ns):
    a, b = kind.node_names()[1], kind.node_names()[2]
    core.create_namespaced_pod(ns, _pod("server", a, "exec socat TCP-LISTEN:8080,fork,reuseaddr SYSTEM:'echo pong'"))
    server = _wait_phase(core, ns, "server", {"Running"})
    ip = server.status.pod_ip
    assert ip and ip.startswith("10.244."), ip
    out = _run(core, ns, "client", b, f"for i in 1 2 3 4 5; do socat -T2 - TCP:{ip}:8080 && exit 0; sleep 1; done; exit 1")
    assert out.strip() == "pong"
    names = _run(core, ns, "dns", b, "getent hosts kubernetes.default.svc.cluster.local")
    assert names.split()[0] == "10.96.0.1", names


def test_pod_security_admission_enforces(core):
    from kubernetes.client.rest import ApiException

    name = f"kind-restricted-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
    try:
        pod = _pod("priv", kind.node_names()[1], "true")
        pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
        with pytest.raises(ApiException) as err:
            core.create_namespaced_pod(name, pod)
        assert err.value.status == 403
        assert 'violates PodSecurity "restricted:latest"' in json.loads(err.value.body)["message"]
    finally:
        core.delete_namespace(name)


def test_runtimeclass_and_clusterpolicy(bed):
    from kubernetes import client

    assert client.NodeV1Api(bed).read_runtime_class("nvidia").handler == "nvidia"
    policy = client.CustomObjectsApi(bed).get_cluster_custom_object("nvidia.com", "v1", "clusterpolicies",
                                                                     "cluster-policy")
    assert policy["status"]["state"] == "ready"


def test_attach_adds_the_emulator_and_simulated_nodes(bed, core):
    """``python -m sandbox attach`` on the kind cluster: KWOK nodes beside the real ones, and the
    control-plane emulator watching that cluster."""
    sdir = kind.attach_dir()
    was_attached = sdir.exists()
    cluster.attach(sdir, kind.kind_dir() / "kubeconfig", nodes=1)
    try:
        nodes = {n.metadata.name: n for n in core.list_node().items}
        assert set(kind.node_names()) | {"gpu-node-1", "cpu-node-1"} <= set(nodes)
        for name in ("gpu-node-1", "cpu-node-1"):
            ready = [c for c in nodes[name].status.conditions if c.type == "Ready"]
            assert ready and ready[0].status == "True", f"{name}: {ready}"
        ok, report = cluster.status(sdir)
        assert ok, report
        assert report["control_plane"]["running"] and report["control_plane"]["answers"], report["control_plane"]
    finally:
        if not was_attached:
            assert cluster.down(sdir) == []
            for name in ("gpu-node-1", "cpu-node-1"):
                core.delete_node(name)

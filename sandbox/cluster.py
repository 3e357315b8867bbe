"""The sandbox cluster: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and KWOK.

Everything lives in the sandbox directory ``<dir>`` (``sandbox.proc.sandbox_dir()``):

* ``state.json``: the ports chosen at the first ``up`` (free ports on 127.0.0.1), the binaries
  used, the node count and whether the audit log is on;
* ``kubeconfig``: the admin kubeconfig (user ``kubernetes-admin`` in ``system:masters``), 0600;
* ``pki/``: the CA, certificates, ServiceAccount keys and the components' kubeconfigs
  (:mod:`sandbox.pki`); ``etcd/``: etcd's data; ``logs/<component>.log``; ``pids/``;
  ``logs/audit.log`` when the audit log is on (``SANDBOX_AUDIT=1``, metadata level).

:func:`up` is idempotent: it starts whichever component is not running (reusing the saved ports
and data), waits until each is healthy, then makes sure the nodes and cluster objects exist and
the control-plane emulator runs. A component that dies or never turns healthy raises
:class:`sandbox.proc.StartError` naming it with the end of its log. :func:`down` stops every
process the sandbox started, by pid, and removes the directory.

Nodes (created by :func:`ensure_nodes` and :func:`add_nodes`, managed by KWOK):
``gpu-node-1`` .. ``gpu-node-N`` (``SANDBOX_NODES``, default 3) labelled as the GPU operator's
feature discovery labels an H100 node, with ``nvidia.com/gpu: 8`` in capacity but not in
allocatable (no device plugin: GPU isolation), and one CPU-only node ``cpu-node-1``.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import http.client
import importlib
import importlib.util
import ipaddress
import json
import os
import re
import secrets
import shutil
import socket
import ssl
import time
from pathlib import Path
from typing import Any

import yaml

from sandbox import build, pki, proc

ROOT = Path(__file__).resolve().parent
KWOK_CONFIG = ROOT / "kwok" / "kwok.yaml"
MANIFESTS = ROOT / "manifests"

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
STOP_ORDER = ["kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"]
PORTS = ("etcd_client", "etcd_peer", "apiserver", "controller_manager", "scheduler")

CLUSTER_NAME = "bcd-sandbox"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
FAKE_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
GPU_PREFIX = "gpu-node-"
CPU_NODES = ("cpu-node-1",)
GPU_LABELS = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "81559",
}
GPU_SELECTOR = "nvidia.com/gpu.present=true"
KWOK_SELECTOR = "type=kwok"
DEFAULT_NODES = 3

# Above this many GPU nodes the sandbox runs with its scale settings (:func:`scale_settings`); at
# or below it, exactly as a small sandbox always ran (the tests rely on the 40 s node lease).
SCALE_ABOVE = 1000

# How long each component may take to turn healthy, in seconds.
TIMEOUTS = {"etcd": 60, "kube-apiserver": 180, "kube-controller-manager": 90, "kube-scheduler": 90, "kwok": 30}


class UsageError(RuntimeError):
    """Bad input from the environment or the command line; the message names it."""


def say(msg: str) -> None:
    print(msg, flush=True)


# ---------------------------------------------------------------------------- state


def state_path(sdir: Path) -> Path:
    return sdir / "state.json"


def load_state(sdir: Path) -> dict[str, Any] | None:
    try:
        return json.loads(state_path(sdir).read_text())
    except (OSError, ValueError):
        return None


def save_state(sdir: Path, state: dict[str, Any]) -> None:
    tmp = state_path(sdir).with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    tmp.replace(state_path(sdir))


def _free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1, all held open while choosing.

    Chosen below the kernel's ephemeral range (``ip_local_port_range``), so that no outgoing
    connection (of this sandbox or another) takes one before its component binds it or when
    ``up`` restarts the component later.
    """
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    low = low if low > 12000 else 65536  # an unusual range: fall back to the kernel's choice
    socks: list[socket.socket] = []
    try:
        for _ in range(200 * n):
            if len(socks) == n:
                break
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind(("127.0.0.1", 10000 + secrets.randbelow(low - 10000) if low <= 65535 else 0))
            except OSError:
                s.close()
                continue
            socks.append(s)
        if len(socks) < n:
            raise proc.StartError("sandbox: found no free ports on 127.0.0.1")
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def requested_nodes() -> int | None:
    """``SANDBOX_NODES`` as a positive integer, or None when unset."""
    raw = os.environ.get("SANDBOX_NODES", "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise UsageError(f"SANDBOX_NODES: must be a positive integer, got {raw!r}")
    return int(raw)


def requested_audit(state: dict[str, Any] | None) -> bool:
    raw = os.environ.get("SANDBOX_AUDIT")
    if raw is None or raw == "":
        return bool(state and state.get("audit"))
    return raw.strip().lower() in ("1", "true", "yes", "on")


# ---------------------------------------------------------------------------- files


def _write_private(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    tmp.replace(path)


def kubeconfig_text(server: str, pki_dir: Path, cert: str, user: str) -> str:
    """A kubeconfig with the CA, client certificate and key embedded (so it is 0600)."""
    import base64

    def b64(name: str) -> str:
        return base64.b64encode((pki_dir / name).read_bytes()).decode()

    doc = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": CLUSTER_NAME, "cluster": {"server": server, "certificate-authority-data": b64("ca.crt")}}],
        "users": [{"name": user, "user": {"client-certificate-data": b64(f"{cert}.crt"),
                                          "client-key-data": b64(f"{cert}.key")}}],
        "contexts": [{"name": CLUSTER_NAME, "context": {"cluster": CLUSTER_NAME, "user": user}}],
        "current-context": CLUSTER_NAME,
    }
    return yaml.safe_dump(doc, sort_keys=False)


def scale_settings(gpu_nodes: int) -> dict[str, Any]:
    """What KWOK and the controller manager run with for ``gpu_nodes`` GPU nodes.

    KWOK renews every node's Lease a quarter of ``nodeLeaseDurationSeconds`` apart, as a kubelet
    does: 5,000 nodes at the default 40 s would ask for 500 lease writes a second. On 2 shared
    cores the API server took far fewer: 10 a second at a 1-minute load of 12, a lease renewed
    every ~500 s. Above :data:`SCALE_ABOVE` nodes the lease lasts 80 s per started thousand
    (400 s at 5,000: 50 renewals a second asked for) and the node lifecycle controller's grace
    period is twice the lease (800 s), so a node is not marked NotReady (and its pods not Ready)
    while its renewal waits in the queue. Node status heartbeats are already rare (the
    node-heartbeat-with-lease stage: every 10 to 20 min).

    The API server's ``--request-timeout`` is 180 s above :data:`SCALE_ABOVE` (default 60 s): at
    5,000 nodes on 2 shared cores a list of 500 pods outlasted 60 s and was cut off, again at
    every relist. A cluster of that size on its own control-plane machines does not need it; the
    sandbox shares 2 cores with its clients.
    """
    if gpu_nodes <= SCALE_ABOVE:
        return {"profile": "default", "nodeLeaseDurationSeconds": 40, "node_monitor_grace_period": None,
                "podPlayStageParallelism": 16, "request_timeout": None}
    lease = 80 * -(-gpu_nodes // SCALE_ABOVE)
    return {"profile": f"scale-{lease}", "nodeLeaseDurationSeconds": lease,
            "node_monitor_grace_period": f"{2 * lease}s", "podPlayStageParallelism": 32,
            "request_timeout": "180s"}


def kwok_config(sdir: Path, state: dict[str, Any]) -> Path:
    """The KWOK configuration for the sandbox's size: the shipped file, or a copy in ``sdir``
    with the scale settings in its options."""
    scale = scale_settings(state.get("gpu_nodes", DEFAULT_NODES))
    if scale["profile"] == "default":
        return KWOK_CONFIG
    docs = list(yaml.safe_load_all(KWOK_CONFIG.read_text()))
    for doc in docs:
        if doc and doc.get("kind") == "KwokConfiguration":
            doc["options"]["nodeLeaseDurationSeconds"] = scale["nodeLeaseDurationSeconds"]
            doc["options"]["podPlayStageParallelism"] = scale["podPlayStageParallelism"]
    out = sdir / "kwok.yaml"
    out.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return out


def _write_configs(sdir: Path, state: dict[str, Any]) -> None:
    p = sdir / "pki"
    server = f"https://127.0.0.1:{state['ports']['apiserver']}"
    _write_private(sdir / "kubeconfig", kubeconfig_text(server, p, "admin", "kubernetes-admin"))
    for cert, user in (("kube-controller-manager", "system:kube-controller-manager"),
                       ("kube-scheduler", "system:kube-scheduler"), ("kwok", pki.KWOK_USER)):
        _write_private(p / f"{cert}.kubeconfig", kubeconfig_text(server, p, cert, user))
    scheduler = {
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(p / "kube-scheduler.kubeconfig"), "qps": 200, "burst": 400},
        "leaderElection": {"leaderElect": False},
    }
    (sdir / "kube-scheduler.yaml").write_text(yaml.safe_dump(scheduler, sort_keys=False))
    # Metadata level (user, user agent, verb, URI, status; no bodies) for every request but
    # node lease renewals, which a thousand simulated nodes make ten times a second.
    audit = {
        "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
        "rules": [{"level": "None", "resources": [{"group": "coordination.k8s.io", "resources": ["leases"]}],
                   "namespaces": ["kube-node-lease"]},
                  {"level": "Metadata"}],
    }
    (sdir / "audit-policy.yaml").write_text(yaml.safe_dump(audit, sort_keys=False))


# ---------------------------------------------------------------------------- components


def argv(name: str, sdir: Path, state: dict[str, Any]) -> list[str]:
    """The command line of component ``name``."""
    b = state["binaries"]
    ports = state["ports"]
    p = sdir / "pki"
    if name == "etcd":
        client = f"https://127.0.0.1:{ports['etcd_client']}"
        peer = f"https://127.0.0.1:{ports['etcd_peer']}"
        return [
            b["etcd"], "--name=sandbox", f"--data-dir={sdir / 'etcd'}",
            f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=sandbox={peer}", "--initial-cluster-state=new",
            f"--cert-file={p / 'etcd.crt'}", f"--key-file={p / 'etcd.key'}",
            f"--trusted-ca-file={p / 'ca.crt'}", "--client-cert-auth",
            f"--peer-cert-file={p / 'etcd.crt'}", f"--peer-key-file={p / 'etcd.key'}",
            f"--peer-trusted-ca-file={p / 'ca.crt'}", "--peer-client-cert-auth",
            # A disposable test bed: skip fsync, it costs seconds per write burst on shared disks.
            "--unsafe-no-fsync", "--log-level=warn",
        ]
    if name == "kube-apiserver":
        args = [
            b["kube-apiserver"], "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={ports['apiserver']}", f"--cert-dir={p / 'apiserver-generated'}",
            f"--etcd-servers=https://127.0.0.1:{ports['etcd_client']}", f"--etcd-cafile={p / 'ca.crt'}",
            f"--etcd-certfile={p / 'apiserver-etcd-client.crt'}", f"--etcd-keyfile={p / 'apiserver-etcd-client.key'}",
            f"--tls-cert-file={p / 'apiserver.crt'}", f"--tls-private-key-file={p / 'apiserver.key'}",
            f"--client-ca-file={p / 'ca.crt'}",
            "--authorization-mode=Node,RBAC",
            # Added to the default set, which a real cluster has too: PodSecurity, ServiceAccount,
            # LimitRanger, ResourceQuota, ValidatingAdmissionPolicy and the webhooks, ... (the tests
            # of refused pods rely on quota and policy admission being on, as they are there).
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            f"--service-cluster-ip-range={pki.SERVICE_CIDR}",
            # 1.37 refuses a loopback address as the endpoint of the `kubernetes` Service; nothing
            # here reaches the API server through that Service (the Service itself is still made)
            "--endpoint-reconciler-type=none",
            f"--service-account-issuer={SA_ISSUER}",
            f"--service-account-key-file={p / 'sa.pub'}",
            f"--service-account-signing-key-file={p / 'sa.key'}",
            "--profiling=false",
        ]
        if timeout := scale_settings(state.get("gpu_nodes", DEFAULT_NODES))["request_timeout"]:
            args.append(f"--request-timeout={timeout}")
        if state.get("audit"):
            args += [f"--audit-policy-file={sdir / 'audit-policy.yaml'}",
                     f"--audit-log-path={sdir / 'logs' / 'audit.log'}", "--audit-log-maxsize=0",
                     "--audit-log-format=json"]
        return args
    if name == "kube-controller-manager":
        kc = p / "kube-controller-manager.kubeconfig"
        return [
            b["kube-controller-manager"], f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1", f"--secure-port={ports['controller_manager']}",
            f"--tls-cert-file={p / 'kube-controller-manager-serving.crt'}",
            f"--tls-private-key-file={p / 'kube-controller-manager-serving.key'}",
            f"--client-ca-file={p / 'ca.crt'}", f"--requestheader-client-ca-file={p / 'ca.crt'}",
            f"--service-account-private-key-file={p / 'sa.key'}", f"--root-ca-file={p / 'ca.crt'}",
            f"--cluster-signing-cert-file={p / 'ca.crt'}", f"--cluster-signing-key-file={p / 'ca.key'}",
            "--use-service-account-credentials=true", f"--service-cluster-ip-range={pki.SERVICE_CIDR}",
            "--leader-elect=false", "--kube-api-qps=200", "--kube-api-burst=400", "--profiling=false",
        ] + ([f"--node-monitor-grace-period={grace}"]
             if (grace := scale_settings(state.get("gpu_nodes", DEFAULT_NODES))["node_monitor_grace_period"]) else [])
    if name == "kube-scheduler":
        kc = p / "kube-scheduler.kubeconfig"
        return [
            b["kube-scheduler"], f"--config={sdir / 'kube-scheduler.yaml'}",
            f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1", f"--secure-port={ports['scheduler']}",
            f"--tls-cert-file={p / 'kube-scheduler-serving.crt'}",
            f"--tls-private-key-file={p / 'kube-scheduler-serving.key'}",
            f"--client-ca-file={p / 'ca.crt'}", f"--requestheader-client-ca-file={p / 'ca.crt'}",
        ]
    if name == "kwok":
        # WARN: at INFO KWOK logs every lease renewal (100 lines a second with 1000 nodes).
        kc = sdir / "kubeconfig" if state.get("external") else p / "kwok.kubeconfig"
        return [b["kwok"], f"--kubeconfig={kc}", f"--config={kwok_config(sdir, state)}", "--v=WARN"]
    raise KeyError(name)


def _tls(sdir: Path, client: str | None = "admin") -> ssl.SSLContext:
    """A strict TLS context trusting only the sandbox CA, with a client certificate."""
    p = sdir / "pki"
    ctx = ssl.create_default_context(cafile=str(p / "ca.crt"))
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT
    if client:
        ctx.load_cert_chain(str(p / f"{client}.crt"), str(p / f"{client}.key"))
    return ctx


def https_request(sdir: Path, port: int, method: str, path: str, body: dict | None = None, client: str | None = "admin",
                  timeout: float = 3.0) -> tuple[int, str]:
    """``method`` ``https://127.0.0.1:<port><path>`` over strict TLS as ``client`` (a JSON
    ``body`` when given); (status, body)."""
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=_tls(sdir, client), timeout=timeout)
    try:
        if body is None:
            conn.request(method, path)
        else:
            conn.request(method, path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read().decode(errors="replace")
    finally:
        conn.close()


def https_get(sdir: Path, port: int, path: str, client: str | None = "admin", timeout: float = 3.0) -> tuple[int, str]:
    """GET ``https://127.0.0.1:<port><path>`` over strict TLS; (status, body)."""
    return https_request(sdir, port, "GET", path, client=client, timeout=timeout)


def compact_etcd(sdir: Path, timeout: float = 10.0) -> int:
    """Compact etcd's history up to its current revision, as kube-apiserver does every 5 minutes
    (``--etcd-compaction-interval``), and return that revision. A sandbox younger than that still
    keeps every revision, so a watch from an old resourceVersion replays history where a cluster
    that has run for a while answers 410 Gone. Through etcd's JSON gateway
    (``/v3/maintenance/status``, ``/v3/kv/compaction``), as kube-apiserver's etcd client.
    Raises RuntimeError on an answer other than 200."""
    state = load_state(sdir)
    if not state:
        raise RuntimeError(f"sandbox: no sandbox at {sdir}")

    def post(path: str, body: dict) -> dict:
        status, text = https_request(sdir, state["ports"]["etcd_client"], "POST", path, body,
                                     client="apiserver-etcd-client", timeout=timeout)
        if status != 200:
            raise RuntimeError(f"sandbox: etcd {path} answered {status}: {text}")
        return json.loads(text)

    revision = int(post("/v3/maintenance/status", {})["header"]["revision"])
    post("/v3/kv/compaction", {"revision": revision, "physical": True})
    return revision


def _watch_gone(core, resource_version: str) -> bool:
    """Whether a watch of all pods from ``resource_version`` is answered 410 Gone."""
    from kubernetes import watch
    from kubernetes.client.exceptions import ApiException

    w = watch.Watch()
    try:
        for event in w.stream(core.list_pod_for_all_namespaces, resource_version=resource_version, timeout_seconds=1,
                              allow_watch_bookmarks=False):
            if event["type"] == "ERROR":
                return (event.get("raw_object") or {}).get("code") == 410
            return False  # an event from that far back: the history is still there
    except ApiException as e:
        return e.status == 410
    finally:
        w.stop()
    return False


def expire_pod_watch_history(sdir: Path, timeout: float = 300.0) -> int:
    """Make a watch of pods from resourceVersion 1 answer 410 Gone, as on a cluster that has run
    for a while, and return how many pod updates that took.

    A young sandbox keeps all of its history: etcd is compacted only every 5 minutes
    (kube-apiserver's ``--etcd-compaction-interval``), and the API server's watch cache keeps every
    event until it is full and its oldest event is older than its freshness window (75 s; a full
    cache of fresher events doubles instead). So this compacts etcd, then updates a throwaway pod
    (``default/sandbox-churn``, never scheduled, deleted at the end) until the cache has let go of
    resourceVersion 1.
    Raises RuntimeError when that does not happen within ``timeout`` seconds."""
    from kubernetes import client

    compact_etcd(sdir)
    deadline = time.monotonic() + timeout
    updates = 0
    with api_client(sdir) as api:
        core = client.CoreV1Api(api)
        if _watch_gone(core, "1"):
            return 0
        ns, name = "default", "sandbox-churn"
        core.create_namespaced_pod(ns, {
            "metadata": {"name": name},
            "spec": {"schedulerName": "sandbox-none", "containers": [{"name": "c", "image": "churn"}]}})
        try:
            while True:
                for _ in range(50):
                    updates += 1
                    core.patch_namespaced_pod(name, ns, {"metadata": {"labels": {"churn": str(updates)}}})
                if _watch_gone(core, "1"):
                    return updates
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sandbox: a watch of pods from resourceVersion 1 still replays history "
                                       f"after {updates} pod updates and {timeout:.0f}s")
                time.sleep(1)
        finally:
            core.delete_namespaced_pod(name, ns, grace_period_seconds=0)


def healthy(name: str, sdir: Path, state: dict[str, Any]) -> bool:
    """Whether component ``name`` answers its health check (KWOK: whether it runs)."""
    ports = state["ports"]
    checks = {
        "etcd": (ports["etcd_client"], "/health", "apiserver-etcd-client"),
        "kube-apiserver": (ports["apiserver"], "/readyz", "admin"),
        "kube-controller-manager": (ports["controller_manager"], "/healthz", None),
        "kube-scheduler": (ports["scheduler"], "/healthz", None),
    }
    if name not in checks:
        return proc.running(sdir, name)
    port, path, client = checks[name]
    try:
        status, body = https_get(sdir, port, path, client)
    except (OSError, ssl.SSLError, http.client.HTTPException):
        return False
    if name == "etcd":
        return status == 200 and '"health":"true"' in body.replace(" ", "")
    return status == 200 and body.strip() == "ok"


def _wait_healthy(name: str, sdir: Path, state: dict[str, Any]) -> None:
    deadline = time.monotonic() + TIMEOUTS[name]
    while True:
        proc.ensure_running(sdir, name)
        if healthy(name, sdir, state):
            return
        if time.monotonic() > deadline:
            raise proc.StartError(
                f"sandbox: {name} did not turn healthy within {TIMEOUTS[name]}s; the end of "
                f"{sdir / 'logs' / (name + '.log')}:\n{proc.log_tail(sdir, name)}")
        time.sleep(0.25)


def _start(name: str, sdir: Path, state: dict[str, Any]) -> bool:
    """Start ``name`` unless it runs; return whether it was started."""
    if proc.running(sdir, name):
        return False
    (sdir / "logs").mkdir(parents=True, exist_ok=True)
    with open(sdir / "logs" / f"{name}.log", "a") as log:
        log.write(f"--- sandbox: starting {name} at {datetime.datetime.now().isoformat(timespec='seconds')}\n")
    proc.spawn(sdir, name, argv(name, sdir, state))
    return True


# ---------------------------------------------------------------------------- Kubernetes objects


def api_client(sdir: Path, pool: int = 32):
    """A ``kubernetes.client.ApiClient`` for the admin kubeconfig of the sandbox at ``sdir``."""
    from kubernetes import client, config

    cfg = client.Configuration()
    config.load_kube_config(config_file=str(sdir / "kubeconfig"), client_configuration=cfg)
    cfg.connection_pool_maxsize = pool
    return client.ApiClient(cfg)


def _create(api, create, body: dict, **kw) -> bool:
    """Call ``create(body=...)``; False when the object already exists (HTTP 409)."""
    from kubernetes.client.rest import ApiException

    try:
        create(body=body, _preload_content=False, **kw)
        return True
    except ApiException as exc:
        if exc.status == 409:
            return False
        raise


def _manifest(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((MANIFESTS / name).read_text()) if d]


def ensure_rbac(sdir: Path) -> None:
    """KWOK's ClusterRole, binding and FlowSchema (sandbox/manifests/kwok-rbac.yaml)."""
    from kubernetes import client

    api = api_client(sdir)
    with api:
        rbac = client.RbacAuthorizationV1Api(api)
        flow = client.FlowcontrolApiserverV1Api(api)
        creators = {"ClusterRole": rbac.create_cluster_role, "ClusterRoleBinding": rbac.create_cluster_role_binding,
                    "FlowSchema": flow.create_flow_schema}
        for doc in _manifest("kwok-rbac.yaml"):
            _create(api, creators[doc["kind"]], doc)


def ensure_objects(sdir: Path) -> None:
    """RuntimeClass ``nvidia``, the ClusterPolicy CRD and ``cluster-policy``, and the admission
    policy that keeps a held Node NotReady (``manifests/node-hold-policy.yaml``), created when absent.

    An existing object is left as it is (tests and playbooks change the ClusterPolicy).
    """
    from kubernetes import client

    api = api_client(sdir)
    with api:
        _create(api, client.NodeV1Api(api).create_runtime_class, _manifest("runtimeclass.yaml")[0])
        admission = client.AdmissionregistrationV1Api(api)
        hold_policy, hold_binding = _manifest("node-hold-policy.yaml")
        _create(api, admission.create_validating_admission_policy, hold_policy)
        _create(api, admission.create_validating_admission_policy_binding, hold_binding)
        ext = client.ApiextensionsV1Api(api)
        crd = _manifest("clusterpolicy-crd.yaml")[0]
        _create(api, ext.create_custom_resource_definition, crd)
        deadline = time.monotonic() + 60
        while True:
            got = ext.read_custom_resource_definition(crd["metadata"]["name"])
            conds = {c.type: c.status for c in (got.status.conditions or [])}
            if conds.get("Established") == "True":
                break
            if time.monotonic() > deadline:
                raise proc.StartError(f"sandbox: CRD {crd['metadata']['name']} not Established after 60s: {conds}")
            time.sleep(0.2)
        custom = client.CustomObjectsApi(api)
        policy = _manifest("cluster-policy.yaml")[0]
        deadline = time.monotonic() + 30
        while True:
            try:
                # created as the operator's Helm chart creates it: field manager "helm", so a
                # server-side apply of other values meets Helm's ownership as on a real cluster
                created = _create(api, custom.create_cluster_custom_object, policy,
                                  group="nvidia.com", version="v1", plural="clusterpolicies", field_manager="helm")
                break
            except client.exceptions.ApiException as exc:
                # The CRD is established but its REST endpoint may take a moment to be served.
                if exc.status != 404 or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        if created:
            custom.patch_cluster_custom_object_status(
                "nvidia.com", "v1", "clusterpolicies", policy["metadata"]["name"],
                {"status": {"state": "ready", "namespace": "gpu-operator"}})


def node_ip(name: str) -> str:
    """A node's InternalIP: ``gpu-node-K`` is 10.1.0.0 + K, any other ``…-K`` 10.2.0.0 + K."""
    m = re.search(r"-(\d+)$", name)
    index = int(m.group(1)) if m else 0
    return str(ipaddress.ip_address("10.1.0.0" if name.startswith(GPU_PREFIX) else "10.2.0.0") + index)


def node_body(name: str, gpu: bool, kube_version: str) -> dict:
    """The Node object of a simulated node, created with its status (KWOK keeps capacity and
    allocatable as given). GPU nodes carry ``nvidia.com/gpu`` in capacity only."""
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
              "type": "kwok"}
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", "ephemeral-storage": "1Ti"}
    if gpu:
        labels.update(GPU_LABELS)
        capacity = {"cpu": "208", "memory": "2Ti", "pods": "110", "ephemeral-storage": "4Ti"}
    allocatable = dict(capacity)
    if gpu:
        capacity["nvidia.com/gpu"] = "8"
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels,
                     "annotations": {FAKE_NODE_ANNOTATION[0]: FAKE_NODE_ANNOTATION[1],
                                     "node.alpha.kubernetes.io/ttl": "0"}},
        "spec": {},
        "status": {
            "addresses": [{"type": "InternalIP", "address": node_ip(name)}, {"type": "Hostname", "address": name}],
            "capacity": capacity, "allocatable": allocatable,
            "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux", "kubeletVersion": kube_version,
                         "kubeProxyVersion": "", "containerRuntimeVersion": "containerd://2.1.4",
                         "kernelVersion": "6.8.0-sandbox", "osImage": "Ubuntu 24.04.2 LTS (simulated by KWOK)",
                         "machineID": "", "systemUUID": "", "bootID": ""},
        },
    }


def kube_minor_of(sdir: Path, state: dict[str, Any] | None = None) -> str:
    """The Kubernetes minor release the sandbox at ``sdir`` runs (saved by ``up``; a sandbox saved
    before versions were recorded, or none yet, runs what ``SANDBOX_KUBE_VERSION`` picks)."""
    state = load_state(sdir) if state is None else state
    return (state or {}).get("kube_minor") or build.kube_minor()


def kube_version_of(sdir: Path, state: dict[str, Any] | None = None) -> str:
    """The Kubernetes release (``1.37.2``) of the sandbox at ``sdir``."""
    return build.version_of(build.BY_NAME["kube-apiserver"], kube_minor_of(sdir, state))


def _requested_minor(state: dict[str, Any] | None, sdir: Path, asked: str | None = None) -> str:
    """The release ``up`` runs: the one a running sandbox was made with (a different one asked
    for, by ``asked`` or ``SANDBOX_KUBE_VERSION``, is refused, not silently ignored), else the one asked for."""
    wanted = build.kube_minor(asked)
    saved = (state or {}).get("kube_minor")
    if saved and (asked or os.environ.get("SANDBOX_KUBE_VERSION", "").strip()) and wanted != saved:
        raise UsageError(f"sandbox: {sdir} runs Kubernetes {build.pinned_version('kube', build.K8S, saved)}, "
                         f"not the {build.pinned_version('kube', build.K8S, wanted)} SANDBOX_KUBE_VERSION asks for; "
                         f"bring it down first (python -m sandbox down) or use another SANDBOX_DIR")
    return saved or wanted


def create_nodes(sdir: Path, names: list[str], workers: int = 16) -> list[str]:
    """Create the nodes ``names`` (``gpu-…`` GPU, others CPU-only) concurrently; return those created."""
    from kubernetes import client

    version = "v" + kube_version_of(sdir)
    api = api_client(sdir, pool=workers)
    with api:
        core = client.CoreV1Api(api)

        def one(name: str) -> str | None:
            body = node_body(name, name.startswith(GPU_PREFIX), version)
            return name if _create(api, core.create_node, body) else None

        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            return [n for n in pool.map(one, names) if n]


def list_nodes(sdir: Path) -> list[dict]:
    """Every node of the sandbox that KWOK simulates, as dicts (name, labels, ready, ...).

    Read 500 a page: 5,000 Nodes in one response (15 MB) broke off mid-way on a loaded API server."""
    from kubernetes import client

    items, token = [], None
    with api_client(sdir) as api:
        core = client.CoreV1Api(api)
        while True:
            resp = core.list_node(label_selector=KWOK_SELECTOR, limit=500, _preload_content=False,
                                  **({"_continue": token} if token else {}))
            doc = json.loads(resp.data)
            items.extend(doc["items"])
            token = doc["metadata"].get("continue")
            if not token:
                break
    out = []
    for item in items:
        conds = {c["type"]: c["status"] for c in item.get("status", {}).get("conditions") or []}
        out.append({"name": item["metadata"]["name"], "labels": item["metadata"].get("labels", {}),
                    "ready": conds.get("Ready") == "True",
                    "gpu": item["metadata"].get("labels", {}).get("nvidia.com/gpu.present") == "true"})
    return out


def _transient(exc) -> bool:
    """An API error worth asking again after: the server timed out, is throttling or starting."""
    return exc.status in (429, 500, 502, 503, 504)


def wait_nodes_ready(sdir: Path, names: list[str], timeout: float | None = None) -> None:
    from kubernetes.client.rest import ApiException
    from urllib3.exceptions import ProtocolError

    timeout = timeout or 60 + 0.2 * len(names)
    wanted = set(names)
    deadline = time.monotonic() + timeout
    while True:
        proc.ensure_running(sdir, "kwok")
        try:
            ready = {n["name"] for n in list_nodes(sdir) if n["ready"]}
        except (ApiException, ProtocolError) as exc:
            if isinstance(exc, ApiException) and not _transient(exc):
                raise
            ready = set()  # a starved API server: ask again
        if wanted <= ready:
            return
        if time.monotonic() > deadline:
            missing = sorted(wanted - ready)
            raise proc.StartError(
                f"sandbox: {len(missing)} node(s) not Ready after {int(timeout)}s: {', '.join(missing[:10])}; "
                f"the end of {sdir / 'logs' / 'kwok.log'}:\n{proc.log_tail(sdir, 'kwok')}")
        time.sleep(min(5.0, max(0.5, len(wanted) / 1000)))  # each look reads every Node


def wait_kwok_ready(sdir: Path, since: datetime.datetime, timeout: float | None = None) -> None:
    """Wait until a (re)started KWOK renewed the Lease of every simulated node after ``since``.

    A KWOK that holds every node's lease has the nodes in its cache; pods created before that
    may be missed for good, so ``up`` returns only after this.
    """
    from kubernetes import client
    from kubernetes.client.rest import ApiException
    from urllib3.exceptions import ProtocolError

    state = load_state(sdir) or {}
    # a loaded API server took ~10 lease writes a second: 590 s for 5,000 nodes' first renewals
    timeout = timeout or 90 + 0.1 * state.get("gpu_nodes", 0)
    deadline = time.monotonic() + timeout
    with api_client(sdir) as api:
        coord = client.CoordinationV1Api(api)
        while True:
            proc.ensure_running(sdir, "kwok")
            try:
                names = {n["name"] for n in list_nodes(sdir)}
                leases = json.loads(coord.list_namespaced_lease("kube-node-lease", resource_version="0",
                                                                _preload_content=False).data)["items"]
            except (ApiException, ProtocolError) as exc:
                if (isinstance(exc, ApiException) and not _transient(exc)) or time.monotonic() > deadline:
                    raise
                time.sleep(2.0)  # a starved API server: ask again
                continue
            renewed = {
                item["metadata"]["name"] for item in leases
                if item["spec"].get("renewTime")
                and datetime.datetime.fromisoformat(item["spec"]["renewTime"].replace("Z", "+00:00")) >= since
            }
            if names <= renewed:
                return
            if time.monotonic() > deadline:
                raise proc.StartError(
                    f"sandbox: kwok renewed no lease of {', '.join(sorted(names - renewed)[:10])} within {timeout}s;"
                    f" the end of {sdir / 'logs' / 'kwok.log'}:\n{proc.log_tail(sdir, 'kwok')}")
            time.sleep(min(5.0, max(0.5, len(names) / 1000)))


def gpu_index(name: str) -> int:
    m = re.fullmatch(re.escape(GPU_PREFIX) + r"(\d+)", name)
    return int(m.group(1)) if m else 0


def ensure_nodes(sdir: Path, gpu_nodes: int) -> None:
    """Make sure ``gpu-node-1..gpu_nodes`` and the CPU node exist and are Ready."""
    names = [f"{GPU_PREFIX}{i}" for i in range(1, gpu_nodes + 1)] + list(CPU_NODES)
    start = time.monotonic()
    # one list rather than a create per node answered 409: at 5,000 nodes on a loaded machine
    # those 5,000 requests took minutes of an `up` that had nothing to create
    have = {n["name"] for n in list_nodes(sdir)}
    created = create_nodes(sdir, [n for n in names if n not in have])
    if created:
        say(f"sandbox: created {len(created)} node(s) in {time.monotonic() - start:.1f}s")
    wait_nodes_ready(sdir, names)


NODE_DOWN = "sandbox.bcd.dev/node-down"


def mark_pods_down(core, node: str, down: bool) -> list[str]:
    """Annotate (``down``) or un-annotate the pods bound to Node ``node`` with ``NODE_DOWN``, which
    every KWOK pod stage skips: no kubelet readies, runs or deletes them, so a deleted pod stays
    Terminating until the node is back, as on a real cluster. Returns the pods changed."""
    from kubernetes.client.rest import ApiException

    changed = []
    for pod in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items:
        if ((pod.metadata.annotations or {}).get(NODE_DOWN) == "true") == down:
            continue
        try:
            core.patch_namespaced_pod(pod.metadata.name, pod.metadata.namespace,
                                      {"metadata": {"annotations": {NODE_DOWN: "true" if down else None}}})
        except ApiException as exc:
            if exc.status != 404:  # gone meanwhile: nothing to mark
                raise
        changed.append(f"{pod.metadata.namespace}/{pod.metadata.name}")
    return changed


def mark_pods_not_ready(core, node: str) -> list[str]:
    """Set the Ready condition of the pods bound to Node ``node`` to False, as the node lifecycle
    controller's MarkPodsNotReady does for a NotReady Node's pods (keeping the other conditions).
    Pods annotated ``NODE_DOWN`` stay so, since KWOK skips them. Returns the pods changed."""
    import datetime as dt

    from kubernetes.client.rest import ApiException

    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    changed = []
    for pod in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items:
        conditions = pod.status.conditions or []
        if not any(c.type == "Ready" and c.status == "True" for c in conditions):
            continue
        body = [{"type": c.type, "status": "False" if c.type == "Ready" else c.status,
                 "lastTransitionTime": now if c.type == "Ready" else c.last_transition_time,
                 **({"reason": c.reason} if c.reason else {})} for c in conditions]
        try:
            core.patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace, {"status": {"conditions": body}})
        except ApiException as exc:
            if exc.status != 404:
                raise
            continue
        changed.append(f"{pod.metadata.namespace}/{pod.metadata.name}")
    return changed


def add_nodes(sdir: Path, count: int) -> list[str]:
    """Add ``count`` GPU nodes after the highest ``gpu-node-K``; wait until Ready; return their names."""
    if count < 1:
        raise UsageError("add-nodes: count must be a positive integer")
    state = _require_state(sdir)
    top = max([gpu_index(n["name"]) for n in list_nodes(sdir)] + [0])
    names = [f"{GPU_PREFIX}{i}" for i in range(top + 1, top + 1 + count)]
    create_nodes(sdir, names)
    wait_nodes_ready(sdir, names)
    state["gpu_nodes"] = max(state.get("gpu_nodes", 0), top + count)
    save_state(sdir, state)
    return names


def _wait_default_sa(sdir: Path, timeout: float = 60) -> None:
    """Wait until the ServiceAccount controller made ``default/default`` (pods need it)."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    api = api_client(sdir)
    deadline = time.monotonic() + timeout
    with api:
        core = client.CoreV1Api(api)
        while True:
            try:
                core.read_namespaced_service_account("default", "default", _preload_content=False)
                return
            except ApiException as exc:
                if exc.status != 404:
                    raise
            proc.ensure_running(sdir, "kube-controller-manager")
            if time.monotonic() > deadline:
                raise proc.StartError(
                    "sandbox: kube-controller-manager made no default ServiceAccount within "
                    f"{timeout}s; the end of its log:\n{proc.log_tail(sdir, 'kube-controller-manager')}")
            time.sleep(0.25)


# ---------------------------------------------------------------------------- control-plane emulator


def control_plane_service():
    """``sandbox.control_plane.service`` when that module exists, else None.

    Only a missing module yields None; an error inside it propagates.
    """
    if importlib.util.find_spec("sandbox.control_plane") is None:
        return None
    if importlib.util.find_spec("sandbox.control_plane.service") is None:
        return None
    return importlib.import_module("sandbox.control_plane.service")


CONTROL_PLANE_MISSING = ("sandbox: the control-plane emulator (sandbox/control_plane/service.py) is not "
                         "there yet; the cluster runs without it")


# ---------------------------------------------------------------------------- up / down / status


def _require_state(sdir: Path) -> dict[str, Any]:
    state = load_state(sdir)
    if state is None:
        raise proc.StartError(f"sandbox: no sandbox at {sdir} (run `python -m sandbox up`)")
    return state


def _is_sandbox_dir(sdir: Path) -> bool:
    """A directory that ``up`` (or the control-plane emulator) made: safe to use and to remove."""
    return sdir.is_dir() and not (sdir / ".git").exists() and (
        (sdir / "state.json").exists() or (sdir / "pids").is_dir() or (sdir / "pki").is_dir()
        or any(p.name.startswith("control-plane") for p in sdir.iterdir()))


def up(sdir: Path | None = None, nodes: int | None = None, kube_version: str | None = None) -> dict[str, Any]:
    """Bring the sandbox at ``sdir`` up (idempotent) and return its state.

    ``nodes``: GPU nodes to ensure (default ``SANDBOX_NODES``, else the saved count, else 3).
    ``kube_version``: the Kubernetes release (``1.33`` or its pinned ``1.33.4``; default
    ``SANDBOX_KUBE_VERSION``, else the newest supported: ``build.kube_minor``).
    Raises StartError / BuildError naming what failed.
    """
    sdir = Path(sdir or proc.sandbox_dir())
    t0 = time.monotonic()
    state = load_state(sdir)
    if state is None and _is_sandbox_dir(sdir):
        proc.stop_all(sdir, STOP_ORDER)  # leftovers of an up that died before saving its state
    elif state is None and sdir.is_dir() and any(sdir.iterdir()):
        raise UsageError(f"sandbox: {sdir} is a non-empty directory that is not a sandbox; "
                         "point SANDBOX_DIR at a new or sandbox directory")
    gpu_nodes = nodes or requested_nodes() or (state or {}).get("gpu_nodes") or DEFAULT_NODES
    sdir.mkdir(parents=True, exist_ok=True)
    os.chmod(sdir, 0o700)

    minor = _requested_minor(state, sdir, kube_version)
    binaries = build.resolve(say=say, minor=minor)
    audit = requested_audit(state)
    if state is None:
        state = {"version": 1, "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                 "ports": dict(zip(PORTS, _free_ports(len(PORTS)), strict=True))}
    restart_apiserver = bool(state.get("audit")) != audit and proc.running(sdir, "kube-apiserver")
    # the settings KWOK and the controller manager were started with (saved since they exist)
    scale_before = state.get("scale_profile") or scale_settings(state.get("gpu_nodes", DEFAULT_NODES))["profile"]
    # the size a test may add nodes to and the baseline puts back (sandbox.baseline)
    state.setdefault("base_gpu_nodes", gpu_nodes)
    state.update(binaries={k: str(v) for k, v in binaries.items()}, audit=audit, kube_minor=minor,
                 gpu_nodes=max(gpu_nodes, state.get("gpu_nodes", 0)), dir=str(sdir))
    state["scale_profile"] = scale_settings(state["gpu_nodes"])["profile"]
    pki.ensure(sdir / "pki")
    _write_configs(sdir, state)
    save_state(sdir, state)
    if restart_apiserver:
        say(f"sandbox: restarting kube-apiserver to turn the audit log {'on' if audit else 'off'}")
        proc.stop(sdir, "kube-apiserver")
    scale = scale_settings(state["gpu_nodes"])
    if scale["profile"] != scale_before:
        # grown past SCALE_ABOVE (or the settings changed): KWOK, the controller manager and the
        # API server (its request timeout) restart
        for name in ("kwok", "kube-controller-manager", "kube-apiserver"):
            if proc.running(sdir, name):
                say(f"sandbox: restarting {name} for {state['gpu_nodes']} nodes ({scale['profile']})")
                proc.stop(sdir, name)

    for name in ("etcd", "kube-apiserver"):
        if _start(name, sdir, state):
            say(f"sandbox: started {name} (pid {proc.pid_of(sdir, name)})")
        _wait_healthy(name, sdir, state)
    ensure_rbac(sdir)
    kwok_since = None
    for name in ("kube-controller-manager", "kube-scheduler", "kwok"):
        since = datetime.datetime.now(datetime.UTC)
        if _start(name, sdir, state):
            say(f"sandbox: started {name} (pid {proc.pid_of(sdir, name)})")
            if name == "kwok":
                kwok_since = since
    for name in ("kube-controller-manager", "kube-scheduler", "kwok"):
        _wait_healthy(name, sdir, state)
    if kwok_since is not None:
        wait_kwok_ready(sdir, kwok_since)
    say(f"sandbox: control plane healthy after {time.monotonic() - t0:.1f}s")

    ensure_nodes(sdir, state["gpu_nodes"])
    ensure_objects(sdir)
    _wait_default_sa(sdir)
    _start_control_plane(sdir)
    say(f"sandbox: up in {time.monotonic() - t0:.1f}s at {sdir}: {state['gpu_nodes']} GPU node(s) "
        f"(gpu-node-1..{state['gpu_nodes']}) and {len(CPU_NODES)} CPU node(s), Kubernetes "
        f"v{kube_version_of(sdir, state)}")
    say(f"export KUBECONFIG={sdir / 'kubeconfig'}")
    return state


def _start_control_plane(sdir: Path, listen: str | None = None) -> None:
    """Start the control-plane emulator against ``<dir>/kubeconfig``, or say it is missing."""
    service = control_plane_service()
    if service is None:
        say(CONTROL_PLANE_MISSING)
    else:
        service.start(sdir, sdir / "kubeconfig", listen=listen)


def attach(sdir: Path | None, kubeconfig: Path, nodes: int | None = None, listen: str | None = None) -> dict[str, Any]:
    """Run the sandbox's simulated part on an EXISTING cluster (for example a kind cluster).

    Copies ``kubeconfig`` (an admin kubeconfig) to ``<dir>/kubeconfig``; starts only KWOK against
    that cluster; creates the simulated GPU nodes, the RuntimeClass and the ClusterPolicy there;
    starts the control-plane emulator whose join simulator watches that cluster. ``down`` stops
    KWOK and the emulator (the simulated Node objects stay in the cluster; delete the cluster).
    ``listen``: an address the emulator also listens on and advertises (the kind test bed's
    network gateway, which bcd on its real nodes reaches). Idempotent. Used by the molecule
    scenario ``kind``.
    """
    sdir = Path(sdir or proc.sandbox_dir())
    t0 = time.monotonic()
    state = load_state(sdir)
    if state is not None and not state.get("external"):
        raise UsageError(f"sandbox: {sdir} holds a sandbox of its own; attach needs a directory of its own")
    sdir.mkdir(parents=True, exist_ok=True)
    os.chmod(sdir, 0o700)
    _write_private(sdir / "kubeconfig", Path(kubeconfig).read_text())
    minor = build.kube_minor()
    binaries = build.resolve(["kwok", "kubectl"], say=say, minor=minor)
    # nodes=0: no simulated GPU node (a cluster with real ones, such as the kind test bed).
    gpu_nodes = nodes if nodes is not None else (requested_nodes() or (state or {}).get("gpu_nodes") or DEFAULT_NODES)
    state = {"version": 1, "external": True, "ports": {}, "binaries": {k: str(v) for k, v in binaries.items()},
             "kube_minor": minor,
             "gpu_nodes": max(gpu_nodes, (state or {}).get("gpu_nodes", 0)), "dir": str(sdir)}
    save_state(sdir, state)
    since = datetime.datetime.now(datetime.UTC)
    if _start("kwok", sdir, state):
        say(f"sandbox: started kwok (pid {proc.pid_of(sdir, 'kwok')}) against {kubeconfig}")
    else:
        since = None
    ensure_nodes(sdir, state["gpu_nodes"])
    if since is not None:
        wait_kwok_ready(sdir, since)
    ensure_objects(sdir)
    _start_control_plane(sdir, listen)
    say(f"sandbox: attached in {time.monotonic() - t0:.1f}s to the cluster of {kubeconfig}: {state['gpu_nodes']} "
        f"simulated GPU node(s) and {len(CPU_NODES)} CPU node(s)")
    return state


def down(sdir: Path | None = None) -> list[str]:
    """Stop the control-plane emulator and every process the sandbox started, remove ``sdir``.

    Returns problems met on the way (an emulator that failed to stop, a process that survived);
    the directory is kept when a process survived.
    """
    sdir = Path(sdir or proc.sandbox_dir())
    problems: list[str] = []
    if not sdir.exists():
        say(f"sandbox: nothing at {sdir}")
        return problems
    if not _is_sandbox_dir(sdir):
        return [f"sandbox: {sdir} does not look like a sandbox directory; not touching it"]
    pids = {n: proc.pid_of(sdir, n) for n in proc.names(sdir)}
    service = control_plane_service()
    if service is not None:
        try:
            service.stop(sdir)
        except Exception as exc:  # noqa: BLE001 - reported, and the rest must still be stopped
            problems.append(f"sandbox: control-plane emulator failed to stop: {type(exc).__name__}: {exc}")
    proc.stop_all(sdir, STOP_ORDER)
    alive = [f"{n} (pid {pid})" for n, pid in pids.items() if pid is not None and _alive(pid)]
    if alive:
        problems.append(f"sandbox: still running after stop: {', '.join(alive)}; kept {sdir}")
    else:
        shutil.rmtree(sdir, onerror=_ignore_missing)
        say(f"sandbox: stopped {', '.join(n for n, p in pids.items() if p) or 'nothing'}; removed {sdir}")
    return problems


def _ignore_missing(func, path, exc_info) -> None:
    """rmtree error handler: a file that vanished meanwhile is fine, anything else is raised."""
    if not issubclass(exc_info[0], FileNotFoundError):
        raise exc_info[1]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def status(sdir: Path | None = None) -> tuple[bool, dict[str, Any]]:
    """(up?, report): components with pid, API health and version, node counts, emulator status.

    Up means: every component runs, the API server is ready, every simulated node is Ready and
    the control-plane emulator (when installed) runs.
    """
    sdir = Path(sdir or proc.sandbox_dir())
    state = load_state(sdir)
    report: dict[str, Any] = {"dir": str(sdir), "components": {}, "api": None, "nodes": None,
                              "control_plane": None}
    if state is None:
        report["error"] = f"no sandbox at {sdir}"
        return False, report
    if state.get("external"):
        return _status_external(sdir, state, report)
    ok = True
    for name in COMPONENTS:
        pid = proc.pid_of(sdir, name)
        report["components"][name] = {"running": pid is not None, "pid": pid}
        ok = ok and pid is not None
    try:
        code, body = https_get(sdir, state["ports"]["apiserver"], "/version")
        version = json.loads(body).get("gitVersion") if code == 200 else None
        ready = healthy("kube-apiserver", sdir, state)
        report["api"] = {"url": f"https://127.0.0.1:{state['ports']['apiserver']}", "ready": ready,
                         "version": version}
        ok = ok and ready
    except (OSError, ssl.SSLError, http.client.HTTPException, ValueError) as exc:
        report["api"] = {"ready": False, "error": str(exc)}
        ok = False
    if report["api"].get("ready"):
        nodes = list_nodes(sdir)
        report["nodes"] = {"total": len(nodes), "ready": sum(n["ready"] for n in nodes),
                           "gpu": sum(n["gpu"] for n in nodes), "cpu": sum(not n["gpu"] for n in nodes)}
        ok = ok and report["nodes"]["ready"] == report["nodes"]["total"] > 0
    service = control_plane_service()
    if service is None:
        report["control_plane"] = {"installed": False}
    else:
        try:
            report["control_plane"] = service.status(sdir)
            ok = ok and report["control_plane"].get("running", True) is not False
        except Exception as exc:  # noqa: BLE001 - shown in the report, and status exits non-zero
            report["control_plane"] = {"error": f"{type(exc).__name__}: {exc}"}
            ok = False
    report["kubeconfig"] = str(sdir / "kubeconfig")
    return ok, report


def _status_external(sdir: Path, state: dict[str, Any], report: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    """status() of an attached sandbox: KWOK, the external cluster's API, the nodes, the emulator."""
    pid = proc.pid_of(sdir, "kwok")
    report["components"]["kwok"] = {"running": pid is not None, "pid": pid}
    report["external"] = True
    ok = pid is not None
    try:
        with api_client(sdir) as api:
            version = json.loads(api.call_api("GET", api.configuration.host + "/version").read()).get("gitVersion")
        report["api"] = {"url": state.get("server"), "ready": True, "version": version}
        nodes = list_nodes(sdir)
        report["nodes"] = {"total": len(nodes), "ready": sum(n["ready"] for n in nodes),
                           "gpu": sum(n["gpu"] for n in nodes), "cpu": sum(not n["gpu"] for n in nodes)}
    except Exception as exc:  # noqa: BLE001 - shown in the report, and status exits non-zero
        report["api"] = {"ready": False, "error": f"{type(exc).__name__}: {exc}"}
        ok = False
    service = control_plane_service()
    if service is not None:
        report["control_plane"] = service.status(sdir)
        ok = ok and report["control_plane"].get("running", True) is not False
    report["kubeconfig"] = str(sdir / "kubeconfig")
    return ok, report


def env_lines(sdir: Path | None = None) -> list[str]:
    """Shell lines that put the cached binaries on PATH and point KUBECONFIG at the sandbox."""
    sdir = Path(sdir or proc.sandbox_dir())
    state = load_state(sdir) or {}
    dirs = list(dict.fromkeys([str(Path(p).parent) for p in state.get("binaries", {}).values()]
                              + [str(build.cache_dir())]))
    return [f"export PATH={':'.join(dirs)}:$PATH", f"export KUBECONFIG={sdir / 'kubeconfig'}"]

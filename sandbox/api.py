"""A small Python handle on a sandbox, for tests and playbook tests.

    from sandbox.api import Sandbox
    sb = Sandbox()                 # $SANDBOX_DIR (else pass dir=...)
    sb.up()                        # idempotent; python -m sandbox up
    sb.kubectl("get", "nodes")     # CompletedProcess, --kubeconfig added, check=True
    core = kubernetes.client.CoreV1Api(sb.api_client())
    sb.add_nodes(2)                # -> ["gpu-node-4", "gpu-node-5"], Ready
    sb.control_plane_vars()        # <dir>/control-plane.yml, written by the emulator
    sb.down()

The pytest fixture ``sandbox`` (tests/conftest.py) yields one of these for the session.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sandbox import cluster, proc

# set_node_not_ready: how long a held Node must read NotReady before the hold counts as taken
# (KWOK may still write one heartbeat it queued before the hold), and the most it may take
HOLD_SETTLE = 3.0
HOLD_TIMEOUT = 60.0


class NotUp(RuntimeError):
    """The sandbox is not up (no state, a component stopped, or the API not ready)."""


def _ready_write_refused(core, name: str) -> bool:
    """Whether the API server refuses (dry run: nothing is written) the Ready=True status write a
    stale KWOK heartbeat makes for Node ``name``: the hold policy is in force for it."""
    from kubernetes.client.exceptions import ApiException

    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}
    try:
        core.patch_node_status(name, {"status": {"conditions": [ready]}}, dry_run="All")
    except ApiException as exc:
        if exc.status == 422 and "holds this Node NotReady" in (exc.body or ""):
            return True
        raise
    return False


@dataclass
class Sandbox:
    """The sandbox whose state directory is ``dir`` (default ``$SANDBOX_DIR``: ``sandbox.proc.sandbox_dir()``)."""

    dir: Path = field(default_factory=proc.sandbox_dir)

    def __post_init__(self) -> None:
        self.dir = Path(self.dir).resolve()

    # -- lifecycle -------------------------------------------------------------------------

    def up(self, nodes: int | None = None, kube_version: str | None = None) -> Sandbox:
        """Bring the sandbox up (idempotent): ``nodes`` GPU nodes, default ``SANDBOX_NODES`` or 3;
        Kubernetes ``kube_version`` (``1.33``), default ``SANDBOX_KUBE_VERSION``, else the newest."""
        cluster.up(self.dir, nodes=nodes, kube_version=kube_version)
        return self

    def kube_version(self) -> str:
        """The Kubernetes release it runs (``1.37.2``)."""
        return cluster.kube_version_of(self.dir)

    def down(self) -> None:
        """Stop everything the sandbox started and remove its directory; raise if something stayed."""
        problems = cluster.down(self.dir)
        if problems:
            raise RuntimeError("\n".join(problems))

    def is_up(self) -> bool:
        """Every component and the control-plane emulator run, the API server and every node are Ready."""
        return cluster.status(self.dir)[0]

    def status(self) -> dict[str, Any]:
        return cluster.status(self.dir)[1]

    # -- facts ------------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (``<dir>/kubeconfig``, 0600)."""
        return self.dir / "kubeconfig"

    @property
    def state(self) -> dict[str, Any]:
        state = cluster.load_state(self.dir)
        if state is None:
            raise NotUp(f"sandbox: no sandbox at {self.dir}")
        return state

    def state_or_none(self) -> dict[str, Any] | None:
        """The saved state, or None when there is no sandbox at ``dir``."""
        return cluster.load_state(self.dir)

    @property
    def server(self) -> str:
        """The API server URL, ``https://127.0.0.1:<port>``."""
        return f"https://127.0.0.1:{self.state['ports']['apiserver']}"

    @property
    def ca_file(self) -> Path:
        """The cluster CA certificate (PEM)."""
        return self.dir / "pki" / "ca.crt"

    @property
    def kubectl_path(self) -> Path:
        return Path(self.state["binaries"]["kubectl"])

    def nodes(self) -> list[dict]:
        """Every simulated node: ``{"name", "labels", "ready", "gpu"}``."""
        return cluster.list_nodes(self.dir)

    def node_names(self) -> list[str]:
        return sorted(n["name"] for n in self.nodes())

    def gpu_node_names(self) -> list[str]:
        """Names of the GPU nodes (label ``nvidia.com/gpu.present=true``), sorted by number."""
        return sorted((n["name"] for n in self.nodes() if n["gpu"]), key=cluster.gpu_index)

    def cpu_node_names(self) -> list[str]:
        return sorted(n["name"] for n in self.nodes() if not n["gpu"])

    # -- clients ----------------------------------------------------------------------------

    def api_client(self):
        """A ``kubernetes.client.ApiClient`` authenticated as the admin (close it, or use ``with``)."""
        return cluster.api_client(self.dir)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 120) -> subprocess.CompletedProcess:
        """Run the sandbox's kubectl with ``--kubeconfig <dir>/kubeconfig``; text output captured."""
        return subprocess.run([str(self.kubectl_path), f"--kubeconfig={self.kubeconfig}", *args],
                              input=input, capture_output=True, text=True, check=check, timeout=timeout)

    def env(self) -> dict[str, str]:
        """Environment for subprocesses (ansible-playbook, kubectl) that should use this sandbox."""
        path = os.pathsep.join([str(self.kubectl_path.parent), os.environ.get("PATH", "")])
        return {**os.environ, "SANDBOX_DIR": str(self.dir), "KUBECONFIG": str(self.kubeconfig), "PATH": path}

    # -- changes ----------------------------------------------------------------------------

    def add_nodes(self, count: int) -> list[str]:
        """Add ``count`` GPU nodes (``gpu-node-K`` after the highest); return their names once Ready."""
        return cluster.add_nodes(self.dir, count)

    def set_node_not_ready(self, name: str, reason: str = "KubeletNotReady",
                           message: str = "container runtime is down (held by the sandbox until node-up)") -> None:
        """Mark Node ``name`` NotReady, as a kubelet does when its runtime fails, and keep it so
        (KWOK leaves a node annotated ``sandbox.bcd.dev/hold-status=true`` alone; its Lease is
        still renewed) until :meth:`release_node`. Its pods are left as a real cluster leaves
        them (``cluster.mark_pods_down``, ``cluster.mark_pods_not_ready``): not Ready, as the node
        lifecycle controller marks them, and a deleted one stays Terminating, until the node is
        back."""
        import datetime as dt

        from kubernetes import client

        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        with self.api_client() as api:
            core = client.CoreV1Api(api)
            core.patch_node(name, {"metadata": {"annotations": {"sandbox.bcd.dev/hold-status": "true"}}})
            # the pods first: once KWOK skips them, nothing makes them Ready again before release
            cluster.mark_pods_down(core, name, True)

            def hold() -> None:
                node = core.read_node_status(name)
                conditions = [{"type": c.type, "status": c.status, "reason": c.reason, "message": c.message,
                               "lastHeartbeatTime": now, "lastTransitionTime": now}
                              for c in node.status.conditions or [] if c.type != "Ready"]
                conditions.append({"type": "Ready", "status": "False", "reason": reason, "message": message,
                                   "lastHeartbeatTime": now, "lastTransitionTime": now})
                core.patch_node_status(name, {"status": {"conditions": conditions}})
                # the node lifecycle controller does this only when it sees the pod change after its
                # own view of the Node (refreshed every 5 s) is NotReady: a race; the sandbox does not race
                cluster.mark_pods_not_ready(core, name)

            hold()
            # A heartbeat KWOK queued before it saw the annotation is refused by the API server
            # (manifests/node-hold-policy.yaml) once that policy is in force for this Node; the API
            # server loads a new policy seconds after it is made, later under load: ask it (a
            # dry run of that write) until it refuses, then hold until the Node has stayed
            # NotReady for HOLD_SETTLE
            deadline = time.monotonic() + HOLD_TIMEOUT
            while not _ready_write_refused(core, name):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"sandbox: the API server did not refuse a Ready write for held node {name} "
                                       f"within {HOLD_TIMEOUT:g} s (is the ValidatingAdmissionPolicy "
                                       "sandbox-held-node-stays-not-ready there?)")
                time.sleep(0.25)
            settled = time.monotonic() + HOLD_SETTLE
            while time.monotonic() < settled:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"sandbox: node {name} did not stay NotReady within {HOLD_TIMEOUT:g} s")
                time.sleep(0.25)
                ready = next((c.status for c in core.read_node_status(name).status.conditions or [] if c.type == "Ready"), None)
                if ready != "False":
                    hold()
                    settled = time.monotonic() + HOLD_SETTLE

    def set_node_allocatable(self, name: str, **resources: str) -> dict[str, str]:
        """Set Node ``name``'s allocatable resources (``cpu="50m"``, ``memory="64Mi"``), which
        KWOK keeps; returns the previous values of those resources, for putting them back."""
        from kubernetes import client

        with self.api_client() as api:
            core = client.CoreV1Api(api)
            before = core.read_node_status(name).status.allocatable or {}
            core.patch_node_status(name, {"status": {"allocatable": resources}})
            return {k: before[k] for k in resources if k in before}

    def release_node(self, name: str, timeout: float = 60) -> None:
        """Undo :meth:`set_node_not_ready`: KWOK makes the node Ready again; wait until it is, and
        until the node lifecycle controller has taken its ``not-ready``/``unreachable`` taints off
        again (it does so on its next pass, seconds after the node is Ready, as on a real cluster),
        so the node is back as it was."""
        from kubernetes import client

        gone = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
        with self.api_client() as api:
            core = client.CoreV1Api(api)
            core.patch_node(name, {"metadata": {"annotations": {"sandbox.bcd.dev/hold-status": None}}})
            cluster.mark_pods_down(core, name, False)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                node = core.read_node(name)
                ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
                if ready and not any(t.key in gone for t in node.spec.taints or []):
                    return
                time.sleep(0.5)
        raise TimeoutError(f"sandbox: node {name} was not Ready without the not-ready taint within {timeout:g} s")

    def create_namespace(self, name: str, labels: dict[str, str] | None = None, timeout: float = 60) -> None:
        """Create namespace ``name`` and wait until its ``default`` ServiceAccount exists (pods
        created before that are refused by the ServiceAccount admission plugin)."""
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        with self.api_client() as api:
            core = client.CoreV1Api(api)
            core.create_namespace({"metadata": {"name": name, "labels": labels or {}}})
            deadline = time.monotonic() + timeout
            while True:
                try:
                    core.read_namespaced_service_account("default", name)
                    return
                except ApiException as exc:
                    if exc.status != 404 or time.monotonic() > deadline:
                        raise
                time.sleep(0.2)

    def unadopt(self, cp=None, tenant: str | None = None, pool: str | None = None, *, namespace: str = "bcd-system",
                timeout: float = 180.0, admin=None) -> list[str]:
        """Put the cluster back as not adopted, whatever ran before (tests and ``make bench``):

        - no fault set in the control-plane emulator;
        - with ``cp`` (an ``ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_cp.Client``), no unrevoked join token in
          ``tenant``/``pool``;
        - no ``namespace`` (deleted, then waited for until gone, up to ``timeout`` seconds, else
          ``TimeoutError``);
        - no node known to the control plane (the emulator forgets them).

        ``admin``: the emulator's ``Admin`` client (default: one for this sandbox). Returns the
        hostnames the emulator forgot.
        """
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        from sandbox import baseline
        from sandbox.control_plane.admin import Admin

        admin = admin or Admin.for_sandbox(self.dir)
        admin.clear_faults()
        if cp is not None:
            for tok in cp.list_tokens(tenant, pool):
                if not tok.get("revokedAt"):
                    cp.revoke_token(tenant, tok["id"])
        with self.api_client() as api:
            core = client.CoreV1Api(api)
            try:
                core.delete_namespace(namespace)
            except ApiException as exc:
                if exc.status != 404:
                    raise
            baseline.wait_until(f"namespace {namespace} did not go",
                                lambda: baseline.gone(lambda: core.read_namespace(namespace)), timeout, 1)
        return admin.forget_nodes()

    def control_plane_vars(self) -> dict[str, Any]:
        """The inventory variables the control-plane emulator wrote to ``<dir>/control-plane.yml``."""
        path = self.dir / "control-plane.yml"
        try:
            return yaml.safe_load(path.read_text()) or {}
        except FileNotFoundError:
            raise NotUp(f"sandbox: {path} does not exist (is the control-plane emulator running?)") from None

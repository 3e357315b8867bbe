"""The pod surface is exactly the render, whoever owns the extra fields (sandbox).

On an adopted cluster, other field managers change bcd's objects the way operators and tools do
(`kubectl patch`, `kubectl set image`, a server-side apply under a GitOps controller's name):
audit.yml fails naming each field, its live and rendered values and its manager, an extra host
path first; adopt-cluster.yml and rollout.yml restore the render (or refuse, naming the field and
the manager, with bcd_adopt_foreign_objects false) and a second run has nothing to do; `kubectl
rollout restart` and an allowed path are no drift; a restore or a render that would take bcd off a
Node is refused, naming the Node and bcd_allow_node_loss. Each test starts from the
cluster as bcd-ansible alone adopts it (the ``adopted`` fixture), in any order.
"""

from __future__ import annotations

import json
import time

import pytest
import xmlschema
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import ROOT, recap, run_playbook
from tests.integration.test_audit import audit

pytestmark = [pytest.mark.sandbox, pytest.mark.usefixtures("adopted")]

NS = "bcd-system"
SCHEMA = ROOT / "tests" / "fixtures" / "junit" / "junit.xsd"
REPO = "registry.example.com/better-compute/bcd"
OTHER = f"{REPO}:0.2.0@sha256:{'b2' * 32}"
TEAM = "example.com/team"


def flat(text: str) -> str:
    return " ".join(text.split())


def kget(sandbox, *args: str) -> dict:
    return json.loads(sandbox.kubectl("get", *args, "-o", "json").stdout)


def daemonset(sandbox) -> dict:
    return kget(sandbox, "daemonset", "-n", NS, "bcd")


def patch(sandbox, manager: str, body: dict | list, kind: str = "daemonset", name: str = "bcd", how: str = "strategic",
          namespace: str | None = NS) -> None:
    where = ["-n", namespace] if namespace else []
    sandbox.kubectl(*where, "patch", kind, name, f"--type={how}", f"--field-manager={manager}", "-p", json.dumps(body))


def settle(sandbox) -> None:
    """Wait until the DaemonSet controller rolled every pod to the live template (the fleet a
    scheduled run starts from)."""
    sandbox.kubectl("rollout", "status", "daemonset/bcd", "-n", NS, "--timeout=240s", timeout=260)




def results(report: dict) -> dict[tuple[str, str], dict]:
    return {(r["check"], r["node"]): r for c in report["clusters"].values() for r in c["results"]}


def failed(report: dict) -> set[tuple[str, str]]:
    return {k for k, r in results(report).items() if not r["ok"]}


@pytest.mark.long  # slow: make test-long keeps make test within its budget
def test_rollout_restart_is_no_drift_an_allowed_path_passes_with_a_note_and_own_labels_warn(sandbox, tmp_path):
    sandbox.kubectl("rollout", "restart", "daemonset/bcd", "-n", NS)
    patch(sandbox, "team-tooling", {"spec": {"template": {"metadata": {"annotations": {TEAM: "gpu"}}}}})
    patch(sandbox, "team-tooling", {"metadata": {"labels": {TEAM: "gpu"}}})
    settle(sandbox)
    allowed = json.dumps({"bcd_drift_allowed_paths": [f'spec.template.metadata.annotations["{TEAM}"]']})
    try:
        run, report, _, _ = audit(tmp_path, "-e", allowed)
    finally:
        patch(sandbox, "team-tooling", {"spec": {"template": {"metadata": {"annotations": {TEAM: None}}}},
                                        "metadata": {"labels": {TEAM: None}}})
        settle(sandbox)
    assert run.returncode == 0, run.stdout[-4000:]
    assert failed(report) == set()
    drift = results(report)[("drift-daemonset", "")]
    assert drift["status"] == "warning", drift  # the DaemonSet's own label: a warning, not a failure
    text = drift["message"]
    assert text.startswith("DaemonSet bcd-system/bcd is as rendered"), text
    assert (f'allowed by bcd_drift_allowed_paths (spec.template.metadata.annotations["{TEAM}"]): '
            f'spec.template.metadata.annotations["{TEAM}"]: live "gpu", rendered (absent); field manager(s) team-tooling') in text
    assert f'warning: metadata.labels["{TEAM}"]: live "gpu", rendered (absent); field manager(s) team-tooling' in text
    assert "restartedAt" not in text, "kubectl rollout restart is not drift"
    assert "kubectl.kubernetes.io/restartedAt" in daemonset(sandbox)["spec"]["template"]["metadata"]["annotations"]


def _foreign_edits(sandbox) -> None:
    """Each edit by its own field manager, as hands and tools make them."""
    sandbox.kubectl("create", "secret", "generic", "extra-creds", "-n", NS, "--from-literal=token=not-a-real-token")
    patch(sandbox, "kubectl-patch", {"spec": {"template": {"spec": {
        "volumes": [{"name": "host-root", "hostPath": {"path": "/"}}],
        "containers": [{"name": "bcd", "volumeMounts": [{"name": "host-root", "mountPath": "/host"}]}]}}}})
    patch(sandbox, "sidecar-injector", {"spec": {"template": {"spec": {"containers": [
        {"name": "sidecar", "image": "registry.example.com/tools/shell:1@sha256:" + "5e" * 32, "command": ["sleep", "inf"]}]}}}})
    patch(sandbox, "kubectl-edit", {"spec": {"template": {"spec": {"initContainers": [
        {"name": "join", "securityContext": {"privileged": True, "allowPrivilegeEscalation": True}}]}}}})
    patch(sandbox, "hostpid-tool", {"spec": {"template": {"spec": {"hostPID": True}}}})
    patch(sandbox, "token-tool", {"spec": {"template": {"spec": {"automountServiceAccountToken": True}}}})
    # a GitOps controller's server-side apply of a partial object
    gitops = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "bcd", "namespace": NS},
              "spec": {"template": {"spec": {"containers": [{"name": "bcd", "env": [
                  {"name": "EXTRA_TOKEN", "valueFrom": {"secretKeyRef": {"name": "extra-creds", "key": "token"}}}]}]}}}}
    sandbox.kubectl("apply", "--server-side", "--field-manager=gitops-sync", "-f", "-", input=json.dumps(gitops))
    patch(sandbox, "cm-editor", {"data": {"extra.toml": "kept = true"}}, kind="configmap", name="bcd-config", how="merge")
    patch(sandbox, "ns-labeller", {"metadata": {"labels": {"pod-security.kubernetes.io/warn": "restricted"}}},
          kind="namespace", name=NS, how="merge", namespace=None)


def test_foreign_fields_fail_the_audit_and_adopt_restores_the_render(sandbox, tmp_path, cp, cpvars):
    tokens = len(list(cp.list_tokens(cpvars["bcd_tenant"], cpvars["bcd_pool"])))
    # an operator's `kubectl rollout restart` too: the restore must leave its annotation alone
    sandbox.kubectl("rollout", "restart", "daemonset/bcd", "-n", NS)
    _foreign_edits(sandbox)
    try:
        settle(sandbox)

        # -- audit: each field, its values and its manager; the extra host path first everywhere
        run, report, junit, metrics = audit(tmp_path)
        assert run.returncode != 0
        assert failed(report) == {("drift-daemonset", ""), ("drift-configmap", ""), ("drift-namespace", "")}, failed(report)
        text = results(report)[("drift-daemonset", "")]["message"]
        lines = text.splitlines()
        assert lines[0] == ("EXTRA HOST PATH / (volume host-root, at /host in container bcd (read-write)), "
                            "set by field manager(s) kubectl-patch"), text
        assert lines[1].startswith("DaemonSet bcd-system/bcd differs from the render in spec.template.spec.volumes[host-root], ")
        want = {
            "spec.template.spec.volumes[host-root]: live {": "kubectl-patch",
            "spec.template.spec.containers[bcd].volumeMounts[/host]: live {": "kubectl-patch",
            "spec.template.spec.containers[sidecar]: live {": "sidecar-injector",
            "spec.template.spec.initContainers[join].securityContext.privileged: live true, rendered false": "kubectl-edit",
            "spec.template.spec.initContainers[join].securityContext.allowPrivilegeEscalation: live true, rendered false":
                "kubectl-edit",
            "spec.template.spec.hostPID: live true, rendered false": "hostpid-tool",
            "spec.template.spec.automountServiceAccountToken: live true, rendered false": "token-tool",
            "spec.template.spec.containers[bcd].env[EXTRA_TOKEN]: live {": "gitops-sync",
        }
        for start, manager in want.items():
            line = next((x for x in lines if x.startswith(start)), None)
            assert line is not None, f"{start!r} not in {text}"
            assert line.endswith(f"field manager(s) {manager}"), line
        assert '"secretKeyRef":{"key":"token","name":"extra-creds"}' in text and "not-a-real-token" not in run.stdout
        assert ('data["extra.toml"]: live "kept = true", rendered (absent); field manager(s) cm-editor'
                in results(report)[("drift-configmap", "")]["message"])
        assert ('metadata.labels["pod-security.kubernetes.io/warn"]: live "restricted", rendered (absent); '
                'field manager(s) ns-labeller' in results(report)[("drift-namespace", "")]["message"])
        # the JUnit failure, the metrics and the run's closing line say the host path first
        suite = xmlschema.XMLSchema(str(SCHEMA)).to_dict(junit)["testsuite"][0]
        case = next(c for c in suite["testcase"] if c["@classname"].endswith(".drift-daemonset"))
        assert case["failure"]["@message"].startswith("EXTRA HOST PATH / (volume host-root")
        families = {f.name: f for f in text_string_to_metric_families(metrics)}
        assert [s.value for s in families["bcd_audit_extra_host_paths"].samples] == [1]
        (one,) = families["bcd_audit_extra_host_path"].samples
        assert (one.labels["path"], one.labels["volume"], one.labels["managers"]) == ("/", "host-root", "kubectl-patch")
        closing = flat(run.stdout[run.stdout.rindex("audit of sandbox:"):])
        assert closing.startswith("audit of sandbox: EXTRA HOST PATH / (volume host-root"), closing[:400]
        assert closing.index("EXTRA HOST PATH") < closing.index("drift-daemonset")

        # -- bcd_adopt_foreign_objects false: stop before any change, naming field and manager
        before = daemonset(sandbox)["metadata"]["resourceVersion"]
        refused = run_playbook("adopt-cluster.yml", "-e", "bcd_adopt_foreign_objects=false")
        out = flat(refused.stdout + refused.stderr)
        assert refused.returncode != 0, out[-3000:]
        assert "DaemonSet bcd-system/bcd: spec.template.spec.volumes[host-root] set by field manager(s) kubectl-patch" in out
        assert "spec.template.spec.hostPID set by field manager(s) hostpid-tool" in out, out[-3000:]
        assert daemonset(sandbox)["metadata"]["resourceVersion"] == before, "nothing changed"

        # -- adopt restores the render, in stages
        run = run_playbook("adopt-cluster.yml")
        out = flat(run.stdout + run.stderr)
        assert run.returncode == 0, run.stdout[-5000:]
        assert "of a new pod template" in out and "canary" in out, out[-3000:]  # rolled in stages through the gates
    finally:
        sandbox.kubectl("delete", "secret", "extra-creds", "-n", NS, "--ignore-not-found")
    ds = daemonset(sandbox)
    pod = ds["spec"]["template"]["spec"]
    assert "host-root" not in [v["name"] for v in pod["volumes"]]
    assert [c["name"] for c in pod["containers"]] == ["bcd"]
    assert "/host" not in [m["mountPath"] for m in pod["containers"][0]["volumeMounts"]]
    assert "EXTRA_TOKEN" not in [e["name"] for e in pod["containers"][0]["env"]]
    assert pod["initContainers"][0]["securityContext"]["privileged"] is False
    assert pod["initContainers"][0]["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod.get("hostPID", False) is False and pod["automountServiceAccountToken"] is False  # false: left out
    assert "kubectl.kubernetes.io/restartedAt" in ds["spec"]["template"]["metadata"]["annotations"], "never taken over"
    assert "extra.toml" not in kget(sandbox, "configmap", "-n", NS, "bcd-config")["data"]
    assert "pod-security.kubernetes.io/warn" not in kget(sandbox, "namespace", NS)["metadata"]["labels"]
    assert len(list(cp.list_tokens(cpvars["bcd_tenant"], cpvars["bcd_pool"]))) == tokens, "every node had joined"

    again = run_playbook("adopt-cluster.yml")
    assert again.returncode == 0, again.stdout[-3000:]
    assert "nothing to do" in flat(again.stdout) and recap(again.stdout)["sandbox"]["changed"] == 0, again.stdout[-3000:]


@pytest.mark.long  # a staged rollout: make test-long
def test_a_foreign_image_is_refused_by_adopt_and_restored_by_rollout_with_the_rest(sandbox):
    inventory = daemonset(sandbox)["spec"]["template"]["spec"]["containers"][0]["image"]
    sandbox.kubectl("set", "image", "daemonset/bcd", "-n", NS, f"bcd={OTHER}")
    patch(sandbox, "log-shipper", {"spec": {"template": {"spec": {
        "volumes": [{"name": "varlog", "hostPath": {"path": "/var/log", "type": "Directory"}}],
        "containers": [{"name": "bcd", "volumeMounts": [{"name": "varlog", "mountPath": "/host/var/log"}]}]}}}})
    # (an enforce label would stop the pods themselves; audit and warn only say so)
    patch(sandbox, "ns-labeller", {"metadata": {"labels": {"pod-security.kubernetes.io/audit": "restricted"}}},
          kind="namespace", name=NS, how="merge", namespace=None)
    settle(sandbox)

    refused = run_playbook("adopt-cluster.yml")
    out = flat(refused.stdout + refused.stderr)
    assert refused.returncode != 0 and f"runs {OTHER}, but bcd_image in the inventory is {inventory}" in out, out[-3000:]

    run = run_playbook("rollout.yml")
    out = flat(run.stdout + run.stderr)
    assert run.returncode == 0, run.stdout[-5000:]
    assert "EXTRA HOST PATH /var/log (volume varlog" in out, out[-3000:]
    ds = daemonset(sandbox)
    pod = ds["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == inventory
    assert "varlog" not in [v["name"] for v in pod["volumes"]]
    assert "pod-security.kubernetes.io/audit" not in kget(sandbox, "namespace", NS)["metadata"]["labels"]
    pods = kget(sandbox, "pods", "-n", NS, "-l", "app.kubernetes.io/name=bcd")["items"]
    assert {p["spec"]["containers"][0]["image"] for p in pods} == {inventory}

    again = run_playbook("rollout.yml")
    assert again.returncode == 0, again.stdout[-3000:]
    assert "nothing to do" in flat(again.stdout) and recap(again.stdout)["sandbox"]["changed"] == 0


def _pod_on(sandbox, node: str, timeout: float = 90) -> str:
    deadline = time.monotonic() + timeout
    while True:
        pods = kget(sandbox, "pods", "-n", NS, "-l", "app.kubernetes.io/name=bcd", "--field-selector", f"spec.nodeName={node}")
        if pods["items"]:
            return pods["items"][0]["metadata"]["name"]
        assert time.monotonic() < deadline, f"no bcd pod on {node}"
        time.sleep(2)


def test_a_restore_or_a_render_that_would_take_bcd_off_a_node_is_refused(sandbox, cp, cpvars):
    tokens = len(list(cp.list_tokens(cpvars["bcd_tenant"], cpvars["bcd_pool"])))
    # a foreign edit widened the nodeSelector to every Linux Node: bcd runs on the CPU node too
    (cpu,) = sandbox.cpu_node_names()[:1]
    selector = {"spec": {"template": {"spec": {"nodeSelector": {"nvidia.com/gpu.present": None, "kubernetes.io/os": "linux"}}}}}
    patch(sandbox, "selector-editor", selector)
    try:
        pod = _pod_on(sandbox, cpu)
        before = daemonset(sandbox)["metadata"]["resourceVersion"]
        refused = run_playbook("rollout.yml")
        out = flat(refused.stdout + refused.stderr)
        assert refused.returncode != 0, out[-3000:]
        assert (f"would take bcd off 1 Node(s) that run a bcd pod now: {cpu} (pod {pod}: nodeSelector "
                "nvidia.com/gpu.present=true (the Node has no such label))") in out, out[-3000:]
        assert "field manager(s) selector-editor" in out and "bcd_allow_node_loss: true" in out
        assert daemonset(sandbox)["metadata"]["resourceVersion"] == before, "nothing changed"
    finally:
        patch(sandbox, "selector-editor", {"spec": {"template": {"spec": {"nodeSelector": {
            "nvidia.com/gpu.present": "true", "kubernetes.io/os": None}}}}})
        settle(sandbox)

    # a new render whose tolerations leave a tainted GPU node: adopt refuses, unless allowed
    node = sandbox.gpu_node_names()[1]
    sandbox.kubectl("taint", "node", node, "example.com/maintenance=true:NoSchedule")
    narrow = json.dumps({"bcd_tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]})
    try:
        refused = run_playbook("adopt-cluster.yml", "-e", narrow)
        out = flat(refused.stdout + refused.stderr)
        assert refused.returncode != 0, out[-3000:]
        assert f"{node} (pod " in out and "taint example.com/maintenance=true:NoSchedule not tolerated" in out, out[-3000:]
        assert "bcd_allow_node_loss: true" in out
        assert len(list(cp.list_tokens(cpvars["bcd_tenant"], cpvars["bcd_pool"]))) == tokens, "refused before any token"
        allowed = run_playbook("adopt-cluster.yml", "--check", "-e", narrow, "-e", "bcd_allow_node_loss=true")
        assert allowed.returncode == 0, allowed.stdout[-3000:]
        assert "would take bcd off" not in flat(allowed.stdout)
    finally:
        sandbox.kubectl("taint", "node", node, "example.com/maintenance-")


def test_a_field_a_controller_puts_back_fails_the_run_naming_the_manager(sandbox):
    """A controller that keeps a ConfigMap key (as a GitOps controller re-applies its own): the
    rollout takes the key over and the apply removes it, the controller puts it back, and the run
    fails after its apply, naming the key and the controller's field manager."""
    import threading

    stop = threading.Event()

    def controller() -> None:
        while not stop.is_set():
            have = sandbox.kubectl("get", "configmap", "bcd-config", "-n", NS, "-o", "jsonpath={.data}", check=False).stdout
            if have and "extra.toml" not in have:
                patch(sandbox, "config-sync", {"data": {"extra.toml": "kept = true"}}, kind="configmap", name="bcd-config",
                      how="merge")
            stop.wait(0.5)

    patch(sandbox, "config-sync", {"data": {"extra.toml": "kept = true"}}, kind="configmap", name="bcd-config", how="merge")
    thread = threading.Thread(target=controller, daemon=True)
    thread.start()
    try:
        run = run_playbook("rollout.yml")
    finally:
        stop.set()
        thread.join(timeout=10)
        sandbox.kubectl("patch", "configmap", "bcd-config", "-n", NS, "--type=json", "--field-manager=config-sync",
                        "-p", json.dumps([{"op": "remove", "path": "/data/extra.toml"}]), check=False)
    out = flat(run.stdout + run.stderr)
    assert run.returncode != 0, out[-3000:]
    assert ('the render could not be restored: ConfigMap bcd-system/bcd-config: data["extra.toml"]: live "kept = true", '
            'rendered (absent); field manager(s) config-sync') in out, out[-3000:]
    assert "extra.toml" not in kget(sandbox, "configmap", "-n", NS, "bcd-config")["data"]

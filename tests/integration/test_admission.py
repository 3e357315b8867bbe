"""When the API server refuses bcd's pods (a ResourceQuota, a ValidatingAdmissionPolicy), against
the sandbox's real kube-apiserver and kube-controller-manager.

A DaemonSet is accepted whatever its pods will meet; a refused pod is only a FailedCreate event.
Where a dry-run create can foresee the refusal, the run stops before any token exists (adopt's
preflight, rollout.yml before its lock); where it cannot (a quota added after the preflight, a
policy that exempts the operator but not the DaemonSet controller), the DaemonSet wait and the
rollout's health gate read the FailedCreate events and fail within seconds, quoting the reason.

Each test starts from an unadopted cluster (the ``unadopted`` fixture) and removes the quota or
policy it added, whatever happens, so the tests pass in any order. docs/reliability.md records the time to each failure.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from contextlib import contextmanager

import pytest

from tests.helpers import run_playbook
from tests.reliability.harness import INVENTORY_IMAGE, Runner, Trigger, World, paused

pytestmark = [pytest.mark.sandbox, pytest.mark.usefixtures("unadopted")]

NS = "bcd-system"
REPO = "registry.example.com/better-compute/bcd"
NEW = f"{REPO}:0.2.0@sha256:{'b2' * 32}"
DS_CONTROLLER = "system:serviceaccount:kube-system:daemon-set-controller"
WAIT_TASK = "Wait for the DaemonSet to roll out, or say why it cannot"
PRIVILEGED = "object.spec.containers.all(c, !has(c.securityContext) || !has(c.securityContext.privileged) " \
             "|| c.securityContext.privileged != true)"
NOT_NEW = "object.spec.containers.all(c, !c.image.contains(':0.2.0@'))"


@pytest.fixture(scope="module")
def world(sandbox):
    w = World(sandbox)
    yield w
    for name in ("bcd-test-deny-privileged", "bcd-test-approved-images"):
        delete_policy(sandbox, name)
    sandbox.kubectl("delete", "resourcequota", "-n", NS, "--all", "--ignore-not-found", check=False)


def delete_policy(sandbox, name: str) -> None:
    sandbox.kubectl("delete", "validatingadmissionpolicybinding", name, "--ignore-not-found", check=False)
    sandbox.kubectl("delete", "validatingadmissionpolicy", name, "--ignore-not-found", check=False)


@contextmanager
def policy(sandbox, name: str, expression: str, message: str, exempt_admins: bool = False):
    """A ValidatingAdmissionPolicy and its binding that deny pods in bcd-system failing
    ``expression`` with ``message``; ``exempt_admins``: requests of system:masters (the operator
    here) pass, those of the DaemonSet controller do not. Deleted on exit."""
    spec = {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                                "resources": ["pods"]}]},
        "validations": [{"expression": expression, "message": message}],
    }
    if exempt_admins:
        spec["matchConditions"] = [{"name": "not-a-cluster-admin",
                                    "expression": "!('system:masters' in request.userInfo.groups)"}]
    docs = [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": name}, "spec": spec},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {"name": name},
         "spec": {"policyName": name, "validationActions": ["Deny"],
                  "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}}}}},
    ]
    sandbox.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(d) for d in docs))
    try:
        yield
    finally:
        delete_policy(sandbox, name)


def quota(sandbox, name: str, pods: int, wait: bool = True) -> None:
    """A ResourceQuota of ``pods`` pods of priority class system-node-critical in bcd-system (the
    shape GKE requires for such pods outside kube-system), once the quota controller counted it."""
    doc = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name, "namespace": NS},
           "spec": {"hard": {"pods": str(pods)},
                    "scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In",
                                                            "values": ["system-node-critical"]}]}}}
    sandbox.kubectl("apply", "-f", "-", input=json.dumps(doc))
    deadline = time.monotonic() + 30
    while wait:
        got = json.loads(sandbox.kubectl("get", "resourcequota", "-n", NS, name, "-o", "json").stdout)
        if (got.get("status") or {}).get("used", {}).get("pods") is not None:
            return
        assert time.monotonic() < deadline, f"the quota controller did not count ResourceQuota {name}"
        time.sleep(0.3)


def no_quota(sandbox) -> None:
    sandbox.kubectl("delete", "resourcequota", "-n", NS, "--all", "--ignore-not-found")


def daemonset(world: World) -> dict | None:
    items = world.apps.list_namespaced_daemon_set(NS, field_selector="metadata.name=bcd").items
    return world.api.sanitize_for_serialization(items[0]) if items else None


def refused_as_the_controller(sandbox, image: str) -> bool:
    """Whether a pod with ``image`` created by the DaemonSet controller's identity is refused now
    (a server-side dry run, impersonating it)."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bcd-test-policy-probe", "namespace": NS},
           "spec": {"containers": [{"name": "c", "image": image}]}}
    run = sandbox.kubectl("create", "--dry-run=server", f"--as={DS_CONTROLLER}",
                          "--as-group=system:serviceaccounts", "-f", "-", input=json.dumps(pod), check=False)
    return run.returncode != 0 and "not approved" in run.stderr


def task_end(run, name: str) -> float:
    """When (``time.monotonic()``) the first task containing ``name`` ended (the next banner)."""
    for i, (_t, task) in enumerate(run.tasks):
        if name in task:
            return run.tasks[i + 1][0] if i + 1 < len(run.tasks) else run.ended
    raise KeyError(name)


def created_at(obj: dict) -> float:
    """An object's creationTimestamp, in epoch seconds."""
    return dt.datetime.fromisoformat(obj["metadata"]["creationTimestamp"].replace("Z", "+00:00")).timestamp()


def test_a_policy_that_denies_privileged_pods_is_refused_before_the_mint(sandbox, world, reliability):
    """First adoption (no bcd namespace: the preflight cannot ask in it), a ValidatingAdmissionPolicy
    denying privileged pods in bcd-system: the Namespace is applied, then the dry run is refused;
    adopt fails quoting the policy, no token is minted, no DaemonSet applied."""
    reliability.describe("False success", "a ValidatingAdmissionPolicy denies privileged pods in bcd-system, first "
                                          "adoption (adopt-cluster.yml)")
    runner = Runner(reliability)
    before = len(world.tokens())
    with policy(sandbox, "bcd-test-deny-privileged", PRIVILEGED, "privileged pods are not allowed in bcd-system"):
        run = runner.run("adopt-cluster.yml")
    assert run.returncode != 0, run.tail()
    assert "ValidatingAdmissionPolicy 'bcd-test-deny-privileged' with binding 'bcd-test-deny-privileged' denied request: " \
           "privileged pods are not allowed in bcd-system" in run.text, run.tail()
    assert "Fix: ValidatingAdmissionPolicy bcd-test-deny-privileged (binding bcd-test-deny-privileged) refuses bcd's pod: " \
           "exclude namespace bcd-system" in run.text, run.tail()
    assert "a dry-run create of pod bcd-admission-probe for Node gpu-node-1" in run.text, run.tail()
    assert "The DaemonSet was not applied and no token minted" in run.text
    assert "Traceback" not in run.output
    assert len(world.tokens()) == before and world.unrevoked() == [], "no token minted"
    assert daemonset(world) is None, "the DaemonSet was not applied"
    assert world.core.list_namespaced_pod(NS).items == [], "the dry run created nothing"
    reliability.result = ("refused after the Namespace was applied and before the mint (the preflight could not ask: "
                          "no namespace yet), quoting the policy's message and naming the fix; no token, no DaemonSet")
    reliability.figures.update({"time to the failure s": round(run.seconds, 1), "DaemonSet applied": "no",
                                "tokens minted": len(world.tokens()) - before})


def test_a_quota_of_zero_pods_is_refused_in_the_preflight_in_check_mode_too(sandbox, world, reliability, tmp_path):
    """The namespace exists (as a run refused after applying it leaves it) with a quota of 0 pods
    of priority class system-node-critical: the preflight's dry run is refused, with --check and
    without, naming the quota and the fix; no token, no DaemonSet."""
    reliability.describe("False success", "a ResourceQuota of 0 system-node-critical pods in bcd-system "
                                          "(adopt-cluster.yml, --check and not)")
    runner = Runner(reliability)
    before = len(world.tokens())
    n = len(world.gpu_nodes())
    rendered = tmp_path / "render.json"
    render = run_playbook("render.yml", "-e", f"bcd_render_out={rendered}")
    assert render.returncode == 0, render.stdout[-2000:]
    namespace = next(i for i in json.loads(rendered.read_text())["items"] if i["kind"] == "Namespace")
    sandbox.kubectl("apply", "--server-side", "--field-manager=bcd-ansible", "-f", "-", input=json.dumps(namespace))
    quota(sandbox, "crit", 0)
    try:
        checked = runner.run("adopt-cluster.yml", "--check")
        run = runner.run("adopt-cluster.yml")
    finally:
        no_quota(sandbox)
    for r in (checked, run):
        assert r.returncode != 0, r.tail()
        assert "exceeded quota: crit, requested: pods=1, used: pods=0, limited: pods=0" in r.text, r.tail()
        assert "Fix: raise the spec.hard of ResourceQuota crit in namespace bcd-system (limited: pods=0, used: pods=0) " \
               f"so that it admits bcd's {n} pods, one per selected Node (kubectl edit resourcequota crit -n bcd-system), " \
               "or remove it (kubectl delete resourcequota crit -n bcd-system)" in r.text, r.tail()
        assert r.reached("Reach the control plane") and not r.reached("Prove GPU isolation node by node"), "refused in the preflight"
    assert len(world.tokens()) == before and world.unrevoked() == []
    assert daemonset(world) is None
    reliability.result = "refused in the preflight, quoting 'exceeded quota: crit' and naming the fix; no token, no DaemonSet"
    reliability.figures.update({"time to the failure s": round(run.seconds, 1), "check mode s": round(checked.seconds, 1),
                                "tokens minted": len(world.tokens()) - before})


@pytest.mark.long  # slow: make test-long keeps make test within its budget
def test_a_quota_added_after_the_preflight_fails_the_wait_within_seconds(sandbox, world, reliability):
    """The issue's run: the quota of 0 pods comes after the preflight (while the token is minted),
    so the DaemonSet's pods are refused at creation. The wait fails within seconds quoting the
    DaemonSet's FailedCreate event, not at bcd_rollout_timeout with '0 of 3 pods available'; the
    token is revoked."""
    reliability.describe("False success", "a ResourceQuota of 0 pods added after the preflight: the DaemonSet's pods "
                                          "are refused at creation (adopt-cluster.yml)")
    runner = Runner(reliability)
    before = {t["id"] for t in world.tokens()}
    n = len(world.gpu_nodes())
    # the run waits while the quota is added: else a slow kubectl lets the DaemonSet's pods in first
    add = Trigger("Mint a hosted join token into its Secret", paused(lambda _run: quota(sandbox, "crit", 0)))
    try:
        wall, mono = time.time(), time.monotonic()
        run = runner.run("adopt-cluster.yml", triggers=[add])
        assert add.fired_at is not None, run.tail()
        assert run.returncode != 0, run.tail()
        assert f"DaemonSet bcd-system/bcd: the API server refuses its pods (0 of {n} exist), so the rollout cannot " \
               "complete (not waiting out the" in run.text, run.tail()
        assert "exceeded quota: crit, requested: pods=1, used: pods=0, limited: pods=0. Fix: raise the spec.hard of " \
               "ResourceQuota crit" in run.text, run.tail()
        assert "pods available" not in run.text, "not the timeout"
        minted = [t for t in world.ours() if t["id"] not in before]
        assert len(minted) == 1 and minted[0]["revokedAt"], minted
        assert world.unrevoked() == [] and not world.secret_exists(), "the token is revoked, its Secret deleted"
        # from the DaemonSet's creation (the API server's clock, the same host's) to the wait's end
        applied_to_failed = wall + (task_end(run, WAIT_TASK) - mono) - created_at(daemonset(world))
        timeout = run.text.split("not waiting out the ", 1)[1].split("s timeout", 1)[0]
        reliability.result = (f"the wait failed {applied_to_failed:.0f}s after the DaemonSet's apply (timeout {timeout}s), "
                              "quoting the FailedCreate event 'exceeded quota: crit' and naming the fix; token revoked")
        reliability.figures.update({"time from the DaemonSet's apply to the failure s": round(applied_to_failed, 1),
                                    "wait s": round(run.task_seconds(WAIT_TASK), 1), "rollout timeout s": int(timeout),
                                    "tokens left": len(world.unrevoked())})
        # audit, with the quota still there: a Node without its pod names the refusal, not a selector
        audited = runner.run("audit.yml")
        assert audited.returncode != 0, audited.tail()
        # (the callback's YAML doubles the quote in "bcd's")
        assert "no bcd pod on the Node; fix: the API server refuses DaemonSet bcd-system/bcd" in audited.text, audited.tail()
        assert "pods (its latest FailedCreate event" in audited.text, audited.tail()
        assert "exceeded quota: crit" in audited.text, audited.tail()
    finally:
        no_quota(sandbox)
        # the DaemonSet controller backs off after refusals: start the next run from a new DaemonSet
        sandbox.kubectl("delete", "daemonset", "-n", NS, "bcd", "--ignore-not-found", "--wait=true")


@pytest.mark.long  # slow: make test-long keeps make test within its budget
def test_a_full_quota_the_fleet_fits_in_passes_adopt_and_a_rollout(sandbox, world, reliability):
    """A quota exactly as large as the fleet (3 pods on 3 Nodes): adopt's dry run counts one pod
    more than there will be, but the pods a rollout replaces leave room for theirs; the rollout's
    replacements meet 'exceeded quota' for a moment (until the quota controller counts the deleted
    pod) and the gate waits for them rather than failing. Then back to the inventory's image."""
    reliability.describe("False success", "a ResourceQuota exactly as large as the fleet (adopt-cluster.yml, rollout.yml)")
    runner = Runner(reliability)
    adopted = runner.run("adopt-cluster.yml")
    assert adopted.returncode == 0, adopted.tail()
    nodes = len(world.gpu_nodes())
    quota(sandbox, "fleet", nodes)
    try:
        again = runner.run("adopt-cluster.yml")
        assert again.returncode == 0, again.tail()
        assert "nothing to do, no token minted" in again.text, again.tail()
        rolled = runner.run("rollout.yml", "-e", f"bcd_image={NEW}", "-e", "bcd_rollout_max_unavailable=100%")
        assert rolled.returncode == 0, rolled.tail()
        ds = daemonset(world)
        assert ds["spec"]["template"]["spec"]["containers"][0]["image"] == NEW
        assert ds["status"]["numberAvailable"] == nodes
        back = runner.run("rollout.yml", "-e", f"bcd_image={INVENTORY_IMAGE}", "-e", "bcd_rollout_max_unavailable=100%")
        assert back.returncode == 0, back.tail()
    finally:
        no_quota(sandbox)
    # the replacements the quota refused for a moment (not every run meets one): waited out, not failed
    transient = sum(e.count or 1 for e in world.core.list_namespaced_event(NS, field_selector="reason=FailedCreate").items
                    if "exceeded quota: fleet" in (e.message or ""))
    reliability.result = (f"adopt: nothing to do; rollout.yml rolled {nodes} pods under the full quota and back, "
                          "each replacement admitted once the quota counted the pod it replaced")
    reliability.figures.update({"rollout s": round(rolled.seconds, 1), "momentary quota refusals waited out": transient})


def adopted_first(world, runner) -> None:
    """Adopt, unless an earlier test left bcd adopted (make test-long runs these without the slow
    full-quota test before them)."""
    if daemonset(world) is None:
        run = runner.run("adopt-cluster.yml")
        assert run.returncode == 0, run.tail()


def test_a_rollout_whose_new_pods_a_policy_denies_is_refused_before_the_lock(sandbox, world, reliability):
    """A policy that denies the new image's pods, whoever creates them: rollout.yml's dry run is
    refused before it takes the lock; nothing changes."""
    reliability.describe("False success", "a ValidatingAdmissionPolicy denies the new image's pods (rollout.yml)")
    runner = Runner(reliability)
    adopted_first(world, runner)
    rv = daemonset(world)["metadata"]["resourceVersion"]
    with policy(sandbox, "bcd-test-approved-images", NOT_NEW, "bcd 0.2.0 is not approved for this cluster"):
        run = runner.run("rollout.yml", "-e", f"bcd_image={NEW}")
    assert run.returncode != 0, run.tail()
    assert "denied request: bcd 0.2.0 is not approved for this cluster" in run.text, run.tail()
    assert "Fix: ValidatingAdmissionPolicy bcd-test-approved-images" in run.text, run.tail()
    assert run.reached("Ask the API server whether it admits a pod of the new template")
    assert not run.reached("Take the cluster's lock"), "refused before the lock"
    assert daemonset(world)["metadata"]["resourceVersion"] == rv, "nothing changed"
    reliability.result = "refused before the lock by the dry run, quoting the policy and naming the fix; nothing changed"
    reliability.figures.update({"time to the failure s": round(run.seconds, 1)})


def test_a_policy_only_the_daemonset_controller_meets_fails_the_canary_gate_within_seconds(sandbox, world, reliability,
                                                                                            tmp_path):
    """A policy that exempts cluster admins (the operator's dry run passes) but not the DaemonSet
    controller: the canary's new pod is refused at creation; its gate fails within seconds quoting
    the FailedCreate event, and the rollout rolls back to the previous image; the later stages
    never start."""
    reliability.describe("False success", "a ValidatingAdmissionPolicy that exempts cluster admins denies the new "
                                          "image's pods to the DaemonSet controller (rollout.yml)")
    runner = Runner(reliability)
    adopted_first(world, runner)
    report = tmp_path / "rollout.json"
    gpu = world.gpu_nodes()
    before = {p.spec.node_name: p.metadata.uid for p in world.core.list_namespaced_pod(NS).items}
    with policy(sandbox, "bcd-test-approved-images", NOT_NEW, "bcd 0.2.0 is not approved for this cluster",
                exempt_admins=True):
        world.wait(lambda: refused_as_the_controller(sandbox, NEW), timeout=30, step=0.5, why="the policy is enforced")
        run = runner.run("rollout.yml", "-e", f"bcd_image={NEW}", "-e", f"bcd_report_out={report}")
    assert run.returncode != 0, run.tail()
    assert "the canary health gate failed on gpu-node-1 - the API server refuses its new pod: FailedCreate" in run.text, \
        run.tail()
    assert "denied request: bcd 0.2.0 is not approved for this cluster. Fix: ValidatingAdmissionPolicy " \
           "bcd-test-approved-images" in run.text, run.tail()
    assert "FAILED and was rolled back" in run.text, run.tail()
    summary = json.loads(report.read_text())
    assert summary["result"] == "rolled_back" and summary["stages"][0]["outcome"] == "failed"
    assert all(s["outcome"] == "not started" for s in summary["stages"][1:])
    ds = daemonset(world)
    assert ds["spec"]["template"]["spec"]["containers"][0]["image"] == INVENTORY_IMAGE
    pods = {p.spec.node_name: p for p in world.core.list_namespaced_pod(NS).items if not p.metadata.deletion_timestamp}
    assert sorted(pods) == gpu and all(p.spec.containers[0].image == INVENTORY_IMAGE for p in pods.values())
    assert all(pods[n].metadata.uid == before[n] for n in gpu[1:]), "the later stages never started"
    gate = summary["stages"][0]["seconds"]
    reliability.result = (f"the canary's gate failed {gate:.0f}s after its pod was deleted (gate timeout "
                          f"{summary['settings']['gate_timeout']}s), quoting the FailedCreate event and naming the fix; "
                          "rolled back to the previous image, the later stages never started")
    reliability.figures.update({"time from the canary's deletion to the failed gate s": gate,
                                "rollback s": summary["rollback"]["seconds"], "run s": round(run.seconds, 1)})

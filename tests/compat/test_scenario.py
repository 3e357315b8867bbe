"""The compatibility scenario: every playbook, as a user on another ansible-core runs it, against
a sandbox of its own (``<repo>/.sandbox-compat``).

The controller is the Debian trixie root of ``sandbox/pyroot.py`` (Python 3.13, a venv per
ansible-core line): each playbook runs as ``python -m sandbox pyroot run --core $BCD_MATRIX_CORE --
ansible-playbook -i inventories/sandbox ...`` from the repository root (default line 2.21). With
``BCD_MATRIX_CORE=host`` the same scenario runs on this checkout's own venv (2.19 on Python 3.11
here), the baseline the other lines are held to. Skipped, with ``pyroot check``'s reason, when the
root is not built; a line the root has no venv for fails. The sandbox runs the Kubernetes release
``BCD_COMPAT_KUBE`` names (``1.33``; default: the sandbox's, ``SANDBOX_KUBE_VERSION`` or the
newest), built into the cache first if it is not (``make test`` and ``make test-long`` run it only
on built releases).

In order, one module fixture runs: the first adoption (at ``-vvvv --diff``), the same again with
nothing to do, the same once more under a ValidatingAdmissionPolicy that denies bcd's privileged
pods (refused by the preflight's dry run, before the lock and any token; the policy is then
removed), a rollout to a new digest, a rollout to a ``dead...`` digest that the canary's gate
fails and rollout.yml rolls back, audit.yml with its JSON, JUnit and Prometheus outputs,
audit.yml again once another field manager set a field of the DaemonSet's pods (the drift
named), the rollout.yml its fix names (restoring the render), doctor.yml (on the cluster, then
on held node files of tests/fixtures/gpu-isolation, then with ``bcd_gpu_api: dra``, which a
release that serves no ``resource.k8s.io`` refuses naming its version), render.yml, add-nodes.yml for a Node added
after adoption and release-cluster.yml. Each test then judges one step from what the fixture
recorded (exit status, recap, output, reports, the cluster right before and after it), so they
pass in any order; the last one greps all of it for the API key and every join token the control
plane minted.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import xmlschema
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import ROOT, VENV_BIN, image, pods, ready, recap
from tests.integration.test_admission import PRIVILEGED, policy
from tests.secrets_scan import find_in_text

pytestmark = [pytest.mark.compat, pytest.mark.sandbox]

CORE = os.environ.get("BCD_MATRIX_CORE", "2.21")
KUBE = os.environ.get("BCD_COMPAT_KUBE") or None  # a Kubernetes minor release; None: the sandbox's default
SANDBOX_DIR = ROOT / ".sandbox-compat"
HOST = "sandbox"  # the inventory's cluster
REPO = "registry.example.com/better-compute/bcd"
GOOD = f"{REPO}:0.2.0@sha256:{'b2' * 32}"
# sandbox/kwok/kwok.yaml: a pod of a digest that begins with dead runs and never turns Ready
DEAD = f"{REPO}:0.9.0@sha256:dead{'0f' * 30}"
# the canary's gate, and the rollback's after it: a loaded machine replaces a pod in several
# seconds, plus the sandbox inventory's 5 s soak
GATE = ("-e", "bcd_rollout_gate_timeout=30")
SCHEMA = ROOT / "tests" / "fixtures" / "junit" / "junit.xsd"
CASES = ROOT / "tests" / "fixtures" / "gpu-isolation"
# node files for the held GPU nodes, with the verdicts tests/fixtures/gpu-isolation/README.md gives
HELD = {"02-containerd-v2-nvidia-toolkit-false": "isolated", "01-containerd-v2-nvidia-no-toolkit-config": "exposed",
        "08-invalid-toml": "unverifiable"}
SOME = "some"  # a recap counter above zero
NS = "bcd-system"
# a policy that denies privileged pods in bcd's namespace: bcd's pod is privileged
POLICY = "bcd-compat-deny-privileged"
DENIED = "privileged pods are not allowed in bcd-system"
# another field manager (a tool's kubectl patch) sets a field of the pod template bcd renders
FOREIGN = "hostpid-tool"
HOST_PID = {"spec": {"template": {"spec": {"hostPID": True}}}}

# What each step gives on every line: its exit status (0, or "not 0") and the cluster's recap
# counters, as on the host's 2.19, where the integration tests hold the same playbooks to them
# (BCD_MATRIX_CORE=host runs this scenario there). A failed task counts as failed, not changed;
# the rollout that is rolled back counts one change: it replaced pods before it failed.
EXPECTED = {
    "adopt":        {"rc": 0, "changed": SOME, "failed": 0},
    "re-adopt":     {"rc": 0, "changed": 0, "failed": 0},
    "adopt-denied": {"rc": "not 0", "changed": 0, "failed": SOME},
    "rollout":      {"rc": 0, "changed": SOME, "failed": 0},
    "rollout-dead": {"rc": "not 0", "changed": SOME, "failed": SOME},
    "audit":        {"rc": 0, "changed": 0, "failed": 0},
    "audit-drift":  {"rc": "not 0", "changed": 0, "failed": SOME},
    "restore":      {"rc": 0, "changed": SOME, "failed": 0},
    "doctor":       {"rc": 0, "changed": 0, "failed": 0},
    "doctor-held":  {"rc": "not 0", "changed": 0, "failed": SOME},
    "render":       {"rc": 0, "changed": SOME, "failed": 0},
    "add-nodes":    {"rc": 0, "changed": SOME, "failed": 0},
    "release":      {"rc": 0, "changed": SOME, "failed": 0},
}


@dataclass
class Step:
    name: str
    argv: list[str]
    rc: int
    stdout: str
    stderr: str
    seconds: float
    files: dict[str, str] = field(default_factory=dict)  # the outputs it wrote: name -> text
    after: dict = field(default_factory=dict)             # what the cluster showed right after it

    @property
    def recap(self) -> dict[str, int]:
        return recap(self.stdout).get(HOST, {})

    @property
    def flat(self) -> str:
        return " ".join((self.stdout + self.stderr).split())

    def tail(self, n: int = 4000) -> str:
        return f"{' '.join(self.argv)}: rc {self.rc}\n{(self.stdout + self.stderr)[-n:]}"


def controller(core: str) -> list[str]:
    """The command that runs ansible-playbook on ``core``'s controller."""
    if core == "host":
        return [str(VENV_BIN / "ansible-playbook")]
    return [sys.executable, "-m", "sandbox", "pyroot", "run", "--core", core, "--", "ansible-playbook"]


def playbook_env(sdir: Path) -> dict[str, str]:
    return {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
            "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "collections"), "SANDBOX_DIR": str(sdir),
            "KUBECONFIG": str(sdir / "kubeconfig"), "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"}


def play(core: str, sdir: Path, name: str, playbook: str, *args: str, files: dict[str, Path] | None = None) -> Step:
    argv = [*controller(core), "-i", "inventories/sandbox", playbook, *args]
    t0 = time.monotonic()
    done = subprocess.run(argv, cwd=str(ROOT), env=playbook_env(sdir), capture_output=True, text=True,
                          timeout=900, check=False)
    step = Step(name, argv, done.returncode, done.stdout, done.stderr, round(time.monotonic() - t0, 1))
    for key, path in (files or {}).items():
        step.files[key] = path.read_text() if path.exists() else ""
    return step


def fleet(sb) -> dict[str, tuple[str, bool]]:
    """node -> (the bcd pod's image, Ready) for every bcd pod."""
    return {node: (image(p), ready(p)) for node, p in pods(sb).items()}


def daemonset(sb) -> dict:
    """bcd's DaemonSet as the API server has it, with its managedFields (kubectl leaves them out)."""
    return json.loads(sb.kubectl("get", "daemonset", "-n", NS, "bcd", "-o", "json", "--show-managed-fields").stdout)


def written(sb) -> dict[str, str]:
    """kind/name -> resourceVersion of bcd's Namespace and every ConfigMap, DaemonSet, Secret
    (the join token's) and Lease (the lock) in it: all a run writes there."""
    ns = json.loads(sb.kubectl("get", "namespace", NS, "-o", "json").stdout)
    listed = sb.kubectl("get", "-n", NS, "configmaps,daemonsets,secrets,leases", "-o", "json")
    items = json.loads(listed.stdout)["items"]
    return {f"{o['kind']}/{o['metadata']['name']}": o["metadata"]["resourceVersion"] for o in [ns, *items]}


def denies(sb) -> bool:
    """Whether the API server enforces POLICY now: a server-side dry run of a privileged pod in
    bcd's namespace is refused, naming it (a policy is enforced, and lifted, a moment after its
    apply or delete)."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bcd-compat-policy-probe", "namespace": NS},
           "spec": {"containers": [{"name": "c", "image": GOOD, "securityContext": {"privileged": True}}]}}
    done = sb.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False)
    return done.returncode != 0 and f"ValidatingAdmissionPolicy '{POLICY}'" in done.stderr


def until(what, timeout: float = 30) -> bool:
    """Whether ``what()`` came true within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not what():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def owners(obj: dict, *field: str) -> list[str]:
    """The field managers that own ``field`` (a path of names) of ``obj``."""
    found = []
    for entry in obj["metadata"].get("managedFields") or []:
        tree = entry.get("fieldsV1") or {}
        for name in field:
            tree = tree.get(f"f:{name}") if isinstance(tree, dict) else None
        if tree is not None:
            found.append(entry["manager"])
    return sorted(found)


def say(request, line: str) -> None:
    """A line shown live: the scenario takes minutes, a log should show where it is."""
    with request.config.pluginmanager.getplugin("capturemanager").global_and_fixture_disabled():
        print(line, flush=True)


def skip_reason(core: str) -> str | None:
    """Why the scenario cannot run on ``core`` here, or None. A line the root does not have is
    no reason to skip: it fails (a typo in BCD_MATRIX_CORE must not pass as a skip)."""
    if core == "host":
        return None
    from sandbox import pyroot

    assert core in pyroot.CORES, f"BCD_MATRIX_CORE={core}: the trixie root has ansible-core {', '.join(pyroot.CORES)}"
    check = subprocess.run([sys.executable, "-m", "sandbox", "pyroot", "check"], cwd=str(ROOT), capture_output=True,
                           text=True, timeout=120, check=False)
    if check.returncode != 0:
        return (check.stdout + check.stderr).strip() or f"pyroot check exited {check.returncode}"
    return None


@pytest.fixture(scope="module")
def compat_sandbox(request):
    """The scenario's own sandbox, fresh (one an interrupted run left is taken down first), and
    down again at the end."""
    reason = skip_reason(CORE)
    if reason:
        pytest.skip(f"the compatibility scenario on ansible-core {CORE}: {reason}")
    from sandbox.api import Sandbox

    sb = Sandbox(SANDBOX_DIR)
    with request.config.pluginmanager.getplugin("capturemanager").global_and_fixture_disabled():
        if sb.state_or_none() is not None:
            sb.down()
        try:
            sb.up(kube_version=KUBE)
        except BaseException:
            sb.down()
            raise
    try:
        yield sb
    finally:
        with request.config.pluginmanager.getplugin("capturemanager").global_and_fixture_disabled():
            sb.down()


@pytest.fixture(scope="module")
def scenario(request, compat_sandbox, tmp_path_factory):
    """Every step, in order, on ``CORE``: ``{"version": ..., "steps": {name: Step}, "secrets": [...],
    "tokens": [...]}``. A step that fails does not stop the ones after it (each test says what
    its own step did); the cluster's state after each step is recorded with it."""
    from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_cp import Client

    from sandbox.control_plane import pki

    sb, sdir = compat_sandbox, compat_sandbox.dir
    out = tmp_path_factory.mktemp(f"compat-{CORE}")
    cpvars = sb.control_plane_vars()
    cp = Client(cpvars["bcd_control_plane_url"], api_key=cpvars["bcd_api_key"], ca_file=cpvars["bcd_control_plane_ca_file"])
    steps: dict[str, Step] = {}
    t0 = time.monotonic()

    def run(name: str, playbook: str, *args: str, files: dict[str, Path] | None = None) -> Step:
        step = steps[name] = play(CORE, sdir, name, playbook, *args, files=files)
        say(request, f"compat {CORE}: {name}: rc {step.rc}, {step.recap or 'no recap'}, {step.seconds}s")
        return step

    def tokens() -> list[dict]:
        return list(cp.list_tokens(cpvars["bcd_tenant"], cpvars["bcd_pool"]))

    version = subprocess.run([*controller(CORE), "--version"], cwd=str(ROOT), env=playbook_env(sdir),
                             capture_output=True, text=True, timeout=120, check=False)

    run("adopt", "adopt-cluster.yml", "-vvvv", "--diff")
    steps["adopt"].after = {"fleet": fleet(sb), "tokens": tokens(), "gpu": sb.gpu_node_names()}
    run("re-adopt", "adopt-cluster.yml")
    steps["re-adopt"].after = {"tokens": tokens()}

    # the preflight's dry-run create meets the policy: refused before the lock and any token
    before = {"objects": written(sb), "tokens": tokens()}
    with policy(sb, POLICY, PRIVILEGED, DENIED):
        enforced = until(lambda: denies(sb))
        run("adopt-denied", "adopt-cluster.yml")
        after = {"objects": written(sb), "tokens": tokens()}
    # the steps after it create pods: the policy must be gone first
    after["lifted"] = until(lambda: not denies(sb))
    steps["adopt-denied"].after = {**after, "before": before, "enforced": enforced}

    report = out / "rollout.json"
    run("rollout", "rollout.yml", "-e", f"bcd_image={GOOD}", *GATE, "-e", f"bcd_report_out={report}",
        files={"report": report})
    steps["rollout"].after = {"fleet": fleet(sb)}
    report = out / "dead.json"
    run("rollout-dead", "rollout.yml", "-e", f"bcd_image={DEAD}", *GATE, "-e", f"bcd_report_out={report}",
        files={"report": report})
    steps["rollout-dead"].after = {"fleet": fleet(sb)}

    # the render audit.yml compares the cluster with names the image the fleet now runs
    files = {"report": out / "audit.json", "junit": out / "audit.xml", "metrics": out / "bcd_audit.prom"}
    run("audit", "audit.yml", "-e", f"bcd_image={GOOD}", "-e", f"bcd_report_out={files['report']}",
        "-e", f"bcd_junit_out={files['junit']}", "-e", f"bcd_metrics_out={files['metrics']}", files=files)

    # a field of the pod template set by another field manager; the pods roll to it before the audit
    sb.kubectl("-n", NS, "patch", "daemonset", "bcd", f"--field-manager={FOREIGN}", "-p", json.dumps(HOST_PID))
    sb.kubectl("rollout", "status", "daemonset/bcd", "-n", NS, "--timeout=240s", timeout=260)
    report = out / "drift.json"
    run("audit-drift", "audit.yml", "-e", f"bcd_image={GOOD}", "-e", f"bcd_report_out={report}",
        files={"report": report})
    steps["audit-drift"].after = {"daemonset": daemonset(sb)}
    report = out / "restore.json"
    run("restore", "rollout.yml", "-e", f"bcd_image={GOOD}", *GATE, "-e", f"bcd_report_out={report}",
        files={"report": report})
    steps["restore"].after = {"fleet": fleet(sb), "daemonset": daemonset(sb)}

    report = out / "doctor.json"
    run("doctor", "doctor.yml", "-e", f"bcd_report_out={report}", files={"report": report})
    held = dict(zip(sb.gpu_node_names(), HELD, strict=False))  # node -> its case
    for node, case in held.items():
        shutil.copytree(CASES / case, out / "held" / node)
    report = out / "doctor-held.json"
    roots = {node: str(out / "held" / node) for node in held}
    run("doctor-held", "doctor.yml", "-e", json.dumps({"bcd_node_roots": roots}), "-e", f"bcd_report_out={report}",
        files={"report": report})
    steps["doctor-held"].after = {"held": {node: HELD[case] for node, case in held.items()}}
    report = out / "doctor-dra.json"
    run("doctor-dra", "doctor.yml", "-e", "bcd_gpu_api=dra", "-e", f"bcd_report_out={report}", files={"report": report})

    rendered = out / "render.json"
    run("render", "render.yml", "-e", f"bcd_render_out={rendered}", files={"render": rendered})
    # the same render by this checkout's own ansible-core: a cheap check that both give one result
    baseline = out / "render-host.json"
    host = play("host", sdir, "render-host", "render.yml", "-e", f"bcd_render_out={baseline}", files={"render": baseline})
    steps["render"].after = {"host": host}

    before = {t["id"] for t in tokens()}
    new = sb.add_nodes(1)
    run("add-nodes", "add-nodes.yml", "-e", f"bcd_image={GOOD}")
    steps["add-nodes"].after = {"new": new, "minted": [t for t in tokens() if t["id"] not in before],
                                "reporting": {n["hostname"]: n["state"]
                                              for n in cp.list_nodes(cpvars["bcd_tenant"], cpvars["bcd_pool"])}}

    run("release", "release-cluster.yml", "-e", "bcd_release_confirm=sandbox")

    # every token the control plane ever minted, recomputed from its id (never printed)
    minted = tokens()
    keys = pki.ensure(Path(sdir) / "control-plane")
    secrets = [cpvars["bcd_api_key"], *(keys.token_for(t["id"]) for t in minted)]
    say(request, f"compat {CORE}: {len(steps)} steps in {round(time.monotonic() - t0)}s")
    return {"version": version, "steps": steps, "secrets": secrets, "tokens": minted}


def judge(step: Step, want: dict | None = None) -> None:
    want = want or EXPECTED[step.name]
    assert (step.rc != 0 if want["rc"] == "not 0" else step.rc == want["rc"]), step.tail()
    got = step.recap
    assert got, f"no PLAY RECAP for {HOST}: {step.tail()}"
    for counter in ("changed", "failed"):
        value = got.get(counter, 0)
        assert (value > 0 if want[counter] == SOME else value == want[counter]), (counter, got, step.tail())


def test_the_scenario_ran_on_the_ansible_core_it_names(scenario):
    done = scenario["version"]
    assert done.returncode == 0, done.stdout + done.stderr
    if CORE != "host":
        from sandbox import pyroot

        assert f"[core {pyroot.CORES[CORE]}]" in done.stdout, done.stdout
        assert "python version = 3.13." in done.stdout, done.stdout


def test_the_scenario_ran_on_the_kubernetes_it_names(compat_sandbox):
    from kubernetes import client

    from sandbox import build

    # the API server's own answer, not the sandbox's record of what it started
    with compat_sandbox.api_client() as api:
        served = client.VersionApi(api).get_code()
    assert served.git_version == "v" + build.pinned_version("kube", build.K8S, build.kube_minor(KUBE)), served


def test_first_adoption(scenario):
    step = scenario["steps"]["adopt"]
    judge(step)
    # a Ready bcd pod on every GPU node
    assert sorted(step.after["fleet"]) == sorted(step.after["gpu"]), step.after["fleet"]
    assert all(r for _, r in step.after["fleet"].values()), step.after["fleet"]
    (token,) = step.after["tokens"]
    assert token["revokedAt"], "adoption revokes its token"


def test_re_adoption_has_nothing_to_do(scenario):
    step = scenario["steps"]["re-adopt"]
    judge(step)
    assert "nothing to do, no token minted" in step.flat, step.tail()
    assert len(step.after["tokens"]) == 1, "no token minted"


def test_an_admission_policy_refuses_adoption_before_anything_changes(scenario):
    step = scenario["steps"]["adopt-denied"]
    assert step.after["enforced"], f"the API server did not enforce ValidatingAdmissionPolicy {POLICY} within 30s"
    judge(step)
    # the API server's own words and the fix, from the preflight's dry run: not a wait's timeout
    assert "(a dry-run create of pod bcd-admission-probe for Node " in step.flat, step.tail()
    assert f"ValidatingAdmissionPolicy '{POLICY}' with binding '{POLICY}' denied request: {DENIED}" in step.flat, \
        step.tail()
    assert f"Fix: ValidatingAdmissionPolicy {POLICY} (binding {POLICY}) refuses bcd's pod: exclude namespace {NS}" \
        in step.flat, step.tail()
    assert "The DaemonSet was not applied and no token minted" in step.flat, step.tail()
    assert "Traceback" not in step.stdout + step.stderr, step.tail()
    before = step.after["before"]
    assert {"Namespace/bcd-system", "ConfigMap/bcd-config", "DaemonSet/bcd"} <= set(before["objects"]), before
    assert step.after["objects"] == before["objects"], "nothing in bcd's namespace changed"
    assert [t["id"] for t in step.after["tokens"]] == [t["id"] for t in before["tokens"]], "no token minted"
    assert all(t["revokedAt"] for t in step.after["tokens"]), step.after["tokens"]
    assert step.after["lifted"], f"ValidatingAdmissionPolicy {POLICY} still enforced 30s after its removal"


def test_a_rollout_to_a_new_digest(scenario):
    step = scenario["steps"]["rollout"]
    judge(step)
    summary = json.loads(step.files["report"])
    assert summary["result"] == "succeeded" and summary["to"]["image"] == GOOD, summary
    assert {img for img, _ in step.after["fleet"].values()} == {GOOD}, step.after["fleet"]
    assert all(r for _, r in step.after["fleet"].values()), step.after["fleet"]


def test_a_failed_rollout_is_rolled_back(scenario):
    step = scenario["steps"]["rollout-dead"]
    judge(step)
    assert step.files["report"], f"no report: {step.tail()}"
    summary = json.loads(step.files["report"])
    assert summary["result"] == "rolled_back" and summary["rollback"]["outcome"] == "succeeded", summary
    assert summary["from"]["image"] == GOOD and summary["to"]["image"] == DEAD
    assert summary["stages"][0]["name"] == "canary" and summary["stages"][0]["outcome"] == "failed"
    assert "rolled back" in step.stdout, step.tail()
    # the whole fleet is back on the previous image, and Ready
    assert set(step.after["fleet"].values()) == {(GOOD, True)}, step.after["fleet"]


def test_audit_passes_with_json_junit_and_metrics(scenario):
    step = scenario["steps"]["audit"]
    judge(step)
    report = json.loads(step.files["report"])
    results = report["clusters"][HOST]["results"]
    assert report["passed"] is True and all(r["ok"] for r in results), [r for r in results if not r["ok"]]
    schema = xmlschema.XMLSchema(str(SCHEMA))
    schema.validate(step.files["junit"])
    suite = schema.to_dict(step.files["junit"])["testsuite"][0]
    assert suite["@tests"] == len(results) and suite["@failures"] == 0
    families = {f.name: f for f in text_string_to_metric_families(step.files["metrics"])}
    samples = families["bcd_audit_check_ok"].samples
    assert len(samples) == len(results) and all(s.value == 1 for s in samples)


def test_a_field_another_manager_set_fails_the_audit_and_its_fix_restores_it(scenario):
    step = scenario["steps"]["audit-drift"]
    judge(step)
    results = json.loads(step.files["report"])["clusters"][HOST]["results"]
    assert [(r["check"], r["node"]) for r in results if not r["ok"]] == [("drift-daemonset", "")], step.tail()
    lines = next(r["message"] for r in results if r["check"] == "drift-daemonset").splitlines()
    assert f"spec.template.spec.hostPID: live true, rendered false; field manager(s) {FOREIGN}" in lines, lines
    assert any(x.startswith("fix: ansible-playbook rollout.yml ") for x in lines), lines
    assert "drift-daemonset failed" in step.flat, step.tail()
    # the fix the audit names: the render is back, the field bcd-ansible's again, the fleet Ready on it
    restore = scenario["steps"]["restore"]
    judge(restore)
    summary = json.loads(restore.files["report"])
    assert summary["result"] == "succeeded", summary
    drifted, ds = step.after["daemonset"], restore.after["daemonset"]
    assert drifted["spec"]["template"]["spec"].get("hostPID") is True, drifted["spec"]["template"]["spec"]
    assert owners(drifted, "spec", "template", "spec", "hostPID") == [FOREIGN], drifted["metadata"]["managedFields"]
    assert not ds["spec"]["template"]["spec"].get("hostPID"), ds["spec"]["template"]["spec"]
    assert owners(ds, "spec", "template", "spec", "hostPID") == ["bcd-ansible"], ds["metadata"]["managedFields"]
    assert set(restore.after["fleet"].values()) == {(GOOD, True)}, restore.after["fleet"]


def test_doctor_on_the_cluster_and_on_held_node_files(scenario):
    step = scenario["steps"]["doctor"]
    judge(step)
    assert {n["verdict"] for n in json.loads(step.files["report"])["nodes"]} == {"isolated"}, step.files["report"]
    held = scenario["steps"]["doctor-held"]
    judge(held)
    verdicts = {n["name"]: n["verdict"] for n in json.loads(held.files["report"])["nodes"]}
    assert {n: verdicts.get(n) for n in held.after["held"]} == held.after["held"], held.tail()


def test_dra_is_refused_where_the_api_server_serves_no_resource_k8s_io(scenario, compat_sandbox):
    from kubernetes import client

    step = scenario["steps"]["doctor-dra"]
    # what the API server itself serves, not what its version number suggests
    with compat_sandbox.api_client() as api:
        served = any(g.name == "resource.k8s.io" for g in client.ApisApi(api).get_api_versions().groups)
        version = client.VersionApi(api).get_code().git_version
    # the adopted nodes are isolated: only a server without resource.k8s.io fails the check
    judge(step, {"rc": 0 if served else "not 0", "changed": 0, "failed": 0 if served else SOME})
    report = json.loads(step.files["report"])
    refused = [f for n in report["nodes"] for f in n.get("readiness") or [] if f["check"] == "dra-api"]
    if served:
        assert not refused, refused
        assert report["resource_slices"].startswith("resource.k8s.io/"), report["resource_slices"]
    else:
        assert len(refused) == len(report["nodes"]) > 0, report["nodes"]
        assert f"this API server (Kubernetes {version}) serves no resource.k8s.io API" in refused[0]["message"]
        assert "set bcd_gpu_api: device-plugin" in refused[0]["fix"]
        assert f"(Kubernetes {version}) serves no resource.k8s.io" in step.flat, step.tail()


def test_render_gives_what_the_hosts_ansible_core_gives(scenario):
    step = scenario["steps"]["render"]
    judge(step)
    host = step.after["host"]
    assert host.rc == 0, host.tail()
    assert json.loads(step.files["render"]) == json.loads(host.files["render"])


def test_add_nodes_joins_a_node_added_after_adoption(scenario):
    step = scenario["steps"]["add-nodes"]
    judge(step)
    (token,) = step.after["minted"]
    assert token["maxUses"] == len(step.after["new"]) and token["revokedAt"], token
    assert all(step.after["reporting"].get(n) in ("adopting", "ready") for n in step.after["new"]), step.after


def test_release(scenario):
    step = scenario["steps"]["release"]
    judge(step)
    assert "Cluster sandbox is released" in step.stdout, step.tail()


def test_no_secret_in_any_output(scenario):
    """The API key and every join token (adoption's, at -vvvv --diff, and add-nodes'), plain or
    base64, in no step's output nor any file a step wrote. Named by number, never printed."""
    assert len(scenario["tokens"]) >= 2, "adoption and add-nodes each minted a token to look for"
    leaks = {}
    for step in scenario["steps"].values():
        texts = {"output": step.stdout + step.stderr, **step.files}
        for where, text in texts.items():
            found = find_in_text(text, scenario["secrets"])
            if found:
                leaks[f"{step.name} {where}"] = found
    assert not leaks, f"a secret leaked: {leaks}"

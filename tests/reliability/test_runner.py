"""The playbooks under ansible-runner, the engine AWX and Ansible Automation Platform run them with.

AWX keeps every job event (task results, stdout) in its database and shows them to everyone
who can read the job. Each scenario runs a root playbook of this repository as a project
(``project_dir``) against the sandbox, with an inventory that holds no API key, and passes the
key as AWX passes a credential:

- a vaulted extra var (``{"__ansible_vault": ...}``, AWX's extra-vars file) with the vault
  password answered at the ``Vault password:`` prompt, as a Vault credential does;
- or an environment variable injected from a custom credential type (``BETTER_COMPUTE_API_KEY``),
  with ``suppress_env_files`` as AWX sets it.

Then the whole private data directory (``artifacts/<ident>/``: ``job_events/*.json``,
``stdout``, ``stderr``, ``command``, ``status``, ``rc``, ``fact_cache/``; and ``env/``, the
inputs) is scanned (tests/secrets_scan.py) for the API key and for every join token the
control plane ever minted, plain and base64-encoded. One thing ansible-runner itself does is
asserted as it is: it writes the whole process environment into ``artifacts/<ident>/command``
(0600), so a key injected as an environment variable is there, and only there; AWX keeps that
file in the job's private data directory on the execution node, which it removes after the
job, and never stores or shows it. The vaulted extra var leaves the key nowhere.

Extra vars are given as an AWX survey gives them, every value a string; values the model
cannot convert without doubt are refused with INVALID_CONFIG before anything changes. Warnings
must reach the job events as warnings (``event_data.res.warnings``), not as debug lines.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import ansible_runner
import pytest
import yaml

from tests.helpers import ROOT, VENV_BIN
from tests.reliability.harness import INVENTORY_IMAGE, baseline_ok, daemonset_image
from tests.secrets_scan import find_in_files, find_in_text

pytestmark = pytest.mark.sandbox

VAULT_PASSWORD = "bcd-test-vault-" + uuid.uuid4().hex
REPO = "registry.example.com/better-compute/bcd"
DEAD = f"{REPO}:0.9.0@sha256:dead{'0f' * 30}"  # the sandbox's kubelet never makes this pod Ready
# What inventories/sandbox takes from the emulator's control-plane.yml, but the API key.
CONTROL_PLANE_VARS = ("bcd_control_plane_url", "bcd_control_plane_ca_file", "bcd_gateway_url", "bcd_site_id", "bcd_pins",
                      "bcd_tenant", "bcd_pool")
JINJA_OR_PYTHON = ("Traceback", "TemplateSyntaxError", "UndefinedError", "AnsibleUndefinedVariable",
                   "template error", "Conditional result", "unexpected '", "Error while evaluating")


def vaulted(value: str) -> dict:
    from ansible.parsing.vault import VaultLib, VaultSecret

    text = VaultLib([("default", VaultSecret(VAULT_PASSWORD.encode()))]).encrypt(value).decode()
    return {"__ansible_vault": text}


def inventory(world) -> dict:
    """The sandbox as an AWX inventory would hold it: every variable but the API key."""
    hostvars = {k: world.vars[k] for k in CONTROL_PLANE_VARS}
    hostvars.update(
        ansible_connection="local", ansible_python_interpreter=sys.executable,
        bcd_kubeconfig=str(world.sandbox.kubeconfig), bcd_image=INVENTORY_IMAGE,
        bcd_node_selector={"nvidia.com/gpu.present": "true"},
    )
    return {"clusters": {"hosts": {"sandbox": hostvars}}}


class Job:
    """One ansible-runner job: its private data directory, result and events."""

    def __init__(self, pdd: Path, runner):
        self.pdd = pdd
        self.runner = runner
        self.events = list(runner.events)
        self.artifacts = Path(runner.config.artifact_dir)

    @property
    def stdout(self) -> str:
        return (self.artifacts / "stdout").read_text()

    @property
    def text(self) -> str:
        return " ".join(self.stdout.split())

    def files(self) -> list[Path]:
        return sorted(p for p in self.pdd.rglob("*") if p.is_file() and not p.is_symlink())

    def warnings(self) -> list[str]:
        out = []
        for e in self.events:
            res = (e.get("event_data") or {}).get("res") or {}
            out += [w if isinstance(w, str) else json.dumps(w) for w in res.get("warnings") or []]
        return out

    def debug_warnings(self) -> list[str]:
        """Results of debug tasks whose message starts with WARNING (a warning as a plain line)."""
        out = []
        for e in self.events:
            data = e.get("event_data") or {}
            msg = (data.get("res") or {}).get("msg")
            msgs = msg if isinstance(msg, list) else [msg]
            out += [m for m in msgs if isinstance(m, str) and m.lstrip().startswith("WARNING")]
        return out

    def failed_messages(self) -> list[str]:
        return [str((e["event_data"].get("res") or {}).get("msg", "")) for e in self.events
                if e["event"] in ("runner_on_failed", "runner_item_on_failed")]


def run_job(tmp_path: Path, world, playbook: str, extravars: dict, key_as: str = "vault", recorder=None) -> Job:
    """Run ``playbook`` through ``ansible_runner.run`` as AWX would (see the module docstring)."""
    pdd = tmp_path / f"job-{playbook.removesuffix('.yml')}"
    (pdd / "inventory").mkdir(parents=True)
    (pdd / "inventory" / "hosts.yml").write_text(yaml.safe_dump(inventory(world)))
    # ansible-playbook from this virtualenv (an EE has it on PATH)
    envvars = {"PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    kwargs = {}
    if key_as == "vault":
        extravars = {**extravars, "bcd_api_key": vaulted(world.api_key)}
        kwargs.update(cmdline="--ask-vault-pass", passwords={r"^Vault password:\s*?$": VAULT_PASSWORD})
    else:
        envvars["BETTER_COMPUTE_API_KEY"] = world.api_key
        kwargs.update(suppress_env_files=True)
    runner = ansible_runner.run(
        private_data_dir=str(pdd), project_dir=str(ROOT), playbook=playbook, inventory=str(pdd / "inventory" / "hosts.yml"),
        extravars=extravars, envvars=envvars, ident=f"{playbook.removesuffix('.yml')}-{uuid.uuid4().hex[:8]}",
        quiet=True, settings={"job_timeout": 900}, **kwargs,
    )
    if recorder is not None:
        recorder.runs += 1
    return Job(pdd, runner)


def scan(job: Job, world, reliability) -> dict[str, list[str]]:
    """Which files of the job's private data directory hold a secret; the figures of the scan."""
    files, secrets = job.files(), world.secrets()
    reliability.figures.update({
        "files scanned": len(files), "job events": len(job.events),
        "bytes scanned": sum(p.stat().st_size for p in files), "secrets looked for": len(secrets),
    })
    return find_in_files(files, secrets)


def test_adopt_cluster_under_ansible_runner_with_a_vaulted_key(ready, tmp_path, reliability):
    world = ready
    reliability.describe("Secrets", "adopt-cluster.yml under ansible-runner, the API key a vaulted extra var, "
                                    "survey-style string extra vars; the whole private data directory scanned")
    world.forget()  # every GPU node to join: a token is minted
    before = {t["id"] for t in world.tokens()}
    job = run_job(tmp_path, world, "adopt-cluster.yml", {"bcd_token_ttl": "15m", "bcd_create_namespace": "true",
                                                         "bcd_gpu_isolation_enforce": "true"}, recorder=reliability)
    assert (job.runner.status, job.runner.rc) == ("successful", 0), job.stdout[-4000:]
    minted = [t for t in world.tokens() if t["id"] not in before]
    assert len(minted) == 1 and minted[0]["revokedAt"], "one token minted for the run, and revoked"
    assert world.all_joined() and world.clean()

    leaks = scan(job, world, reliability)
    assert not leaks, f"a secret in the private data directory: {leaks}"
    # what the scan covered is really there
    names = {p.relative_to(job.artifacts).parts[0] for p in job.files() if job.artifacts in p.parents}
    assert {"job_events", "stdout", "command", "status", "rc"} <= names, names
    assert stat.S_IMODE((job.artifacts / "command").stat().st_mode) == 0o600

    # warnings reach the events as warnings (the sandbox's pool and namespace default warrant two)
    warnings = " ".join(job.warnings())
    assert "tenant-controlled" in warnings and "Pod Security lets pods in" in warnings, job.warnings()
    assert job.debug_warnings() == []
    reliability.result = "adopted, one token minted and revoked; no secret in any artifact; warnings in event_data.res.warnings"


@pytest.mark.long  # slow: make test-long keeps make test within its budget
def test_rollout_with_a_failing_canary_under_ansible_runner(ready_any_image, tmp_path, reliability, sandbox):
    world = ready_any_image
    reliability.describe("Secrets", "rollout.yml under ansible-runner to a digest whose canary never gets Ready "
                                    "(survey strings), rolled back; the whole private data directory scanned")
    canary = world.gpu_nodes()[0]
    previous = daemonset_image(world)
    report = tmp_path / "rollout.json"
    before = len(world.tokens())
    job = run_job(tmp_path, world, "rollout.yml", {
        "bcd_image": DEAD, "bcd_rollout_canary": "1", "bcd_rollout_max_unavailable": "1", "bcd_rollout_rollback": "true",
        "bcd_rollout_gate_timeout": "8", "bcd_report_out": str(report)}, recorder=reliability)
    assert job.runner.status == "failed" and job.runner.rc != 0, job.stdout[-4000:]
    summary = json.loads(report.read_text())
    assert summary["result"] == "rolled_back", summary
    assert [(f["node"], f["stage"]) for f in summary["failed_nodes"]] == [(canary, "canary")], summary
    assert daemonset_image(world) == previous, "the DaemonSet is back on the previous digest"
    assert canary in " ".join(job.failed_messages()), job.failed_messages()
    assert len(world.tokens()) == before, "a rollout mints no token"
    assert world.lease_holder() is None, "the lock is released"

    leaks = scan(job, world, reliability)
    assert not leaks, f"a secret in the private data directory: {leaks}"
    assert job.debug_warnings() == []
    world.wait(lambda: baseline_ok(world, image=False)[0], timeout=180, why="the fleet healthy again after the rollback")
    reliability.result = f"failed naming {canary}, rolled back to the previous digest; no secret in any artifact"


def test_add_nodes_with_the_key_injected_as_an_environment_variable(ready, tmp_path, reliability):
    world = ready
    reliability.describe("Secrets", "add-nodes.yml under ansible-runner, the API key injected as "
                                    "BETTER_COMPUTE_API_KEY (custom credential type), selector as a JSON string")
    world.forget(world.gpu_nodes()[:1])
    before = {t["id"] for t in world.tokens()}
    job = run_job(tmp_path, world, "add-nodes.yml", {
        "bcd_node_selector": '{"nvidia.com/gpu.present": "true"}', "bcd_token_ttl": "10m"}, key_as="env",
        recorder=reliability)
    assert (job.runner.status, job.runner.rc) == ("successful", 0), job.stdout[-4000:]
    minted = [t for t in world.tokens() if t["id"] not in before]
    assert len(minted) == 1 and minted[0]["revokedAt"], minted
    assert world.all_joined() and world.clean()

    leaks = scan(job, world, reliability)
    command = job.artifacts / "command"
    # ansible-runner copies the process environment into `command`, and nothing else holds the key
    assert set(leaks) == {str(command)}, leaks
    doc = json.loads(command.read_text())
    assert doc["env"].pop("BETTER_COMPUTE_API_KEY") == world.api_key, "the key is the injected variable"
    assert not find_in_text(json.dumps(doc), world.secrets()), "nowhere else in command"
    assert stat.S_IMODE(command.stat().st_mode) == 0o600
    assert not (job.pdd / "env").exists(), "suppress_env_files: no env/ inputs written"
    reliability.result = ("joined one node; the key only in artifacts/<ident>/command, ansible-runner's copy of the "
                          "injected environment (0600)")


def test_survey_values_in_doubt_are_refused_before_anything_changes(ready_any_image, tmp_path, reliability):
    """Through the ansible-runner command line (``ansible-runner run``), as an operator would try a job."""
    world = ready_any_image
    reliability.describe("Bad input", "rollout.yml under `ansible-runner run`, survey strings the model cannot "
                                      "convert without doubt")
    rv = world.apps.read_namespaced_daemon_set("bcd", world.namespace).metadata.resource_version
    pdd = tmp_path / "job-refused"
    (pdd / "env").mkdir(parents=True)
    (pdd / "inventory").mkdir()
    (pdd / "inventory" / "hosts.yml").write_text(yaml.safe_dump(inventory(world)))
    (pdd / "env" / "extravars").write_text(json.dumps({
        "bcd_image": DEAD, "bcd_rollout_canary": "3.5", "bcd_rollout_rollback": "maybe",
        "bcd_node_selector": '{"nvidia.com/gpu.present": ', "bcd_tolerations": "[{'operator': 'Exists'}]"}))
    (pdd / "env" / "envvars").write_text(json.dumps({"BETTER_COMPUTE_API_KEY": "not-the-key-" + uuid.uuid4().hex}))
    started = time.monotonic()
    run = subprocess.run([str(VENV_BIN / "ansible-runner"), "run", str(pdd), "-p", "rollout.yml", "--project-dir", str(ROOT),
                          "--inventory", str(pdd / "inventory" / "hosts.yml"), "--ident", "refused"],
                         capture_output=True, text=True, timeout=300, check=False,
                         env={**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}"})
    reliability.runs += 1
    out = run.stdout + run.stderr + (pdd / "artifacts" / "refused" / "stdout").read_text()
    flat = " ".join(out.split())
    assert run.returncode != 0
    for line in ("INVALID_CONFIG: bcd_rollout_canary: must be an integer",
                 "INVALID_CONFIG: bcd_rollout_rollback: must be true or false",
                 "INVALID_CONFIG: bcd_node_selector: a string that starts like JSON but is not valid JSON",
                 "INVALID_CONFIG: bcd_tolerations: a string that starts like JSON but is not valid JSON"):
        assert line in flat, flat[-3000:]
    assert not [w for w in JINJA_OR_PYTHON if w in out], out[-3000:]
    assert world.apps.read_namespaced_daemon_set("bcd", world.namespace).metadata.resource_version == rv
    assert world.lease_holder() is None
    reliability.result = "refused with four INVALID_CONFIG lines, nothing changed"
    reliability.figures.update({"seconds": round(time.monotonic() - started, 1)})

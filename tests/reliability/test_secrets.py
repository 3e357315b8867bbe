"""Secrets: every playbook, at -vvvv with --diff and ANSIBLE_LOG_PATH, under the default and the
ansible.posix.json callbacks and under mitogen's strategy, leaves the API key and every join token out of everything.

Each run is wrapped in a playbook that first notes the host's variables and, after the
playbook, prints every variable the playbook registered or set (the registered results of
no_log tasks included: no_log hides them from the output, not from a later debug). The
scan looks for the API key and for every token the control-plane emulator ever minted (each
recomputed from its id), plain and base64-encoded (tests/secrets_scan.py), in:

- the output (stdout and stderr) and the ANSIBLE_LOG_PATH log;
- the registered-variable dump (in the output);
- the command line of every process the run started (sampled every 0.2 s);
- every file under the repository, the temporary directory and ~/.ansible modified during
  the run, but the 0600 Secret file asked for with bcd_join_secret_out (and the sandbox's own
  state directory, where the emulator keeps its key);
- every Namespace, Node, Pod, ConfigMap, DaemonSet, Lease, Secret and Event of the cluster
  (annotations, specs, data, messages).

The scenario is arranged so the secret is really there: adopt-cluster.yml and add-nodes.yml
mint a token (the control plane first forgets the nodes), rollout.yml rolls the DaemonSet to
another digest and back, release-cluster.yml releases the adopted cluster (with the API key), and
the token minted is checked against the Secret file.
"""

from __future__ import annotations

import base64
import json
import stat
import time

import pytest

from tests.helpers import ROOT, mitogen_env
from tests.reliability.harness import INVENTORY_IMAGE, daemonset_image
from tests.secrets_scan import files_touched_since, find_in_files, find_in_text

pytestmark = pytest.mark.sandbox

# release-cluster.yml last: the next run's fixture adopts the cluster again
PLAYBOOKS = ("adopt-cluster.yml", "add-nodes.yml", "render.yml", "gpu-stack.yml", "doctor.yml", "rollout.yml",
             "audit.yml", "release-cluster.yml")
# "mitogen": the default callback under mitogen's strategy, the opt-in persistent interpreter
CALLBACKS = {"default": {}, "json": {"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"}, "mitogen": mitogen_env()}
OTHER_IMAGE = "registry.example.com/better-compute/bcd:0.1.1@sha256:" + "b" * 64
DUMP_MARK = "reliability-dump"

WRAPPER = """---
- name: Note the variables the host has before the playbook
  hosts: all
  gather_facts: false
  tasks:
    - name: Note them
      ansible.builtin.set_fact:
        reliability_before: "{{{{ query('ansible.builtin.varnames', '.*') }}}}"

- name: Run the playbook under test
  ansible.builtin.import_playbook: {playbook}

- name: Dump every variable the playbook registered or set
  hosts: all
  gather_facts: false
  tasks:
    - name: {mark}
      ansible.builtin.debug:
        msg: "{{{{ {{item: lookup('ansible.builtin.vars', item)}} }}}}"
      loop: "{{{{ query('ansible.builtin.varnames', '.*') | difference(reliability_before + ['reliability_before']) | sort }}}}"
"""


def arrange(playbook: str, world, tmp_path) -> tuple[list[str], str]:
    """Make the playbook do its real work; return its extra arguments and what it will do."""
    if playbook == "adopt-cluster.yml":
        world.forget()
        return ["-e", f"bcd_join_secret_out={tmp_path / 'secret.json'}"], "mints a token for every GPU node"
    if playbook == "add-nodes.yml":
        world.forget(world.gpu_nodes()[:1])
        return ["-e", f"bcd_join_secret_out={tmp_path / 'secret.json'}"], "mints a token for one node"
    if playbook == "render.yml":
        return ["-e", f"bcd_render_out={tmp_path / 'render.json'}"], "renders to a file"
    if playbook == "rollout.yml":
        target = INVENTORY_IMAGE if daemonset_image(world) != INVENTORY_IMAGE else OTHER_IMAGE
        return ["-e", f"bcd_image={target}"], f"rolls the DaemonSet to sha256:{target.rsplit(':', 1)[1][:12]}"
    if playbook == "release-cluster.yml":
        return ["-e", "bcd_release_confirm=sandbox"], "releases the cluster's nodes and deletes bcd's objects"
    if playbook == "audit.yml":
        return [], "audits the cluster"
    return [], "configures and checks GPU isolation" if playbook == "gpu-stack.yml" else "checks GPU isolation"


# the default callback in make test; the json callback (the same runs, machine-readable output) and
# mitogen's strategy in make test-long
@pytest.mark.parametrize("callback", [pytest.param(c, marks=[pytest.mark.long] if c != "default" else []) for c in CALLBACKS])
@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_no_secret_in_output_log_dump_files_or_cluster(playbook, callback, runner, tmp_path, reliability, request):
    # rollout.yml rolls the DaemonSet to another image and the next one back: no re-adoption between
    world = request.getfixturevalue("ready_any_image" if playbook == "rollout.yml" else "ready")
    how = "default callback, mitogen strategy" if callback == "mitogen" else f"{callback} callback"
    reliability.describe("Secrets", f"{playbook} -vvvv --diff, {how}, ANSIBLE_LOG_PATH")
    args, doing = arrange(playbook, world, tmp_path)
    wrapper = tmp_path / "wrapper.yml"
    wrapper.write_text(WRAPPER.format(playbook=str(ROOT / playbook), mark=DUMP_MARK))
    log = tmp_path / "ansible.log"
    before = {t["id"] for t in world.tokens()}
    since = time.time() - 1
    run = runner.run(str(wrapper), "-vvvv", "--diff", *args, env={"ANSIBLE_LOG_PATH": str(log), **CALLBACKS[callback]},
                     watch_cmdlines=True)
    assert run.returncode == 0, run.tail()
    assert DUMP_MARK in run.output, "the registered-variable dump ran"
    if callback == "mitogen":
        assert any("(mitogen:" in c for c in run.cmdlines), "the modules ran in mitogen's interpreter"

    minted = [t for t in world.tokens() if t["id"] not in before]
    secret_file = tmp_path / "secret.json"
    if playbook in ("adopt-cluster.yml", "add-nodes.yml"):
        # the secret is really there: one token minted, written to the 0600 file, revoked after
        assert len(minted) == 1 and minted[0]["revokedAt"], minted
        assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
        data = json.loads(secret_file.read_text())["data"]["token"]
        same = base64.b64decode(data).decode() == world.token_values([minted[0]["id"]])[0]
        assert same, "the Secret file does not hold the minted token"  # compared outside the assert: never printed
    else:
        assert minted == []
    if playbook == "rollout.yml":
        assert "rolled, healthy" in run.text, run.tail()
    if playbook == "release-cluster.yml":
        # the API key was really used: the adopted nodes were removed from the control plane
        assert "Cluster sandbox is released" in run.text and "0 node(s) removed" not in run.text, run.tail()

    secrets = world.secrets()
    where = {
        "output": find_in_text(run.output, secrets),
        "ANSIBLE_LOG_PATH": find_in_text(log.read_text(), secrets),
        "command lines": find_in_text("\n".join(sorted(run.cmdlines)), secrets),
        "Kubernetes objects": find_in_text(world.objects_text(), secrets),
    }
    touched = files_touched_since(since, exclude=(secret_file, world.sandbox.dir))
    where["files"] = find_in_files(touched, secrets)
    leaks = {k: v for k, v in where.items() if v}
    assert not leaks, f"a secret leaked: {leaks}"

    reliability.result = f"{doing}; no secret found"
    reliability.figures.update({
        "secrets looked for": len(secrets), "output bytes": len(run.output), "log bytes": log.stat().st_size,
        "files scanned": len(touched), "command lines": len(run.cmdlines), "seconds": round(run.seconds, 1),
    })

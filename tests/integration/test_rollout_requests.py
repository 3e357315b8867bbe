"""What rollout.yml reads once instead of twice, and applies in bcd_rollout, against the sandbox.

A rollout's comparison reads each object once: without --check or --diff, bcd_field_ownership's
``dry_run`` answers what kubernetes.core's server-side dry run answers, and the difference printed
from it must be the same, line for line. The takeover under the lock is skipped when the
comparison's judgement ``stands`` and the fleet read under the lock finds the same
``resourceVersion``s: both are checked here against the real API server, as is the folded apply
(bcd_rollout ``apply``): a rollout's report names the same stages, the DaemonSet ends as rendered,
--check changes neither the ConfigMap nor the DaemonSet, and no output of --diff holds the API key.
A release by the Lease's version deletes only the Lease this run wrote.
"""

from __future__ import annotations

import json
import textwrap

import pytest
import yaml

from tests.helpers import ROOT, daemonset, kget, recap, run_playbook
from tests.secrets_scan import find_in_text

pytestmark = [pytest.mark.sandbox, pytest.mark.usefixtures("adopted")]

NS = "bcd-system"
REPO = "registry.example.com/better-compute/bcd"
NEW = f"{REPO}:0.5.0@sha256:{'e5' * 32}"

# The comparison both ways, on a render that changes the DaemonSet's image and the ConfigMap's
# log level: bcd_field_ownership's dry run and kubernetes.core's, as compare.yml runs each.
COMPARE = textwrap.dedent("""\
    - name: The comparison's two dry runs, side by side
      hosts: clusters
      gather_facts: false
      vars:
        ansible_connection: local
        ansible_python_interpreter: "{{ ansible_playbook_python }}"
      module_defaults:
        group/bcd.kubernetes.bcd:
          config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
          api_key: "{{ bcd_api_key | default(omit) }}"
        group/kubernetes.core.k8s:
          kubeconfig: "{{ bcd_kubeconfig | default(omit) }}"
      tasks:
        - name: Render
          ansible.builtin.include_role: {name: bcd.kubernetes.bcd_daemonset, tasks_from: render}
        - name: Ours
          bcd.kubernetes.bcd_field_ownership:
            objects: "{{ bcd_daemonset_render.objects }}"
            dry_run: true
          check_mode: true
          register: ours
        - name: Read the fleet as the lock does (its versions)
          bcd.kubernetes.bcd_rollout_info:
            cluster: sandbox
          register: fleet
        - name: kubernetes.core's
          kubernetes.core.k8s:
            state: present
            definition: "{{ bcd_daemonset_render.objects | selectattr('kind', 'in', ['ConfigMap', 'DaemonSet']) | list }}"
            apply: true
            server_side_apply: {field_manager: bcd-ansible, force_conflicts: true}
            hidden_fields: "{{ bcd_daemonset_hidden_fields }}"
          check_mode: true
          diff: true
          register: core
        - name: Write both
          ansible.builtin.copy:
            content: "{{ {'ours': ours.dry_run | bcd.kubernetes.bcd_apply_diff,
                          'core': core.result.results | bcd.kubernetes.bcd_apply_diff,
                          'stands': ours.stands, 'versions': ours.versions, 'fleet': fleet.versions,
                          'changed': ours.dry_run | map(attribute='changed') | list,
                          'core_changed': core.result.results | map(attribute='changed') | list} | to_json }}"
            dest: "{{ out }}"
          check_mode: false
""")


def compare(tmp_path, *extra: str) -> dict:
    book = tmp_path / "compare.yml"
    book.write_text(COMPARE)
    out = tmp_path / "compare.json"
    # the role's own list (its defaults are the role's, not the play's)
    hidden = yaml.safe_load((ROOT / "roles" / "bcd_daemonset" / "defaults" / "main.yml").read_text())["bcd_daemonset_hidden_fields"]
    run = run_playbook(str(book), "-e", f"out={out}", "-e", json.dumps({"bcd_daemonset_hidden_fields": hidden}), *extra)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    return json.loads(out.read_text())


def settle(sandbox) -> None:
    """The DaemonSet's controller done with it: its status (and resourceVersion) stays."""
    sandbox.kubectl("rollout", "status", "daemonset/bcd", "-n", NS, "--timeout=240s", timeout=260)


def test_the_comparison_reads_once_and_prints_what_kubernetes_core_prints(sandbox, tmp_path):
    settle(sandbox)
    before = (daemonset(sandbox)["metadata"]["resourceVersion"],
              kget(sandbox, "configmap", "-n", NS, "bcd-config")["metadata"]["resourceVersion"])
    got = compare(tmp_path, "-e", f"bcd_image={NEW}", "-e", "bcd_log_level=debug")
    # both objects differ, line for line the same way
    assert [d["object"] for d in got["ours"]] == ["ConfigMap bcd-system/bcd-config", "DaemonSet bcd-system/bcd"], got
    assert got["ours"] == got["core"]
    assert got["changed"] == got["core_changed"] == [True, True]
    lines = got["ours"][1]["lines"]
    assert any(line.startswith("+") and NEW in line for line in lines), lines
    assert got["ours"][1]["template"] is True
    assert "log_level" in "\n".join(got["ours"][0]["lines"])
    # nothing a dry run may leave: no field of the render is stored
    assert (daemonset(sandbox)["metadata"]["resourceVersion"],
            kget(sandbox, "configmap", "-n", NS, "bcd-config")["metadata"]["resourceVersion"]) == before

    # the render as applied: no difference either way
    same = compare(tmp_path)
    assert same["ours"] == same["core"] == []
    assert same["changed"] == same["core_changed"] == [False, False]

    # nothing to take over: the judgement stands, and the fleet read finds the same versions
    assert got["stands"] is True
    assert got["versions"] == got["fleet"] == {"ConfigMap": before[1], "DaemonSet": before[0]}


def test_a_field_another_manager_set_is_not_a_judgement_that_stands(sandbox, tmp_path):
    """A takeover to do: rollout.yml does not skip it, whatever the versions say."""
    patch = {"spec": {"template": {"spec": {"terminationGracePeriodSeconds": 17}}}}
    sandbox.kubectl("-n", NS, "patch", "daemonset", "bcd", "--type=strategic", "--field-manager=someone-else",
                    "-p", json.dumps(patch))
    try:
        settle(sandbox)
        got = compare(tmp_path)
        assert got["stands"] is False
        assert got["versions"]["DaemonSet"] == daemonset(sandbox)["metadata"]["resourceVersion"]
    finally:
        # the render back, as a rollout would put it (it takes the field over and applies)
        run = run_playbook("adopt-cluster.yml")
        assert run.returncode == 0, run.stdout[-3000:]
    assert "terminationGracePeriodSeconds: 17" not in json.dumps(daemonset(sandbox))


def test_check_mode_applies_nothing_and_a_rollout_applies_the_render_in_the_module(sandbox, cpvars, tmp_path):
    cm_before = kget(sandbox, "configmap", "-n", NS, "bcd-config")["metadata"]["resourceVersion"]
    ds_before = daemonset(sandbox)["metadata"]["resourceVersion"]
    check = run_playbook("rollout.yml", "--check", "--diff", "-e", f"bcd_image={NEW}", "-e", "bcd_log_level=debug")
    assert check.returncode == 0, check.stdout[-3000:]
    assert NEW in check.stdout, "--diff shows the new image"
    assert kget(sandbox, "configmap", "-n", NS, "bcd-config")["metadata"]["resourceVersion"] == cm_before
    assert daemonset(sandbox)["metadata"]["resourceVersion"] == ds_before
    assert sandbox.kubectl("get", "lease", "-n", NS, "bcd-ansible-lock", check=False).returncode != 0

    # with --diff (kubernetes.core's comparison, Ansible prints its diff) and the folded applies
    report = tmp_path / "rollout.json"
    run = run_playbook("rollout.yml", "--diff", "-e", f"bcd_image={NEW}", "-e", "bcd_log_level=debug",
                       "-e", f"bcd_report_out={report}")
    assert run.returncode == 0, run.stdout[-4000:]
    assert not find_in_text(run.stdout + run.stderr + check.stdout + check.stderr + report.read_text(),
                            [cpvars["bcd_api_key"]]), "the API key leaked"
    summary = json.loads(report.read_text())
    assert summary["result"] == "succeeded" and summary["changed"] is True
    assert all(s["outcome"] == "passed" and len(s["nodes"]) == s["size"] for s in summary["stages"]), summary["stages"]
    ds = kget(sandbox, "daemonset", "-n", NS, "bcd", "--show-managed-fields")
    # applied by bcd_rollout with our field manager: the render's image and its own update strategy
    assert ds["spec"]["template"]["spec"]["containers"][0]["image"] == NEW
    assert ds["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    assert any(m["manager"] == "bcd-ansible" and m["operation"] == "Apply" for m in ds["metadata"]["managedFields"])
    assert 'log_level = "debug"' in kget(sandbox, "configmap", "-n", NS, "bcd-config")["data"]["config.toml"]
    assert sandbox.kubectl("get", "lease", "-n", NS, "bcd-ansible-lock", check=False).returncode != 0
    # the same render again: nothing to do
    again = run_playbook("rollout.yml", "-e", f"bcd_image={NEW}", "-e", "bcd_log_level=debug")
    assert again.returncode == 0, again.stdout[-3000:]
    assert recap(again.stdout)["sandbox"]["changed"] == 0


def test_the_release_deletes_the_lease_unread_only_as_this_run_wrote_it(sandbox):
    """bcd_lock with a version: the delete is guarded by it; a Lease written since is read and
    released only when this run holds it; another run's is left alone."""
    from tests.helpers import run_module

    lease = {"kubeconfig": str(sandbox.kubeconfig), "namespace": "default", "name": "bcd-release-version-test"}
    code, taken = run_module("bcd_lock", {**lease, "run": "mine"})
    assert code == 0 and taken["version"], taken
    # this run writes it again (a renewal): the first version is stale, the release still releases it
    code, again = run_module("bcd_lock", {**lease, "run": "mine"})
    assert code == 0 and again["version"] != taken["version"], again
    code, released = run_module("bcd_lock", {**lease, "run": "mine", "state": "absent", "version": taken["version"]})
    assert code == 0 and released["holder"] is None, released
    assert sandbox.kubectl("get", "lease", "-n", "default", lease["name"], check=False).returncode != 0

    # another run's Lease: a stale version of ours never deletes it
    code, theirs = run_module("bcd_lock", {**lease, "run": "theirs"})
    assert code == 0, theirs
    try:
        code, kept = run_module("bcd_lock", {**lease, "run": "mine", "state": "absent", "version": taken["version"]})
        assert code == 0 and kept["holder"] and kept["holder"].endswith(" run=theirs"), kept
        assert sandbox.kubectl("get", "lease", "-n", "default", lease["name"], check=False).returncode == 0
    finally:
        run_module("bcd_lock", {**lease, "run": "theirs", "state": "absent"})

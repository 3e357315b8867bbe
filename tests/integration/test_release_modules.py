"""The release's modules against the sandbox, one operation each: bcd_release_labels removes bcd's
Node labels, bcd_release_objects deletes bcd's objects (with a diff, a server-side dry run in
check mode, and a wait), and bcd_release_nodes' deprecated step=labels|objects still gives the
same answer as the module that replaces it, with a deprecation warning.

Runs on objects of its own (a ConfigMap, a label nobody else reads), so it needs no adoption."""

from __future__ import annotations

import json
import textwrap

import pytest
from kubernetes import client as k8s

from tests.helpers import run_playbook

pytestmark = [pytest.mark.sandbox]

LABEL = "bcd.dev/release-modules-test"
CONFIGMAP = "bcd-release-modules-test"

PLAYBOOK = textwrap.dedent("""\
    - name: The release's modules, and the deprecated steps they replace
      hosts: clusters
      gather_facts: false
      vars:
        ansible_connection: local
        ansible_python_interpreter: "{{ ansible_playbook_python }}"
        conf: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
        doomed: [{kind: ConfigMap, namespace: default, name: "{{ cm }}"}]
      tasks:
        - {name: old labels, bcd.kubernetes.bcd_release_nodes: {config: "{{ conf }}", step: labels},
           check_mode: true, register: old_labels}
        - {name: new labels, bcd.kubernetes.bcd_release_labels: {config: "{{ conf }}"},
           check_mode: true, register: new_labels}
        - {name: old objects, bcd.kubernetes.bcd_release_nodes: {config: "{{ conf }}", step: objects, objects: "{{ doomed }}"},
           check_mode: true, register: old_objects}
        - {name: new objects, bcd.kubernetes.bcd_release_objects: {config: "{{ conf }}", objects: "{{ doomed }}"},
           check_mode: true, register: new_objects}
        - {name: delete, bcd.kubernetes.bcd_release_objects: {config: "{{ conf }}", objects: "{{ doomed }}", wait: true,
                                                              wait_timeout: 60},
           register: deleted}
        - {name: again, bcd.kubernetes.bcd_release_objects: {config: "{{ conf }}", objects: "{{ doomed }}", wait: true},
           register: again}
        - name: Write what each registered
          ansible.builtin.copy:
            content: "{{ {'old_labels': old_labels, 'new_labels': new_labels, 'old_objects': old_objects,
                          'new_objects': new_objects, 'deleted': deleted, 'again': again} | to_json }}"
            dest: "{{ out }}"
            mode: "0600"
          check_mode: false
    """)


@pytest.fixture
def own_objects(sandbox):
    """A ConfigMap to delete, and a bcd.dev/* label on the first GPU Node (removed afterwards)."""
    node = sandbox.gpu_node_names()[0]
    with sandbox.api_client() as api:
        core = k8s.CoreV1Api(api)
        core.create_namespaced_config_map("default", {"metadata": {"name": CONFIGMAP}, "data": {"k": "v"}})
        core.patch_node(node, {"metadata": {"labels": {LABEL: "x"}}})
    yield node
    with sandbox.api_client() as api:
        core = k8s.CoreV1Api(api)
        core.patch_node(node, {"metadata": {"labels": {LABEL: None}}})
        try:
            core.delete_namespaced_config_map(CONFIGMAP, "default")
        except k8s.exceptions.ApiException as exc:
            if exc.status != 404:
                raise


def test_each_release_module_does_its_own_operation(sandbox, own_objects, tmp_path):
    book = tmp_path / "release_modules.yml"
    book.write_text(PLAYBOOK)
    out = tmp_path / "out.json"
    run = run_playbook(str(book), "--diff", "-e", json.dumps({"out": str(out), "cm": CONFIGMAP}))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    got = json.loads(out.read_text())
    text = run.stdout + run.stderr

    # the deprecated steps still work, say what replaces them, and answer as the new modules do
    for step, new in (("labels", "bcd_release_labels"), ("objects", "bcd_release_objects")):
        assert f"bcd_release_nodes step={step} is deprecated: use module bcd.kubernetes.{new}" in " ".join(text.split())
    assert got["old_labels"]["labels"] == got["new_labels"]["labels"]
    assert got["old_objects"]["deleted"] == got["new_objects"]["deleted"]

    # labels, in check mode: the test's label is found (and named in the diff), and stays
    mine = [i for i in got["new_labels"]["labels"] if i["name"] == own_objects]
    assert mine and LABEL in mine[0]["keys"] and got["new_labels"]["changed"]
    assert f"{own_objects}: {LABEL}=x" in run.stdout
    with sandbox.api_client() as api:
        core = k8s.CoreV1Api(api)
        assert core.read_node(own_objects).metadata.labels.get(LABEL) == "x"
        # objects: a check-mode deletion is a dry run; the real one waited until the ConfigMap was gone
        assert got["new_objects"]["deleted"] == [{"kind": "ConfigMap", "name": CONFIGMAP, "namespace": "default"}]
        assert got["deleted"]["changed"] and got["deleted"]["deleted"] == got["new_objects"]["deleted"]
        assert f"-# ConfigMap default/{CONFIGMAP}" in run.stdout, "--diff shows what goes"
        assert not any(c.metadata.name == CONFIGMAP for c in core.list_namespaced_config_map("default").items)
    # a second run has nothing left to delete
    assert not got["again"]["changed"] and got["again"]["deleted"] == []

"""bcd_field_ownership's apply against the sandbox's API server, on objects of its own (a
ConfigMap nobody else reads), so it needs no adoption: the apply creates the object as the render
has it and marks it created (annotate_created); a check-mode apply is a dry run that stores
nothing; an apply with nothing new says unchanged and annotates nothing; an object the API server
refuses fails the module naming it and quoting the server, after the objects before it were
applied; and a field another manager added is taken over and removed by the same run."""

from __future__ import annotations

import json
import textwrap

import pytest
from kubernetes import client as k8s

from tests.helpers import run_playbook

pytestmark = [pytest.mark.sandbox]

CONFIGMAP = "bcd-apply-test"
MARK = {"bcd.dev/apply-test": "created"}

PLAYBOOK = textwrap.dedent("""\
    - name: bcd_field_ownership's apply
      hosts: clusters
      gather_facts: false
      vars:
        ansible_connection: local
        ansible_python_interpreter: "{{ ansible_playbook_python }}"
        conf: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
        cm: {apiVersion: v1, kind: ConfigMap, metadata: {name: "{{ name }}", namespace: default}, data: {k: v}}
        bad: {apiVersion: v1, kind: ConfigMap, metadata: {name: Not_A_Name, namespace: default}, data: {k: v}}
      tasks:
        - {name: dry, bcd.kubernetes.bcd_field_ownership: {config: "{{ conf }}", objects: ["{{ cm }}"], apply: true,
                                                            annotate_created: "{{ mark }}"},
           check_mode: true, register: dry}
        - {name: first, bcd.kubernetes.bcd_field_ownership: {config: "{{ conf }}", objects: ["{{ cm }}"], apply: true,
                                                              annotate_created: "{{ mark }}"}, register: first}
        - {name: again, bcd.kubernetes.bcd_field_ownership: {config: "{{ conf }}", objects: ["{{ cm }}"], apply: true,
                                                              annotate_created: "{{ mark }}"}, register: again}
        - {name: refused, bcd.kubernetes.bcd_field_ownership: {config: "{{ conf }}", objects: ["{{ cm }}", "{{ bad }}"],
                                                                apply: true}, register: refused, ignore_errors: true}
        - name: Write what each registered
          ansible.builtin.copy:
            content: "{{ {'dry': dry, 'first': first, 'again': again, 'refused': refused} | to_json }}"
            dest: "{{ out }}"
            mode: "0600"
          check_mode: false
    """)


def _delete(core: k8s.CoreV1Api) -> None:
    try:
        core.delete_namespaced_config_map(CONFIGMAP, "default")
    except k8s.exceptions.ApiException as exc:
        if exc.status != 404:
            raise


@pytest.fixture
def core(sandbox):
    with sandbox.api_client() as api:
        core = k8s.CoreV1Api(api)
        _delete(core)
        yield core
        _delete(core)


def _run(tmp_path, *args: str) -> dict:
    book = tmp_path / "apply.yml"
    book.write_text(PLAYBOOK)
    out = tmp_path / "out.json"
    run = run_playbook(str(book), *args, "-e", json.dumps({"out": str(out), "name": CONFIGMAP, "mark": MARK}))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    return json.loads(out.read_text())


def test_apply_creates_marks_and_names_a_refusal(core, tmp_path):
    got = _run(tmp_path)
    name = f"ConfigMap default/{CONFIGMAP}"
    # check mode: the server-side dry run says it would create, and nothing is stored or marked
    assert got["dry"]["applied"][0]["changed"] and got["dry"]["created"] == []
    # the first apply created it, as rendered, and marked it; the second changes nothing
    assert got["first"]["changed"] and got["first"]["created"] == [name]
    assert not got["again"]["changed"] and got["again"]["created"] == []
    assert [a["result"]["metadata"]["name"] for a in got["first"]["applied"]] == [CONFIGMAP]
    live = core.read_namespaced_config_map(CONFIGMAP, "default")
    assert live.data == {"k": "v"} and (live.metadata.annotations or {}) == MARK
    managers = {(m.manager, m.operation) for m in live.metadata.managed_fields}
    assert managers == {("bcd-ansible", "Apply"), ("bcd-ansible", "Update")}, managers
    # the API server refuses the second object: the module fails naming it, quoting the server,
    # and saying what it applied before
    refused = got["refused"]
    assert refused["failed"], refused
    assert "applying ConfigMap default/Not_A_Name (server-side apply, field manager bcd-ansible)" in refused["msg"]
    assert "Not_A_Name" in refused["msg"].split(":", 2)[-1] and f"applied before it: {name}" in refused["msg"]


def test_apply_takes_over_and_removes_another_managers_field(core, tmp_path):
    core.create_namespaced_config_map("default", {"metadata": {"name": CONFIGMAP}, "data": {"k": "v", "extra": "x"}},
                                      field_manager="someone-else")
    got = _run(tmp_path, "-e", "bcd_adopt_foreign_objects=true")
    assert got["first"]["changed"] and got["first"]["created"] == [], got["first"]
    live = core.read_namespaced_config_map(CONFIGMAP, "default")
    # taken over, then applied: the key the render leaves out is gone, and the object is not marked
    assert live.data == {"k": "v"} and not (live.metadata.annotations or {})

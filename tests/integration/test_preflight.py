"""bcd_preflight against the sandbox: in one module run it returns what the modules it replaces
(bcd_control_plane, bcd_nodes_info, bcd_pod_security, a check-mode bcd_join_token scope=stale, and
kubernetes.core's read of the ClusterPolicies) return one at a time, facts and refusals alike.
bcd_control_plane and bcd_pod_security are retired for it: they still run through meta/runtime.yml's
deprecation routing, with a warning, until 2.0.0. bcd_nodes_info runs by its old name, bcd_nodes,
which the same routing keeps working until 2.0.0.

Each test runs one playbook that calls the separate modules and then bcd_preflight on the same
cluster and control plane, and compares what they registered.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.helpers import run_playbook

# every test reads the session's sandbox through the inventory, some through no fixture of
# theirs: ask for it here, so that each test runs alone too
pytestmark = [pytest.mark.sandbox, pytest.mark.usefixtures("sandbox")]

PLAYBOOK = textwrap.dedent("""\
    - name: The separate modules, then bcd_preflight
      hosts: clusters
      gather_facts: false
      vars:
        ansible_connection: local
        ansible_python_interpreter: "{{ ansible_playbook_python }}"
        conf: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
        key: "{{ bcd_api_key | default(omit) }}"
      module_defaults:
        group/kubernetes.core.k8s:
          kubeconfig: "{{ bcd_kubeconfig | default(omit) }}"
          context: "{{ bcd_kube_context | default(omit) }}"
      tasks:
        - {name: control plane, bcd.kubernetes.bcd_control_plane: {config: "{{ conf }}", api_key: "{{ key }}"},
           register: old_cp, ignore_errors: true}
        - {name: nodes, bcd.kubernetes.bcd_nodes: {config: "{{ conf }}", api_key: "{{ key }}"},
           register: old_nodes, ignore_errors: true}
        - {name: pod security, bcd.kubernetes.bcd_pod_security: {config: "{{ conf }}"},
           register: old_ps, ignore_errors: true}
        - name: leftovers
          bcd.kubernetes.bcd_join_token: {config: "{{ conf }}", api_key: "{{ key }}", cluster: "{{ cluster }}",
                                          run: this-run, state: absent, scope: stale}
          check_mode: true
          register: old_left
          ignore_errors: true
        - {name: policies, kubernetes.core.k8s_info: {api_version: nvidia.com/v1, kind: ClusterPolicy},
           register: old_policies}
        - name: preflight
          bcd.kubernetes.bcd_preflight: {config: "{{ conf }}", api_key: "{{ key }}", cluster: "{{ cluster }}",
                                         run: this-run, cluster_policies: true}
          register: new
          ignore_errors: true
        - name: Write what each registered
          ansible.builtin.copy:
            content: "{{ {'old_cp': old_cp, 'old_nodes': old_nodes, 'old_ps': old_ps, 'old_left': old_left,
                          'old_policies': old_policies, 'new': new} | to_json }}"
            dest: "{{ out }}"
            mode: "0600"
    """)

CP_KEYS = ("discovery", "pool", "trust", "warnings_text", "pins_checked", "known", "reporting")


def both(tmp_path, cluster: str, **extra) -> dict:
    book = tmp_path / "preflight.yml"
    book.write_text(PLAYBOOK)
    out = tmp_path / "out.json"
    run = run_playbook(str(book), "-e", json.dumps({"out": str(out), "cluster": cluster, **extra}))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "Traceback" not in run.stdout + run.stderr
    said = " ".join((run.stdout + run.stderr).split())
    for retired in ("bcd_control_plane", "bcd_pod_security"):
        assert f"bcd.kubernetes.{retired} has been deprecated. nothing in the product calls it; use bcd.kubernetes.bcd_preflight" in said
    assert "bcd.kubernetes.bcd_nodes has been deprecated. renamed to bcd.kubernetes.bcd_nodes_info" in said
    return json.loads(out.read_text())


@pytest.fixture
def leftover(cp, cpvars):
    """A live token as a killed run of cluster ``killed-cluster`` leaves it (its description), revoked afterwards."""
    answer = cp.create_token(cpvars["bcd_tenant"], cpvars["bcd_pool"], 1, 600, "preflight-test-leftover",
                             "bcd-ansible cluster=killed-cluster run=20261201T000000Z-1 playbook=adopt-cluster")
    yield answer["id"]
    cp.revoke_token(cpvars["bcd_tenant"], answer["id"])


def test_preflight_returns_what_the_separate_modules_return(tmp_path, leftover):
    r = both(tmp_path, "killed-cluster")
    new, old_cp, old_nodes, old_ps, old_left = r["new"], r["old_cp"], r["old_nodes"], r["old_ps"], r["old_left"]
    assert not new.get("failed"), new
    assert {k: new["control_plane"][k] for k in CP_KEYS} == {k: old_cp[k] for k in CP_KEYS}
    assert new["control_plane"]["pins_checked"] == ["join_encryption", "join_signing", "serving_ca"]
    for k in ("nodes", "selected", "reporting", "missing", "cluster"):
        assert new["nodes"][k] == old_nodes[k], k
    assert new["nodes"]["selected"] > 0
    assert new["pod_security"] == {"open_namespaces": old_ps["open_namespaces"], "namespaces": old_ps["namespaces"]}
    assert "default" in new["pod_security"]["open_namespaces"]
    # the leftovers: the killed run's token found, by id, as the check-mode clean-up finds it
    assert leftover in new["leftovers"]["revoked"]
    for k in ("failed", "revoked", "secret_deleted", "stale"):
        assert new["leftovers"][k] == old_left.get(k, False), k
    assert [p["metadata"]["name"] for p in new["cluster_policies"]] == \
        [p["metadata"]["name"] for p in r["old_policies"]["resources"]]
    assert all("managedFields" not in p["metadata"] for p in new["cluster_policies"])
    # every warning the separate modules gave, and no other
    olds = old_cp.get("warnings", []) + old_nodes.get("warnings", []) + old_ps.get("warnings", [])
    assert sorted(new.get("warnings", [])) == sorted(olds)
    # fewer requests than the separate runs would not be the point; the same ones are
    assert new["requests"]["control_plane"] >= 4 and new["requests"]["kubernetes"] >= 4


def test_no_leftovers_and_an_invalid_cluster_name_is_reported_not_raised(tmp_path):
    r = both(tmp_path, "no-such-cluster")
    assert r["new"]["leftovers"]["revoked"] == [] == r["old_left"]["revoked"]
    r = both(tmp_path, "not a name")
    assert r["new"]["leftovers"]["failed"] is True and r["old_left"]["failed"] is True
    assert r["new"]["leftovers"]["msg"] == r["old_left"]["msg"]
    assert not r["new"].get("failed"), r["new"]


@pytest.mark.parametrize("case", ["join_encryption", "serving_ca", "site"])
def test_a_control_plane_refusal_is_the_same(tmp_path, cpvars, case):
    import base64

    wrong = "sha256/" + base64.b64encode(bytes(range(32))).decode()
    extra = {"bcd_site_id": "another-site"} if case == "site" else {"bcd_pins": {**cpvars["bcd_pins"], case: wrong}}
    r = both(tmp_path, "sandbox", **extra)
    assert r["old_cp"]["failed"] and r["new"]["failed"]
    assert r["new"]["msg"] == r["old_cp"]["msg"]
    assert r["new"]["errors"] == r["old_cp"]["errors"]
    assert "control_plane" not in r["new"], "nothing else is returned past a refusal"


def test_pod_security_refusal_is_the_same(tmp_path):
    r = both(tmp_path, "sandbox", bcd_require_pod_security=True)
    assert r["old_ps"]["failed"] and r["new"]["failed"]
    assert r["new"]["msg"] == r["old_ps"]["msg"]
    assert r["new"]["msg"].startswith("bcd_require_pod_security: namespaces ")
    assert r["new"]["open_namespaces"] == r["old_ps"]["open_namespaces"]


def test_a_selector_that_selects_no_node_is_left_to_the_caller(tmp_path):
    """No Node selected: the nodes part says so (the playbook refuses it first, with its own
    message), and the Pod Security refusal, which comes after it, is not raised."""
    r = both(tmp_path, "sandbox", bcd_node_selector={"nvidia.com/gpu.product": "no-such-gpu"},
             bcd_require_pod_security=True)
    assert r["new"]["nodes"]["selected"] == 0 == r["old_nodes"]["selected"]
    assert not r["new"].get("failed"), r["new"]


def test_adopt_refuses_open_namespaces_before_any_token(sandbox, cp, cpvars):
    # an unadopted cluster: an earlier test may have rolled the DaemonSet to another image,
    # which adopt's image guard refuses before the preflight runs
    sandbox.unadopt(cp, cpvars["bcd_tenant"], cpvars["bcd_pool"])
    before = len(list(cp.list_tokens(cpvars["bcd_tenant"], cpvars["bcd_pool"])))
    run = run_playbook("adopt-cluster.yml", "-e", '{"bcd_require_pod_security": true}')
    out = run.stdout + run.stderr
    flat = " ".join(out.split())
    assert run.returncode != 0
    assert "Traceback" not in out
    assert "bcd_require_pod_security: namespaces" in flat and "Nothing was changed and no token minted." in flat, out[-3000:]
    assert len(list(cp.list_tokens(cpvars["bcd_tenant"], cpvars["bcd_pool"]))) == before

"""rollout.yml on objects a client-side `kubectl apply` manages (the seed's own path): it takes
them over as adopt-cluster.yml does, shows what that removes in --check --diff, or refuses with
bcd_adopt_foreign_objects false, naming the object and the foreign field manager.
"""

from __future__ import annotations

import pytest

from tests.helpers import assert_takeover_previewed, bcd_objects, client_side_applied, run_playbook

# a rollout replaces every pod, stage by stage: more than a minute
pytestmark = [pytest.mark.sandbox, pytest.mark.long, pytest.mark.usefixtures("adopted")]


def _flat(text: str) -> str:
    return " ".join(text.split())


def _client_side_applied(sandbox, tmp_path) -> None:
    """The ConfigMap and DaemonSet with the client-side extras; the template changed, so the
    DaemonSet controller rolls the pods: a healthy fleet is what a rollout starts from."""
    client_side_applied(sandbox, tmp_path, kinds=("ConfigMap", "DaemonSet"))
    sandbox.kubectl("rollout", "status", "daemonset/bcd", "-n", "bcd-system", "--timeout=180s", timeout=200)



def test_rollout_takes_over_what_a_client_side_kubectl_apply_left(sandbox, tmp_path):
    _client_side_applied(sandbox, tmp_path)
    ds, cm = bcd_objects(sandbox)
    assert "kubectl-client-side-apply" in [e["manager"] for e in ds["metadata"]["managedFields"]]

    refused = run_playbook("rollout.yml", "-e", "bcd_adopt_foreign_objects=false")
    out = _flat(refused.stdout + refused.stderr)
    assert refused.returncode != 0, out[-3000:]
    assert "DaemonSet bcd-system/bcd: fields managed by kubectl-client-side-apply" in out, out[-3000:]
    assert "ConfigMap bcd-system/bcd-config: fields managed by kubectl-client-side-apply" in out
    assert bcd_objects(sandbox)[0]["metadata"]["generation"] == ds["metadata"]["generation"], "nothing changed"

    check = run_playbook("rollout.yml", "--check", "--diff")
    assert check.returncode == 0, check.stdout[-3000:]
    assert_takeover_previewed(check.stdout)
    assert "extra.toml" in bcd_objects(sandbox)[1]["data"], "check mode changed nothing"

    run = run_playbook("rollout.yml")
    assert run.returncode == 0, run.stdout[-3000:]
    ds, cm = bcd_objects(sandbox)
    assert "varlog" not in [v["name"] for v in ds["spec"]["template"]["spec"]["volumes"]]
    assert "/host/var/log" not in [m["mountPath"] for m in ds["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]]
    assert "extra.toml" not in cm["data"]
    for obj in (ds, cm):
        assert "kubectl.kubernetes.io/last-applied-configuration" not in (obj["metadata"].get("annotations") or {})
        assert "kubectl-client-side-apply" not in [e["manager"] for e in obj["metadata"]["managedFields"]]

    again = run_playbook("rollout.yml")
    assert again.returncode == 0, again.stdout[-3000:]
    assert "nothing to do" in _flat(again.stdout), again.stdout[-3000:]

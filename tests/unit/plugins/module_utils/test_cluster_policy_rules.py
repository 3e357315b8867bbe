"""The ClusterPolicy side of GPU isolation: the volume-mounts key means the same at cluster and node
level, the toolkit env gpu_stack applies, and how a server-side apply conflict is read."""

from __future__ import annotations

import importlib.util
import json

import pytest
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_gpu_isolation import (
    DEFAULT_TOOLKIT_CONFIG,
    EXPOSED,
    VOLUME_KEY,
    cluster_policy_findings,
    verify_node_root,
)

from tests.helpers import ROOT
from tests.unit.plugins.module_utils.test_gpu_isolation_node import RUNC_ONLY, SAFE, make_root

_spec = importlib.util.spec_from_file_location("bcd_filters", ROOT / "plugins" / "filter" / "bcd.py")
filters = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(filters)

ENVVAR = "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED"
VOLUME = "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS"


def _policy(env):
    return {"metadata": {"name": "cluster-policy"}, "spec": {
        "devicePlugin": {"enabled": False}, "cdi": {"enabled": True, "nriPluginEnabled": False},
        "toolkit": {"enabled": True, "env": env}}}


@pytest.mark.parametrize("value", ["true", "1", "TRUE", "yes"])
def test_volume_mounts_env_not_false_is_exposed_at_cluster_level(value):
    found = cluster_policy_findings(_policy([{"name": ENVVAR, "value": "false"}, {"name": VOLUME, "value": value}]),
                                    operator_mode=True)
    assert [(f["status"], f["check"]) for f in found] == [(EXPOSED, "operator-toolkit-volume-mounts")], found
    assert VOLUME in found[0]["message"] and "/var/run/nvidia-container-devices" in found[0]["message"]


@pytest.mark.parametrize("env", [[{"name": ENVVAR, "value": "false"}],
                                 [{"name": ENVVAR, "value": "false"}, {"name": VOLUME, "value": "false"}]])
def test_volume_mounts_env_false_or_unset_is_isolated(env):
    assert cluster_policy_findings(_policy(env), operator_mode=True) == []


@pytest.mark.parametrize(("value", "toml"), [("true", "true"), ("false", "false")])
def test_cluster_and_node_level_agree_on_the_volume_mounts_key(tmp_path, value, toml):
    """The same setting, as the operator's env and as the key in the node's config.toml, gets the
    same verdict at both levels."""
    root = make_root(tmp_path, {"/etc/containerd/config.toml": RUNC_ONLY,
                                DEFAULT_TOOLKIT_CONFIG: SAFE + f"{VOLUME_KEY} = {toml}\n"})
    node_exposed = verify_node_root(root)["verdict"] == EXPOSED
    cluster = cluster_policy_findings(_policy([{"name": ENVVAR, "value": "false"}, {"name": VOLUME, "value": value}]),
                                      operator_mode=True)
    cluster_exposed = any(f["status"] == EXPOSED for f in cluster)
    assert node_exposed == cluster_exposed == (value == "true")


def test_toolkit_env_sets_both_keys_and_keeps_the_rest():
    env = [{"name": "A", "value": "1"}, {"name": VOLUME, "value": "true"}]
    assert filters.bcd_toolkit_env(env) == [{"name": "A", "value": "1"}, {"name": VOLUME, "value": "false"},
                                             {"name": ENVVAR, "value": "false"}]
    done = [{"name": "A", "value": "1"}, {"name": ENVVAR, "value": "false"}]
    assert filters.bcd_toolkit_env(done) == done
    assert filters.bcd_toolkit_env(None) == [{"name": ENVVAR, "value": "false"}]


@pytest.mark.parametrize(("message", "want"), [
    ('Apply failed with 2 conflicts: conflicts with "helm" using nvidia.com/v1:\n- .spec.devicePlugin.enabled\n- .spec.cdi.enabled',
     [{"manager": "helm", "fields": [".spec.devicePlugin.enabled", ".spec.cdi.enabled"]}]),
    ('Failed to apply object: b\'{"message":"Apply failed with 1 conflict: conflict with \\"argocd-controller\\" using '
     'nvidia.com/v1: .spec.devicePlugin.enabled","reason":"Conflict","code":409}\'',
     [{"manager": "argocd-controller", "fields": [".spec.devicePlugin.enabled"]}]),
    ("Failed to apply object: connection refused", []),
])
def test_apply_conflicts_name_manager_and_fields(message, want):
    assert filters.bcd_apply_conflicts(message) == want


@pytest.mark.parametrize("as_bytes", [False, True], ids=["body-text", "body-bytes"])
def test_apply_conflicts_read_the_api_servers_causes_once_each(as_bytes):
    """kubernetes.core's message is "Failed to apply object: " and the 409 body (text from the
    kubernetes client 32 on, bytes before): the Status's message and its causes name each field,
    and the text names each once."""
    message = ('Apply failed with 2 conflicts: conflicts with "helm" using nvidia.com/v1:\n'
               '- .spec.cdi.enabled\n- .spec.devicePlugin.enabled')
    causes = [{"reason": "FieldManagerConflict", "message": 'conflict with "helm" using nvidia.com/v1', "field": f}
              for f in (".spec.cdi.enabled", ".spec.devicePlugin.enabled")]
    status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
              "reason": "Conflict", "details": {"causes": causes}, "code": 409}

    def failure() -> str:
        body = json.dumps(status, separators=(",", ":"))
        return f"Failed to apply object: {body.encode() if as_bytes else body}"

    text = filters.bcd_apply_conflicts(failure(), True)
    assert text == "helm (.spec.cdi.enabled, .spec.devicePlugin.enabled)"
    # without causes, the Status's message answers
    del status["details"]
    assert filters.bcd_apply_conflicts(failure(), True) == text

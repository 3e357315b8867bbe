"""Values as an AWX/AAP survey passes them: every one a string. The model converts what it can
without doubt ("false", "3", "90m", a JSON mapping or list) and refuses the rest with one
INVALID_CONFIG line naming the variable, never a Python error. The same values through
ansible-runner against the sandbox: tests/reliability/test_runner.py."""

from __future__ import annotations

import pytest
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_model import ConfigError, load, load_some

from tests.helpers import base_vars

ACCEPTED = [
    ("bcd_create_namespace", "false", False),
    ("bcd_gpu_isolation_enforce", "true", True),
    ("bcd_rollout_canary", "3", 3),
    ("bcd_token_max_uses", "12", 12),
    ("bcd_rollout_max_unavailable", "2", 2),
    ("bcd_rollout_max_unavailable", "50%", "50%"),
    ("bcd_rollout_max_down", "0", 0),
    ("bcd_rollout_max_down", "5%", "5%"),
    ("bcd_token_ttl", "90m", 5400),
    ("bcd_join_timeout", "300", 300),
    ("bcd_node_selector", '{"nvidia.com/gpu.present": "true"}', {"nvidia.com/gpu.present": "true"}),
    ("bcd_node_selector", '  {"a/b": "c"}', {"a/b": "c"}),
    ("bcd_image_pull_secrets", '["regcred"]', ["regcred"]),
    ("bcd_privileged_namespaces", '["kube-system", "monitoring"]', ["kube-system", "monitoring"]),
    ("bcd_node_roots", '{"gpu-node-1": "/srv/gpu-node-1"}', {"gpu-node-1": "/srv/gpu-node-1"}),
    ("bcd_container_runtime", "cri-o", None),  # a preset name stays a preset name
]

REFUSED = [
    ("bcd_create_namespace", "maybe", "must be true or false"),
    ("bcd_rollout_canary", "3.5", "must be an integer"),
    ("bcd_rollout_canary", "three", "must be an integer"),
    ("bcd_rollout_max_unavailable", "0", "must be at least 1"),
    ("bcd_rollout_max_down", "-1", "must be a count (0 or more)"),
    ("bcd_token_ttl", "an hour", "is not a duration"),
    ("bcd_node_selector", '{"nvidia.com/gpu.present": ', "not valid JSON"),
    ("bcd_node_selector", '["nvidia.com/gpu.present"]', "must be a mapping"),
    ("bcd_node_selector", "nvidia.com/gpu.present=true", "must be a mapping"),
    ("bcd_tolerations", "[{'operator': 'Exists'}]", "not valid JSON"),  # Python, not JSON
    ("bcd_pins", '{"serving_ca": "sha256/x"', "not valid JSON"),
    ("bcd_resources", "{}x", "not valid JSON"),
]


@pytest.mark.parametrize(("name", "text", "want"), ACCEPTED, ids=[f"{n}={t}" for n, t, _ in ACCEPTED])
def test_a_string_that_converts_without_doubt_is_accepted(name, text, want):
    inv = load(base_vars(**{name: text}))
    got = getattr(inv, name)
    if name == "bcd_container_runtime":
        assert got.preset == "cri-o"
    else:
        assert got == want


@pytest.mark.parametrize(("name", "text", "rule"), REFUSED, ids=[f"{n}={t}" for n, t, _ in REFUSED])
def test_a_string_in_doubt_is_refused_with_one_line_naming_the_variable(name, text, rule):
    with pytest.raises(ConfigError) as err:
        load(base_vars(**{name: text}))
    lines = err.value.lines
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"INVALID_CONFIG: {name}: ") and rule in lines[0], lines


def test_the_playbooks_subset_converts_the_same_way():
    got = load_some({"bcd_node_selector": '{"x": "y"}', "bcd_gpu_isolation_enforce": "false"},
                    ("bcd_node_selector", "bcd_gpu_isolation_enforce"))
    assert got.bcd_node_selector == {"x": "y"} and got.bcd_gpu_isolation_enforce is False
    with pytest.raises(ConfigError) as err:
        load_some({"bcd_node_selector": '{"x": '}, ("bcd_node_selector",))
    assert err.value.lines == ["INVALID_CONFIG: bcd_node_selector: a string that starts like JSON but is not valid JSON "
                               "(line 1, column 7: Expecting value)"]

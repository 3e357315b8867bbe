"""Inputs as operators write them: YAML 1.1 scalars in label maps, and INI inventories' strings."""

from __future__ import annotations

import json
import textwrap

import pytest
import yaml
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_model import ConfigError, load

from tests.helpers import BASE_VARS, base_vars, run_playbook


def _refused(**overrides) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load(base_vars(**overrides))
    return info.value.lines


@pytest.mark.parametrize(("text", "kind"), [
    ("example.com/accelerator: yes", "boolean"),
    ("nvidia.com/gpu.present: true", "boolean"),
    ("example.com/driver: 1.10", "number"),
    ("example.com/count: 8", "number"),
    ("example.com/off: off", "boolean"),
])
def test_yaml_scalar_in_the_node_selector_is_refused_at_its_key(text, kind):
    # Parsed as Ansible parses an inventory (YAML 1.1): unquoted yes is True, 1.10 is 1.1.
    selector = yaml.safe_load(text)
    key = next(iter(selector))
    lines = _refused(bcd_node_selector=selector)
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith(f'INVALID_CONFIG: bcd_node_selector."{key}": '), line
    assert f"is a YAML {kind}" in line and "quote it" in line and '("' in line


def test_quoted_values_still_load_and_are_never_rewritten():
    inv = load(base_vars(bcd_node_selector=yaml.safe_load('{example.com/accelerator: "yes", example.com/driver: "1.10"}')))
    assert inv.bcd_node_selector == {"example.com/accelerator": "yes", "example.com/driver": "1.10"}


@pytest.mark.parametrize("value", [True, 1, 2.5])
def test_toleration_value_refused_with_the_same_rule(value):
    lines = _refused(bcd_tolerations=[{"key": "example.com/gpu", "operator": "Equal", "value": value}])
    assert any(line.startswith("INVALID_CONFIG: bcd_tolerations[0].value: ") and "YAML" in line and "quote it" in line
               for line in lines), lines


# Strings that are not JSON: a survey or INI string that is JSON of the right shape is read as
# such (test_survey.py); anything else is a string where a list or a mapping belongs
# (bcd_container_runtime and bcd_kubelet_credentials take a preset's name as a string).
@pytest.mark.parametrize(("name", "value", "shape"), [
    ("bcd_tolerations", "operator=Exists", "must be a list"),
    ("bcd_image_pull_secrets", "regcred", "must be a list"),
    ("bcd_privileged_namespaces", "kube-system,monitoring", "must be a list"),
    ("bcd_pins", "serving_ca=x", "must be a mapping"),
    ("bcd_join_token_secret", "name=x", "must be a mapping"),
    ("bcd_node_selector", "nvidia.com/gpu.present=true", "mapping"),
    ("bcd_resources", "requests.cpu=1", "must be a mapping"),
    ("bcd_node_roots", "n1:/srv/n1", "mapping"),
])
def test_string_where_a_list_or_mapping_belongs_says_so_and_what_to_do(name, value, shape):
    lines = [line for line in _refused(**{name: value}) if line.startswith(f"INVALID_CONFIG: {name}:")]
    assert len(lines) == 1, lines
    line = lines[0]
    assert shape in line and "got a string" in line and "INI inventory" in line
    assert "YAML inventory" in line and "-e @" in line
    assert value not in line  # the value itself is never echoed


def test_ini_inventory_through_ansible_playbook(tmp_path):
    """A quoted INI value arrives as a string: one that is not JSON is refused, the run says so,
    names the variable, and writes nothing; JSON of the right shape is read as such."""
    values = {k: v for k, v in BASE_VARS.items() if isinstance(v, str)}
    lines = "\n".join(f"{k}={v}" for k, v in values.items())
    (tmp_path / "hosts.ini").write_text(textwrap.dedent(f"""\
        [clusters]
        gpu-ini ansible_connection=local

        [clusters:vars]
        {lines}
        bcd_tolerations='operator=Exists'
        """))
    extra = tmp_path / "rest.yml"
    extra.write_text(yaml.safe_dump({"bcd_pins": BASE_VARS["bcd_pins"], "bcd_node_selector": BASE_VARS["bcd_node_selector"]}))
    out = tmp_path / "out.json"
    run = run_playbook("render.yml", "-i", str(tmp_path / "hosts.ini"), "-e", f"@{extra}", "-e", f"bcd_render_out={out}")
    text = run.stdout + run.stderr
    assert run.returncode != 0
    assert "INVALID_CONFIG: bcd_tolerations: must be a list; got a string" in text, text[-3000:]
    assert "Traceback" not in text and not out.exists()

    ini = (tmp_path / "hosts.ini").read_text().replace("bcd_tolerations='operator=Exists'",
                                                        """bcd_tolerations='[{"operator": "Exists"}]'""")
    (tmp_path / "hosts.ini").write_text(ini)
    run = run_playbook("render.yml", "-i", str(tmp_path / "hosts.ini"), "-e", f"@{extra}", "-e", f"bcd_render_out={out}")
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    rendered = json.loads(out.read_text())
    (ds,) = [o for o in rendered["items"] if o["kind"] == "DaemonSet"]
    assert {"operator": "Exists"} in ds["spec"]["template"]["spec"]["tolerations"]


def test_unquoted_yes_in_a_yaml_inventory_through_ansible_playbook(tmp_path):
    (tmp_path / "hosts.yml").write_text(textwrap.dedent("""\
        clusters:
          hosts:
            gpu-yaml:
              ansible_connection: local
              bcd_node_selector: {example.com/accelerator: yes}
        """))
    extra = tmp_path / "rest.yml"
    extra.write_text(yaml.safe_dump({k: v for k, v in BASE_VARS.items() if k != "bcd_node_selector"}))
    out = tmp_path / "out.json"
    run = run_playbook("render.yml", "-i", str(tmp_path / "hosts.yml"), "-e", f"@{extra}", "-e", f"bcd_render_out={out}")
    text = run.stdout + run.stderr
    assert run.returncode != 0
    assert 'INVALID_CONFIG: bcd_node_selector."example.com/accelerator": True is a YAML boolean' in text, text[-3000:]
    assert not out.exists()

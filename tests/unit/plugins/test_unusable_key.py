"""A ``bcd_api_key`` that is not a string (a list, a mapping, a number) is refused as
``INVALID_CONFIG: bcd_api_key: must be a string`` and leaves every other INVALID_CONFIG line
readable, while its content, and a string key, appear in no output.

Given to the module as its no_log option ``api_key``, such a value made AnsibleModule register
each scalar inside it as a secret (``["n"]``: every "n" of the message became ``********``), and
the stand-in ``0`` the lookup puts in ``config`` masked every 0. The action plugin now withholds
the value from the module (plugin_utils/bcd_inprocess.py) and the module registers only strings.
"""

from __future__ import annotations

import pytest
import yaml
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_module import secret_texts
from ansible_collections.bcd.kubernetes.plugins.plugin_utils.bcd_inprocess import BcdAction

from tests.helpers import run_playbook

NESTED = "sk-live-nested-0123456789"
VALID_KEY = "sk-live-valid-0123456789"

# host: (its bcd_* variables, the lines its render must fail with, besides the required ones)
HOSTS = {
    "key-list": ({"bcd_api_key": ["n"], "bcd_join_token_secret": {"name": 5}},
                 ["INVALID_CONFIG: bcd_join_token_secret.name: must be a string",
                  "INVALID_CONFIG: bcd_api_key: must be a string"]),
    "key-mapping": ({"bcd_api_key": {"key": NESTED, "n": "n"}, "bcd_image_pull_secrets": [5]},
                    ["INVALID_CONFIG: bcd_image_pull_secrets[0]: must be a string",
                     "INVALID_CONFIG: bcd_api_key: must be a string"]),
    "key-number": ({"bcd_api_key": 1, "bcd_image_pull_secrets": ["regcred", 5], "bcd_rollout_canary": 20000},
                   ["INVALID_CONFIG: bcd_image_pull_secrets[1]: must be a string",
                    "INVALID_CONFIG: bcd_api_key: must be a string",
                    "INVALID_CONFIG: bcd_rollout_canary: must be less than or equal to 10000"]),
    "key-string": ({"bcd_api_key": VALID_KEY, "bcd_join_token_secret": {"name": 5}},
                   ["INVALID_CONFIG: bcd_join_token_secret.name: must be a string"]),
}

PLAY = """
- name: Render with the play's module_defaults, as the playbooks do
  hosts: all
  gather_facts: false
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
  module_defaults:
    group/bcd.kubernetes.bcd:
      config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
      api_key: "{{ bcd_api_key | default(omit) }}"
  tasks:
    - name: In the worker process
      bcd.kubernetes.bcd_manifests: {template: /nonexistent}
      register: here
      ignore_errors: true
    - name: As a process (a task environment falls back)
      bcd.kubernetes.bcd_manifests: {template: /nonexistent}
      environment: {BCD_TEST: "1"}
      register: there
      ignore_errors: true
    - name: Keep both messages
      ansible.builtin.copy:
        content: "{{ {'here': here.msg, 'there': there.msg} | to_json }}"
        dest: "%(out)s/{{ inventory_hostname }}.json"
        mode: "0600"
"""


def test_a_key_that_is_not_a_string_leaves_every_line_readable(tmp_path):
    import json

    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {h: v for h, (v, _) in HOSTS.items()},
                                                 "vars": {"ansible_connection": "local"}}}))
    book = tmp_path / "render.yml"
    book.write_text(PLAY % {"out": tmp_path})
    # ansible-core 2.21 puts the module's arguments in a result only when told to (INJECT_INVOCATION);
    # 2.19 and 2.20 always do and ignore the variable
    done = run_playbook(str(book), "-i", str(inventory), "-vvv", env={"ANSIBLE_INJECT_INVOCATION": "true"})
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    for host, (_variables, expected) in HOSTS.items():
        msgs = json.loads((tmp_path / f"{host}.json").read_text())
        assert msgs["here"] == msgs["there"], (host, msgs)
        lines = msgs["here"].splitlines()
        assert "********" not in msgs["here"], (host, msgs["here"])
        assert [line for line in lines if not line.endswith(": is required")] == expected, (host, lines)
    assert NESTED not in out and VALID_KEY not in out
    # the string key reached the module, masked in the invocation (2.22 writes $REDACTED$)
    assert "api_key: VALUE_SPECIFIED_IN_NO_LOG_PARAMETER" in out or "api_key: $REDACTED$" in out


@pytest.mark.parametrize(("key", "stand_in"), [(["n"], []), ({"k": "n"}, {}), (7, 0), (True, False), (1.5, 0.0)])
def test_the_action_withholds_a_key_that_is_not_a_string(key, stand_in):
    args = {"api_key": key, "config": {"bcd_tenant": "t"}}
    BcdAction._withhold_unusable_key(args)
    assert args == {"config": {"bcd_tenant": "t", "bcd_api_key": stand_in}}
    # the lookup's stand-in already there is kept; no config (a node-side run): the key only goes
    args = {"api_key": key, "config": {"bcd_api_key": []}}
    BcdAction._withhold_unusable_key(args)
    assert args == {"config": {"bcd_api_key": []}}
    args = {"api_key": key}
    BcdAction._withhold_unusable_key(args)
    assert args == {}


def test_the_action_passes_a_string_key_on():
    args = {"api_key": "n", "config": {}}
    BcdAction._withhold_unusable_key(args)
    assert args == {"api_key": "n", "config": {}}


def test_the_module_masks_the_strings_of_a_secret_never_a_stand_in():
    assert secret_texts(VALID_KEY) == {VALID_KEY}
    assert secret_texts({"key": NESTED, "other": ["x", 5]}) == {NESTED, "x"}
    for stand_in in (None, "", 0, 0.0, False, [], {}, 7):
        assert secret_texts(stand_in) == set(), stand_in

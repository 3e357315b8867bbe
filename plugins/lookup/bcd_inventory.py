# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Lookup: every bcd_* variable of the current host, as one mapping, for our modules."""

from __future__ import annotations

DOCUMENTATION = r"""
name: bcd_inventory
short_description: The bcd_* variables of the current host, as one mapping
description:
  - Returns one mapping of every variable whose name starts with C(bcd_), templated, as the
    play sees them (inventory, group and host vars, play vars, role defaults, extra vars).
  - Every bcd-ansible module takes this mapping as its C(config) option and validates it with the
    one inventory model (plugins/module_utils/bcd_model.py), so a typo in a variable name is
    refused instead of ignored.
  - Secrets are left out (C(bcd_api_key)); pass them in their own no_log option. A C(bcd_api_key)
    that is not a string (never a usable key) is passed in the mapping instead, so the model
    refuses it (INVALID_CONFIG) before any module can send it as a key; only an empty value of
    its type is passed (C(0), C([]), C({})), never its content. Internal
    variables of the role C(bcd_daemonset) (prefix C(bcd_daemonset_)) are left out too.
  - Output files (C(bcd_render_out), C(bcd_report_out), C(bcd_join_secret_out), C(bcd_junit_out),
    C(bcd_metrics_out)) given as relative paths are made absolute against the directory
    C(ansible-playbook) runs in.
options: {}
"""

EXAMPLES = r"""
- name: Render the manifests
  bcd.kubernetes.bcd_manifests:
    config: "{{ lookup('bcd.kubernetes.bcd_inventory') }}"
"""

RETURN = r"""
_raw:
  description: One mapping of variable name to value.
  type: list
  elements: dict
"""

import os
import re

from ansible.plugins.lookup import LookupBase
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_cp import (
    VERSION_KEY,
    collection_version,
    key_stand_in,
)

INCLUDE = re.compile(r"^bcd_")
EXCLUDE = re.compile(r"^(bcd_api_key|bcd_daemonset_.*)$")
SECRET = "bcd_api_key"  # noqa: S105 - a variable name
OUTPUTS = frozenset({"bcd_render_out", "bcd_report_out", "bcd_join_secret_out", "bcd_junit_out", "bcd_metrics_out"})


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        variables = variables or {}
        names = sorted(n for n in variables if INCLUDE.match(n) and not EXCLUDE.match(n))
        values = self._templar.template([variables[n] for n in names])
        out = dict(zip(names, values, strict=True))
        # Output files are the operator's: a relative path means the directory ansible-playbook
        # runs in, not the playbook's (where a module on a local connection would put it).
        for name in OUTPUTS.intersection(out):
            path = out[name]
            if isinstance(path, str) and path.strip() and not os.path.isabs(path) and not path.startswith("~"):
                out[name] = os.path.join(os.getcwd(), path)
        # the collection's version, read here on the controller (galaxy.yml or MANIFEST.json), for
        # the control-plane client's User-Agent: a module runs from a zip that has neither
        out[VERSION_KEY] = collection_version(__file__)
        if SECRET in variables:
            key = self._templar.template(variables[SECRET])
            if key is not None and not isinstance(key, str):
                # Not a usable key: the model refuses an empty value of its type (never its content).
                out[SECRET] = key_stand_in(key)
        return [out]

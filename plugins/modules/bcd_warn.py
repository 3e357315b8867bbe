#!/usr/bin/python
"""Documentation of the bcd_warn action plugin (plugins/action/bcd_warn.py); there is no module code."""

from __future__ import annotations

DOCUMENTATION = r"""
module: bcd_warn
short_description: Give the operator a warning, as Ansible's own warning
description:
  - Raises each message as an Ansible warning of the task, on the controller. Every callback shows
    it as C([WARNING]); ansible-runner (and so AWX and Ansible Automation Platform) keeps it in the
    job event's C(event_data.res.warnings), where a line printed by M(ansible.builtin.debug) would be
    an ordinary result.
  - Changes nothing; the same under check mode.
options:
  msg:
    description:
      - The warning, or a list of warnings (one each). Runs of white space are folded into one space,
        as a folded YAML scalar reads.
    type: raw
    required: true
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
author:
  - bcd-ansible
"""

EXAMPLES = r"""
- name: Warn about namespaces whose pods may mount host paths
  bcd.kubernetes.bcd_warn:
    msg: "Pod Security lets pods in {{ open | join(', ') }} mount host paths"
  when: open | length > 0
"""

RETURN = r"""
msg:
  description: The warning(s), as given.
  returned: always
  type: raw
"""

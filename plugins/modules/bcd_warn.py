#!/usr/bin/python
# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the action plugin bcd_warn (it runs on the controller; no module code)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: bcd_warn
short_description: Return a message as an Ansible warning
description:
  - Returns O(msg) as a warning of the task, so the default callback prints it as C([WARNING])
    and AWX and Automation Platform count it, where a play finds a condition from other modules'
    results (a check of ours that is a module warns by itself).
  - Changes nothing.
version_added: 1.0.0
options:
  msg:
    description: The warning, or a list of warnings.
    type: raw
    required: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - bcd.kubernetes.attributes
author:
  - bcd-ansible developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Warn that add-nodes leaves a changed DaemonSet as it is
  bcd.kubernetes.bcd_warn:
    msg: the DaemonSet differs from the render; add_nodes does not change it (rollout does)
"""

RETURN = r"""
msg:
  description: The warning (or the list of warnings) returned.
  returned: always
  type: raw
  sample: the DaemonSet differs from the render
"""

"""The attributes bcd-ansible's modules share (``extends_documentation_fragment``), as
kubernetes.core keeps its shared documentation in doc fragments. A module lists what differs in
its own ``attributes:`` (a key there replaces the fragment's key of that name); list
``ansible.builtin.action_common_attributes`` too, for the attributes' descriptions."""

from __future__ import annotations


class ModuleDocFragment:
    # Most modules: they run on the controller, read or change in check mode alike, no diff.
    DOCUMENTATION = r"""
attributes:
  platform:
    platforms: posix
    details: Runs on the controller.
  check_mode:
    support: full
  diff_mode:
    support: none
"""

    # The modules of the action group bcd_node, which run on a GPU node (over SSH, with become).
    # List it before bcd.kubernetes.attributes: the first fragment to name an attribute wins.
    NODE = r"""
attributes:
  platform:
    platforms: posix
    details: Runs on a GPU node.
"""

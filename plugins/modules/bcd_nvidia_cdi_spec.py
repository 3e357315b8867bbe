#!/usr/bin/python
# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd_nvidia_cdi_spec: generate the node's CDI specification with UUID device names."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bcd_nvidia_cdi_spec
short_description: Generate the NVIDIA CDI specification with --device-name-strategy=uuid
version_added: 1.0.0
description:
  - Runs C(nvidia-ctk cdi generate --device-name-strategy=uuid) on a GPU node, as the bcd DaemonSet
    specification (section GPU isolation) requires, so bcd's device plugin can answer C(nvidia.com/gpu=<UUID>). The
    specification is generated to a temporary file next to O(output) and moved into place only when
    it differs from what is there (idempotent; the old one is backed up).
  - Needs a loaded NVIDIA driver. Where there is none (no C(/proc/driver/nvidia/version) and no
    C(/dev/nvidiactl) under O(root), as on a folder in tests), it generates nothing, says so in
    RV(msg) and with a warning, and returns RV(generated) false; it never pretends success.
  - Restarts nothing, since container runtimes read CDI specifications when a container is created.
options:
  root:
    description: The node's root as this host sees it (C(/) on the node).
    type: path
    default: /
  output:
    description: The specification, as a path on the node (under O(root)).
    type: str
    default: /etc/cdi/nvidia.yaml
  nvidia_ctk:
    description: The C(nvidia-ctk) binary; a bare name is looked up on PATH.
    type: str
    default: nvidia-ctk
  node_name:
    description:
      - The Kubernetes Node this host is, named at the start of the warning and RV(msg) (a run
        configures many nodes from one play, and on the node itself O(root) is just C(/)).
    type: str
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - bcd.kubernetes.attributes.node
  - bcd.kubernetes.attributes
attributes:
  check_mode:
    details: Generates to a temporary file only and reports whether the specification would change.
author:
  - bcd-ansible developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Generate the CDI specification
  bcd.kubernetes.bcd_nvidia_cdi_spec:
    output: /etc/cdi/nvidia.yaml
"""

RETURN = r"""
generated:
  description: True when a specification was generated (and is now in place, or would be in check mode).
  returned: always
  type: bool
msg:
  description: What happened, in one sentence; says so when no driver was found.
  returned: always
  type: str
backup_file:
  description: The previous specification, when it was replaced.
  returned: when changed and a specification was there
  type: str
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule

DRIVER_MARKERS = ("/proc/driver/nvidia/version", "/dev/nvidiactl")


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "default": "/"},
            "output": {"type": "str", "default": "/etc/cdi/nvidia.yaml"},
            "nvidia_ctk": {"type": "str", "default": "nvidia-ctk"},
            "node_name": {"type": "str"},
        },
        supports_check_mode=True,
    )
    root = os.path.abspath(module.params["root"])
    output = module.params["output"]
    if not output.startswith("/"):
        module.fail_json(msg=f"output: {output!r} must be an absolute path on the node")
    prefix = root.rstrip("/")
    if not any(os.path.exists(prefix + m) for m in DRIVER_MARKERS):
        node = module.params["node_name"]
        msg = (
            (f"{node}: " if node else "") + f"no NVIDIA driver is loaded under {root} (neither {' nor '.join(DRIVER_MARKERS)} exists), so the CDI "
            f"specification {output} was NOT generated; once the driver is up, run nvidia-ctk cdi generate "
            f"--device-name-strategy=uuid --output={output} there (nvidia-cdi-refresh now does the same)"
        )
        module.warn(msg)
        module.exit_json(changed=False, generated=False, msg=msg)

    ctk = module.params["nvidia_ctk"]
    binary = ctk if "/" in ctk else module.get_bin_path(ctk)
    if not binary or not os.access(binary, os.X_OK):
        module.fail_json(msg=f"{ctk}: not found on this node; install the NVIDIA container toolkit or set gpu_stack_nvidia_ctk")
    dest = prefix + output
    directory = os.path.dirname(dest)
    if not os.path.isdir(directory):
        if module.check_mode:
            module.exit_json(changed=True, generated=True, msg=f"would create {output} (UUID device names)")
        os.makedirs(directory, mode=0o755)
    suffix = os.path.splitext(output)[1] or ".yaml"
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".bcd-cdi-", suffix=suffix)
    os.close(fd)
    try:
        argv = [binary, "cdi", "generate", "--device-name-strategy=uuid", f"--output={tmp}"]
        if root != "/":
            argv += [f"--driver-root={root}", f"--dev-root={root}"]
        rc, _out, err = module.run_command(argv)
        if rc != 0:
            module.fail_json(msg=f"nvidia-ctk cdi generate failed (exit {rc}): {err.strip()}")
        with open(tmp, "rb") as handle:
            new = handle.read()
        old = None
        if os.path.exists(dest):
            with open(dest, "rb") as handle:
                old = handle.read()
        if old == new:
            module.exit_json(changed=False, generated=True, msg=f"{output} is up to date (UUID device names)")
        result = {"changed": True, "generated": True, "msg": f"{output} generated with UUID device names"}
        if module.check_mode:
            module.exit_json(**result)
        if old is not None:
            result["backup_file"] = module.backup_local(dest)
        os.chmod(tmp, 0o644)
        module.atomic_move(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    module.exit_json(**result)


if __name__ == "__main__":
    main()

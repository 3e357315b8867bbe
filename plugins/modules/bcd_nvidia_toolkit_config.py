#!/usr/bin/python
# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd_nvidia_toolkit_config: set the toolkit's GPU-isolation keys with nvidia-ctk config."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bcd_nvidia_toolkit_config
short_description: Make an NVIDIA container toolkit config.toml refuse NVIDIA_VISIBLE_DEVICES from unprivileged pods
version_added: 1.0.0
description:
  - Sets C(accept-nvidia-visible-devices-envvar-when-unprivileged = false) and
    C(accept-nvidia-visible-devices-as-volume-mounts = false) in one toolkit C(config.toml), as the bcd
    DaemonSet specification (section GPU isolation) requires, with the toolkit's own tool, C(nvidia-ctk config --set), so the file
    keeps the layout the toolkit writes. Runs on the GPU node (packages mode).
  - Nothing changes when the file already sets both keys to false (C(accept-nvidia-visible-devices-as-volume-mounts)
    absent counts as false, its default). Otherwise the file is backed up (O(backup)) and replaced
    atomically, keeping its mode and owner (0644 for a new file, its directory created 0755).
  - A file that does not parse as TOML is never touched (the module fails and names it).
  - Restarts nothing, since the toolkit reads its C(config.toml) for every new container.
options:
  path:
    description: The file, as this host sees it (with a root prefix in tests).
    type: path
    required: true
  node_path:
    description: The same file as on the node, for messages (default O(path)).
    type: str
  nvidia_ctk:
    description: The C(nvidia-ctk) binary; a bare name is looked up on PATH.
    type: str
    default: nvidia-ctk
  backup:
    description: Keep a timestamped copy of the file before changing it (as C(ansible.builtin.copy) does).
    type: bool
    default: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - bcd.kubernetes.attributes.node
  - bcd.kubernetes.attributes
attributes:
  check_mode:
    details: Runs C(nvidia-ctk config) to stdout only and reports the change it would make.
  diff_mode:
    support: full
author:
  - bcd-ansible developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Set the key to false in the packages' config
  bcd.kubernetes.bcd_nvidia_toolkit_config:
    path: /etc/nvidia-container-runtime/config.toml
"""

RETURN = r"""
path:
  description: O(node_path) (or O(path)).
  returned: always
  type: str
backup_file:
  description: The backup made before the change.
  returned: when changed and O(backup) and the file existed
  type: str
created:
  description: True when the file did not exist before.
  returned: always
  type: bool
"""

import os
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule

KEY = "accept-nvidia-visible-devices-envvar-when-unprivileged"
VOLUME_KEY = "accept-nvidia-visible-devices-as-volume-mounts"

try:
    import tomllib as _toml
except ImportError:  # pragma: no cover - older Pythons on nodes
    try:
        import tomli as _toml  # type: ignore[no-redef]
    except ImportError:
        _toml = None


def _parse(module, text: str, what: str) -> dict:
    if _toml is None:
        module.fail_json(msg="this Python has no TOML parser: use Python 3.11+ or install tomli on the node")
    try:
        return _toml.loads(text)
    except ValueError as exc:
        module.fail_json(msg=f"{what} does not parse as TOML ({exc}); it was left as it is: fix it by hand")
        raise


def _safe(doc: dict) -> bool:
    return doc.get(KEY) is False and doc.get(VOLUME_KEY) in (None, False)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "node_path": {"type": "str"},
            "nvidia_ctk": {"type": "str", "default": "nvidia-ctk"},
            "backup": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    path = module.params["path"]
    shown = module.params["node_path"] or path
    exists = os.path.exists(path)
    before = ""
    if exists:
        try:
            with open(path, encoding="utf-8") as handle:
                before = handle.read()
        except (OSError, UnicodeDecodeError) as exc:
            module.fail_json(msg=f"{shown}: cannot be read: {exc}")
        if _safe(_parse(module, before, shown)):
            module.exit_json(changed=False, path=shown, created=False)

    ctk = module.params["nvidia_ctk"]
    binary = ctk if "/" in ctk else module.get_bin_path(ctk)
    if not binary or not os.access(binary, os.X_OK):
        module.fail_json(msg=(
            f"{ctk}: not found on this node; install the NVIDIA container toolkit (nvidia-container-toolkit-base) "
            "or set gpu_stack_nvidia_ctk"
        ))
    rc, after, err = module.run_command(
        [binary, "config", "--config-file", path, "--set", f"{KEY}=false", "--set", f"{VOLUME_KEY}=false"],
    )
    if rc != 0:
        module.fail_json(msg=f"nvidia-ctk config failed for {shown} (exit {rc}): {err.strip()}")
    if not _safe(_parse(module, after, f"the output of nvidia-ctk config for {shown}")):
        module.fail_json(msg=f"nvidia-ctk config did not set {KEY} = false for {shown}; the file was left as it is")

    result = {"changed": True, "path": shown, "created": not exists}
    if module._diff:
        result["diff"] = {"before": before, "after": after, "before_header": shown, "after_header": shown}
    if module.check_mode:
        module.exit_json(**result)

    if exists and module.params["backup"]:
        result["backup_file"] = module.backup_local(path)
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        os.makedirs(directory, mode=0o755)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".bcd-toolkit-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(after)
        if exists:
            shutil.copymode(path, tmp)
        else:
            os.chmod(tmp, 0o644)
        module.atomic_move(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    module.exit_json(**result)


if __name__ == "__main__":
    main()

#!/usr/bin/python
# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd_runtime_info: ask the container runtime running on a node what it runs."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bcd_runtime_info
short_description: Ask the container runtime running on a GPU node which runtimes it runs
version_added: 1.0.0
description:
  - Runs on a GPU node (a host of inventory group C(gpu_nodes), over SSH) and asks the container
    runtime running there, not its files, what it runs. It changes nothing. M(bcd.kubernetes.bcd_gpu_isolation)
    compares its answer with what the file judge concluded
    from the node's files (O(bcd.kubernetes.bcd_gpu_isolation#module:node_results) items carry it as C(runtime)),
    and the runtime's answer wins where they differ.
  - "The running daemons are found in C(/proc/<pid>/comm) and C(cmdline): C(containerd) (k3s's and RKE2's
    too, which run containerd with C(-c <their generated config>)) and C(crio)."
  - "containerd: its release (C(<binary> --version), the binary of C(/proc/<pid>/exe)); the file it runs with
    (C(--config)/C(-c) of its command line, else C(/etc/containerd/config.toml)); what that file and its imports
    say now (C(containerd --config <file> config dump)); and the CRI configuration the daemon runs with now:
    C(crictl info) on the daemon's socket (C(crictl) on the node, C(k3s crictl), RKE2's
    C(/var/lib/rancher/rke2/bin/crictl)), else the CRI plugin's own start-up line in the journal of that
    process (C(journalctl _PID=<pid>)). Files changed after the daemon started are listed."
  - "CRI-O: C(crio status config) (the running daemon), else only C(crio config) with the flags the daemon
    was started with (what its files say now)."
  - "What the runtime answers is judged: the handlers whose binary is the NVIDIA container runtime, whether the
    default runtime is one, and (RV(runtime.findings)) a running configuration that differs from what its files
    say now (the daemon was not restarted since they changed), naming both sides. A tool that is missing, or a
    command that fails, is a note naming it, never an error; no runtime running at all is a note too."
  - Needs Python 3.11 (C(tomllib)) or the C(tomli) package on the node to read C(config dump); without them the
    running configuration (C(crictl info), the start-up log) is still asked.
options: {}
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - bcd.kubernetes.attributes
attributes:
  platform:
    details: Runs on a GPU node (Linux, C(/proc)); run it as root (C(become)) so C(/proc/<pid>/exe) and the socket can be read.
  check_mode:
    details: Reads only; runs the same in check mode.
author:
  - bcd-ansible developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Ask the runtime on a GPU node
  bcd.kubernetes.bcd_runtime_info:
  delegate_to: gpu-node-1
  become: true
  register: runtime

- name: Show which handlers run the NVIDIA runtime
  ansible.builtin.debug:
    msg: "{{ runtime.runtime.runtimes | map(attribute='judged.nvidia_handlers') | list }}"
"""

RETURN = r"""
runtime:
  description: What the runtimes running on the node answered.
  returned: always
  type: dict
  contains:
    runtimes:
      description: One entry per running containerd or CRI-O daemon.
      type: list
      elements: dict
      contains:
        kind: {description: "C(containerd) or C(cri-o).", type: str}
        pid: {description: The daemon's process id., type: int}
        argv: {description: Its command line., type: list, elements: str}
        binary: {description: The binary asked (from C(/proc/<pid>/exe)); null when it cannot be found., type: str}
        version: {description: "Its C(--version) output, or null.", type: str}
        started: {description: "When it started, in UTC (ISO 8601).", type: str}
        started_epoch: {description: "The same, in seconds since the epoch.", type: float}
        config: {description: The configuration file it runs with., type: str}
        config_from: {description: "C(--config) (its command line) or C(default).", type: str}
        address: {description: The CRI socket asked., type: str}
        running:
          description:
            - The CRI configuration the daemon runs with now (C(default_runtime), C(handlers) name to binary,
              null for the shim's default runc); null when it could not be asked (RV(runtime.runtimes[].running_error)).
          type: dict
        running_source:
          description: "Where RV(runtime.runtimes[].running) came from (C(crictl info), the start-up log, C(crio status config))."
          type: str
        running_error: {description: Why the running configuration could not be asked., type: str}
        files:
          description:
            - What its files say now (C(config dump), or C(crio config)) - C(default_runtime), C(handlers), and for
              containerd C(version), C(imports) and C(disabled_plugins); null when it could not be asked.
          type: dict
        files_error: {description: Why the files' configuration could not be asked., type: str}
        files_dropped:
          description:
            - "CRI-O: the handlers of C(crio config) it drops as it starts (their binary does not exist in its root,
              C(/proc/<pid>/root)), name to binary; left out of RV(runtime.runtimes[].files). Empty for containerd."
          type: dict
        loaded_files: {description: The configuration file and the imports it loads (globs expanded)., type: list, elements: str}
        changed_since_start:
          description: Each loaded file changed after the daemon started (C(file), C(changed)).
          type: list
          elements: dict
        judged:
          description:
            - The running configuration judged (else the files') - C(nvidia_handlers) (handlers running
              nvidia-container-runtime), C(default_runtime), C(default_is_nvidia).
          type: dict
    findings:
      description:
        - Each daemon whose running configuration differs from what its files say now (check
          C(runtime-not-restarted)), as M(bcd.kubernetes.bcd_gpu_isolation) findings (C(status), C(check), C(where),
          C(message), C(fix)).
      type: list
      elements: dict
    notes: {description: What could not be asked and why., type: list, elements: str}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_runtime_live import Probe


def main() -> None:
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)

    def run(argv):
        try:
            return module.run_command(argv, environ_update={"LC_ALL": "C"})
        except OSError as exc:  # run_command reports most failures itself; never a traceback
            return 127, "", str(exc)

    module.exit_json(changed=False, runtime=Probe(run).run_all())


if __name__ == "__main__":
    main()

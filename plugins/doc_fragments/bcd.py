"""Documentation shared by bcd-ansible's modules (``extends_documentation_fragment: [bcd...]``)."""

from __future__ import annotations


class ModuleDocFragment:
    # The inventory: every bcd_* variable, validated by the one model.
    DOCUMENTATION = r"""
options:
  config:
    description:
      - The C(bcd_*) variables, as C(lookup('bcd.kubernetes.bcd_inventory')) returns them; validated with the
        inventory model (C(plugins/module_utils/bcd_model.py)). A problem fails the module with
        one C(INVALID_CONFIG) line per problem, before anything is called or changed.
    type: dict
    required: true
"""

    # Modules that call the control plane.
    CONTROL_PLANE = r"""
options:
  api_key:
    description:
      - The control-plane API key (C(bcd_api_key), vaulted); else C(BETTER_COMPUTE_API_KEY) from the
        environment. A C(no_log) option, which the module masks in everything it returns, so a task needs
        no C(no_log) and a failure shows the module's own message. Set it once, in the play's C(module_defaults)
        of C(group/bcd.kubernetes.bcd).
    type: str
notes:
  - Control-plane calls retry 429, 502, 503, 504 and connection failures with exponential backoff
    and full jitter, honouring Retry-After, within C(bcd_control_plane_timeout); the server
    certificate is always verified (system trust store or C(bcd_control_plane_ca_file)).
"""

    # Modules of the action group `bcd` that call no control plane: the group's module_defaults
    # set api_key once for every member, so each takes it.
    API_KEY_UNUSED = r"""
options:
  api_key:
    description:
      - Accepted so that the C(module_defaults) of the action group C(group/bcd.kubernetes.bcd) apply (they
        set O(api_key) once for the modules that call the control plane); this module does not use it.
    type: str
"""

    # Modules that call the cluster's API server themselves.
    CLUSTER = r"""
options:
  kubeconfig:
    description: Kubeconfig of the cluster (else C(bcd_kubeconfig), else C($K8S_AUTH_KUBECONFIG), else C($KUBECONFIG) or C(~/.kube/config)).
    type: path
  context:
    description: Kubeconfig context (else C(bcd_kube_context), else C($K8S_AUTH_CONTEXT), else the current one).
    type: str
"""

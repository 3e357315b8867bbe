"""Render bcd's Namespace, ConfigMap and DaemonSet from a validated inventory.

Source: the bcd DaemonSet specification (``docs/spec/bcd-kubernetes-daemonset.md``) ("What you get", "Host mounts", "Apply", "API
access", "GPU isolation", "Generate the manifests from TypeScript"). What the specification leaves open
(bcd's command-line flags, config.toml keys, where the Secret and ConfigMap are mounted) is
written down in ``docs/bcd-contract.yml``; tests hold this renderer to that file.

The output is deterministic: the same inventory renders byte-identical JSON, and only a change
of ``config.toml`` moves the pod annotation ``bcd.dev/config-sha256``.
"""

from __future__ import annotations

import hashlib
import json

from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_model import Inventory

BCD = "/usr/local/bin/bcd"
CONFIG_DIR = "/etc/bcd"
CONFIG_FILE = CONFIG_DIR + "/config.toml"
JWK_KEY = "join-encryption.jwk"
TOKEN_DIR = "/var/run/secrets/bcd-join"
TOKEN_FILE = TOKEN_DIR + "/token"
KUBELET_KUBECONFIG_IN_POD = "/etc/kubernetes/kubelet.conf"
FIELD_MANAGER = "bcd-ansible"
CONFIG_HASH_ANNOTATION = "bcd.dev/config-sha256"
REQUIRES_ANNOTATION = "bcd.dev/requires"

JOIN_COMMAND = [BCD, "join", "--config", CONFIG_FILE, "--token-file", TOKEN_FILE]
NODE_COMMAND = [BCD, "node", "--config", CONFIG_FILE]
STATUS_COMMAND = [BCD, "status", "--config", CONFIG_FILE]


def toml_string(value: object) -> str:
    """A TOML basic string (TOML 1.0: escape backslash, quote and every control character)."""
    out = ['"']
    for ch in str(value):
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04X}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def render_config_toml(inv: Inventory, template_text: str) -> str:
    """``config.toml`` from the Jinja2 template ``templates/config.toml.j2``.

    The template runs in Jinja2's immutable sandbox with StrictUndefined, so a template that
    names an unknown value fails instead of writing an empty string.
    """
    from jinja2 import StrictUndefined
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(
        undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False
    )
    env.filters["toml"] = toml_string
    return env.from_string(template_text).render(
        namespace=inv.bcd_namespace,
        name=inv.bcd_name,
        log_level=inv.bcd_log_level,
        site_id=inv.bcd_site_id,
        gateway_url=inv.bcd_gateway_url,
        gateway_server_name=inv.bcd_gateway_server_name,
        pins=inv.bcd_pins.model_dump(),
        control_plane_url=inv.bcd_control_plane_url,
        join_encryption_key_file=f"{CONFIG_DIR}/{JWK_KEY}" if inv.bcd_join_encryption_jwk else None,
        host_units=inv.bcd_host_units,
        gpu_api=inv.bcd_gpu_api,
    )


def requirements_text(inv: Inventory) -> str:
    """The ``bcd.dev/requires`` annotation: GPU isolation, Pod Security and token rules (the bcd DaemonSet specification)."""
    secret = f"{inv.bcd_namespace}/{inv.bcd_join_token_secret.name}"
    return "\n".join([
        "GPU isolation: bcd hands out GPUs only where it is the only source of GPUs on the node.",
        "- GPU operator: devicePlugin.enabled=false; no other device plugin (nvidia.com/*) and no other GPU DRA driver.",
        "- NVIDIA container toolkit: accept-nvidia-visible-devices-envvar-when-unprivileged = false"
        " (operator toolkit env ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED=false; CDI on, NRI plugin off),"
        " so devices arrive by CDI only.",
        "- CDI specs generated with --device-name-strategy=uuid.",
        f"Pod Security: only {inv.bcd_namespace} (enforce: privileged) and the platform's system namespaces may run"
        " privileged pods or mount host paths; label workload namespaces baseline or restricted, since a pod that"
        " reads /var/lib/bcd can act as the node.",
        f"Join token: multi-use and short-lived (max uses = nodes to join, TTL at most 1h); revoke it and delete the"
        f" Secret {secret} once every node has joined; a joined node keeps its identity in /var/lib/bcd and needs no token.",
    ])


def _labels(inv: Inventory) -> dict:
    return {"app.kubernetes.io/name": "bcd", "app.kubernetes.io/instance": inv.bcd_name}


def _managed(inv: Inventory) -> dict:
    return {**_labels(inv), "app.kubernetes.io/component": "node-agent", "app.kubernetes.io/managed-by": FIELD_MANAGER}


def host_mounts(inv: Inventory) -> list[dict]:
    """The host mounts of the bcd DaemonSet specification's section "Host mounts", in its order, for this inventory.

    Each item: ``{"name", "path" (host), "mountPath" (container), "readOnly", "type"}``.
    """
    m = []

    def add(name: str, path: str, read_only: bool, htype: str, mount_path: str | None = None) -> None:
        m.append({"name": name, "path": path, "mountPath": mount_path or path, "readOnly": read_only, "type": htype})

    add("dev", "/dev", False, "Directory")
    add("sys", "/sys", False, "Directory")
    add("var-lib-bcd", "/var/lib/bcd", False, "DirectoryOrCreate")
    add("etc-cdi", "/etc/cdi", False, "DirectoryOrCreate")
    add("var-run-cdi", "/var/run/cdi", True, "DirectoryOrCreate")
    add("device-plugins", "/var/lib/kubelet/device-plugins", False, "Directory")
    add("pod-resources", "/var/lib/kubelet/pod-resources", True, "Directory")
    if inv.bcd_gpu_api == "dra":
        add("plugins-registry", "/var/lib/kubelet/plugins_registry", False, "DirectoryOrCreate")
        add("dra-plugin", "/var/lib/kubelet/plugins/gpu.bcd.dev", False, "DirectoryOrCreate")
    creds = inv.bcd_kubelet_credentials
    add("kubelet-kubeconfig", creds.kubeconfig, True, "File", KUBELET_KUBECONFIG_IN_POD)
    for i, d in enumerate(creds.certificate_dirs):
        add(f"kubelet-certs-{i}", d, True, "Directory")
    for prefix, paths in (("runtime-config", inv.bcd_container_runtime), ("toolkit-config", inv.bcd_nvidia_toolkit)):
        for i, f in enumerate(paths.files + paths.dirs):
            # a runtime's drop-in directory may not exist yet (k3s before its drop-in imports):
            # the kubelet creates it empty, and the runtime reads nothing from it
            kind = "File" if i < len(paths.files) else "DirectoryOrCreate" if prefix == "runtime-config" else "Directory"
            add(f"{prefix}-{i}", f, True, kind)
    return m


def namespace(inv: Inventory) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": inv.bcd_namespace,
            "labels": {
                "app.kubernetes.io/managed-by": FIELD_MANAGER,
                "pod-security.kubernetes.io/enforce": "privileged",
            },
        },
    }


def configmap(inv: Inventory, config_toml: str) -> dict:
    data = {"config.toml": config_toml}
    if inv.bcd_join_encryption_jwk:
        data[JWK_KEY] = json.dumps(inv.bcd_join_encryption_jwk, sort_keys=True, separators=(",", ":")) + "\n"
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": inv.configmap_name, "namespace": inv.bcd_namespace, "labels": _managed(inv)},
        "data": data,
    }


def daemonset(inv: Inventory, config_toml: str) -> dict:
    mounts = host_mounts(inv)
    resources = {k: dict(v) for k, v in (("requests", inv.bcd_resources.requests), ("limits", inv.bcd_resources.limits)) if v}
    secret = inv.bcd_join_token_secret
    node_name_env = {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}}}

    pod_spec: dict = {}
    if inv.bcd_node_selector:
        pod_spec["nodeSelector"] = dict(sorted(inv.bcd_node_selector.items()))
    pod_spec["tolerations"] = [t.manifest() for t in inv.bcd_tolerations]
    if inv.bcd_priority_class_name:
        pod_spec["priorityClassName"] = inv.bcd_priority_class_name
    if inv.bcd_nvidia_runtime_class:
        pod_spec["runtimeClassName"] = inv.bcd_nvidia_runtime_class
    pod_spec.update({
        "hostNetwork": True,
        "hostPID": False,
        "hostIPC": False,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 30,
    })
    if inv.bcd_image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": n} for n in inv.bcd_image_pull_secrets]
    pod_spec["initContainers"] = [{
        "name": "join",
        "image": inv.bcd_image,
        "imagePullPolicy": "IfNotPresent",
        "command": list(JOIN_COMMAND),
        "env": [node_name_env],
        "resources": resources,
        "securityContext": {
            "runAsUser": 0,
            "runAsGroup": 0,
            "privileged": False,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "var-lib-bcd", "mountPath": "/var/lib/bcd"},
            {"name": "join-token", "mountPath": TOKEN_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }]
    bcd_mounts = [
        {"name": m["name"], "mountPath": m["mountPath"], **({"readOnly": True} if m["readOnly"] else {})} for m in mounts
    ] + [
        {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": "run-bcd", "mountPath": "/run/bcd"},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    pod_spec["containers"] = [{
        "name": "bcd",
        "image": inv.bcd_image,
        "imagePullPolicy": "IfNotPresent",
        "command": list(NODE_COMMAND),
        "env": [
            node_name_env,
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"},
        ],
        "resources": resources,
        "securityContext": {"privileged": True, "runAsUser": 0},
        "livenessProbe": {
            "exec": {"command": list(STATUS_COMMAND)},
            "initialDelaySeconds": 30,
            "periodSeconds": 30,
            "timeoutSeconds": 10,
            "failureThreshold": 3,
        },
        "volumeMounts": bcd_mounts,
    }]
    pod_spec["volumes"] = [
        {"name": m["name"], "hostPath": {"path": m["path"], "type": m["type"]}} for m in mounts
    ] + [
        {"name": "config", "configMap": {"name": inv.configmap_name, "defaultMode": 0o444}},
        {"name": "run-bcd", "emptyDir": {"medium": "Memory"}},
        {"name": "tmp", "emptyDir": {}},
        {"name": "join-token", "secret": {
            "secretName": secret.name,
            "optional": True,
            "defaultMode": 0o400,
            "items": [{"key": secret.key, "path": "token", "mode": 0o400}],
        }},
    ]
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": inv.bcd_name,
            "namespace": inv.bcd_namespace,
            "labels": _managed(inv),
            "annotations": {REQUIRES_ANNOTATION: requirements_text(inv)},
        },
        "spec": {
            "selector": {"matchLabels": _labels(inv)},
            # a pod counts as available only once Ready this long: the rollout's soak
            "minReadySeconds": inv.bcd_rollout_soak,
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
            "template": {
                "metadata": {
                    "labels": _managed(inv),
                    "annotations": {
                        CONFIG_HASH_ANNOTATION: hashlib.sha256(config_toml.encode("utf-8")).hexdigest(),
                        "kubectl.kubernetes.io/default-container": "bcd",
                    },
                },
                "spec": pod_spec,
            },
        },
    }


def render(inv: Inventory, template_text: str) -> list[dict]:
    """The objects to apply, in apply order: [Namespace (when bcd_create_namespace), ConfigMap, DaemonSet]."""
    config_toml = render_config_toml(inv, template_text)
    objects = [namespace(inv)] if inv.bcd_create_namespace else []
    objects += [configmap(inv, config_toml), daemonset(inv, config_toml)]
    return objects


def as_list(objects: list[dict]) -> dict:
    """One ``v1`` ``List`` for ``kubectl apply -f``."""
    return {"apiVersion": "v1", "kind": "List", "items": objects}


def dumps(obj: dict) -> str:
    """Deterministic JSON: two-space indent, keys in render order, a final newline."""
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"


def dumps_yaml(objects: list[dict]) -> str:
    """Deterministic multi-document YAML (one document per object, keys in render order), for
    GitOps repositories: multi-line strings such as ``config.toml`` as literal block scalars, so
    a diff of the file is a diff of the TOML. Loads back (``yaml.safe_load_all``) to ``objects``."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        pass

    def _str(dumper, data):
        # a literal block keeps the text exactly; PyYAML falls back to a quoted scalar by itself
        # for text a block cannot hold (trailing spaces, tabs), so the round trip is always exact
        style = "|" if "\n" in data else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)

    _Dumper.add_representer(str, _str)
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, explicit_start=True,
                         default_flow_style=False, allow_unicode=True, width=4096)

"""The inventory model: every ``bcd_*`` variable, its default and its rules, in one place.

Every module of bcd-ansible validates its input with :func:`load`, so a value means the same
in every playbook. The rules are those of the bcd DaemonSet specification,
``docs/spec/bcd-kubernetes-daemonset.md`` (sections
"Render the manifests and the join token" and "Generate the manifests from TypeScript": the
flag and option tables, and what ``bcdDaemonSetManifests`` refuses; "Host mounts" for the
kubelet credential rules) and of ``control-plane-api.md`` (Pins, Transport).

Problems are reported as :class:`ConfigError`, whose ``lines`` hold one line per problem:
``INVALID_CONFIG: <variable path>: <rule>``. Secret values (``bcd_api_key``) never appear in a
message.
"""

from __future__ import annotations

import difflib
import json
import os
import posixpath
import re
from datetime import date, datetime
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_cp import VERSION_KEY
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_pins import (
    PinError,
    is_pin,
    load_jwk,
    pin_of_jwk,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_quantity import (
    QuantityError,
    canonical,
    value,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_surface import check_allowed_path
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_toolkit_advisories import ADVISORIES
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

# --- rules shared by several variables ----------------------------------------------------
# Patterns end in \Z, not $: $ also matches before a trailing newline ("bcd-system\n").

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z")
SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+\Z")
# registry/repo[:tag]@sha256:<64 hex>  (the registry part is optional, as for any image name)
IMAGE_RE = re.compile(
    r"^(?P<repo>[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"@sha256:(?P<digest>[0-9a-f]{64})\Z"
)
# a host name (dot-separated DNS labels) or a bracketed IPv6 address, either with an optional port
REGISTRY_RE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?::[0-9]+)?"
                         r"|\[[0-9a-fA-F:]+\](?::[0-9]+)?)\Z")
ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}\Z")
DURATION_RE = re.compile(r"^(?:(?P<h>[0-9]+)h)?(?:(?P<m>[0-9]+)m)?(?:(?P<s>[0-9]+)s)?\Z")

# Host mounts (the bcd DaemonSet specification, section Host mounts). Paths the kubelet-credential directories may not be: they
# hold more than the kubelet's own certificates.
KUBELET_CERT_DIR_REFUSED = ("/", "/etc", "/etc/kubernetes", "/etc/kubernetes/pki", "/var", "/var/lib", "/var/lib/kubelet")
# Control-plane kubeconfigs that must never be mounted as the kubelet's.
KUBECONFIG_REFUSED = (
    "/etc/kubernetes/admin.conf",
    "/etc/kubernetes/super-admin.conf",
    "/etc/kubernetes/controller-manager.conf",
    "/etc/kubernetes/scheduler.conf",
)
# Host paths no runtime or toolkit configuration path may be, contain or lie under.
SENSITIVE_HOST_PATHS = ("/etc/kubernetes", "/var/lib/kubelet", "/var/lib/bcd", "/proc", "/dev", "/sys", "/root")
# Paths the DaemonSet already mounts (container side); another mount there would collide.
FIXED_MOUNT_PATHS = (
    "/dev", "/sys", "/var/lib/bcd", "/etc/cdi", "/var/run/cdi", "/var/lib/kubelet/device-plugins",
    "/var/lib/kubelet/pod-resources", "/var/lib/kubelet/plugins_registry",
    "/var/lib/kubelet/plugins/gpu.bcd.dev", "/etc/kubernetes/kubelet.conf", "/etc/bcd", "/run/bcd",
    "/tmp", "/var/run/secrets/bcd-join",
)

KUBELET_PRESETS = {
    "kubeadm": {"kubeconfig": "/etc/kubernetes/kubelet.conf", "certificate_dirs": ["/var/lib/kubelet/pki"]},
    "k3s": {"kubeconfig": "/var/lib/rancher/k3s/agent/kubelet.kubeconfig", "certificate_dirs": ["/var/lib/rancher/k3s/agent"]},
    "rke2": {"kubeconfig": "/var/lib/rancher/rke2/agent/kubelet.kubeconfig", "certificate_dirs": ["/var/lib/rancher/rke2/agent"]},
}
RUNTIME_PRESETS = {
    "containerd": {"files": ["/etc/containerd/config.toml"], "dirs": []},
    # k3s and RKE2 with containerd 2.x render a version 3 template, whose config imports
    # config-v3.toml.d (k3s PR #13680); with containerd 1.7, give {files, dirs} with config.toml.d.
    "k3s": {"files": ["/var/lib/rancher/k3s/agent/etc/containerd/config.toml"],
            "dirs": ["/var/lib/rancher/k3s/agent/etc/containerd/config-v3.toml.d"]},
    "rke2": {"files": ["/var/lib/rancher/rke2/agent/etc/containerd/config.toml"],
             "dirs": ["/var/lib/rancher/rke2/agent/etc/containerd/config-v3.toml.d"]},
    "cri-o": {"files": ["/etc/crio/crio.conf"], "dirs": ["/etc/crio/crio.conf.d"]},
}
TOOLKIT_PRESETS = {
    "gpu-operator": {"files": [], "dirs": ["/usr/local/nvidia/toolkit/.config"]},
    "packages": {"files": [], "dirs": ["/etc/nvidia-container-runtime"]},
}
RESOURCE_NAMES = ("cpu", "memory", "ephemeral-storage")
# An extended resource name (a DNS subdomain, "/", a name), "*" allowed in the name as a wildcard.
FOREIGN_RESOURCE_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+/[A-Za-z0-9*]([-A-Za-z0-9_.*]*[A-Za-z0-9*])?")

# Variables that hold secrets: never echoed, never passed inside ``config``.
SECRET_VARIABLES = ("bcd_api_key",)


class ConfigError(Exception):
    """Invalid inventory. ``lines``: one ``INVALID_CONFIG: <path>: <rule>`` line per problem."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


class _AtKey(ValueError):
    """A problem with one key of a mapping: ``_lines`` reports it at ``<variable>."<key>"``."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


def not_a_string_scalar(v: Any) -> str | None:
    """Why ``v`` (a label or annotation value, or a toleration value) is not the string it must
    be, when YAML 1.1 made a boolean or number of it; None for anything else.

    An unquoted ``yes``, ``on`` or ``true`` reaches Ansible as a boolean and ``1.10`` as the
    number 1.1: turning them back into text would guess, and could select other Nodes."""
    if isinstance(v, bool):
        return (f"{v!r} is a YAML boolean (an unquoted yes, no, on, off, true or false), not a string; "
                'quote it as the label (or taint) has it ("yes")')
    if isinstance(v, (int, float)):
        return (f"{v!r} is a YAML number, not a string (an unquoted 1.10 reads as 1.1, 010 as 8); "
                f'quote it as the label (or taint) has it ("{v}")')
    return None


# A list or mapping variable set from an INI inventory ([group:vars] values) or with
# -e key=value arrives as a string: say so, and where a list or mapping can be written.
STRING_FOR_STRUCTURE = (
    "; got a string (an INI inventory and -e key=value give every value as a string): set it in a "
    "YAML inventory (hosts.yml, group_vars/ or host_vars/) or pass it with -e @file.yml or as JSON (-e '{{\"{name}\": ...}}')"
)


def string_for_structure(name: str) -> str:
    return STRING_FOR_STRUCTURE.format(name=name)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_dns_label(v: str, what: str = "a DNS-1123 label") -> str:
    if not isinstance(v, str) or len(v) > 63 or not DNS1123_LABEL.match(v):
        raise ValueError(f"{_show(v)} is not {what} (lower-case letters, digits and '-', at most 63 characters, starting and ending with a letter or digit)")
    return v


def check_dns_subdomain(v: str) -> str:
    if not isinstance(v, str) or len(v) > 253 or not DNS1123_SUBDOMAIN.match(v):
        raise ValueError(f"{_show(v)} is not a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', at most 253 characters)")
    return v


def check_label_key(k: str) -> str:
    """A qualified name: ``[prefix/]name``, prefix a DNS-1123 subdomain, name 1..63 characters."""
    if not isinstance(k, str) or not k:
        raise ValueError("a label key must be a non-empty string")
    prefix, _slash, name = k.rpartition("/")
    if "/" in k and (not prefix or len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        raise ValueError(f"label key {_show(k)}: the prefix must be a DNS-1123 subdomain")
    if len(name) > 63 or not LABEL_NAME.match(name):
        raise ValueError(f"label key {_show(k)}: "
                         "the name must be 1 to 63 characters of letters, digits, '-', '_' and '.', starting and ending with a letter or digit")
    return k


def check_label_value(v: str) -> str:
    if not isinstance(v, str) or (v and (len(v) > 63 or not LABEL_NAME.match(v))):
        raise ValueError(f"label value {_show(v)} "
                         "must be at most 63 characters of letters, digits, '-', '_' and '.', starting and ending with a letter or digit (or empty)")
    return v


def label_map(v: dict) -> dict[str, str]:
    """A mapping of label (or annotation) key to string value, checked key by key; a YAML
    boolean or number as a value is refused at its key (never turned into text)."""
    out = {}
    for k, val in v.items():
        why = not_a_string_scalar(val)
        if why:
            raise _AtKey(str(k), why)
        if not isinstance(val, str):
            raise _AtKey(str(k), f"{_show(val)} must be a string")
        out[check_label_key(k)] = check_label_value(val)
    return out


def check_https_url(v: str, with_path: bool = True) -> str:
    if not isinstance(v, str):
        raise ValueError("must be an https:// URL")
    if any(c.isspace() or not c.isprintable() for c in v):
        # urlsplit drops tabs and line breaks and strips leading blanks: refuse them outright
        raise ValueError(f"{_show(v)} must not contain spaces, line breaks or control characters")
    parts = urlsplit(v)
    if parts.scheme != "https":
        raise ValueError(f"{_show(v)} must be an https:// URL")
    if not parts.hostname or parts.username or parts.password:
        raise ValueError(f"{_show(v)} must name a host and carry no user or password")
    if parts.query or parts.fragment:
        raise ValueError(f"{_show(v)} must not carry a query or fragment")
    if not with_path and parts.path not in ("", "/"):
        raise ValueError(f"{_show(v)} must be an origin (https://host[:port]) with no path")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as exc:
        raise ValueError(f"{_show(v)} has an invalid port") from exc
    return v.rstrip("/") if with_path else v


def check_abs_path(v: str) -> str:
    """An absolute, normalised host path: starts with '/', no '..', '.', '//' or trailing '/'."""
    if not isinstance(v, str) or not v.startswith("/"):
        raise ValueError(f"{_show(v)} is not an absolute path")
    if v != "/" and (posixpath.normpath(v) != v or "//" in v):
        raise ValueError(f"{_show(v)} is not a normalised absolute path (no '.', '..', '//' or trailing '/')")
    if any(c in v for c in "\n\r\t\0"):
        raise ValueError(f"{_show(v)} contains control characters")
    return v


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def parse_duration(v: Any, what: str) -> int:
    """Seconds from an integer or a duration string such as ``90s``, ``15m``, ``1h`` or ``1h30m``."""
    if isinstance(v, bool):
        raise ValueError(f"{what} must be a duration such as 15m or 1h")
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        s = v.strip()
        if s.isdigit():
            return int(s)
        m = DURATION_RE.match(s)
        if s and m:
            return int(m["h"] or 0) * 3600 + int(m["m"] or 0) * 60 + int(m["s"] or 0)
    raise ValueError(f"{_show(v)} is not a duration (seconds, or such as 90s, 15m, 1h, 1h30m)")


# --- nested models -------------------------------------------------------------------------

class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Pins(_Strict):
    """The three trust anchors, from ``better-compute pki show`` (control-plane-api.md, Pins)."""

    serving_ca: str
    join_signing: str
    join_encryption: str

    @field_validator("serving_ca", "join_signing", "join_encryption")
    @classmethod
    def _pin(cls, v: str) -> str:
        if not is_pin(v):
            raise ValueError(f"{_show(v)} is not a pin: sha256/ and the base64 (44 characters, with padding) of a SHA-256 digest")
        return v


class JoinTokenSecret(_Strict):
    name: str = "bcd-join"
    key: str = "token"

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_dns_subdomain(v)

    @field_validator("key")
    @classmethod
    def _key(cls, v: str) -> str:
        if not SECRET_KEY.match(v) or len(v) > 253 or v in (".", ".."):
            raise ValueError(f"{_show(v)} is not a Secret key (letters, digits, '-', '_' and '.')")
        return v


class Toleration(_Strict):
    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    tolerationSeconds: int | None = None

    @field_validator("value", mode="before")
    @classmethod
    def _value(cls, v: Any) -> Any:
        why = not_a_string_scalar(v)
        if why:
            raise ValueError(why)
        return v

    @model_validator(mode="after")
    def _rules(self) -> Toleration:
        if self.key:
            check_label_key(self.key)
        elif self.operator != "Exists":
            raise ValueError("a toleration without a key must have operator Exists (it then tolerates every taint)")
        if self.operator == "Exists" and self.value:
            raise ValueError("a toleration with operator Exists must not have a value")
        if self.value:
            check_label_value(self.value)
        if self.tolerationSeconds is not None and self.effect != "NoExecute":
            raise ValueError("tolerationSeconds is only allowed with effect NoExecute")
        return self

    def manifest(self) -> dict:
        return {k: v for k, v in self.model_dump().items() if v is not None}


class Resources(_Strict):
    """Container resources; quantities are stored in the API server's canonical form."""

    requests: dict[str, str] = Field(default_factory=lambda: {"cpu": "100m", "memory": "128Mi"})
    limits: dict[str, str] = Field(default_factory=lambda: {"memory": "512Mi"})

    @field_validator("requests", "limits", mode="before")
    @classmethod
    def _quantities(cls, v: Any) -> dict[str, str]:
        if v is None:
            return {}
        if not isinstance(v, dict):
            raise ValueError("must be a mapping of resource name (cpu, memory, ephemeral-storage) to quantity"
                             + (string_for_structure("bcd_resources") if isinstance(v, str) else ""))
        out = {}
        for name, q in v.items():
            if name not in RESOURCE_NAMES:
                raise ValueError(f"resource {_show(name)} is not one of {', '.join(RESOURCE_NAMES)}")
            if isinstance(q, bool) or not isinstance(q, (str, int, float)):
                raise ValueError(f"{name}: {_show(q)} is not a quantity (such as 100m, 128Mi)")
            try:
                c = canonical(str(q))
            except QuantityError as exc:
                raise ValueError(f"{name}: {exc}") from None
            if value(c) < 0:
                raise ValueError(f"{name}: {_show(q)} must not be negative")
            out[name] = c
        return out

    @model_validator(mode="after")
    def _requests_within_limits(self) -> Resources:
        for name, limit in self.limits.items():
            req = self.requests.get(name)
            if req is not None and value(req) > value(limit):
                raise ValueError(f"requests.{name} ({req}) exceeds limits.{name} ({limit})")
        return self


def _paths_before(presets: dict, what: str):
    def convert(v: Any) -> Any:
        if isinstance(v, str):
            if v.lstrip().startswith(("{", "[")):
                raise ValueError("must be a preset name or a mapping {files, dirs}" + string_for_structure(what))
            if v not in presets:
                raise ValueError(f"unknown preset {_show(v)}; expected {', '.join(presets)} or {{files, dirs}}")
            return {"preset": v, **presets[v]}
        if isinstance(v, dict) and "preset" in v:
            raise ValueError(f"{what}: give a preset name or {{files, dirs}}, not both")
        return v
    return convert


def _toolkit_before(v: Any) -> Any:
    """bcd_nvidia_toolkit also takes ``{preset: gpu-operator, install_dir: DIR}``: the GPU
    operator's toolkit installed under another ``toolkit.installDir`` (its ClusterPolicy's), whose
    configuration is then ``DIR/toolkit/.config``."""
    if isinstance(v, dict) and "preset" in v and "install_dir" in v:
        extra = sorted(set(v) - {"preset", "install_dir"})
        if v["preset"] != "gpu-operator" or extra:
            raise ValueError("install_dir goes with preset gpu-operator only, and nothing else: "
                             "{preset: gpu-operator, install_dir: DIR}")
        d = v["install_dir"]
        if not isinstance(d, str):
            raise ValueError("install_dir must be an absolute directory path (the ClusterPolicy's toolkit.installDir)")
        check_abs_path(d)
        return {"preset": "gpu-operator", "install_dir": d, "files": [], "dirs": [d.rstrip("/") + "/toolkit/.config"]}
    return _paths_before(TOOLKIT_PRESETS, "bcd_nvidia_toolkit")(v)


class HostPaths(_Strict):
    """Host configuration files and directories, mounted read-only at their own paths."""

    preset: str | None = None
    files: list[str] = Field(default_factory=list)
    dirs: list[str] = Field(default_factory=list)
    # bcd_nvidia_toolkit's gpu-operator preset under another toolkit.installDir
    install_dir: str | None = None

    @field_validator("files", "dirs")
    @classmethod
    def _abs(cls, v: list[str]) -> list[str]:
        for p in v:
            check_abs_path(p)
            for s in SENSITIVE_HOST_PATHS:
                if _under(p, s) or _under(s, p):
                    raise ValueError(f"{p!r} is, holds or lies under {s}, which is never mounted "
                                     "(the bcd DaemonSet specification, section Host mounts)")
            if p in FIXED_MOUNT_PATHS:
                raise ValueError(f"{p!r} is already a mount of the DaemonSet")
        return v

    @model_validator(mode="after")
    def _count(self) -> HostPaths:
        paths = self.files + self.dirs
        if not 1 <= len(paths) <= 8:
            raise ValueError(f"name 1 to 8 paths in all (files and dirs); got {len(paths)}")
        dup = sorted({p for p in paths if paths.count(p) > 1})
        if dup:
            raise ValueError(f"{dup[0]!r} is named twice")
        return self

    def all(self) -> list[str]:
        return self.files + self.dirs


class CveWaiver(_Strict):
    """An operator's acceptance of a known toolkit container escape on one Node (or ``*``, every
    Node) until a date (inclusive): the finding moves to the report's waived list, and comes back
    when the date has passed."""

    node: str = Field(min_length=1, max_length=253)
    cve: str
    until: str
    reason: str = Field(min_length=1, max_length=300)

    @field_validator("until", mode="before")
    @classmethod
    def _iso_date(cls, v: Any) -> str:
        # YAML reads an unquoted 2027-01-31 as a date; a number or any other string is refused
        if isinstance(v, date) and not isinstance(v, datetime):
            return v.isoformat()
        if isinstance(v, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", v):
            try:
                return date.fromisoformat(v).isoformat()
            except ValueError:
                pass
        raise ValueError(f"{_show(v)} is not a date: write it as YYYY-MM-DD (the last day the waiver holds, in UTC)")

    @field_validator("cve")
    @classmethod
    def _known(cls, v: str) -> str:
        known = [a["cve"] for a in ADVISORIES]
        if v not in known:
            raise ValueError(f"{_show(v)} is not a toolkit advisory this collection judges (one of {', '.join(known)})")
        return v


class KubeletCredentials(_Strict):
    """The kubelet's kubeconfig and client-certificate directories (the bcd DaemonSet specification,
    sections Host mounts and API access)."""

    preset: str | None = None
    kubeconfig: str
    certificate_dirs: list[str] = Field(min_length=1, max_length=4)

    @field_validator("kubeconfig")
    @classmethod
    def _kubeconfig(cls, v: str) -> str:
        check_abs_path(v)
        if v in KUBECONFIG_REFUSED:
            raise ValueError(f"{v!r} is a control-plane kubeconfig, not the kubelet's; bcd acts only with the kubelet's own credentials")
        if v == "/":
            raise ValueError("must be the kubelet's kubeconfig file")
        return v

    @field_validator("certificate_dirs")
    @classmethod
    def _dirs(cls, v: list[str]) -> list[str]:
        for d in v:
            check_abs_path(d)
            if d in KUBELET_CERT_DIR_REFUSED or (_under(d, "/var/lib/kubelet") and not _under(d, "/var/lib/kubelet/pki")):
                raise ValueError(
                    f"{d!r} holds more than the kubelet's certificates; refused are /, /etc, /etc/kubernetes, "
                    "/etc/kubernetes/pki, /var, /var/lib, /var/lib/kubelet and anything under it but pki "
                    "(the bcd DaemonSet specification, section Host mounts)"
                )
        if len(set(v)) != len(v):
            raise ValueError("a directory is named twice")
        return v


# --- the inventory ---------------------------------------------------------------------------

Duration = Annotated[int, Field(ge=0)]


class Inventory(BaseModel):
    """Every ``bcd_*`` inventory variable. docs/variables.md has the same table, for operators."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    # What the manifests are made of (the bcd DaemonSet specification's flag and option tables).
    bcd_image: str
    bcd_gateway_url: str
    bcd_gateway_server_name: str | None = None
    bcd_site_id: str
    bcd_pins: Pins
    bcd_control_plane_url: str | None = None
    bcd_join_encryption_jwk: dict | None = None
    bcd_join_token_secret: JoinTokenSecret = Field(default_factory=JoinTokenSecret)
    bcd_namespace: str = "bcd-system"
    bcd_name: str = "bcd"
    bcd_create_namespace: bool = True
    # Take over bcd's ConfigMap and DaemonSet from a client-side kubectl apply (what the render
    # does not have is removed); false: stop, naming the object and the other manager.
    bcd_adopt_foreign_objects: bool = True
    # adopt-cluster.yml and rollout.yml: let a new render (or the restore of one) take bcd off
    # Nodes that run a bcd pod now; false: refuse, naming them (release-cluster.yml removes bcd).
    bcd_allow_node_loss: bool = False
    # Field paths of bcd's objects whose difference from the render is not drift (audit passes
    # with a note; adopt-cluster.yml and rollout.yml leave them). restartedAt is never drift.
    bcd_drift_allowed_paths: list[str] = Field(default_factory=list)
    bcd_node_selector: dict[str, str] = Field(default_factory=dict)
    bcd_tolerations: list[Toleration] = Field(default_factory=lambda: [Toleration(operator="Exists")])
    bcd_priority_class_name: str | None = "system-node-critical"
    bcd_image_pull_secrets: list[str] = Field(default_factory=list)
    bcd_resources: Resources = Field(default_factory=Resources)
    bcd_host_units: bool = False
    bcd_gpu_api: Literal["device-plugin", "dra"] = "device-plugin"
    bcd_nvidia_runtime_class: str | None = "nvidia"
    bcd_kubelet_credentials: KubeletCredentials = Field(default_factory=lambda: KubeletCredentials(preset="kubeadm", **KUBELET_PRESETS["kubeadm"]))
    bcd_container_runtime: HostPaths = Field(default_factory=lambda: HostPaths(preset="containerd", **RUNTIME_PRESETS["containerd"]))
    bcd_nvidia_toolkit: HostPaths = Field(default_factory=lambda: HostPaths(preset="gpu-operator", **TOOLKIT_PRESETS["gpu-operator"]))
    bcd_log_level: Literal["debug", "info", "warn", "error"] = "info"

    # The join token (the bcd DaemonSet specification, section Render the manifests and the join token; control-plane-api.md).
    bcd_tenant: str | None = None
    bcd_pool: str | None = None
    bcd_token_ttl: Duration = 3600
    bcd_token_max_uses: int | None = Field(default=None, ge=1, le=10000)
    bcd_token_key: str | None = Field(default=None, min_length=1, max_length=128)

    # Reaching the cluster and the control plane.
    bcd_api_key: SecretStr | None = None
    bcd_control_plane_ca_file: str | None = None
    bcd_kubeconfig: str | None = None
    bcd_kube_context: str | None = None
    bcd_control_plane_timeout: Duration = 120
    # The name this cluster goes by in token descriptions and reports (default: the inventory host).
    bcd_cluster_name: str | None = Field(default=None, min_length=1, max_length=63)

    # How the playbooks behave.
    bcd_require_pod_security: bool = False
    bcd_privileged_namespaces: list[str] = Field(default_factory=lambda: ["kube-system", "kube-public", "kube-node-lease"])
    bcd_gpu_isolation_enforce: bool = True
    # adopt-cluster.yml configures GPU isolation (gpu_stack role) before its gate; false: check only.
    bcd_gpu_stack_configure: bool = True
    # Take the ClusterPolicy fields another field manager (Helm, a GitOps controller) owns with
    # other values; false: stop and name the manager and the fields.
    bcd_gpu_stack_force_conflicts: bool = False
    bcd_join_timeout: Duration | None = None
    bcd_rollout_timeout: Duration | None = None
    bcd_render_out: str | None = None
    # render.yml: the file's format (a v1 List in JSON, or one YAML document per object), and
    # whether a file with other content may be replaced (the same content is always a no-op).
    bcd_render_format: Literal["json", "yaml"] = "json"
    bcd_render_force: bool = False
    bcd_join_secret_out: str | None = None
    bcd_report_out: str | None = None
    bcd_node_root: str | None = None
    # GPU isolation (gpu_stack): where node files come from when Ansible does not log in to a node.
    bcd_node_roots: dict[str, str] = Field(default_factory=dict)
    # On a host of inventory group gpu_nodes: the Kubernetes Node it is (default: its inventory name).
    bcd_node_name: str | None = None
    # GPU isolation: extended resources of other GPU device plugins, beyond the built-in list
    # (bcd_gpu_isolation.FOREIGN_GPU_RESOURCES); a Node that allocates one is exposed.
    bcd_foreign_gpu_resources: list[str] = Field(default_factory=list, max_length=64)
    # GPU isolation: known toolkit container escapes an operator accepts on named Nodes, until a date.
    bcd_toolkit_cve_waivers: list[CveWaiver] = Field(default_factory=list, max_length=256)

    # rollout.yml (issue: scheduled rollouts).
    bcd_rollout_canary: int = Field(default=1, ge=0, le=10000)
    bcd_rollout_max_unavailable: int | str = 1
    # How many selected Nodes may be down (NotReady, cordoned, unreachable) for a rollout to start,
    # a count or a percentage rounded up; down Nodes are left behind, not rolled.
    bcd_rollout_max_down: int | str = "10%"
    bcd_rollout_rollback: bool = True
    # Start even though nodes are unhealthy or the previous rollout is incomplete (to recover).
    bcd_rollout_force: bool = False
    # Roll a plan whose first stage covers every node to roll (no canary left), on more than one
    # node: a failure there hits the whole fleet at once; false refuses it.
    bcd_rollout_all_at_once: bool = False
    bcd_rollout_gate_timeout: Duration = 300
    # How long each stage's nodes must stay healthy before the next stage (also the DaemonSet's
    # minReadySeconds, so the controller counts a pod available only after it too).
    bcd_rollout_soak: Duration = 30
    bcd_lock_ttl: Duration = 1800

    # release-cluster.yml: refused unless bcd_release_confirm is the cluster's name.
    bcd_release_confirm: str | None = None
    # Remove nodes from the control plane even though they hold allocations.
    bcd_release_force: bool = False
    # Put back the ClusterPolicy fields gpu_stack changed (from its bcd.dev annotation).
    bcd_release_restore_gpu_stack: bool = False
    # Remove bcd's host state (/var/lib/bcd) on the hosts of group gpu_nodes.
    bcd_release_host_state: bool = False

    # audit.yml: report only (exit 0 even when a check fails); its JUnit and Prometheus outputs.
    bcd_audit_report_only: bool = False
    bcd_junit_out: str | None = None
    bcd_metrics_out: str | None = None
    # rollout.yml across clusters: wave sizes (counts or percentages of the clusters), an extra var.
    bcd_rollout_cluster_waves: list[int | str] | None = None

    # -- field rules ------------------------------------------------------------------------

    @field_validator("bcd_image")
    @classmethod
    def _image(cls, v: str) -> str:
        if not isinstance(v, str):
            raise ValueError("must be an image reference pinned by digest")
        first, _slash, rest = v.partition("/")
        name = v
        if rest and ("." in first or ":" in first or first == "localhost" or first.startswith("[")):
            if not REGISTRY_RE.match(first):
                raise ValueError(f"{_show(v)}: {first!r} is not a registry host[:port]")
            name = rest
        if not IMAGE_RE.match(name):
            if "@sha256:" not in v:
                raise ValueError(f"{_show(v)} is not pinned by digest: use registry/repo[:tag]@sha256:<64 hex digits>")
            raise ValueError(f"{_show(v)} is not registry/repo[:tag]@sha256:<64 lower-case hex digits>")
        return v

    @field_validator("bcd_gateway_url")
    @classmethod
    def _gateway(cls, v: str) -> str:
        return check_https_url(v)

    @field_validator("bcd_control_plane_url")
    @classmethod
    def _cp(cls, v: str | None) -> str | None:
        return None if v is None else check_https_url(v)

    @field_validator("bcd_gateway_server_name")
    @classmethod
    def _server_name(cls, v: str | None) -> str | None:
        if v is not None and (len(v) > 253 or not DNS1123_SUBDOMAIN.match(v.lower())):
            raise ValueError(f"{_show(v)} is not a DNS name")
        return v

    @field_validator("bcd_site_id", "bcd_tenant", "bcd_pool")
    @classmethod
    def _ids(cls, v: str | None) -> str | None:
        if v is not None and (not isinstance(v, str) or not ID_RE.match(v)):
            raise ValueError(f"{_show(v)} is not an id (1 to 128 letters, digits, '_', '.', ':' and '-')")
        return v

    @field_validator("bcd_join_encryption_jwk", mode="before")
    @classmethod
    def _jwk(cls, v: Any) -> dict | None:
        if v is None or v == "":
            return None
        try:
            jwk = load_jwk(v)
            pin_of_jwk(jwk)
        except PinError as exc:
            raise ValueError(str(exc)) from None
        return jwk

    @field_validator("bcd_namespace", "bcd_name")
    @classmethod
    def _labels(cls, v: str) -> str:
        return check_dns_label(v)

    @field_validator("bcd_priority_class_name", "bcd_nvidia_runtime_class")
    @classmethod
    def _subdomain_or_null(cls, v: str | None) -> str | None:
        return None if v is None else check_dns_subdomain(v)

    @field_validator("bcd_image_pull_secrets")
    @classmethod
    def _pull_secrets(cls, v: list[str]) -> list[str]:
        for name in v:
            check_dns_subdomain(name)
        return v

    @field_validator("bcd_privileged_namespaces")
    @classmethod
    def _namespaces(cls, v: list[str]) -> list[str]:
        for name in v:
            check_dns_label(name)
        return v

    @field_validator("bcd_drift_allowed_paths", mode="before")
    @classmethod
    def _allowed_paths(cls, v: Any) -> list[str]:
        if v is None:
            return []
        if not isinstance(v, list):
            raise ValueError("must be a list of field paths, such as ['spec.template.metadata.annotations[\"example.com/team\"]']"
                             + (string_for_structure("bcd_drift_allowed_paths") if isinstance(v, str) else ""))
        out = []
        for item in v:
            try:
                out.append(check_allowed_path(item))
            except ValueError as exc:
                raise ValueError(str(exc)) from None
        return out

    @field_validator("bcd_foreign_gpu_resources")
    @classmethod
    def _foreign_resources(cls, v: list[str]) -> list[str]:
        for item in v:
            if not FOREIGN_RESOURCE_RE.fullmatch(item) or len(item) > 253:
                raise ValueError(f"{_show(item)} is not an extended resource name (<domain>/<name>), where the name "
                                 "may hold * for any characters, such as example.com/vgpu-*")
        return v

    @field_validator("bcd_cluster_name")
    @classmethod
    def _cluster_name(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", v):
            raise ValueError(f"{_show(v)} must be letters, digits, '_', '.' and '-'")
        return v

    @field_validator("bcd_node_selector", mode="before")
    @classmethod
    def _selector(cls, v: Any) -> dict[str, str]:
        if v is None:
            return {}
        if not isinstance(v, dict):
            raise ValueError("must be a mapping of label key to value, such as {nvidia.com/gpu.present: 'true'}"
                             + (string_for_structure("bcd_node_selector") if isinstance(v, str) else ""))
        return label_map(v)

    @field_validator("bcd_kubelet_credentials", mode="before")
    @classmethod
    def _kubelet_preset(cls, v: Any) -> Any:
        if isinstance(v, str):
            if v.lstrip().startswith(("{", "[")):
                raise ValueError("must be a preset name or a mapping {kubeconfig, certificate_dirs}"
                                 + string_for_structure("bcd_kubelet_credentials"))
            if v not in KUBELET_PRESETS:
                raise ValueError(f"unknown preset {_show(v)}; expected {', '.join(KUBELET_PRESETS)} or {{kubeconfig, certificate_dirs}}")
            return {"preset": v, **KUBELET_PRESETS[v]}
        if isinstance(v, dict) and "preset" in v:
            raise ValueError("give a preset name or {kubeconfig, certificate_dirs}, not both")
        return v

    @field_validator("bcd_container_runtime", mode="before")
    @classmethod
    def _runtime_preset(cls, v: Any) -> Any:
        return _paths_before(RUNTIME_PRESETS, "bcd_container_runtime")(v)

    @field_validator("bcd_nvidia_toolkit", mode="before")
    @classmethod
    def _toolkit_preset(cls, v: Any) -> Any:
        return _toolkit_before(v)

    @field_validator("bcd_token_ttl", mode="before")
    @classmethod
    def _ttl(cls, v: Any) -> int:
        seconds = parse_duration(v, "bcd_token_ttl")
        if not 60 <= seconds <= 86400:
            raise ValueError(f"{_show(v)} is outside 1 minute to 24 hours")
        return seconds

    @field_validator("bcd_rollout_soak", mode="before")
    @classmethod
    def _soak(cls, v: Any) -> int:
        seconds = parse_duration(v, "bcd_rollout_soak")
        if not 0 <= seconds <= 3600:
            raise ValueError(f"{_show(v)} is outside 0 seconds to 1 hour")
        return seconds

    @field_validator("bcd_join_timeout", "bcd_rollout_timeout", "bcd_rollout_gate_timeout", "bcd_lock_ttl",
                     "bcd_control_plane_timeout", mode="before")
    @classmethod
    def _durations(cls, v: Any) -> int | None:
        if v is None:
            return None
        seconds = parse_duration(v, "this timeout")
        if not 1 <= seconds <= 7 * 86400:
            raise ValueError(f"{_show(v)} is outside 1 second to 7 days")
        return seconds

    @field_validator("bcd_token_key")
    @classmethod
    def _token_key(cls, v: str | None) -> str | None:
        if v is not None and not v.isprintable():
            raise ValueError("must be printable text")
        return v

    @field_validator("bcd_control_plane_ca_file", "bcd_kubeconfig", "bcd_render_out", "bcd_join_secret_out", "bcd_report_out", "bcd_node_root")
    @classmethod
    def _local_path(cls, v: str | None) -> str | None:
        """A path on the machine that runs the playbook; ``~`` is the user's home, as Ansible's ``path`` type says."""
        if v is not None and (not isinstance(v, str) or not v.strip() or "\0" in v):
            raise ValueError("must be a file path")
        return None if v is None else os.path.expanduser(v)

    @field_validator("bcd_junit_out", "bcd_metrics_out")
    @classmethod
    def _audit_out(cls, v: str | None) -> str | None:
        return cls._local_path(v)

    @field_validator("bcd_release_confirm")
    @classmethod
    def _confirm(cls, v: str | None) -> str | None:
        if v is not None and (not isinstance(v, str) or not v.strip()):
            raise ValueError("must be the cluster's name (bcd_cluster_name, else the inventory host)")
        return v

    @field_validator("bcd_node_roots", mode="before")
    @classmethod
    def _node_roots(cls, v: Any) -> dict[str, str]:
        """Node name -> the directory holding that node's collected root filesystem."""
        if v is None:
            return {}
        if not isinstance(v, dict):
            raise ValueError("must be a mapping of Node name to the directory holding that node's files, such as {gpu-node-1: /srv/collected/gpu-node-1}"
                             + (string_for_structure("bcd_node_roots") if isinstance(v, str) else ""))
        for name, path in v.items():
            check_dns_subdomain(name)
            if not isinstance(path, str) or not path.strip() or "\0" in path:
                raise ValueError(f"the directory of {name!r} must be a path")
        return v

    @field_validator("bcd_node_name")
    @classmethod
    def _node_name(cls, v: str | None) -> str | None:
        return None if v is None else check_dns_subdomain(v)

    @field_validator("bcd_rollout_max_unavailable", mode="before")
    @classmethod
    def _max_unavailable(cls, v: Any) -> int | str:
        if isinstance(v, bool):
            raise ValueError("must be a count (1 or more) or a percentage such as 10%")
        if isinstance(v, str) and v.strip().isdigit():
            v = int(v.strip())
        if isinstance(v, int):
            if v < 1:
                raise ValueError(f"{v} must be at least 1")
            return v
        if isinstance(v, str) and re.fullmatch(r"[0-9]{1,3}%", v) and 1 <= int(v[:-1]) <= 100:
            return v
        raise ValueError(f"{_show(v)} must be a count (1 or more) or a percentage from 1% to 100%")

    @field_validator("bcd_rollout_max_down", mode="before")
    @classmethod
    def _max_down(cls, v: Any) -> int | str:
        if isinstance(v, bool):
            raise ValueError("must be a count (0 or more) or a percentage of the selected nodes such as 10%")
        if isinstance(v, str) and v.strip().isdigit():
            v = int(v.strip())
        if isinstance(v, int):
            if v < 0:
                raise ValueError(f"{v} must be 0 or more (0: any down node refuses the rollout)")
            return v
        if isinstance(v, str) and re.fullmatch(r"[0-9]{1,3}%", v) and int(v[:-1]) <= 100:
            return v
        raise ValueError(f"{_show(v)} must be a count (0 or more) or a percentage of the selected nodes from 0% to "
                         "100%, such as 10%")

    @field_validator("bcd_rollout_cluster_waves", mode="before")
    @classmethod
    def _cluster_waves(cls, v: Any) -> list[int | str] | None:
        if v is None:
            return None
        if not isinstance(v, list) or not v:
            raise ValueError("must be a list of wave sizes, counts or percentages of the clusters, such as [1, \"50%\"]")
        return [cls._max_unavailable(w) for w in v]

    # -- rules across variables ----------------------------------------------------------------

    @model_validator(mode="after")
    def _across(self) -> Inventory:
        problems = []
        if self.bcd_control_plane_url is None and self.bcd_join_encryption_jwk is None:
            problems.append(("bcd_control_plane_url", "set bcd_control_plane_url or bcd_join_encryption_jwk (one is required)"))
        if self.bcd_join_encryption_jwk is not None:
            pin = pin_of_jwk(self.bcd_join_encryption_jwk)
            if pin != self.bcd_pins.join_encryption:
                problems.append(("bcd_join_encryption_jwk", f"the key's pin {pin} is not bcd_pins.join_encryption"))
        shared = sorted(set(self.bcd_container_runtime.all()) & set(self.bcd_nvidia_toolkit.all()))
        if shared:
            problems.append(("bcd_nvidia_toolkit", f"{shared[0]!r} is also named by bcd_container_runtime; a path both options name is refused"))
        kubelet_paths = {self.bcd_kubelet_credentials.kubeconfig, *self.bcd_kubelet_credentials.certificate_dirs}
        for var in ("bcd_container_runtime", "bcd_nvidia_toolkit"):
            clash = sorted(kubelet_paths & set(getattr(self, var).all()))
            if clash:
                problems.append((var, f"{clash[0]!r} is also a kubelet credential path"))
        if problems:
            raise _CrossFieldError(problems)
        return self

    # -- helpers ----------------------------------------------------------------------------

    @property
    def configmap_name(self) -> str:
        return f"{self.bcd_name}-config"

    def public(self) -> dict:
        """The validated variables without secrets, JSON-ready (for registered results)."""
        data = self.model_dump(mode="json", exclude=set(SECRET_VARIABLES))
        return data


class _CrossFieldError(ValueError):
    def __init__(self, problems: list[tuple[str, str]]):
        super().__init__("; ".join(f"{v}: {m}" for v, m in problems))
        self.problems = problems


# --- loading -------------------------------------------------------------------------------

_FRIENDLY = {
    "missing": "is required",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be a whole number",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "list_type": "must be a list",
    "too_short": None,
    "too_long": None,
}
_STRUCTURES = ("dict_type", "model_type", "model_attributes_type", "list_type")
KNOWN_VARIABLES = tuple(Inventory.model_fields)


def _path(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _lines(exc: ValidationError, secret_free: bool = True) -> list[str]:
    lines = []
    # The input is read only for its type (a string where a list or mapping belongs), never shown.
    for err in exc.errors(include_input=True, include_url=False):
        loc = tuple(err["loc"])
        etype = err["type"]
        msg = err["msg"]
        if etype == "extra_forbidden":
            name = str(loc[-1])
            if len(loc) == 1:
                close = difflib.get_close_matches(name, KNOWN_VARIABLES, n=1, cutoff=0.8)
                hint = f"; did you mean {close[0]}?" if close else ""
                msg = f"unknown variable (a typo is never ignored){hint}"
            else:
                msg = "unknown key"
        elif etype == "value_error" and isinstance(err.get("ctx", {}).get("error"), _CrossFieldError):
            for var, m in err["ctx"]["error"].problems:
                lines.append(f"INVALID_CONFIG: {var}: {m}")
            continue
        elif etype == "value_error" and isinstance(err.get("ctx", {}).get("error"), _AtKey):
            key = err["ctx"]["error"].key
            lines.append(f'INVALID_CONFIG: {_path(loc)}."{key}": {err["ctx"]["error"]}')
            continue
        elif etype in _STRUCTURES and isinstance(err.get("input"), str):
            msg = _FRIENDLY[etype] + string_for_structure(str(loc[0]) if loc else "bcd_...")
        elif _FRIENDLY.get(etype):
            msg = _FRIENDLY[etype]
        elif etype == "literal_error":
            msg = "must be " + msg.removeprefix("Input should be ")
        else:
            msg = msg.removeprefix("Value error, ").removeprefix("Input should be ")
            if etype.startswith(("greater", "less")):
                msg = "must be " + msg
        lines.append(f"INVALID_CONFIG: {_path(loc) or 'inventory'}: {msg}")
    return lines


# Variables whose value is a mapping or a list (or may be one, beside a preset name).
_STRUCTURED = ("bcd_pins", "bcd_join_encryption_jwk", "bcd_join_token_secret", "bcd_node_selector", "bcd_tolerations",
               "bcd_image_pull_secrets", "bcd_resources", "bcd_kubelet_credentials", "bcd_container_runtime",
               "bcd_nvidia_toolkit", "bcd_privileged_namespaces", "bcd_node_roots", "bcd_foreign_gpu_resources",
               "bcd_toolkit_cve_waivers")


def from_strings(variables: dict) -> tuple[dict, list[str]]:
    """Values given as strings, as an AWX/AAP survey or ``-e key=value`` gives every value.

    Scalars need nothing here: the model converts ``"false"``, ``"3"`` or ``"90m"`` itself (and
    refuses ``"maybe"`` or ``"3.5"``). A mapping or list variable given as a string that starts
    with ``{`` or ``[`` is read as JSON; a string that is not valid JSON, or JSON of another
    shape, is refused. Returns the converted variables and one ``INVALID_CONFIG`` line per refusal.
    """
    out, lines = dict(variables), []
    for name in _STRUCTURED:
        v = out.get(name)
        if not isinstance(v, str) or not v.strip().startswith(("{", "[")):
            continue
        try:
            parsed = json.loads(v)
        except ValueError as exc:
            lines.append(f"INVALID_CONFIG: {name}: a string that starts like JSON but is not valid JSON "
                         f"(line {exc.lineno}, column {exc.colno}: {exc.msg})")
            continue  # left as it is; the model's own line for it is dropped (_only_survey)
        out[name] = parsed
    return out, lines


def _only_survey(lines: list[str], survey: list[str]) -> list[str]:
    """``lines`` without the model's lines about a variable ``survey`` already refused."""
    refused = tuple(line.split(": ", 2)[1] for line in survey)
    return survey + [ln for ln in lines if ln not in survey and ln.split(": ", 2)[1].split(".")[0].split("[")[0] not in refused]


_SUBSETS: dict = {}


def _subset_model(names: tuple[str, ...]):
    """The model of ``names`` only (the Inventory's fields and field validators), built once per
    process: a persistent interpreter (mitogen) runs load_some many times."""
    subset = _SUBSETS.get(names)
    if subset is None:
        fields = {n: (Inventory.model_fields[n].annotation, Inventory.model_fields[n]) for n in names}
        validators = {}
        for dname, dec in Inventory.__pydantic_decorators__.field_validators.items():
            chosen = [f for f in dec.info.fields if f in names]
            if chosen:
                fn = getattr(dec.func, "__func__", dec.func)
                validators[dname] = field_validator(*chosen, mode=dec.info.mode)(classmethod(fn))
        subset = create_model(
            "InventorySubset", __config__=ConfigDict(extra="ignore", frozen=True, hide_input_in_errors=True),
            __validators__=validators, **fields,
        )
        _SUBSETS[names] = subset
    return subset


def load_some(variables: dict, names: tuple[str, ...]) -> Any:
    """Validate only the variables ``names`` (with the model's own rules), for playbooks that
    need a few of them (gpu-stack.yml and doctor.yml run without bcd_image, bcd_pins, ...).

    ``variables``: as for :func:`load`. Variables of the model outside ``names`` are left
    alone; a ``bcd_*`` name the model does not know is refused (with a did-you-mean), as by
    :func:`load`. Returns an object with one attribute per name (defaults filled in). Raises
    :class:`ConfigError`. Rules across variables are not checked here; :func:`load` checks them.
    """
    if not isinstance(variables, dict):
        raise ConfigError(["INVALID_CONFIG: inventory: the bcd_* variables must be a mapping"])
    variables, survey = from_strings({k: v for k, v in variables.items() if k != VERSION_KEY})
    lines = []
    for k in sorted(variables, key=str):
        if not isinstance(k, str) or not k.startswith("bcd_"):
            lines.append(f"INVALID_CONFIG: {k}: not a bcd_* variable")
        elif k not in KNOWN_VARIABLES:
            close = difflib.get_close_matches(k, KNOWN_VARIABLES, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            lines.append(f"INVALID_CONFIG: {k}: unknown variable (a typo is never ignored){hint}")
    subset = _subset_model(tuple(names))
    out = None
    try:
        out = subset.model_validate({k: v for k, v in variables.items() if k in names})
    except ValidationError as exc:
        lines.extend(_lines(exc))
    lines = _only_survey(lines, survey)
    if lines:
        raise ConfigError(lines)
    return out


def load(variables: dict, required: tuple[str, ...] = ()) -> Inventory:
    """Validate the ``bcd_*`` variables of one inventory host.

    ``variables``: a mapping of variable name to value, as the inventory (and ``-e``) set them;
    ``required``: variables a playbook needs beyond the model's own (for example
    ``bcd_control_plane_url``, ``bcd_tenant`` and ``bcd_pool`` to mint a token).
    Returns the validated, normalised :class:`Inventory`. Raises :class:`ConfigError`.
    """
    if not isinstance(variables, dict):
        raise ConfigError(["INVALID_CONFIG: inventory: the bcd_* variables must be a mapping"])
    variables = {k: v for k, v in variables.items() if k != VERSION_KEY}
    stray = sorted(k for k in variables if not isinstance(k, str) or not k.startswith("bcd_"))
    lines = [f"INVALID_CONFIG: {k}: not a bcd_* variable" for k in stray]
    variables, survey = from_strings({k: v for k, v in variables.items() if k not in stray})
    clean = {k: v for k, v in variables.items() if k not in stray}
    inv = None
    try:
        inv = Inventory.model_validate(clean)
    except ValidationError as exc:
        lines.extend(_lines(exc))
    for name in required:
        if name == "bcd_api_key":
            continue  # may come from BETTER_COMPUTE_API_KEY; the client checks
        if inv is not None and getattr(inv, name) in (None, ""):
            lines.append(f"INVALID_CONFIG: {name}: is required by this playbook")
        elif inv is None and clean.get(name) in (None, "") and not any(f" {name}:" in line for line in lines):
            lines.append(f"INVALID_CONFIG: {name}: is required by this playbook")
    lines = _only_survey(lines, survey)
    if lines:
        raise ConfigError(lines)
    return inv

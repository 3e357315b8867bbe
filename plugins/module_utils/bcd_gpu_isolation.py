"""GPU isolation: prove, node by node, that bcd is the only source of GPUs on a node.

Source: the bcd DaemonSet specification (``docs/spec/bcd-kubernetes-daemonset.md``), section "GPU isolation"
(the ``.cdi`` variant of the NVIDIA container runtime is NOT excepted here: it also turns
``NVIDIA_VISIBLE_DEVICES`` into CDI device requests). The cases in
``tests/fixtures/gpu-isolation`` (and ``gpu-runtime-effective``) fix the verdicts.

Two levels, both pure Python:

* **Node level** (:func:`verify_node_root`): given a node's root directory (``/`` on the node
  itself, a folder of files collected from a node, or a test folder), read every container
  runtime configuration that node's runtime may read, find each runtime and OCI hook that runs
  the NVIDIA container toolkit, derive the toolkit ``config.toml`` it reads, and require that
  file to exist and to set ``accept-nvidia-visible-devices-envvar-when-unprivileged = false``.
  Every known toolkit configuration that accepts the variable is exposure too, and so is
  ``accept-nvidia-visible-devices-as-volume-mounts = true``. A file that does not parse, or no
  runtime configuration at all, is ``unverifiable``, never ``isolated``. Needs only the standard
  library (``tomllib``, Python 3.11+; ``tomli`` is used on older Pythons when installed), so it
  runs on a node over SSH.
* **Cluster level** (:func:`node_allocatable_findings`, :func:`resource_slice_findings`,
  :func:`cluster_policy_findings`, combined per node by :func:`combine`): another device plugin
  (a GPU resource on a Node's allocatable above zero: :data:`FOREIGN_GPU_RESOURCES` and the
  operator's bcd_foreign_gpu_resources), another GPU DRA driver in ResourceSlices, and the GPU
  operator ClusterPolicy it acts on (:func:`active_cluster_policy`) whose settings let GPUs out. These take the objects as the API
  returns them (plain dicts); reading them is the module's business.

Paths in results are always as on the node (absolute, relative to the root), never the folder
they were read from.

A finding is a dict: ``status`` (``exposed`` | ``unverifiable``), ``check`` (a short id),
``where`` (the node file, or ``Kind/name`` of a Kubernetes object), ``message`` (what lets GPUs
out, in one sentence or two) and ``fix`` (what to change). A node's verdict is ``exposed`` when
any finding is, else ``unverifiable`` when any finding is, else ``isolated``.
"""

from __future__ import annotations

import fnmatch
import glob
import json
import os
import re
import stat

from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_containerd import (
    DISABLED,
    FAILED,
    FAMILIES,
    LABEL,
    REFUSED,
    VERSION_FILE,
    family_of,
    parse_version,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_quantity import QuantityError
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_quantity import value as quantity_value
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_runtime_config import (
    RULE_CRIO,
    containerd_unit,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_runtime_config import (
    load as load_runtime_config,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_toolkit_advisories import (
    ADVISORIES,
    exposures,
    parse_release,
    release_text,
    waiver_for,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_toolkit_advisories import (
    VERSION_FILE as TOOLKIT_VERSION_FILE,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_toolkit_advisories import (
    message as cve_message,
)

try:  # Python 3.11+
    import tomllib as _toml
except ImportError:  # pragma: no cover - older Pythons on nodes
    try:
        import tomli as _toml  # type: ignore[no-redef]
    except ImportError:
        _toml = None

EXPOSED = "exposed"
UNVERIFIABLE = "unverifiable"
ISOLATED = "isolated"
VERDICTS = (ISOLATED, EXPOSED, UNVERIFIABLE)

# The toolkit's keys (NVIDIA container toolkit, internal/config: AcceptEnvvarUnprivileged,
# AcceptDeviceListAsVolumeMounts) and the GPU operator's toolkit env that writes the first.
KEY = "accept-nvidia-visible-devices-envvar-when-unprivileged"
VOLUME_KEY = "accept-nvidia-visible-devices-as-volume-mounts"
OPERATOR_ENV = "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED"
# The operator's toolkit env that writes VOLUME_KEY: true there is exposure, as the key is on a node.
OPERATOR_VOLUME_ENV = "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS"
# Go's strconv.ParseBool false values: what the operator's toolkit container accepts as false.
GO_FALSE = ("0", "f", "F", "false", "FALSE", "False")
BCD_DRA_DRIVER = "gpu.bcd.dev"

DEFAULT_TOOLKIT_CONFIG = "/etc/nvidia-container-runtime/config.toml"
OPERATOR_TOOLKIT_DIR = "/usr/local/nvidia/toolkit"
OPERATOR_TOOLKIT_CONFIG = OPERATOR_TOOLKIT_DIR + "/.config/nvidia-container-runtime/config.toml"
KNOWN_TOOLKIT_CONFIGS = (DEFAULT_TOOLKIT_CONFIG, OPERATOR_TOOLKIT_CONFIG)

# Where container runtimes read their configuration (the bcd DaemonSet specification, section "The toolkit the container runtime
# runs"; k3s/RKE2 templates and drop-in directories).
RANCHER_DIRS = ("/var/lib/rancher/k3s/agent/etc/containerd", "/var/lib/rancher/rke2/agent/etc/containerd")
RUNTIME_FILES = (
    "/etc/containerd/config.toml",
    *(f"{d}/{n}" for d in RANCHER_DIRS for n in ("config.toml", "config.toml.tmpl", "config-v3.toml.tmpl")),
    "/etc/crio/crio.conf",
)
RUNTIME_DIRS = (
    "/etc/containerd/conf.d",
    "/etc/containerd/config.d",
    *(f"{d}/{n}" for d in RANCHER_DIRS for n in ("config.toml.d", "config-v3.toml.d")),
    "/etc/crio/crio.conf.d",
)
DROPIN_SUFFIXES = (".toml", ".conf")
# OCI hook directories (containers-common: oci-hooks(5)); CRI-O's hooks_dir adds more.
HOOK_DIRS = ("/usr/share/containers/oci/hooks.d", "/etc/containers/oci/hooks.d")
# Where a binary named without a directory is found (the runtimes' PATH lookup).
PATH_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
# Where the kubelet finds DRA drivers' registration sockets (bcd_gpu_api: dra).
KUBELET_PLUGINS_REGISTRY = "/var/lib/kubelet/plugins_registry"

# Keys whose string value names the binary a runtime runs: containerd v2-v4 runc options
# (BinaryName), v1 (options.Runtime of io.containerd.runtime.v1.linux, runtime_engine, and
# [plugins.linux] runtime), CRI-O (runtime_path; runtime in very old versions).
BINARY_KEYS = ("BinaryName", "Runtime", "runtime_engine", "runtime_path", "runtime")
HOOK_BINARIES = ("nvidia-container-toolkit", "nvidia-container-runtime-hook")
ENV_RE = re.compile(
    r"""(?:^|[\s;(&|])(?:export\s+|env\s+)?(?P<name>XDG_CONFIG_HOME|NVIDIA_CTK_CONFIG_FILE_PATH)="""
    r"""(?P<value>"[^"]*"|'[^']*'|[^\s;\\&|)]+)"""
)
CONFIG_FLAG_RE = re.compile(r"""(?:^|\s)--?config(?:-file)?(?:=|\s+)(?P<value>"[^"]*"|'[^']*'|[^\s;\\]+)""")
TEMPLATE_ACTION_RE = re.compile(r"\{\{.*?\}\}")
TEMPLATE_SENTINEL = "@@bcd-template@@"
UUID_NAME_RE = re.compile(r"^(GPU|MIG)-[0-9a-fA-F-]+$")
MAX_SCRIPT = 1 << 20  # a wrapper script is small; never read a large binary


class NodeRootError(Exception):
    """The root directory itself cannot be used (missing, not a directory)."""


def finding(status: str, check: str, where: str, message: str, fix: str, **extra) -> dict:
    out = {"status": status, "check": check, "where": where, "message": message, "fix": fix}
    out.update(extra)
    return out


def _cve_finding(e: dict, where: str, message: str, fix: str) -> dict:
    """The ``toolkit-cve`` finding for exposure ``e`` (bcd_toolkit_advisories.exposures)."""
    return finding(EXPOSED, "toolkit-cve", where, message, fix, cve=e["cve"], version=e["version"], fixed=e["fixed"],
                   operator=e["operator"], sources=e["sources"])


def verdict_of(findings: list[dict]) -> str:
    """``exposed`` if any finding is, else ``unverifiable`` if any is, else ``isolated``."""
    statuses = {f["status"] for f in findings}
    if EXPOSED in statuses:
        return EXPOSED
    if UNVERIFIABLE in statuses:
        return UNVERIFIABLE
    return ISOLATED


def is_nvidia_runtime(binary: str) -> bool:
    """True for nvidia-container-runtime and its variants (.cdi, .legacy, .real, -experimental)."""
    base = binary.rsplit("/", 1)[-1]
    return base.startswith("nvidia-container-runtime") and not base.startswith("nvidia-container-runtime-hook")


def is_toolkit_hook(binary: str) -> bool:
    return binary.rsplit("/", 1)[-1] in HOOK_BINARIES


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _fix_toolkit(path: str) -> str:
    if path.startswith(OPERATOR_TOOLKIT_DIR + "/") or "/toolkit/.config/" in path:
        return (
            f"the GPU operator writes {path}: set its toolkit env {OPERATOR_ENV}=\"false\" "
            "(ansible-playbook gpu-stack.yml with bcd_nvidia_toolkit: gpu-operator)"
        )
    return (
        f"set {KEY} = false in {path} (ansible-playbook gpu-stack.yml with bcd_nvidia_toolkit: packages, or "
        f"on the node: nvidia-ctk config --config-file {path} --in-place --set {KEY}=false)"
    )


class _Root:
    """Read files of a node whose root filesystem is at ``root`` (paths as on the node)."""

    def __init__(self, root: str):
        if not isinstance(root, str) or not root:
            raise NodeRootError("the node root must be a directory path")
        self.root = os.path.abspath(root)
        if not os.path.isdir(self.root):
            raise NodeRootError(f"{root}: not a directory")

    def host(self, node_path: str) -> str:
        """The path on this machine of ``node_path``, following symlinks inside the root.

        An absolute symlink target is taken relative to the root (as on the node), so a
        collected tree never escapes to this machine's own files.
        """
        parts = [p for p in node_path.split("/") if p]
        resolved: list[str] = []
        hops = 0
        while parts:
            part = parts.pop(0)
            if part == ".":
                continue
            if part == "..":
                if resolved:
                    resolved.pop()
                continue
            candidate = os.path.join(self.root, *resolved, part)
            if os.path.islink(candidate):
                hops += 1
                if hops > 40:
                    raise OSError(40, "too many levels of symbolic links", node_path)
                target = os.readlink(candidate)
                if target.startswith("/"):
                    resolved = []
                parts = [p for p in target.split("/") if p] + parts
                continue
            resolved.append(part)
        return os.path.join(self.root, *resolved)

    def node(self, host_path: str) -> str:
        rel = os.path.relpath(host_path, self.root)
        return "/" if rel == "." else "/" + rel.replace(os.sep, "/")

    def isfile(self, node_path: str) -> bool:
        try:
            return stat.S_ISREG(os.stat(self.host(node_path)).st_mode)
        except OSError:
            return False

    def isdir(self, node_path: str) -> bool:
        try:
            return os.path.isdir(self.host(node_path))
        except OSError:
            return False

    def exists(self, node_path: str) -> bool:
        try:
            return os.path.lexists(self.host(node_path))
        except OSError:
            return False

    def lexists(self, node_path: str) -> bool:
        return self.exists(node_path)

    def names(self, node_dir: str) -> list[str]:
        """Every entry of a directory (names only), as Go's Readdirnames gives them."""
        return sorted(os.listdir(self.host(node_dir)))

    def read_text(self, node_path: str, limit: int | None = None) -> str:
        with open(self.host(node_path), "rb") as handle:
            data = handle.read(limit) if limit else handle.read()
        return data.decode("utf-8")

    def head(self, node_path: str, size: int = 2) -> bytes:
        with open(self.host(node_path), "rb") as handle:
            return handle.read(size)

    def walk(self, node_dir: str) -> list[str]:
        """Every file below a directory (node paths) in the order Go's ``filepath.Walk`` visits
        them: each directory's entries sorted by name, hidden ones included, a subdirectory's
        files where its name sorts; a symlink is not followed into a directory (Walk's lstat)."""
        host_dir = self.host(node_dir)
        out = []
        for name in sorted(os.listdir(host_dir)):
            path = node_dir.rstrip("/") + "/" + name
            host = os.path.join(host_dir, name)
            if os.path.isdir(host) and not os.path.islink(host):
                out.extend(self.walk(path))
            else:
                out.append(path)
        return out

    def listdir(self, node_dir: str) -> list[str]:
        """Regular files of a directory (node paths), sorted, hidden files left out."""
        host_dir = self.host(node_dir)
        out = []
        for name in sorted(os.listdir(host_dir)):
            if name.startswith("."):
                continue
            path = node_dir.rstrip("/") + "/" + name
            if self.isfile(path):
                out.append(path)
        return out

    def glob(self, pattern: str) -> list[str]:
        """Node paths matching an absolute glob ``pattern`` (containerd ``imports``)."""
        head, tail = pattern.rsplit("/", 1) if "/" in pattern else ("", pattern)
        if glob.has_magic(head):
            host_pattern = glob.escape(self.root) + "/" + pattern.lstrip("/")
            return sorted(self.node(p) for p in glob.glob(host_pattern) if os.path.isfile(p))
        if not self.isdir(head or "/"):
            return []
        out = []
        for name in sorted(os.listdir(self.host(head or "/"))):
            if fnmatch.fnmatchcase(name, tail) and (not name.startswith(".") or tail.startswith(".")):
                path = (head or "") + "/" + name
                if self.isfile(path):
                    out.append(path)
        return out


def _walk(obj, path=()):
    """Yield (key path, value) for every leaf of a parsed TOML document."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _walk(v, (*path, str(k)))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _walk(v, (*path, str(i)))
    else:
        yield path, obj


def _dotted(path: tuple) -> str:
    return ".".join(p if re.fullmatch(r"[A-Za-z0-9_-]+", p) else json.dumps(p) for p in path)


def _runtime_name(path: tuple) -> str:
    """The runtime a binary key belongs to: the table name after the last ``runtimes``."""
    if "runtimes" in path:
        i = len(path) - 1 - path[::-1].index("runtimes")
        if i + 1 < len(path):
            return path[i + 1]
    if len(path) >= 2 and path[-2] in ("default_runtime", "untrusted_workload_runtime"):
        return path[-2]
    if len(path) >= 3 and path[-3] in ("default_runtime", "untrusted_workload_runtime"):
        return path[-3]
    if len(path) >= 2 and path[-1] == "runtime":
        return f"{path[-2]} runtime"  # containerd v1 [plugins.linux] runtime
    return _dotted(path[:-1]) or path[-1]


def _who(rules: list[str]) -> str:
    seen = list(dict.fromkeys(rules))
    return seen[0] if len(seen) == 1 else ", ".join(seen[:-1]) + " and " + seen[-1]


def not_serving(configs: list[dict], status: str) -> list[dict]:
    """Findings for each containerd loader family under which no configuration in effect serves
    CRI: containerd (``containerd-refuses``) or CRI-O (``crio-refuses``) refuses its configuration, its CRI plugin does not
    load (``cri-not-loaded``) or is disabled (``no-cri-runtime``). ``status`` ``unverifiable`` gives
    the isolation findings (the kubelet's runtime is not one this check knows); ``not-ready`` the
    readiness ones (refused or not loading: no pod runs; disabled: left to the handler check)."""
    families = [f for f in FAMILIES if any(c.get("family") == f for c in configs)] or [None]
    groups: dict[tuple, list[str]] = {}
    for fam in families:
        group = [c for c in configs if c.get("family") in (None, fam)]
        if not group or any(c["serves_cri"] for c in group):
            continue
        for c in group:
            state = c.get("state", DISABLED)
            if status == NOT_READY and state == DISABLED:
                continue
            where = c.get("where") or c["root"] if state == REFUSED else c["root"]
            groups.setdefault((state, where, c.get("reason") or "", c["root"]), []).append(c["rule"])
    out = []
    for (state, where, reason, root), rules in groups.items():
        who = _who(rules)
        if state == REFUSED and set(rules) == {RULE_CRIO}:
            out.append(finding(
                status, "crio-refuses", where,
                f"CRI-O refuses to start with the configuration of {root} ({reason}): "
                + ("no pod, bcd's included, can run on this node." if status == NOT_READY else
                   "it runs no pod, and what the node runs instead cannot be judged."),
                f"fix {where} so that CRI-O starts with it (on the node: `journalctl -u crio` says why it stopped; "
                "`crio status config` shows what a running CRI-O uses)",
            ))
        elif state == REFUSED:
            out.append(finding(
                status, "containerd-refuses", where,
                f"{who} refuses to start with the configuration of {root} ({reason}): "
                + ("no pod, bcd's included, can run on this node." if status == NOT_READY else
                   "it runs no pod, and what the node runs instead cannot be judged."),
                f"fix {where} so that containerd starts with it (on the node: containerd --config {root} config dump "
                "shows what it reads), or, if the node runs another release, put its `containerd --version` output in "
                f"/{VERSION_FILE} of the collected root",
            ))
        elif state == FAILED:
            out.append(finding(
                status, "cri-not-loaded", root,
                f"under {who} the CRI plugin does not load with the configuration of {root} ({reason}): containerd "
                "runs but serves no Kubernetes pod"
                + (", so bcd's pod cannot start here." if status == NOT_READY else
                   ", so the kubelet's runtime is configured somewhere this check does not know."),
                f"fix the CRI plugin's configuration in {root} or the files it imports ({reason}); "
                "`journalctl -u containerd` shows `failed to load plugin` with the same reason",
            ))
        else:
            out.append(finding(
                status, "no-cri-runtime", root,
                f"no container runtime configuration in effect serves CRI ({root}: the CRI plugin is disabled, {reason}"
                f", under {who}), so the kubelet's runtime is configured somewhere this check does not know.",
                "name the kubelet's runtime configuration in bcd_container_runtime (files, dirs), or enable the CRI "
                "plugin (remove it from disabled_plugins)",
            ))
    return out


class NodeVerifier:
    """Collects what one node root says about GPU isolation. Use :func:`verify_node_root`."""

    def __init__(self, root: str, runtime_paths: dict | None = None, toolkit_paths: dict | None = None,
                 containerd_version: str | None = None, toolkit_version=None):
        self.fs = _Root(root)
        self._containerd_version = containerd_version
        self._toolkit_version = toolkit_version
        self.toolkit_version = None
        self.cli_version = None
        self.containerd_version = None
        self.containerd_version_source = None
        self.findings: list[dict] = []
        self.files_read: list[str] = []
        self.runtimes: list[dict] = []
        self.hooks: list[dict] = []
        self.notes: list[str] = []
        # toolkit config path (node) -> readers (runtime/hook descriptions)
        self.toolkit_readers: dict[str, list[str]] = {}
        self.runtime_files = list(RUNTIME_FILES)
        self.runtime_dirs = list(RUNTIME_DIRS)
        self.toolkit_known = list(KNOWN_TOOLKIT_CONFIGS)
        self.hook_dirs = list(HOOK_DIRS)
        for p in (runtime_paths or {}).get("files", []) or []:
            if p not in self.runtime_files:
                self.runtime_files.append(p)
        for p in (runtime_paths or {}).get("dirs", []) or []:
            if p not in self.runtime_dirs:
                self.runtime_dirs.append(p)
        for p in (toolkit_paths or {}).get("files", []) or []:
            if p.endswith(".toml") and p not in self.toolkit_known:
                self.toolkit_known.append(p)
        for d in (toolkit_paths or {}).get("dirs", []) or []:
            for p in (d.rstrip("/") + "/config.toml", d.rstrip("/") + "/nvidia-container-runtime/config.toml"):
                if p not in self.toolkit_known:
                    self.toolkit_known.append(p)
        self._seen_files: set[str] = set()
        self._parsed_runtime = 0
        self._extra_files = list((runtime_paths or {}).get("files", []) or [])
        self._extra_dirs = list((runtime_paths or {}).get("dirs", []) or [])
        self.runtime_configs: list[dict] = []
        self.ignored: list[dict] = []
        self.mount_findings: list[dict] = []
        self.effective = None
        # (file, runtime name, key, pattern) of runtimes passing annotations into containers
        self._annotation_runtimes: list[tuple[str, str, str, str]] = []

    # -- runtime configuration -------------------------------------------------------------

    def _parse_toml(self, path: str, template: bool = False):
        """Parse one file; record it. Returns the document, or None (finding recorded)."""
        try:
            text = self.fs.read_text(path)
        except PermissionError:
            self.findings.append(finding(
                UNVERIFIABLE, "unreadable", path, f"{path} exists but cannot be read (permission denied).",
                "run the check as root on the node (ansible_become: true for group gpu_nodes)",
            ))
            return None
        except UnicodeDecodeError:
            self.findings.append(finding(
                UNVERIFIABLE, "unparsable", path, f"{path} is not UTF-8 text, so it cannot be checked.",
                f"fix {path} (it must be valid TOML)",
            ))
            return None
        except OSError as exc:
            self.findings.append(finding(
                UNVERIFIABLE, "unreadable", path, f"{path} cannot be read: {exc.strerror or exc}.",
                f"make {path} readable to the check",
            ))
            return None
        if template:
            lines = []
            for line in text.splitlines():
                if TEMPLATE_ACTION_RE.sub("", line).strip() == "" and "{{" in line:
                    continue  # a line of template actions only, such as {{ template "base" . }}
                lines.append(TEMPLATE_ACTION_RE.sub(TEMPLATE_SENTINEL, line))
            text = "\n".join(lines)
        if _toml is None:
            self.findings.append(finding(
                UNVERIFIABLE, "no-toml-parser", path,
                "this Python has no TOML parser (tomllib needs Python 3.11; tomli is not installed).",
                "run the check with Python 3.11 or later, or install tomli on the node",
            ))
            return None
        try:
            doc = _toml.loads(text)
        except (ValueError, TypeError) as exc:  # tomllib.TOMLDecodeError is a ValueError
            self.findings.append(finding(
                UNVERIFIABLE, "unparsable", path,
                f"{path} does not parse as TOML ({exc}); the runtime's configuration cannot be ruled safe.",
                f"fix the syntax of {path}",
            ))
            return None
        return doc

    def _read_runtime(self, path: str, template: bool = False):
        """Read one runtime configuration file the runtime loads (the loader's ``read``)."""
        if path not in self.files_read:
            self.files_read.append(path)
        self._parsed_runtime += 1  # it exists: the node has runtime configuration, readable or not
        return self._parse_toml(path, template=template)

    def _scan_runtime_doc(self, path: str, doc: dict, origin: dict | None = None, defaults: dict | None = None,
                          keys: dict | None = None) -> None:
        """Every runtime of a (merged) configuration; ``origin`` maps a key path to the file that set
        it, ``keys`` to the key as that file writes it, ``defaults`` the default runtime's name to
        where that default is set."""
        origin = origin or {}
        defaults = defaults or {}
        keys = keys or {}

        def source(keypath: tuple) -> str:
            if keypath in origin:
                return origin[keypath]
            n = len(keypath)
            return next((f for k, f in origin.items() if k[:n] == keypath), path)

        crio = "crio" in doc
        for keypath, value in _walk(doc):
            if not isinstance(value, str) or keypath[-1] not in BINARY_KEYS:
                continue
            name = _runtime_name(keypath)
            self._runtime(source(keypath), name, keys.get(keypath) or _dotted(keypath), value, defaults.get(name))
        if crio:
            # A CRI-O runtime without runtime_path runs the binary named like the runtime ($PATH).
            runtimes = ((doc.get("crio") or {}).get("runtime") or {}).get("runtimes") or {}
            if isinstance(runtimes, dict):
                for name, table in runtimes.items():
                    if isinstance(table, dict) and not table.get("runtime_path"):
                        keypath = ("crio", "runtime", "runtimes", name)
                        self._runtime(source(keypath), name, _dotted(keypath), name, defaults.get(name))
            hooks_dirs = ((doc.get("crio") or {}).get("runtime") or {}).get("hooks_dir")
            if isinstance(hooks_dirs, str):
                hooks_dirs = [hooks_dirs]
            for d in hooks_dirs or []:
                if isinstance(d, str) and d not in self.hook_dirs:
                    self.hook_dirs.append(d)
        self._annotation_passthrough(path, doc, source)

    def _annotation_passthrough(self, path: str, doc: dict, source=None) -> None:
        """containerd runtimes that copy pod/container annotations such as cdi.k8s.io/* into the
        OCI spec: the NVIDIA runtime injects any CDI device named there, whatever the key says."""
        for keypath, value in _walk(doc):
            if len(keypath) < 2 or keypath[-2] not in ("pod_annotations", "container_annotations"):
                continue
            if not isinstance(value, str):
                continue
            if fnmatch.fnmatchcase("cdi.k8s.io/x", value) or fnmatch.fnmatchcase("nvidia.cdi.k8s.io/x", value):
                name = _runtime_name(keypath[:-1])
                file = source(keypath) if source else path
                entry = (file, name, _dotted(keypath[:-1]), value)
                if entry not in self._annotation_runtimes:
                    self._annotation_runtimes.append(entry)

    def _resolve_binary(self, binary: str) -> str:
        if "/" in binary:
            return binary
        for d in PATH_DIRS:
            if self.fs.isfile(f"{d}/{binary}"):
                return f"{d}/{binary}"
        return f"/usr/bin/{binary}"

    def _script_configs(self, binary: str) -> tuple[bool, list[str], list[str]]:
        """(is an NVIDIA wrapper, config paths it sets, problems) for a wrapper script."""
        try:
            if not self.fs.isfile(binary) or self.fs.head(binary) != b"#!":
                return False, [], []
            if os.path.getsize(self.fs.host(binary)) > MAX_SCRIPT:
                return False, [], []
            text = self.fs.read_text(binary)
        except (OSError, UnicodeDecodeError):
            return False, [], []
        mentions = "nvidia-container-runtime" in text.replace("nvidia-container-runtime-hook", "") or any(
            h in text for h in HOOK_BINARIES
        )
        configs, problems = [], []
        for m in ENV_RE.finditer(text):
            value = _unquote(m["value"])
            if "$" in value or "`" in value or not value.startswith("/"):
                problems.append(f"{m['name']}={value}")
                continue
            if m["name"] == "NVIDIA_CTK_CONFIG_FILE_PATH":
                configs.append(value)
            else:
                configs.append(value.rstrip("/") + "/nvidia-container-runtime/config.toml")
        for m in CONFIG_FLAG_RE.finditer(text):
            value = _unquote(m["value"])
            if "$" in value or not value.startswith("/"):
                problems.append(f"--config {value}")
            else:
                configs.append(value)
        return mentions, sorted(set(configs)), problems

    def _derived_configs(self, binary: str, env: dict | None = None, args: list | None = None) -> tuple[list[str], list[str], bool]:
        """(toolkit config paths ``binary`` reads, problems, is NVIDIA) for a runtime or hook binary."""
        env = env or {}
        configs, problems = [], []
        for a, arg in enumerate(args or []):
            if isinstance(arg, str):
                if arg.startswith(("-config=", "--config=")):
                    configs.append(arg.split("=", 1)[1])
                elif arg in ("-config", "--config") and a + 1 < len(args):
                    configs.append(str(args[a + 1]))
        if env.get("NVIDIA_CTK_CONFIG_FILE_PATH"):
            configs.append(env["NVIDIA_CTK_CONFIG_FILE_PATH"])
        elif env.get("XDG_CONFIG_HOME"):
            configs.append(env["XDG_CONFIG_HOME"].rstrip("/") + "/nvidia-container-runtime/config.toml")
        wrapper, script_configs, script_problems = self._script_configs(binary)
        configs.extend(script_configs)
        problems.extend(script_problems)
        nvidia = is_nvidia_runtime(binary) or is_toolkit_hook(binary) or wrapper
        if not configs and not problems:
            directory = binary.rsplit("/", 1)[0]
            if directory.rsplit("/", 1)[-1] == "toolkit":
                configs.append(directory + "/.config/nvidia-container-runtime/config.toml")
            else:
                configs.append(DEFAULT_TOOLKIT_CONFIG)
        bad = [c for c in configs if not c.startswith("/")]
        problems.extend(f"config path {c!r} is not absolute" for c in bad)
        return sorted({c for c in configs if c.startswith("/")}), problems, nvidia

    def _runtime(self, path: str, name: str, key: str, value: str, default_from: str | None = None) -> None:
        if TEMPLATE_SENTINEL in value:
            self.findings.append(finding(
                UNVERIFIABLE, "templated", path,
                f"runtime {name!r} in {path} ({key}) runs a binary its template computes at run time.",
                f"write the binary path literally in {path}",
            ))
            return
        binary = self._resolve_binary(value)
        configs, problems, nvidia = self._derived_configs(binary)
        if not nvidia:
            return
        reader = f"runtime {name!r} ({path}: {key} = {value!r})"
        if default_from:
            where = f"set in {default_from}" if default_from.startswith("/") else default_from
            reader = (f"runtime {name!r}, the default runtime ({where}) ({path}: {key} = {value!r})")
        entry = {"name": name, "file": path, "key": key, "binary": binary, "toolkit_configs": configs}
        if entry not in self.runtimes:
            self.runtimes.append(entry)
        if problems:
            self.findings.append(finding(
                UNVERIFIABLE, "wrapper", binary,
                f"{reader} runs the wrapper {binary}, which sets the toolkit's configuration path at run time "
                f"({'; '.join(problems)}), so the file it reads cannot be known.",
                f"make {binary} set NVIDIA_CTK_CONFIG_FILE_PATH to a literal absolute path",
            ))
        for c in configs:
            self.toolkit_readers.setdefault(c, [])
            if reader not in self.toolkit_readers[c]:
                self.toolkit_readers[c].append(reader)

    # -- OCI hooks --------------------------------------------------------------------------

    def _hook_file(self, path: str) -> None:
        if path in self._seen_files:
            return
        self._seen_files.add(path)
        self.files_read.append(path)
        try:
            doc = json.loads(self.fs.read_text(path))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            self.findings.append(finding(
                UNVERIFIABLE, "unparsable", path,
                f"OCI hook {path} does not parse as JSON ({exc}); whether it runs the NVIDIA toolkit cannot be ruled out.",
                f"fix or remove {path}",
            ))
            return
        if not isinstance(doc, dict):
            self.findings.append(finding(
                UNVERIFIABLE, "unparsable", path, f"OCI hook {path} is not a JSON object.", f"fix or remove {path}",
            ))
            return
        hook = doc.get("hook")
        if isinstance(hook, dict):  # version 1.0.0
            binary, args, env = hook.get("path"), hook.get("args") or [], hook.get("env") or []
            when = doc.get("when") or {}
            always = bool(when.get("always")) if isinstance(when, dict) else False
        else:  # version 0.1.0: "hook" is the path
            binary, args, env = hook, doc.get("arguments") or [], []
            always = not any(doc.get(k) for k in ("cmds", "annotations", "hasbindmounts"))
        if not isinstance(binary, str) or not binary:
            return
        env_map = {}
        for item in env if isinstance(env, list) else []:
            if isinstance(item, str) and "=" in item:
                k, v = item.split("=", 1)
                env_map[k] = v
        binary = self._resolve_binary(binary)
        configs, problems, nvidia = self._derived_configs(
            binary, env_map, [a for a in args if isinstance(a, str)] if isinstance(args, list) else [],
        )
        if not nvidia:
            return
        scope = "every container" if always else "containers its conditions match (pods control annotations and commands)"
        reader = f"OCI hook {path} (runs {binary} for {scope})"
        self.hooks.append({"file": path, "binary": binary, "always": always, "toolkit_configs": configs})
        if problems:
            self.findings.append(finding(
                UNVERIFIABLE, "wrapper", binary,
                f"{reader}: the toolkit configuration path is computed at run time ({'; '.join(problems)}).",
                f"make {binary} use a literal configuration path",
            ))
        for c in configs:
            self.toolkit_readers.setdefault(c, [])
            if reader not in self.toolkit_readers[c]:
                self.toolkit_readers[c].append(reader)

    # -- toolkit configuration ----------------------------------------------------------------

    def _toolkit_config(self, path: str) -> dict:
        """Evaluate one toolkit config.toml. Returns a summary and appends findings."""
        readers = self.toolkit_readers.get(path, [])
        known = path in self.toolkit_known
        info = {"path": path, "exists": False, "readers": readers, "known": known, KEY: None, VOLUME_KEY: None}
        if not self.fs.exists(path):
            if readers:
                self.findings.append(finding(
                    EXPOSED, "toolkit-config-missing", path,
                    f"{'; '.join(readers)} reads {path}, which does not exist, so the toolkit's default applies "
                    "and any unprivileged pod can take GPUs by naming them in NVIDIA_VISIBLE_DEVICES.",
                    _fix_toolkit(path), readers=readers,
                ))
            return info
        info["exists"] = True
        if path not in self.files_read:
            self.files_read.append(path)
        if not self.fs.isfile(path):
            self.findings.append(finding(
                UNVERIFIABLE, "unreadable", path, f"{path} is not a regular file.", f"check {path}", readers=readers,
            ))
            return info
        doc = self._parse_toml(path)
        if doc is None:
            for f in self.findings:
                if f["where"] == path and "readers" not in f:
                    f["readers"] = readers
            return info
        value = doc.get(KEY)
        info[KEY] = value
        info[VOLUME_KEY] = doc.get(VOLUME_KEY)
        who = f"{'; '.join(readers)} reads {path}" if readers else f"the toolkit configuration {path} is present"
        if value is False:
            pass
        elif value is None:
            self.findings.append(finding(
                EXPOSED, "toolkit-accepts-envvar", path,
                f"{who} and it does not set {KEY} (absent or commented out means the default, true): "
                "unprivileged pods can take GPUs through NVIDIA_VISIBLE_DEVICES.",
                _fix_toolkit(path), readers=readers,
            ))
        elif value is True:
            self.findings.append(finding(
                EXPOSED, "toolkit-accepts-envvar", path,
                f"{who} and it sets {KEY} = true: unprivileged pods can take GPUs through NVIDIA_VISIBLE_DEVICES.",
                _fix_toolkit(path), readers=readers,
            ))
        else:
            self.findings.append(finding(
                UNVERIFIABLE, "toolkit-key-type", path,
                f"{path} sets {KEY} to {value!r}, not a boolean; what the toolkit makes of it cannot be known.",
                f"set {KEY} = false (a TOML boolean) in {path}", readers=readers,
            ))
        volume = doc.get(VOLUME_KEY)
        if volume is True:
            self.findings.append(finding(
                EXPOSED, "toolkit-accepts-volume-mounts", path,
                f"{who} and it sets {VOLUME_KEY} = true: a pod can take GPUs by mounting "
                "/var/run/nvidia-container-devices/<device>.",
                f"set {VOLUME_KEY} = false in {path} (gpu-stack.yml does)", readers=readers,
            ))
        elif volume not in (None, False):
            self.findings.append(finding(
                UNVERIFIABLE, "toolkit-key-type", path,
                f"{path} sets {VOLUME_KEY} to {volume!r}, not a boolean.",
                f"set {VOLUME_KEY} = false in {path}", readers=readers,
            ))
        prefixes = (((doc.get("nvidia-container-runtime") or {}).get("modes") or {}).get("cdi") or {}).get(
            "annotation-prefixes", ["cdi.k8s.io/"],
        )
        info["annotation-prefixes"] = prefixes if isinstance(prefixes, list) else []
        info["settings"] = {}
        for a in ADVISORIES:
            if a["mitigation"]:
                value = doc
                for part in a["mitigation"]["key"].split("."):
                    value = value.get(part) if isinstance(value, dict) else None
                info["settings"][a["mitigation"]["key"]] = value
        return info

    def _cdi_notes(self) -> None:
        specs = []
        for d in CDI_DIRS:
            if not self.fs.isdir(d):
                continue
            for p in self.fs.listdir(d):
                if not p.endswith((".yaml", ".yml", ".json")):
                    continue
                try:
                    text = self.fs.read_text(p, limit=4 << 20)
                except (OSError, UnicodeDecodeError):
                    continue
                if re.search(r"""^\s*"?kind"?\s*:\s*"?nvidia\.com/gpu"?""", text, re.M):
                    names = re.findall(r"""^\s*-?\s*"?name"?\s*:\s*"?([^"\s,]+)"?""", text, re.M)
                    specs.append((p, names))
        if not specs:
            self.notes.append(
                "no CDI specification of kind nvidia.com/gpu in /etc/cdi or /var/run/cdi: bcd then hands GPUs "
                "through NVIDIA_VISIBLE_DEVICES, which is safe only with the toolkit key false "
                "(the bcd DaemonSet specification, section GPU isolation: CDI specs generated with "
                "--device-name-strategy=uuid)"
            )
            return
        for p, names in specs:
            devices = [n for n in names if n != "all"]
            if devices and not any(UUID_NAME_RE.match(n) for n in devices):
                self.notes.append(
                    f"{p} names GPUs by index, not UUID: regenerate it with nvidia-ctk cdi generate "
                    "--device-name-strategy=uuid (gpu-stack.yml in packages mode)"
                )

    # -- all together ---------------------------------------------------------------------------

    def _version_text(self, given: str | None, given_source: str, name: str, what: str) -> tuple[str | None, str]:
        """``(text, source)``: the ``--version`` output asked on the node (``given``), else the
        file ``name`` at the root's top where a collected root keeps it (read and recorded)."""
        text, source = given, given_source
        if text is None and self.fs.isfile("/" + name):
            source = "/" + name
            try:
                text = self.fs.read_text(source, limit=4096)
            except (OSError, UnicodeDecodeError) as exc:
                self.notes.append(f"{source} cannot be read ({exc}): {what} is unknown")
                text = None
            if source not in self.files_read:
                self.files_read.append(source)
        return text, source

    def _families(self) -> list[str]:
        """The containerd loader families to judge: the node's own when its version is known
        (``containerd --version`` output given, or in the root's VERSION_FILE), else every one."""
        text, source = self._version_text(self._containerd_version, "containerd --version", VERSION_FILE,
                                          "containerd's version")
        version = parse_version(text) if text else None
        if text and not version:
            self.notes.append(f"{source} does not hold `containerd --version` output ({text.strip()[:80]!r}): "
                              "containerd's version is unknown")
        family = family_of(version)
        self.containerd_version = ".".join(map(str, version)) if version else None
        self.containerd_version_source = source if version else None
        return [family] if family else list(FAMILIES)

    def _effective(self) -> None:
        """Load the configuration in effect and judge only that (see bcd_runtime_config)."""
        families = self._families()
        eff = load_runtime_config(self.fs, self._read_runtime, self._extra_files, self._extra_dirs, families)
        self.effective = eff
        for where, message, fix in eff.problems:
            self.findings.append(finding(UNVERIFIABLE, "runtime-config", where, message, fix))
        serving = [c for c in eff.configs if c["serves_cri"]]
        for c in serving:
            defaults = {}
            if c.get("default_runtime"):
                name, where = c["default_runtime"]
                defaults[name] = where
            self._scan_runtime_doc(c["root"], c["doc"], c["origin"], defaults, c.get("keys"))
            for name, binary in sorted((c.get("extra_runtimes") or {}).items()):
                self._runtime(c["root"], name, f"{c['runtime']}'s built-in base template (finds {binary})", binary,
                              defaults.get(name))
        if any(c.get("family") for c in eff.configs):
            if len(families) > 1:
                self.notes.append(
                    f"containerd's version is unknown (no /{VERSION_FILE} with `containerd --version` output in the "
                    "node root): its configuration is judged as containerd "
                    + ", ".join(LABEL[f].split(" ", 1)[1] for f in families)
                    + " read it, and the worst verdict counts"
                )
            else:
                self.notes.append(f"containerd {self.containerd_version} (from {self.containerd_version_source}): its "
                                  f"configuration is judged as {LABEL[families[0]]} reads it")
        self.findings.extend(not_serving(eff.configs, UNVERIFIABLE))
        for c in eff.configs:
            handlers = {}
            for name, h in sorted(c["handlers"].items()):
                binary = self._resolve_binary(h["binary"]) if h.get("binary") else None
                if binary and TEMPLATE_SENTINEL in binary:
                    nvidia = None  # computed by a template at run time: unknown
                else:
                    nvidia = bool(binary) and self._derived_configs(binary)[2]
                handlers[name] = {"binary": binary, "nvidia": nvidia}
            for name, binary in (c.get("extra_runtimes") or {}).items():
                handlers.setdefault(name, {"binary": binary, "nvidia": True})
            entry = {
                "runtime": c["runtime"], "rule": c["rule"], "root": c["root"], "files": c["files"],
                "serves_cri": c["serves_cri"],
                "default_runtime": c["default_runtime"][0] if c.get("default_runtime") else None,
                "handlers": handlers,
            }
            if c.get("state"):
                entry.update({"family": c.get("family"), "state": c["state"], "reason": c["reason"], "where": c["where"]})
            if c.get("dropped_handlers"):
                entry["dropped_handlers"] = dict(c["dropped_handlers"])
            self.runtime_configs.append(entry)
        self.mount_findings = self._mounted(eff)
        self.ignored = list(eff.ignored)
        self.notes.extend(eff.notes)
        self.notes.extend(f"{i['file']} is not in effect: {i['why']}" for i in eff.ignored)

    def _mounted(self, eff) -> list[dict]:
        """Files containerd loads that bcd_container_runtime does not mount into bcd's pod, where it
        matters: a --config of containerd.service other than the default, and k3s/RKE2's drop-ins
        (the preset mounts config-v3.toml.d; a version 2 k3s imports config.toml.d). A readiness
        finding naming the files to list."""
        mounted_files, mounted_dirs = self._extra_files, self._extra_dirs
        if not (mounted_files or mounted_dirs):
            return []

        def covered(path: str) -> bool:
            return path in mounted_files or any(path.startswith(d.rstrip("/") + "/") for d in mounted_dirs)

        out = []
        groups: dict[str, set] = {}
        root = getattr(eff, "containerd_root", None)
        for c in eff.configs:
            if not c.get("family"):
                continue
            if c["runtime"] == "containerd" and root and root != RUNTIME_FILES[0]:
                groups.setdefault("containerd", set()).update(c["files"])
            elif c["runtime"] in ("k3s", "rke2") and not c["root"].endswith(".tmpl"):
                groups.setdefault(c["runtime"], set()).update(c["files"])
        for runtime, loaded in sorted(groups.items()):
            missing = sorted(f for f in loaded if not covered(f))
            if not missing:
                continue
            start = root if runtime == "containerd" else sorted(loaded)[0]
            files = sorted({f for f in loaded if f == start or runtime == "containerd"})
            dirs = sorted({f.rsplit("/", 1)[0] for f in loaded if f not in files})
            why = (f"containerd.service starts containerd with --config {root}" if runtime == "containerd"
                   else f"{runtime}'s containerd loads {', '.join(sorted(loaded))}")
            out.append(finding(
                NOT_READY, "runtime-config-not-mounted", missing[0],
                f"{why}, but bcd_container_runtime mounts {', '.join(mounted_files + mounted_dirs)} into bcd's pod, "
                f"not {', '.join(missing)}: bcd's own check on the node would judge files containerd does not read.",
                "set bcd_container_runtime: {files: [" + ", ".join(files) + "], dirs: [" + ", ".join(dirs) + "]} "
                "(the files containerd loads, as this check found them)",
            ))
        return out

    def _cdi_specs(self) -> list[dict]:
        """Each CDI specification of kind nvidia.com/gpu: path, device names, whether all are UUIDs."""
        specs = []
        for d in CDI_DIRS:
            if not self.fs.isdir(d):
                continue
            try:
                paths = self.fs.listdir(d)
            except OSError as exc:
                specs.append({"path": d, "error": f"cannot be listed: {exc.strerror or exc}"})
                continue
            for p in paths:
                if not p.endswith((".yaml", ".yml", ".json")):
                    continue
                try:
                    text = self.fs.read_text(p, limit=4 << 20)
                except (OSError, UnicodeDecodeError) as exc:
                    specs.append({"path": p, "error": f"cannot be read: {exc}"})
                    continue
                if not re.search(r"""^\s*"?kind"?\s*:\s*"?nvidia\.com/gpu"?""", text, re.M):
                    continue
                names = [n for n in re.findall(r"""^\s*-?\s*"?name"?\s*:\s*['"]?([^'"\s,]+)['"]?""", text, re.M)
                         if n != "all"]
                specs.append({"path": p, "devices": names,
                              "by_uuid": bool(names) and all(UUID_NAME_RE.match(n) for n in names)})
        return specs

    def _toolkit_release(self, configs: list[dict]) -> None:
        """Judge the toolkit's release against its known container escapes (bcd_toolkit_advisories),
        when a runtime or hook runs the toolkit: the ``--version`` output given (on the node), else
        the root's TOOLKIT_VERSION_FILE; a release older than a fix is exposed, unless the fix's
        mitigation is set in every toolkit configuration those runtimes read."""
        if not self.runtimes and not self.hooks:
            return
        given = self._toolkit_version
        if callable(given):
            given = given([x["binary"] for x in self.runtimes + self.hooks if x.get("binary")])
        text, source = self._version_text(given, "the toolkit binaries' --version",
                                          TOOLKIT_VERSION_FILE, "the toolkit's release")
        toolkit = parse_release(text) if text else None
        cli = parse_release(text, cli=True) if text else None
        if not toolkit:
            self.notes.append(
                ("the NVIDIA Container Toolkit's release is unknown" if not text else
                 f"{source} does not name a toolkit release ({text.strip()[:80]!r})")
                + (", so only libnvidia-container's known container escapes were checked" if cli else
                   ", so its known container escapes were not checked")
                + f" (in a collected root, put the output of `nvidia-container-runtime --version; "
                  f"nvidia-container-cli --version` in /{TOOLKIT_VERSION_FILE})"
            )
            if not cli:
                return
        self.toolkit_version = release_text(toolkit) if toolkit else None
        self.cli_version = release_text(cli) if cli else None
        used = [c for c in configs if c["readers"]] or [c for c in configs if c["exists"]]
        settings: dict[str, list] = {}
        for c in used:
            for key, value in (c.get("settings") or {}).items():
                settings.setdefault(key, []).append(value)
        found = exposures(toolkit, cli, settings)
        if not found:
            self.notes.append(
                f"toolkit {self.toolkit_version or 'unknown'}, libnvidia-container {self.cli_version or 'the same'} "
                f"(from {source}): none of the {len(ADVISORIES)} known container escapes of bcd_toolkit_advisories")
        for e in found:
            text, fix = cve_message(e, source)
            if e["mitigated"] and e["mitigation"]["clears"]:
                self.notes.append(f"{e['cve']} (fixed in toolkit {e['fixed']}) is mitigated on toolkit {e['version']}: "
                                  f"{e['mitigation']['key']} = {str(e['mitigation']['value']).lower()} in "
                                  + ", ".join(c["path"] for c in used) + f"; {fix.split(';', maxsplit=1)[0]}")
                continue
            self.findings.append(_cve_finding(e, source, text, fix))

    def run(self) -> dict:
        self._effective()
        # CRI-O starts on its built-in defaults when no file configures it
        if self._parsed_runtime == 0 and not any(c.get("rule") == RULE_CRIO for c in self.effective.configs):
            self.findings.append(finding(
                UNVERIFIABLE, "no-runtime-config", "/",
                "no container runtime configuration is readable (looked for "
                + ", ".join(self.runtime_files + [d + "/*" for d in self.runtime_dirs])
                + "): whether a runtime runs the NVIDIA toolkit cannot be ruled out.",
                "run the check where the node's runtime configuration is readable (as root, on the node or on "
                "its collected files), or name the runtime's files in bcd_container_runtime",
            ))
        for d in self.hook_dirs:
            if not self.fs.isdir(d):
                continue
            try:
                files = self.fs.listdir(d)
            except OSError:
                continue
            for path in files:
                if path.endswith(".json"):
                    self._hook_file(path)
        configs = []
        paths = list(self.toolkit_readers) + [p for p in self.toolkit_known if p not in self.toolkit_readers]
        for path in paths:
            configs.append(self._toolkit_config(path))
        by_path = {c["path"]: c for c in configs}
        for file, name, key, pattern in self._annotation_runtimes:
            # containerd merges its files: the runtime is the same one whichever file names it.
            readers = [r for r in self.runtimes if r["name"] == name]
            if not readers:
                continue
            prefixes = set()
            for runtime in readers:
                for c in runtime["toolkit_configs"]:
                    prefixes.update(by_path.get(c, {}).get("annotation-prefixes") or ["cdi.k8s.io/"])
            if any(fnmatch.fnmatchcase(p + "x", pattern) for p in prefixes):
                self.findings.append(finding(
                    EXPOSED, "cdi-annotations", file,
                    f"runtime {name!r} in {file} passes pod annotations matching {pattern!r} ({key}) into the "
                    "container, and the NVIDIA runtime injects any CDI device a cdi.k8s.io/ annotation names, "
                    f"whatever {KEY} says.",
                    f"remove {pattern!r} from {key} in {file}",
                ))
        self._cdi_notes()
        self._toolkit_release(configs)
        return {
            "root": self.fs.root,
            "verdict": verdict_of(self.findings),
            "findings": self.findings,
            "runtime_configs": self.runtime_configs,
            "ignored_files": self.ignored,
            "cdi_specs": self._cdi_specs(),
            "plugins_registry": self.fs.isdir(KUBELET_PLUGINS_REGISTRY),
            "containerd_version": self.containerd_version,
            "toolkit_version": self.toolkit_version,
            "containerd_config": getattr(self.effective, "containerd_root", None),
            "runtime_mount": self.mount_findings,
            "files_read": self.files_read,
            "runtimes": self.runtimes,
            "hooks": self.hooks,
            "toolkit_configs": [
                {k: v for k, v in c.items() if k not in ("annotation-prefixes", "settings")} for c in configs
                if c["exists"] or c["readers"]
            ],
            "notes": self.notes,
        }


def containerd_binary(root: str) -> str | None:
    """The containerd binary of the node at ``root`` (as on the node): the one containerd.service
    starts, else the first ``containerd`` on the usual $PATH; None when there is none."""
    fs = _Root(root)
    unit = containerd_unit(fs)
    if unit and unit.get("binary") and unit["binary"].startswith("/") and fs.isfile(unit["binary"]):
        return unit["binary"]
    return next((f"{d}/containerd" for d in PATH_DIRS if fs.isfile(f"{d}/containerd")), None)


def verify_node_root(
    root: str, runtime_paths: dict | None = None, toolkit_paths: dict | None = None,
    handler: str | None = "nvidia", gpu_api: str = "device-plugin", containerd_version: str | None = None,
    toolkit_version=None,
) -> dict:
    """Check one node's root directory for GPU isolation.

    ``root``: the node's root directory (``/`` on the node). ``runtime_paths`` and
    ``toolkit_paths``: ``{"files": [...], "dirs": [...]}`` as ``bcd_container_runtime`` and
    ``bcd_nvidia_toolkit`` give them (node paths); they add to the locations always read
    (:data:`RUNTIME_FILES`, :data:`RUNTIME_DIRS`, :data:`KNOWN_TOOLKIT_CONFIGS`).

    Returns ``{"root", "verdict", "findings", "files_read", "runtimes", "hooks",
    "toolkit_configs", "notes"}``: ``runtimes`` lists each runtime that runs the NVIDIA toolkit
    (``name``, ``file``, ``key``, ``binary``, ``toolkit_configs``), ``toolkit_configs`` each
    toolkit configuration read or required (``path``, ``exists``, ``readers``, ``known`` and the
    two keys' values), ``notes`` advice that does not change the verdict (the CDI spec).
    The configuration in effect: ``runtime_configs`` (each candidate configuration the runtimes
    load: ``runtime``, ``rule``, ``root``, ``files`` in load order, ``serves_cri``,
    ``default_runtime``, ``handlers`` name -> ``{binary, nvidia}``), ``ignored_files``
    (``{file, why}`` for each file that exists but is not in effect; also in ``notes``).
    Readiness (``handler``: the RuntimeClass handler bcd's pod runs with, None for none;
    ``gpu_api``: ``bcd_gpu_api``): ``ready`` and ``readiness`` (see :func:`readiness`), from
    ``cdi_specs`` and ``plugins_registry`` too.
    ``toolkit_version``: the toolkit binaries' ``--version`` output on the node, or a function
    that asks them given their paths (called only when a runtime or hook runs the toolkit; else
    the root's ``nvidia-container-toolkit-version`` file): a release older than a container-escape fix
    (bcd_toolkit_advisories) is a ``toolkit-cve`` finding naming the CVE (``cve``, ``version``,
    ``fixed``, ``operator``), unless its mitigation is set; ``toolkit_version`` in the result.
    Raises :class:`NodeRootError` when ``root`` is not a directory.
    """
    result = NodeVerifier(root, runtime_paths, toolkit_paths, containerd_version, toolkit_version).run()
    result["readiness"] = readiness(result, handler, gpu_api)
    result["ready"] = ready_of(result["readiness"])
    return result


# --- readiness: can bcd's pod run and hand out GPUs here? ------------------------------------

READY = "ready"
NOT_READY = "not-ready"
# Where a node's verdict comes from (the report's "source"): the running runtime's own answer
# (it disagreed with the files, and wins), the node's files, both (they agree), or, for a node
# whose files were not read, the cluster's objects only.
SOURCE_RUNTIME = "runtime"
SOURCE_FILES = "files"
SOURCE_BOTH = "both"
SOURCE_CLUSTER = "cluster"
UNKNOWN = "unknown"
READINESS = (READY, NOT_READY, UNKNOWN)


def ready_of(findings: list[dict]) -> str:
    """``not-ready`` if any readiness finding is, else ``unknown`` if any is, else ``ready``."""
    statuses = {f["status"] for f in findings}
    if NOT_READY in statuses:
        return NOT_READY
    if UNKNOWN in statuses:
        return UNKNOWN
    return READY


def readiness(node: dict, handler: str | None, gpu_api: str = "device-plugin") -> list[dict]:
    """Readiness findings for one node result of :func:`verify_node_root` (the bcd DaemonSet
    specification, section GPU isolation: CDI specs generated with ``--device-name-strategy=uuid``; Host mounts for DRA).

    ``handler``: the runtime handler bcd's RuntimeClass names (None: bcd's pod runs without one).
    It must be defined in every runtime configuration in effect that serves CRI (every candidate,
    when the loading rules leave more than one), and run the NVIDIA container runtime. A CDI
    specification of kind ``nvidia.com/gpu`` must name every device by UUID (``GPU-<uuid>``).
    With ``gpu_api`` ``dra``, the kubelet's plugin registration directory must be present.
    """
    out = not_serving(node.get("runtime_configs") or [], NOT_READY) + list(node.get("runtime_mount") or [])
    configs = [c for c in node.get("runtime_configs") or [] if c.get("serves_cri")]
    if handler:
        if not configs:
            out.append(finding(
                UNKNOWN, "runtime-handler", "/",
                f"no runtime configuration in effect serves CRI, so whether the handler {handler!r} bcd's RuntimeClass "
                "names is defined cannot be known.",
                "make the kubelet's runtime configuration readable to the check (bcd_container_runtime)",
            ))
        # One finding per root file and problem, naming every candidate rule it holds under.
        problems: dict[tuple, dict] = {}
        for c in configs:
            h = (c.get("handlers") or {}).get(handler)
            kind = "missing" if h is None else "unknown" if h.get("nvidia") is None else "ok" if h.get("nvidia") else "other"
            if kind == "ok":
                continue
            key = (c["root"], kind, (h or {}).get("binary"))
            entry = problems.setdefault(key, {"rules": [], "defined": set()})
            entry["rules"].append(c["rule"])
            entry["defined"].update(c.get("handlers") or {})
        for (root, kind, binary), entry in problems.items():
            label = f"{root} ({' and '.join(entry['rules'])})"
            defined = ", ".join(sorted(entry["defined"])) or "none"
            if kind == "missing":
                out.append(finding(
                    NOT_READY, "runtime-handler", root,
                    f"the runtime handler {handler!r} that bcd's RuntimeClass names is not defined in the configuration "
                    f"in effect of {label} (handlers defined: {defined}), so bcd's pod cannot start here.",
                    f"define a runtime {handler!r} that runs the NVIDIA container runtime (nvidia-ctk runtime configure "
                    f"--runtime=<containerd|crio> --set-as-default=false; the GPU operator's toolkit does it), or set "
                    "bcd_nvidia_runtime_class to a RuntimeClass whose handler is defined",
                ))
            elif kind == "unknown":
                out.append(finding(
                    UNKNOWN, "runtime-handler", root,
                    f"the runtime handler {handler!r} in {label} runs a binary its template computes at run time, so "
                    "whether it is the NVIDIA runtime cannot be known.",
                    f"write the binary path of runtime {handler!r} literally in {root}",
                ))
            else:
                out.append(finding(
                    NOT_READY, "runtime-handler-not-nvidia", root,
                    f"the runtime handler {handler!r} in {label} runs {binary or 'runc (no BinaryName)'}, not "
                    "the NVIDIA container runtime, so bcd's pod gets no GPU driver libraries.",
                    f"point runtime {handler!r} at nvidia-container-runtime (nvidia-ctk runtime configure), or set "
                    "bcd_nvidia_runtime_class to a RuntimeClass that runs it",
                ))
    running = (node.get("live") or {}).get("running_handlers")
    if handler and running is not None:
        # the runtime's own answer (bcd_runtime_info): what the daemon runs now, whatever its files say
        h = running.get(handler)
        if h is None:
            by = sorted({v["by"] for v in running.values()})
            out.append(finding(
                NOT_READY, "runtime-handler-not-running", "/",
                f"the running runtime ({'; '.join(by)}) has no handler {handler!r} (it runs "
                f"{', '.join(sorted(running))}), so bcd's pod cannot start here until it is restarted with one.",
                f"define runtime {handler!r} in the files it loads and restart it (systemctl restart containerd), or set "
                "bcd_nvidia_runtime_class to a RuntimeClass whose handler it runs",
            ))
        elif not (h.get("binary") and is_nvidia_runtime(h["binary"])):
            out.append(finding(
                NOT_READY, "runtime-handler-not-nvidia", "/",
                f"the running runtime ({h['by']}) runs handler {handler!r} with {h.get('binary') or 'runc (no BinaryName)'}, "
                "not the NVIDIA container runtime, so bcd's pod gets no GPU driver libraries.",
                f"point runtime {handler!r} at nvidia-container-runtime and restart the runtime",
            ))
    specs = node.get("cdi_specs")
    if specs is not None:
        if not specs:
            out.append(finding(
                NOT_READY, "cdi-spec", CDI_DIRS[0],
                "no CDI specification of kind nvidia.com/gpu in /etc/cdi or /var/run/cdi: bcd hands GPUs out by CDI "
                "device name (GPU-<uuid>), so it cannot hand out any GPU here.",
                "generate one: nvidia-ctk cdi generate --device-name-strategy=uuid --output=/etc/cdi/nvidia.yaml "
                "(gpu-stack.yml in packages mode; the GPU operator with spec.cdi.enabled=true)",
            ))
        for spec in specs:
            if spec.get("error"):
                out.append(finding(
                    UNKNOWN, "cdi-spec", spec["path"], f"the CDI specification {spec['path']} {spec['error']}.",
                    f"make {spec['path']} readable to the check",
                ))
            elif not spec.get("by_uuid"):
                shown = ", ".join(spec.get("devices") or []) or "no device"
                out.append(finding(
                    NOT_READY, "cdi-spec-names", spec["path"],
                    f"the CDI specification {spec['path']} names its devices {shown}, not GPU-<uuid>, so bcd cannot "
                    "request a GPU by UUID.",
                    "regenerate it: nvidia-ctk cdi generate --device-name-strategy=uuid (gpu-stack.yml in packages mode)",
                ))
    if gpu_api == "dra" and node.get("plugins_registry") is False:
        out.append(finding(
            NOT_READY, "dra-registration", KUBELET_PLUGINS_REGISTRY,
            f"bcd_gpu_api is dra but {KUBELET_PLUGINS_REGISTRY} is absent: the kubelet has no plugin registration "
            "directory there, so bcd's DRA driver cannot register.",
            "use a kubelet with DRA (Kubernetes 1.32+, its root dir /var/lib/kubelet), or set bcd_gpu_api: device-plugin",
        ))
    return out


# --- cluster level -------------------------------------------------------------------------

def _quantity_positive(q) -> bool:
    try:
        return quantity_value(str(q)) > 0
    except (QuantityError, ValueError):
        return True  # an unreadable quantity is not proof of zero


# Extended resources through which another device plugin hands out GPUs, and whose plugin it is
# (bcd_foreign_gpu_resources adds to these). "*" matches any characters.
FOREIGN_GPU_RESOURCES = {
    "nvidia.com/*": "NVIDIA's device plugin (the GPU operator's), or HAMi's (nvidia.com/gpumem, nvidia.com/gpucores)",
    "volcano.sh/vgpu-*": "Volcano's vGPU device plugin",
    "aliyun.com/gpu-*": "Alibaba Cloud's GPU sharing device plugin",
    "tencent.com/vcuda-*": "Tencent's GPU manager",
}


def foreign_resource(resource: str, extra: list[str] | tuple = ()) -> str | None:
    """Whose GPU resource ``resource`` is (a description), or None when it is no known GPU resource."""
    for pattern, who in FOREIGN_GPU_RESOURCES.items():
        if fnmatch.fnmatchcase(resource, pattern):
            return who
    for pattern in extra or ():
        if fnmatch.fnmatchcase(resource, pattern):
            return f"a device plugin listed in bcd_foreign_gpu_resources ({pattern})"
    return None


def node_allocatable_findings(node: dict, extra: list[str] | tuple = ()) -> list[dict]:
    """Another device plugin: a GPU resource of the Node's allocatable above zero (the built-in
    list :data:`FOREIGN_GPU_RESOURCES` and the patterns of bcd_foreign_gpu_resources)."""
    name = (node.get("metadata") or {}).get("name", "?")
    alloc = (node.get("status") or {}).get("allocatable") or {}
    out = []
    for resource, q in sorted(alloc.items()):
        who = foreign_resource(resource, extra)
        if who and _quantity_positive(q):
            out.append(finding(
                EXPOSED, "device-plugin", f"Node/{name}",
                f"the kubelet on {name} can allocate {resource}={q}: another device plugin ({who}) hands out GPUs "
                "there.",
                "stop that device plugin on bcd's nodes (GPU operator: spec.devicePlugin.enabled=false, which "
                "gpu-stack.yml sets; otherwise remove its DaemonSet or keep it off these nodes with a node selector)",
                resource=resource,
            ))
    return out


def active_cluster_policy(policies: list[dict]) -> tuple[dict | None, list[dict]]:
    """The ClusterPolicy the GPU operator acts on, and the ones it ignores. The operator reconciles
    the oldest and sets ``status.state: ignored`` on the others; without that status the oldest
    (then the first by name) is the active one."""
    def key(p):
        meta = p.get("metadata") or {}
        return (meta.get("creationTimestamp") or "", meta.get("name") or "")

    ordered = sorted(policies or [], key=key)
    live = [p for p in ordered if ((p.get("status") or {}).get("state")) != "ignored"]
    active = (live or ordered or [None])[0]
    return active, [p for p in ordered if p is not active]


def is_gpu_dra_driver(driver: str) -> bool:
    """A DRA driver whose name marks it as a GPU driver (``gpu.nvidia.com``), bcd's own excepted."""
    return driver != BCD_DRA_DRIVER and "gpu" in driver.lower()


def resource_slice_findings(slices: list[dict], api_version: str) -> list[tuple[str | None, dict]]:
    """Another GPU DRA driver: ``(node name or None for every node, finding)`` per offending slice."""
    out = []
    for s in slices:
        spec = s.get("spec") or {}
        driver = spec.get("driver") or ""
        devices = spec.get("devices") or []
        if not is_gpu_dra_driver(driver) or not devices:
            continue
        name = (s.get("metadata") or {}).get("name", "?")
        node = spec.get("nodeName")
        where = f"ResourceSlice/{name}"
        target = f"node {node}" if node else "every node its selector matches (no spec.nodeName)"
        out.append((node or None, finding(
            EXPOSED, "dra-driver", where,
            f"the DRA driver {driver} offers {len(devices)} device(s) on {target} ({api_version}).",
            f"disable or uninstall the {driver} DRA driver on bcd's nodes (bcd's own driver is {BCD_DRA_DRIVER})",
        )))
    return out


def _env_value(env: list, name: str):
    value = None
    for item in env or []:
        if isinstance(item, dict) and item.get("name") == name:
            value = item.get("value")
    return value


def _operator_toolkit_cves(where: str, toolkit: dict) -> list[dict]:
    """The container escapes of the toolkit release the operator deploys: its image tag
    (``spec.toolkit.version``, such as ``v1.17.8-ubuntu20.04``, else the tag in ``spec.toolkit.image``).
    A tag that names no release (a digest, ``latest``) is not judged here: the nodes' files are."""
    tag = str(toolkit.get("version") or "")
    image = str(toolkit.get("image") or "")
    if not tag and ":" in image.rsplit("/", 1)[-1] and "@" not in image:
        tag = image.rsplit(":", 1)[1]
    release = parse_release(tag) if tag else None
    if not release:
        return []
    out = []
    env = toolkit.get("env") or []
    settings = {}
    # the operator's toolkit container turns on each feature NVIDIA_CONTAINER_TOOLKIT_OPT_IN_FEATURES
    # lists (comma-separated) in the config.toml it writes (nvidia-ctk-installer's opt-in-features)
    opted = {f.strip() for f in str(_env_value(env, "NVIDIA_CONTAINER_TOOLKIT_OPT_IN_FEATURES") or "").split(",")}
    for a in ADVISORIES:
        m = a["mitigation"]
        if m and m["key"].startswith("features."):
            settings[m["key"]] = [True if m["key"].split(".", 1)[1] in opted else None]
    for e in exposures(release, None, settings):
        if e["mitigated"] and e["mitigation"]["clears"]:
            continue
        text, fix = cve_message(e, f"{where} spec.toolkit.version {tag!r}")
        out.append(_cve_finding(e, where, text, fix.replace(
            "upgrade the NVIDIA Container Toolkit to", "set spec.toolkit.version to the toolkit image of")))
    return out


def cluster_policy_findings(policy: dict, operator_mode: bool) -> list[dict]:
    """What a GPU operator ClusterPolicy lets out (Configure; the bcd DaemonSet specification, section GPU isolation).

    Device plugin on (``spec.devicePlugin.enabled`` absent means on, the operator's default):
    exposed. NRI plugin on: exposed (it injects any CDI device a pod's annotation names). The
    operator's toolkit on without ``ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED=false``:
    exposed (it writes the default, true, into the toolkit's config.toml). In gpu-operator mode,
    CDI off: unverifiable (devices would not arrive by CDI only; the bcd DaemonSet specification,
    section GPU isolation: CDI specs generated with ``--device-name-strategy=uuid``).
    The operator's toolkit image older than a container-escape fix (bcd_toolkit_advisories):
    exposed, naming the CVE (``toolkit-cve``).
    """
    name = (policy.get("metadata") or {}).get("name", "?")
    where = f"ClusterPolicy/{name}"
    spec = policy.get("spec") or {}
    out = []
    dp = spec.get("devicePlugin") or {}
    if dp.get("enabled", True) is not False:
        out.append(finding(
            EXPOSED, "operator-device-plugin", where,
            f"{where} runs the GPU operator's device plugin (spec.devicePlugin.enabled is "
            f"{'absent, which means true' if 'enabled' not in dp else json.dumps(dp.get('enabled'))}): it advertises "
            "every GPU as nvidia.com/gpu.",
            "set spec.devicePlugin.enabled=false (ansible-playbook gpu-stack.yml; Helm: devicePlugin.enabled=false)",
        ))
    cdi = spec.get("cdi") or {}
    if cdi.get("nriPluginEnabled") is True:
        out.append(finding(
            EXPOSED, "operator-nri-plugin", where,
            f"{where} enables the operator's NRI plugin (spec.cdi.nriPluginEnabled), which injects any CDI device "
            "a pod names in an annotation, whatever the toolkit says.",
            "set spec.cdi.nriPluginEnabled=false (ansible-playbook gpu-stack.yml; Helm: cdi.nriPluginEnabled=false)",
        ))
    toolkit = spec.get("toolkit") or {}
    if toolkit.get("enabled", True) is not False:
        value = _env_value(toolkit.get("env") or [], OPERATOR_ENV)
        if value is None or str(value) not in GO_FALSE:
            shown = "not set (the default, true)" if value is None else f"{value!r}"
            out.append(finding(
                EXPOSED, "operator-toolkit-env", where,
                f"{where} runs the operator's toolkit with {OPERATOR_ENV} {shown}: it writes {KEY} = true into "
                "the toolkit's config.toml, so unprivileged pods can take GPUs through NVIDIA_VISIBLE_DEVICES.",
                f"add {OPERATOR_ENV}=\"false\" to spec.toolkit.env, keeping the other entries (ansible-playbook "
                "gpu-stack.yml)",
            ))
        volume = _env_value(toolkit.get("env") or [], OPERATOR_VOLUME_ENV)
        if volume is not None and str(volume) not in GO_FALSE:
            # unset is the toolkit's default (false); anything but a Go false may turn it on
            out.append(finding(
                EXPOSED, "operator-toolkit-volume-mounts", where,
                f"{where} runs the operator's toolkit with {OPERATOR_VOLUME_ENV} {volume!r}: it writes {VOLUME_KEY} = "
                "true into the toolkit's config.toml, so a pod can take GPUs by mounting "
                "/var/run/nvidia-container-devices/<device>.",
                f"set {OPERATOR_VOLUME_ENV}=\"false\" in spec.toolkit.env, or remove it (ansible-playbook gpu-stack.yml "
                "sets it false)",
            ))
        out.extend(_operator_toolkit_cves(where, toolkit))
    if operator_mode and cdi.get("enabled") is not True:
        out.append(finding(
            UNVERIFIABLE, "operator-cdi", where,
            f"{where} does not enable CDI (spec.cdi.enabled): the operator generates no CDI specification, so "
            "devices do not arrive by CDI only and bcd must fall back to NVIDIA_VISIBLE_DEVICES.",
            "set spec.cdi.enabled=true (ansible-playbook gpu-stack.yml; Helm: cdi.enabled=true)",
        ))
    return out


def combine(
    *,
    nodes: list[dict],
    slices: list[dict] | None,
    slice_api: str | None,
    policies: list[dict] | None,
    mode: str,
    node_files: dict[str, dict],
    handler: str | None = "nvidia",
    gpu_api: str = "device-plugin",
    cluster_readiness: list[dict] | None = None,
    foreign_resources: list[str] | tuple = (),
) -> dict:
    """One verdict per selected Node, from cluster-level objects and node files.

    ``nodes``: the selected Node objects (dicts). ``slices``: ResourceSlices, or None when the
    API serves no ``resource.k8s.io`` (no evidence either way). ``policies``: ClusterPolicies, or
    None when the API has no ClusterPolicy kind. ``mode``: ``gpu-operator``, ``packages`` or
    ``custom`` (bcd_nvidia_toolkit). ``node_files``: node name -> ``{"source": text, "result":
    verify_node_root() result}`` or ``{"source": text, "error": text}`` for nodes whose files were
    read (over SSH, or from a collected folder).

    Rules: cluster findings apply to the nodes they concern (ClusterPolicy findings to every
    selected node; only the ClusterPolicy the operator acts on counts, see
    :func:`active_cluster_policy`, the others are named in a note). ``foreign_resources``: the
    patterns of bcd_foreign_gpu_resources. Without node files, a gpu-operator node takes the ClusterPolicy as its
    evidence (the report says its files were not read); a packages or custom node is
    ``unverifiable``.

    Readiness per node (``ready``, ``readiness``): :func:`readiness` of its node files with
    ``handler`` (the RuntimeClass's handler as the cluster has it) and ``gpu_api``, plus
    ``cluster_readiness`` (such as a RuntimeClass that does not exist); ``unknown`` when its node
    files were not read.
    """
    operator_mode = mode == "gpu-operator"
    policy_findings = []
    active, ignored = active_cluster_policy(policies or [])
    policy_notes = []
    if active is not None:
        policy_findings.extend(cluster_policy_findings(active, operator_mode))
    if ignored:
        policy_notes.append(
            f"the cluster has {len(ignored) + 1} ClusterPolicies; the GPU operator acts on the oldest, "
            f"ClusterPolicy/{(active.get('metadata') or {}).get('name')}, and ignores "
            + ", ".join(f"ClusterPolicy/{(p.get('metadata') or {}).get('name')}" for p in ignored)
            + ": isolation is judged by the one it acts on (gpu-stack.yml configures every one)"
        )
    per_slice = resource_slice_findings(slices or [], slice_api or "")
    names = [(n.get("metadata") or {}).get("name", "?") for n in nodes]
    toolkit_by_operator = active is not None and (
        ((active.get("spec") or {}).get("toolkit") or {}).get("enabled", True) is not False
    )
    out = []
    for node, name in zip(nodes, names, strict=True):
        findings = list(node_allocatable_findings(node, foreign_resources))
        findings.extend(f for target, f in per_slice if target in (None, name))
        findings.extend(policy_findings)
        files = node_files.get(name)
        notes = list(policy_notes)
        ready = list(cluster_readiness or [])
        if files is not None and "result" in files:
            node_level = files["result"]
            findings.extend(node_level["findings"])
            notes.extend(node_level.get("notes") or [])
            source = files.get("source", "node files")
            ready.extend(readiness(node_level, handler, gpu_api))
            judged_from = node_level.get("source") or SOURCE_FILES
        else:
            ready.append(finding(
                UNKNOWN, "node-files", name,
                f"the node files of {name} were not read, so whether bcd's pod can run there (runtime handler, CDI "
                "specification) is unknown.",
                "list the node in inventory group gpu_nodes (reached over SSH), or give its collected root in "
                "bcd_node_roots",
            ))
        if files is not None and "result" in files:
            pass
        elif files is not None:
            judged_from = SOURCE_CLUSTER
            source = files.get("source", "node files")
            findings.append(finding(
                UNVERIFIABLE, "node-files", name,
                f"the node files of {name} could not be read ({source}): {files.get('error')}",
                "make the node reachable (inventory group gpu_nodes) or fix bcd_node_roots",
            ))
        else:
            source = "not read"
            judged_from = SOURCE_CLUSTER
            if operator_mode:
                if not policies:
                    findings.append(finding(
                        UNVERIFIABLE, "no-evidence", name,
                        f"node files of {name} were not read and the cluster has no GPU operator ClusterPolicy to "
                        "stand in for them.",
                        "install the GPU operator, or set bcd_nvidia_toolkit: packages and list the node in "
                        "inventory group gpu_nodes (or bcd_node_roots)",
                    ))
                elif not toolkit_by_operator:
                    findings.append(finding(
                        UNVERIFIABLE, "no-evidence", name,
                        f"node files of {name} were not read and the ClusterPolicy does not manage the toolkit "
                        "(spec.toolkit.enabled=false), so it proves nothing about the toolkit's configuration.",
                        "set bcd_nvidia_toolkit: packages and list the node in inventory group gpu_nodes "
                        "(or bcd_node_roots)",
                    ))
                else:
                    notes.append(
                        "node files were NOT read: the ClusterPolicy (device plugin off, toolkit env false, CDI on, "
                        "NRI off) is the evidence for this node"
                    )
            else:
                findings.append(finding(
                    UNVERIFIABLE, "no-node-access", name,
                    f"node files of {name} were not read: with bcd_nvidia_toolkit {mode} only the node's own files "
                    "can show what its toolkit accepts.",
                    "list the node in inventory group gpu_nodes (reached over SSH), or give its collected root in "
                    "bcd_node_roots",
                ))
        out.append({
            "name": name,
            "verdict": verdict_of(findings),
            "ready": ready_of(ready),
            "findings": findings,
            "readiness": ready,
            "node_files": source,
            "source": judged_from,
            "notes": notes,
        })
    return {
        "nodes": out,
        "cluster_findings": policy_findings + [f for _target, f in per_slice],
    }


def apply_waivers(nodes: list[dict], waivers: list[dict] | None, today: str) -> None:
    """Move each ``toolkit-cve`` finding an operator's waiver covers (``bcd_toolkit_cve_waivers``:
    ``{node, cve, until, reason}``, ``until`` an ISO date, inclusive) to the node's ``waived`` list,
    with a note, and recompute its verdict; a finding whose waiver has expired stays, saying so.
    ``today``: the ISO date the waivers are judged on. Changes ``nodes`` in place."""
    for n in nodes:
        kept, waived = [], []
        for f in n.get("findings") or []:
            if f.get("check") != "toolkit-cve":
                kept.append(f)
                continue
            active, expired = waiver_for(waivers or [], n["name"], f.get("cve"), today)
            if active:
                waived.append({**f, "waiver": active})
                n.setdefault("notes", []).append(
                    f"{f['cve']} on {n['name']} is waived until {active['until']} ({active['reason']}): {f['message']}")
                continue
            if expired:
                f = {**f, "message": f"{f['message']} (its waiver expired after {expired['until']})"}
            kept.append(f)
        if any(f.get("check") == "toolkit-cve" for f in n.get("findings") or []):
            n["findings"] = kept
        if waived:
            n["waived"] = waived
            n["verdict"] = verdict_of(kept)


def summary(nodes: list[dict]) -> dict:
    counts = {v: 0 for v in VERDICTS}
    for n in nodes:
        counts[n["verdict"]] += 1
    return counts


def ready_summary(nodes: list[dict]) -> dict:
    """Node count per readiness (``ready``, ``not-ready``, ``unknown``)."""
    counts = {r: 0 for r in READINESS}
    for n in nodes:
        counts[n.get("ready") or UNKNOWN] += 1
    return counts


def table(nodes: list[dict]) -> list[str]:
    """A per-node table, one line per node and one indented line per finding."""
    if not nodes:
        return ["(no node selected)"]
    width = max(len("NODE"), *(len(n["name"]) for n in nodes))
    lines = [f"{'NODE':<{width}}  {'VERDICT':<12}  {'READY':<9}  {'SOURCE':<7}  NODE FILES"]
    for n in nodes:
        lines.append(f"{n['name']:<{width}}  {n['verdict']:<12}  {n.get('ready') or UNKNOWN:<9}  "
                     f"{n.get('source') or SOURCE_FILES:<7}  {n.get('node_files', '')}")
        for f in [*n["findings"], *(n.get("readiness") or [])]:
            lines.append(f"  - [{f['status']}] {f['where']}: {f['message']}")
            lines.append(f"      fix: {f['fix']}")
        for note in n.get("notes") or []:
            lines.append(f"  - [note] {note}")
        lines.extend(bcd_lines(n.get("bcd")))
    return lines


def bcd_lines(view: dict | None) -> list[str]:
    """bcd's own view of a node (nodes.list: state and conditions), for the per-node table."""
    if view is None:
        return []
    if view.get("error"):
        return [f"  - [bcd] the control plane's view could not be read: {view['error']}"]
    if not view.get("state"):
        return ["  - [bcd] the control plane does not know this node (it has not joined)"]
    lines = [f"  - [bcd] {view.get('id') or '?'}: {view['state']}"
             + ("" if view.get("conditions") else ", no conditions")]
    for c in view.get("conditions") or []:
        why = ": ".join(str(x) for x in (c.get("reason"), c.get("message")) if x)
        lines.append(f"      condition {c.get('type')}={c.get('status')}" + (f" ({why})" if why else ""))
    return lines
